#!/usr/bin/env python3
"""Gate for kernels that have never run on a GPU before they become a layer's default.

Run on the GPU machine after the build, before the measured ``compare``::

    python3 scripts/gpu_gate.py OUT_DIR

It runs ``python -m harness compare --problem softmax --suite models`` (verify suite included) on
each candidate next to the kernel the planner would take without it, then decides per planner
table entry: kept when every row of the candidate PASSed and its geometric-mean time over the
long-row cases is no worse than the alternative's; else the entry is turned off in the source
(the same one-line edit is then committed, with the measurement that decided it). Writes
OUT_DIR/gate.json and prints the decisions.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LONG_ROW_BYTES = 32 * 1024   # the rows both candidates take: longer than a register-held row

# candidate default route -> (its forced variant, the alternatives without it, the table entry)
GATES = {
    "cuda-persist": ("cuda:softmax_persist", ["cuda:softmax_cluster"],
                     ("cuda_src/dispatch.py", r'"persist": True,', '"persist": False,')),
    "cute-smem": ("cute:softmax_smem", ["cute:softmax_cluster", "cute:softmax_split"],
                  ("cutlass_src/dispatch.py", r"SOFTMAX_SMEM_DEFAULT = True ", "SOFTMAX_SMEM_DEFAULT = False")),
}


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_out/gate")
    out.parent.mkdir(parents=True, exist_ok=True)
    impls = ["torch:softmax", "cuda:softmax", "cute:softmax"]
    for cand, alts, _ in GATES.values():
        impls += [cand] + alts
    cmd = [sys.executable, "-m", "harness", "compare", "--problem", "softmax", "--suite", "models",
           "--timeout", "150", "--out", str(out), "--format", "json"]
    for i in impls:
        cmd += ["--impl", i]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=420)
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines() if line.strip()] \
        if (out / "rows.jsonl").is_file() else []
    rows = [r for r in rows if "impl" in r]
    t, long_rows = {}, set()
    for r in rows:
        if r.get("phase") == "timed" and r["status"] == "PASS" and (r.get("time") or {}).get("median_s"):
            t[(r["impl"], r["case"]["id"])] = r["time"]["median_s"]
            if r["case"]["dims"]["N"] * (4 if r["case"]["dtype"] == "float32" else 2) > LONG_ROW_BYTES:
                long_rows.add(r["case"]["id"])
    decisions = {"compare_rc": proc.returncode, "stderr_tail": proc.stderr[-1500:]}
    for name, (cand, alts, (path, old, new)) in GATES.items():
        default = cand.split(":")[0] + ":softmax"
        bad = [f"{r['impl']} {r['case']['id']}: {r['status']} {r.get('reason', '')[:120]}" for r in rows
               if r["impl"] in (cand, default) and r["status"] != "PASS"]
        ratios = []
        for (impl, case), s in t.items():
            if impl != cand or case not in long_rows:
                continue
            alt = [t[(a, case)] for a in alts if (a, case) in t]
            if alt:
                ratios.append(s / min(alt))
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        keep = not bad and geo is not None and geo <= 1.0
        if not keep:
            f = ROOT / path
            f.write_text(f.read_text().replace(old, new, 1))
        decisions[name] = {"keep": keep, "failures": bad[:20], "time_ratio_vs_alternative": geo,
                           "cases": len(ratios), "edit": None if keep else f"{path}: {old!r} -> {new!r}"}
        print(f"[gate] {name}: {'kept' if keep else 'TURNED OFF'}; candidate / best alternative "
              f"{geo if geo is None else round(geo, 3)} over {len(ratios)} long-row cases; "
              f"{len(bad)} non-PASS rows" + ("".join(f"\n    {b}" for b in bad[:8])))
    (out / "gate.json").write_text(json.dumps(decisions, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
