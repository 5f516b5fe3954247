"""GEMM + bias + activation, the teaching twin: C = act(A @ B + bias), any shape.

A 2-d grid of BLOCK_M x BLOCK_N tiles of C. Each K step loads a tile of A and of B with masks
(so any M, N, K and alignment), hands them to the tensor cores in the register layouts mma_v2
wants (``DotOperandLayout`` of the accumulator's ``NVMMADistributedLayout``) and accumulates in
fp32; the epilogue adds the bias and applies the activation on the accumulator, then one masked
store in C's dtype.
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from .epilogue import ACTS, bias_act


@gluon.jit
def gemm_epilogue_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                         BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                         HAS_BIAS: gl.constexpr, ACT: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[2, 2], instr_shape=[16, 8])
    a_dot: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    b_dot: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    ld: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])   # loads: rows of 4 elements
    rm = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ld))
    rn = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ld))
    ka = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, ld))
    kb = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, ld))
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
    for k in range(0, K, BLOCK_K):
        a = gl.load(a_ptr + rm[:, None] * stride_am + (k + ka)[None, :],
                    mask=(rm < M)[:, None] & (k + ka < K)[None, :], other=0.0)
        b = gl.load(b_ptr + (k + kb)[:, None] * stride_bk + rn[None, :],
                    mask=(k + kb < K)[:, None] & (rn < N)[None, :], other=0.0)
        acc = mma_v2(gl.convert_layout(a, a_dot), gl.convert_layout(b, b_dot), acc)
    cm = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma))
    cn = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
    acc = bias_act(acc, bias_ptr, cn, N, HAS_BIAS, ACT)
    gl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(cm < M)[:, None] & (cn < N)[None, :])


def gemm_epilogue(a: torch.Tensor, b: torch.Tensor, bias, act: str, out: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK = 64, 64, 32
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_epilogue_kernel[grid](a, b, bias if bias is not None else out, out, M, N, K,
                               a.stride(0), b.stride(0), out.stride(0), BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                               HAS_BIAS=bias is not None, ACT=ACTS[act], num_warps=4)
    return out
