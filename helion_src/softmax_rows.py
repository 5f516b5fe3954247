"""Row softmax, ``rows``: a tile of whole rows per program, each row read once into registers, in
the aligned frame (``helion_src/frame.py``: every load and store of the rows' inside a 16-byte
vector, whatever the row length and stride).

``width`` (a power of two, at least the frame of a row: ``frame.frame_width``) lanes per row;
positions outside the row are -inf before the max, so they add nothing to the sum. The rows of a
tile (the configuration's block size) share a program: short rows are packed so that each
program moves enough bytes.
"""
from __future__ import annotations

import torch

import helion
import helion.language as hl


@helion.kernel(autotune_effort="none", static_shapes=False)
def softmax_rows(xf: torch.Tensor, of: torch.Tensor, m: int, n: int, sx: int, so: int, lx: int, lo: int,
                 v: hl.constexpr, width: hl.constexpr) -> torch.Tensor:
    for rows in hl.tile(m):
        start = rows.index * sx + lx              # each row's first element in xf
        base = start // v * v                     # the 16-byte boundary at or before it
        lead = (start - base)[:, None]            # frame positions before the row
        pos = hl.arange(width)
        c = pos[None, :]
        g = (pos // v * v)[None, :]               # the first position of each 16-byte group
        inside = (c >= lead) & (c < lead + n)
        obase = (rows.index * so + lo) // v * v   # the output row's frame (the same lead)
        x = hl.load(xf, [base[:, None] + c], extra_mask=(g + v > lead) & (g < lead + n))
        x = torch.where(inside, x.to(torch.float32), float("-inf"))
        e = torch.exp(x - torch.amax(x, dim=1, keepdim=True))
        y = (e / torch.sum(e, dim=1, keepdim=True)).to(of.dtype)
        whole = (g >= lead) & (g + v <= lead + n)  # groups inside the row: 16-byte stores
        hl.store(of, [obase[:, None] + c], y, extra_mask=whole)
        hl.store(of, [obase[:, None] + c], y, extra_mask=inside & ~whole)  # the row's edges
    return of
