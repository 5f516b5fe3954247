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
import os
import shlex
import signal
import sys
import threading

from . import plan as P
from .results import ResultsDir, row_key


def default_jobs(device: str) -> int:
    """Parallel verify workers: half the cores on a GPU machine (each worker has a checker process
    beside it; the checks wait on the GPU as much as they use a core), at most 8, of which at most
    three take the heavy cases (``harness.runner.HEAVY_LANES``); one a core without a GPU."""
    n = os.cpu_count() or 1
    return max(1, min(8, n // 2 if device == "cuda" else n))


def _preverify_tasks(plan, impls, done: set) -> list[dict]:
    """The verification of the timed cases as tasks of their own, one per case and layer, for the
    parallel phase: a worker verifies them (three seeds) and reports each PASS as pending timing;
    the timed phase then only times (and checks its first and last timed launches). Cases above
    ``worker.BIG_CASE_BYTES`` of traffic are marked ``heavy``: the parallel phase runs them in at most
    ``runner.HEAVY_LANES`` (3) workers (``harness.runner.partition``), so that no more than three of
    them hold the GPU's memory at once (a float64 reference, its bound, the inputs, the guarded
    outputs: ~20 GB for the largest models case; six at once ran out of the H200's 140 GB)."""
    from . import problems
    from .case import Case
    from .worker import BIG_CASE_BYTES
    tasks = _todo(P.make_tasks(plan, impls, phase="timed", prefix="p", split_by_layer=True), done)
    for t in tasks:
        t.update(preverify=True,
                 heavy=problems.get(t["problem"]).traffic(Case.from_json(t["case"])) > BIG_CASE_BYTES)
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


def run(args, console, argv: list[str]) -> int:
    from . import registry, report
    from .machine import machine_info
    from .progress import RunProgress
    from .runner import _STOPPING, Worker, job_header, kill_all, run_parallel, run_tasks
    from .timing import TimingConfig

    # -- everything that can be wrong with the request is found before anything runs --------
    resume = getattr(args, "resume", None)
    rd = ResultsDir(resume or args.out, resume=bool(resume))
    if resume:
        meta = rd.read_meta()
        prev_argv = meta.get("argv") or []
        from .cli import build_parser
        args = build_parser().parse_args(prev_argv)
        argv = prev_argv
    from .cli import setup
    device, impls, plan = setup(args)
    import time as _time
    t_start = _time.monotonic()
    now = _dt.datetime.now(_dt.timezone.utc)
    command = "python -m harness " + " ".join(shlex.quote(a) for a in argv)
    if not resume:
        rd.write_meta({"schema": report.SCHEMA, "created": now.isoformat(timespec="seconds"),
                       "command": command, "argv": list(argv), "device": device,
                       "machine": machine_info()})
    done_rows, events = rd.rows()
    done = {row_key(r) for r in done_rows}
    ceilings = next((e["ceilings"] for e in events if e["_event"] == "ceilings"), None)
    vendor = {e["case"]: e["data"] for e in events if e["_event"] == "vendor"}

    quiet = args.format != "table"
    timeout = args.timeout or (1800 if device == "cpu" else 600)
    common = dict(device=device, plugins=args.plugin, timeout_s=timeout, isolate=not args.no_isolate,
                  verbose=args.verbose)
    rows: list[dict] = list(done_rows)
    tcfg = TimingConfig(mode="graph" if args.graph else "cold", time_cap_s=args.time_cap,
                        min_samples=args.min_samples)
    interrupted = None
    _STOPPING.clear()   # a run in this process after an interrupted one (--resume from Python)
    old = signal.signal(signal.SIGTERM, _sigterm)

    pre: dict = {}   # (impl, case id) -> a timed case's verification row, pending its timing
    timer = None     # the timing worker, started while the parallel phase runs (GPU)

    keep_lock = threading.Lock()

    def keep(ev):
        # one event at a time (parallel workers' threads), none after an interrupt: the rows in
        # rows.jsonl and in the files written at the end are then the same
        with keep_lock:
            if _STOPPING.is_set():
                return
            _keep(ev)

    def _keep(ev):
        if ev.get("event") == "row":
            r = ev["row"]
            if r.get("pending_timing"):
                pre[(r["impl"], r["case"]["id"])] = r
                return
            rows.append(r)
            rd.append(r)
        elif ev.get("event") == "vendor":
            vendor[ev["case"]] = {"time": ev["time"], "flops_per_s": ev["flops_per_s"]}
            rd.append_event("vendor", case=ev["case"], data=vendor[ev["case"]])
        elif ev.get("event") == "ceilings":
            rd.append_event("ceilings", ceilings=ev["ceilings"])
        elif ev.get("event") == "ready":   # where the wall time goes: each worker's start-up
            rd.append_event("worker_ready", startup_s=ev.get("startup_s"))

    try:
        failed_suite: dict[str, str] = {}
        gpu = device == "cuda"
        vtasks = []
        if not args.no_verify_suite and not args.set:
            vplan = P.plan_cases(P_names(args), "verify", args.dtype, [])
            vtasks = _todo(P.make_tasks(vplan, impls, phase="verify-suite", prefix="v", split_by_layer=True), done)
        # On the GPU the timed cases are verified here too, in parallel (their compiles and
        # three-seed checks are most of the work); the timed phase then only times them.
        ptasks = _preverify_tasks(plan, impls, done) if gpu else []
        if gpu and common["isolate"] and (vtasks or ptasks):
            # its start-up (imports, CUDA context, checker: ~10 s) overlaps the parallel phase;
            # it touches the GPU only once it has its tasks, when the parallel workers are done
            timer = Worker(job_header(device, args.plugin, None, args.verbose))
        if vtasks or ptasks:
            title = "verify suite" + (" + timed cases' verification" if ptasks else "")
            with RunProgress(console, sum(len(t["impls"]) for t in vtasks + ptasks), title,
                             quiet=quiet) as prog:
                prog.add_tasks(vtasks + ptasks)
                run_parallel(vtasks + ptasks, args.jobs or default_jobs(device),
                             on_event=lambda ev: (keep(ev), prog.event(ev)), **common)
            for r in rows:
                if r.get("phase") == "verify-suite" and r["status"] == "FAIL":
                    failed_suite.setdefault(f"{r['problem']}/{r['impl']}", f"{r['case']['id']}: {r['reason']}")
        ok_impls = [i for i in impls if i.key not in failed_suite]
        # timing needs the GPU to itself: one worker; without a GPU nothing is timed and the
        # cases go to parallel workers like the verify suite
        done = {row_key(r) for r in rows}   # a timed case that failed its verification is finished
        tasks = _todo(P.make_tasks(plan, ok_impls, time=True, split_by_layer=not gpu), done)
        tasks = _with_preverified(tasks, pre)
        with RunProgress(console, sum(len(t["impls"]) for t in tasks),
                         "timed cases" if gpu else "cases", quiet=quiet) as prog:
            prog.add_tasks(tasks)
            on_ev = lambda ev: (keep(ev), prog.event(ev))  # noqa: E731
            if gpu:
                res = run_tasks(tasks, ceilings=not args.no_ceilings and ceilings is None,
                                timing={k: getattr(tcfg, k) for k in ("mode", "min_samples", "time_cap_s")},
                                keep_raw=not args.no_raw, on_event=on_ev, prestarted=timer, **common)
                timer = None   # run_tasks took it, or discarded it with nothing to run
            else:
                res = run_parallel(tasks, args.jobs or default_jobs(device), on_event=on_ev, **common)
            ceilings = ceilings or res.ceilings
        for r in _failed_rows_for_suite(plan, impls, failed_suite):
            if row_key(r) not in done:
                rows.append(r)
                rd.append(r)
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

    with keep_lock:   # a row being kept as the interrupt came is in both, or in neither
        rows = _dedupe(rows)
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
    doc["wall_s"] = round(_time.monotonic() - t_start, 1)  # this invocation (a resumed run: its part)
    if interrupted:
        doc["interrupted"] = interrupted
        rd.mark_interrupted(interrupted, len(rows), f"python -m harness compare --resume {rd.path}")
    else:
        rd.clear_interrupted()
    paths = report.write_outputs(doc, rd.path)
    if args.plot:
        try:
            from .plots import make_plots
            made = make_plots(doc, rd.path)
            paths += made
            if not made:
                console.print("plots: nothing to draw in this run (no timed rows and no line counts)")
        except ImportError as e:
            console.print(f"plots skipped: matplotlib is not installed ({e})")
    rd.close()
    if args.format == "json":
        from .jsonsafe import dumps
        print(dumps(doc, indent=1))
    elif args.format == "csv":
        print(report.to_csv(doc["rows"]), end="")
    elif args.format == "md":
        print(report.to_markdown(doc), end="")
    else:
        report.print_compare(doc, console)
        n = {s: sum(r["status"] == s for r in doc["rows"]) for s in ("PASS", "FAIL", "SKIP")}
        console.print(f"{n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped; written: {rd.path}/")
    if interrupted:
        print(f"{interrupted}: {len(rows)} finished row(s) kept in {rd.path}/; finish with: "
              f"python -m harness compare --resume {rd.path}", file=sys.stderr)
        return 130 if "interrupted" in interrupted else 1
    return 1 if any(r["status"] == "FAIL" for r in doc["rows"]) else 0


def P_names(args) -> list[str]:
    from .cli import problems_arg
    return problems_arg(args)


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
