"""GEMM + bias + activation, ``streamk``: the tma kernel's ring and wgmma with the last waves' K
steps shared out evenly over the programs (data-parallel tiles first, then stream-K), so no SM
idles through a partial last wave. The same algorithm as Triton's ``gemm_epilogue_streamk``.

G programs (one an SM, all resident), T tiles of KS K steps. Whole tiles round robin while every
program has one (``DP_TILES``, a multiple of G; the host leaves the last full wave plus the
partial one to the next phase, so each program's share there is one to two tiles' steps); the
other S = T - DP_TILES tiles' S x KS steps are cut into G contiguous ranges of equal length.
Program p walks its range from the top down, a tile segment at a time. A segment that reaches
its tile's last K step makes p the tile's owner: the programs below p hold the tile's earlier
steps, each in the one partial at the top of its range, which it computed first. The owner
issues its segment's first loads, then waits for each partial's flag and loads it straight into
the accumulator's register layout (in program order: the same bits every run), runs its own MMAs
on top, the epilogue and the TMA store. Any other segment writes its fp32 partial (from the
accumulator's layout) to the program's slot of the workspace [G, BLOCK_M, BLOCK_N], then raises
the program's count of partials published (a CTA barrier, then a release add). A program waits
only for lower programs: no cycle.

The flags are two counts a program, never lowered: ``flags[q]`` the partials q has published,
``flags[G + q]`` those its owner has absorbed (written by that owner only, the same program every
launch). This launch's partial of q is up when the first exceeds the second, so the counts, zeroed
once with the workspace, need no reset between launches, and a launch that gave up on a partial is
squared by the late partial itself. The owner polls with an acquire add of 0 by one thread, its
value shared with the whole CTA (every warp leaves the poll on the same value, then reads the slot
after a CTA barrier); a partial not up within MAX_SPIN polls gives NaNs (a verification FAIL), not
a hang.

Every tile's first loads are issued before the previous tile's epilogue (the ring is empty by
then), as the tma kernel does with NEXT_PROLOGUE.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ._compat import cta_barrier
from .epilogue import ACTS, bias_act
from .gemm_epilogue_tma import gl_dtype, instr_n, mma_steps, prologue, store_c, tile_coords
from .runtime import Spec

#: polls of a partial's count before the owner gives up and writes NaNs (seconds on a GPU)
MAX_SPIN = 1 << 22


@gluon.jit
def slot(ws_ptr, q, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, layout: gl.constexpr):
    """Pointers of program q's workspace slot, laid out as the accumulator."""
    rm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    rn = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    return ws_ptr + q.to(gl.int64) * (BLOCK_M * BLOCK_N) + (rm * BLOCK_N)[:, None] + rn[None, :]


@gluon.jit
def publish(acc, ws_ptr, flag_ptr, pid, layout: gl.constexpr):
    """This program's partial into its slot, then its count of partials published raised."""
    gl.store(slot(ws_ptr, pid, acc.shape[0], acc.shape[1], layout), acc)
    cta_barrier()                           # every thread's stores before the one release
    gl.atomic_add(flag_ptr + pid, 1, sem="release")


@gluon.jit
def absorb(acc, ws_ptr, flag_ptr, q, G, layout: gl.constexpr, MAX_SPIN: gl.constexpr):
    """acc + program q's partial of this launch once published (NaN if not within MAX_SPIN polls);
    q's count of partials absorbed raised."""
    want = gl.load(flag_ptr + G + q, cache_modifier=".cg") + 1
    # a scalar atomic: one thread's acquire, its value the same in every thread (a uniform loop)
    seen = gl.atomic_add(flag_ptr + q, 0, sem="acquire")
    spins = 0
    while (seen - want < 0) & (spins < MAX_SPIN):
        seen = gl.atomic_add(flag_ptr + q, 0, sem="acquire")
        spins += 1
    cta_barrier()                           # no thread reads the slot (or writes the count) before
    gl.store(flag_ptr + G + q, want)
    part = gl.load(slot(ws_ptr, q, acc.shape[0], acc.shape[1], layout), cache_modifier=".cg")
    return acc + part + gl.where(seen - want >= 0, 0.0, float("nan"))


@gluon.jit
def finish(acc, c_desc, c_s, bias_ptr, off_m, off_n, N, layout: gl.constexpr, HAS_BIAS: gl.constexpr,
           ACT: gl.constexpr):
    offs_n = off_n + gl.arange(0, acc.shape[1], layout=gl.SliceLayout(0, layout))
    store_c(bias_act(acc, bias_ptr, offs_n, N, HAS_BIAS, ACT), c_desc, c_s, off_m, off_n)


@gluon.jit
def gemm_epilogue_streamk_kernel(a_desc, b_desc, c_desc, bias_ptr, ws_ptr, flag_ptr, M, N, K, DP_TILES,
                                 HAS_BIAS: gl.constexpr, ACT: gl.constexpr, STAGES: gl.constexpr,
                                 GROUP_M: gl.constexpr, INSTR_N: gl.constexpr, WARPS_N: gl.constexpr,
                                 MAX_SPIN: gl.constexpr):
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
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    # data-parallel phase: whole tiles, each tile's first loads under the previous one's epilogue
    pm, pn = tile_coords(pid, tiles_m, tiles_n, GROUP_M)
    prologue(a_desc, b_desc, a_s, b_s, ready, pm * BLOCK_M, pn * BLOCK_N, 0, k_steps, 0, pid < DP_TILES,
             STAGES, nbytes)
    base = 0
    for tile in range(pid, DP_TILES, G):
        pm, pn = tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        acc = mma_steps(acc, a_desc, b_desc, a_s, b_s, ready, pm * BLOCK_M, pn * BLOCK_N, 0, k_steps, base,
                        STAGES, nbytes)
        base += k_steps
        pm1, pn1 = tile_coords(gl.minimum(tile + G, DP_TILES - 1), tiles_m, tiles_n, GROUP_M)
        prologue(a_desc, b_desc, a_s, b_s, ready, pm1 * BLOCK_M, pn1 * BLOCK_N, 0, k_steps, base,
                 tile + G < DP_TILES, STAGES, nbytes)
        finish(acc, c_desc, c_s, bias_ptr, pm * BLOCK_M, pn * BLOCK_N, N, acc_layout, HAS_BIAS, ACT)
    # stream-K phase: program p owns steps [start(p), start(p + 1)) of the last tiles' K steps
    total = (tiles_m * tiles_n - DP_TILES) * k_steps
    per = total // G
    extra = total % G
    start = pid * per + gl.minimum(pid, extra)
    it = start + per + (pid < extra).to(gl.int32)
    while it > start:
        t = (it - 1) // k_steps
        t0 = t * k_steps
        seg = gl.maximum(t0, start)
        pm, pn = tile_coords(DP_TILES + t, tiles_m, tiles_n, GROUP_M)
        prologue(a_desc, b_desc, a_s, b_s, ready, pm * BLOCK_M, pn * BLOCK_N, seg - t0, it - seg, base, True,
                 STAGES, nbytes)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        owner = it == t0 + k_steps
        if owner:
            # the tile's last K step is here: start from the partials of the programs below
            q = pid - 1
            low = seg
            while low > t0:
                acc = absorb(acc, ws_ptr, flag_ptr, q, G, acc_layout, MAX_SPIN)
                low = q * per + gl.minimum(q, extra)
                q -= 1
        acc = mma_steps(acc, a_desc, b_desc, a_s, b_s, ready, pm * BLOCK_M, pn * BLOCK_N, seg - t0, it - seg,
                        base, STAGES, nbytes)
        base += it - seg
        if owner:
            finish(acc, c_desc, c_s, bias_ptr, pm * BLOCK_M, pn * BLOCK_N, N, acc_layout, HAS_BIAS, ACT)
        else:
            publish(acc, ws_ptr, flag_ptr, pid, acc_layout)
        it = seg
    tma.store_wait(0)
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(st))


def dp_tiles(tiles: int, programs: int) -> int:
    """Tiles of the data-parallel phase: whole waves, less one when there are two or more, so that
    the stream-K phase spreads a full wave plus the partial one (each program 1-2 tiles' K steps,
    a tile shared by at most two programs)."""
    waves = tiles // programs
    return max(0, waves - 1) * programs if tiles % programs else tiles


def programs_for(M: int, N: int, K: int, cfg: dict, sms: int) -> int:
    """The grid: one program an SM, but no more than the K steps of all tiles (every program's
    range must hold at least one step)."""
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    return max(1, min(sms, tiles * triton.cdiv(K, cfg["BLOCK_K"])))


def schedule(tiles: int, k_steps: int, programs: int) -> list:
    """The kernel's walk in Python (its index arithmetic line for line), for the tests of its
    invariants: per program, its pieces of work in order as (tile, first K step, end K step, role,
    programs absorbed), role "tile" (a data-parallel tile), "owner" (the tile's last K steps, on top
    of the partials of the programs absorbed, in that order; the tile stored) or "partial"
    (published to the program's slot)."""
    dp = dp_tiles(tiles, programs)
    total = (tiles - dp) * k_steps
    per, extra = total // programs, total % programs
    work = []
    for pid in range(programs):
        mine = [(tile, 0, k_steps, "tile", ()) for tile in range(pid, dp, programs)]
        start = pid * per + min(pid, extra)
        it = start + per + int(pid < extra)
        while it > start:
            t0 = (it - 1) // k_steps * k_steps
            seg = max(t0, start)
            if it == t0 + k_steps:
                q, low, absorbed = pid - 1, seg, []
                while low > t0:
                    absorbed.append(q)
                    low = q * per + min(q, extra)
                    q -= 1
                mine.append((dp + t0 // k_steps, seg - t0, it - t0, "owner", tuple(absorbed)))
            else:
                mine.append((dp + t0 // k_steps, seg - t0, it - t0, "partial", ()))
            it = seg
        work.append(mine)
    return work


def workspace(cfg: dict, programs: int, device) -> tuple:
    """(fp32 partial slots [programs, BLOCK_M, BLOCK_N], int32 counts [2 x programs] zeroed: partials
    published, partials absorbed): made once per plan; every launch leaves the two halves equal."""
    ws = torch.empty((programs, cfg["BLOCK_M"], cfg["BLOCK_N"]), dtype=torch.float32, device=device)
    return ws, torch.zeros((2 * programs,), dtype=torch.int32, device=device)


def launch_spec(a, b, bias, act: str, out, cfg: dict, sms: int, ws=None) -> Spec:
    """The stream-K launch on ``programs_for`` programs; ``ws``: workspace() for them (made here
    when None; the spec's arguments hold it)."""
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    programs = programs_for(M, N, K, cfg, sms)
    ws, flags = ws if ws is not None else workspace(cfg, programs, a.device)
    gdt = gl_dtype(a.dtype)
    a_desc = TensorDescriptor.from_tensor(a, [BM, BK], gl.NVMMASharedLayout.get_default_for([BM, BK], gdt))
    b_desc = TensorDescriptor.from_tensor(b, [BK, BN], gl.NVMMASharedLayout.get_default_for([BK, BN], gdt))
    c_desc = TensorDescriptor.from_tensor(out, [BM, BN], gl.NVMMASharedLayout.get_default_for([BM, BN], gdt))
    n, wn = instr_n(BM, BN, cfg["num_warps"])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    return Spec(gemm_epilogue_streamk_kernel, (programs,),
                {"a_desc": a_desc, "b_desc": b_desc, "c_desc": c_desc,
                 "bias_ptr": bias if bias is not None else out, "ws_ptr": ws, "flag_ptr": flags,
                 "M": M, "N": N, "K": K, "DP_TILES": dp_tiles(tiles, programs),
                 "HAS_BIAS": bias is not None, "ACT": ACTS[act], "STAGES": cfg["STAGES"],
                 "GROUP_M": cfg["GROUP_M"], "INSTR_N": n, "WARPS_N": wn, "MAX_SPIN": MAX_SPIN},
                {"num_warps": cfg["num_warps"]})
