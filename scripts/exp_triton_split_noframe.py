"""Experiment (round 14): Triton's split softmax on rows that are not 16-byte aligned (odd N)
without the aligned frame: each row addressed from its own start, so the loads and stores are as
wide as the element (4 bytes in fp32, 2 in 16-bit) but the kernel carries no frame masks and no
edge recompute (fewer registers a value). Against the default (framed), at 64 and 32 values a
thread, each under the layer's register-cap rule, on the grid its occupancy allows, beside
torch.softmax and a copy of the same bytes, cold L2, interleaved (harness.timing.time_cold);
every output checked against a float64 softmax. One JSON line per shape in $OUT/exp_triton_split_noframe.jsonl.

    python3 scripts/exp_triton_split_noframe.py [--budget S]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_softmax_common import launch_facts, main  # noqa: E402

SHAPES = [(4096, 50257, "float32"), (4096, 32001, "float32"), (2048, 100003, "float32"),
          (4096, 50257, "bfloat16"), (4096, 32001, "float16")]
#: (chunk, warps) without the frame
CANDIDATES = ((2048, 1), (2048, 2), (1024, 1))


def candidates(x):
    from triton_src import softmax_split as S
    N = x.shape[1]
    for chunk, warps in CANDIDATES:
        def build(o, chunk=chunk, warps=warps):
            frame = S.aligned_frame
            S.aligned_frame = lambda *tensors: 0
            try:
                launch = S.bind_launch(x, o, S.config(N, chunk, warps))
            finally:
                S.aligned_frame = frame
            return launch, {**launch_facts(launch), "C": launch.config["C"], "VEC": launch.config["VEC"],
                            "rows_in_flight": launch.grid // launch.config["C"]}
        yield f"split c={chunk} w={warps} no frame", build


if __name__ == "__main__":
    sys.exit(main("exp_triton_split_noframe", SHAPES, candidates))
