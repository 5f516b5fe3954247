"""torch implementations with planted bugs, and their correct twin."""
from __future__ import annotations

import torch


def prepare_softmax(case, inputs, out):
    """Correct: fp32 softmax written into the harness's output."""
    (x,) = inputs
    return lambda: out.copy_(torch.softmax(x.float(), dim=-1).to(out.dtype))


def prepare_softmax_zeros(case, inputs, out):
    """BUG: writes zeros (a kernel that never stores its result, into a zeroed buffer)."""
    return lambda: out.zero_()


def prepare_softmax_in_place(case, inputs, out):
    """BUG (input-mutating): subtracts the row max and exponentiates x in place."""
    (x,) = inputs

    def launch():
        x.sub_(x.amax(dim=-1, keepdim=True))
        x.exp_()
        out.copy_((x.float() / x.float().sum(dim=-1, keepdim=True)).to(out.dtype))
    return launch
