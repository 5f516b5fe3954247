"""Row softmax in Helion: out[i, :] = exp(x[i, :] - max_i) / sum_j exp(x[i, j] - max_i).

One tile of rows per program; ``x[rows, :]`` takes whole rows, and the three reductions (max, sum)
are written as PyTorch calls over dim 1. Whether a row is held in registers at once or streamed in
chunks is not in the source: it is the configuration's ``reduction_loops`` (Helion's looped
reduction), so the same source serves rows of any length. Strided rows are fine: Helion indexes
through the tensor's strides. ``autotune_effort="none"``: Helion's default configuration.
"""
from __future__ import annotations

import torch

import helion
import helion.language as hl


@helion.kernel(autotune_effort="none")
def softmax(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for rows in hl.tile(x.size(0)):
        v = x[rows, :].to(torch.float32)
        e = torch.exp(v - torch.amax(v, dim=1, keepdim=True))
        out[rows, :] = (e / torch.sum(e, dim=1, keepdim=True)).to(out.dtype)
    return out
