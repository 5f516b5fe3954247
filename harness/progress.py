"""What the user sees while a run goes: a rich progress bar in a terminal (phase, case,
implementation, done/total, elapsed, ETA), or one plain line per finished row when the output is a
file or a pipe (so a log shows the run as it goes, not after ten silent minutes)."""
from __future__ import annotations

import sys
import threading
import time


def _case_text(case: dict) -> str:
    dims = "x".join(str(v) for v in case["dims"].values())
    extra = " ".join(f"{k}={v}" for k, v in sorted(case.get("params", {}).items()))
    return f"{dims} {case['dtype']}" + (f" {extra}" if extra else "")


class RunProgress:
    """``with RunProgress(console, total_rows, plain) as p: p.event(ev)`` for the runner's events."""

    def __init__(self, console, total: int, title: str, plain: bool | None = None, quiet: bool = False):
        self.console = console
        self.total = max(int(total), 1)
        self.title = title
        self.quiet = quiet
        self.plain = (not console.is_terminal) if plain is None else plain
        self.done = 0
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.names: dict[str, str] = {}
        self._prog = None

    def __enter__(self):
        if not self.quiet and not self.plain:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self._prog = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20),
                                  MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
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

    def event(self, ev: dict) -> None:
        kind = ev.get("event")
        with self.lock:
            if kind == "step" and self._prog is not None:
                what = f"{self.title}: {self.names.get(ev.get('task'), '')} {ev.get('phase', '')} {ev.get('impl', '')}"
                self._prog.update(self._bar, description=what[:70])
            elif kind == "row":
                self.done += 1
                r = ev["row"]
                if self._prog is not None:
                    self._prog.update(self._bar, completed=min(self.done, self.total))
                elif not self.quiet:
                    tm = (r.get("time") or {}).get("median_s")
                    took = f"  {tm * 1e6:.1f} us" if tm else ""
                    why = f"  {r.get('reason', '')[:100]}" if r.get("status") != "PASS" and r.get("reason") else ""
                    eta = ""
                    if 0 < self.done < self.total:
                        rate = (time.monotonic() - self.t0) / self.done
                        eta = f"  ETA {rate * (self.total - self.done):.0f} s"
                    print(f"[{self.done}/{self.total} {time.monotonic() - self.t0:5.0f}s] "
                          f"{'timed-verify' if r.get('pending_timing') else r.get('phase', 'timed'):12s} {r['impl']:28s} "
                          f"{r['problem']} {_case_text(r['case'])}  {r.get('status')}{took}{why}{eta}",
                          file=sys.stderr, flush=True)
