"""What the user sees while a run goes: in a terminal, rich progress bars - the rows (done of
planned, what is being verified or timed now, elapsed, time left) and, while the compile-ahead
pool works, its units (done of planned, what is compiling now); when the output is a file or a
pipe, one plain line per finished row and per unit compiled ahead, each with the count, the
elapsed seconds and an estimate of the time left (so a log shows the run as it goes, not after
ten silent minutes). When no row has finished for ``STALL_S`` seconds, a line names what is in
flight and for how long (a hung kernel shows itself by name long before the runner's timeout)."""
from __future__ import annotations

import sys
import threading
import time

STALL_S = 60.0   # no row finished for this long: say what is in flight (again every STALL_S)


def _case_text(case: dict) -> str:
    dims = "x".join(str(v) for v in case["dims"].values())
    extra = " ".join(f"{k}={v}" for k, v in sorted(case.get("params", {}).items()))
    return f"{dims} {case['dtype']}" + (f" {extra}" if extra else "")


def _eta(t0: float, done: int, total: int) -> float | None:
    """Seconds left at the rate so far (None before the first or after the last)."""
    if not 0 < done < total:
        return None
    return (time.monotonic() - t0) / done * (total - done)


class RunProgress:
    """``with RunProgress(console, total_rows, title) as p: p.event(ev)`` for the runner's and the
    compile-ahead pool's events (``expect_units(n)`` once the pool's size is known)."""

    def __init__(self, console, total: int, title: str, plain: bool | None = None, quiet: bool = False,
                 then: str = ""):
        self.console = console
        self.total = max(int(total), 1)
        self.title = title
        self.then = then   # what runs after this phase (its time is not in this phase's estimate)
        self.quiet = quiet
        self.plain = (not console.is_terminal) if plain is None else plain
        self.done = 0
        self.units = self.units_done = 0
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.names: dict[str, str] = {}
        self.running: dict[str, tuple[str, str, float]] = {}   # task id -> (impl, doing, since)
        self.last_row = self.t0
        self._said = self.t0
        self._prog = None
        self._unit_bar = None
        self._stop = threading.Event()
        self._ticker = None

    def __enter__(self):
        if not self.quiet and not self.plain:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self._prog = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20),
                                  MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("left"),
                                  TimeRemainingColumn(), console=self.console, transient=True)
            self._prog.__enter__()
            self._bar = self._prog.add_task(self.title + (" (then timing)" if self.then else ""), total=self.total)
        elif not self.quiet:
            print(f"{self.title}: {self.total} row(s)" + (f"; then {self.then}" if self.then else ""),
                  file=sys.stderr, flush=True)
        if not self.quiet:
            self._ticker = threading.Thread(target=self._watch, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        if self._prog is not None:
            self._prog.__exit__(*exc)
        return False

    def _watch(self, every: float = 5.0) -> None:
        while not self._stop.wait(every):
            line = self.stalled()
            if line:
                if self._prog is not None:
                    self._prog.console.print(line, markup=False, highlight=False)
                else:
                    print(line, file=sys.stderr, flush=True)

    def stalled(self, now: float | None = None) -> str | None:
        """The line to print when no row has finished for ``STALL_S`` (and none was printed in the
        last ``STALL_S``): what each worker is on and since when; None otherwise."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if now - max(self.last_row, self._said) < STALL_S:
                return None
            self._said = now
            quiet_s = now - self.last_row
            doing = [f"{what} {impl} on {self.names.get(tid, tid)} ({now - since:.0f} s)"
                     for tid, (impl, what, since) in sorted(self.running.items(), key=lambda kv: kv[1][2])]
        where = "; ".join(doing) if doing else "no implementation running (compiling, starting workers or waiting for GPU memory)"
        return f"[{now - self.t0:5.0f}s] no row finished for {quiet_s:.0f} s; in flight: {where}"

    def add_tasks(self, tasks) -> None:
        for t in tasks:
            self.names[t["id"]] = f"{t['problem']} {_case_text(t['case'])}"

    def expect_units(self, n: int) -> None:
        """The compile-ahead pool has ``n`` units to build."""
        with self.lock:
            self.units = int(n)
            if n and self._prog is not None:
                self._unit_bar = self._prog.add_task("compile ahead", total=n)
            elif n and not self.quiet:
                print(f"compile ahead: {n} unit(s) on the CPU cores", file=sys.stderr, flush=True)

    def event(self, ev: dict) -> None:
        kind = ev.get("event")
        with self.lock:
            if kind == "step":
                doing = "timing" if ev.get("phase") == "time" else "verifying"
                self.running[ev.get("task")] = (ev.get("impl", ""), doing, time.monotonic())
            elif kind == "task_done":
                self.running.pop(ev.get("task"), None)
            if kind == "step" and self._prog is not None:
                what = f"{self.title}: {doing} {self.names.get(ev.get('task'), '')} {ev.get('impl', '')}"
                self._prog.update(self._bar, description=what[:90])
            elif kind == "compiling" and self._unit_bar is not None:
                what = f"compiling {ev['impl']} {ev['problem']} {_case_text(ev['case'])}"
                self._prog.update(self._unit_bar, description=what[:90])
            elif kind == "compiled":
                self._compiled(ev)
            elif kind == "row":
                self._row(ev["row"])

    def _compiled(self, ev: dict) -> None:
        self.units_done += 1
        if self._unit_bar is not None:
            self._prog.update(self._unit_bar, completed=min(self.units_done, self.units))
            if self.units_done >= self.units:
                self._prog.update(self._unit_bar, description="compile ahead: done")
        elif not self.quiet and ev.get("mode") == "compile":   # (a row mode unit's row is printed)
            res = ev.get("result") or {}
            took = f"  {res['compile_s']:.1f} s" if res.get("compile_s") is not None else ""
            note = f"  {res.get('note') or res.get('error')}"[:110] if res.get("note") or res.get("error") else ""
            eta = _eta(self.t0, self.units_done, self.units)
            print(f"[compile {self.units_done}/{self.units} {time.monotonic() - self.t0:5.0f}s] {ev['impl']:28s} "
                  f"{ev['problem']} {_case_text(ev['case'])}{took}{note}"
                  + (f"  left ~{eta:.0f} s" if eta is not None else ""), file=sys.stderr, flush=True)

    def _row(self, r: dict) -> None:
        self.done += 1
        self.last_row = time.monotonic()
        name = f"{r.get('problem')} {_case_text(r['case'])}" if r.get("case") else None
        for tid in [t for t, (impl, _, _) in self.running.items()   # a killed worker sends no task_done
                    if impl == r.get("impl") and self.names.get(t) == name]:
            del self.running[tid]
        if self._prog is not None:
            self._prog.update(self._bar, completed=min(self.done, self.total))
        elif not self.quiet:
            tm = (r.get("time") or {}).get("median_s")
            took = f"  {tm * 1e6:.1f} us" if tm else ""
            why = f"  {r.get('reason', '')[:100]}" if r.get("status") != "PASS" and r.get("reason") else ""
            eta = _eta(self.t0, self.done, self.total)
            print(f"[{self.done}/{self.total} {time.monotonic() - self.t0:5.0f}s] "
                  f"{'timed-verify' if r.get('pending_timing') else r.get('phase', 'timed'):12s} {r['impl']:28s} "
                  f"{r['problem']} {_case_text(r['case'])}  {r.get('status')}{took}{why}"
                  + (f"  ETA {eta:.0f} s" + (" + the timed phase" if self.then else "") if eta is not None else ""),
                  file=sys.stderr, flush=True)
