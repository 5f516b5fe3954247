"""cuTile row softmax, online with TMA loads (not yet run on a GPU): the online algorithm (column
tiles, a lane-wise running max and sum, a second pass newest tile first; see softmax_online.py)
with three changes:

- the columns past N are masked to -inf by their index instead of by the load's padding, so
  that tileiras loads the tiles through TMA, several in flight (``padding_mode=NEG_INF`` makes it
  load through registers, one tile a program at a time: see softmax_rows_tma.py);
- the loads carry a latency hint (``LATENCY``, 1..10): tileiras deepens its TMA pipeline for it,
  so that few programs an SM (the planner keeps the rows in flight within L2, so that pass 2 reads
  them from there) still have enough bytes in flight;
- one exp a lane and tile in pass 1 (``online_step``) instead of two.

Programs loop over rows bid, bid + grid, ...
"""
import math

import cuda.tile as ct
import torch

from cutile_src.softmax_rows import tma_store_ok


def online_step(m, s, t):
    """Fold tile ``t`` into the lane-wise running max ``m`` and sum ``s`` (of exp(x - m)) with one
    exp a lane: of m and t the larger is the new max, and exp(-|t - m|) either rescales the old
    sum (t is the new max: s e + 1) or is t's own term (m stays: s + e). A lane of t that is -inf
    adds nothing (also where m is still -inf, whose t - m is NaN)."""
    gt = t > m
    e = ct.exp(ct.where(gt, m - t, t - m))
    s = ct.where(gt, s * e + 1.0, s + ct.where(t == -math.inf, 0.0, e))
    return ct.maximum(m, t), s


def online_total(m, s, axis: int):
    """The row's max and 1 / sum from the lanes' running values (lanes still at -inf hold s = 0)."""
    m_row = ct.max(m, axis=axis, keepdims=True)
    return m_row, 1.0 / ct.sum(s * ct.exp(m - m_row), axis=axis, keepdims=True)


@ct.kernel
def softmax_online_tma_kernel(x, out, TILE: ct.Constant[int], LATENCY: ct.Constant[int],
                              TMA_STORE: ct.Constant[bool]):
    n_tiles = ct.num_tiles(x, axis=1, shape=(1, TILE))
    cols = ct.reshape(ct.arange(TILE, dtype=ct.int32), (1, TILE))
    for row in range(ct.bid(0), x.shape[0], ct.num_blocks(0)):
        m = ct.full((1, TILE), -math.inf, dtype=ct.float32)
        s = ct.full((1, TILE), 0.0, dtype=ct.float32)
        for j in range(n_tiles):
            t = ct.astype(ct.load(x, index=(row, j), shape=(1, TILE), latency=LATENCY), ct.float32)
            m, s = online_step(m, s, ct.where(cols < x.shape[1] - j * TILE, t, -math.inf))
        m_row, inv = online_total(m, s, 1)
        for i in range(n_tiles):
            j = n_tiles - 1 - i
            t = ct.astype(ct.load(x, index=(row, j), shape=(1, TILE), latency=LATENCY), ct.float32)
            # columns past N: computed on whatever the load left there, dropped by the store
            ct.store(out, index=(row, j), tile=ct.astype(ct.exp(t - m_row) * inv, out.dtype),
                     allow_tma=TMA_STORE)


def bind_launch(x: torch.Tensor, out: torch.Tensor, tile: int, latency: int, grid: int | None = None,
                kernel=None):
    """``grid`` programs (default: one a row) take rows bid, bid + grid, ..."""
    k = kernel or softmax_online_tma_kernel
    g = (grid or x.shape[0], 1, 1)
    args = (x, out, tile, latency, tma_store_ok(out))

    def launch():
        ct.launch(torch.cuda.current_stream(), g, k, args)
    return launch
