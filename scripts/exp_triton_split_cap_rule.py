"""Experiment (round 14): the split kernel's register-cap rule (``dispatch.split_register_cap``)
on and off, on long rows of every dtype (the shapes the rule caps and some it leaves alone): the
layer's default as planned (rule on) against the same plan with
``SOFTMAX["split_register_cap"]`` = False, beside torch.softmax and a copy of the same bytes, cold L2, interleaved
(harness.timing.time_cold); every output checked against a float64 softmax. One JSON line per
shape in $OUT/exp_triton_split_cap_rule.jsonl as it goes.

    python3 scripts/exp_triton_split_cap_rule.py [--budget S]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_softmax_common import launch_facts, main  # noqa: E402

SHAPES = [(4096, 32000, "bfloat16"), (4096, 50257, "bfloat16"), (4096, 128256, "bfloat16"),
          (4096, 151936, "bfloat16"), (4096, 50257, "float32"), (4096, 128256, "float32"),
          (4096, 151936, "float32"), (4096, 32000, "float32"), (2048, 65536, "float16"),
          (8192, 20000, "bfloat16"), (1024, 200003, "bfloat16"), (4096, 32001, "float16"),
          (2048, 100003, "bfloat16"), (8192, 50257, "float16"), (16, 131072, "float16"),
          (1, 1000003, "float32")]


def candidates(x):
    from triton_src import dispatch
    for key, value in (("rule on", True), ("rule off", False)):
        def build(o, value=value):
            kept = dispatch.SOFTMAX["split_register_cap"]
            dispatch.SOFTMAX["split_register_cap"] = value
            try:
                plan = dispatch.plan_softmax(x, o)
            finally:
                dispatch.SOFTMAX["split_register_cap"] = kept
            return plan.launch, {"variant": plan.variant, "config": dict(plan.config), **launch_facts(plan.launch)}
        yield key, build


if __name__ == "__main__":
    sys.exit(main("exp_triton_split_cap_rule", SHAPES, candidates))
