"""cuTile row softmax, online flat (a candidate: probed on an H100, not through the verify suite): the
online algorithm of softmax_online_tma.py (column tiles, lane-wise running max and sum with one exp
a lane, a latency hint on the loads, a second pass newest tile first) for contiguous rows whose
bytes are not a multiple of 16 (N = 50257 bf16 or fp32). tileiras loads an array's tiles wide (TMA)
only where every row starts on a 16-byte boundary, so the 2-d kernel reads such rows in 2-byte
(bf16) loads. This kernel views x and out as one contiguous vector and walks the aligned
TILE-element tiles that cover the row, masking the neighbour rows' elements to -inf; pass 2 stores
every tile through a masked scatter of this row's lanes (whole-tile stores of the interior tiles
behind a branch were slower on an H100: docs/performance.md, "cuTile / softmax"). Programs loop
over rows bid, bid + grid, ...
"""
import math

import cuda.tile as ct
import torch

from cutile_src.softmax_online_tma import online_step, online_total


@ct.kernel
def softmax_online_flat_kernel(x, out, N: int, TILE: ct.Constant[int], LATENCY: ct.Constant[int]):
    ar = ct.arange(TILE, dtype=ct.int32)
    for row in range(ct.bid(0), x.shape[0] // N, ct.num_blocks(0)):
        start = row * N
        j0 = start // TILE
        j1 = ct.cdiv(start + N, TILE)
        m = ct.full((TILE,), -math.inf, dtype=ct.float32)
        s = ct.full((TILE,), 0.0, dtype=ct.float32)
        for j in range(j0, j1):
            inside = (ar >= start - j * TILE) & (ar < start + N - j * TILE)  # this row's lanes
            t = ct.astype(ct.load(x, index=(j,), shape=(TILE,), latency=LATENCY), ct.float32)
            m, s = online_step(m, s, ct.where(inside, t, -math.inf))
        m_row, inv = online_total(m, s, 0)
        for i in range(j1 - j0):
            j = j1 - 1 - i
            lo, hi = start - j * TILE, start + N - j * TILE
            t = ct.astype(ct.load(x, index=(j,), shape=(TILE,), latency=LATENCY), ct.float32)
            p = ct.astype(ct.exp(t - m_row) * inv, out.dtype)
            ct.scatter(out, j * TILE + ar, p, mask=(ar >= lo) & (ar < hi))  # this row's lanes only


def flat_ok(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether x and out are each one contiguous run of M * N elements (the flat kernel's view)."""
    return all(t.is_contiguous() for t in (x, out))


def flat_args(x: torch.Tensor, out: torch.Tensor, tile: int, latency: int) -> tuple:
    return (x.view(-1), out.view(-1), x.shape[1], tile, latency)


def bind_launch(x: torch.Tensor, out: torch.Tensor, tile: int, latency: int, grid: int | None = None,
                kernel=None):
    """The flat kernel on contiguous x and out; ``grid`` programs take rows bid, bid + grid, ..."""
    k = kernel or softmax_online_flat_kernel
    g = (grid or x.shape[0], 1, 1)
    args = flat_args(x, out, tile, latency)

    def launch():
        ct.launch(torch.cuda.current_stream(), g, k, args)
    return launch
