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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_softmax_common import main  # noqa: E402

SHAPES = [(4096, 50257, "bfloat16"), (4096, 32000, "bfloat16"), (4096, 50257, "float32"),
          (4096, 128256, "bfloat16")]
VALUES_PER_THREAD = (32, 64)
CTAS = (2, 4, 8)


def configs(N: int, elem_size: int):
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


def candidates(x):
    from triton_src import softmax_block
    from triton_src.runtime import Spec, bind_spec
    for c, w, block in configs(x.shape[1], x.element_size()):
        def build(o, c=c, w=w, block=block):
            spec = softmax_block.launch_spec(x, o, {"BLOCK_N": block, "num_warps": w})
            return bind_spec(Spec(spec.kernel, spec.grid, spec.args, {**spec.options, "num_ctas": c}), x.device), {}
        yield f"block ctas={c} warps={w}", build


if __name__ == "__main__":
    sys.exit(main("exp_triton_cluster_block", SHAPES, candidates, 100.0))
