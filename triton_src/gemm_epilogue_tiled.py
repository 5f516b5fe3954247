"""GEMM + epilogue, ``tiled``: the pointer-based tiled kernel (no TMA), any shape and stride.

Beside the teaching twin it adds what a tuned pointer kernel needs:

- Grouped tile order (``grouped_tile``): GROUP_M tile-rows of C are walked column by column, so
  programs running at the same time share a few A row panels and B column panels in L2.
- Vector loads on ragged shapes. A load is as wide as Triton can prove the addresses aligned and
  the mask constant; it specialises an integer argument as a multiple of 16 only when it is one.
  So a K of 3000 (a multiple of 8, not of 16) would make every A load a 2-byte load, and an N of
  264 every B load and C store. The host passes K_VEC / N_VEC, the powers of two (at most 8
  elements, 16 bytes) that divide K, N, the row strides and the base offsets, and the kernel
  rewrites them as ``x // V * V``, which Triton's alignment analysis reads as "a multiple of V".
  Rows and columns past M / N wrap (``% M``, ``% N``: loads need no mask there, the wrapped values
  are never stored); the K loop runs unmasked over whole K tiles and masks only the last, partial
  one (``tile_product``).
- fp32 accumulation, bias + activation on the accumulator (``epilogue``), one store of C.

``tile_product``, ``grouped_tile`` and ``epilogue`` are also the building blocks of the split-K
and TMA variants.
"""
from __future__ import annotations

import triton
import triton.language as tl

from . import pow2_divisor
from .checks import ACTS
from .runtime import Spec, bind_spec


@triton.jit
def grouped_tile(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row, column) of C tile number ``tile`` in grouped order: GROUP_M tile-rows are visited
    column by column, so programs running at the same time share a few A row panels and B column
    panels in L2."""
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % group_rows, (tile % per_group) // group_rows


@triton.jit
def epilogue(acc, bias_ptr, cn, N, ACT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """bias + activation on the fp32 accumulator tile (columns ``cn``), before the one store."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cn, mask=cn < N, other=0.0).to(tl.float32)[None, :]
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:
        # gelu(y) = 0.5 y (1 + tanh(u)) = y * sigmoid(2u), u = sqrt(2/pi) (y + 0.044715 y^3);
        # y / (1 + exp(-2u)) is finite for every finite y (exp overflow gives y / inf = -0)
        u2 = 1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-u2))
    return acc


@triton.jit
def tile_product(a_ptr, b_ptr, rm, rn, k_lo, k_hi, stride_am, stride_ak, stride_bk, stride_bn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """fp32 A[rm, k_lo:k_hi] @ B[k_lo:k_hi, rn]: unmasked whole K tiles, then one masked tile for
    the rest (rows ``rm`` and columns ``rn`` are valid indices: the caller wraps them)."""
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + (k_lo + rk)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_lo + rk)[:, None].to(tl.int64) * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    whole = (k_hi - k_lo) // BLOCK_K
    for _ in range(whole):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    rest = k_hi - k_lo - whole * BLOCK_K
    if rest > 0:
        a = tl.load(a_ptrs, mask=rk[None, :] < rest, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < rest, other=0.0)
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def gemm_epilogue_tiled_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                               stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                               ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               GROUP_M: tl.constexpr, K_VEC: tl.constexpr, N_VEC: tl.constexpr):
    # alignment facts the host checked, in a form Triton's analysis reads (see the module docstring)
    K = K // K_VEC * K_VEC
    N = N // N_VEC * N_VEC
    stride_am = stride_am // K_VEC * K_VEC
    stride_bk = stride_bk // N_VEC * N_VEC
    stride_cm = stride_cm // N_VEC * N_VEC
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rn = tl.max_contiguous(tl.multiple_of(cn % N, N_VEC), N_VEC)
    acc = tile_product(a_ptr, b_ptr, cm % M, rn, 0, K, stride_am, stride_ak, stride_bk, stride_bn,
                       BLOCK_M, BLOCK_N, BLOCK_K)
    acc = epilogue(acc, bias_ptr, cn, N, ACT, HAS_BIAS)
    c_ptrs = c_ptr + cm[:, None].to(tl.int64) * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


def vec_facts(a, b, bias, out) -> dict:
    """K_VEC / N_VEC: the powers of two (<= 8 elements) that divide K, N, the row strides and the
    elements from a 16-byte boundary to each base address (contiguous inner dims assumed; any
    other layout gets 1, which is always correct)."""
    es = a.element_size()
    M, K = a.shape
    N = b.shape[1]
    off = lambda t: (t.data_ptr() // es) % 8  # noqa: E731
    k_vec = pow2_divisor(K, a.stride(0), off(a), limit=8) if a.stride(1) == 1 else 1
    n_terms = [N, b.stride(0), out.stride(0), off(b), off(out)] + ([off(bias)] if bias is not None else [])
    n_vec = pow2_divisor(*n_terms, limit=8) if b.stride(1) == 1 and out.stride(1) == 1 else 1
    return {"K_VEC": k_vec, "N_VEC": n_vec}


def pointer_args(a, b, bias, act: str, out, cfg: dict) -> dict:
    """The arguments every pointer GEMM kernel here takes (this one's and the twin's): operands,
    sizes, strides, epilogue and the BLOCK_M / N / K tile of ``cfg``."""
    M, K = a.shape
    N = b.shape[1]
    return {"a_ptr": a, "b_ptr": b, "bias_ptr": bias if bias is not None else a, "c_ptr": out,
            "M": M, "N": N, "K": K, "stride_am": a.stride(0), "stride_ak": a.stride(1),
            "stride_bk": b.stride(0), "stride_bn": b.stride(1), "stride_cm": out.stride(0),
            "stride_cn": out.stride(1), "ACT": ACTS[act], "HAS_BIAS": bias is not None,
            **{k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}}


def launch_spec(a, b, bias, act: str, out, cfg: dict) -> Spec:
    M, N = a.shape[0], b.shape[1]
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    args = {**pointer_args(a, b, bias, act, out, cfg), "GROUP_M": cfg["GROUP_M"],
            **vec_facts(a, b, bias, out)}
    return Spec(gemm_epilogue_tiled_kernel, grid, args,
                {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})


def bind_launch(a, b, bias, act: str, out, cfg: dict):
    """Zero-argument launch with ``cfg`` (BLOCK_M/N/K, GROUP_M, num_warps, num_stages)."""
    return bind_spec(launch_spec(a, b, bias, act, out, cfg), a.device)
