"""Experiment (round 13): Triton's split softmax with a register cap (``maxnreg``) on 16-bit rows.

The split kernel holds its chunk as fp32 through the exchange, so a 16-bit row brings half the
bytes in flight an fp32 row does for the same registers (ptxas's counts: docs/perf-notes.md,
Round 13). ``maxnreg`` caps the registers (ptxas spills the excess to local memory, which L1 caches), so
more programs - rows in flight - share an SM. Each candidate (chunk, warps, cap) runs on the grid
the capped kernel's occupancy allows, beside torch.softmax, a copy of the same bytes and the
layer's default (cold L2, interleaved: harness.timing.time_cold); every output is checked against a
float64 softmax. One JSON line per shape in $OUT/exp_triton_split_maxnreg.jsonl as it goes.

    python3 scripts/exp_triton_split_maxnreg.py [--budget S]
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
          (4096, 151936, "bfloat16"), (4096, 50257, "float32")]
CAPS = (None, 80, 64, 56)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=150.0)
    a = ap.parse_args()
    import torch

    from exp_softmax_common import baselines, sink as make_sink, summarise, timing_config
    from harness.timing import time_cold
    from triton_src import device_facts, dispatch, softmax_split as S
    from triton_src.runtime import Spec, bind_spec, programs_per_sm

    deadline = time.time() + a.budget
    sink = make_sink("exp_triton_split_maxnreg")
    tcfg = timing_config()
    facts = device_facts(torch.device("cuda"))
    for M, N, dt in SHAPES:
        if time.time() > deadline - 15:
            break
        x = torch.randn(M, N, device="cuda", dtype=getattr(torch, dt))
        ref = torch.softmax(x.double(), dim=1)
        (outs, launches), errors, info = baselines(x), {}, {}
        o = torch.empty_like(x)
        plan = dispatch.plan_softmax(x, o)
        outs["default"], launches["default"] = o, plan.launch
        info["default"] = {"variant": plan.variant, "config": {k: v for k, v in plan.config.items()}}
        base = dispatch.softmax_split_config_for(x, o, facts)
        for chunk, warps in ((base["CHUNK"], base["num_warps"]), (2 * base["CHUNK"], 2 * base["num_warps"])):
            for cap in CAPS:
                key = f"split c={chunk} w={warps} maxnreg={cap}"
                try:
                    o = torch.empty_like(x)
                    cfg = S.with_frame(S.config(N, chunk, warps), x, o)
                    slots = torch.zeros(M * cfg["C"], dtype=torch.int64, device=x.device)
                    opts = {} if cap is None else {"maxnreg": cap}
                    probe = S.launch_spec(x, o, slots, cfg, 1)
                    probe = bind_spec(Spec(probe.kernel, probe.grid, probe.args, {**probe.options, **opts}), x.device)
                    per_sm = programs_per_sm(probe.compiled, warps, facts)
                    capacity = facts["sms"] * per_sm
                    if capacity < cfg["C"]:
                        raise ValueError(f"{capacity} programs < {cfg['C']} chunks")
                    grid = min(M * cfg["C"], capacity // cfg["C"] * cfg["C"])
                    spec = S.launch_spec(x, o, slots, cfg, grid)
                    kern = bind_spec(Spec(spec.kernel, spec.grid, spec.args, {**spec.options, **opts}), x.device)

                    def launch(kern=kern, slots=slots):
                        slots.zero_()
                        kern()
                    launches[key], outs[key] = launch, o
                    info[key] = {"regs": kern.compiled.n_regs, "spills": kern.compiled.n_spills,
                                 "programs_per_sm": per_sm, "grid": grid, "VEC": cfg["VEC"]}
                except Exception as e:
                    errors[key] = f"{type(e).__name__}: {e}"[:300]
        stats = time_cold(launches, tcfg, "cuda", errors=errors)
        torch.cuda.synchronize()
        res = summarise(stats, outs, ref, dt, info)
        line = {"shape": [M, N, dt], "results": res, "errors": errors}
        with sink.open("a") as f:
            f.write(json.dumps(line, default=str) + "\n")
        print(f"{M}x{N} {dt}: " + " | ".join(
            f"{k} {v['pct_copy']}% r{v.get('regs', '')} p{v.get('programs_per_sm', '')}{'' if v.get('ok', True) else ' BAD'}"
            for k, v in res.items()) + (f" | errors {errors}" if errors else ""), flush=True)
        del x, ref, outs, launches
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
