"""``python -m harness check LAYER [LAYER ...]``: one GPU check for every layer.

Times every registered id of the layers AND every candidate (``register(..., candidate=True)``)
on the models and edge suites beside what a user would pick instead (torch eager, torch.compile,
the libraries) - each timed case verified first, three seeds - then verifies them on the verify
suite: two ``compare`` runs, the timed one first, so that a check stopped by a time limit keeps
the timings it reached (the verify suite of many layers takes minutes). It writes both runs' files
(the verify suite's in ``verify-suite/``) and ``check.json`` after each: per implementation, its
verify verdicts and, over the timed cases, its speed as a multiple of the better of torch eager
and torch.compile and its % of the ceiling (geomean and worst case), and prints that table last.
An implementation that fails the verify suite is still timed on the cases it passed.

What decides a planner switch or a candidate's fate is read off this output; the rules themselves
and their measurements go to docs/performance.md.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

ADMIT = Path(__file__).with_name("admit_candidates.py")
VERIFY_SUITE = "verify-suite"   # the folder of the verify suite's run, inside the check's
INTERRUPTED = 130               # compare's exit status when a signal stopped it
REFERENCE_ROLES = ("baseline", "library")


def add_parser(subparsers) -> argparse.ArgumentParser:
    from .args import _positive
    p = subparsers.add_parser("check", help="verify and time every variant and candidate of layers "
                              "beside torch eager, torch.compile and the libraries (GPU)")
    p.add_argument("layers", nargs="+", metavar="LAYER", help="cuda | cupy | triton | gluon | cute | "
                   "helion | tilelang | cutile | a plugin's layer")
    p.add_argument("--problem", action="append", help="only these problems (repeatable)")
    p.add_argument("--impl", action="append", default=[],
                   help="only these of the layers' ids (repeatable; the references always run)")
    p.add_argument("--only", choices=("all", "candidates"), default="all",
                   help="all: every id and candidate of the layers; candidates: the default, the "
                        "candidates and the ids named *_next")
    p.add_argument("--suite", default="models,edge", help="the timed suites (comma-separated)")
    p.add_argument("--no-verify-suite", action="store_true")
    p.add_argument("--out", help="output folder, new or empty (default results/check-<layers>-...)")
    p.add_argument("--time-cap", type=_positive(float, "--time-cap"), default=0.5)
    p.add_argument("--min-samples", type=_positive(int, "--min-samples"), default=10)
    p.add_argument("--timeout", type=_positive(float, "--timeout"), default=None)
    p.add_argument("--jobs", type=_positive(int, "--jobs"), default=None)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--store", metavar="URL", help="the results store (as compare's --store)")
    p.set_defaults(func=run)
    return p


def selected_ids(layers: list[str], problems: list[str] | None, only: str, impls: list[str]) -> list[str]:
    """The ids a check runs: the layers' ids and candidates (filtered by ``only``/``impls``) and,
    for every problem they cover, the references (baseline and library roles)."""
    from . import registry

    every = registry.all_impls() + [c for c in registry.candidates() if c.key not in
                                    {i.key for i in registry.all_impls()}]
    known = {i.layer for i in every}
    for layer in layers:
        if layer not in known:
            raise ValueError(f"LAYER: unknown layer {layer!r}; known: {', '.join(sorted(known))}")
    ours = [i for i in every if i.layer in layers and (not problems or i.problem in problems)]
    cand = {c.key for c in registry.candidates()}
    if only == "candidates":
        ours = [i for i in ours if i.role == "default" or i.key in cand or i.name.endswith("_next")]
    if impls:
        unknown = sorted(set(impls) - {i.id for i in ours})
        if unknown:
            raise ValueError(f"--impl: {unknown[0]!r} is not an id or candidate of {', '.join(layers)}")
        named = {i.problem for i in ours if i.id in impls}
        ours = [i for i in ours if i.id in impls or (i.role == "default" and i.problem in named)]
    if not ours:
        raise ValueError(f"LAYER: {', '.join(layers)} has nothing to check for the problems asked")
    probs = sorted({i.problem for i in ours})
    refs = [i for i in registry.all_impls() if i.problem in probs and i.role in REFERENCE_ROLES]
    return sorted({i.id for i in refs + ours}), probs


def run(args, console) -> int:
    import datetime as _dt

    from . import registry

    ids, probs = selected_ids(args.layers, args.problem, args.only, args.impl)
    registry.admit_candidates()   # this process selects them; the workers load ADMIT as a plugin
    out = Path(args.out or Path("results") / (f"check-{'-'.join(args.layers)}-"
                                              f"{_dt.datetime.now():%Y%m%d-%H%M%S}"))
    argv = ["compare", "--problem", ",".join(probs), "--plugin", str(ADMIT), "--no-raw",
            "--time-cap", str(args.time_cap), "--min-samples", str(args.min_samples), "--device", args.device]
    argv += [a for i in ids for a in ("--impl", i)]
    argv += ["--timeout", str(args.timeout)] if args.timeout else []
    argv += ["--jobs", str(args.jobs)] if args.jobs else []
    argv += ["--store", args.store] if args.store else []
    # the timed suites first (each timed case verified, then timed), the verify suite after, in a
    # run of its own: a check cut short by a time limit keeps its timings
    runs = [(out, ["--suite", args.suite, "--no-verify-suite"])]
    if not args.no_verify_suite:
        runs.append((out / VERIFY_SUITE, ["--suite", args.suite, "--verify-suite-only"]))
    rows, rc = [], 0
    for folder, extra in runs:
        rc = max(rc, _compare(argv + ["--out", str(folder)] + extra, folder))
        rows += json.loads((folder / "results.json").read_text())["rows"]
        summary = summarize(rows, set(args.layers))
        (out / "check.json").write_text(json.dumps(summary, indent=1))
        if rc == INTERRUPTED:
            break
    render(summary, console)
    console.print(f"written: {out}/check.json (and the runs' files: the timed suites in {out}/, the verify "
                  f"suite in {out / VERIFY_SUITE}/; compare's log: compare.txt in each)")
    return rc


def _compare(argv: list[str], folder: Path) -> int:
    """One ``compare`` run (its log to ``folder``/compare.txt); its exit status."""
    import shutil
    import tempfile

    from rich.console import Console

    from . import compare
    from .cli import build_parser

    cargs = build_parser().parse_args(argv)
    with tempfile.NamedTemporaryFile("w+", suffix=".txt", delete=False) as log:
        rc = compare.run(cargs, Console(file=log, width=200), argv)
    shutil.move(log.name, folder / "compare.txt")
    return rc


def _geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def summarize(rows: list[dict], layers: set[str]) -> dict:
    """Per problem and implementation: the verify verdicts and, over the timed cases that torch
    timed, x the better of torch eager and torch.compile (``x_best_torch``, > 1 is faster) and %
    of the ceiling, geomean and worst; per case, every row's figures."""
    timed = [r for r in rows if r.get("phase", "timed") == "timed" and r["status"] == "PASS" and r.get("time")]
    best: dict = {}
    for r in timed:
        if r["layer"] == "torch":
            k = r["case"]["id"]
            best[k] = min(best.get(k, math.inf), r["time"]["median_s"])
    out: dict = {"cases": {}, "impls": {}}
    for r in rows:
        s = out["impls"].setdefault(f"{r['problem']}/{r['impl']}", {
            "impl": r["impl"], "problem": r["problem"], "role": r.get("role"), "ours": r["layer"] in layers,
            "verify": {"PASS": 0, "FAIL": 0, "SKIP": 0}, "fails": [], "oom": [], "timed": 0,
            "geomean_x": None, "worst_x": None, "worst_case": None, "geomean_pct": None, "min_pct": None})
        s["verify"][r["status"]] = s["verify"].get(r["status"], 0) + 1
        if r["status"] == "FAIL" and len(s["fails"]) < 5:
            s["fails"].append(f"{r['case']['id']}: {str(r.get('reason'))[:200]}")
        if r.get("kind") == "out-of-memory" and len(s["oom"]) < 5:   # the machine's limit, not a verdict
            s["oom"].append(f"{r['case']['id']}: {str(r.get('reason'))[:200]}")
    per: dict = {}
    for r in timed:
        cid, t = r["case"]["id"], r["time"]["median_s"]
        x = best[cid] / t if cid in best else None
        c = out["cases"].setdefault(cid, {"problem": r["problem"], "best_torch_us": best.get(cid, 0) * 1e6,
                                          "rows": {}})
        c["rows"][r["impl"]] = {"us": t * 1e6, "x_best_torch": x, "pct_ceiling": r.get("pct_ceiling")}
        per.setdefault(f"{r['problem']}/{r['impl']}", []).append((x, r.get("pct_ceiling"), cid))
    for key, vals in per.items():
        s = out["impls"][key]
        xs = [(x, cid) for x, _, cid in vals if x]
        pct = [p for _, p, _ in vals if p]
        s["timed"] = len(vals)
        s["geomean_x"] = _geomean([x for x, _ in xs])
        if xs:
            s["worst_x"], s["worst_case"] = min(xs)
        s["geomean_pct"] = _geomean(pct)
        s["min_pct"] = min(pct) if pct else None
    return out


def render(summary: dict, console) -> None:
    from rich.table import Table

    t = Table(title="check: x the better of torch eager / torch.compile over the timed cases")
    for col in ("implementation", "role", "verify P/F/S", "timed", "geomean x", "worst x (case)",
                "geomean % ceil", "min %"):
        t.add_column(col)
    f = lambda v, nd=2: "-" if v is None else f"{v:.{nd}f}"  # noqa: E731
    for key, s in sorted(summary["impls"].items(), key=lambda kv: (kv[1]["problem"], not kv[1]["ours"],
                                                                  kv[1]["impl"])):
        v = s["verify"]
        t.add_row(key, s["role"] or "", f"{v.get('PASS', 0)}/{v.get('FAIL', 0)}/{v.get('SKIP', 0)}",
                  str(s["timed"]), f(s["geomean_x"]),
                  f"{f(s.get('worst_x'))} ({s.get('worst_case', '-')})", f(s["geomean_pct"], 1), f(s["min_pct"], 1))
    console.print(t)
    for key, s in summary["impls"].items():
        for line in s["fails"]:
            console.print(f"FAIL {key} {line}")
        for line in s.get("oom", []):
            console.print(f"SKIP {key} {line}")
