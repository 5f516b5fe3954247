"""Experiment (round 14): Triton's rows kernel (several short rows a program) against its own
parameters on short rows: elements a block (``tile``), values a thread (so the warps), software
pipeline stages, and a persistent grid (what the SMs hold at once, each program looping over
blocks) against one block a program (the hardware schedules the tail). Beside them torch.softmax,
a copy of the same bytes and the layer's default, cold L2, interleaved (harness.timing.time_cold);
every output checked against a float64 softmax. One JSON line per shape in
$OUT/exp_triton_short_rows.jsonl as it goes.

    python3 scripts/exp_triton_short_rows.py [--budget S]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = [(32768, 512, "bfloat16"), (32768, 1024, "bfloat16"), (8192, 2048, "float16"),
          (65536, 256, "float32"), (20000, 777, "bfloat16"), (4096, 1000, "float32")]
TILES = (1024, 2048, 4096, 8192)
VALUES = (8, 16, 32)
STAGES = (1, 2, 3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=150.0)
    a = ap.parse_args()
    import torch
    import triton

    from exp_softmax_common import baselines, sink as make_sink, summarise, timing_config
    from harness.timing import time_cold
    from triton_src import dispatch, softmax_rows as R

    deadline = time.time() + a.budget
    sink = make_sink("exp_triton_short_rows")
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
        info["default"] = {"variant": plan.variant, "config": dict(plan.config)}
        frame = max(16, triton.next_power_of_2(N)) <= dispatch.SOFTMAX["rows_frame_max_cols"]
        for tile in TILES:
            for vpt in VALUES:
                cfg0 = R.config(N, tile, vpt, 1)
                if cfg0["ROWS"] * cfg0["BLOCK_N"] < 32 * vpt:
                    continue
                for st in STAGES + (0,):   # 0: one block a program
                    if time.time() > deadline - 20:
                        break
                    cfg = dict(cfg0, NUM_STAGES=max(1, st), FRAME=frame)
                    key = f"rows t={tile} v={vpt} w={cfg['num_warps']} " + (f"s={st}" if st else "grid=blocks")
                    try:
                        o = torch.empty_like(x)
                        launch = R.bind_launch(x, o, cfg, triton.cdiv(M, cfg["ROWS"]) if st == 0 else None)
                        launches[key], outs[key] = launch, o
                        info[key] = {"regs": launch.compiled.n_regs, "spills": launch.compiled.n_spills,
                                     "rows": cfg["ROWS"]}
                    except Exception as e:
                        errors[key] = f"{type(e).__name__}: {e}"[:300]
        stats = time_cold(launches, tcfg, "cuda", errors=errors)
        torch.cuda.synchronize()
        res = summarise(stats, outs, ref, dt, info)
        with sink.open("a") as f:
            f.write(json.dumps({"shape": [M, N, dt], "results": res, "errors": errors}, default=str) + "\n")
        best = sorted(((v["pct_copy"] or 0, k) for k, v in res.items() if k not in ("copy",)), reverse=True)[:6]
        bad = [k for k, v in res.items() if not v.get("ok", True)]
        print(f"{M}x{N} {dt}: default {res['default']['pct_copy']}% torch {res['torch']['pct_copy']}% | best "
              + " | ".join(f"{k} {p}%" for p, k in best) + (f" | BAD {bad}" if bad else "")
              + (f" | errors {errors}" if errors else ""), flush=True)
        del x, ref, outs, launches
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
