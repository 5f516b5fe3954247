"""``python -m harness``: list, verify, compare (and model, inspect, grid, selftest).

Exit status: 0 fine; 1 an implementation FAILed (verify/compare) or a self-test failed;
2 bad input (unknown name, malformed size, missing or failing plugin), printed as one line.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from rich.console import Console

from .args import UsageError, _device, _positive, _selectors, problems_arg, setup  # noqa: F401

EXTERNAL = ("harness.loc", "harness.model", "harness.inspect_cmd", "harness.grid", "harness.selftest", "harness.report_cmd",
            "harness.crosscheck", "harness.store_cmd", "harness.check_cmd", "harness.plan_cmd")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise UsageError(f"{self.prog}: {message}")


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
    _selectors(p, "verify", "roles to run (baseline,default,simple,variant or all; default: all)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("compare", help="verify, then time and tabulate (the main job)")
    _selectors(p, "models", "roles to run (default: baseline,library,default - each layer's "
                            "default implementation beside the torch baseline and the libraries; "
                            "all: every variant too)")
    p.add_argument("--out", help="output folder, new or empty (default results/<time>-<pid>-<random>)")
    p.add_argument("--resume", metavar="DIR", help="finish the interrupted run in DIR (its own "
                   "arguments are used; the rows it finished are kept)")
    p.add_argument("--format", choices=("table", "csv", "json", "md"), default="table")
    p.add_argument("--graph", action="store_true",
                   help="time CUDA-graph replays (warm L2, no launch overhead) instead of cold launches")
    p.add_argument("--time-cap", type=_positive(float, "--time-cap"), default=2.0,
                   help="seconds of sampling per row at most")
    p.add_argument("--min-samples", type=_positive(int, "--min-samples"), default=15)
    p.add_argument("--no-verify-suite", action="store_true",
                   help="skip the verify suite before timing (each timed case is still verified)")
    p.add_argument("--verify-suite-only", action="store_true",
                   help="the verify suite alone, nothing timed (harness check runs it after the timed suites)")
    p.add_argument("--compile-jobs", type=_positive(int, "--compile-jobs", allow_zero=True), default=None,
                   help="processes of the compile-ahead pool (default: one a core; 0: none, each worker "
                        "compiles what it runs)")
    p.add_argument("--no-ceilings", action="store_true", help="do not measure copy/GEMM ceilings")
    p.add_argument("--no-raw", action="store_true", help="leave raw samples out of the JSON")
    p.add_argument("--plot", action="store_true", help="write PNG plots into the output folder")
    p.add_argument("--gpu", default="h200", help="without a GPU: the datasheet GPU of the model's "
                   "ideal times (h200, h100, a100, b200, rtx4090, rtx5090)")
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
def _verify_row_json(r: dict) -> dict:
    return {"impl": r["impl"], "layer": r["layer"], "problem": r["problem"], "case": r["case"]["id"],
            "status": r["status"], "reason": r.get("reason") or "", "max_abs_err": r.get("max_abs_err"),
            "rel_err": r.get("rel_err"), "kind": r.get("kind"), "worst_ratio": r.get("worst_ratio"),
            "bias": r.get("bias")}


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
    # the kernel layers (those with a default of some problem) that have none of this one yet
    every = registry.all_impls()
    kernel_layers = sorted({i.layer for i in every if i.role == "default"},
                           key=lambda name: (registry.layer_info(name).order, name))
    for p in problems.all_problems():
        has = {i.layer for i in every if i.problem == p.name and i.role == "default"}
        data["problems"].append({"name": p.name, "description": p.description, "dtypes": list(p.dtypes),
                                 "metric": p.metric,
                                 "suites": {s: len(p.cases(s)) for s in problems.SUITES},
                                 "layers_without": [name for name in kernel_layers if name not in has]})
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
    for c in ("problem", "description", "dtypes", "metric", "cases per suite", "layers without one"):
        t.add_column(c)
    for p in data["problems"]:
        t.add_row(p["name"], p["description"], ", ".join(p["dtypes"]), p["metric"],
                  " ".join(f"{k}:{v}" for k, v in p["suites"].items()), ", ".join(p["layers_without"]) or "-")
    console.print(t)
    t = Table(title="implementations")
    for c in ("problem", "id", "description", "runs on", "available"):
        t.add_column(c, overflow="fold")
    for i in data["implementations"]:
        t.add_row(i["problem"], i["id"], i["description"], ",".join(i["devices"]),
                  "[green]yes[/green]" if i["available"] else f"[yellow]no[/yellow]: {i['reason']}")
    console.print(t)
    for mod, err in data["backend_errors"].items():
        console.print(f"[yellow]adapter backends/{mod}.py not loaded: {err}[/yellow]")
    return 0


def cmd_verify(args, console) -> int:
    from . import plan as P
    from .progress import RunProgress
    from .runner import run_parallel

    device, impls, plan = setup(args)
    tasks = P.make_tasks(plan, impls, phase="verify", split_by_layer=True)
    if not tasks:
        raise UsageError("no case matches the selectors")
    # JSON goes to stdout at the end; a line per finished row goes to stderr as it finishes (plain
    # lines, also in a terminal), so a long run killed by a limit still leaves what it verified
    plain = True if args.format == "json" else None
    from .store import verify_recorder
    rec = verify_recorder(args, getattr(args, "_argv", None) or sys.argv[1:])  # the run in the store
    with RunProgress(console, sum(len(t["impls"]) for t in tasks), "verify", plain=plain) as prog:
        prog.add_tasks(tasks)
        from .compare import default_jobs
        res = run_parallel(tasks, args.jobs or default_jobs(device), device=device, plugins=args.plugin,
                           timeout_s=args.timeout or (900 if device == "cpu" else 600),
                           isolate=not args.no_isolate, verbose=args.verbose,
                           on_event=lambda ev: (rec.on_event(ev), prog.event(ev)))
    rows = res.rows
    rec.finish({"rows": rows, "suite": args.suite}, "done")
    rec.close()
    if args.format == "json":
        from .jsonsafe import dumps
        print(dumps([_verify_row_json(r) for r in rows], indent=1))
    else:
        from .report import print_verify
        print_verify(rows, console)
        n = {s: sum(r["status"] == s for r in rows) for s in ("PASS", "FAIL", "SKIP")}
        console.print(f"{n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped")
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


def cmd_compare(args, console) -> int:
    from . import compare, plan as P
    argv = list(getattr(args, "_argv", None) or sys.argv[1:])
    resume = getattr(args, "resume", None)
    if resume:   # the interrupted run's own arguments
        argv = compare.resumed_argv(resume)
        args = build_parser().parse_args(argv)
    if not (args.roles or args.all):
        args.roles = ",".join(P.COMPARE_ROLES)
    return compare.run(args, console, argv, resume=resume)


def main(argv=None) -> int:
    console = Console(stderr=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=False, width=160)  # logs and pipes: tables fit 160 columns
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        args._argv = list(argv) if argv is not None else sys.argv[1:]
        import inspect as _inspect
        if len(_inspect.signature(args.func).parameters) >= 2:
            return int(args.func(args, console) or 0)
        return int(args.func(args) or 0)
    except (UsageError, ValueError, TypeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # a plugin that exits at import: one line, exit 2
        if e.code in (0, None):
            raise
        print(f"error: exit({e.code}) called while loading (a plugin?)", file=sys.stderr)
        return 2
    except RuntimeError as e:  # the runner could not keep a worker alive (broken environment)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
