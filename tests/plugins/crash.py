"""Implementations that kill or hang their process (the run must go on)."""
import os
import time

import torch

from harness import register


@register(problem="vector_add", layer="crash", name="abort")
def abort(case, inputs, out):
    def launch():
        os.abort()
    return launch


@register(problem="vector_add", layer="crash", name="hang")
def hang(case, inputs, out):
    def launch():
        time.sleep(10_000)
    return launch


@register(problem="vector_add", layer="crash", name="raises")
def raises(case, inputs, out):
    raise RuntimeError("compile error: something the layer could not build")


@register(problem="vector_add", layer="crash", name="fine")
def fine(case, inputs, out):
    x, y = inputs
    return lambda: torch.add(x, y, out=out)
