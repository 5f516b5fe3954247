"""softmax for long rows (cute:softmax_split): a row cut into C chunks held in the registers of a
persistent grid, the chunks of a row exchanging (max, sum) through 64-bit words in global memory.

Why: a CTA per row (``softmax_block.py``) holds at most 32K values and, for rows of tens of KB,
loads, reduces and stores one phase after the other while HBM waits. Here two CTAs share an SM
(T threads x K 16-byte vectors each: a 64 KB fp32 or 32 KB 16-bit chunk in registers as raw
input values), and the
*next* unit's chunk is already on its way into shared memory (one bulk copy on an mbarrier) while
the current one is reduced, exchanged and stored. C = 1 (rows up to a chunk) is a persistent row
pipeline with no exchange; C > 1 splits a longer row over C co-resident CTAs.

Unit u = blockIdx.x + k*gridDim.x is chunk p = u % C of row u / C. The row is read as 16-byte
vectors from the boundary at or before its first element (``softmax_base``: any alignment keeps
128-bit accesses); thread t of chunk p holds vectors (k*C + p)*T + t, k < K, so the C chunks of a
row carry equal shares (no short last chunk whose CTA would wait for the others). A unit:
1. waits for its chunk in shared memory, moves it to registers (-inf outside the row) and starts
   the bulk copy of the next unit's chunk into the same buffer;
2. reduces it to m = max and s = sum exp(x - m) (warp butterflies, a value per warp in shared
   memory);
3. (C > 1) publishes (m, s) as ONE 64-bit word (s high, m low) with a relaxed gpu-scope store into
   ``slots[u]`` (zero at launch); the word is its own flag: 0 is never a
   partial (a finite m has s >= 1; m = -inf has the bits of -inf) and a 64-bit access is seen whole,
   so no fence and no counter. Warp 0 polls the row's C slots (relaxed gpu-scope loads: served by
   L2) until none is zero, merges them in a fixed order (the result does not depend on arrival
   order) and hands (M, S) to the CTA through shared memory; then it counts itself out of the row
   (``slots[units + row]``), and the row's last reader zeroes the row's slots and count, so the
   next launch finds them zero with no host-side memset;
4. writes exp(x - M) / S from the raw values still in registers (the exponentials are recomputed:
   half the registers of keeping them).

No deadlock: with C > 1 the launch is cooperative (the driver refuses a grid that cannot be
resident) and the grid is a multiple of C, so the C units of a row fall in one round on C distinct
CTAs. Bounded spin: after ``max_spin`` polls a CTA gives up, writes NaN over its chunk and stops
waiting in later rounds: a grid that is not resident shows as a failure, not a hang. A row of only
-inf gives NaN, as torch does. HBM traffic: one read and one write; the slots stay in L2.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import torch
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, fake_stream, stream_args, to_cute
from .softmax_base import LOG2E, fake_rows, load_row, normalise, row_args, row_stats, row_vectors, store_row, validate

MAX_SPIN = 1 << 20            # polls before a waiting CTA gives up (NaN), ~10-100 ms
BLOCKS_PER_SM = 2             # two CTAs an SM: <= 128 registers a thread at 256 threads


@dsl_user_op
def pack_pair(m: cutlass.Float32, s: cutlass.Float32, *, loc=None, ip=None) -> cutlass.Int64:
    """One 64-bit word: the bits of ``s`` high, the bits of ``m`` low."""
    mi = cutlass.Uint32(llvm.bitcast(T.i32(), m.ir_value(loc=loc, ip=ip), loc=loc, ip=ip))
    si = cutlass.Uint32(llvm.bitcast(T.i32(), s.ir_value(loc=loc, ip=ip), loc=loc, ip=ip))
    return cutlass.Int64((cutlass.Uint64(si) << 32) | cutlass.Uint64(mi))


@dsl_user_op
def unpack_pair(w: cutlass.Int64, *, loc=None, ip=None):
    """(m, s) from a word written by pack_pair."""
    u = cutlass.Uint64(w)
    lo = cutlass.Uint32(u & cutlass.Uint64(0xFFFFFFFF))
    hi = cutlass.Uint32(u >> 32)
    m = cutlass.Float32(llvm.bitcast(T.f32(), lo.ir_value(loc=loc, ip=ip), loc=loc, ip=ip))
    s = cutlass.Float32(llvm.bitcast(T.f32(), hi.ir_value(loc=loc, ip=ip), loc=loc, ip=ip))
    return m, s


@dsl_user_op
def bulk_g2s(dst: cute.Pointer, src: cute.Pointer, nbytes: cutlass.Int32, mbar: cute.Pointer, *, loc=None, ip=None):
    """``nbytes`` (a multiple of 16, both addresses 16-byte aligned) from global to this CTA's
    shared memory by the bulk-copy engine, completing ``nbytes`` transactions on the mbarrier. (The
    tensor TMA atoms cannot take a box this long: at most 256 elements a dimension.)"""
    llvm.inline_asm(None, [dst.toint(loc=loc, ip=ip).ir_value(loc=loc, ip=ip),
                           src.toint(loc=loc, ip=ip).ir_value(loc=loc, ip=ip),
                           cutlass.Int32(nbytes).ir_value(loc=loc, ip=ip),
                           mbar.toint(loc=loc, ip=ip).ir_value(loc=loc, ip=ip)],
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
                    "r,l,r,r", has_side_effects=True, is_align_stack=False,
                    asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@cute.jit
def merge(m: cutlass.Float32, s: cutlass.Float32, om: cutlass.Float32, os_: cutlass.Float32):
    """(max, sum) of two partials; a partial with max -inf contributes nothing (no -inf - -inf)."""
    top = cute.arch.fmax(m, om)
    out = cutlass.Float32(0.0)
    if m != -cutlass.Float32.inf:
        out = out + s * cute.math.exp2((m - top) * LOG2E, fastmath=True)
    if om != -cutlass.Float32.inf:
        out = out + os_ * cute.math.exp2((om - top) * LOG2E, fastmath=True)
    return top, out


class SoftmaxSplit:
    def __init__(self, threads: int, k: int, vec: int, parts: int):
        self.threads, self.k, self.vec = threads, k, vec
        self.exchange = parts > 1                      # compile-time: C > 1 needs the slots
        self.num_warps = threads // 32

    @cute.jit
    def issue(self, mX: cute.Tensor, sbuf: cute.Tensor, mbar: cute.Pointer, u, c):
        """One thread: the bulk copies of unit u's vectors (for each k, the T vectors
        [(k*C + part)*T, +T) that touch the row) into sbuf[:, k*T:], announced on mbar; an empty
        chunk just completes the barrier's phase."""
        row = u // c
        part = u - row * c
        vx, phase = row_vectors(mX[row, None], self.vec)
        count = cute.size(vx, mode=[1])
        total = cutlass.Int32(0)
        for k in cutlass.range_constexpr(self.k):
            start = (k * c + part) * self.threads
            total = total + cutlass.max(cutlass.min(count - start, self.threads), 0) * 16
        cute.arch.mbarrier_arrive_and_expect_tx(mbar, total)
        for k in cutlass.range_constexpr(self.k):
            start = (k * c + part) * self.threads
            nbytes = cutlass.min(count - start, self.threads) * 16
            if nbytes > 0:
                bulk_g2s(sbuf[None, k * self.threads].iterator, vx[None, start].iterator, nbytes, mbar)

    @cute.jit
    def poll(self, mSlots: cute.Tensor, base, c, budget):
        """Warp 0: wait (at most ``budget`` polls) until the row's c slots are all published,
        then merge them; returns (M, S, ready)."""
        lane = cute.arch.lane_idx()
        polls = cutlass.Int32(0)
        ready = cutlass.Int32(0)
        while ready == 0 and polls < budget:
            mine = cutlass.Int32(1)
            for j in cutlass.range(lane, c, 32, unroll=1):
                w = cute.arch.load(mSlots.iterator + base + j, cutlass.Int64, sem="relaxed", scope="gpu")
                if w == cutlass.Int64(0):
                    mine = cutlass.Int32(0)
            if cute.arch.vote_all_sync(mine != 0):
                ready = cutlass.Int32(1)
            polls = polls + 1
        gm = -cutlass.Float32.inf
        gs = cutlass.Float32(0.0)
        if ready != 0:
            for j in cutlass.range(lane, c, 32, unroll=1):
                w = cute.arch.load(mSlots.iterator + base + j, cutlass.Int64, sem="relaxed", scope="gpu")
                pm, ps = unpack_pair(w)
                gm, gs = merge(gm, gs, pm, ps)
            for off in cutlass.range_constexpr(5):           # fixed butterfly: order-independent
                om = cute.arch.shuffle_sync_bfly(gm, 16 >> off)
                os_ = cute.arch.shuffle_sync_bfly(gs, 16 >> off)
                gm, gs = merge(gm, gs, om, os_)
        return gm, gs, ready

    @cute.jit
    def retire(self, mSlots: cute.Tensor, row, c, units):
        """Count this chunk's reader out of the row (slot ``units + row``, after its reads: acq_rel);
        the row's last reader zeroes the row's slots and the count, ready for the next launch."""
        done = cute.arch.atomic_add(mSlots.iterator + units + row, cutlass.Int64(1), sem="acq_rel", scope="gpu")
        if done == cutlass.Int64(c - 1):
            for j in cutlass.range(c, unroll=1):
                cute.arch.store(mSlots.iterator + row * c + j, cutlass.Int64(0), sem="relaxed", scope="gpu")
            cute.arch.store(mSlots.iterator + units + row, cutlass.Int64(0), sem="relaxed", scope="gpu")

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor, mSlots: cute.Tensor, c: cutlass.Int32,
               units: cutlass.Int32, max_spin: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp = cute.arch.warp_idx()
        n = cute.size(mX, mode=[1])

        smem = SmemAllocator()
        red_max = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        red_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        state = smem.allocate_tensor(cutlass.Float32, cute.make_layout(4), byte_alignment=16)
        sbuf = smem.allocate_tensor(mX.element_type, cute.make_layout((self.vec, self.threads * self.k)),
                                    byte_alignment=128)
        mbar = smem.allocate_tensor(cutlass.Int64, cute.make_layout(1), byte_alignment=8)
        rX = cute.make_rmem_tensor(cute.make_layout((self.vec, self.k)), mX.element_type)
        rO = cute.make_rmem_tensor(cute.make_layout((self.vec, self.k)), mO.element_type)
        if tidx == 0:
            cute.arch.mbarrier_init(mbar.iterator, 1)
            cute.arch.mbarrier_init_fence()             # visible to the bulk-copy engine
        cute.arch.barrier()                             # initialised before anyone waits on it
        if tidx == 0 and bidx < units:
            self.issue(mX, sbuf, mbar.iterator, bidx, c)

        phase_bit = cutlass.Int32(0)
        budget = max_spin                               # meaningful in warp 0 (the poller)
        for u in cutlass.range(bidx, units, gdim, unroll=1):
            row = u // c
            part = u - row * c
            vx, phase = row_vectors(mX[row, None], self.vec)
            first = part * self.threads + tidx          # this thread's vectors: first + k*C*T
            col0 = first * self.vec - phase
            cute.arch.mbarrier_wait(mbar.iterator, phase_bit)      # unit u's chunk has landed
            phase_bit = phase_bit ^ 1
            load_row(sbuf, tidx, self.threads, col0, c * self.threads * self.vec, n, rX)
            cute.arch.barrier()                         # all of it in registers: refill the buffer
            if tidx == 0 and u + gdim < units:
                self.issue(mX, sbuf, mbar.iterator, u + gdim, c)

            # block_reduce's barriers order red_max / red_sum; the next unit rewrites them only
            # after the state barrier below, which every thread passes after reading them
            m, s = row_stats(rX, red_max, red_sum, self.num_warps)
            g_max, g_sum, ready = m, s, cutlass.Int32(1)
            if cutlass.const_expr(self.exchange):
                if warp == 0:
                    if cute.arch.lane_idx() == 0:
                        cute.arch.store(mSlots.iterator + u, pack_pair(m, s), sem="relaxed", scope="gpu")
                    gm, gs, rd = self.poll(mSlots, row * c, c, budget)
                    if rd == 0:
                        budget = cutlass.Int32(0)       # timed out: NaN now, no waiting later
                    if cute.arch.lane_idx() == 0:
                        self.retire(mSlots, row, c, units)
                        state[0] = gm
                        state[1] = gs
                        state[2] = cutlass.Float32(rd)
                cute.arch.barrier()                     # the row's (M, S) is in shared memory
                g_max, g_sum = state[0], state[1]
                ready = cutlass.Int32(state[2])
            inv = cutlass.Float32(1.0) / g_sum          # a row of only -inf: NaN below, as torch
            if ready == 0:
                inv = cutlass.Float32(float("nan"))
            normalise(rX, g_max, inv, rO)
            vo, phase_o = row_vectors(mO[row, None], self.vec)
            store_row(mO[row, None], vo, phase_o == phase, first, c * self.threads, col0, n, rO)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, mSlots: cute.Tensor, c: cutlass.Int32,
                 grid_cap: cutlass.Int32, max_spin: cutlass.Int32, stream):
        units = cute.size(mX, mode=[0]) * c
        grid = cutlass.min(units, (grid_cap // c) * c)
        self.kernel(mX, mO, mSlots, c, units, max_spin).launch(
            grid=(grid, 1, 1), block=(self.threads, 1, 1), stream=stream,
            cooperative=self.exchange, min_blocks_per_mp=BLOCKS_PER_SM,
            # a carveout stated here (percent shared memory) keeps the compile free of device queries
            preferred_smem_carveout=100)


def compile_split(dtype, p: dict):
    """Compile (cached) for a plan {vec, threads, k, parts}: one compile per (K, exchange?)."""
    key = ("softmax_split", str(dtype), p["vec"], p["threads"], p["k"], p["parts"] > 1)
    c = cached(key)
    if c is not None:
        return c
    from cutlass.cute.runtime import make_fake_compact_tensor

    slots = make_fake_compact_tensor(cutlass.Int64, (cute.sym_int32(),), assumed_align=8)
    i32 = cutlass.Int32
    return compile_kernel(key, SoftmaxSplit(p["threads"], p["k"], p["vec"], p["parts"]), *fake_rows(dtype),
                          slots, i32(p["parts"]), i32(1), i32(MAX_SPIN), fake_stream())


_SLOTS: dict = {}


def _slots(device: torch.device, words: int) -> torch.Tensor:
    """Slot words and per-row counts (zeroed once; every launch leaves them zero), kept per device
    and grown on demand. Concurrent launches on two streams would share them: one stream only."""
    buf = _SLOTS.get(device)
    if buf is None or buf.numel() < words:
        buf = torch.zeros(max(words, 1 << 16), dtype=torch.int64, device=device)
        _SLOTS[device] = buf
    return buf


def prepare_softmax_split(x, out, plan: dict, max_spin: int = -1):
    """Validate, compile (cached) the plan's kernel; returns (launch, compiled, plan).
    ``max_spin``: polls before a waiting CTA gives up and writes NaN (-1: MAX_SPIN)."""
    validate(x, out)
    if not isinstance(max_spin, int) or max_spin < -1:
        raise ValueError(f"max_spin: must be -1 (default {MAX_SPIN} polls) or an int >= 0, got {max_spin!r}")
    comp = compile_split(x.dtype, plan)
    c = plan["parts"]
    units = x.shape[0] * c
    if units + x.shape[0] >= 2 ** 31:
        raise ValueError(f"x: {x.shape[0]} rows x {c} chunks is over the 2^31-1 work units this kernel counts")
    slots = _slots(x.device, units + x.shape[0]) if c > 1 else torch.zeros(1, dtype=torch.int64, device=x.device)
    args = (*row_args(x, out), to_cute(slots, 8), c, plan["grid_cap"], MAX_SPIN if max_spin < 0 else max_spin)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp, plan
