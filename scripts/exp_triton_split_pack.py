"""Experiment (round 12): Triton's split softmax with 16-bit rows held as 32-bit words (PACK).

The split kernel holds its chunk in registers through the exchange; in fp32 registers a 16-bit
row brings half the bytes an fp32 row does for the same registers, so fewer bytes are in flight
an SM (ptxas for sm_90a: 64 values a thread unpacked take 96 registers unframed and 32 take 125
framed; packed, 128 take 105 and 64 take 128). This times, per long 16-bit row shape, the
default's plan, the same chunk packed, and packed chunks of 2048-8192 columns at 64 and 128
values a thread (32 and 64 framed), beside torch.softmax and a copy of the same bytes (cold L2,
interleaved: harness.timing.time_cold), and checks every output against a float64 softmax.
One JSON line per shape in $OUT/exp_triton_split_pack.jsonl as it goes.

    python3 scripts/exp_triton_split_pack.py [--budget S]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (M, N, dtype, view): view "odd" = columns 3.. of a wider tensor (rows not 16-byte aligned: framed)
SHAPES = [(4096, 50257, "bfloat16", None), (4096, 32000, "bfloat16", None),
          (4096, 128256, "bfloat16", None), (4096, 151936, "bfloat16", None),
          (8192, 32000, "float16", None), (4096, 50257, "float16", None),
          (2048, 65536, "bfloat16", "odd"), (64, 262144, "bfloat16", None)]


def candidates(N: int, framed: bool):
    for chunk in (2048, 4096, 8192):
        for vpt in ((32, 64) if framed else (64, 128)):
            w = chunk // (32 * vpt)
            if w in (1, 2, 4, 8):
                yield chunk, w


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=100.0)
    a = ap.parse_args()
    import torch

    from harness.timing import TimingConfig, time_cold
    from triton_src import aligned_frame, dispatch, softmax_split

    deadline = time.time() + a.budget
    out_dir = Path(os.environ.get("OUT", "gpu_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    sink = out_dir / "exp_triton_split_pack.jsonl"
    cfg = TimingConfig(min_samples=5, max_samples=40, rel_spread=0.02, time_cap_s=0.25, warmup_ms=3)
    for M, N, dt, view in SHAPES:
        if time.time() > deadline - 12:
            break
        full = torch.randn(M, N + (8 if view else 0), device="cuda", dtype=getattr(torch, dt))
        x = full[:, 3:3 + N] if view else full
        ref = torch.softmax(x.double(), dim=1)
        outs, launches, errors, plans = {}, {}, {}, {}
        outs["copy"] = torch.empty_like(x)
        launches["torch"] = lambda x=x: torch.softmax(x, dim=1)
        launches["copy"] = lambda o=outs["copy"], x=x: o.copy_(x)
        o = torch.empty_like(x)
        plan = dispatch.plan_softmax(x, o)
        outs["default"], launches["default"] = o, plan.launch
        plans["default"] = {"variant": plan.variant, **{k: v for k, v in plan.config.items()}}
        framed = bool(aligned_frame(x, o))
        tries = []
        if plan.variant == "split":
            tries.append((plan.config["CHUNK"], plan.config["num_warps"], "same"))
        tries += [(c, w, "") for c, w in candidates(N, framed)]
        for chunk, w, tag in tries:
            key = f"pack {chunk}/{w}w" + (" (default's chunk)" if tag else "")
            try:
                o = torch.empty_like(x)
                c = softmax_split.config(N, chunk, w, False, 0, pack=True)
                launches[key] = softmax_split.bind_launch(x, o, c)
                outs[key] = o
                plans[key] = dict(launches[key].config, grid=launches[key].grid)
            except Exception as e:
                errors[key] = f"{type(e).__name__}: {e}"[:300]
        stats = time_cold(launches, cfg, "cuda", errors=errors)
        torch.cuda.synchronize()
        copy_s = stats["copy"].quartiles()[1] if "copy" in stats else None
        res = {}
        for k, st in stats.items():
            q1, med, q3 = st.quartiles()
            r = {"us": round(med * 1e6, 2), "iqr_us": round((q3 - q1) * 1e6, 2), "n": st.n,
                 "pct_copy": round(100 * copy_s / med, 1) if copy_s else None}
            if k in outs and k != "copy":
                err = (outs[k].double() - ref).abs().max().item()
                r["max_abs_err"] = err
                r["ok"] = bool(err < 2e-2 and torch.isfinite(outs[k]).all())
            res[k] = r
        line = {"shape": [M, N, dt, view], "framed": framed, "plans": plans, "results": res, "errors": errors}
        with sink.open("a") as f:
            f.write(json.dumps(line) + "\n")
        print(f"{M}x{N} {dt}{' ' + view if view else ''}: default ({plan.variant} {plan.config.get('CHUNK')}/"
              f"{plan.config.get('num_warps')}w) {res['default']['pct_copy']}% | torch {res['torch']['pct_copy']}% | "
              + " | ".join(f"{k[5:]} {v['pct_copy']}%{'' if v.get('ok') else ' BAD'}" for k, v in res.items()
                           if k.startswith("pack")) + (f" | errors {list(errors)}" if errors else ""), flush=True)
        del x, full, ref, outs, launches
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
