"""cuTile row softmax, online: for rows too long for one tile. A program per row (programs loop over
rows bid, bid + grid, ... when a launch gives fewer programs than rows); pass 1 reads
the row in column tiles of TILE keeping the running max and the rescaled running sum (online
softmax), pass 2 reads it again newest tile first (the tiles pass 1 read last are the likeliest
to still be in L2) and stores exp(x - m) / s. Lane-wise running values, so that each tile's
update is elementwise and one cross-lane reduction per row ends pass 1.

The flat kernel is the same algorithm for contiguous rows whose bytes are not a multiple of 16
(N = 50257 bf16): tileiras loads an array's tiles wide (TMA) only where every row starts on a
16-byte boundary, so it reads such rows in 2-byte loads. The flat kernel views x and out as one
contiguous vector and walks the aligned TILE-element tiles that cover the row, masking the
other rows' elements to -inf; pass 2 stores the interior tiles whole and the (at most two)
tiles shared with a neighbour row through a masked scatter.
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


@ct.kernel
def softmax_online_flat_kernel(x, out, N: int, TILE: ct.Constant[int]):
    ar = ct.arange(TILE, dtype=ct.int32)
    for row in range(ct.bid(0), x.shape[0] // N, ct.num_blocks(0)):
        start = row * N
        j0 = start // TILE
        j1 = ct.cdiv(start + N, TILE)
        m = ct.full((TILE,), -math.inf, dtype=ct.float32)
        s = ct.full((TILE,), 0.0, dtype=ct.float32)
        for j in range(j0, j1):
            inside = (ar >= start - j * TILE) & (ar < start + N - j * TILE)  # this row's lanes
            t = ct.where(inside, ct.astype(ct.load(x, index=(j,), shape=(TILE,)), ct.float32), -math.inf)
            m_new = ct.maximum(m, t)
            shift = ct.where(m_new == -math.inf, 0.0, m_new)
            s = s * ct.exp(m - shift) + ct.exp(t - shift)
            m = m_new
        m_row = ct.max(m, axis=0, keepdims=True)
        inv = 1.0 / ct.sum(s * ct.exp(m - m_row), axis=0, keepdims=True)
        for i in range(j1 - j0):
            j = j1 - 1 - i
            lo, hi = start - j * TILE, start + N - j * TILE
            p = ct.astype(ct.exp(ct.astype(ct.load(x, index=(j,), shape=(TILE,)), ct.float32) - m_row) * inv,
                          out.dtype)
            if lo <= 0 and hi >= TILE:
                ct.store(out, index=(j,), tile=p)
            else:  # a tile shared with a neighbour row: only this row's lanes
                ct.scatter(out, j * TILE + ar, p, mask=(ar >= lo) & (ar < hi))


def flat_ok(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether x and out are each one contiguous run of M * N elements (the flat kernel's view)."""
    return all(t.is_contiguous() for t in (x, out))


def flat_args(x: torch.Tensor, out: torch.Tensor, tile: int) -> tuple:
    return (x.view(-1), out.view(-1), x.shape[1], tile)


def bind_launch_flat(x: torch.Tensor, out: torch.Tensor, tile: int, grid: int | None = None, kernel=None):
    """The flat kernel on contiguous x and out; ``grid`` programs take rows bid, bid + grid, ..."""
    k = kernel or softmax_online_flat_kernel
    g = (grid or x.shape[0], 1, 1)
    args = flat_args(x, out, tile)

    def launch():
        ct.launch(torch.cuda.current_stream(), g, k, args)
    return launch


def bind_launch(x: torch.Tensor, out: torch.Tensor, tile: int, grid: int | None = None, kernel=None):
    """``grid`` programs (default: one a row) take rows bid, bid + grid, ..."""
    k = kernel or softmax_online_kernel
    g = (grid or x.shape[0], 1, 1)
    args = (x, out, tile, tma_store_ok(out))

    def launch():
        ct.launch(torch.cuda.current_stream(), g, k, args)
    return launch
