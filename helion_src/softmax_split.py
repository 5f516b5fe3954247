"""Row softmax, ``split``: each row cut into chunks handled by different programs, for few long
rows (one program a row would leave most SMs idle: 2 rows of 2,000,000 columns fill 2 of 132).

Two kernels, in the aligned frame (``helion_src/frame.py``):
1. ``softmax_split_stats``: program (row, chunk) runs the online softmax over its chunk's column
   tiles and writes the chunk's max and sum of exp(x - max) to ``wmax[row, chunk]`` and
   ``wsum[row, chunk]``;
2. ``softmax_split_norm``: program (row, chunk) combines the row's chunks (max of the maxima, each
   sum rescaled to it) and writes its chunk of exp(x - max) / sum.
The row is read twice (the second read comes from L2 where the rows fit it) and written once;
no program waits for another. A chunk is ``chunk_groups`` 16-byte groups of the frame.
"""
from __future__ import annotations

import torch

import helion
import helion.language as hl


@helion.kernel(autotune_effort="none", static_shapes=False)
def softmax_split_stats(xf: torch.Tensor, wmax: torch.Tensor, wsum: torch.Tensor, n: int, sx: int, lx: int,
                        chunk_groups: int, v: hl.constexpr) -> torch.Tensor:
    m, chunks = wmax.size()
    for rows, part in hl.tile([m, chunks], block_size=[1, 1]):
        start = rows.index * sx + lx
        base = (start // v * v)[:, None]
        lead = start[:, None] - base
        mx = hl.full([rows], float("-inf"), dtype=torch.float32)
        total = hl.zeros([rows], dtype=torch.float32)
        for cols in hl.tile(part.begin * chunk_groups * v, (part.begin + 1) * chunk_groups * v):
            c = cols.index[None, :]
            g = (cols.index // v * v)[None, :]
            x = hl.load(xf, [base + c], extra_mask=(g + v > lead) & (g < lead + n))
            x = torch.where((c >= lead) & (c < lead + n), x.to(torch.float32), float("-inf"))
            new = torch.maximum(mx, torch.amax(x, dim=1))
            scale = torch.where(new == mx, torch.ones_like(mx), torch.exp(mx - new))
            total = total * scale + torch.sum(torch.exp(x - new[:, None]), dim=1)
            mx = new
        wmax[rows, part] = mx[:, None]
        wsum[rows, part] = total[:, None]
    return wmax


@helion.kernel(autotune_effort="none", static_shapes=False)
def softmax_split_norm(xf: torch.Tensor, of: torch.Tensor, wmax: torch.Tensor, wsum: torch.Tensor, n: int,
                       sx: int, so: int, lx: int, lo: int, chunk_groups: int, v: hl.constexpr) -> torch.Tensor:
    m, chunks = wmax.size()
    for rows, part in hl.tile([m, chunks], block_size=[1, 1]):
        maxima = wmax[rows, :]
        mx = torch.amax(maxima, dim=1)
        total = torch.sum(wsum[rows, :] * torch.exp(maxima - mx[:, None]), dim=1)
        start = rows.index * sx + lx
        base = (start // v * v)[:, None]
        lead = start[:, None] - base
        obase = ((rows.index * so + lo) // v * v)[:, None]
        for cols in hl.tile(part.begin * chunk_groups * v, (part.begin + 1) * chunk_groups * v):
            c = cols.index[None, :]
            g = (cols.index // v * v)[None, :]
            x = hl.load(xf, [base + c], extra_mask=(g + v > lead) & (g < lead + n))
            y = (torch.exp(x.to(torch.float32) - mx[:, None]) / total[:, None]).to(of.dtype)
            inside = (c >= lead) & (c < lead + n)
            whole = (g >= lead) & (g + v <= lead + n)
            hl.store(of, [obase + c], y, extra_mask=whole)
            hl.store(of, [obase + c], y, extra_mask=inside & ~whole)
    return of
