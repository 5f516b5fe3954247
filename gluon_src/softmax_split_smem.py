"""Row softmax, ``split_smem``: rows past one program's shared memory, one read and one write.

``smem`` stages a whole row in one program's shared memory; a row of 128256 bf16 (256 KB) or any
long fp32 row does not fit, and ``online`` reads it twice. Here a row is cut into C chunks of
P x PIECE columns held, raw dtype, in the shared memory of C programs of a persistent grid that
is resident all at once (a cooperative launch); the programs of a row exchange their chunk's
(max, sum of exp) through global memory (``split``: partials through global memory) and write
their chunk from shared memory: one HBM read, one write.

Work unit u = pid + k x G (round k; G programs, a multiple of C) is chunk u % C of row u // C.
Each program has two halves of P pieces (one 16-byte vector a thread a piece, PIECE = 32 x warps
x VEC): while unit k is reduced, exchanged and written from one half, unit k + 1's cp.async
copies fill the other, so HBM has work during the exchange. Every thread copies, reads and
writes the same lanes of a piece, so ``wait_group`` is the data's only synchronisation; a CTA
barrier before a half is refilled orders the previous unit's shared-memory reads before the new
copies.

The exchange is ``triton_src/softmax_split.py``'s (the same algorithm word, Triton's registers
here replaced by shared memory): a unit publishes (m, s) as one 64-bit relaxed atomic exchange in
its slot (zeroed by the launch; 0 is never a partial: a finite m has s >= 1, m = -inf has the bits
of -inf) and polls its row's C slots with volatile loads until none is zero. No deadlock: all G
programs are resident (cooperative launch, G at most SMs x programs an SM of the compiled
kernel), G is a multiple of C so a row's units share a round, and every program finishes round
k - 1 before round k. A waiter gives up after ``max_spin`` polls and writes NaN (a residency
failure shows as a FAIL, not a hang).

Rows must start on 16-byte boundaries (x and out: base and row stride); the copies move whole
16-byte groups holding any of the row, lanes past N are -inf in the reductions, the stores write
the groups wholly inside the row as 16-byte vectors and the last partial group (N % VEC lanes)
recomputed from x. -inf: a chunk of only -inf contributes s = 0; a row of only -inf gives NaN,
as torch does.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from ._compat import cp_async, cta_barrier
from .runtime import Spec, bind

#: polls of the row's slots before a waiter gives up and writes NaN (a poll is an L2 round trip,
#: about a microsecond: seconds against waits of microseconds)
MAX_SPIN = 1 << 20
#: bytes the driver reserves per program in an SM's shared memory
RESERVED_SMEM = 1024
#: shared memory the compiled kernel uses beyond its two halves (the reductions' scratch: 32 bytes
#: on triton 3.6 and 3.9 at 8 warps), so that the planned programs an SM are the launch's
SCRATCH_SMEM = 256


@gluon.jit
def _issue(buf, first: gl.constexpr, half, x_ptr, u, C, N, stride_x, n_units, lanes,
           P: gl.constexpr, PIECE: gl.constexpr, VEC: gl.constexpr):
    """cp.async of unit u's P pieces into half ``half`` of ``buf`` (nothing past the last unit),
    one commit group. ``first``: the half is known at compile time (0)."""
    row = u // C
    start = row.to(gl.int64) * stride_x
    src = x_ptr + start // VEC * VEC            # rows start on 16-byte boundaries
    col0 = (u - row * C) * (P * PIECE)
    end = gl.where(u < n_units, N, 0)
    for i in gl.static_range(P):
        pos = col0 + i * PIECE + lanes
        group = pos // VEC * VEC
        if first:
            slot = buf.index(i)
        else:
            slot = buf.index(half * P + i)
        cp_async(slot, src + pos, mask=group < end)
    async_copy.commit_group()


@gluon.jit
def softmax_split_smem_kernel(x_ptr, out_ptr, slot_ptr, N, stride_x, stride_o, C, n_units, max_spin,
                              PIECE: gl.constexpr, P: gl.constexpr, VEC: gl.constexpr,
                              C_PAD: gl.constexpr):
    LOG2E: gl.constexpr = 1.4426950408889634
    NEG_INF: gl.constexpr = -float("inf")
    LOW: gl.constexpr = 0xFFFFFFFF
    CHUNK: gl.constexpr = P * PIECE
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    parts: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    edge: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    buf = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [2 * P, PIECE], plain)
    lanes = gl.arange(0, PIECE, layout=layout)
    pc = gl.arange(0, C_PAD, layout=parts)
    live = pc < C
    pid = gl.program_id(0)
    G = gl.num_programs(0)

    _issue(buf, True, 0, x_ptr, pid, C, N, stride_x, n_units, lanes, P, PIECE, VEC)
    budget = max_spin
    k = 0
    for u in range(pid, n_units, G):
        half = k % 2
        cta_barrier()           # every thread has read the other half (the unit before this one)
        _issue(buf, False, 1 - half, x_ptr, u + G, C, N, stride_x, n_units, lanes, P, PIECE, VEC)
        async_copy.wait_group(1)
        row = u // C
        col0 = (u - row * C) * CHUNK

        acc = gl.full([PIECE], NEG_INF, gl.float32, layout)
        for i in range(P):
            pos = col0 + i * PIECE + lanes
            x = buf.index(half * P + i).load(layout).to(gl.float32)
            acc = gl.maximum(acc, gl.where(pos < N, x, NEG_INF))
        m = gl.max(acc, axis=0)
        # exponents as (x - shift) * log2(e): x * log2(e) - shift * log2(e) rounds shift * log2(e)
        # once a chunk, an error of up to 5e-4 at |x| ~ 1e4 that differs between the row's chunks
        shift = gl.where(m == NEG_INF, 0.0, m)
        acc = gl.zeros([PIECE], gl.float32, layout)
        for i in range(P):
            pos = col0 + i * PIECE + lanes
            x = buf.index(half * P + i).load(layout).to(gl.float32)
            acc += gl.where(pos < N, gl.exp2((x - shift) * LOG2E), 0.0)
        s = gl.sum(acc, axis=0)

        word = (s.to(gl.uint32, bitcast=True).to(gl.int64) << 32) | m.to(gl.uint32, bitcast=True).to(gl.int64)
        gl.atomic_xchg(slot_ptr + u, word, sem="relaxed")
        slots = slot_ptr + row * C + pc
        v = gl.load(slots, mask=live, other=1, volatile=True)
        missing = gl.sum(((v == 0) & live).to(gl.int32), axis=0)
        spins = 0
        while (missing > 0) & (spins < budget):
            v = gl.load(slots, mask=live, other=1, volatile=True)
            missing = gl.sum(((v == 0) & live).to(gl.int32), axis=0)
            spins += 1
        done = missing == 0
        budget = gl.where(done, budget, 0)
        mc = gl.where(live, (v & LOW).to(gl.uint32).to(gl.float32, bitcast=True), NEG_INF)
        sc = gl.where(live, (v >> 32).to(gl.uint32).to(gl.float32, bitcast=True), 0.0)
        row_max = gl.max(mc, axis=0)
        row_sum = gl.sum(gl.where(mc == NEG_INF, 0.0, sc * gl.exp2((mc - row_max) * LOG2E)), axis=0)
        f = gl.where(m == NEG_INF, 0.0, gl.exp2((m - row_max) * LOG2E)) / row_sum   # 0/0: NaN row
        f = gl.where(done, f, float("nan"))

        o_start = row.to(gl.int64) * stride_o
        dst = out_ptr + o_start // VEC * VEC
        for i in range(P):
            pos = col0 + i * PIECE + lanes
            group = pos // VEC * VEC
            x = buf.index(half * P + i).load(layout).to(gl.float32)
            y = gl.exp2((x - shift) * LOG2E) * f
            gl.store(dst + pos, y.to(out_ptr.dtype.element_ty), mask=group + VEC <= N)
        tail = N // VEC * VEC                   # the row's last partial group, from x
        if (tail < N) & (tail // CHUNK == u - row * C):
            j = tail + gl.arange(0, VEC, layout=edge)
            xe = gl.load(x_ptr + row.to(gl.int64) * stride_x + j, mask=j < N, other=NEG_INF).to(gl.float32)
            gl.store(dst + j, (gl.exp2((xe - shift) * LOG2E) * f).to(out_ptr.dtype.element_ty), mask=j < N)
        k += 1
    async_copy.wait_group(0)


def config(N: int, elem_size: int, num_warps: int, pieces: int) -> dict:
    """PIECE = one 16-byte vector a thread; a chunk is ``pieces`` pieces; C chunks a row (C_PAD:
    C rounded up to a power of two, at least 32: the width of the poll); the shared memory of the
    two halves and the kernel's scratch."""
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps: must be a power of two from 1 to 32, got {num_warps!r}")
    if isinstance(pieces, bool) or not isinstance(pieces, int) or not 1 <= pieces <= 32:
        raise ValueError(f"pieces: must be an integer from 1 to 32, got {pieces!r}")
    vec = 16 // elem_size
    piece = 32 * num_warps * vec
    C = triton.cdiv(N, piece * pieces)
    return {"PIECE": piece, "P": pieces, "VEC": vec, "C": C, "C_PAD": max(32, triton.next_power_of_2(C)),
            "num_warps": num_warps, "smem": 2 * pieces * piece * elem_size + SCRATCH_SMEM}


def programs_per_sm(smem: int, regs: int, num_warps: int, facts: dict) -> int:
    """Programs an SM holds: shared memory (plus the driver's reserve), registers (allocated per
    warp in units of 256) and warps."""
    per_warp = -(-max(1, regs) * 32 // 256) * 256
    return max(0, min(facts["smem_per_sm"] // (smem + RESERVED_SMEM),
                      facts["regs_per_sm"] // (per_warp * num_warps),
                      facts["max_warps_per_sm"] // num_warps, 32))


def supports_tensors(x: torch.Tensor, out: torch.Tensor) -> str | None:
    """None when every row of x and out starts on a 16-byte boundary, else why not."""
    es = x.element_size()
    for name, t in (("x", x), ("out", out)):
        if t.data_ptr() % 16 or (t.stride(0) * es) % 16 or (t.shape[1] > 1 and t.stride(1) != 1):
            return f"{name}: split_smem needs rows on 16-byte boundaries (base and row stride) and unit column stride"
    return None


def launch_spec(x, out, slots, cfg: dict, grid: int, max_spin: int = MAX_SPIN) -> Spec:
    M, N = x.shape
    return Spec(softmax_split_smem_kernel, (grid,),
                {"x_ptr": x, "out_ptr": out, "slot_ptr": slots, "N": N, "stride_x": x.stride(0),
                 "stride_o": out.stride(0), "C": cfg["C"], "n_units": M * cfg["C"], "max_spin": max_spin,
                 "PIECE": cfg["PIECE"], "P": cfg["P"], "VEC": cfg["VEC"], "C_PAD": cfg["C_PAD"]},
                {"num_warps": cfg["num_warps"], "launch_cooperative_grid": True})


def grid_for(M: int, cfg: dict, per_sm: int, sms: int) -> int:
    """A multiple of C, at most what the device holds at once, at most the units."""
    C = cfg["C"]
    if per_sm * sms < C:
        raise ValueError(f"x: a row takes {C} programs of {cfg['P'] * cfg['PIECE']} columns at once, but the "
                         f"device holds {per_sm * sms}; use larger chunks")
    return min(M * C, per_sm * sms // C * C)


def bind_launch(x, out, cfg: dict, facts: dict):
    """Zero-argument launch: zero the M x C slots, then the kernel on the resident grid (checks the
    tensors first: ValueError naming them)."""
    if (why := supports_tensors(x, out)):
        raise ValueError(why)
    M, N = x.shape
    if M * cfg["C"] + (1 << 20) >= 2 ** 31:
        raise ValueError(f"x: {M} rows x {cfg['C']} chunks exceed the kernel's 32-bit unit index")
    slots = torch.zeros(M * cfg["C"], dtype=torch.int64, device=x.device)
    probe = bind(launch_spec(x, out, slots, cfg, 1), x.device).compiled
    per_sm = programs_per_sm(int(probe.metadata.shared or cfg["smem"]), probe.n_regs, cfg["num_warps"], facts)
    grid = grid_for(M, cfg, per_sm, facts["sms"])
    kernel = bind(launch_spec(x, out, slots, cfg, grid), x.device)

    def launch():
        slots.zero_()
        kernel()
    launch.compiled, launch.grid, launch.slots = kernel.compiled, [grid, 1, 1], slots
    launch.config = dict(cfg, GRID=grid, PER_SM=per_sm)
    return launch
