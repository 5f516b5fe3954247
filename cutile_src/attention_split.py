"""cuTile attention forward, ``split`` (verified on the H200, untimed): flash-decoding for grids of few
query tiles (a chunk of new tokens against a long cache, a few heads), where one program a query
tile would leave SMs idle while each walks the whole key axis.

The key tiles of a query tile are cut into ``splits`` ranges of ``per`` tiles; program
(i * splits + s, h, b) folds range s into its own running (acc, l, m) with the ``tma`` kernel's
loop (attention_tma.key_tiles: the bulk unmasked, the edge masked; a range past the causal end
is empty) and writes them, unnormalised, to fp32 workspaces padded to whole query tiles. The
combine kernel, a program a query tile, merges the ranges: m = max m_s, O = sum 2^(m_s - m) acc_s
/ sum 2^(m_s - m) l_s. Range 0 holds key 0, which every row sees, so m is finite from it on.
"""
import math

import cuda.tile as ct
import torch

from cutile_src.attention_tma import LOG2E, ZERO, key_range, key_tiles


@ct.kernel
def attention_split_kernel(q, k, v, acc_part, m_part, l_part, qk_scale: float, group: int, splits: int, per: int,
                           D: ct.Constant[int], TM: ct.Constant[int], TN: ct.Constant[int],
                           CAUSAL: ct.Constant[bool], LATENCY: ct.Constant[int]):
    i, s = ct.bid(0) // splits, ct.bid(0) % splits
    h, b = ct.bid(1), ct.bid(2)
    Sq, Sk = q.shape[2], k.shape[2]
    diag = Sk - Sq
    qt = ct.reshape(ct.load(q, index=(b, h, i, 0), shape=(1, 1, TM, D), padding_mode=ZERO), (TM, D))
    rows = ct.reshape(i * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    m = ct.full((TM, 1), -math.inf, dtype=ct.float32)
    l = ct.full((TM, 1), 0.0, dtype=ct.float32)
    acc = ct.full((TM, D), 0.0, dtype=ct.float32)
    bulk, end = key_range(i, Sk, diag, TM, TN, CAUSAL)
    lo = s * per
    hi = min(lo + per, end)
    mid = max(lo, min(hi, bulk))
    acc, l, m = key_tiles(acc, l, m, qt, k, v, b, h // group, lo, mid, rows, Sk, diag, qk_scale, D, TN, False,
                          CAUSAL, LATENCY)
    acc, l, m = key_tiles(acc, l, m, qt, k, v, b, h // group, mid, hi, rows, Sk, diag, qk_scale, D, TN, True,
                          CAUSAL, LATENCY)
    ct.store(acc_part, index=(b, h, s, i, 0), tile=ct.reshape(acc, (1, 1, 1, TM, D)))
    ct.store(m_part, index=(b, h, s, i), tile=ct.reshape(m, (1, 1, 1, TM)))
    ct.store(l_part, index=(b, h, s, i), tile=ct.reshape(l, (1, 1, 1, TM)))


@ct.kernel
def attention_combine_kernel(acc_part, m_part, l_part, out, splits: int, D: ct.Constant[int], TM: ct.Constant[int]):
    i, h, b = ct.bid(0), ct.bid(1), ct.bid(2)
    m = ct.reshape(ct.load(m_part, index=(b, h, 0, i), shape=(1, 1, 1, TM)), (TM, 1))
    l = ct.reshape(ct.load(l_part, index=(b, h, 0, i), shape=(1, 1, 1, TM)), (TM, 1))
    acc = ct.reshape(ct.load(acc_part, index=(b, h, 0, i, 0), shape=(1, 1, 1, TM, D)), (TM, D))
    for s in range(1, splits):
        m_s = ct.reshape(ct.load(m_part, index=(b, h, s, i), shape=(1, 1, 1, TM)), (TM, 1))
        l_s = ct.reshape(ct.load(l_part, index=(b, h, s, i), shape=(1, 1, 1, TM)), (TM, 1))
        acc_s = ct.reshape(ct.load(acc_part, index=(b, h, s, i, 0), shape=(1, 1, 1, TM, D)), (TM, D))
        m_new = ct.maximum(m, m_s)
        a, a_s = ct.exp2(m - m_new, flush_to_zero=True), ct.exp2(m_s - m_new, flush_to_zero=True)
        l = l * a + l_s * a_s
        acc = acc * a + acc_s * a_s
        m = m_new
    o = ct.truediv(acc, l, flush_to_zero=True, rounding_mode=ct.RoundingMode.APPROX)
    ct.store(out, index=(b, h, i, 0), tile=ct.reshape(ct.astype(o, out.dtype), (1, 1, TM, D)))


def workspace(q, plan: dict, device=None):
    """(acc, m, l) partials in fp32: [B, Hq, SPLITS, Sq rounded up to TM, D] and [..., Sq rounded up]
    (whole query tiles: every store and load of them is in bounds)."""
    B, Hq, Sq, D = q.shape
    rows = -(-Sq // plan["TM"]) * plan["TM"]
    kw = dict(dtype=torch.float32, device=device or q.device)
    shape = (B, Hq, plan["SPLITS"], rows)
    return torch.empty(*shape, D, **kw), torch.empty(*shape, **kw), torch.empty(*shape, **kw)


def launch_args(q, k, v, out, causal: bool, plan: dict, parts) -> tuple:
    """The (partial, combine) kernels' arguments for ``plan`` and the workspace ``parts``."""
    D = q.shape[3]
    part = (q, k, v, *parts, LOG2E / math.sqrt(D), q.shape[1] // k.shape[1], plan["SPLITS"], plan["PER"], D,
            plan["TM"], plan["TN"], bool(causal), plan["LATENCY"])
    return part, (*parts, out, plan["SPLITS"], D, plan["TM"])


def bind_launch(q, k, v, out, causal: bool, plan: dict, parts, kernels=None):
    """A zero-argument launch of both kernels (the workspace ``parts`` allocated by the caller, once)."""
    kp, kc = kernels or (attention_split_kernel, attention_combine_kernel)
    a_part, a_comb = launch_args(q, k, v, out, causal, plan, parts)
    g_part, g_comb = tuple(plan["grid"]), tuple(plan["combine_grid"])

    def launch():
        stream = torch.cuda.current_stream()
        ct.launch(stream, g_part, kp, a_part)
        ct.launch(stream, g_comb, kc, a_comb)
    return launch
