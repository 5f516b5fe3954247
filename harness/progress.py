"""What the user sees while a run goes: in a terminal, rich progress bars - the rows (done of
planned, what is being verified or timed now, elapsed, time left) and, while the compile-ahead
pool works, its units (done of planned, what is compiling now); when the output is a file or a
pipe, one plain line per finished row and per unit compiled ahead, each with the count, the
elapsed seconds and an estimate of the time left (so a log shows the run as it goes, not after
ten silent minutes)."""
from __future__ import annotations

import sys
import threading
import time


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

    def __init__(self, console, total: int, title: str, plain: bool | None = None, quiet: bool = False):
        self.console = console
        self.total = max(int(total), 1)
        self.title = title
        self.quiet = quiet
        self.plain = (not console.is_terminal) if plain is None else plain
        self.done = 0
        self.units = self.units_done = 0
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.names: dict[str, str] = {}
        self._prog = None
        self._unit_bar = None

    def __enter__(self):
        if not self.quiet and not self.plain:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self._prog = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20),
                                  MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("left"),
                                  TimeRemainingColumn(), console=self.console, transient=True)
            self._prog.__enter__()
            self._bar = self._prog.add_task(self.title, total=self.total)
        elif not self.quiet:
            print(f"{self.title}: {self.total} row(s)", file=sys.stderr, flush=True)
        return self

    def __exit__(self, *exc):
        if self._prog is not None:
            self._prog.__exit__(*exc)
        return False

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
            if kind == "step" and self._prog is not None:
                doing = "timing" if ev.get("phase") == "time" else "verifying"
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
                  + (f"  ETA {eta:.0f} s" if eta is not None else ""), file=sys.stderr, flush=True)
