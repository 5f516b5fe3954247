"""A plugin that registers a built-in id (must be refused, naming both origins)."""
import torch

from harness import register


@register(problem="vector_add", layer="torch", name="vector_add")
def prepare(case, inputs, out):
    x, y = inputs
    return lambda: torch.sub(x, y, out=out)
