"""Experiment (round 14): the split kernel's register-cap rule (``dispatch.split_register_cap``)
on and off, on long rows of every dtype (the shapes the rule caps and some it leaves alone): the
layer's default as planned (rule on) against the same plan with
``SOFTMAX["split_register_cap"]`` = False, beside torch.softmax and a copy of the same bytes, cold L2, interleaved
(harness.timing.time_cold); every output checked against a float64 softmax. One JSON line per
shape in $OUT/exp_triton_split_cap_rule.jsonl as it goes.

    python3 scripts/exp_triton_split_cap_rule.py [--budget S]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = [(4096, 32000, "bfloat16"), (4096, 50257, "bfloat16"), (4096, 128256, "bfloat16"),
          (4096, 151936, "bfloat16"), (4096, 50257, "float32"), (4096, 128256, "float32"),
          (4096, 151936, "float32"), (4096, 32000, "float32"), (2048, 65536, "float16"),
          (8192, 20000, "bfloat16"), (1024, 200003, "bfloat16"), (4096, 32001, "float16"),
          (2048, 100003, "bfloat16"), (8192, 50257, "float16"), (16, 131072, "float16"),
          (1, 1000003, "float32")]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=150.0)
    a = ap.parse_args()
    import torch

    from exp_softmax_common import baselines, sink as make_sink, summarise, timing_config
    from harness.timing import time_cold
    from triton_src import dispatch

    deadline = time.time() + a.budget
    sink = make_sink("exp_triton_split_cap_rule")
    tcfg = timing_config()
    for M, N, dt in SHAPES:
        if time.time() > deadline - 15:
            break
        x = torch.randn(M, N, device="cuda", dtype=getattr(torch, dt))
        ref = torch.softmax(x.double(), dim=1)
        (outs, launches), errors, info = baselines(x), {}, {}
        cap = dispatch.SOFTMAX["split_register_cap"]
        for key, value in (("rule on", cap), ("rule off", False)):
            dispatch.SOFTMAX["split_register_cap"] = value
            try:
                o = torch.empty_like(x)
                plan = dispatch.plan_softmax(x, o)
                launches[key], outs[key] = plan.launch, o
                c = plan.launch.compiled if plan.variant == "split" else None
                info[key] = {"variant": plan.variant, "config": dict(plan.config),
                             "regs": getattr(c, "n_regs", None), "spills": getattr(c, "n_spills", None),
                             "grid": getattr(plan.launch, "grid", None)}
            except Exception as e:
                errors[key] = f"{type(e).__name__}: {e}"[:300]
            finally:
                dispatch.SOFTMAX["split_register_cap"] = cap
        stats = time_cold(launches, tcfg, "cuda", errors=errors)
        torch.cuda.synchronize()
        res = summarise(stats, outs, ref, dt, info)
        with sink.open("a") as f:
            f.write(json.dumps({"shape": [M, N, dt], "results": res, "errors": errors}, default=str) + "\n")
        print(f"{M}x{N} {dt}: " + " | ".join(
            f"{k} {v['pct_copy']}% ({v['us']} us, iqr {v['iqr_us']}) r{v.get('regs')} s{v.get('spills')} "
            f"cap {v.get('config', {}).get('MAXNREG')}{'' if v.get('ok', True) else ' BAD'}"
            for k, v in res.items()) + (f" | errors {errors}" if errors else ""), flush=True)
        del x, ref, outs, launches
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
