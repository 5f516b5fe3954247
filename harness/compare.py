"""The main job: ``python -m harness compare``.

verify suite and the timed cases' verification (parallel workers, one layer each: every timed
case verified with three seeds, like a suite case) -> timed cases (one worker, the GPU to itself:
every implementation that passed timed interleaved, its first and last timed launch verified
again) -> metrics (a row faster than the hardware is a FAIL) -> summary -> files.

Every finished row is appended to ``<out>/rows.jsonl`` at once; Ctrl-C, SIGTERM or a crash leave
those rows and an ``INTERRUPTED`` marker, and ``--resume <out>`` finishes the run.
"""
from __future__ import annotations

import datetime as _dt
import shlex
import signal
import sys
import threading
import time

from . import plan as P
from .args import UsageError, problems_arg, setup
from .results import ResultsDir, row_key


def default_jobs(device: str) -> int:
    """Parallel verify workers: half the cores on a GPU machine (each worker has a checker process
    beside it; the checks wait on the GPU as much as they use a core), at most 8, of which at most
    three take the heavy cases (``harness.runner.HEAVY_LANES``); one a core without a GPU."""
    from .machine import usable_cpus
    n = usable_cpus()
    return max(1, min(8, n // 2 if device == "cuda" else n))


def _preverify_tasks(plan, impls, done: set) -> list[dict]:
    """The verification of the timed cases as tasks of their own, one per case and layer, for the
    parallel phase: a worker verifies them (three seeds) and reports each PASS as pending timing;
    the timed phase then only times (and checks its first and last timed launches). Cases above
    ``worker.BIG_CASE_BYTES`` of traffic are marked ``heavy``: the parallel phase gathers them in at
    most ``runner.HEAVY_LANES`` (3) workers (``harness.runner.partition``; a large case's compiles
    stay with few processes). What bounds the GPU memory is the admission (``gpumem.Admission``):
    a task is sent only once its estimate (a float64 reference, its bound, the inputs, the guarded
    outputs: ~34 GB for the largest models case) fits beside the others'.
    A heavy case is one task with every layer's rows, verified seed by seed (``seed_major``): its
    reference and bound (the float64 checker keeps one seed of such a case in hand) are computed
    once a seed, not once a seed and layer."""
    from . import problems
    from .case import Case
    from .worker import BIG_CASE_BYTES
    tasks, heavy = [], {}   # heavy: (problem, case id) -> that case's one task
    for t in _todo(P.make_tasks(plan, impls, phase="timed", prefix="p", split_by_layer=True), done):
        big = problems.get(t["problem"]).traffic(Case.from_json(t["case"])) > BIG_CASE_BYTES
        t.update(preverify=True, heavy=big)
        if not big:
            tasks.append(t)
            continue
        key = (t["problem"], t["case"]["id"])
        if key in heavy:
            heavy[key]["impls"] = heavy[key]["impls"] + t["impls"]
        else:
            heavy[key] = dict(t, seed_major=True)
            tasks.append(heavy[key])
    return tasks


def _with_preverified(tasks: list[dict], pre: dict) -> list[dict]:
    """Timed tasks whose implementations passed the parallel verification carry that verdict
    (``verified``); implementations without one are verified in the timed worker as before."""
    out = []
    for t in tasks:
        ver = {i: pre[(i, t["case"]["id"])] for i in t["impls"] if (i, t["case"]["id"]) in pre}
        out.append(dict(t, verified=ver) if ver else t)
    return out


def _sigterm(*_):
    raise KeyboardInterrupt("SIGTERM")


def _failed_rows_for_suite(plan, impls, failed_suite: dict) -> list[dict]:
    """Timed cases of implementations that failed the verify suite: FAIL, not timed."""
    from .row import Row
    rows = []
    for p, cases in plan:
        for i in impls:
            if i.problem == p.name and i.key in failed_suite:
                for c in cases:
                    r = Row.of(p, c, i.id, i).to_dict()
                    r.update(status="FAIL", kind="failed-verify-suite",
                             reason=f"failed the verify suite ({failed_suite[i.key]}); not timed")
                    rows.append(r)
    return rows


def resumed_argv(path) -> list[str]:
    """The arguments of the interrupted run in ``path`` (``--resume``), as it recorded them."""
    return list(ResultsDir(path, resume=True).read_meta().get("argv") or [])


class _Recorder:
    """The run's rows as they arrive: every finished row goes to ``rows.jsonl`` at once; a timed
    case's verification waits in ``pre`` for its timing; vendor times and ceilings are events."""

    def __init__(self, rd: ResultsDir, done_rows: list[dict], events: list[dict]):
        self.rd = rd
        self.rows: list[dict] = list(done_rows)
        self.ceilings = next((e["ceilings"] for e in events if e["_event"] == "ceilings"), None)
        self.vendor = {e["case"]: e["data"] for e in events if e["_event"] == "vendor"}
        self.pre: dict = {}   # (impl, case id) -> a timed case's verification row, pending its timing
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.facts: list[dict] = []   # where this invocation's wall time went (harness.wall)

    def note(self, kind: str, **data) -> None:
        """A fact of this invocation's wall time (a phase, a worker's start-up, the pool), kept
        for the results and recorded in rows.jsonl."""
        self.facts.append({"_event": kind, **data})
        self.rd.append_event(kind, **data)

    def since(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def keep(self, ev) -> None:
        """One event at a time (parallel workers' threads), none after an interrupt: the rows in
        rows.jsonl and in the files written at the end are then the same."""
        from .runner import _STOPPING
        with self.lock:
            if _STOPPING.is_set():
                return
            self._keep(ev)

    def _keep(self, ev) -> None:
        if ev.get("event") == "row":
            r = ev["row"]
            if r.get("pending_timing"):
                self.pre[(r["impl"], r["case"]["id"])] = r
                return
            self.add(r)
        elif ev.get("event") == "vendor":
            self.vendor[ev["case"]] = {"time": ev["time"], "flops_per_s": ev["flops_per_s"]}
            self.rd.append_event("vendor", case=ev["case"], data=self.vendor[ev["case"]])
        elif ev.get("event") == "ceilings":
            self.rd.append_event("ceilings", ceilings=ev["ceilings"])
        elif ev.get("event") == "ready":   # where the wall time goes: each worker's start-up
            self.note("worker_ready", startup_s=ev.get("startup_s"), startup_cpu_s=ev.get("startup_cpu_s"),
                      at_s=self.since())
        elif ev.get("event") == "done" and ev.get("cpu_s") is not None:   # a worker's CPU seconds in all
            self.note("worker_done", cpu_s=ev["cpu_s"], checker_cpu_s=ev.get("checker_cpu_s"))
        elif ev.get("event") == "timed_case":
            self.note("timed_case", case=ev["case"], prepare_s=ev["prepare_s"], sample_s=ev["sample_s"],
                      check_s=ev.get("check_s"), checks=ev.get("checks"), same_bits=ev.get("same_bits"),
                      rows=ev["rows"])

    def add(self, r: dict) -> None:
        self.rows.append(r)
        self.rd.append(r)

    def finished(self) -> list[dict]:
        with self.lock:   # a row being kept as the interrupt came is in both, or in neither
            return _dedupe(self.rows)


def _verify_tasks(args, device, impls, plan, done: set) -> list[dict]:
    """The parallel phase's tasks: the verify suite and (on the GPU) the timed cases'
    verification (their compiles and three-seed checks are most of the work; the timed phase
    then only times them)."""
    vtasks = []
    if not args.no_verify_suite and not args.set:
        vplan = P.plan_cases(problems_arg(args), "verify", args.dtype, [])
        vtasks = _todo(P.make_tasks(vplan, impls, phase="verify-suite", prefix="v", split_by_layer=True), done)
    return vtasks + (_preverify_tasks(plan, impls, done) if device == "cuda" else [])


def compile_jobs(args) -> int:
    """Processes of the compile-ahead pool: one a core unless ``--compile-jobs`` says (0: none)."""
    from .machine import usable_cpus
    n = getattr(args, "compile_jobs", None)
    return usable_cpus() if n is None else int(n)


def _gpu_compiles_ahead(device: str) -> bool:
    """Whether the pool can build what the GPU runs: compile_only targets sm_90(a)."""
    if device != "cuda":
        return False
    import torch
    return tuple(torch.cuda.get_device_capability()) == (9, 0)


def _pool(args, device, tasks: list[dict], mode: str, common: dict, on_event):
    """The compile-ahead pool for ``tasks`` (``harness.ahead``), started; None when off."""
    from .ahead import Pool, plan_units

    n = compile_jobs(args)
    if n <= 0 or not common["isolate"] or (mode == "compile" and not _gpu_compiles_ahead(device)):
        return None
    if mode == "compile":   # what each GPU worker needs first is compiled first
        from .runner import partition
        bins = partition(tasks, args.jobs or default_jobs(device))
        tasks = [b[i] for i in range(max(map(len, bins), default=0)) for b in bins if i < len(b)]
    units = plan_units(tasks, mode)
    if not units:
        return None
    return Pool(units, n, device=device, plugins=args.plugin, timeout_s=common["timeout_s"],
                on_event=on_event, verbose=args.verbose).start()


def _pool_done(pool, rec: "_Recorder") -> None:
    """Wait for the pool and record what it did (``compile_ahead`` event of rows.jsonl)."""
    if pool is None:
        return
    pool.wait()
    t1 = pool.stats.get("t1")
    rec.note("compile_ahead", **pool.summary(),
             done_at_s=round(rec.since() - (time.monotonic() - t1), 1) if t1 is not None else None)


def _suite_failures(rows) -> dict[str, str]:
    failed: dict[str, str] = {}
    for r in rows:
        if r.get("phase") == "verify-suite" and r["status"] == "FAIL":
            failed.setdefault(f"{r['problem']}/{r['impl']}", f"{r['case']['id']}: {r['reason']}")
    return failed


def _verify_phase(args, device, tasks: list[dict], rec: _Recorder, console, common: dict,
                  quiet: bool, then: str = "") -> dict[str, str]:
    """Runs the parallel phase's tasks (each sent to a GPU worker once the pool has compiled what
    it needs); returns the implementations that failed the verify suite ({key: why}). ``then``:
    what follows (the progress says its estimate is this phase's alone)."""
    from .progress import RunProgress
    from .runner import run_parallel

    if tasks:
        start = rec.since()
        title = "verify suite" + (" + timed cases' verification" if any(t.get("preverify") for t in tasks) else "")
        with RunProgress(console, sum(len(t["impls"]) for t in tasks), title, quiet=quiet, then=then) as prog:
            prog.add_tasks(tasks)
            on_ev = lambda ev: (rec.keep(ev), prog.event(ev))  # noqa: E731
            pool = _pool(args, device, tasks, "compile", common, on_ev)
            prog.expect_units(len(pool.units) if pool else 0)
            try:
                run_parallel(tasks, args.jobs or default_jobs(device), on_event=on_ev, gate=pool, **common)
            finally:
                _pool_done(pool, rec)
        rec.note("phase", name="parallel", start_s=start, end_s=rec.since(), jobs=args.jobs or default_jobs(device))
    return _suite_failures(rec.rows)


def _timed_phase_text(plan, impls) -> str:
    """The timed phase in words, for the parallel phase's progress: its cases and rows."""
    rows = cases = 0
    for p, cs in plan:
        n = sum(i.problem == p.name for i in impls)
        if n:
            cases, rows = cases + len(cs), rows + n * len(cs)
    return f"the timed phase: {cases} case(s), {rows} row(s), one case at a time on the GPU" if cases else ""


def _timed_phase(args, device, impls, plan, failed_suite: dict, rec: _Recorder, console, common: dict,
                 quiet: bool, tcfg, timer):
    """The timed cases: timing needs the GPU to itself (one worker); without a GPU nothing is
    timed and the cases go to parallel workers like the verify suite. Then the rows of the
    implementations that failed the suite. Returns the ceilings measured."""
    from .progress import RunProgress
    from .runner import run_parallel, run_tasks

    gpu = device == "cuda"
    ok_impls = [i for i in impls if i.key not in failed_suite]
    done = {row_key(r) for r in rec.rows}   # a timed case that failed its verification is finished
    tasks = _todo(P.make_tasks(plan, ok_impls, time=True, split_by_layer=not gpu), done)
    tasks = _with_preverified(tasks, rec.pre)
    ceilings = rec.ceilings
    start = rec.since()
    with RunProgress(console, sum(len(t["impls"]) for t in tasks),
                     "timed cases" if gpu else "cases", quiet=quiet) as prog:
        prog.add_tasks(tasks)
        on_ev = lambda ev: (rec.keep(ev), prog.event(ev))  # noqa: E731
        if gpu:
            res = run_tasks(tasks, ceilings=not args.no_ceilings and ceilings is None,
                            timing={k: getattr(tcfg, k) for k in ("mode", "min_samples", "time_cap_s")},
                            keep_raw=not args.no_raw, on_event=on_ev, prestarted=timer, **common)
        else:
            res = run_parallel(tasks, args.jobs or default_jobs(device), on_event=on_ev, **common)
        ceilings = ceilings or res.ceilings
    rec.note("phase", name="timed" if gpu else "cases", start_s=start, end_s=rec.since())
    for r in _failed_rows_for_suite(plan, impls, failed_suite):
        if row_key(r) not in done:
            rec.add(r)
    return ceilings


def _cpu_phase(args, device, impls, plan, vtasks: list[dict], rec: _Recorder, console, common: dict,
               quiet: bool) -> None:
    """Without a GPU nothing is timed, so nothing waits for the verify suite: its tasks and the
    suite's cases go to one set of parallel workers (each worker's start-up - imports of every
    layer and its checker, seconds of CPU - is paid once, and no core idles at a barrier between
    the two). An implementation that failed the verify suite then gets the same rows as in two
    phases: its cases' rows are replaced by 'failed the verify suite; not timed' rows."""
    from .progress import RunProgress
    from .runner import run_parallel

    done = {row_key(r) for r in rec.rows}
    tasks = vtasks + _todo(P.make_tasks(plan, impls, time=True, split_by_layer=True), done)
    if tasks:
        start = rec.since()
        with RunProgress(console, sum(len(t["impls"]) for t in tasks), "verify suite + cases",
                         quiet=quiet) as prog:
            prog.add_tasks(tasks)
            on_ev = lambda ev: (rec.keep(ev), prog.event(ev))  # noqa: E731
            # the rows of what cannot run on the CPU (compiled for sm_90a) come from the pool;
            # the workers run the rest
            pool = _pool(args, device, tasks, "row", common, on_ev)
            prog.expect_units(len(pool.units) if pool else 0)
            if pool is not None:
                tasks = [dict(t, impls=[i for i in t["impls"] if pool.key(t, i) not in pool.units]) for t in tasks]
                tasks = [t for t in tasks if t["impls"]]
            try:
                run_parallel(tasks, args.jobs or default_jobs(device), on_event=on_ev, **common)
            finally:
                _pool_done(pool, rec)
        rec.note("phase", name="parallel", start_s=start, end_s=rec.since(), jobs=args.jobs or default_jobs(device))
    failed_suite = _suite_failures(rec.rows)
    for r in _failed_rows_for_suite(plan, impls, failed_suite):
        rec.add(r)   # the last row of a key wins (_dedupe, --resume)


def _document(args, device, rows, ceilings, vendor, command: str, now, tcfg, wall_s: float) -> dict:
    """The results document: line counts and metrics attached to the rows, the run's facts."""
    from . import registry, report
    from .machine import machine_info

    machine = machine_info()
    report.attach_loc(rows)
    report.add_metrics(rows, ceilings, vendor, machine.get("gpu"), machine.get("l2_bytes") or 0,
                       model_gpu=None if device == "cuda" else args.gpu)
    doc = report.results_doc(rows, command=command, machine=machine, ceilings=ceilings, vendor=vendor,
                             timing={**vars(tcfg), "description": tcfg.describe() if device == "cuda"
                                     else "no GPU: nothing timed (timing needs a GPU)"},
                             suite=args.suite if not args.set else "custom",
                             created=now.isoformat(timespec="seconds"))
    doc["backend_errors"] = dict(registry.BACKEND_ERRORS)
    doc["wall_s"] = wall_s  # this invocation (a resumed run: its part)
    return doc


def _write(doc: dict, rd: ResultsDir, rows: list[dict], interrupted: str | None, plot: bool, console) -> None:
    """The files of the run (and its plots), and the INTERRUPTED marker set or cleared."""
    from . import report

    if interrupted:
        doc["interrupted"] = interrupted
        rd.mark_interrupted(interrupted, len(rows), f"python -m harness compare --resume {rd.path}")
    else:
        rd.clear_interrupted()
    report.write_outputs(doc, rd.path)
    if plot:
        try:
            from .plots import make_plots
            if not make_plots(doc, rd.path):
                console.print("plots: nothing to draw in this run (no timed rows and no line counts)")
        except ImportError as e:
            console.print(f"plots skipped: matplotlib is not installed ({e})")
    rd.close()


def _print(doc: dict, fmt: str, rd: ResultsDir, console) -> None:
    from . import report

    if fmt == "json":
        from .jsonsafe import dumps
        print(dumps(doc, indent=1))
    elif fmt == "csv":
        print(report.to_csv(doc["rows"]), end="")
    elif fmt == "md":
        print(report.to_markdown(doc), end="")
    else:
        report.print_compare(doc, console)
        n = {s: sum(r["status"] == s for r in doc["rows"]) for s in ("PASS", "FAIL", "SKIP")}
        console.print(f"{n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped; written: {rd.path}/")


def run(args, console, argv: list[str], resume: str | None = None) -> int:
    """The main job for parsed ``args`` (``argv``: the arguments as given, recorded for
    ``--resume``; ``resume``: the folder of the interrupted run being finished)."""
    import time as _time

    from . import report
    from .machine import machine_info
    from .runner import _STOPPING, Worker, job_header, kill_all
    from .timing import TimingConfig

    # -- everything that can be wrong with the request is found before anything runs --------
    if getattr(args, "verify_suite_only", False) and (args.no_verify_suite or args.set):
        raise UsageError("--verify-suite-only: with --no-verify-suite or --set nothing is left to run")
    rd = ResultsDir(resume or args.out, resume=bool(resume), store=getattr(args, "store", None))
    device, impls, plan = setup(args)
    if getattr(args, "verify_suite_only", False):
        plan = []   # no timed case: the verify suite's rows only
    t_start = _time.monotonic()
    now = _dt.datetime.now(_dt.timezone.utc)
    command = "python -m harness " + " ".join(shlex.quote(a) for a in argv)
    if not resume:
        rd.write_meta({"schema": report.SCHEMA, "created": now.isoformat(timespec="seconds"),
                       "command": command, "argv": list(argv), "device": device,
                       "machine": machine_info()})
    done_rows, events = rd.rows()
    done = {row_key(r) for r in done_rows}
    rec = _Recorder(rd, done_rows, events)

    quiet = args.format != "table"
    timeout = args.timeout or (1800 if device == "cpu" else 600)
    common = dict(device=device, plugins=args.plugin, timeout_s=timeout, isolate=not args.no_isolate,
                  verbose=args.verbose)
    tcfg = TimingConfig(mode="graph" if args.graph else "cold", time_cap_s=args.time_cap,
                        min_samples=args.min_samples)
    ceilings = rec.ceilings
    interrupted = None
    _STOPPING.clear()   # a run in this process after an interrupted one (--resume from Python)
    old = signal.signal(signal.SIGTERM, _sigterm)
    timer = None     # the timing worker, started while the parallel phase runs (GPU)
    try:
        vtasks = _verify_tasks(args, device, impls, plan, done)
        if device == "cuda" and common["isolate"] and vtasks:
            # its start-up (imports, CUDA context, checker: ~10 s) overlaps the parallel phase;
            # it touches the GPU only once it has its tasks, when the parallel workers are done
            timer = Worker(job_header(device, args.plugin, None, args.verbose))
        if device == "cuda" or not common["isolate"]:
            failed_suite = _verify_phase(args, device, vtasks, rec, console, common, quiet,
                                         _timed_phase_text(plan, impls) if device == "cuda" else "")
            ceilings = _timed_phase(args, device, impls, plan, failed_suite, rec, console, common, quiet,
                                    tcfg, timer)
        else:
            _cpu_phase(args, device, impls, plan, vtasks, rec, console, common, quiet)
        timer = None   # run_tasks took it, or discarded it with nothing to run
    except KeyboardInterrupt as e:
        kill_all()
        interrupted = "interrupted by SIGTERM" if str(e) == "SIGTERM" else "interrupted (Ctrl-C)"
    except Exception as e:  # a broken environment: keep what finished and say so
        kill_all()
        interrupted = f"stopped by an error: {type(e).__name__}: {e}"
    finally:
        signal.signal(signal.SIGTERM, old)
        if timer is not None:   # never given its tasks: the run stopped before the timed phase
            timer.discard()

    rows = rec.finished()
    doc = _document(args, device, rows, ceilings, rec.vendor, command, now, tcfg,
                    round(_time.monotonic() - t_start, 1))
    from .wall import breakdown
    doc["wall"] = breakdown(rows, rec.facts, doc["wall_s"])
    _write(doc, rd, rows, interrupted, args.plot, console)
    _print(doc, args.format, rd, console)
    if interrupted:
        print(f"{interrupted}: {len(rows)} finished row(s) kept in {rd.path}/; finish with: "
              f"python -m harness compare --resume {rd.path}", file=sys.stderr)
        return 130 if "interrupted" in interrupted else 1
    return 1 if any(r["status"] == "FAIL" for r in doc["rows"]) else 0


def _todo(tasks, done: set) -> list[dict]:
    """Tasks with the implementations whose rows are not recorded yet (``--resume``)."""
    out = []
    for t in tasks:
        left = [i for i in t["impls"] if (t.get("phase", "timed"), t["problem"], i, t["case"]["id"]) not in done]
        if left:
            out.append(dict(t, impls=left))
    return out


def _dedupe(rows: list[dict]) -> list[dict]:
    """One row per (phase, problem, impl, case): the last recorded wins."""
    seen: dict = {}
    for r in rows:
        seen[row_key(r)] = r
    return list(seen.values())
