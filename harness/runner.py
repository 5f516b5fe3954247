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


HEAVY_LANES = 3   # bins that may run ``heavy`` tasks (compare._preverify_tasks; memory: gpu_admission)


def partition(tasks: list[dict], jobs: int) -> list[list[dict]]:
    """Tasks in at most ``jobs`` bins: grouped by layer, problem and dtype (one process keeps a
    group's compiles warm); a group larger than an even share of the rows (``_rows``) is cut (its
    compiles then happen in more than one process: cheap where a layer caches compiles on disk, and
    the longest group no longer sets the pace); the largest pieces first, each to the bin with the
    fewest rows.
    Tasks marked ``heavy`` go to at most ``HEAVY_LANES`` bins of their own (first in the list)."""
    heavy = [t for t in tasks if t.get("heavy")]
    if heavy and jobs > 1:
        light = [t for t in tasks if not t.get("heavy")]
        lanes = min(HEAVY_LANES, jobs - 1) if light else min(HEAVY_LANES, jobs)
        hb = _partition(heavy, lanes)
        return hb + (_partition(light, jobs - len(hb)) if light else [])
    return _partition(tasks, jobs)


def _rows(tasks: list[dict]) -> int:
    """The work in ``tasks``, counted in rows: a task of the torch layer's eager and torch.compile
    rows weighs two (on the CPU machine, weighing tasks alike gave one worker twice the other's
    CPU seconds, and the run waited for it)."""
    return sum(len(t["impls"]) for t in tasks)


def _partition(tasks: list[dict], jobs: int) -> list[list[dict]]:
    groups: dict[tuple, list] = {}
    for t in tasks:
        groups.setdefault((t["impls"][0].split(":")[0], t["problem"], t["case"]["dtype"]), []).append(t)
    share = -(-_rows(tasks) // max(1, min(jobs, len(tasks))))
    chunks: list[list] = []
    for g in groups.values():
        chunk, n = [], 0
        for t in g:
            if chunk and n + len(t["impls"]) > share:
                chunks.append(chunk)
                chunk, n = [], 0
            chunk.append(t)
            n += len(t["impls"])
        chunks.append(chunk)
    bins: list[list] = [[] for _ in range(min(jobs, len(chunks)))]
    for g in sorted(chunks, key=_rows, reverse=True):
        min(bins, key=_rows).extend(g)
    return bins


def modules_of(tasks: list[dict]) -> list[str]:
    """The adapter modules a worker running ``tasks`` imports (a worker that never runs TileLang
    does not import it)."""
    from . import registry
    return registry.adapters_of(registry.get(t["problem"], i) for t in tasks for i in t["impls"])


def run_parallel(tasks: list[dict], jobs: int, **kw) -> RunResult:
    """``run_tasks`` over ``jobs`` workers at once, tasks grouped by layer, problem and dtype
    (a worker keeps the compile caches of its groups warm and imports only their adapters; a group
    larger than an even share of the tasks is cut, so a layer with slow compiles, such as the CuTe
    DSL's GEMMs, spreads over several workers). Not for timing: it needs the GPU to itself."""
    jobs = max(1, int(jobs))
    if jobs == 1 or len(tasks) < 2 or not kw.get("isolate", True):
        return run_tasks(tasks, **kw, modules=modules_of(tasks) if kw.get("isolate", True) else None)
    bins = partition(tasks, jobs)
    from .machine import usable_cpus
    kw.setdefault("threads", max(1, usable_cpus() // len(bins)))
    kw.setdefault("admission", gpu_admission(tasks, kw.get("device"), len(bins)))
    results: list[RunResult | BaseException] = [None] * len(bins)  # type: ignore[list-item]

    def work(i):
        try:
            results[i] = run_tasks(bins[i], **kw, modules=modules_of(bins[i]))
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


def gpu_admission(tasks: list[dict], device, lanes: int):
    """The GPU memory admission of the parallel phase (``gpumem.Admission``) for ``lanes``
    workers (one more: the timing worker compare starts early), each task given its estimate
    (``gpu_bytes``); None without a GPU. The device's memory is read once, here."""
    from . import gpumem
    total = gpumem.device_total(device) if device else None
    if total is None:
        return None
    for t in tasks:
        t.setdefault("gpu_bytes", gpumem.task_bytes(t))
    return gpumem.Admission(gpumem.budget(total, lanes + 1))


HEADER_KEYS = ("device", "plugins", "threads", "verbose", "modules")


def job_header(device: str, plugins=(), threads: int | None = None, verbose: bool = False,
               modules=None) -> dict:
    """What a worker needs to start (imports, plugins, its checker) before it is given tasks
    (``HEADER_KEYS``); ``modules``: the adapters to import (None: all)."""
    return dict(zip(HEADER_KEYS, (device, [str(p) for p in plugins], threads, verbose,
                                  None if modules is None else sorted(modules))))


class Worker:
    """A worker process (``python -m <module>``), started at once with the job's header: it
    imports, loads the plugins and starts its checker, then waits for the rest of the job
    (``start``) and its tasks, one a line (``send``; ``close`` when there are no more). Starting
    one ahead of time hides its start-up (seconds of imports and CUDA context) behind other work,
    as compare does for the timing worker during the parallel phase."""

    def __init__(self, header: dict, module: str = "harness.worker", env: dict | None = None):
        self.header = {k: header.get(k) for k in HEADER_KEYS}
        full = dict(os.environ)
        full["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [full.get("PYTHONPATH")] if p])
        full.setdefault("PYTHONUNBUFFERED", "1")
        if self.header["device"] == "cpu":
            full["TRITON_INTERPRET"] = "1"
        full.update(env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=full, cwd=str(ROOT))
        with _LIVE_LOCK:
            _LIVE.add(self.proc)
        self.q: queue.Queue = queue.Queue()
        self.closed = False
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
            pass   # the worker died: its output and exit code tell the reader why

    def start(self, job: dict) -> None:
        """The rest of the job (timing, ceilings...): everything but the header and the tasks."""
        self._send(json.dumps({k: v for k, v in job.items() if k not in self.header and k != "tasks"}) + "\n")

    def send(self, task: dict) -> None:
        self._send(json.dumps(task) + "\n")

    def close(self) -> None:
        """No more tasks: the worker finishes those it has and exits."""
        if not self.closed:
            self.closed = True
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def reap(self) -> None:
        """Wait for the process to end (killed after 30 s) and forget it."""
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)

    def discard(self) -> None:
        """Not needed after all (nothing to run, or the run stopped): end it, quietly."""
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


class Gate:
    """When a task may go to a worker: at once (this class); the compile-ahead pool's gate
    (``harness.ahead``) holds a task until what it needs is compiled. ``prepare`` returns the
    task as it is sent (with what was compiled ahead) and the rows of implementations already
    settled (a compile that crashed the pool's process is that implementation's FAIL)."""

    def ready(self, task: dict) -> bool:
        return True

    def prepare(self, task: dict) -> tuple[dict | None, list[dict]]:
        return task, []


FEED_AHEAD = 2   # tasks a worker holds beyond the one it runs: it never waits for the parent


@dataclass
class _Life:
    """What one worker process did before it ended (a Lane may need several)."""
    inflight: list = field(default_factory=list)   # tasks sent, not finished
    done: set = field(default_factory=set)
    current: str | None = None                     # the task and implementation it was on
    impl: str | None = None
    rows: list = field(default_factory=list)       # the current task's rows so far
    fatal: dict | None = None
    timed_out: bool = False
    ready: bool = False
    retry: list = field(default_factory=list)      # the current task's implementations to run again
    last: float = field(default_factory=time.monotonic)
    stderr: deque = field(default_factory=lambda: deque(maxlen=40))


class Lane:
    """Tasks run in order of readiness on one worker process at a time. When the process dies
    (segfault, illegal address that breaks the CUDA context) or goes silent past the timeout, the
    implementation it was on is reported as CRASH/TIMEOUT for that case, and a fresh process
    continues with the rest. With ``admission`` (``gpumem.Admission``, shared by the lanes of the
    parallel phase) a task is sent only once the GPU memory it needs is granted. A row the worker
    marks ``retry`` (out of GPU memory, the checker died) is not kept: its implementation runs
    again on that case, in a task of its own that needs the GPU alone, and that row counts."""

    def __init__(self, tasks: list[dict], job: dict, *, timeout_s: float, on_event=None,
                 verbose: bool = False, gate: Gate | None = None, prestarted: Worker | None = None,
                 ceilings: bool = False, admission=None):
        self.pending = list(tasks)
        self.job, self.timeout_s, self.on_event, self.verbose = job, timeout_s, on_event, verbose
        self.gate = gate or Gate()
        self.prestarted, self.want_ceilings = prestarted, ceilings
        self.admission = admission
        self.res = RunResult()

    def run(self) -> RunResult:
        try:
            while (self.pending or self.want_ceilings) and not _STOPPING.is_set():
                w = self._worker()
                life = self._drive(w)
                w.reap()
                self.want_ceilings = False  # measured once per run; a failed measurement is not retried
                self.pending = [t for t in life.inflight if t["id"] not in life.done] + self.pending
                if not self.pending or _STOPPING.is_set():   # done, or killed by an interrupt: nobody to blame
                    break
                self._blame(life, w.proc.returncode)
        finally:
            if self.admission is not None:
                self.admission.release(self)
        if self.prestarted is not None:   # nothing was left to run (or a different header): not needed
            self.prestarted.discard()
        return self.res

    def _admit(self, life: _Life, task: dict) -> bool:
        """Whether ``task`` may go to the worker now: the GPU memory of the tasks in flight and of
        this one granted (always, without admission)."""
        if self.admission is None:
            return True
        return self.admission.take(self, max(_need(t) for t in life.inflight + [task]))

    def _worker(self) -> Worker:
        w = self.prestarted
        if w is not None and w.matches(self.job):
            self.prestarted = None    # only the first process: a restart starts afresh
        else:
            w = Worker(self.job)
        w.start(dict(self.job, ceilings=self.want_ceilings))
        return w

    def _emit(self, ev: dict) -> None:
        if self.on_event and not _STOPPING.is_set():
            self.on_event(ev)

    def _feed(self, w: Worker, life: _Life) -> None:
        """Send the first ready tasks while the worker holds fewer than FEED_AHEAD + 1; close its
        input when nothing is left to send."""
        while len(life.inflight) <= FEED_AHEAD and self.pending and not w.closed:
            i = next((i for i, t in enumerate(self.pending) if self.gate.ready(t)), None)
            if i is None:
                if self.admission is not None:
                    self.admission.withdraw(self)
                return
            if not self._admit(life, self.pending[i]):
                return
            task, rows = self.gate.prepare(self.pending.pop(i))
            for r in rows:   # settled before it ran (a compile that crashed the pool's process)
                self.res.rows.append(r)
                self._emit({"event": "row", "row": r})
            if task is None:   # nothing left to run: nor to hold for it
                if self.admission is not None:
                    self.admission.shrink(self, max((_need(t) for t in life.inflight), default=0))
                continue
            if not life.inflight:
                life.last = time.monotonic()   # the watchdog counts from work given, not from idling
            life.inflight.append(task)
            w.send(task)
        if not self.pending and not life.inflight:
            w.close()

    def _drive(self, w: Worker) -> _Life:
        life, closed = _Life(), 0
        if self.admission is not None:   # a fresh process: nothing of this lane's is in flight
            self.admission.shrink(self, 0)
        while closed < 2:
            self._feed(w, life)
            try:
                tag, line = w.q.get(timeout=0.2)
            except queue.Empty:
                # start-up (importing torch, the DSLs, the plugins) gets its own, longer allowance
                limit = self.timeout_s if life.ready else max(self.timeout_s, STARTUP_TIMEOUT_S)
                busy = life.inflight or not life.ready or self.want_ceilings
                if busy and time.monotonic() - life.last > limit:
                    life.timed_out = True
                    w.proc.kill()
                    break
                if _STOPPING.is_set():
                    break
                continue
            if line is None:
                closed += 1
            elif tag == "err":
                life.stderr.append(line.rstrip())
                self.res.log.append(line.rstrip())
                if self.verbose:
                    sys.stderr.write(line)
            else:
                life.last = time.monotonic()
                self._event(line, life)
        return life

    def _event(self, line: str, life: _Life) -> None:
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            self.res.log.append(line.rstrip())
            return
        kind = ev.get("event")
        if kind == "ready":
            life.ready = True
        elif kind == "ceilings":
            self.res.ceilings = ev["ceilings"]
            self.want_ceilings = False
        elif kind == "task":
            life.current, life.impl, life.rows = ev["task"], None, []
        elif kind == "step":
            life.impl = ev["impl"]
        elif kind == "row":
            if self._retries(ev, life):
                return   # not shown: the retry's row will be
            life.rows.append(ev["row"])
        elif kind == "vendor":
            self.res.vendor[ev["case"]] = {"time": ev["time"], "flops_per_s": ev["flops_per_s"]}
        elif kind == "task_done":
            self._task_done(ev["task"], life)
        elif kind == "fatal":
            life.fatal = ev
        self._emit(ev)

    def _retries(self, ev: dict, life: _Life) -> bool:
        """A row marked ``retry`` by the worker (out of GPU memory, the checker died): True when
        its implementation is to run again (a first attempt); a retry's row is final."""
        row = ev["row"]
        why = row.pop("retry", None)
        task = next((t for t in life.inflight if t["id"] == ev.get("task")), None)
        if not why or task is None or task.get("retry"):
            return False
        life.retry.append(row["impl"])
        self.res.log.append(f"{row['impl']} on {row['case']['id']}: {why}; run again alone")
        return True

    def _task_done(self, tid: str, life: _Life) -> None:
        task = next((t for t in life.inflight if t["id"] == tid), None)
        self.res.rows.extend(life.rows)
        life.done.add(tid)
        life.inflight = [t for t in life.inflight if t["id"] != tid]
        if task is not None and life.retry:   # next, each alone (after what the worker holds)
            self.pending[:0] = [dict(task, id=f"{tid}~{iid}", impls=[iid], retry=True) for iid in life.retry]
        life.current, life.impl, life.rows, life.retry = None, None, [], []
        if self.admission is not None:
            self.admission.shrink(self, max((_need(t) for t in life.inflight), default=0))

    def _blame(self, life: _Life, code) -> None:
        """The process stopped early: FAIL the implementation it was on (crash, or timeout: then
        also that implementation's other cases of the problem), and requeue the rest; a step of
        several implementations (``_apart``) runs each of them again alone instead."""
        task = next((t for t in self.pending if t["id"] == life.current), None)
        if task is None:
            tail = " | ".join(list(life.stderr)[-5:])
            raise RuntimeError(f"worker exited (code {code}) before starting a task: {tail}")
        blamed = [i for i in (life.impl or "").split(",") if i] or list(task["impls"])
        if len(blamed) > 1:   # a step of several implementations at once (the interleaved timing)
            return self._apart(task, blamed, "hung" if life.timed_out else "crashed")
        msg = _crash_message(life.stderr, code)
        for iid in blamed:
            row = (life.fatal or {}).get("row") if life.fatal and life.fatal.get("impl") == iid else None
            if row is None:
                row = _blank_row(task, iid)
                if life.timed_out:
                    row.update(status="FAIL", kind="timeout",
                               reason=f"no progress for {self.timeout_s:g} s: killed (hang?)")
                else:
                    row.update(status="FAIL", kind="crash", reason=f"crashed the worker: {msg}")
            self._add(row)
        rest = [i for i in task["impls"] if i not in blamed]
        others = [t for t in self.pending if t["id"] != task["id"]]
        if life.timed_out:
            others = self._drop_hung(others, blamed, task)
        self.pending = ([dict(task, impls=rest)] if rest else []) + others

    def _apart(self, task: dict, blamed: list[str], what: str) -> None:
        """The worker stopped in a step that ran ``blamed`` together: nothing says which of them
        it was, so each runs that case again in a task of its own, first; the one that stops
        its worker again is blamed alone, the others keep their rows and their later cases."""
        self.res.log.append(f"the worker {what} while running {', '.join(blamed)} together on "
                            f"{task['case']['id']}: each runs again alone")
        alone = [dict(task, id=f"{task['id']}~{iid}", impls=[iid]) for iid in blamed]
        rest = [i for i in task["impls"] if i not in blamed]
        others = [t for t in self.pending if t["id"] != task["id"]]
        self.pending = alone + ([dict(task, impls=rest)] if rest else []) + others

    def _drop_hung(self, others: list[dict], blamed: list[str], task: dict) -> list[dict]:
        """A hang costs the whole timeout each time: the same implementation is not tried again
        on the problem's other cases (each gets a FAIL row saying why)."""
        for t in others:
            for iid in [i for i in t["impls"] if i in blamed and t["problem"] == task["problem"]]:
                row = _blank_row(t, iid)
                row.update(status="FAIL", kind="timeout",
                           reason=f"not run: hung on {task['case']['id']} earlier in this run")
                self._add(row)
            t["impls"] = [i for i in t["impls"] if not (i in blamed and t["problem"] == task["problem"])]
        return [t for t in others if t["impls"]]

    def _add(self, row: dict) -> None:
        self.res.rows.append(row)
        self._emit({"event": "row", "row": row})


def run_tasks(tasks: list[dict], *, device: str, plugins=(), timing: dict | None = None,
              ceilings: bool = False, timeout_s: float = 600.0, isolate: bool = True,
              keep_raw: bool = True, on_event=None, verbose: bool = False,
              threads: int | None = None, prestarted: "Worker | None" = None,
              gate: Gate | None = None, modules=None, admission=None) -> RunResult:
    """Run ``tasks`` and return every row. ``on_event(event)`` sees progress events.
    ``threads``: torch's CPU threads in the worker (and its checker), so that parallel workers
    do not oversubscribe the cores. ``prestarted``: a ``Worker`` started earlier with the same
    device, plugins, threads, verbosity and modules (its start-up overlapped other work); it takes
    the tasks, and a restart after a crash starts a fresh one. ``gate``: when a task may be sent
    (``Gate``). ``modules``: the adapters the worker imports (None: all). ``admission``: the GPU
    memory the parallel workers share (``gpu_admission``; None: no limit)."""
    job = job_header(device, plugins, threads, verbose, modules)
    job.update(timing=timing or {}, keep_raw=keep_raw)
    if not isolate:
        return _run_inline(tasks, job, ceilings, RunResult(), on_event)
    return Lane(tasks, job, timeout_s=timeout_s, on_event=on_event, verbose=verbose, gate=gate,
                prestarted=prestarted, ceilings=ceilings, admission=admission).run()


def _need(task: dict) -> float:
    """The GPU memory ``task`` needs (``gpumem.case_bytes``, set by ``run_parallel``); a retry
    after running out of memory needs the GPU alone."""
    from .gpumem import ALONE
    return ALONE if task.get("retry") else task.get("gpu_bytes", 0)


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
    """Same work in this process (``--no-isolate``): faster to start, no crash protection. A row
    marked ``retry`` (out of GPU memory) runs again at once, as a worker's lane would run it."""
    import contextlib

    from .worker import process_task

    rows: list = []
    again: list = []
    stdout = sys.stdout   # the command's output (a JSON document under --format json)

    def emit(**ev):
        with contextlib.redirect_stdout(stdout):
            _emit(**ev)

    def _emit(**ev):
        if ev.get("event") == "row":
            if ev["row"].pop("retry", None) and not current[0].get("retry"):
                again.append(ev["row"]["impl"])
                return
            rows.append(ev["row"])
        elif ev.get("event") == "vendor":
            res.vendor[ev["case"]] = {"time": ev["time"], "flops_per_s": ev["flops_per_s"]}
        if on_event:
            on_event(ev)

    if ceilings:
        from .machine import measure_ceilings
        res.ceilings = measure_ceilings()
    queue_ = list(tasks)
    current = [None]
    while queue_:
        t = current[0] = queue_.pop(0)
        emit(event="task", task=t["id"])
        # what a layer or its compiler prints (TileLang logs through tqdm.write to sys.stdout) goes
        # to stderr, as in a worker process, whose stdout is dup'd to stderr
        with contextlib.redirect_stdout(sys.stderr):
            process_task(t, job_base, emit)
        emit(event="task_done", task=t["id"])
        queue_[:0] = [dict(t, id=f"{t['id']}~{iid}", impls=[iid], retry=True) for iid in again]
        again.clear()
    res.rows.extend(rows)
    return res
