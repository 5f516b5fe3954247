"""Row softmax, ``online``, in the aligned frame (``helion_src/frame.py``): for rows longer than
registers hold, one row per program (a tile of rows in general), the online softmax of
``softmax_online.py`` over column tiles of the row's frame, so that every load and every store
inside the row is a 16-byte vector whatever the row length and stride.

The frame is ``groups * v`` positions (``groups`` 16-byte groups: enough for the row wherever it
starts in its first group); the loops' bound is a multiple of v, so Triton proves the column
tiles' masks constant over each group.
"""
from __future__ import annotations

import torch

import helion
import helion.language as hl


@helion.kernel(autotune_effort="none", static_shapes=False)
def softmax_online_frame(xf: torch.Tensor, of: torch.Tensor, m: int, n: int, sx: int, so: int, lx: int,
                         lo: int, v: hl.constexpr) -> torch.Tensor:
    groups = (n + 2 * v - 2) // v
    for rows in hl.tile(m):
        start = rows.index * sx + lx
        base = (start // v * v)[:, None]          # the 16-byte boundary at or before each row
        lead = start[:, None] - base              # frame positions before the row
        obase = ((rows.index * so + lo) // v * v)[:, None]
        mx = hl.full([rows], float("-inf"), dtype=torch.float32)
        total = hl.zeros([rows], dtype=torch.float32)
        for cols in hl.tile(groups * v):
            c = cols.index[None, :]
            g = (cols.index // v * v)[None, :]
            x = hl.load(xf, [base + c], extra_mask=(g + v > lead) & (g < lead + n))
            x = torch.where((c >= lead) & (c < lead + n), x.to(torch.float32), float("-inf"))
            new = torch.maximum(mx, torch.amax(x, dim=1))
            # a tile of -inf leaves the max at -inf: keep the (zero) sum rather than exp(nan)
            scale = torch.where(new == mx, torch.ones_like(mx), torch.exp(mx - new))
            total = total * scale + torch.sum(torch.exp(x - new[:, None]), dim=1)
            mx = new
        for cols in hl.tile(groups * v):
            c = cols.index[None, :]
            g = (cols.index // v * v)[None, :]
            x = hl.load(xf, [base + c], extra_mask=(g + v > lead) & (g < lead + n))
            y = (torch.exp(x.to(torch.float32) - mx[:, None]) / total[:, None]).to(of.dtype)
            inside = (c >= lead) & (c < lead + n)
            whole = (g >= lead) & (g + v <= lead + n)
            hl.store(of, [obase + c], y, extra_mask=whole)
            hl.store(of, [obase + c], y, extra_mask=inside & ~whole)
    return of
