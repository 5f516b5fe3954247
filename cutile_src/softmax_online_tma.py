"""cuTile row softmax, online with TMA loads (not yet run on a GPU): the online kernel
(softmax_online.py: column tiles, a lane-wise running max and rescaled sum, pass 2 newest tile
first) with the columns past N masked to -inf by their index instead of by the load's padding,
so that tileiras loads the tiles through TMA, several in flight (``padding_mode=NEG_INF`` makes
it load through registers: see softmax_rows_tma.py). Programs loop over rows bid, bid + grid, ...
"""
import math

import cuda.tile as ct
import torch

from cutile_src.softmax_rows import tma_store_ok


@ct.kernel
def softmax_online_tma_kernel(x, out, TILE: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    n_tiles = ct.num_tiles(x, axis=1, shape=(1, TILE))
    cols = ct.reshape(ct.arange(TILE, dtype=ct.int32), (1, TILE))
    for row in range(ct.bid(0), x.shape[0], ct.num_blocks(0)):
        m = ct.full((1, TILE), -math.inf, dtype=ct.float32)
        s = ct.full((1, TILE), 0.0, dtype=ct.float32)
        for j in range(n_tiles):
            t = ct.astype(ct.load(x, index=(row, j), shape=(1, TILE)), ct.float32)
            t = ct.where(cols < x.shape[1] - j * TILE, t, -math.inf)  # columns past N
            m_new = ct.maximum(m, t)
            shift = ct.where(m_new == -math.inf, 0.0, m_new)  # lanes that so far saw only -inf
            s = s * ct.exp(m - shift) + ct.exp(t - shift)
            m = m_new
        m_row = ct.max(m, axis=1, keepdims=True)
        inv = 1.0 / ct.sum(s * ct.exp(m - m_row), axis=1, keepdims=True)
        for i in range(n_tiles):
            j = n_tiles - 1 - i
            t = ct.astype(ct.load(x, index=(row, j), shape=(1, TILE)), ct.float32)
            ct.store(out, index=(row, j), tile=ct.astype(ct.exp(t - m_row) * inv, out.dtype),
                     allow_tma=TMA_STORE)


def bind_launch(x: torch.Tensor, out: torch.Tensor, tile: int, grid: int | None = None, kernel=None):
    """``grid`` programs (default: one a row) take rows bid, bid + grid, ..."""
    k = kernel or softmax_online_tma_kernel
    g = (grid or x.shape[0], 1, 1)
    args = (x, out, tile, tma_store_ok(out))

    def launch():
        ct.launch(torch.cuda.current_stream(), g, k, args)
    return launch
