"""cuTile row softmax, the teaching twin: one program per row, any N, any row stride.

Pass 1 walks the row in tiles of TILE columns keeping a running max ``m`` and a running sum
``s`` of exp(x - m) (the online softmax: when the max grows, the old sum is rescaled by
exp(m_old - m_new)). Pass 2 walks the row again and stores exp(x - m) / s. Columns past the end
are padded with -inf (their exp is 0) and never stored. Math is fp32 whatever the input dtype.
"""
import math

import cuda.tile as ct
import torch

TILE = 1024


@ct.kernel
def softmax_kernel(x, out, TILE: ct.Constant[int]):
    row = ct.bid(0)
    n_tiles = ct.num_tiles(x, axis=1, shape=(1, TILE))
    m = ct.full((1, 1), -math.inf, dtype=ct.float32)
    s = ct.full((1, 1), 0.0, dtype=ct.float32)
    for j in range(n_tiles):
        t = ct.load(x, index=(row, j), shape=(1, TILE), padding_mode=ct.PaddingMode.NEG_INF)
        t = ct.astype(t, ct.float32)
        m_new = ct.maximum(m, ct.max(t, axis=1, keepdims=True))
        shift = ct.where(m_new == -math.inf, 0.0, m_new)  # a row that so far is all -inf
        s = s * ct.exp(m - shift) + ct.sum(ct.exp(t - shift), axis=1, keepdims=True)
        m = m_new
    for j in range(n_tiles):
        t = ct.astype(ct.load(x, index=(row, j), shape=(1, TILE),
                              padding_mode=ct.PaddingMode.NEG_INF), ct.float32)
        # allow_tma=False: a TMA store writes on to the next 16-byte boundary when a row's
        # bytes are not a multiple of 16 (only one row, or a one-column tensor, makes it legal)
        ct.store(out, index=(row, j), tile=ct.astype(ct.exp(t - m) / s, out.dtype), allow_tma=False)


def softmax(x: torch.Tensor, out: torch.Tensor) -> None:
    ct.launch(torch.cuda.current_stream(), (x.shape[0], 1, 1), softmax_kernel, (x, out, TILE))
