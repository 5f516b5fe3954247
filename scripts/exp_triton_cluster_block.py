"""Experiment (round 11): Triton's block softmax kernel (one row a program, in registers) with the
row spread over a cluster of CTAs (``num_ctas``), for rows too long for one program's registers.

Each candidate (num_ctas, num_warps) holds BLOCK_N / (num_ctas x num_warps x 32) fp32 values a
thread; the reductions cross the cluster through distributed shared memory (Triton lowers them).
Times each candidate beside torch.softmax, a copy of the same bytes and the layer's default
(cold L2, interleaved: harness.timing.time_cold), and checks every output against a float64
softmax. One JSON line per shape in $OUT/exp_triton_cluster_block.jsonl as it goes.

    python3 scripts/exp_triton_cluster_block.py [--budget S]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = [(4096, 50257, "bfloat16"), (4096, 32000, "bfloat16"), (4096, 50257, "float32"),
          (4096, 128256, "bfloat16")]
VALUES_PER_THREAD = (32, 64)
CTAS = (2, 4, 8)


def candidates(N: int, elem_size: int):
    """(num_ctas, num_warps, BLOCK_N): 32 fp32 values a thread, and 64 where the row needs no
    16-byte frame (the frame's masks take registers: 64 values a thread framed is 255 registers,
    32 is 80-95, by ptxas for sm_90a)."""
    import triton
    block = max(16, triton.next_power_of_2(N))
    framed = (N * elem_size) % 16 != 0
    for c in CTAS:
        for v in VALUES_PER_THREAD:
            w = block // (c * 32 * v)
            if w in (4, 8, 16) and not (framed and v > 32):
                yield c, w, block


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=100.0)
    a = ap.parse_args()
    import torch

    from exp_softmax_common import baselines, sink as make_sink, summarise, timing_config
    from harness.timing import time_cold
    from triton_src import dispatch, softmax_block
    from triton_src.runtime import Spec, bind_spec

    deadline = time.time() + a.budget
    sink = make_sink("exp_triton_cluster_block")
    cfg = timing_config()
    for M, N, dt in SHAPES:
        if time.time() > deadline - 10:
            break
        x = torch.randn(M, N, device="cuda", dtype=getattr(torch, dt))
        ref = torch.softmax(x.double(), dim=1)
        (outs, launches), errors = baselines(x), {}
        o = torch.empty_like(x)
        plan = dispatch.plan_softmax(x, o)
        outs["default"], launches["default"] = o, plan.launch
        for c, w, block in candidates(N, x.element_size()):
            o = torch.empty_like(x)
            spec = softmax_block.launch_spec(x, o, {"BLOCK_N": block, "num_warps": w})
            spec = Spec(spec.kernel, spec.grid, spec.args, {**spec.options, "num_ctas": c})
            key = f"block ctas={c} warps={w}"
            try:
                launches[key] = bind_spec(spec, x.device)
                outs[key] = o
            except Exception as e:
                errors[key] = f"{type(e).__name__}: {e}"[:300]
        stats = time_cold(launches, cfg, "cuda", errors=errors)
        torch.cuda.synchronize()
        res = summarise(stats, outs, ref, dt)
        line = {"shape": [M, N, dt], "default_plan": plan.variant, "results": res, "errors": errors}
        with sink.open("a") as f:
            f.write(json.dumps(line) + "\n")
        print(f"{M}x{N} {dt}: default ({plan.variant}) {res['default']['pct_copy']}% | torch "
              f"{res['torch']['pct_copy']}% | " + " | ".join(
                  f"{k[6:]} {v['pct_copy']}%{'' if v.get('ok') else ' BAD'}" for k, v in res.items()
                  if k.startswith("block")) + (f" | errors {list(errors)}" if errors else ""), flush=True)
        del x, ref, outs, launches
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
