"""Implementations that run out of GPU memory (the harness's problem, never a FAIL): always, or
on their first launch in a process only (then a retry passes), and one checked alongside."""
import torch

from harness import register

_LAUNCHES = {"once": 0}


def _oom():
    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                  "capacity of 79.18 GiB of which 81.81 MiB is free.")


@register(problem="vector_add", layer="oom", name="always")
def always(case, inputs, out):
    def launch():
        raise _oom()
    return launch


@register(problem="vector_add", layer="oom", name="once")
def once(case, inputs, out):
    x, y = inputs

    def launch():
        _LAUNCHES["once"] += 1
        if _LAUNCHES["once"] == 1:
            raise _oom()
        return torch.add(x, y, out=out)
    return launch


@register(problem="vector_add", layer="oom", name="fine")
def fine(case, inputs, out):
    x, y = inputs
    return lambda: torch.add(x, y, out=out)
