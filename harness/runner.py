"""The parent side: plans tasks, runs them in worker subprocesses, survives crashes and hangs.

A task is one case with the implementations to run on it. Tasks go to a worker process
(``python -m harness.worker``); when the worker dies (segfault, illegal address that breaks the
CUDA context) or goes silent past the timeout, the implementation it was on is reported as
CRASH/TIMEOUT for that case, and a fresh worker continues with the rest.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 300.0  # a worker's imports under heavy load; --timeout covers the work after


@dataclass
class RunResult:
    rows: list[dict] = field(default_factory=list)
    ceilings: dict | None = None
    vendor: dict = field(default_factory=dict)  # case id -> vendor GEMM at that shape
    log: list[str] = field(default_factory=list)


_LIVE: set = set()  # worker processes running now (killed on an interrupt)
_LIVE_LOCK = threading.Lock()


_STOPPING = threading.Event()  # set by kill_all: a killed worker is not blamed, nothing restarts


def kill_all() -> None:
    """Kill every worker this process started (Ctrl-C, SIGTERM). The threads that ran them stop
    without reporting rows: the run is over, and the rows already kept are its record."""
    _STOPPING.set()
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for p in procs:
        try:
            p.kill()
        except Exception:
            pass


HEAVY_LANES = 3   # bins that may run ``heavy`` tasks (GPU memory: see compare._preverify_tasks)


def partition(tasks: list[dict], jobs: int) -> list[list[dict]]:
    """Tasks in at most ``jobs`` bins: grouped by layer, problem and dtype (one process keeps a
    group's compiles warm); a group larger than an even share of the tasks is cut (its compiles
    then happen in more than one process: cheap where a layer caches compiles on disk, and the
    longest group no longer sets the pace); the largest pieces first, each to the emptiest bin.
    Tasks marked ``heavy`` go to at most ``HEAVY_LANES`` bins of their own (first in the list)."""
    heavy = [t for t in tasks if t.get("heavy")]
    if heavy and jobs > 1:
        light = [t for t in tasks if not t.get("heavy")]
        lanes = min(HEAVY_LANES, jobs - 1) if light else min(HEAVY_LANES, jobs)
        hb = _partition(heavy, lanes)
        return hb + (_partition(light, jobs - len(hb)) if light else [])
    return _partition(tasks, jobs)


def _partition(tasks: list[dict], jobs: int) -> list[list[dict]]:
    groups: dict[tuple, list] = {}
    for t in tasks:
        groups.setdefault((t["impls"][0].split(":")[0], t["problem"], t["case"]["dtype"]), []).append(t)
    share = -(-len(tasks) // max(1, min(jobs, len(tasks))))
    chunks = [g[i:i + share] for g in groups.values() for i in range(0, len(g), share)]
    bins: list[list] = [[] for _ in range(min(jobs, len(chunks)))]
    for g in sorted(chunks, key=len, reverse=True):
        min(bins, key=len).extend(g)
    return bins


def run_parallel(tasks: list[dict], jobs: int, **kw) -> RunResult:
    """``run_tasks`` over ``jobs`` workers at once, tasks grouped by layer, problem and dtype
    (a worker keeps the compile caches of its groups warm; a group larger than an even share of
    the tasks is cut, so a layer with slow compiles, such as the CuTe DSL's GEMMs, spreads over
    several workers). Not for timing: it needs the GPU to itself."""
    jobs = max(1, int(jobs))
    if jobs == 1 or len(tasks) < 2 or not kw.get("isolate", True):
        return run_tasks(tasks, **kw)
    bins = partition(tasks, jobs)
    kw.setdefault("threads", max(1, (os.cpu_count() or 1) // len(bins)))
    results: list[RunResult | BaseException] = [None] * len(bins)  # type: ignore[list-item]

    def work(i):
        try:
            results[i] = run_tasks(bins[i], **kw)
        except BaseException as e:  # surfaced in the main thread
            results[i] = e

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(bins))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    res = RunResult()
    for r in results:
        if isinstance(r, BaseException):
            raise r
        res.rows.extend(r.rows)
        res.vendor.update(r.vendor)
        res.log.extend(r.log)
        res.ceilings = res.ceilings or r.ceilings
    return res


HEADER_KEYS = ("device", "plugins", "threads", "verbose")


def job_header(device: str, plugins=(), threads: int | None = None, verbose: bool = False) -> dict:
    """What a worker needs to start (imports, plugins, its checker) before it is given tasks
    (``HEADER_KEYS``)."""
    return dict(zip(HEADER_KEYS, (device, [str(p) for p in plugins], threads, verbose)))


class Worker:
    """A worker process, started at once with the job's header: it imports, loads the plugins and
    starts its checker, then waits for its tasks (``give``). Starting one ahead of time hides its
    start-up (seconds of imports and CUDA context) behind other work, as compare does for the
    timing worker during the parallel phase."""

    def __init__(self, header: dict):
        self.header = {k: header.get(k) for k in HEADER_KEYS}
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.header["device"] == "cpu":
            env["TRITON_INTERPRET"] = "1"
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env, cwd=str(ROOT))
        with _LIVE_LOCK:
            _LIVE.add(self.proc)
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=_reader, args=(self.proc.stdout, self.q, "out"), daemon=True).start()
        threading.Thread(target=_reader, args=(self.proc.stderr, self.q, "err"), daemon=True).start()
        self._send(json.dumps(self.header) + "\n")

    def matches(self, header: dict) -> bool:
        return all(self.header[k] == header.get(k) for k in self.header)

    def _send(self, text: str) -> None:
        try:
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass   # the worker died in start-up: its output and exit code tell the reader why

    def give(self, job: dict) -> None:
        """The rest of the job (tasks, ceilings, timing); the worker runs it and exits."""
        self._send(json.dumps({k: v for k, v in job.items() if k not in self.header}))
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def discard(self) -> None:
        """Not needed after all (nothing to time, or the run stopped): end it, quietly."""
        try:
            self.proc.kill()
            self.proc.wait(timeout=30)
        except Exception:
            pass
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)


def _reader(stream, q, tag):
    for line in iter(stream.readline, ""):
        q.put((tag, line))
    q.put((tag, None))


def run_tasks(tasks: list[dict], *, device: str, plugins=(), timing: dict | None = None,
              ceilings: bool = False, timeout_s: float = 600.0, isolate: bool = True,
              keep_raw: bool = True, on_event=None, verbose: bool = False,
              threads: int | None = None, prestarted: "Worker | None" = None) -> RunResult:
    """Run ``tasks`` and return every row. ``on_event(event)`` sees progress events.
    ``threads``: torch's CPU threads in the worker (and its checker), so that parallel workers
    do not oversubscribe the cores. ``prestarted``: a ``Worker`` started earlier with the same
    device, plugins, threads and verbosity (its start-up overlapped other work); it takes the
    tasks, and a restart after a crash starts a fresh one."""
    res = RunResult()
    job_base = job_header(device, plugins, threads, verbose)
    job_base.update(timing=timing or {}, keep_raw=keep_raw)
    if not isolate:
        return _run_inline(tasks, job_base, ceilings, res, on_event)

    remaining = list(tasks)
    want_ceilings = ceilings
    restarts = 0
    while (remaining or want_ceilings) and not _STOPPING.is_set():
        job = dict(job_base, tasks=remaining, ceilings=want_ceilings)
        if prestarted is not None and prestarted.matches(job_base):
            w, prestarted = prestarted, None   # only the first worker: a restart starts afresh
        else:
            w = Worker(job_base)
        w.give(job)
        proc, q = w.proc, w.q
        stderr_tail: deque = deque(maxlen=40)
        current_task, current_impl, task_rows = None, None, []
        done_tasks: set = set()
        last = time.monotonic()
        closed = 0
        fatal = None
        timed_out = False
        ready = False
        while closed < 2:
            try:
                tag, line = q.get(timeout=1.0)
            except queue.Empty:
                # start-up (importing torch, the DSLs, the plugins) gets its own, longer allowance
                limit = timeout_s if ready else max(timeout_s, STARTUP_TIMEOUT_S)
                if time.monotonic() - last > limit:
                    timed_out = True
                    proc.kill()
                    break
                continue
            if line is None:
                closed += 1
                continue
            if tag == "err":
                stderr_tail.append(line.rstrip())
                res.log.append(line.rstrip())
                if verbose:
                    sys.stderr.write(line)
                continue
            last = time.monotonic()
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                res.log.append(line.rstrip())
                continue
            kind = ev.get("event")
            if kind == "ready":
                ready = True
            elif kind == "ceilings":
                res.ceilings = ev["ceilings"]
                want_ceilings = False
            elif kind == "task":
                current_task, current_impl, task_rows = ev["task"], None, []
            elif kind == "step":
                current_impl = ev["impl"]
            elif kind == "row":
                task_rows.append(ev["row"])
            elif kind == "vendor":
                res.vendor[ev["case"]] = {"time": ev["time"], "flops_per_s": ev["flops_per_s"]}
            elif kind == "task_done":
                res.rows.extend(task_rows)
                done_tasks.add(ev["task"])
                current_task, current_impl, task_rows = None, None, []
            elif kind == "fatal":
                fatal = ev
            if on_event and not _STOPPING.is_set():
                on_event(ev)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(proc)
        want_ceilings = False  # measured once per run; a failed measurement is not retried
        remaining = [t for t in remaining if t["id"] not in done_tasks]
        if not remaining or _STOPPING.is_set():   # done, or killed by an interrupt: nobody to blame
            break
        # The worker stopped early: blame the implementation it was running.
        task = next((t for t in remaining if t["id"] == current_task), None)
        if task is None:
            tail = " | ".join(list(stderr_tail)[-5:])
            raise RuntimeError(f"worker exited (code {proc.returncode}) before starting a task: {tail}")
        blamed = [i for i in (current_impl or "").split(",") if i] or list(task["impls"])
        tail = _crash_message(stderr_tail, proc.returncode)
        for iid in blamed:
            row = (fatal or {}).get("row") if fatal and fatal.get("impl") == iid else None
            if row is None:
                row = _blank_row(task, iid)
                if timed_out:
                    row.update(status="FAIL", kind="timeout",
                               reason=f"no progress for {timeout_s:g} s: killed (hang?)")
                else:
                    row.update(status="FAIL", kind="crash", reason=f"crashed the worker: {tail}")
            res.rows.append(row)
            if on_event:
                on_event({"event": "row", "row": row})
        rest = [i for i in task["impls"] if i not in blamed]
        others = [t for t in remaining if t["id"] != task["id"]]
        if timed_out:
            # a hang costs the whole timeout each time: do not try the same implementation again
            for t in others:
                for iid in [i for i in t["impls"] if i in blamed and t["problem"] == task["problem"]]:
                    row = _blank_row(t, iid)
                    row.update(status="FAIL", kind="timeout",
                               reason=f"not run: hung on {task['case']['id']} earlier in this run")
                    res.rows.append(row)
                    if on_event:
                        on_event({"event": "row", "row": row})
                t["impls"] = [i for i in t["impls"] if not (i in blamed and t["problem"] == task["problem"])]
            others = [t for t in others if t["impls"]]
        remaining = ([dict(task, impls=rest)] if rest else []) + others
        restarts += 1
    if prestarted is not None:   # nothing was left to run (or a different header): not needed
        prestarted.discard()
    return res


def _crash_message(tail, code) -> str:
    lines = [l for l in tail if l.strip()]
    interesting = [l for l in lines if any(w in l for w in ("Error", "error", "illegal", "Segmentation",
                                                                 "Aborted", "fault", "Traceback"))]
    msg = (interesting or lines or [""])[-1].strip()[:300]
    sig = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return f"{sig}" + (f": {msg}" if msg else "")


def _blank_row(task, iid) -> dict:
    from . import problems, registry
    from .case import Case
    from .row import Row

    p = problems.get(task["problem"])
    case = Case.from_json(task["case"])
    try:
        impl = registry.get(p.name, iid)
    except Exception:
        impl = None
    return Row.of(p, case, iid, impl, task.get("phase", "timed")).to_dict()


def _run_inline(tasks, job_base, ceilings, res, on_event):
    """Same work in this process (``--no-isolate``): faster to start, no crash protection."""
    from .worker import process_task

    rows: list = []

    def emit(**ev):
        if ev.get("event") == "row":
            rows.append(ev["row"])
        elif ev.get("event") == "vendor":
            res.vendor[ev["case"]] = {"time": ev["time"], "flops_per_s": ev["flops_per_s"]}
        if on_event:
            on_event(ev)

    if ceilings:
        from .machine import measure_ceilings
        res.ceilings = measure_ceilings()
    for t in tasks:
        emit(event="task", task=t["id"])
        process_task(t, job_base, emit)
        emit(event="task_done", task=t["id"])
    res.rows.extend(rows)
    return res
