#!/usr/bin/env python3
"""Gate for kernels that have never run on a GPU before they become a layer's default.

Run on the GPU machine after the build, before the measured ``compare``::

    python3 scripts/gpu_gate.py OUT_DIR [PROBLEM ...]

Per problem (softmax, gemm_epilogue; all unless named) it runs ``python -m harness compare
--problem P --suite models`` (verify suite included) on each candidate next to the kernel the
planner would take without it, then decides per planner table entry: kept when every row of the
candidate (and of its layer's default) PASSed and its geometric-mean time over the cases the entry
is about is no worse than the alternative's; else the entry is turned off in the source (the same
one-line edit is then committed, with the measurement that decided it). The cases: softmax, the
long rows (N x element size > LONG_ROW_BYTES); gemm_epilogue, the small-M cases (M <= the
planner's stream_max_m) whose plan the entry changes. Writes OUT_DIR/<problem>/ (the compare's
files), OUT_DIR/gate.json, and prints the decisions.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LONG_ROW_BYTES = 32 * 1024   # the rows both softmax candidates take: longer than a register-held row

# candidate default route -> (problem, its forced variant, the alternatives without it, the table entry)
GATES = {
    "cuda-persist": ("softmax", "cuda:softmax_persist", ["cuda:softmax_cluster"],
                     ("cuda_src/dispatch.py", r'"persist": True,', '"persist": False,')),
    "cute-smem": ("softmax", "cute:softmax_smem", ["cute:softmax_cluster", "cute:softmax_split"],
                  ("cutlass_src/dispatch.py", r"SOFTMAX_SMEM_DEFAULT = True ", "SOFTMAX_SMEM_DEFAULT = False")),
    # small-M GEMM on the tiled kernel with split-K (the default itself) against the ws split-K
    # kernel the planner takes with the entry off
    "cuda-tiled-splitk": ("gemm_epilogue", "cuda:gemm_epilogue", ["cuda:gemm_epilogue_splitk"],
                          ("cuda_src/dispatch.py", '"tiled_splitk": True,', '"tiled_splitk": False,')),
}

# problem -> (the compare's other rows: torch and the layers' defaults, seconds it may take, extra flags)
# The two together stay under ~7 minutes (the GEMM one, verify suite included, took under a minute
# on the H200); a compare cut at its limit turns its entries off (rows unverified).
COMPARES = {
    "softmax": (["torch:softmax", "cuda:softmax", "cute:softmax"], 300, []),
    "gemm_epilogue": (["torch:gemm_epilogue"], 120, ["--no-ceilings"]),
}


def _long_row(case: dict) -> bool:
    return case["dims"]["N"] * (4 if case["dtype"] == "float32" else 2) > LONG_ROW_BYTES


def _tiled_splitk_changes(case: dict) -> bool:
    """A small-M case whose plan the "tiled_splitk" entry changes (with it off the planner takes
    the ws split-K kernel or ping-pong; cases it leaves alone say nothing about it)."""
    sys.path.insert(0, str(ROOT))
    from cuda_src import dispatch

    d, p = case["dims"], case.get("params", {})
    if d["M"] > dispatch.GEMM["stream_max_m"]:
        return False

    def kernels(flag):
        old = dispatch.GEMM["tiled_splitk"]
        dispatch.GEMM["tiled_splitk"] = flag
        try:
            plan = dispatch.plan_gemm("auto", d["M"], d["N"], d["K"], case["dtype"], p.get("act", "relu"),
                                      bool(int(p.get("bias", 1))))
            return [(q.kernel, q.grid) for q in plan.plans]
        finally:
            dispatch.GEMM["tiled_splitk"] = old

    return kernels(True) != kernels(False)


SELECT = {"cuda-persist": _long_row, "cute-smem": _long_row, "cuda-tiled-splitk": _tiled_splitk_changes}


def _compare(problem: str, impls: list[str], out: Path) -> tuple[list[dict], dict]:
    others, limit, extra = COMPARES[problem]
    cmd = [sys.executable, "-m", "harness", "compare", "--problem", problem, "--suite", "models",
           "--timeout", "150", "--out", str(out), "--format", "json", *extra]
    for i in others + impls:
        cmd += ["--impl", i]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit)
        info = {"compare_rc": proc.returncode, "stderr_tail": proc.stderr[-1500:]}
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        info = {"compare_rc": None, "timed_out_s": limit, "stderr_tail": err[-1500:]}
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines() if line.strip()] \
        if (out / "rows.jsonl").is_file() else []
    return [r for r in rows if "impl" in r], info


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_out/gate")
    problems = sys.argv[2:] or list(COMPARES)
    out.mkdir(parents=True, exist_ok=True)
    decisions = {}
    for problem in problems:
        gates = {k: v for k, v in GATES.items() if v[0] == problem}
        impls = []
        for _, cand, alts, _ in gates.values():
            impls += [i for i in [cand] + alts if i not in impls]
        rows, info = _compare(problem, impls, out / problem)
        decisions[problem] = info
        t, cases = {}, {}
        for r in rows:
            if r.get("phase") == "timed" and r["status"] == "PASS" and (r.get("time") or {}).get("median_s"):
                t[(r["impl"], r["case"]["id"])] = r["time"]["median_s"]
                cases[r["case"]["id"]] = r["case"]
        for name, (_, cand, alts, (path, old, new)) in gates.items():
            default = cand.split(":")[0] + ":" + problem
            bad = [f"{r['impl']} {r['case']['id']}: {r['status']} {r.get('reason', '')[:120]}" for r in rows
                   if r["impl"] in (cand, default) and r["status"] != "PASS"]
            timed = {r["case"]["id"] for r in rows if r["impl"] == cand and r.get("phase") == "timed"}
            ratios = {}
            for (impl, case), s in t.items():
                if impl != cand or not SELECT[name](cases[case]):
                    continue
                alt = [t[(a, case)] for a in alts if (a, case) in t]
                if alt:
                    ratios[case] = s / min(alt)
            geo = math.exp(sum(map(math.log, ratios.values())) / len(ratios)) if ratios else None
            # a compare cut at its limit has not verified every row: the entry goes off
            keep = not bad and geo is not None and geo <= 1.0 and "timed_out_s" not in info
            if not keep:
                f = ROOT / path
                f.write_text(f.read_text().replace(old, new, 1))
            decisions[name] = {"keep": keep, "failures": bad[:20], "time_ratio_vs_alternative": geo,
                               "cases": len(ratios), "ratios": {c: round(v, 4) for c, v in sorted(ratios.items())},
                               "timed_rows": len(timed), "edit": None if keep else f"{path}: {old!r} -> {new!r}"}
            print(f"[gate] {name}: {'kept' if keep else 'TURNED OFF'}; candidate / best alternative "
                  f"{geo if geo is None else round(geo, 3)} over {len(ratios)} cases; "
                  f"{len(bad)} non-PASS rows" + ("".join(f"\n    {b}" for b in bad[:8])))
        (out / "gate.json").write_text(json.dumps(decisions, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
