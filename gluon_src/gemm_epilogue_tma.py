"""GEMM + bias + activation, ``tma``: persistent programs, TMA loads into a STAGES-deep ring of
shared-memory buffers with one mbarrier each, asynchronous ``warpgroup_mma`` (wgmma, Hopper), the
epilogue on the fp32 accumulator in registers, C stored in its own dtype through shared memory by
TMA. Needs 16-byte TMA strides: K and N multiples of 8 (16-bit), 16-byte aligned bases.

The ring. K step i of the program's sequence (counted across its tiles) uses stage i % STAGES and
waits for its barrier's phase (i // STAGES) & 1. A tile starts by issuing its first STAGES - 1
loads; in the loop, step k's MMA is issued asynchronously and ``warpgroup_mma_wait(1)`` retires
step k - 1's, whose stage then takes the load of step k + STAGES - 1. So STAGES - 1 loads are in
flight while the tensor cores work.

Tiles go in grouped order (GROUP_M row tiles share a column panel of B in L2).
"""
from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ._compat import tma_load, tma_store
from .epilogue import ACTS, bias_act
from .runtime import Spec


@gluon.jit
def tile_coords(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    per_group = GROUP_M * tiles_n
    first = (tile // per_group) * GROUP_M
    rows = gl.minimum(tiles_m - first, GROUP_M)
    return first + (tile % per_group) % rows, (tile % per_group) // rows


@gluon.jit
def gemm_epilogue_tma_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                             HAS_BIAS: gl.constexpr, ACT: gl.constexpr, STAGES: gl.constexpr,
                             GROUP_M: gl.constexpr, INSTR_N: gl.constexpr, WARPS_N: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[gl.num_warps() // WARPS_N, WARPS_N], instr_shape=[16, INSTR_N, 16])
    a_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    c_s = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(ready.index(st), count=1)
    fence_async_shared()
    nbytes: gl.constexpr = (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * dtype.primitive_bitwidth // 8

    tiles_m = (M + BLOCK_M - 1) // BLOCK_M
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    k_steps = (K + BLOCK_K - 1) // BLOCK_K
    base = 0                                   # K steps this program has issued before this tile
    for tile in range(gl.program_id(0), tiles_m * tiles_n, gl.num_programs(0)):
        pm, pn = tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pm * BLOCK_M
        off_n = pn * BLOCK_N
        for j in gl.static_range(STAGES - 1):
            s0 = (base + j) % STAGES
            go0 = j < k_steps
            mbarrier.expect(ready.index(s0), nbytes, pred=go0)
            tma_load(a_desc, [off_m, j * BLOCK_K], ready.index(s0), a_s.index(s0), pred=go0)
            tma_load(b_desc, [j * BLOCK_K, off_n], ready.index(s0), b_s.index(s0), pred=go0)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        for k in range(k_steps):
            i = base + k
            s = i % STAGES
            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            acc = warpgroup_mma(a_s.index(s), b_s.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            nk = k + STAGES - 1                # its stage is step k - 1's, whose MMA has retired
            s2 = (base + nk) % STAGES
            go = nk < k_steps
            mbarrier.expect(ready.index(s2), nbytes, pred=go)
            tma_load(a_desc, [off_m, nk * BLOCK_K], ready.index(s2), a_s.index(s2), pred=go)
            tma_load(b_desc, [nk * BLOCK_K, off_n], ready.index(s2), b_s.index(s2), pred=go)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        base += k_steps

        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
        acc = bias_act(acc, bias_ptr, offs_n, N, HAS_BIAS, ACT)
        tma.store_wait(0)                       # the previous tile's store has left c_s
        c_s.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma_store(c_desc, [off_m, off_n], c_s)
    tma.store_wait(0)
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(st))


def gl_dtype(dtype):
    return {"torch.float16": gl.float16, "torch.bfloat16": gl.bfloat16, "torch.float32": gl.float32}[str(dtype)]


def check(a, b, out) -> str | None:
    """None when TMA can address A, B and C (16-byte aligned bases and row strides, unit inner
    stride), else why not."""
    es = a.element_size()
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t.stride(1) != 1 or (t.stride(0) * es) % 16 or t.data_ptr() % 16:
            return f"{name}: TMA needs 16-byte aligned rows (K and N multiples of {16 // es}) and base"
    return None


def instr_n(block_m: int, block_n: int, warps: int) -> tuple[int, int]:
    """(wgmma's N, warps along N): warps along M first (16 rows each, 4 a warpgroup)."""
    warps_m = min(warps, max(4, block_m // 16))
    warps_n = warps // warps_m
    n = min(256, block_n // warps_n)
    while block_n % n or n % 8:
        n -= 8
    return n, warps_n


def launch_spec(a, b, bias, act: str, out, cfg: dict, sms: int) -> Spec:
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    gdt = gl_dtype(a.dtype)
    a_desc = TensorDescriptor.from_tensor(a, [BM, BK], gl.NVMMASharedLayout.get_default_for([BM, BK], gdt))
    b_desc = TensorDescriptor.from_tensor(b, [BK, BN], gl.NVMMASharedLayout.get_default_for([BK, BN], gdt))
    c_desc = TensorDescriptor.from_tensor(out, [BM, BN], gl.NVMMASharedLayout.get_default_for([BM, BN], gdt))
    n, wn = instr_n(BM, BN, cfg["num_warps"])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    return Spec(gemm_epilogue_tma_kernel, (max(1, min(sms, tiles)),),
                {"a_desc": a_desc, "b_desc": b_desc, "c_desc": c_desc,
                 "bias_ptr": bias if bias is not None else out, "M": M, "N": N, "K": K,
                 "HAS_BIAS": bias is not None, "ACT": ACTS[act], "STAGES": cfg["STAGES"],
                 "GROUP_M": cfg["GROUP_M"], "INSTR_N": n, "WARPS_N": wn},
                {"num_warps": cfg["num_warps"]})
