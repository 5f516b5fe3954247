"""GEMM + bias + activation, ``tiled``: no TMA (for N or K not a multiple of 8, where no 16-byte
TMA stride exists, and any base alignment). A tile a program, grouped order.

Each K step loads the A and B tiles with masked pointer loads into registers (as wide as the
alignment facts allow: ``K_VEC`` / ``N_VEC`` elements that the strides and bases are multiples
of, passed as constexprs), writes them into a double-buffered pair of NVMMA-swizzled shared
buffers, and issues an asynchronous ``warpgroup_mma`` on them. The loads of step k + 1 are issued
before waiting for step k's MMA, so global loads overlap the tensor cores; a buffer is rewritten
only after ``warpgroup_mma_wait(1)`` has retired the MMA that read it (each step's wait
retires the step before). The epilogue (bias,
activation) runs on the fp32 accumulator in registers; C is stored with masks in its dtype.
"""
from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from . import pow2_divisor
from ._compat import cta_barrier
from .epilogue import ACTS, bias_act
from .gemm_epilogue_tma import instr_n, tile_coords
from .runtime import Spec


@gluon.jit
def gemm_epilogue_tiled_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                               GROUP_M: gl.constexpr, HAS_BIAS: gl.constexpr, ACT: gl.constexpr,
                               K_VEC: gl.constexpr, N_VEC: gl.constexpr, INSTR_N: gl.constexpr,
                               WARPS_N: gl.constexpr):
    W: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = a_ptr.dtype.element_ty
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[W // WARPS_N, WARPS_N], instr_shape=[16, INSTR_N, 16])
    # loads: K_VEC consecutive elements of an A row a thread, N_VEC of a B row
    TA: gl.constexpr = min(32, BLOCK_K // K_VEC)
    a_ld: gl.constexpr = gl.BlockedLayout([1, K_VEC], [32 // TA, TA], [W, 1], [1, 0])
    TB: gl.constexpr = min(32, BLOCK_N // N_VEC)
    b_ld: gl.constexpr = gl.BlockedLayout([1, N_VEC], [32 // TB, TB], [W, 1], [1, 0])
    a_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
    b_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_K, BLOCK_N], dtype)
    a_s = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_K], a_sl)
    b_s = gl.allocate_shared_memory(dtype, [2, BLOCK_K, BLOCK_N], b_sl)

    pm, pn = tile_coords(gl.program_id(0), (M + BLOCK_M - 1) // BLOCK_M, (N + BLOCK_N - 1) // BLOCK_N, GROUP_M)
    rm = pm * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, a_ld))
    ka = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, a_ld))
    kb = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, b_ld))
    rn = pn * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, b_ld))
    a_rows = a_ptr + (rm.to(gl.int64) * stride_am)[:, None]
    b_cols = b_ptr + rn[None, :]
    m_ok = (rm < M)[:, None]
    n_ok = (rn < N)[None, :]

    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
    a = gl.load(a_rows + ka[None, :], mask=m_ok & (ka < K)[None, :], other=0.0)
    b = gl.load(b_cols + (kb.to(gl.int64) * stride_bk)[:, None], mask=(kb < K)[:, None] & n_ok, other=0.0)
    k_steps = (K + BLOCK_K - 1) // BLOCK_K
    for k in range(k_steps):
        s = k % 2                              # buffer s was read by step k - 2's MMA, retired
        a_s.index(s).store(a)
        b_s.index(s).store(b)
        fence_async_shared()
        cta_barrier()
        acc = warpgroup_mma(a_s.index(s), b_s.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))   # step k - 1's MMA retires
        k1 = (k + 1) * BLOCK_K                 # the next step's tiles load while the MMA runs
        a = gl.load(a_rows + (k1 + ka)[None, :], mask=m_ok & (k1 + ka < K)[None, :], other=0.0)
        b = gl.load(b_cols + ((k1 + kb).to(gl.int64) * stride_bk)[:, None],
                    mask=(k1 + kb < K)[:, None] & n_ok, other=0.0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    cm = pm * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    cn = pn * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    acc = bias_act(acc, bias_ptr, cn, N, HAS_BIAS, ACT)
    gl.store(c_ptr + (cm.to(gl.int64) * stride_cm)[:, None] + cn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(cm < M)[:, None] & (cn < N)[None, :])


def vec_facts(a, b) -> dict:
    """Elements a thread may load at once: what every A row start (K_VEC) and B row start (N_VEC)
    is a multiple of (bases and strides), at most 16 bytes."""
    es = a.element_size()
    lim = 16 // es
    return {"K_VEC": pow2_divisor(a.stride(0), a.data_ptr() // es, limit=lim),
            "N_VEC": pow2_divisor(b.stride(0), b.data_ptr() // es, limit=lim)}


def launch_spec(a, b, bias, act: str, out, cfg: dict) -> Spec:
    M, K = a.shape
    N = b.shape[1]
    BM, BN = cfg["BLOCK_M"], cfg["BLOCK_N"]
    n, wn = instr_n(BM, BN, cfg["num_warps"])
    return Spec(gemm_epilogue_tiled_kernel, (triton.cdiv(M, BM) * triton.cdiv(N, BN),),
                {"a_ptr": a, "b_ptr": b, "bias_ptr": bias if bias is not None else out, "c_ptr": out,
                 "M": M, "N": N, "K": K, "stride_am": a.stride(0), "stride_bk": b.stride(0),
                 "stride_cm": out.stride(0), "BLOCK_M": BM, "BLOCK_N": BN, "BLOCK_K": cfg["BLOCK_K"],
                 "GROUP_M": cfg["GROUP_M"], "HAS_BIAS": bias is not None, "ACT": ACTS[act],
                 **vec_facts(a, b), "INSTR_N": n, "WARPS_N": wn},
                {"num_warps": cfg["num_warps"]})
