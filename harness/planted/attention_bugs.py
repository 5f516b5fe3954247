"""Attention kernels with planted bugs, and their correct twin (Triton, run under TRITON_INTERPRET=1).

One kernel, the flash-attention loop of the teaching twin, with ``BUG`` choosing the slip:
0 correct; 1 the running sum not rescaled when a block raises the max; 2 the causal mask off by
one (a query also sees the key after its diagonal); 3 exp2 with the plain 1/sqrt(D) scale, the
log2(e) factor forgotten (a softmax at the wrong temperature). Each ``prepare_*`` has the
registry's signature.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from kltools.triton_interp import apply_bf16_fixes

# under the interpreter, bf16 dots and fp32 -> bf16 conversions as the GPU does them (the fixes
# triton_src applies on import too; without them a bf16 tl.dot multiplies raw bit patterns)
apply_bf16_fixes()

BLOCK = 64


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sq, sk, sv, so, Hq, GROUP, Sq, Sk, scale,
                     CAUSAL: tl.constexpr, BUG: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
    """q, k, v, o: [B, H, S, D] with (batch, head, position) strides sq, sk, sv, so (3-tuples)."""
    b = tl.program_id(1) // Hq
    h = tl.program_id(1) % Hq
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + b * sq[0] + h * sq[1] + rows[:, None] * sq[2] + dims[None, :], mask=rows[:, None] < Sq)
    qk_scale = scale if BUG == 3 else scale * 1.4426950408889634
    last = rows + Sk - Sq + (1 if BUG == 2 else 0)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK,), tl.float32)
    acc = tl.zeros((BLOCK, D), tl.float32)
    for start in range(0, Sk, BLOCK):
        keys = start + tl.arange(0, BLOCK)
        kv = (keys[:, None] < Sk)
        k = tl.load(k_ptr + b * sk[0] + (h // GROUP) * sk[1] + keys[:, None] * sk[2] + dims[None, :], mask=kv)
        v = tl.load(v_ptr + b * sv[0] + (h // GROUP) * sv[1] + keys[:, None] * sv[2] + dims[None, :], mask=kv)
        seen = keys[None, :] < Sk
        if CAUSAL:
            seen = seen & (keys[None, :] <= last[:, None])
        s = tl.where(seen, tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m - m_new)
        l = (l if BUG == 1 else l * alpha) + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(o_ptr + b * so[0] + h * so[1] + rows[:, None] * so[2] + dims[None, :],
             (acc / l[:, None]).to(o_ptr.dtype.element_ty), mask=rows[:, None] < Sq)


def _attention(bug: int):
    def prepare(case, inputs, out):
        q, k, v = inputs
        B, Hq, Sq, D = q.shape

        def launch():
            grid = (triton.cdiv(Sq, BLOCK), B * Hq)
            attention_kernel[grid](q, k, v, out, q.stride()[:3], k.stride()[:3], v.stride()[:3],
                                   out.stride()[:3], Hq, Hq // k.shape[1], Sq, k.shape[2],
                                   1.0 / math.sqrt(D), CAUSAL=bool(case.params["causal"]), BUG=bug,
                                   D=D, BLOCK=BLOCK)
        return launch
    prepare.__doc__ = ["Correct: the flash-attention loop of the teaching twin.",
                       "BUG (missing rescale): the running sum is not rescaled when the max grows.",
                       "BUG (causal off by one): a query also sees the key after its diagonal.",
                       "BUG (wrong scale): exp2 with 1/sqrt(D), the log2(e) factor forgotten."][bug]
    return prepare


prepare_attention = _attention(0)
prepare_attention_no_rescale = _attention(1)
prepare_attention_causal_off_by_one = _attention(2)
prepare_attention_wrong_scale = _attention(3)
