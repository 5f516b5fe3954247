"""Experiment (round 15): Triton's long rows staged in shared memory (``softmax_smem``, Gluon) at
4, 8 and 16 warps, beside the split kernel (the default before it), the block kernel where it
takes the row, torch.softmax and a copy of the same bytes; cold L2, interleaved
(harness.timing.time_cold); every output checked against a float64 softmax. Shapes: the models
suite's long rows and others of every class the smem rule touches (framed odd lengths, a row per
SM, few rows, fp32 rows the block kernel pads). One JSON line per shape in
$OUT/exp_triton_smem_<group>.jsonl.

    python3 scripts/exp_triton_smem.py [--group long|block|fewrows] [--budget S]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_softmax_common import launch_facts, main  # noqa: E402

#: --group: long rows (split's before), rows the block kernel takes, few long rows
GROUPS = {
    "long": [(4096, 50257, "bfloat16"), (4096, 32000, "bfloat16"), (4096, 50257, "float32"),
             (8192, 50257, "float16"), (4096, 32001, "float16"), (2048, 65536, "bfloat16"),
             (2048, 100003, "bfloat16"), (4096, 20000, "bfloat16"), (4096, 24000, "float32"),
             (300, 50257, "bfloat16"), (8192, 16384, "bfloat16"), (4096, 32000, "float32")],
    "block": [(16384, 4096, "bfloat16"), (8192, 8192, "bfloat16"), (8192, 12000, "float16"),
              (16384, 6000, "bfloat16"), (16384, 8192, "float32"), (8192, 16384, "float32"),
              (4096, 20000, "float32"), (32768, 2048, "bfloat16"), (8192, 2048, "float16"),
              (8192, 16384, "bfloat16")],
    "fewrows": [(64, 50257, "bfloat16"), (132, 50257, "bfloat16"), (200, 50257, "bfloat16"),
                (264, 50257, "bfloat16"), (100, 65536, "bfloat16"), (132, 100003, "bfloat16"),
                (200, 32000, "bfloat16"), (396, 32000, "bfloat16")],
}
WARPS = {"long": (8, 16, 32), "block": (4, 8, 16), "fewrows": (8, 16)}
GROUP = "long"


def candidates(x):
    from triton_src import device_facts, dispatch
    from triton_src import softmax_block as B
    from triton_src import softmax_smem as S
    from triton_src import softmax_split as P
    M, N = x.shape
    facts = device_facts(x.device)
    for w in WARPS[GROUP]:
        if S.supports(N, x.element_size(), w, facts) is None:
            def build(o, w=w):
                cfg = S.config(N, x.element_size(), w, S.frame_of(x, o))
                launch = S.bind_launch(x, o, cfg)
                return launch, {**launch_facts(launch), "smem": cfg["smem"],
                                "per_sm": S.programs_per_sm(cfg, facts)}
            yield f"smem w={w}", build

    def split(o):
        launch = P.bind_launch(x, o, dispatch.softmax_split_config_for(x, o, facts))
        return launch, {**launch_facts(launch), "C": launch.config["C"], "CHUNK": launch.config["CHUNK"]}
    if N >= P.MIN_N:
        yield "split", split
    if B.supports(N) is None:
        def block(o):
            launch = B.bind_launch(x, o, dispatch.softmax_block_config(N, x.element_size()))
            return launch, launch_facts(launch)
        yield "block", block


if __name__ == "__main__":
    if "--group" in sys.argv:
        i = sys.argv.index("--group")
        GROUP = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    sys.exit(main(f"exp_triton_smem_{GROUP}", GROUPS[GROUP], candidates, default_budget=300))
