"""cuTile row softmax, rows: a tile of ROWS whole rows, TN >= N columns (a power of two), is
loaded once, reduced along its rows (max, then the sum of exp), scaled and stored. ROWS = 1 is
one row as one tile; short rows take several a tile so that a tile still moves a useful
number of bytes. Programs loop over row tiles bid, bid + grid, ... (a grid of co-resident
programs when the planner caps it). Columns past N and rows past M are padded with -inf and never stored.

The row stride is the array's own (strided and unaligned rows are loaded as they lie); tileiras
vectorises from the stride and base alignment facts the launch passes. ROWS, TN and the
kernel hints come from ``dispatch.plan_softmax``.
"""
import math

import cuda.tile as ct
import torch


@ct.kernel
def softmax_rows_kernel(x, out, ROWS: ct.Constant[int], TN: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    for i in range(ct.bid(0), ct.cdiv(x.shape[0], ROWS), ct.num_blocks(0)):
        t = ct.load(x, index=(i, 0), shape=(ROWS, TN), padding_mode=ct.PaddingMode.NEG_INF)
        t = ct.astype(t, ct.float32)
        e = ct.exp(t - ct.max(t, axis=1, keepdims=True))
        p = e * (1.0 / ct.sum(e, axis=1, keepdims=True))  # one division a row
        ct.store(out, index=(i, 0), tile=ct.astype(p, out.dtype), allow_tma=TMA_STORE)


def tma_store_ok(out: torch.Tensor) -> bool:
    """TMA stores only where out's rows are whole 16-byte units: a TMA store writes on to the next
    16-byte boundary past a shorter inner extent (a tensor of one row or one column lets tileiras
    pick TMA where its row stride would otherwise rule it out)."""
    return (out.shape[-1] * out.element_size()) % 16 == 0


def bind_launch(x: torch.Tensor, out: torch.Tensor, rows: int, tn: int, grid: int | None = None, kernel=None):
    """``grid`` programs (default: one a row tile) take row tiles bid, bid + grid, ..."""
    k = kernel or softmax_rows_kernel
    grid = (grid or -(-x.shape[0] // rows), 1, 1)
    args = (x, out, rows, tn, tma_store_ok(out))

    def launch():
        ct.launch(torch.cuda.current_stream(), grid, k, args)
    return launch
