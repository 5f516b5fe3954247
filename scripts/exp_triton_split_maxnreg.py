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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_softmax_common import main  # noqa: E402

SHAPES = [(4096, 32000, "bfloat16"), (4096, 50257, "bfloat16"), (4096, 128256, "bfloat16"),
          (4096, 151936, "bfloat16"), (4096, 50257, "float32")]
CAPS = (None, 80, 64, 56)


def candidates(x):
    import torch

    from triton_src import device_facts, dispatch, softmax_split as S
    from triton_src.runtime import Spec, bind_spec, programs_per_sm
    M, N = x.shape
    facts = device_facts(x.device)
    base = dispatch.softmax_split_config_for(x, torch.empty_like(x), facts)
    for chunk, warps in ((base["CHUNK"], base["num_warps"]), (2 * base["CHUNK"], 2 * base["num_warps"])):
        for cap in CAPS:
            def build(o, chunk=chunk, warps=warps, cap=cap):
                # the cap as a bare compile option, on the grid the capped kernel's occupancy allows
                cfg = S.with_frame(S.config(N, chunk, warps), x, o)
                slots = torch.zeros(M * cfg["C"], dtype=torch.int64, device=x.device)
                opts = {} if cap is None else {"maxnreg": cap}
                probe = S.launch_spec(x, o, slots, cfg, 1)
                probe = bind_spec(Spec(probe.kernel, probe.grid, probe.args, {**probe.options, **opts}), x.device)
                per_sm = programs_per_sm(probe.compiled, warps, facts)
                if facts["sms"] * per_sm < cfg["C"]:
                    raise ValueError(f"{facts['sms'] * per_sm} programs < {cfg['C']} chunks")
                grid = min(M * cfg["C"], facts["sms"] * per_sm // cfg["C"] * cfg["C"])
                spec = S.launch_spec(x, o, slots, cfg, grid)
                kern = bind_spec(Spec(spec.kernel, spec.grid, spec.args, {**spec.options, **opts}), x.device)

                def launch():
                    slots.zero_()
                    kern()
                return launch, {"regs": kern.compiled.n_regs, "spills": kern.compiled.n_spills,
                                "programs_per_sm": per_sm, "grid": grid, "VEC": cfg["VEC"]}
            yield f"split c={chunk} w={warps} maxnreg={cap}", build


if __name__ == "__main__":
    sys.exit(main("exp_triton_split_maxnreg", SHAPES, candidates, 240.0))
