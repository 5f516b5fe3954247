"""GEMM + epilogue, ``streamk``: the persistent TMA kernel with the last waves' K steps shared out
evenly over the programs (data-parallel tiles first, then stream-K), so no SM idles through a
partial last wave.

A grid of G programs (one an SM, all resident) and T tiles of KS K steps. Whole tiles while every
program has one (``DP_TILES`` = a multiple of G, round robin as in the tma kernel); the remaining
S = T - DP_TILES tiles (the host takes the last partial wave plus one full wave, so that each
program's share of them is one to two tiles' K steps) form S x KS steps cut into G contiguous
ranges of equal length. Program p walks its range from the end back to the start, a tile segment
at a time:

- a segment that reaches its tile's last K step makes p the tile's *owner*: the programs below p
  hold the tile's earlier steps (ranges are contiguous), each in its one *partial* (the segment
  at the top of its range, which it computed first). The owner waits for each partial's flag,
  adds it (in program order: the same bits every run), then runs the epilogue and the store;
- any other segment (it stops short of the tile's end: only the top one of a range) writes its
  fp32 partial to the program's slot of the workspace ([G, BLOCK_M, BLOCK_N]) and raises the
  program's flag (a CTA barrier, then a release exchange).

A program waits only for lower programs, which computed what it needs first: no cycle, and a
Triton interpreter that runs programs one after another finds every flag already raised. The
owner resets each flag it consumed (an acquire exchange), so the flags (zeroed once, when the
workspace is made) are zero again after every launch. Every warp polls the flag on its own, so
the reset waits behind a barrier until all have stopped polling (a warp still polling would
never see a flag another warp took down), and the exchange's one answer decides the partial for
every thread. A flag that does not rise within ``MAX_SPIN`` polls (a grid that is not resident)
turns the tile into NaNs: a verification FAIL, not a hang (a flag that rises later stays up, so
the plan's next launches are not to be trusted either).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import ACTS
from .gemm_epilogue_tiled import grouped_tile
from .gemm_epilogue_tma import check, descriptors, finish_tile
from .runtime import Spec, bind_spec

#: polls of a partial's flag before the owner gives up and writes NaNs (about a second on a GPU)
MAX_SPIN = 1 << 22


@triton.jit
def k_range(acc, a_desc, b_desc, off_m, off_n, k0, k1, BLOCK_K: tl.constexpr):
    """acc + A[off_m:, k0 * BK:k1 * BK] @ B[k0 * BK:k1 * BK, off_n:] of one tile (TMA boxes)."""
    for k in range(k0, k1):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def slot_offsets(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    return tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]


@triton.jit
def publish(acc, ws_ptr, flag_ptr, pid):
    """This program's partial into its workspace slot, then its flag raised."""
    BLOCK_M: tl.constexpr = acc.shape[0]
    BLOCK_N: tl.constexpr = acc.shape[1]
    tl.store(ws_ptr + pid.to(tl.int64) * (BLOCK_M * BLOCK_N) + slot_offsets(BLOCK_M, BLOCK_N), acc)
    tl.debug_barrier()                      # every thread's stores before the one release below
    tl.atomic_xchg(flag_ptr + pid, 1, sem="release")


@triton.jit
def take_flag(flag_ptr, q, MAX_SPIN: tl.constexpr):
    """Program q's flag once it is up (or MAX_SPIN polls passed), taken down again: the flag's
    value before the reset (1: q's partial is there), the same in every thread. Each warp polls
    on its own and leaves the loop when it sees the flag; the reset waits for all of them (the
    barrier), since a warp still polling would never see a flag already taken down (it would
    time out and read its part of the tile as missing). The reset is one thread's exchange,
    whose answer every thread then reads."""
    seen = tl.load(flag_ptr + q, volatile=True)
    spins = 0
    while (seen == 0) & (spins < MAX_SPIN):
        seen = tl.load(flag_ptr + q, volatile=True)
        spins += 1
    tl.debug_barrier()                      # no warp polls any more
    return tl.atomic_xchg(flag_ptr + q, 0, sem="acquire")


@triton.jit
def absorb(acc, ws_ptr, flag_ptr, q, MAX_SPIN: tl.constexpr):
    """acc + program q's partial once its flag is up (NaN if it never rises); the flag reset."""
    BLOCK_M: tl.constexpr = acc.shape[0]
    BLOCK_N: tl.constexpr = acc.shape[1]
    up = take_flag(flag_ptr, q, MAX_SPIN)
    tl.debug_barrier()                      # no thread reads the slot before the acquire
    part = tl.load(ws_ptr + q.to(tl.int64) * (BLOCK_M * BLOCK_N) + slot_offsets(BLOCK_M, BLOCK_N),
                   cache_modifier=".cg")
    return acc + tl.where(up != 0, part, float("nan"))


@triton.jit
def gemm_epilogue_streamk_kernel(a_desc, b_desc, c_desc, bias_ptr, ws_ptr, flag_ptr, M, N, K, DP_TILES,
                                 ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                 GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                                 EPILOGUE_SUBTILE: tl.constexpr, MAX_SPIN: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    # data-parallel phase: whole tiles, the next tile's loads under this one's epilogue
    for tile in tl.range(pid, DP_TILES, NUM_SMS, flatten=True):
        pid_m, pid_n = grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
        acc = k_range(tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), a_desc, b_desc, pid_m * BLOCK_M,
                      pid_n * BLOCK_N, 0, k_steps, BLOCK_K)
        finish_tile(acc, c_desc, None, 0, bias_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, ACT, HAS_BIAS,
                    EPILOGUE_SUBTILE, True, a_desc.dtype)
    # stream-K phase: program p owns steps [start(p), start(p + 1)) of the last tiles' K steps
    total = (tiles_m * tiles_n - DP_TILES) * k_steps
    per = total // NUM_SMS
    extra = total % NUM_SMS
    start = pid * per + tl.minimum(pid, extra)
    it = start + per + (pid < extra).to(tl.int32)
    while it > start:
        t = (it - 1) // k_steps
        t0 = t * k_steps
        seg = tl.maximum(t0, start)
        pid_m, pid_n = grouped_tile(DP_TILES + t, tiles_m, tiles_n, GROUP_M)
        if it == t0 + k_steps:
            # the owner (the tile's last K step is here): start from the partials of the programs
            # below, whose ranges end above t0 (computed first there: ready, or nearly)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            q = pid - 1
            low = seg
            while low > t0:
                acc = absorb(acc, ws_ptr, flag_ptr, q, MAX_SPIN)
                low = q * per + tl.minimum(q, extra)
                q -= 1
            acc = k_range(acc, a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, seg - t0, k_steps, BLOCK_K)
            finish_tile(acc, c_desc, None, 0, bias_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, ACT, HAS_BIAS,
                        EPILOGUE_SUBTILE, True, a_desc.dtype)
        else:
            acc = k_range(tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), a_desc, b_desc, pid_m * BLOCK_M,
                          pid_n * BLOCK_N, seg - t0, it - t0, BLOCK_K)
            publish(acc, ws_ptr, flag_ptr, pid)
        it = seg


def dp_tiles(tiles: int, programs: int) -> int:
    """Tiles of the data-parallel phase: whole waves, less one when there are two or more, so that
    the stream-K phase spreads a full wave plus the partial one (each program 1-2 tiles' K steps,
    a tile shared by at most two programs: one partial per owner)."""
    waves = tiles // programs
    return max(0, waves - 1) * programs if tiles % programs else tiles


def programs_for(M: int, N: int, K: int, cfg: dict, sms: int) -> int:
    """The grid: one program an SM, but no more than the K steps of all tiles (every program's
    range must hold at least one step)."""
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    return max(1, min(sms, tiles * triton.cdiv(K, cfg["BLOCK_K"])))


def workspace(cfg: dict, programs: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partial slots [programs, BLOCK_M, BLOCK_N], int32 flags [programs] zeroed): made once
    per plan; every launch leaves the flags zero again."""
    ws = torch.empty((programs, cfg["BLOCK_M"], cfg["BLOCK_N"]), dtype=torch.float32, device=device)
    return ws, torch.zeros((programs,), dtype=torch.int32, device=device)


def launch_spec(a, b, bias, act: str, out, cfg: dict, programs: int, ws, flags) -> Spec:
    """The stream-K launch on ``programs`` programs (all resident: one an SM)."""
    M, K = a.shape
    N = b.shape[1]
    a_desc, b_desc, c_desc = descriptors(a, b, out, cfg)
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    dp = dp_tiles(tiles, programs)
    if 0 < (tiles - dp) * triton.cdiv(K, cfg["BLOCK_K"]) < programs:
        # an empty range would leave an owner waiting for a partial nobody writes
        raise ValueError(f"programs: {programs} exceed the stream-K phase's K steps "
                         f"({tiles - dp} tiles x {triton.cdiv(K, cfg['BLOCK_K'])})")
    args = {"a_desc": a_desc, "b_desc": b_desc, "c_desc": c_desc,
            "bias_ptr": bias if bias is not None else a, "ws_ptr": ws, "flag_ptr": flags,
            "M": M, "N": N, "K": K, "DP_TILES": dp,
            "ACT": ACTS[act], "HAS_BIAS": bias is not None, "NUM_SMS": programs, "MAX_SPIN": MAX_SPIN,
            **{k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EPILOGUE_SUBTILE")}}
    return Spec(gemm_epilogue_streamk_kernel, (programs,), args,
                {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})


def bind_launch(a, b, bias, act: str, out, cfg: dict, sms: int):
    """Zero-argument launch with ``cfg`` (a tma config) on ``programs_for`` programs (at most
    ``sms``, all resident); the workspace lives as long as the launch (``launch.workspace``).
    Raises ValueError naming the operand TMA cannot address."""
    if (why := check(a, b, out)):
        raise ValueError(why)
    programs = programs_for(a.shape[0], b.shape[1], a.shape[1], cfg, sms)
    ws, flags = workspace(cfg, programs, a.device)
    launch = bind_spec(launch_spec(a, b, bias, act, out, cfg, programs, ws, flags), a.device)
    launch.workspace = (ws, flags)
    return launch
