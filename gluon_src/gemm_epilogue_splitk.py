"""GEMM + bias + activation, ``splitk``: where the C tiles alone leave SMs idle (few rows; with
``dispatch.GEMM["splitk_by_model"]``, also a few hundred rows over a long K, with large tiles).
K is cut in SPLIT slices; program (t, s) computes tile t over slice s with the TMA ring and async
wgmma of ``gemm_epilogue_tma`` and writes its fp32 partial to a workspace [SPLIT, M, N]; a second
kernel sums the SPLIT partials in a fixed order (deterministic), adds the bias, applies the
activation and stores C in its dtype. Needs TMA strides (K, N multiples of 8)."""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ._compat import tma_load
from .epilogue import ACTS, bias_act
from .gemm_epilogue_tma import gl_dtype, instr_n
from .runtime import Spec


@gluon.jit
def gemm_splitk_partial_kernel(a_desc, b_desc, ws_ptr, M, N, K_SLICE, STAGES: gl.constexpr,
                               INSTR_N: gl.constexpr, WARPS_N: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[gl.num_warps() // WARPS_N, WARPS_N], instr_shape=[16, INSTR_N, 16])
    a_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(ready.index(st), count=1)
    fence_async_shared()
    nbytes: gl.constexpr = (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * dtype.primitive_bitwidth // 8

    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    off_m = (gl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (gl.program_id(0) % tiles_n) * BLOCK_N
    part = gl.program_id(1)
    k0 = part * K_SLICE                                    # the slice's first K step
    steps = gl.minimum((a_desc.shape[1] + BLOCK_K - 1) // BLOCK_K - k0, K_SLICE)
    for j in gl.static_range(STAGES - 1):
        go0 = j < steps
        mbarrier.expect(ready.index(j), nbytes, pred=go0)
        tma_load(a_desc, [off_m, (k0 + j) * BLOCK_K], ready.index(j), a_s.index(j), pred=go0)
        tma_load(b_desc, [(k0 + j) * BLOCK_K, off_n], ready.index(j), b_s.index(j), pred=go0)
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
    for k in range(steps):
        s = k % STAGES
        mbarrier.wait(ready.index(s), (k // STAGES) & 1)
        acc = warpgroup_mma(a_s.index(s), b_s.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        nk = k + STAGES - 1
        s2 = nk % STAGES
        go = nk < steps
        mbarrier.expect(ready.index(s2), nbytes, pred=go)
        tma_load(a_desc, [off_m, (k0 + nk) * BLOCK_K], ready.index(s2), a_s.index(s2), pred=go)
        tma_load(b_desc, [(k0 + nk) * BLOCK_K, off_n], ready.index(s2), b_s.index(s2), pred=go)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(st))
    rm = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    rn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    dst = ws_ptr + part.to(gl.int64) * M * N + (rm.to(gl.int64) * N)[:, None] + rn[None, :]
    gl.store(dst, acc, mask=(rm < M)[:, None] & (rn < N)[None, :])


@gluon.jit
def gemm_splitk_reduce_kernel(ws_ptr, bias_ptr, c_ptr, M, N, SPLIT, stride_cm, BLOCK_M: gl.constexpr,
                              BLOCK_N: gl.constexpr, HAS_BIAS: gl.constexpr, ACT: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [gl.num_warps(), 1], [1, 0])
    rm = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    rn = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    at = (rm.to(gl.int64) * N)[:, None] + rn[None, :]
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout)
    for p in range(SPLIT):
        acc += gl.load(ws_ptr + p.to(gl.int64) * M * N + at, mask=mask, other=0.0)
    acc = bias_act(acc, bias_ptr, rn, N, HAS_BIAS, ACT)
    gl.store(c_ptr + (rm.to(gl.int64) * stride_cm)[:, None] + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


def slices(K: int, block_k: int, split: int) -> tuple[int, int]:
    """(K steps a slice, slices): every slice gets at least one step."""
    steps = triton.cdiv(K, block_k)
    per = triton.cdiv(steps, split)
    return per, triton.cdiv(steps, per)


def workspace(a, b, cfg: dict) -> torch.Tensor:
    _, split = slices(a.shape[1], cfg["BLOCK_K"], cfg["SPLIT"])
    return torch.empty(split * a.shape[0] * b.shape[1], dtype=torch.float32, device=a.device)


def launch_specs(a, b, bias, act: str, out, ws, cfg: dict) -> list:
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    gdt = gl_dtype(a.dtype)
    a_desc = TensorDescriptor.from_tensor(a, [BM, BK], gl.NVMMASharedLayout.get_default_for([BM, BK], gdt))
    b_desc = TensorDescriptor.from_tensor(b, [BK, BN], gl.NVMMASharedLayout.get_default_for([BK, BN], gdt))
    n, wn = instr_n(BM, BN, cfg["num_warps"])
    per, split = slices(K, BK, cfg["SPLIT"])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    RM, RN = 16, 128
    return [Spec(gemm_splitk_partial_kernel, (tiles, split),
                 {"a_desc": a_desc, "b_desc": b_desc, "ws_ptr": ws, "M": M, "N": N, "K_SLICE": per,
                  "STAGES": cfg["STAGES"], "INSTR_N": n, "WARPS_N": wn}, {"num_warps": cfg["num_warps"]}),
            Spec(gemm_splitk_reduce_kernel, (triton.cdiv(M, RM), triton.cdiv(N, RN)),
                 {"ws_ptr": ws, "bias_ptr": bias if bias is not None else out, "c_ptr": out, "M": M, "N": N,
                  "SPLIT": split, "stride_cm": out.stride(0), "BLOCK_M": RM, "BLOCK_N": RN,
                  "HAS_BIAS": bias is not None, "ACT": ACTS[act]}, {"num_warps": 4})]
