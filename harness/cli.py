"""``python -m harness``: list, verify, compare (and model, inspect, grid, selftest).

Exit status: 0 fine; 1 an implementation FAILed (verify/compare) or a self-test failed;
2 bad input (unknown name, malformed size, missing or failing plugin), printed as one line.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import sys
from pathlib import Path

from rich.console import Console

EXTERNAL = ("harness.model", "harness.inspect_cmd", "harness.grid", "harness.selftest")


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise UsageError(f"{self.prog}: {message}")


def _problem_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _problems_arg(args) -> list[str]:
    """--problem given as a flat list (repeatable and comma-separated), in order, no repeats."""
    out: list[str] = []
    for group in getattr(args, "problem", None) or []:
        for name in (group if isinstance(group, list) else [group]):
            if name not in out:
                out.append(name)
    return out


def _selectors(p: argparse.ArgumentParser, suite_default: str | None) -> None:
    p.add_argument("--problem", action="append", type=_problem_list,
                   help="vector_add | softmax | gemm_epilogue (repeatable, or comma-separated)")
    p.add_argument("--layer", help="torch | cuda | cupy | triton | cute | a plugin's layer")
    p.add_argument("--impl", action="append", help="implementation id layer:name (repeatable)")
    p.add_argument("--suite", default=suite_default, help="smoke | verify | bench | full")
    p.add_argument("--dtype", action="append", help="float32|float16|bfloat16 (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="one custom case instead of a suite (needs --problem), e.g. --set M=1823 --set N=781")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE",
                   help="a Python file registering implementations with harness.register (repeatable)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds without progress before an implementation is killed as hung")
    p.add_argument("--no-isolate", action="store_true",
                   help="run in this process (no crash/hang protection; for debugging)")
    p.add_argument("-v", "--verbose", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m harness",
                 description="Compare GPU kernel abstraction layers: verify, time, tabulate.")
    sub = ap.add_subparsers(dest="command", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("list", help="problems, implementations, availability")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE")
    p.add_argument("--problem")
    p.add_argument("--layer")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("verify", help="check implementations against the float64 reference")
    _selectors(p, "verify")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("compare", help="verify, then time and tabulate (the main job)")
    _selectors(p, "bench")
    p.add_argument("--out", help="output folder (default results/<timestamp>)")
    p.add_argument("--format", choices=("table", "csv", "json", "md"), default="table")
    p.add_argument("--graph", action="store_true",
                   help="time CUDA-graph replays (warm L2, no launch overhead) instead of cold launches")
    p.add_argument("--time-cap", type=float, default=2.0, help="seconds of sampling per row at most")
    p.add_argument("--min-samples", type=int, default=15)
    p.add_argument("--no-verify-suite", action="store_true",
                   help="skip the verify suite before timing (each timed case is still verified)")
    p.add_argument("--no-ceilings", action="store_true", help="do not measure copy/GEMM ceilings")
    p.add_argument("--no-raw", action="store_true", help="leave raw samples out of the JSON")
    p.add_argument("--plot", action="store_true", help="write PNG plots into the output folder")
    p.set_defaults(func=cmd_compare)

    for modname in EXTERNAL:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        if hasattr(mod, "add_parser"):
            mod.add_parser(sub)
    return ap


# -- helpers -----------------------------------------------------------------------------------
def _device(arg: str) -> str:
    from .machine import has_gpu

    if arg == "auto":
        return "cuda" if has_gpu() else "cpu"
    if arg == "cuda" and not has_gpu():
        raise UsageError("--device: cuda requested but no CUDA GPU is visible")
    return arg


def _prepare_env(device: str) -> None:
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")


def parse_sets(problem, sets: list[str], dtype: str | None):
    kw = {}
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set: expected KEY=VALUE, got {s!r}")
        k, v = s.split("=", 1)
        kw[k.strip()] = v.strip()
    if dtype:
        kw["dtype"] = dtype
    return problem.case(**kw)


def plan_cases(args) -> list:
    """[(problem, [cases])] from the selectors; ValueError for unknown names."""
    from . import problems
    from .case import dtype_name
    from .problems import SUITES

    if args.suite not in SUITES:
        raise UsageError(f"--suite: unknown suite {args.suite!r}; choose from {', '.join(SUITES)}")
    dtypes = [dtype_name(d) for d in args.dtype] if args.dtype else None
    names = _problems_arg(args)
    probs = [problems.get(n) for n in names] if names else problems.all_problems()
    plan = []
    if args.set:
        if len(names) != 1:
            raise UsageError("--set needs exactly one --problem")
        p = probs[0]
        cases = [parse_sets(p, args.set, d) for d in (dtypes or [None])]
        return [(p, cases)]
    for p in probs:
        cases = p.cases(args.suite)
        if dtypes:
            bad = [d for d in dtypes if d not in p.dtypes]
            if names and bad:
                raise UsageError(f"--dtype: {p.name} takes {', '.join(p.dtypes)}, not {', '.join(bad)}")
            cases = [c for c in cases if c.dtype in dtypes]
        if cases:
            plan.append((p, cases))
    return plan


def make_tasks(plan, impls, *, seeds=None, time=False, prefix="t") -> list[dict]:
    tasks = []
    for p, cases in plan:
        ids = [i.id for i in impls if i.problem == p.name]
        if not ids:
            continue
        for c in cases:
            t = {"id": f"{prefix}{len(tasks)}", "problem": p.name, "case": c.to_json(),
                 "impls": ids, "time": time}
            if seeds is not None:
                t["seeds"] = list(seeds)
            tasks.append(t)
    return tasks


def _progress_run(tasks, console, quiet: bool, **kw):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .runner import run_tasks

    if quiet or not tasks:
        return run_tasks(tasks, **kw)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as prog:
        bar = prog.add_task("starting", total=len(tasks))
        names = {t["id"]: f"{t['problem']} {Path(t['case']['id']).name}" for t in tasks}

        def on_event(ev):
            if ev.get("event") == "task":
                prog.update(bar, description=names.get(ev["task"], ev["task"])[:70])
            elif ev.get("event") == "step":
                prog.update(bar, description=f"{names.get(ev['task'], '')[:50]} {ev['phase']} {ev['impl']}"[:90])
            elif ev.get("event") == "task_done":
                prog.advance(bar)
        return run_tasks(tasks, on_event=on_event, **kw)


def _select(args):
    from . import registry

    try:
        names = _problems_arg(args)
        impls = []
        for name in names or [None]:
            impls += registry.select(problem=name, layer=args.layer, impl=args.impl)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not impls:
        raise UsageError("no implementation matches the selectors (see `python -m harness list`)")
    return impls


def _verify_row_json(r: dict) -> dict:
    return {"impl": r["impl"], "layer": r["layer"], "problem": r["problem"], "case": r["case"]["id"],
            "status": r["status"], "reason": r.get("reason") or "", "max_abs_err": r.get("max_abs_err"),
            "rel_err": r.get("rel_err"), "kind": r.get("kind")}


def _attach_loc(rows) -> None:
    from . import registry

    try:
        from . import loc
    except ImportError:
        return
    cache = {}
    for r in rows:
        key = f"{r['problem']}/{r['impl']}"
        if key not in cache:
            try:
                impl = registry.get(r["problem"], r["impl"])
                cache[key] = loc.count_impl(impl)
            except Exception as e:
                cache[key] = {"kernel": None, "host": None, "error": str(e)}
        r["loc"] = {k: cache[key].get(k) for k in ("kernel", "host")}


# -- commands ----------------------------------------------------------------------------------
def cmd_list(args, console) -> int:
    from . import problems, registry

    os.environ.setdefault("TRITON_INTERPRET", "0" if _device("auto") == "cuda" else "1")
    registry.load_plugins(args.plugin)
    try:
        impls = registry.select(problem=args.problem, layer=args.layer)
    except ValueError as e:
        raise UsageError(str(e)) from None
    data = {"problems": [], "implementations": [], "backend_errors": registry.BACKEND_ERRORS}
    for p in problems.all_problems():
        data["problems"].append({"name": p.name, "description": p.description, "dtypes": list(p.dtypes),
                                 "metric": p.metric,
                                 "suites": {s: len(p.cases(s)) for s in problems.SUITES}})
    for i in impls:
        data["implementations"].append({"id": i.id, "problem": i.problem, "layer": i.layer,
                                        "description": i.description, "devices": list(i.devices),
                                        "available": i.available() is None,
                                        "reason": i.available() or "", "origin": i.origin})
    if args.format == "json":
        print(json.dumps(data, indent=1))
        return 0
    from rich.table import Table

    t = Table(title="problems")
    for c in ("problem", "description", "dtypes", "metric", "cases per suite"):
        t.add_column(c)
    for p in data["problems"]:
        t.add_row(p["name"], p["description"], ", ".join(p["dtypes"]), p["metric"],
                  " ".join(f"{k}:{v}" for k, v in p["suites"].items()))
    console.print(t)
    t = Table(title="implementations")
    for c in ("problem", "id", "description", "runs on", "available"):
        t.add_column(c, overflow="fold")
    for i in data["implementations"]:
        t.add_row(i["problem"], i["id"], i["description"], ",".join(i["devices"]),
                  "[green]yes[/green]" if i["available"] else f"[yellow]no[/yellow]: {i['reason']}")
    console.print(t)
    for mod, err in data["backend_errors"].items():
        console.print(f"[yellow]adapter {mod} failed to import: {err}[/yellow]")
    return 0


def _setup(args):
    """What verify and compare share: the device (and the CPU mode's environment), the plugins,
    the selected implementations and the planned cases."""
    from . import registry

    device = _device(args.device)
    _prepare_env(device)
    registry.load_plugins(args.plugin)
    impls = _select(args)
    try:
        plan = plan_cases(args)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return device, impls, plan


def cmd_verify(args, console) -> int:
    device, impls, plan = _setup(args)
    tasks = make_tasks(plan, impls)
    if not tasks:
        raise UsageError("no case matches the selectors")
    res = _progress_run(tasks, console, args.format == "json", device=device, plugins=args.plugin,
                        timeout_s=args.timeout or (900 if device == "cpu" else 600),
                        isolate=not args.no_isolate, verbose=args.verbose)
    rows = res.rows
    if args.format == "json":
        print(json.dumps([_verify_row_json(r) for r in rows], indent=1, default=str))
    else:
        from .report import print_verify
        print_verify(rows, console)
        n = {s: sum(r["status"] == s for r in rows) for s in ("PASS", "FAIL", "SKIP")}
        console.print(f"{n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped")
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


def cmd_compare(args, console) -> int:
    from . import report
    from .machine import machine_info
    from .timing import TimingConfig

    device, impls, plan = _setup(args)
    now = _dt.datetime.now(_dt.timezone.utc)
    outdir = Path(args.out) if args.out else Path("results") / now.strftime("%Y%m%d-%H%M%S")
    quiet = args.format != "table"
    timeout = args.timeout or (1800 if device == "cpu" else 600)
    common = dict(device=device, plugins=args.plugin, timeout_s=timeout, isolate=not args.no_isolate,
                  verbose=args.verbose)
    rows: list[dict] = []
    failed_suite: dict[str, str] = {}
    if not args.no_verify_suite and not args.set:
        vargs = argparse.Namespace(**{**vars(args), "suite": "verify", "set": []})
        vplan = plan_cases(vargs)
        vtasks = make_tasks(vplan, impls, prefix="v")
        if not quiet:
            console.print(f"verify suite: {len(vtasks)} cases before timing")
        vres = _progress_run(vtasks, console, quiet, **common)
        for r in vres.rows:
            r["phase"] = "verify-suite"
            if r["status"] == "FAIL" and f"{r['problem']}/{r['impl']}" not in failed_suite:
                failed_suite[f"{r['problem']}/{r['impl']}"] = f"{r['case']['id']}: {r['reason']}"
        rows += vres.rows
    tcfg = TimingConfig(mode="graph" if args.graph else "cold", time_cap_s=args.time_cap,
                        min_samples=args.min_samples)
    ok_impls = [i for i in impls if i.key not in failed_suite]
    tasks = make_tasks(plan, ok_impls, seeds=(0,), time=True)
    res = _progress_run(tasks, console, quiet, ceilings=(device == "cuda" and not args.no_ceilings),
                        timing={k: getattr(tcfg, k) for k in ("mode", "min_samples", "time_cap_s")},
                        keep_raw=not args.no_raw, **common)
    rows += res.rows
    # implementations that failed the verify suite: their timed cases are FAIL, not timed
    for p, cases in plan:
        for i in impls:
            if i.problem == p.name and i.key in failed_suite:
                for c in cases:
                    rows.append({"problem": p.name, "impl": i.id, "layer": i.layer, "name": i.name,
                                 "description": i.description, "case": c.to_json(), "status": "FAIL",
                                 "kind": "failed-verify-suite",
                                 "reason": f"failed the verify suite ({failed_suite[i.key]}); not timed",
                                 "time": None, "compile": {}, "traffic_bytes": p.traffic(c),
                                 "flops": p.flops(c), "max_abs_err": None, "rel_err": None})
    machine = machine_info()
    _attach_loc(rows)
    report.add_metrics(rows, res.ceilings, res.vendor, machine.get("gpu"))
    doc = report.results_doc(rows, command="python -m harness " + " ".join(sys.argv[1:]),
                             machine=machine, ceilings=res.ceilings, vendor=res.vendor,
                             timing={**vars(tcfg), "description": tcfg.describe() if device == "cuda"
                                     else "no GPU: nothing timed (timing needs a GPU)"},
                             suite=args.suite, created=now.isoformat(timespec="seconds"))
    paths = report.write_outputs(doc, outdir)
    if args.plot:
        try:
            from .plots import make_plots
            paths += make_plots(doc, outdir)
        except ImportError as e:
            console.print(f"[yellow]plots skipped: {e}[/yellow]")
    if args.format == "json":
        print(json.dumps(doc, indent=1, default=str))
    elif args.format == "csv":
        print(report.to_csv(rows), end="")
    elif args.format == "md":
        print(report.to_markdown(doc), end="")
    else:
        report.print_compare(doc, console)
        n = {s: sum(r["status"] == s for r in rows) for s in ("PASS", "FAIL", "SKIP")}
        console.print(f"{n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped; "
                      f"written: {', '.join(str(p) for p in paths)}")
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


def main(argv=None) -> int:
    console = Console(stderr=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=False, width=200)  # logs and pipes: keep the wide tables readable
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        import inspect as _inspect
        if len(_inspect.signature(args.func).parameters) >= 2:
            return int(args.func(args, console) or 0)
        return int(args.func(args) or 0)
    except (UsageError, ValueError, TypeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # the runner could not keep a worker alive (broken environment)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
