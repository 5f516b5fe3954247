"""A correct implementation whose preparation prints to stdout, as a layer's compiler may (TileLang
logs through tqdm.write, to sys.stdout, with a date first)."""
import torch

from harness import register


@register(problem="vector_add", layer="chatty", name="vector_add")
def prepare(case, inputs, out):
    x, y = inputs
    print("2026-12-06 08:00:00  [chatty] begins to compile")

    def launch():
        print("2026-12-06 08:00:01  [chatty] launched")
        torch.add(x, y, out=out)
    return launch
