"""Attention forward in Triton, the teaching twin: O = softmax(Q K^T / sqrt(D) + mask) V per head.

One program owns a block of BLOCK_M query rows of one (batch, head) and keeps them on chip while it
walks the keys in blocks of BLOCK_N: S = Q K^T for the block, then the online softmax (a running
max ``m`` and sum ``l`` per row; when a block raises the max, what was summed so far - ``l`` and the
output accumulator - is rescaled by exp(old m - new m)), then acc += P V with P rounded to the
input dtype for the tensor cores. One division by ``l`` at the end. Neither the Sq x Sk scores nor
the probabilities ever reach memory: this is FlashAttention (Dao et al., 2022).

Masks: keys past Sk (the ragged last block) and, when causal, keys after a row's diagonal - the
problem's bottom-right convention, query i sees key j iff j <= i + Sk - Sq - get -inf, so they
weigh exp(-inf) = 0. Key 0 is visible to every row, so the first block gives each row a finite max.
Query head h reads K / V head h // GROUP (grouped-query attention).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .checks import attention_args


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sq_b, sq_h, sq_s, sk_b, sk_h, sk_s,
                     sv_b, sv_h, sv_s, so_b, so_h, so_s, Hq, GROUP, Sq, Sk, scale,
                     CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(1) // Hq
    h = tl.program_id(1) % Hq
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + b.to(tl.int64) * sq_b + h * sq_h + rows[:, None] * sq_s + dims[None, :],
                mask=rows[:, None] < Sq, other=0.0)
    k_base = k_ptr + b.to(tl.int64) * sk_b + (h // GROUP) * sk_h
    v_base = v_ptr + b.to(tl.int64) * sv_b + (h // GROUP) * sv_h
    last = rows + Sk - Sq                 # the last key each row may see (causal)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    end = tl.minimum(Sk, tl.program_id(0) * BLOCK_M + BLOCK_M + Sk - Sq) if CAUSAL else Sk
    for start in range(0, end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(k_base + keys[:, None] * sk_s + dims[None, :], mask=keys[:, None] < Sk, other=0.0)
        v = tl.load(v_base + keys[:, None] * sv_s + dims[None, :], mask=keys[:, None] < Sk, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        visible = keys[None, :] < Sk
        if CAUSAL:
            visible = visible & (keys[None, :] <= last[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)         # rescales what was summed under the old max
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    o = acc / l[:, None]
    tl.store(o_ptr + b.to(tl.int64) * so_b + h * so_h + rows[:, None] * so_s + dims[None, :],
             o.to(o_ptr.dtype.element_ty), mask=rows[:, None] < Sq)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of q [B, Hq, Sq, D] over k, v [B, Hkv, Sk, D] (any strides with a unit last one)."""
    out = attention_args(q, k, v, out, causal)
    B, Hq, Sq, D = q.shape
    BLOCK_M, BLOCK_N = 64, 64
    grid = (triton.cdiv(Sq, BLOCK_M), B * Hq)
    attention_kernel[grid](q, k, v, out, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
                           *out.stride()[:3], Hq, Hq // k.shape[1], Sq, k.shape[2], 1.0 / math.sqrt(D),
                           CAUSAL=bool(causal), D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return out
