"""Attention forward, the teaching twin: O = softmax(Q K^T / sqrt(D) + mask) V per head.

Triton's twin (``triton_src/attention.py``) with its layouts spelled out. A program owns BLOCK_M
query rows of one (batch, head); 4 warps own 16 rows each in the layout of the tensor cores'
mma.sync (``NVMMADistributedLayout`` v2), so the scores S = Q K^T come out already split by rows
and the online softmax's row max and sum (``SliceLayout(1, mma)``) never leave a warp. Q is held in
registers as the MMA's A operand for the whole key loop; each K^T and V block is loaded with masks
(16 bytes a thread along the head dim) and converted to the B operand's layout; P is converted
from the accumulator's layout to the A operand's for P V. The masks and the bottom-right causal
convention are the Triton twin's: keys past Sk and keys after a row's diagonal weigh exp(-inf).
"""
import math

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2


@gluon.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sq_b, sq_h, sq_s, sk_b, sk_h, sk_s,
                     sv_b, sv_h, sv_s, so_b, so_h, so_s, Hq, GROUP, Sq, Sk, scale,
                     CAUSAL: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8])
    a_dot: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    b_dot: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    rows_of: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])   # [rows, D]: 8 along D
    cols_of: gl.constexpr = gl.BlockedLayout([8, 1], [8, 4], [1, 4], [0, 1])   # [D, keys]: 8 along D
    b = gl.program_id(1) // Hq
    h = gl.program_id(1) % Hq
    k_base = k_ptr + b.to(gl.int64) * sk_b + (h // GROUP) * sk_h
    v_base = v_ptr + b.to(gl.int64) * sv_b + (h // GROUP) * sv_h
    # Q [BLOCK_M, D], once, into the A operand's registers
    r = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, rows_of))
    d = gl.arange(0, D, layout=gl.SliceLayout(0, rows_of))
    q = gl.load(q_ptr + b.to(gl.int64) * sq_b + h * sq_h + r[:, None] * sq_s + d[None, :],
                mask=(r < Sq)[:, None], other=0.0)
    q = gl.convert_layout(q, a_dot)
    dt = gl.arange(0, D, layout=gl.SliceLayout(1, cols_of))
    nt = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, cols_of))
    nv = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, rows_of))
    # the softmax state, in the layout of the rows of the MMA's results
    rows = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma))
    last = rows + Sk - Sq                     # the last key each row may see (causal)
    m = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, mma))
    l = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, mma))
    acc = gl.zeros([BLOCK_M, D], gl.float32, mma)
    end = Sk
    if CAUSAL:
        end = gl.minimum(Sk, gl.program_id(0) * BLOCK_M + BLOCK_M + Sk - Sq)
    for start in range(0, end, BLOCK_N):
        kt = gl.load(k_base + (start + nt)[None, :] * sk_s + dt[:, None], mask=(start + nt < Sk)[None, :], other=0.0)
        s = mma_v2(q, gl.convert_layout(kt, b_dot), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)) * scale
        keys = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        visible = keys[None, :] < Sk
        if CAUSAL:
            visible = visible & (keys[None, :] <= last[:, None])
        s = gl.where(visible, s, float("-inf"))
        m_new = gl.maximum(m, gl.max(s, axis=1))
        p = gl.exp(s - m_new[:, None])
        alpha = gl.exp(m - m_new)             # rescales what was summed under the old max
        l = l * alpha + gl.sum(p, axis=1)
        v = gl.load(v_base + (start + nv)[:, None] * sv_s + d[None, :], mask=(start + nv < Sk)[:, None], other=0.0)
        acc = mma_v2(gl.convert_layout(p.to(v.dtype), a_dot), gl.convert_layout(v, b_dot), acc * alpha[:, None])
        m = m_new
    o = acc / l[:, None]
    dc = gl.arange(0, D, layout=gl.SliceLayout(0, mma))
    gl.store(o_ptr + b.to(gl.int64) * so_b + h * so_h + rows[:, None] * so_s + dc[None, :],
             o.to(o_ptr.dtype.element_ty), mask=(rows < Sq)[:, None])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, out: torch.Tensor) -> torch.Tensor:
    B, Hq, Sq, D = q.shape
    BLOCK_M, BLOCK_N = 64, 64
    grid = (triton.cdiv(Sq, BLOCK_M), B * Hq)
    attention_kernel[grid](q, k, v, out, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
                           Hq, Hq // k.shape[1], Sq, k.shape[2], 1.0 / math.sqrt(D), CAUSAL=bool(causal), D=D,
                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=4)
    return out
