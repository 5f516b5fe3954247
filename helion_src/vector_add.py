"""Vector add in Helion: out = x + y.

A Helion kernel reads like PyTorch: ``hl.tile(n)`` splits the index range into tiles, each tile
becomes one Triton program, and the body is ordinary tensor code on the tile. Helion generates the
masks (any length), the pointer arithmetic (any alignment, any stride) and the launch grid. The
block size, warps and the rest are the kernel's *configuration*: with ``autotune_effort="none"``
Helion takes its default configuration instead of autotuning on the first call.
"""
from __future__ import annotations

import torch

import helion
import helion.language as hl


@helion.kernel(autotune_effort="none")
def vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        out[tile] = x[tile] + y[tile]
    return out
