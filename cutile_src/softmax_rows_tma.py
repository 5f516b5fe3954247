"""cuTile row softmax, rows with TMA loads (not yet run on a GPU): the rows kernel
(softmax_rows.py: a (ROWS, TN) tile of whole rows, reduced along its rows, scaled and stored)
with the columns past N masked to -inf by their index instead of by the load's padding.

Why: tileiras loads a tile through TMA (into shared memory, several loads in flight) only where
the padding of out-of-bounds elements is zero or left open; ``padding_mode=NEG_INF`` (the rows
kernel) makes it load through registers (LDG.E.128, one tile a program at a time). The SASS of
both for sm_90 (tests/test_cutile_layer.py) shows UTMALDG here, LDG there. Rows past M hold
whatever the load leaves there; they are reduced on their own and never stored.
"""
import math

import cuda.tile as ct
import torch

from cutile_src.softmax_rows import tma_store_ok


@ct.kernel
def softmax_rows_tma_kernel(x, out, ROWS: ct.Constant[int], TN: ct.Constant[int], LATENCY: ct.Constant[int],
                            TMA_STORE: ct.Constant[bool]):
    inside = ct.reshape(ct.arange(TN, dtype=ct.int32), (1, TN)) < x.shape[1]
    for i in range(ct.bid(0), ct.cdiv(x.shape[0], ROWS), ct.num_blocks(0)):
        if LATENCY > 0:  # a latency hint (1..10) for tileiras's TMA pipeline; 0: its own estimate
            t = ct.load(x, index=(i, 0), shape=(ROWS, TN), latency=LATENCY)
        else:
            t = ct.load(x, index=(i, 0), shape=(ROWS, TN))
        t = ct.where(inside, ct.astype(t, ct.float32), -math.inf)
        e = ct.exp(t - ct.max(t, axis=1, keepdims=True))
        p = e * (1.0 / ct.sum(e, axis=1, keepdims=True))  # one division a row
        ct.store(out, index=(i, 0), tile=ct.astype(p, out.dtype), allow_tma=TMA_STORE)


def bind_launch(x: torch.Tensor, out: torch.Tensor, rows: int, tn: int, latency: int = 0, grid: int | None = None,
                kernel=None):
    """``grid`` programs (default: one a row tile) take row tiles bid, bid + grid, ..."""
    k = kernel or softmax_rows_tma_kernel
    grid = (grid or -(-x.shape[0] // rows), 1, 1)
    args = (x, out, rows, tn, latency, tma_store_ok(out))

    def launch():
        ct.launch(torch.cuda.current_stream(), grid, k, args)
    return launch
