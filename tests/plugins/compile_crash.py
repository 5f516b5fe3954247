"""Implementations whose compile_only kills its process on one case (the compile-ahead pool must
blame that implementation on that case and go on)."""
import os

import torch

from harness import register


def _compile(case):
    if case.N == 1000:
        os.abort()
    return {"registers": 16, "spills": 0, "compile_s": 0.0, "config": {"N": case.N}}


@register(problem="vector_add", layer="aheadcrash", name="gpu_only", devices=("cuda",), compile_only=_compile)
def gpu_only(case, inputs, out):
    x, y = inputs
    return lambda: torch.add(x, y, out=out)


@register(problem="vector_add", layer="aheadcrash", name="anywhere", compile_only=_compile)
def anywhere(case, inputs, out):
    x, y = inputs
    return lambda: torch.add(x, y, out=out)
