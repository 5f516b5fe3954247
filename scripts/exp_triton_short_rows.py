"""Experiment (round 14): Triton's rows kernel (several short rows a program) against its own
parameters on short rows: elements a block (``tile``), values a thread (so the warps), software
pipeline stages, and a persistent grid (what the SMs hold at once, each program looping over
blocks) against one block a program (the hardware schedules the tail). Beside them torch.softmax,
a copy of the same bytes and the layer's default, cold L2, interleaved (harness.timing.time_cold);
every output checked against a float64 softmax. One JSON line per shape in $OUT/exp_triton_short_rows.jsonl as it goes.

    python3 scripts/exp_triton_short_rows.py [--budget S]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_softmax_common import launch_facts, main  # noqa: E402

SHAPES = [(32768, 512, "bfloat16"), (32768, 1024, "bfloat16"), (8192, 2048, "float16"),
          (65536, 256, "float32"), (20000, 777, "bfloat16"), (4096, 1000, "float32")]
TILES = (1024, 2048, 4096, 8192)
VALUES = (8, 16, 32)
STAGES = (1, 2, 3)


def candidates(x):
    import triton

    from triton_src import dispatch, softmax_rows as R
    M, N = x.shape
    frame = max(16, triton.next_power_of_2(N)) <= dispatch.SOFTMAX["rows_frame_max_cols"]
    for tile in TILES:
        for vpt in VALUES:
            cfg0 = R.config(N, tile, vpt, 1)
            if cfg0["ROWS"] * cfg0["BLOCK_N"] < 32 * vpt:
                continue
            for st in STAGES + (0,):   # 0: one block a program
                cfg = dict(cfg0, NUM_STAGES=max(1, st), FRAME=frame)
                key = f"rows t={tile} v={vpt} w={cfg['num_warps']} " + (f"s={st}" if st else "grid=blocks")

                def build(o, cfg=cfg, st=st):
                    launch = R.bind_launch(x, o, cfg, triton.cdiv(M, cfg["ROWS"]) if st == 0 else None)
                    return launch, {**launch_facts(launch), "rows": cfg["ROWS"]}
                yield key, build


if __name__ == "__main__":
    sys.exit(main("exp_triton_short_rows", SHAPES, candidates))
