"""cuTile attention forward, the teaching twin: O = softmax(Q K^T / sqrt(D) + mask) V per head.

Program (i, h, b) owns TM query rows of head h of batch b. It loads its Q tile once, then
walks the keys in tiles of TN: S = Q K^T on the tensor cores (``ct.mma``, fp32 accumulation;
K is loaded transposed by the load's ``order``), the scores past Sk or above the causal
diagonal set to -inf, and the online softmax in fp32: a running row max ``m`` and sum ``l``, the
accumulator rescaled by exp(m_old - m_new) whenever the max grows, and O += P V with P rounded
to the input dtype. The exponentials are exp2 of scores already multiplied by log2(e) / sqrt(D).
At the end O / l is stored; rows past Sq are dropped by the store.

The causal mask is bottom-right aligned: query i sees key j iff j <= i + Sk - Sq, so the loop
stops at the tile holding the last key the tile's last row sees. Grouped-query heads: query
head h reads K / V head h // (Hq / Hkv). The loads zero-pad past Sq and Sk (a zero V row times a
zero weight adds nothing). Any lengths, either layout (the loads follow the strides).
"""
import math

import cuda.tile as ct
import torch

TM, TN = 64, 64
LOG2E = 1.4426950408889634
ZERO = ct.PaddingMode.ZERO


@ct.kernel
def attention_kernel(q, k, v, out, qk_scale: float, group: int, D: ct.Constant[int],
                     TM: ct.Constant[int], TN: ct.Constant[int], CAUSAL: ct.Constant[bool]):
    i, h, b = ct.bid(0), ct.bid(1), ct.bid(2)
    hk = h // group
    Sq, Sk = q.shape[2], k.shape[2]
    qt = ct.reshape(ct.load(q, index=(b, h, i, 0), shape=(1, 1, TM, D), padding_mode=ZERO), (TM, D))
    rows = ct.reshape(i * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    cols = ct.reshape(ct.arange(TN, dtype=ct.int32), (1, TN))
    m = ct.full((TM, 1), -math.inf, dtype=ct.float32)
    l = ct.full((TM, 1), 0.0, dtype=ct.float32)
    acc = ct.full((TM, D), 0.0, dtype=ct.float32)
    keys_seen = Sk
    if CAUSAL:  # the last row of the tile sees keys 0 .. (i + 1) TM - 1 + Sk - Sq
        keys_seen = min(Sk, (i + 1) * TM + Sk - Sq)
    for j in range(ct.cdiv(keys_seen, TN)):
        kt = ct.load(k, index=(b, hk, 0, j), shape=(1, 1, D, TN), order=(0, 1, 3, 2), padding_mode=ZERO)
        s = ct.mma(qt, ct.reshape(kt, (D, TN)), ct.full((TM, TN), 0.0, dtype=ct.float32)) * qk_scale
        keys = j * TN + cols
        visible = keys < Sk
        if CAUSAL:
            visible = visible & (keys <= rows + (Sk - Sq))
        s = ct.where(visible, s, -math.inf)
        # key 0 is visible to every row (Sq <= Sk when causal), so m is finite after tile 0
        m_new = ct.maximum(m, ct.max(s, axis=1, keepdims=True))
        p = ct.exp2(s - m_new)
        alpha = ct.exp2(m - m_new)
        l = l * alpha + ct.sum(p, axis=1, keepdims=True)
        vt = ct.reshape(ct.load(v, index=(b, hk, j, 0), shape=(1, 1, TN, D), padding_mode=ZERO), (TN, D))
        acc = ct.mma(ct.astype(p, q.dtype), vt, acc * alpha)
        m = m_new
    o = ct.astype(acc / l, out.dtype)
    ct.store(out, index=(b, h, i, 0), tile=ct.reshape(o, (1, 1, TM, D)))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool) -> None:
    B, Hq, Sq, D = q.shape
    grid = (-(-Sq // TM), Hq, B)
    ct.launch(torch.cuda.current_stream(), grid, attention_kernel,
              (q, k, v, out, LOG2E / math.sqrt(D), Hq // k.shape[1], D, TM, TN, bool(causal)))
