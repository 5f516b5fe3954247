"""The headline answer: one summary per problem, one line per layer (its default implementation,
and its teaching twin when it ran).

Per line: kernel, host and plan lines of code (harness.loc), the geometric mean of % of the
ceiling (a copy of the same bytes for memory-bound problems, the vendor GEMM for GEMMs) and of the
speed against the torch eager baseline and against the best library row (the fastest ``library``
row of each case: torch.compile, quack, Liger; a library that declines a case leaves that case to
the others), the worst case, the layer's other costs -- the cold
first-call compile time (s) and the host time per call (us), geometric means over the line's
cases, and the tuning time where the layer autotunes (``tune_s`` in the launch's info or the
registration's extra) -- and PASS / FAIL / SKIP counts over the timed cases. The means are taken over the same cases for every line: a case that any line could not
time (FAIL, SKIP, no baseline) is left out of every line's mean and named, never averaged over
fewer cases silently; a library row that declines or fails a case does not take the case out of the
other lines' means (a library's own line averages over the cases it timed, which it counts). Without timings (CPU mode) the lines say what was checked instead.
"""
from __future__ import annotations

import math

ROLE_ORDER = {"baseline": 0, "library": 1, "default": 2, "simple": 3, "variant": 4}


def _geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _geomean_cost(xs):
    """Geometric mean of a cost that may be 0 (an ahead-of-time build compiles nothing at the
    first call): 0 when every value is 0, else the mean of the positive ones; None without data."""
    xs = [x for x in xs if isinstance(x, (int, float))]
    if not xs:
        return None
    return 0.0 if not any(x > 0 for x in xs) else _geomean(xs)


def compile_s(r: dict):
    """The cold first call's compile time of a row: what the layer reports (``compile_s``),
    else the measured first call."""
    c = r.get("compile") or {}
    v = c.get("compile_s", c.get("first_call_s"))
    return v if isinstance(v, (int, float)) else None


def tune_s(r: dict, impl_extra: dict | None = None):
    c = r.get("compile") or {}
    v = c.get("tune_s", (impl_extra or {}).get("tune_s"))
    return v if isinstance(v, (int, float)) else None


def _label(case: dict) -> str:
    dims = "x".join(str(v) for v in case["dims"].values())
    extra = " ".join(f"{k}={v}" for k, v in sorted(case.get("params", {}).items()))
    return f"{dims} {case['dtype']}" + (f" {extra}" if extra else "")


def summarize(rows: list[dict], roles=("baseline", "default", "simple")) -> dict:
    """{problem: {"lines": [...], "cases": n, "common_cases": n, "excluded": [...]}}"""
    out: dict = {}
    problems = []
    for r in rows:
        if r["problem"] not in problems:
            problems.append(r["problem"])
    for prob in problems:
        timed = [r for r in rows if r["problem"] == prob and r.get("phase", "timed") != "verify-suite"
                 and r.get("role", "variant") in roles]
        suite = [r for r in rows if r["problem"] == prob and r.get("phase") == "verify-suite"
                 and r.get("role", "variant") in roles]
        impls = sorted({r["impl"] for r in timed} | {r["impl"] for r in suite},
                       key=lambda i: (ROLE_ORDER.get(_role(rows, i), 9), i))
        cases = []
        for r in timed:
            if r["case"]["id"] not in cases:
                cases.append(r["case"]["id"])
        by = {(r["impl"], r["case"]["id"]): r for r in timed}
        measured = any((r.get("time") or {}).get("median_s") for r in timed)
        excluded = []
        if measured:
            for c in cases:
                missing = [i for i in {r["impl"] for r in timed if r.get("role") != "library"}
                           if not (by.get((i, c)) or {}).get("time")
                           or (by.get((i, c)) or {}).get("status") != "PASS"]
                if missing:
                    excluded.append({"case": c, "not_timed": sorted(missing)})
        common = [c for c in cases if c not in {e["case"] for e in excluded}]
        best_lib = {}  # case -> the fastest library row's median (PASS rows only)
        for r in timed:
            t = (r.get("time") or {}).get("median_s")
            if r.get("role") == "library" and r["status"] == "PASS" and t:
                c = r["case"]["id"]
                best_lib[c] = min(best_lib.get(c, t), t)
        lines = []
        for impl in impls:
            rs = [r for r in timed if r["impl"] == impl]
            vs = [r for r in suite if r["impl"] == impl]
            any_row = (rs or vs)[0]
            line = {"impl": impl, "layer": any_row["layer"], "role": any_row.get("role", "variant"),
                    "loc_kernel": (any_row.get("loc") or {}).get("kernel"),
                    "loc_host": (any_row.get("loc") or {}).get("host"),
                    "loc_plan": (any_row.get("loc") or {}).get("plan"),
                    "compile_s": _geomean_cost([compile_s(r) for r in rs + vs]),
                    "tune_s": _tune_total(prob, impl, rs + vs),
                    "pass": sum(r["status"] == "PASS" for r in rs),
                    "fail": sum(r["status"] == "FAIL" for r in rs),
                    "skip": sum(r["status"] == "SKIP" for r in rs),
                    "verify_suite": {s: sum(r["status"] == s for r in vs) for s in ("PASS", "FAIL", "SKIP")}}
            if measured:
                cr = [by[(impl, c)] for c in common if (impl, c) in by]
                line["geomean_pct_ceiling"] = _geomean([r.get("pct_ceiling") for r in cr])
                line["geomean_vs_eager"] = _geomean([r.get("speedup_vs_baseline") for r in cr])
                if best_lib:
                    line["geomean_vs_library"] = _geomean(
                        [best_lib[r["case"]["id"]] / r["time"]["median_s"] for r in cr
                         if r["case"]["id"] in best_lib and (r.get("time") or {}).get("median_s")])
                line["host_us"] = _geomean_cost([(r.get("time") or {}).get("host_us") for r in cr])
                # the worst case: the slowest against torch eager (where there is a baseline), else
                # the lowest share of the ceiling
                worst = (min((r for r in cr if r.get("speedup_vs_baseline")),
                             key=lambda r: r["speedup_vs_baseline"], default=None)
                         or min((r for r in cr if r.get("pct_ceiling")), key=lambda r: r["pct_ceiling"],
                                default=None))
                if worst:
                    line["worst"] = {"case": _label(worst["case"]), "pct_ceiling": worst.get("pct_ceiling"),
                                     "vs_eager": worst.get("speedup_vs_baseline")}
                line["cases_in_mean"] = len(cr)
            fails = [r for r in rs + vs if r["status"] == "FAIL"]
            if fails:
                line["first_failure"] = f"{_label(fails[0]['case'])}: {fails[0].get('reason', '')}"
            lines.append(line)
        out[prob] = {"lines": lines, "cases": len(cases), "common_cases": len(common),
                     "excluded": excluded, "measured": measured, "library": bool(best_lib)}
    return out


def _tune_total(problem: str, impl: str, rows: list[dict]):
    """Seconds the layer spent autotuning for this line's rows (None where it does not tune)."""
    extra = {}
    try:
        from . import registry
        extra = registry.get(problem, impl).extra
    except Exception:
        pass
    ts = [t for t in (tune_s(r, extra) for r in rows) if t is not None]
    if not ts and isinstance(extra.get("tune_s"), (int, float)):
        ts = [extra["tune_s"]]
    return sum(ts) if ts else None


def _role(rows, impl):
    for r in rows:
        if r["impl"] == impl:
            return r.get("role", "variant")
    return "variant"


def _worst(w) -> str:
    if not w:
        return "-"
    return f"{_fmt(w.get('vs_eager'), 'x', 2)}, {_fmt(w.get('pct_ceiling'), '%')} ({w['case']})"


def _fmt(x, unit="", nd=1):
    return "-" if x is None else f"{x:.{nd}f}{unit}"


def _loc(ln) -> str:
    return "/".join("-" if ln.get(k) is None else str(ln[k]) for k in ("loc_kernel", "loc_host", "loc_plan"))


def _tunes(s) -> bool:
    return any(ln.get("tune_s") is not None for ln in s["lines"])


def _costs(ln, s) -> list[str]:
    out = [_fmt(ln.get("compile_s"), "", 2)]
    if s["measured"]:
        out.append(_fmt(ln.get("host_us"), "", 1))
    if _tunes(s):
        out.append(_fmt(ln.get("tune_s"), "", 1))
    return out


def _cost_cols(s) -> list[str]:
    return (["compile s"] + (["host us"] if s["measured"] else [])
            + (["tune s"] if _tunes(s) else []))


def render_rich(summary: dict, console) -> None:
    from rich.table import Table

    for prob, s in summary.items():
        title = f"headline: {prob}"
        if s["measured"]:
            title += f" - geometric means over the {s['common_cases']} of {s['cases']} case(s) every line timed"
        t = Table(title=title, title_justify="left")
        cols = ["implementation", "role", "LOC kernel/host/plan"]
        cols += ((["% ceiling", "vs eager"] + (["vs best library"] if s.get("library") else [])
                  + ["worst vs eager"]) if s["measured"] else ["verify suite"])
        cols += _cost_cols(s) + ["timed cases P/F/S"]
        for c in cols:
            t.add_column(c, overflow="ellipsis", no_wrap=True, max_width=44)
        for ln in s["lines"]:
            cells = [ln["impl"], ln["role"], _loc(ln)]
            if s["measured"]:
                w = ln.get("worst")
                cells += [_fmt(ln.get("geomean_pct_ceiling"), "%"), _fmt(ln.get("geomean_vs_eager"), "x", 2)]
                cells += [_fmt(ln.get("geomean_vs_library"), "x", 2)] if s.get("library") else []
                cells += [_worst(w)]
            else:
                v = ln["verify_suite"]
                cells += [f"{v['PASS']} pass, {v['FAIL']} fail, {v['SKIP']} skip"]
            cells += _costs(ln, s) + [f"{ln['pass']}/{ln['fail']}/{ln['skip']}"]
            t.add_row(*cells)
        console.print(t)
        for e in s["excluded"]:
            console.print(f"  left out of every mean: {e['case']} (not timed: {', '.join(e['not_timed'])})",
                          overflow="ellipsis", no_wrap=True)


def render_md(summary: dict) -> list[str]:
    lines = []
    for prob, s in summary.items():
        lines += [f"### headline: {prob}", ""]
        if s["measured"]:
            lines += [f"Geometric means over the {s['common_cases']} of {s['cases']} case(s) that every "
                      f"line below timed.", "",
                      "| implementation | role | LOC kernel/host/plan | % same-size copy or vendor GEMM (geomean) "
                      "| vs eager (geomean) | " + ("vs best library (geomean) | " if s.get("library") else "")
                      + "worst case vs eager | " + " | ".join(_cost_cols(s)) + " | timed P/F/S |",
                      "|---|---|---|---|---|---|" + ("---|" if s.get("library") else "")
                      + "---|" * len(_cost_cols(s)) + "---|"]
        else:
            lines += ["| implementation | role | LOC kernel/host/plan | verify suite | "
                      + " | ".join(_cost_cols(s)) + " | timed P/F/S |",
                      "|---|---|---|---|" + "---|" * len(_cost_cols(s)) + "---|"]
        for ln in s["lines"]:
            loc = _loc(ln)
            costs = " | ".join(_costs(ln, s))
            pfs = f"{ln['pass']}/{ln['fail']}/{ln['skip']}"
            if s["measured"]:
                w = ln.get("worst")
                worst = _worst(w)
                lib = f"{_fmt(ln.get('geomean_vs_library'), 'x', 2)} | " if s.get("library") else ""
                lines.append(f"| {ln['impl']} | {ln['role']} | {loc} | {_fmt(ln.get('geomean_pct_ceiling'), '%')} | "
                             f"{_fmt(ln.get('geomean_vs_eager'), 'x', 2)} | {lib}{worst} | {costs} | {pfs} |")
            else:
                v = ln["verify_suite"]
                lines.append(f"| {ln['impl']} | {ln['role']} | {loc} | {v['PASS']} pass, {v['FAIL']} fail, "
                             f"{v['SKIP']} skip | {costs} | {pfs} |")
        for e in s["excluded"]:
            lines.append(f"\nLeft out of every mean: `{e['case']}` (not timed: {', '.join(e['not_timed'])}).")
        lines.append("")
    return lines
