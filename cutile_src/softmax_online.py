"""cuTile row softmax, online: for rows too long for one tile. A program per row (programs loop over
rows bid, bid + grid, ... when a launch gives fewer programs than rows); pass 1 reads
the row in column tiles of TILE keeping the running max and the rescaled running sum (online
softmax), pass 2 reads it again newest tile first (the tiles pass 1 read last are the likeliest
to still be in L2) and stores exp(x - m) / s. Lane-wise running values, so that each tile's
update is elementwise and one cross-lane reduction per row ends pass 1.
"""
import math

import cuda.tile as ct
import torch

from cutile_src.softmax_rows import tma_store_ok


@ct.kernel
def softmax_online_kernel(x, out, TILE: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    n_tiles = ct.num_tiles(x, axis=1, shape=(1, TILE))
    for row in range(ct.bid(0), x.shape[0], ct.num_blocks(0)):
        m = ct.full((1, TILE), -math.inf, dtype=ct.float32)
        s = ct.full((1, TILE), 0.0, dtype=ct.float32)
        for j in range(n_tiles):
            t = ct.load(x, index=(row, j), shape=(1, TILE), padding_mode=ct.PaddingMode.NEG_INF)
            t = ct.astype(t, ct.float32)
            m_new = ct.maximum(m, t)
            shift = ct.where(m_new == -math.inf, 0.0, m_new)  # lanes that so far saw only -inf
            s = s * ct.exp(m - shift) + ct.exp(t - shift)
            m = m_new
        m_row = ct.max(m, axis=1, keepdims=True)
        s_row = ct.sum(s * ct.exp(m - m_row), axis=1, keepdims=True)
        inv = 1.0 / s_row
        for i in range(n_tiles):
            j = n_tiles - 1 - i
            t = ct.astype(ct.load(x, index=(row, j), shape=(1, TILE),
                                  padding_mode=ct.PaddingMode.NEG_INF), ct.float32)
            ct.store(out, index=(row, j), tile=ct.astype(ct.exp(t - m_row) * inv, out.dtype),
                     allow_tma=TMA_STORE)


def bind_launch(x: torch.Tensor, out: torch.Tensor, tile: int, grid: int | None = None, kernel=None):
    """``grid`` programs (default: one a row) take rows bid, bid + grid, ..."""
    k = kernel or softmax_online_kernel
    g = (grid or x.shape[0], 1, 1)
    args = (x, out, tile, tma_store_ok(out))

    def launch():
        ct.launch(torch.cuda.current_stream(), g, k, args)
    return launch
