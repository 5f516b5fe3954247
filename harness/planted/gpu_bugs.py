"""Planted bugs that only a GPU run can show (``python -m harness selftest --gpu``)."""
from __future__ import annotations

import torch


def prepare_add(case, inputs, out):
    """Correct: torch.add on the current stream."""
    x, y = inputs
    return lambda: torch.add(x, y, out=out)


def prepare_add_side_stream(case, inputs, out):
    """BUG (escapes capture and events): the work goes to a stream of its own, chosen in
    prepare, and is never joined to the caller's stream. A device-wide synchronize (as the
    verifier does) hides it; CUDA events on the current stream bracket nothing, and a CUDA-graph
    capture records nothing (the add runs once, at capture time)."""
    x, y = inputs
    side = torch.cuda.Stream()

    def launch():
        with torch.cuda.stream(side):
            torch.add(x, y, out=out)
    return launch
