"""GEMM with a fused epilogue in Triton, the teaching twin: C = act(A @ B + bias).

One program per BLOCK_M x BLOCK_N tile of C (a 2-d grid). It walks K in steps of BLOCK_K, loads a
tile of A and a tile of B (masked at the edges: zeros past M, N and K add nothing to the dot),
and accumulates ``tl.dot`` (tensor cores) in fp32. The epilogue works on that fp32 accumulator in
registers - add the bias row, apply the activation - and C is written once, in the output dtype:
no second pass over M x N as in torch's addmm followed by an activation. Any M, N, K and strides.

GELU is the tanh form 0.5 y (1 + tanh(u)), u = sqrt(2/pi) (y + 0.044715 y^3), written as
y / (1 + exp(-2u)) (the same function; finite for every finite y).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import ACTS, gemm_args


@triton.jit
def gemm_epilogue_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                         stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                         ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None].to(tl.int64) * stride_am + (k + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (k + rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None].to(tl.int64) * stride_bk + rn[None, :] * stride_bn,
                    mask=(k + rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    if ACT == 1:  # relu
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:  # gelu, tanh form
        acc = acc / (1.0 + tl.exp(-1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)))
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def gemm_epilogue(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                  act: str = "relu", out: torch.Tensor | None = None) -> torch.Tensor:
    """C = act(a @ b + bias) for fp16 / bf16 a [M, K], b [K, N], bias [N] or None."""
    M, N, K, out = gemm_args(a, b, bias, act, out)
    BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 32
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    gemm_epilogue_kernel[grid](a, b, bias if bias is not None else a, out, M, N, K,
                               a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                               out.stride(0), out.stride(1), ACT=ACTS[act], HAS_BIAS=bias is not None,
                               BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return out
