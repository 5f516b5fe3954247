"""GEMM + epilogue, ``splitk``: few rows of C (decode-sized M), K split over programs.

With M = 16 a 4096 x 6144 GEMM has 48 to 96 C tiles: a third to two thirds of 132 SMs, each
streaming all of K. The work is then reading B (K x N x 2 bytes), and it is spread over every SM by
cutting K into SPLIT slices: program (tile, s) computes the fp32 partial product of its tile over
slice s and stores it in a workspace [SPLIT, M, N] (no atomics: the sum is the same bits every
run). A second kernel sums the SPLIT partials of each C tile, adds the bias, applies the
activation and writes C once, in the output dtype: the epilogue runs after the reduction, on the
fp32 sum. The workspace is small exactly when this pays (M x N x SPLIT x 4 bytes against B's
K x N x 2); ``dispatch`` picks SPLIT and narrow tiles (BLOCK_M 16-64) from the tile count and the
SMs. Main loop and epilogue are the tiled kernel's (``gemm_epilogue_tiled``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import ACTS
from .gemm_epilogue_tiled import epilogue, grouped_tile, tile_product, vec_facts
from .runtime import Spec, bind_spec


@triton.jit
def gemm_splitk_partial_kernel(a_ptr, b_ptr, ws_ptr, M, N, K, K_SLICE,
                               stride_am, stride_ak, stride_bk, stride_bn, stride_ws,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               GROUP_M: tl.constexpr, K_VEC: tl.constexpr, N_VEC: tl.constexpr):
    K = K // K_VEC * K_VEC
    N = N // N_VEC * N_VEC
    K_SLICE = K_SLICE // BLOCK_K * BLOCK_K
    stride_am = stride_am // K_VEC * K_VEC
    stride_bk = stride_bk // N_VEC * N_VEC
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    s = tl.program_id(1)
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rn = tl.max_contiguous(tl.multiple_of(cn % N, N_VEC), N_VEC)
    k_lo = s * K_SLICE
    acc = tile_product(a_ptr, b_ptr, cm % M, rn, k_lo, tl.minimum(K, k_lo + K_SLICE),
                       stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K)
    # workspace [SPLIT, M, stride_ws]: row stride a multiple of 4 fp32 (16 bytes)
    ws = ws_ptr + s.to(tl.int64) * M * stride_ws + cm[:, None].to(tl.int64) * stride_ws + cn[None, :]
    tl.store(ws, acc, mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def gemm_splitk_reduce_kernel(ws_ptr, bias_ptr, c_ptr, M, N, SPLIT, stride_ws, stride_cm, stride_cn,
                              ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (cm[:, None] < M) & (cn[None, :] < N)
    ws = ws_ptr + cm[:, None].to(tl.int64) * stride_ws + cn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in range(SPLIT):  # fixed order: the same sum every run
        acc += tl.load(ws + s * M * stride_ws, mask=mask, other=0.0)
    acc = epilogue(acc, bias_ptr, cn, N, ACT, HAS_BIAS)
    c_ptrs = c_ptr + cm[:, None].to(tl.int64) * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


#: tile of the reduce kernel: 32 rows x 128 columns of fp32 partials per program
REDUCE_BLOCK = (32, 128)


def slices(K: int, block_k: int, split: int) -> tuple[int, int]:
    """(K_SLICE, SPLIT): K cut into ``split`` slices of whole K tiles (fewer when K is short);
    every slice non-empty."""
    steps = triton.cdiv(K, block_k)
    per = triton.cdiv(steps, max(1, min(split, steps)))
    return per * block_k, triton.cdiv(steps, per)


def workspace(a, b, cfg: dict) -> torch.Tensor:
    """fp32 partials [SPLIT, M, N rounded up to 4]: 16-byte aligned rows."""
    M, K = a.shape
    split = slices(K, cfg["BLOCK_K"], cfg["SPLIT"])[1]
    return torch.empty((split, M, triton.cdiv(b.shape[1], 4) * 4), dtype=torch.float32, device=a.device)


def launch_specs(a, b, bias, act: str, out, ws, cfg: dict) -> tuple[Spec, Spec]:
    """The partial-product launch and the reduce + epilogue launch."""
    M, K = a.shape
    N = b.shape[1]
    k_slice, split = slices(K, cfg["BLOCK_K"], cfg["SPLIT"])
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    partial = Spec(gemm_splitk_partial_kernel, (tiles, split),
                   {"a_ptr": a, "b_ptr": b, "ws_ptr": ws, "M": M, "N": N, "K": K, "K_SLICE": k_slice,
                    "stride_am": a.stride(0), "stride_ak": a.stride(1), "stride_bk": b.stride(0),
                    "stride_bn": b.stride(1), "stride_ws": ws.stride(1),
                    **{k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")},
                    **vec_facts(a, b, bias, out)},
                   {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    rm, rn = REDUCE_BLOCK
    reduce = Spec(gemm_splitk_reduce_kernel, (triton.cdiv(M, rm), triton.cdiv(N, rn)),
                  {"ws_ptr": ws, "bias_ptr": bias if bias is not None else a, "c_ptr": out, "M": M,
                   "N": N, "SPLIT": split, "stride_ws": ws.stride(1), "stride_cm": out.stride(0),
                   "stride_cn": out.stride(1), "ACT": ACTS[act], "HAS_BIAS": bias is not None,
                   "BLOCK_M": rm, "BLOCK_N": rn}, {"num_warps": 4})
    return partial, reduce


def bind_launch(a, b, bias, act: str, out, cfg: dict):
    """Zero-argument launch (partial products, then reduce + epilogue) with ``cfg``: BLOCK_M/N/K,
    GROUP_M, SPLIT, num_warps, num_stages. The workspace belongs to this launch."""
    ws = workspace(a, b, cfg)
    partial, reduce = (bind_spec(s, a.device) for s in launch_specs(a, b, bias, act, out, ws, cfg))

    def launch():
        partial()
        reduce()
    launch.split = ws.shape[0]
    launch.compiled = partial.compiled
    return launch
