"""cuTile row softmax, rows: a tile of ROWS whole rows, TN >= N columns (a power of two), is
loaded once, reduced along its rows (max, then the sum of exp), scaled and stored. ROWS = 1 is
one row as one tile; short rows take several a program so that a program still moves a useful
number of bytes. Columns past N and rows past M are padded with -inf and never stored.

The row stride is the array's own (strided and unaligned rows are loaded as they lie); tileiras
vectorises from the stride and base alignment facts the launch passes. ROWS, TN and the
kernel hints come from ``dispatch.plan_softmax``.
"""
import math

import cuda.tile as ct
import torch


@ct.kernel
def softmax_rows_kernel(x, out, ROWS: ct.Constant[int], TN: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid, 0), shape=(ROWS, TN), padding_mode=ct.PaddingMode.NEG_INF)
    t = ct.astype(t, ct.float32)
    e = ct.exp(t - ct.max(t, axis=1, keepdims=True))
    p = e / ct.sum(e, axis=1, keepdims=True)
    ct.store(out, index=(bid, 0), tile=ct.astype(p, out.dtype), allow_tma=TMA_STORE)


def tma_store_ok(out: torch.Tensor) -> bool:
    """TMA stores only where out's rows are whole 16-byte units: a TMA store writes on to the next
    16-byte boundary past a shorter inner extent (a tensor of one row or one column lets tileiras
    pick TMA where its row stride would otherwise rule it out)."""
    return (out.shape[-1] * out.element_size()) % 16 == 0


def bind_launch(x: torch.Tensor, out: torch.Tensor, rows: int, tn: int, kernel=None):
    k = kernel or softmax_rows_kernel
    grid = (-(-x.shape[0] // rows), 1, 1)
    args = (x, out, rows, tn, tma_store_ok(out))

    def launch():
        ct.launch(torch.cuda.current_stream(), grid, k, args)
    return launch
