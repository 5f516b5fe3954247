"""Experiment (round 14): Triton's split softmax with the next unit's chunk loaded before the wait
(``PREFETCH``: the load of unit u + grid is issued as soon as unit u's exponentials are taken, so
HBM has work while the row's partners are awaited; it costs the registers of a second chunk, held
in the input dtype) at 32 and 16 values a thread, against the default (no prefetch), on long rows.
Each candidate under the layer's register-cap rule, on the grid its occupancy allows, beside
torch.softmax and a copy of the same bytes, cold L2, interleaved (harness.timing.time_cold);
every output checked against a float64 softmax. One JSON line per shape in
$OUT/exp_triton_split_prefetch.jsonl.

    python3 scripts/exp_triton_split_prefetch.py [--budget S]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = [(4096, 32000, "bfloat16"), (4096, 128256, "bfloat16"), (4096, 151936, "bfloat16"),
          (2048, 65536, "float16"), (8192, 20000, "bfloat16"), (4096, 32000, "float32"),
          (4096, 128256, "float32"), (4096, 50257, "bfloat16")]
#: (chunk, warps) with the prefetch
CANDIDATES = ((2048, 2), (1024, 1), (4096, 4), (2048, 4))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=150.0)
    a = ap.parse_args()
    import torch

    from exp_softmax_common import baselines, sink as make_sink, summarise, timing_config
    from harness.timing import time_cold
    from triton_src import dispatch, softmax_split as S

    deadline = time.time() + a.budget
    sink = make_sink("exp_triton_split_prefetch")
    tcfg = timing_config()
    for M, N, dt in SHAPES:
        if time.time() > deadline - 20:
            break
        x = torch.randn(M, N, device="cuda", dtype=getattr(torch, dt))
        ref = torch.softmax(x.double(), dim=1)
        (outs, launches), errors, info = baselines(x), {}, {}
        o = torch.empty_like(x)
        plan = dispatch.plan_softmax(x, o)
        outs["default"], launches["default"] = o, plan.launch
        info["default"] = {"variant": plan.variant, "config": dict(plan.config),
                           "regs": getattr(plan.launch.compiled, "n_regs", None),
                           "cap": plan.config.get("MAXNREG"),
                           "rows_in_flight": getattr(plan.launch, "grid", 0) // plan.config.get("C", 1)}
        for chunk, warps in CANDIDATES:
            if time.time() > deadline - 20:
                break
            key = f"split c={chunk} w={warps} prefetch"
            try:
                o = torch.empty_like(x)
                cfg = S.with_frame(S.config(N, chunk, warps, prefetch=True), x, o)
                launch = S.bind_launch(x, o, cfg)
                launches[key], outs[key] = launch, o
                info[key] = {"regs": launch.compiled.n_regs, "spills": launch.compiled.n_spills,
                             "grid": launch.grid, "C": launch.config["C"], "VEC": launch.config["VEC"],
                             "cap": launch.config.get("MAXNREG"),
                             "rows_in_flight": launch.grid // launch.config["C"]}
            except Exception as e:
                errors[key] = f"{type(e).__name__}: {e}"[:300]
        stats = time_cold(launches, tcfg, "cuda", errors=errors)
        torch.cuda.synchronize()
        res = summarise(stats, outs, ref, dt, info)
        with sink.open("a") as f:
            f.write(json.dumps({"shape": [M, N, dt], "results": res, "errors": errors}, default=str) + "\n")
        print(f"{M}x{N} {dt}: " + " | ".join(
            f"{k} {v['pct_copy']}% r{v.get('regs', '')} s{v.get('spills', '')} cap{v.get('cap', '')} rows{v.get('rows_in_flight', '')}"
            f"{'' if v.get('ok', True) else ' BAD'}" for k, v in res.items())
            + (f" | errors {errors}" if errors else ""), flush=True)
        del x, ref, outs, launches
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
