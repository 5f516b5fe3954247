"""Experiment (round 14): Triton's split softmax with the next unit's chunk loaded before the wait
(``PREFETCH``: the load of unit u + grid is issued as soon as unit u's exponentials are taken, so
HBM has work while the row's partners are awaited; it costs the registers of a second chunk, held
in the input dtype) at 32 and 16 values a thread, against the default (no prefetch), on long rows.
Each candidate under the layer's register-cap rule, on the grid its occupancy allows, beside
torch.softmax and a copy of the same bytes, cold L2, interleaved (harness.timing.time_cold);
every output checked against a float64 softmax. One JSON line per shape in $OUT/exp_triton_split_prefetch.jsonl.

    python3 scripts/exp_triton_split_prefetch.py [--budget S]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_softmax_common import launch_facts, main  # noqa: E402

SHAPES = [(4096, 32000, "bfloat16"), (4096, 128256, "bfloat16"), (4096, 151936, "bfloat16"),
          (2048, 65536, "float16"), (8192, 20000, "bfloat16"), (4096, 32000, "float32"),
          (4096, 128256, "float32"), (4096, 50257, "bfloat16")]
#: (chunk, warps) with the prefetch
CANDIDATES = ((2048, 2), (1024, 1), (4096, 4), (2048, 4))


def candidates(x):
    from triton_src import softmax_split as S
    N = x.shape[1]
    for chunk, warps in CANDIDATES:
        def build(o, chunk=chunk, warps=warps):
            launch = S.bind_launch(x, o, S.with_frame(S.config(N, chunk, warps, prefetch=True), x, o))
            return launch, {**launch_facts(launch), "C": launch.config["C"], "VEC": launch.config["VEC"],
                            "rows_in_flight": launch.grid // launch.config["C"]}
        yield f"split c={chunk} w={warps} prefetch", build


if __name__ == "__main__":
    sys.exit(main("exp_triton_split_prefetch", SHAPES, candidates))
