"""Experiment (round 14): Triton's split softmax on long 16-bit rows that are not 16-byte aligned
(odd N: every row but the first starts off a 16-byte boundary, so the kernel addresses each row
from the boundary before it, ``aligned_frame``). The planned chunk against the other chunk sizes
(32 values a thread, so the warps follow), each with no register cap and with caps below its
uncapped count, each on the grid its occupancy allows, beside the layer's default, torch.softmax
and a copy of the same bytes, cold L2, interleaved (harness.timing.time_cold); every output
checked against a float64 softmax. One JSON line per shape in $OUT/exp_triton_framed_long.jsonl.

    python3 scripts/exp_triton_framed_long.py [--budget S]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = [(4096, 50257, "bfloat16"), (8192, 50257, "bfloat16"), (1024, 200003, "bfloat16"),
          (4096, 32001, "float16"), (2048, 100003, "bfloat16"), (4096, 50257, "float32")]
CHUNKS = (2048, 4096, 8192)
CAPS = (None, 64, 56, 48)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=150.0)
    a = ap.parse_args()
    import torch

    from exp_softmax_common import baselines, sink as make_sink, summarise, timing_config
    from harness.timing import time_cold
    from triton_src import device_facts, dispatch, softmax_split as S

    deadline = time.time() + a.budget
    sink = make_sink("exp_triton_framed_long")
    tcfg = timing_config()
    facts = device_facts(torch.device("cuda"))
    for M, N, dt in SHAPES:
        if time.time() > deadline - 20:
            break
        x = torch.randn(M, N, device="cuda", dtype=getattr(torch, dt))
        ref = torch.softmax(x.double(), dim=1)
        (outs, launches), errors, info = baselines(x), {}, {}
        o = torch.empty_like(x)
        plan = dispatch.plan_softmax(x, o)
        outs["default"], launches["default"] = o, plan.launch
        info["default"] = {"variant": plan.variant, "config": dict(plan.config)}
        for chunk in CHUNKS:
            uncapped_regs = None
            for cap in CAPS:
                if time.time() > deadline - 20:
                    break
                if cap is not None and (uncapped_regs is None or cap >= uncapped_regs):
                    continue
                key = f"split c={chunk} cap={cap}"
                try:
                    o = torch.empty_like(x)
                    cfg = S.with_frame(S.config(N, chunk, dispatch.split_warps(chunk, x.element_size(), True)),
                                       x, o)
                    launch = S.bind_launch(x, o, dict(cfg, MAXNREG=cap))
                    if cap is None:
                        uncapped_regs = launch.compiled.n_regs
                    launches[key], outs[key] = launch, o
                    per_sm = launch.grid // cfg["C"] * cfg["C"]
                    info[key] = {"regs": launch.compiled.n_regs, "spills": launch.compiled.n_spills,
                                 "grid": launch.grid, "C": cfg["C"], "VEC": cfg["VEC"],
                                 "warps": cfg["num_warps"], "rows_in_flight": per_sm // cfg["C"]}
                except Exception as e:
                    errors[key] = f"{type(e).__name__}: {e}"[:300]
        stats = time_cold(launches, tcfg, "cuda", errors=errors)
        torch.cuda.synchronize()
        res = summarise(stats, outs, ref, dt, info)
        with sink.open("a") as f:
            f.write(json.dumps({"shape": [M, N, dt], "results": res, "errors": errors}, default=str) + "\n")
        print(f"{M}x{N} {dt}: " + " | ".join(
            f"{k} {v['pct_copy']}% r{v.get('regs', '')} s{v.get('spills', '')} rows{v.get('rows_in_flight', '')}"
            f"{'' if v.get('ok', True) else ' BAD'}" for k, v in res.items())
            + (f" | errors {errors}" if errors else ""), flush=True)
        del x, ref, outs, launches
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
