"""Correct but slow implementations: a run of them can be interrupted part-way."""
import time

import torch

from harness import register


@register(problem="vector_add", layer="slow", name="vector_add")
def prepare(case, inputs, out):
    x, y = inputs

    def launch():
        time.sleep(0.3)
        torch.add(x, y, out=out)
    return launch
