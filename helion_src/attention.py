"""Attention forward in Helion, the teaching twin: O = softmax(Q K^T / sqrt(D) + mask) V per head.

``hl.tile([B, Hq, Sq], block_size=[1, 1, None])`` gives each program one (batch, head) and a tile
of query rows; the inner ``hl.tile`` walks the keys a tile at a time. Per key tile: S = Q K^T in
fp32 (``hl.dot``), then the online softmax - a running max ``m`` and sum ``l`` per row, and when a
tile raises the max, what was summed so far (``l`` and the accumulator) is rescaled by
2^(old m - new m) - then acc += P V with P rounded to the input dtype. One division at the end.
The scores live in log2 units (the scale times log2 e, one multiply) so that every exponential
is an exp2. ``m`` and ``l`` are [rows, 1] columns (reductions with ``keepdim``), which broadcast
against the [rows, keys] tile as they are.

Masks: Helion masks the loads of a ragged last tile itself; the scores of keys that a row must
not see are set to -inf here - keys past Sk, or with ``causal`` (bottom-right: query i sees key j
iff j <= i + Sk - Sq) keys past the row's diagonal. With ``causal`` the key loop also stops at
the tile's last row's diagonal. Key 0 is visible to every row, so the first tile gives each row a
finite max. Query head h reads K / V head h // (Hq // Hkv) (grouped-query attention).
``causal`` is a compile-time constant (``hl.constexpr``); tile sizes, warps and stages are
Helion's default configuration (``autotune_effort="none"``).

The mask broadcasts the tile indices with ``unsqueeze``, never a slice (``tm.index[:, None]``):
under Helion 1.4 a slice's extent is matched against the head dim's with a guard, which at D = 64
made the query tile's block size 64, the head dim's, and failed causal D = 64 cases with
``ShapeMismatch`` on the running max (``attention_tma.py`` has the details). Checked on the CPU
with Helion 1.4 and 1.5; awaits a GPU run.
"""
from __future__ import annotations

import math

import torch

import helion
import helion.language as hl

LOG2E = 1.4426950408889634


@helion.kernel(autotune_effort="none")
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
              causal: hl.constexpr) -> torch.Tensor:
    B, Hq, Sq, D = q.size()
    Hkv, Sk = k.size(1), k.size(2)
    D = hl.specialize(D)
    qk_scale = LOG2E / math.sqrt(D)
    for tb, th, tm in hl.tile([B, Hq, Sq], block_size=[1, 1, None]):
        b, h, hk = tb.begin, th.begin, th.begin // (Hq // Hkv)
        m = hl.full([tm, 1], float("-inf"), dtype=torch.float32)
        l = hl.zeros([tm, 1], dtype=torch.float32)
        acc = hl.zeros([tm, D], dtype=torch.float32)
        qb = q[b, h, tm, :]
        if causal:  # statements: Helion 1.4 rejects `x if c else y` (IfExp)
            end = tm.end + (Sk - Sq)
        else:
            end = Sk
        for tn in hl.tile(0, end):
            s = hl.dot(qb, k[b, hk, tn, :].T, out_dtype=torch.float32) * qk_scale
            if causal:
                s = torch.where(tn.index.unsqueeze(0) <= tm.index.unsqueeze(1) + (Sk - Sq), s, float("-inf"))
            else:
                s = torch.where(tn.index.unsqueeze(0) < Sk, s, float("-inf"))
            m_new = torch.maximum(m, torch.amax(s, 1, keepdim=True))
            p = torch.exp2(s - m_new)
            alpha = torch.exp2(m - m_new)
            l = l * alpha + torch.sum(p, 1, keepdim=True)
            acc = hl.dot(p.to(v.dtype), v[b, hk, tn, :], acc=acc * alpha)
            m = m_new
        out[b, h, tm, :] = (acc / l).to(out.dtype)
    return out
