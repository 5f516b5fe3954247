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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_softmax_common import launch_facts, main  # noqa: E402

SHAPES = [(4096, 50257, "bfloat16"), (8192, 50257, "bfloat16"), (1024, 200003, "bfloat16"),
          (4096, 32001, "float16"), (2048, 100003, "bfloat16"), (4096, 50257, "float32")]
CHUNKS = (2048, 4096, 8192)
CAPS = (None, 64, 56, 48)


def candidates(x):
    from triton_src import dispatch, softmax_split as S
    N = x.shape[1]
    for chunk in CHUNKS:
        uncapped = {}
        for cap in CAPS:
            if cap is not None and ("regs" not in uncapped or cap >= uncapped["regs"]):
                continue

            def build(o, chunk=chunk, cap=cap, uncapped=uncapped):
                warps = dispatch.split_warps(chunk, x.element_size(), True)
                cfg = S.with_frame(S.config(N, chunk, warps), x, o)
                launch = S.bind_launch(x, o, dict(cfg, MAXNREG=cap))
                if cap is None:
                    uncapped["regs"] = launch.compiled.n_regs
                return launch, {**launch_facts(launch), "C": cfg["C"], "VEC": cfg["VEC"], "warps": warps,
                                "rows_in_flight": launch.grid // cfg["C"]}
            yield f"split c={chunk} cap={cap}", build


if __name__ == "__main__":
    sys.exit(main("exp_triton_framed_long", SHAPES, candidates))
