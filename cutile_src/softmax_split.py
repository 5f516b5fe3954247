"""cuTile row softmax, split: few long rows, each cut into C chunks of
CHUNK columns handled by C different programs, so that a handful of rows still fills the SMs.

cuTile gives no grid-wide barrier, so the exchange of the row's (max, sum) goes through global
memory between two launches:

1. ``softmax_split_stats_kernel``: program unit (row, c) loads chunk c of the row (a (1, CHUNK)
   tile; columns past N masked to -inf by their index, so that the load may go through TMA),
   reduces it to m = max and s = sum exp(x - m) and stores the pair into ``mx[row, c]``,
   ``sm[row, c]`` (fp32, [M, C]);
2. ``softmax_split_norm_kernel``: unit (row, c) loads the row's C partials as one (1, CP) tile
   (CP >= C a power of two; the lanes past C padded with -inf and 0), combines them into the row's
   max M and sum S = sum_c s_c exp(m_c - M), loads its chunk again and stores exp(x - M) / S.

The second read of x comes from L2 where the rows fit it (the planner takes this path for few
rows: M x N bytes of a few MB to tens of MB), so HBM sees one read and one write. Both kernels
loop over units bid, bid + grid, ... (a grid of co-resident programs when the planner caps it).
"""
import math

import cuda.tile as ct
import torch

from cutile_src.softmax_rows import tma_store_ok


@ct.kernel
def softmax_split_stats_kernel(x, mx, sm, CHUNK: ct.Constant[int]):
    C = mx.shape[1]
    cols = ct.reshape(ct.arange(CHUNK, dtype=ct.int32), (1, CHUNK))
    for u in range(ct.bid(0), x.shape[0] * C, ct.num_blocks(0)):
        row, c = u // C, u % C
        t = ct.astype(ct.load(x, index=(row, c), shape=(1, CHUNK)), ct.float32)
        t = ct.where(cols < x.shape[1] - c * CHUNK, t, -math.inf)  # columns past N
        m = ct.max(t, axis=1, keepdims=True)
        shift = ct.where(m == -math.inf, 0.0, m)  # a chunk of -inf only: s = 0
        s = ct.sum(ct.exp(t - shift), axis=1, keepdims=True)
        ct.store(mx, index=(row, c), tile=m, allow_tma=False)
        ct.store(sm, index=(row, c), tile=s, allow_tma=False)


@ct.kernel
def softmax_split_norm_kernel(x, out, mx, sm, CHUNK: ct.Constant[int], CP: ct.Constant[int],
                              TMA_STORE: ct.Constant[bool]):
    C = mx.shape[1]
    for u in range(ct.bid(0), x.shape[0] * C, ct.num_blocks(0)):
        row, c = u // C, u % C
        pm = ct.load(mx, index=(row, 0), shape=(1, CP), padding_mode=ct.PaddingMode.NEG_INF)
        ps = ct.load(sm, index=(row, 0), shape=(1, CP), padding_mode=ct.PaddingMode.ZERO)
        m = ct.max(pm, axis=1, keepdims=True)
        inv = 1.0 / ct.sum(ps * ct.exp(pm - m), axis=1, keepdims=True)  # chunks of -inf add 0
        t = ct.astype(ct.load(x, index=(row, c), shape=(1, CHUNK)), ct.float32)
        # columns past N are computed on whatever the load left there and dropped by the store
        ct.store(out, index=(row, c), tile=ct.astype(ct.exp(t - m) * inv, out.dtype), allow_tma=TMA_STORE)


def partials(M: int, C: int, device) -> tuple:
    """The [M, C] fp32 buffers of the chunks' max and sum (every element written before it is
    read)."""
    return (torch.empty((M, C), dtype=torch.float32, device=device),
            torch.empty((M, C), dtype=torch.float32, device=device))


def bind_launch(x: torch.Tensor, out: torch.Tensor, cfg: dict, kernels=None, bufs=None):
    """The planned ``cfg`` (CHUNK, C, CP, grid): two launches (stats, normalise); the buffers are
    made once here (or given), outside the timed launch."""
    bufs = bufs or partials(x.shape[0], cfg["C"], x.device)
    grid = (cfg["grid"], 1, 1)
    ks, kn = kernels or (softmax_split_stats_kernel, softmax_split_norm_kernel)
    steps = [(ks, (x, *bufs, cfg["CHUNK"])), (kn, (x, out, *bufs, cfg["CHUNK"], cfg["CP"], tma_store_ok(out)))]

    def launch():
        stream = torch.cuda.current_stream()
        for k, a in steps:
            ct.launch(stream, grid, k, a)
    launch.buffers = bufs
    return launch
