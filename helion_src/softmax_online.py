"""Row softmax, online (one read pass for max and sum, one for the output), in Helion.

For rows longer than a tile holds in registers: the first loop over column tiles keeps a running
max and a running sum of exp(x - max), rescaling the sum whenever the max grows (the online
softmax); the second loop writes exp(x - max) / sum. The row is read twice, not three times as a
looped max / sum / write reduction reads it. Tile sizes are the configuration's block sizes.
"""
from __future__ import annotations

import torch

import helion
import helion.language as hl


@helion.kernel(autotune_effort="none")
def softmax_online(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    for rows in hl.tile(m):
        mx = hl.full([rows], float("-inf"), dtype=torch.float32)
        total = hl.zeros([rows], dtype=torch.float32)
        for cols in hl.tile(n):
            v = x[rows, cols].to(torch.float32)
            new = torch.maximum(mx, torch.amax(v, dim=1))
            # a tile of -inf leaves the max at -inf: keep the (zero) sum rather than exp(nan)
            scale = torch.where(new == mx, torch.ones_like(mx), torch.exp(mx - new))
            total = total * scale + torch.sum(torch.exp(v - new[:, None]), dim=1)
            mx = new
        for cols in hl.tile(n):
            v = x[rows, cols].to(torch.float32)
            out[rows, cols] = (torch.exp(v - mx[:, None]) / total[:, None]).to(out.dtype)
    return out
