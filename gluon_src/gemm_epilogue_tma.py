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

Staged operands (dispatch's tma plans with ``stage`` in their config, for rows TMA cannot address:
N = 2047, K = 777):
``stage_rows_kernel`` copies an A or B whose rows TMA cannot read into a workspace of 16-byte
rows once a call (the descriptor keeps the real K / N, so boxes clip at the edges), and a C that
TMA cannot write is stored from registers (``C_TMA`` off), converted first to a layout in which a
warp's 32 lanes hold 32 consecutive columns of a row (coalesced 2-byte stores).
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
def prologue(a_desc, b_desc, a_s, b_s, ready, off_m, off_n, n, base, STAGES: gl.constexpr,
             NBYTES: gl.constexpr):
    """The TMA loads of the first STAGES - 1 of the n K steps of a tile (the program's steps
    base, base + 1, ...)."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    for j in gl.static_range(STAGES - 1):
        s = (base + j) % STAGES
        ok = j < n
        mbarrier.expect(ready.index(s), NBYTES, pred=ok)
        tma_load(a_desc, [off_m, j * BLOCK_K], ready.index(s), a_s.index(s), pred=ok)
        tma_load(b_desc, [j * BLOCK_K, off_n], ready.index(s), b_s.index(s), pred=ok)


@gluon.jit
def mma_steps(acc, a_desc, b_desc, a_s, b_s, ready, off_m, off_n, n, base, STAGES: gl.constexpr,
              NBYTES: gl.constexpr):
    """acc + the MMAs of the n K steps of one tile, whose ``prologue`` was issued: step j
    (the program's step base + j) waits for its stage, its MMA is issued asynchronously, the
    previous one retired, whose stage then takes the load of step j + STAGES - 1."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    for j in range(n):
        i = base + j
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        acc = warpgroup_mma(a_s.index(s), b_s.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        nj = j + STAGES - 1
        s2 = (base + nj) % STAGES
        go = nj < n
        mbarrier.expect(ready.index(s2), NBYTES, pred=go)
        tma_load(a_desc, [off_m, nj * BLOCK_K], ready.index(s2), a_s.index(s2), pred=go)
        tma_load(b_desc, [nj * BLOCK_K, off_n], ready.index(s2), b_s.index(s2), pred=go)
    return warpgroup_mma_wait(num_outstanding=0, deps=(acc,))


@gluon.jit
def store_c(acc, c_desc, c_s, off_m, off_n):
    """C tile by TMA from shared memory (the previous tile's store waited for first)."""
    tma.store_wait(0)
    c_s.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma_store(c_desc, [off_m, off_n], c_s)


@gluon.jit
def gemm_epilogue_tma_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                             HAS_BIAS: gl.constexpr, ACT: gl.constexpr, STAGES: gl.constexpr,
                             GROUP_M: gl.constexpr, INSTR_N: gl.constexpr, WARPS_N: gl.constexpr,
                             c_ptr, stride_cm, C_TMA: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[gl.num_warps() // WARPS_N, WARPS_N], instr_shape=[16, INSTR_N, 16])
    a_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    if C_TMA:
        c_s = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
    # C by pointers: a warp's lanes on 32 consecutive columns of a row
    c_rows: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [gl.num_warps(), 1], [1, 0])
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(ready.index(st), count=1)
    fence_async_shared()
    nbytes: gl.constexpr = (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * dtype.primitive_bitwidth // 8

    tiles_m = (M + BLOCK_M - 1) // BLOCK_M
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    tiles = tiles_m * tiles_n
    k_steps = (K + BLOCK_K - 1) // BLOCK_K
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    base = 0                                   # K steps this program has issued before this tile
    for tile in range(pid, tiles, G):
        pm, pn = tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pm * BLOCK_M
        off_n = pn * BLOCK_N
        prologue(a_desc, b_desc, a_s, b_s, ready, off_m, off_n, k_steps, base, STAGES, nbytes)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        acc = mma_steps(acc, a_desc, b_desc, a_s, b_s, ready, off_m, off_n, k_steps, base, STAGES, nbytes)
        base += k_steps

        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
        acc = bias_act(acc, bias_ptr, offs_n, N, HAS_BIAS, ACT)
        if C_TMA:
            store_c(acc, c_desc, c_s, off_m, off_n)
        else:
            val = gl.convert_layout(acc.to(dtype), c_rows)
            cm = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, c_rows))
            cn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, c_rows))
            gl.store(c_ptr + (cm.to(gl.int64) * stride_cm)[:, None] + cn[None, :], val,
                     mask=(cm < M)[:, None] & (cn < N)[None, :])
    if C_TMA:
        tma.store_wait(0)
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(st))


@gluon.jit
def stage_rows_kernel(src_ptr, dst_ptr, rows, cols, stride_s, stride_d,
                      BLOCK_R: gl.constexpr, BLOCK_C: gl.constexpr):
    """dst[r, c] = src[r, c] for r < rows, c < cols, zeros on to the next multiple of 8 columns:
    2-byte loads from rows of any alignment, 16-byte stores into dst (8 consecutive elements a
    thread; the host made its row stride a multiple of 8, rewritten as x // 8 * 8 to prove it)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    stride_d = stride_d // 8 * 8
    r = gl.program_id(0) * BLOCK_R + gl.arange(0, BLOCK_R, layout=gl.SliceLayout(1, layout))
    c = gl.program_id(1) * BLOCK_C + gl.arange(0, BLOCK_C, layout=gl.SliceLayout(0, layout))
    cols8 = (cols + 7) // 8 * 8
    r_ok = (r < rows)[:, None]
    v = gl.load(src_ptr + (r.to(gl.int64) * stride_s)[:, None] + c[None, :], mask=r_ok & (c < cols)[None, :],
                other=0.0)
    gl.store(dst_ptr + (r.to(gl.int64) * stride_d)[:, None] + c[None, :], v, mask=r_ok & (c < cols8)[None, :])


#: rows x columns a program of stage_rows_kernel copies (4 warps: a warp a row, 256 columns)
STAGE_BLOCK = (16, 256)


def tma_readable(t) -> bool:
    """Whether a TMA descriptor can address ``t`` (unit inner stride, 16-byte row stride and base)."""
    return (t.shape[1] <= 1 or t.stride(1) == 1) and (t.stride(0) * t.element_size()) % 16 == 0 \
        and t.data_ptr() % 16 == 0


def staged(t):
    """A workspace for ``t`` with rows of a multiple of 8 elements (16 bytes), viewed as t's shape."""
    import torch
    rows, cols = t.shape
    return torch.empty((rows, triton.cdiv(max(cols, 1), 8) * 8), dtype=t.dtype, device=t.device)[:, :cols]


def stage_spec(src, dst) -> Spec:
    rows, cols = src.shape
    br, bc = STAGE_BLOCK
    return Spec(stage_rows_kernel, (triton.cdiv(rows, br), triton.cdiv(cols, bc)),
                {"src_ptr": src, "dst_ptr": dst, "rows": rows, "cols": cols, "stride_s": src.stride(0),
                 "stride_d": dst.stride(0), "BLOCK_R": br, "BLOCK_C": bc}, {"num_warps": 4})


def staged_specs(a, b, bias, act: str, out, cfg: dict, sms: int) -> list:
    """The launches of the staged TMA kernel, in stream order: a copy of each of A and B whose
    rows TMA cannot read (into a workspace the specs hold), then the TMA kernel on the copies, C
    stored from registers where TMA cannot write it."""
    ops = {n: t if tma_readable(t) else staged(t) for n, t in (("a", a), ("b", b))}
    copies = [stage_spec(t, ops[n]) for n, t in (("a", a), ("b", b)) if ops[n] is not t]
    c_tma = tma_readable(out)
    main = launch_spec(ops["a"], ops["b"], bias, act, out if c_tma else ops["a"], cfg, sms)
    if not c_tma:
        main.args.update(c_ptr=out, stride_cm=out.stride(0), C_TMA=False)
    return copies + [main]


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
                 "GROUP_M": cfg["GROUP_M"], "INSTR_N": n, "WARPS_N": wn,
                 "c_ptr": out, "stride_cm": out.stride(0), "C_TMA": True},
                {"num_warps": cfg["num_warps"]})
