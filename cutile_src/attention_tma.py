"""cuTile attention forward, ``tma`` (verified on the H200, untimed): the twin's algorithm (see
attention.py) as a cuTile expert tunes it for Hopper. What changes, each for a reason:

- Tiles by rule (``dispatch_attention.plan_attention``): 128 query rows where the grid of them
  fills the SMs, else 64; keys a tile and the kernel hints (worker warps, occupancy) by the head
  dim. The loads are whole tiles of 4-d arrays whose strides are 16-byte multiples (both
  layouts), so tileiras loads Q, K and V by TMA into shared memory (``UTMALDG``) from a producer
  warp and stores O by TMA (``UTMASTG``); the K / V loads carry a latency hint (``LATENCY``) that
  deepens that pipeline. Zero padding past Sk costs nothing there (TMA fills it).
- Two loops over key tiles: the bulk, which every row of the tile sees (no mask: no index
  arithmetic, no select), then the edge tiles (the ragged end of Sk and, when causal, the
  diagonal) with the mask. Causal tiles wholly above the diagonal are never visited, and the
  query tiles with the most keys are launched first, so that the short ones fill the grid's tail.
- exp2 of scores scaled by log2(e) / sqrt(D) in one multiply-add (the bulk takes the row max of
  the raw scores and scales it once), flushing subnormals to zero; the final division approximate
  (the output is rounded to 16 bits after it).
"""
import math

import cuda.tile as ct
import torch

LOG2E = 1.4426950408889634
ZERO = ct.PaddingMode.ZERO


def key_range(i, Sk, diag, TM: ct.Constant[int], TN: ct.Constant[int], CAUSAL: ct.Constant[bool]):
    """Query tile i's key tiles: (bulk, end) - tiles [0, bulk) every row sees in full, [bulk, end)
    the masked edge (keys past Sk or, ``CAUSAL``, past a row's diagonal: query r sees j <= r + diag;
    the tile's first row sees keys <= i TM + diag, its last row more)."""
    bulk = Sk // TN
    end = ct.cdiv(Sk, TN)
    if CAUSAL:
        bulk = min(i * TM + diag + 1, Sk) // TN
        end = ct.cdiv(min(Sk, (i + 1) * TM + diag), TN)
    return bulk, end


def key_tiles(acc, l, m, qt, k, v, b, hk, lo, hi, rows, Sk, diag, qk_scale, D: ct.Constant[int],
              TN: ct.Constant[int], MASKED: ct.Constant[bool], CAUSAL: ct.Constant[bool],
              LATENCY: ct.Constant[int]):
    """Fold key tiles [lo, hi) into the running (acc, l, m); m is in log2 units. ``MASKED``: the
    tiles hold keys past Sk or, ``CAUSAL``, past some row's diagonal (query i sees j <= i + diag)."""
    cols = ct.reshape(ct.arange(TN, dtype=ct.int32), (1, TN))
    for j in range(lo, hi):
        kt = ct.load(k, index=(b, hk, 0, j), shape=(1, 1, D, TN), order=(0, 1, 3, 2), padding_mode=ZERO,
                     latency=LATENCY)
        s = ct.mma(qt, ct.reshape(kt, (D, TN)), ct.full((rows.shape[0], TN), 0.0, dtype=ct.float32))
        if MASKED:
            keys = j * TN + cols
            seen = keys < Sk
            if CAUSAL:
                seen = seen & (keys <= rows + diag)
            s = ct.where(seen, s * qk_scale, -math.inf)
            m_new = ct.maximum(m, ct.max(s, axis=1, keepdims=True))
            # a row that has seen no key yet (a split's range may start past its diagonal): -inf
            # scores against a zero shift, weight 0, instead of -inf - -inf
            shift = ct.where(m_new == -math.inf, 0.0, m_new)
            s = s - shift
        else:
            m_new = ct.maximum(m, ct.max(s, axis=1, keepdims=True) * qk_scale)
            shift = m_new
            s = s * qk_scale - shift
        p = ct.exp2(s, flush_to_zero=True)
        alpha = ct.exp2(m - shift, flush_to_zero=True)
        l = l * alpha + ct.sum(p, axis=1, keepdims=True)
        vt = ct.load(v, index=(b, hk, j, 0), shape=(1, 1, TN, D), padding_mode=ZERO, latency=LATENCY)
        acc = ct.mma(ct.astype(p, qt.dtype), ct.reshape(vt, (TN, D)), acc * alpha)
        m = m_new
    return acc, l, m


@ct.kernel
def attention_tma_kernel(q, k, v, out, qk_scale: float, group: int, D: ct.Constant[int], TM: ct.Constant[int],
                         TN: ct.Constant[int], CAUSAL: ct.Constant[bool], LATENCY: ct.Constant[int]):
    i = ct.bid(0)
    if CAUSAL:
        i = ct.num_blocks(0) - 1 - i        # the longest query tiles first
    h, b = ct.bid(1), ct.bid(2)
    hk = h // group
    Sq, Sk = q.shape[2], k.shape[2]
    diag = Sk - Sq
    qt = ct.reshape(ct.load(q, index=(b, h, i, 0), shape=(1, 1, TM, D), padding_mode=ZERO), (TM, D))
    rows = ct.reshape(i * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    m = ct.full((TM, 1), -math.inf, dtype=ct.float32)
    l = ct.full((TM, 1), 0.0, dtype=ct.float32)
    acc = ct.full((TM, D), 0.0, dtype=ct.float32)
    bulk, end = key_range(i, Sk, diag, TM, TN, CAUSAL)
    acc, l, m = key_tiles(acc, l, m, qt, k, v, b, hk, 0, bulk, rows, Sk, diag, qk_scale, D, TN, False,
                          CAUSAL, LATENCY)
    acc, l, m = key_tiles(acc, l, m, qt, k, v, b, hk, bulk, end, rows, Sk, diag, qk_scale, D, TN, True,
                          CAUSAL, LATENCY)
    o = ct.truediv(acc, l, flush_to_zero=True, rounding_mode=ct.RoundingMode.APPROX)
    ct.store(out, index=(b, h, i, 0), tile=ct.reshape(ct.astype(o, out.dtype), (1, 1, TM, D)))


def launch_args(q, k, v, out, causal: bool, plan: dict) -> tuple:
    """The kernel's arguments for ``plan`` (TM, TN, LATENCY from dispatch_attention)."""
    D = q.shape[3]
    return (q, k, v, out, LOG2E / math.sqrt(D), q.shape[1] // k.shape[1], D, plan["TM"], plan["TN"],
            bool(causal), plan["LATENCY"])


def bind_launch(q, k, v, out, causal: bool, plan: dict, kernel=None):
    """A zero-argument launch of the planned grid (query tiles, Hq, B)."""
    kern = kernel or attention_tma_kernel
    args = launch_args(q, k, v, out, causal, plan)
    grid = tuple(plan["grid"])

    def launch():
        ct.launch(torch.cuda.current_stream(), grid, kern, args)
    return launch
