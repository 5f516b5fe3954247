"""softmax for long rows in the CuTe DSL: a row cut into chunks held in the registers of CTAs of a
persistent, co-resident grid, which exchange (max, sum) through 64-bit slots in global memory.

Why a third softmax kernel: the cluster kernel (``softmax.py``) keeps a 1 MB fp32 row in a cluster
of 8 CTAs of 1024 threads, one CTA per SM; each SM then loads, reduces, waits for its cluster's
barrier and stores, one phase after the other, and HBM idles while it waits. Here two CTAs share
an SM (``THREADS`` threads x ``K * VEC`` values each, <= 128 registers a thread, enforced with
``min_blocks_per_mp``), so one CTA loads while the other waits for its row's partners; no cluster
is needed, so every SM is used whatever the GPC shape.

Work unit ``u = blockIdx.x + k * gridDim.x`` (round ``k``) is chunk ``u % C`` of row ``u / C``,
``C = ceil(N / CHUNK)``, ``CHUNK = THREADS * K * VEC``. A unit:

1. loads its chunk (128-bit loads, -inf past the row end) and reduces it to ``m`` = max and
   ``s`` = sum exp(x - m) (warp butterflies, one value per warp through shared memory);
2. publishes ``(m, s)`` as ONE 64-bit word (``s`` bits high, ``m`` bits low) with a relaxed
   gpu-scope store into ``slots[u]``, which the host zeroes before every launch. The word is its
   own flag: 0 is never a partial (a finite ``m`` has ``s`` >= 1, and ``m`` = -inf has the bits of
   -inf), and a 64-bit access is seen whole or not at all, so there is no fence and no counter;
3. warp 0 polls the row's ``C`` slots (relaxed gpu-scope loads: served by L2, never a stale L1
   line) until none is zero, merges them into the row's ``(M, S)`` (fixed order per lane, then a
   fixed butterfly: the result does not depend on arrival order) and hands them to the CTA
   through shared memory;
4. the CTA writes ``exp(x - m) * exp(m - M) / S`` from the registers it still holds.

Prefetch (``PREFETCH``, rows 16-byte aligned): the next unit's chunk is copied into this CTA's
shared memory by one bulk copy (``cp.async.bulk`` completing on an mbarrier) as soon as the current
chunk has moved from shared memory to registers, so HBM keeps reading while the CTA reduces, waits
for its row's partners and stores. Shared memory per CTA: one chunk (64 KB fp32).

No deadlock: the launch is cooperative (the driver refuses a grid that cannot be resident at
once), and the grid is a multiple of ``C``, so the ``C`` units of a row fall in one round on ``C``
distinct CTAs; by induction every CTA reaches every round. Bounded spin: after ``max_spin`` polls
a CTA gives up, writes NaN over its chunk and stops waiting in later rounds, so a grid that is not
resident after all shows as a verification failure, not a hang. -inf rules: a chunk of only -inf
has ``m`` = -inf, ``s`` = 0 (exponentials taken against 0) and adds nothing; a row of only -inf
has ``S`` = 0 and gives NaN, as torch does. HBM traffic: one read and one write (2MN elements);
the slots (8 bytes a chunk) stay in L2.
"""
from __future__ import annotations

import os

import cutlass
import cutlass.cute as cute
import torch
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, fake_stream, stream_args, to_cute
from .softmax import LOG2E, _add, _fmax, access_width, block_reduce, fake_rows, validate, vec_copy_atom
from .softmax_rows import num_sms

MIN_N = 32769             # shorter rows fit one CTA's registers: cute:softmax does them in one pass
MAX_SPIN = 1 << 20        # polls before a waiting CTA gives up (NaN), ~10-100 ms


def prefetch() -> bool:
    """``KL_CUTE_SOFTMAX_SPLIT_PREFETCH`` (1 / 0): the next chunk copied into shared memory while
    the current one is reduced, exchanged and stored."""
    v = os.environ.get("KL_CUTE_SOFTMAX_SPLIT_PREFETCH", "1")
    if v not in ("0", "1"):
        raise ValueError(f"KL_CUTE_SOFTMAX_SPLIT_PREFETCH: 0 or 1, got {v!r}")
    return v == "1"


def threads() -> int:
    """Threads per CTA: ``KL_CUTE_SOFTMAX_SPLIT_THREADS`` (256 or 512; default 256, 64 fp32 values
    a thread, the configuration Triton's split tuning found best on the H200)."""
    t = int(os.environ.get("KL_CUTE_SOFTMAX_SPLIT_THREADS", "256"))
    if t not in (256, 512):
        raise ValueError(f"KL_CUTE_SOFTMAX_SPLIT_THREADS: 256 or 512, got {t}")
    return t


VALUES = 16384            # fp32 values a CTA holds: 256 x 64 or 512 x 32 (64 KB of registers)
BLOCKS_PER_SM = 2         # two CTAs an SM: 2 x 64 KB in flight; <= 128 / 64 registers a thread


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
    """``nbytes`` (a multiple of 16, both addresses 16-byte aligned) from global to this CTA's shared
    memory by the bulk-copy engine; completes ``nbytes`` transactions on the mbarrier."""
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
    def __init__(self, threads: int, k: int, vec: int, grid_cap: int, prefetch: bool):
        self.threads, self.k, self.vec, self.grid_cap = threads, k, vec, grid_cap
        self.chunk = threads * k * vec
        self.num_warps = threads // 32
        self.prefetch = prefetch and vec > 1           # bulk copies need 16-byte aligned rows

    @cute.jit
    def issue(self, mX: cute.Tensor, sbuf: cute.Tensor, mbar: cute.Tensor, u, c, n):
        """One thread: the bulk copy of unit u's chunk into sbuf, announced on mbar."""
        row = u // c
        part = u - row * c
        cols = cutlass.min(n - part * self.chunk, self.chunk)
        nbytes = cols * (mX.element_type.width // 8)
        src = cute.local_tile(mX[row, None], (self.chunk,), (part,))
        cute.arch.mbarrier_arrive_and_expect_tx(mbar.iterator, nbytes)
        bulk_g2s(sbuf.iterator, src.iterator, nbytes, mbar.iterator)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor, mSlots: cute.Tensor, c: cutlass.Int32,
               units: cutlass.Int32, max_spin: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp = cute.arch.warp_idx()
        lane = cute.arch.lane_idx()
        n = cute.size(mX, mode=[1])

        smem = SmemAllocator()
        red_max = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        red_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        state = smem.allocate_tensor(cutlass.Float32, cute.make_layout(4), byte_alignment=16)

        tv = cute.make_layout((self.vec, self.threads, self.k), stride=(1, self.vec, self.vec * self.threads))
        atom_in = vec_copy_atom(mX.element_type, self.vec)
        atom_out = vec_copy_atom(mO.element_type, self.vec)
        frag = cute.make_layout((self.vec, self.k))
        rX = cute.make_rmem_tensor(frag, mX.element_type)
        rO = cute.make_rmem_tensor(frag, mO.element_type)

        phase = cutlass.Int32(0)
        if cutlass.const_expr(self.prefetch):
            sbuf = smem.allocate_tensor(mX.element_type, cute.make_layout(self.chunk), byte_alignment=128)
            mbar = smem.allocate_tensor(cutlass.Int64, cute.make_layout(1), byte_alignment=8)
            sX = cute.composition(sbuf, tv)[None, tidx, None]
            if tidx == 0:
                cute.arch.mbarrier_init(mbar.iterator, 1)
                cute.arch.mbarrier_init_fence()     # visible to the bulk-copy engine (async proxy)
            # the mbarrier is initialised before anyone waits on it
            cute.arch.barrier()
            if tidx == 0 and bidx < units:
                self.issue(mX, sbuf, mbar, bidx, c, n)

        budget = max_spin                               # meaningful in warp 0 (the poller)
        for u in cutlass.range(bidx, units, gdim, unroll=1):
            row = u // c
            part = u - row * c
            col0 = part * self.chunk + tidx * self.vec
            rX.fill(-cutlass.Float32.inf)
            if cutlass.const_expr(self.prefetch):
                cute.arch.mbarrier_wait(mbar.iterator, phase)   # unit u's chunk has landed
                phase = phase ^ 1
                for k in cutlass.range_constexpr(self.k):
                    if col0 + k * self.threads * self.vec < n:
                        cute.copy(atom_in, sX[None, k], rX[None, k])
                # every thread has its values before the buffer is refilled with unit u + G
                cute.arch.barrier()
                if tidx == 0 and u + gdim < units:
                    self.issue(mX, sbuf, mbar, u + gdim, c, n)
            else:
                gX = cute.composition(cute.local_tile(mX[row, None], (self.chunk,), (part,)), tv)[None, tidx, None]
                for k in cutlass.range_constexpr(self.k):
                    if col0 + k * self.threads * self.vec < n:
                        cute.copy(atom_in, gX[None, k], rX[None, k])

            x = rX.load().to(cutlass.Float32)
            # barriers inside block_reduce: red_max / red_sum are complete before any warp reads
            # them; round k + 1 rewrites them only after barriers every thread passes after its
            # reads of round k (the state barrier below)
            m = block_reduce(x.reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0), _fmax, red_max,
                             self.num_warps)
            shift = m
            if m == -cutlass.Float32.inf:              # a chunk of only -inf / padding
                shift = cutlass.Float32(0.0)
            e = cute.math.exp2((x - shift) * LOG2E, fastmath=True)
            s = block_reduce(e.reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0), _add, red_sum,
                             self.num_warps)

            if warp == 0:
                if lane == 0:
                    cute.arch.store(mSlots.iterator + u, pack_pair(m, s), sem="relaxed", scope="gpu")
                base = row * c
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
                    for off in cutlass.range_constexpr(5):
                        om = cute.arch.shuffle_sync_bfly(gm, 16 >> off)
                        os_ = cute.arch.shuffle_sync_bfly(gs, 16 >> off)
                        gm, gs = merge(gm, gs, om, os_)
                else:
                    budget = cutlass.Int32(0)           # timed out: NaN now, no waiting later
                if lane == 0:
                    state[0] = gm
                    state[1] = gs
                    state[2] = cutlass.Float32(ready)
            # the row's (M, S) is in shared memory before any warp reads it
            cute.arch.barrier()
            g_max = state[0]
            g_sum = state[1]
            scale = cutlass.Float32(0.0)
            if state[2] == cutlass.Float32(0.0) or g_sum == cutlass.Float32(0.0):
                scale = cutlass.Float32(float("nan"))   # timed out, or a row of only -inf (0/0)
            elif m != -cutlass.Float32.inf:
                scale = cute.math.exp2((m - g_max) * LOG2E, fastmath=True) / g_sum
            rO.store((e * scale).to(mO.element_type))
            gO = cute.composition(cute.local_tile(mO[row, None], (self.chunk,), (part,)), tv)[None, tidx, None]
            for k in cutlass.range_constexpr(self.k):
                if col0 + k * self.threads * self.vec < n:
                    cute.copy(atom_out, rO[None, k], gO[None, k])

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, mSlots: cute.Tensor, max_spin: cutlass.Int32,
                 stream):
        m = cute.size(mX, mode=[0])
        n = cute.size(mX, mode=[1])
        c = (n + self.chunk - 1) // self.chunk
        units = m * c
        grid = cutlass.min(units, (self.grid_cap // c) * c)
        self.kernel(mX, mO, mSlots, c, units, max_spin).launch(
            grid=(grid, 1, 1), block=(self.threads, 1, 1), stream=stream, cooperative=True,
            min_blocks_per_mp=BLOCKS_PER_SM,
            # a carveout stated here (in percent) keeps the compile free of device queries; with
            # prefetch all of it as shared memory (two CTAs x one chunk), else L1 preferred
            preferred_smem_carveout=100 if self.prefetch else 0)


def plan_for(m: int, n: int, vec: int) -> dict:
    """Chunking and grid for an m x n case at access width vec; ValueError when not taken."""
    if n < MIN_N:
        raise ValueError(f"x: rows of {n} elements fit one CTA; the split kernel takes N >= {MIN_N} "
                         f"(use cute:softmax)")
    t = threads()
    k = VALUES // (t * vec)
    chunk = t * k * vec
    c = -(-n // chunk)
    cap = num_sms() * BLOCKS_PER_SM
    if c > cap:
        raise ValueError(f"x: a row of {n} elements needs {c} co-resident CTAs of {chunk} columns; "
                         f"the GPU holds {cap}")
    if m * c >= 2 ** 31:
        raise ValueError(f"x: {m} rows x {c} chunks is over the 2^31-1 work units this kernel counts")
    return {"vec": vec, "threads": t, "k": k, "chunk": chunk, "parts": c, "grid_cap": cap,
            "grid": min(m * c, cap // c * c), "blocks_per_sm": BLOCKS_PER_SM,
            "prefetch": prefetch() and vec > 1}


def plan(x: torch.Tensor, out: torch.Tensor) -> dict:
    return plan_for(x.shape[0], x.shape[1], access_width(x, out))


def _compile(in_dtype, out_dtype, p: dict):
    key = ("softmax_split", str(in_dtype), str(out_dtype), p["vec"], p["threads"], p["k"], p["grid_cap"],
           p["prefetch"])
    c = cached(key)
    if c is not None:
        return c
    from cutlass.cute.runtime import make_fake_compact_tensor

    vec = p["vec"]
    slots = make_fake_compact_tensor(cutlass.Int64, (cute.sym_int32(),), assumed_align=8)
    return compile_kernel(key, SoftmaxSplit(p["threads"], p["k"], vec, p["grid_cap"], p["prefetch"]),
                          *fake_rows(in_dtype, out_dtype, vec), slots, cutlass.Int32(MAX_SPIN), fake_stream())


_SLOTS: dict = {}


def _slots(device: torch.device, units: int) -> torch.Tensor:
    """The slot words of one launch (grown on demand, kept per device; zeroed before each launch on
    the launch stream). Concurrent launches on two streams would share them: one stream only."""
    buf = _SLOTS.get(device)
    if buf is None or buf.numel() < units:
        buf = torch.zeros(max(units, 1 << 16), dtype=torch.int64, device=device)
        _SLOTS[device] = buf
    return buf


def prepare_softmax_split(x, out, max_spin: int = -1):
    """Validate, plan, compile (cached); returns (launch, compiled, plan). ``max_spin``: polls
    before a waiting CTA gives up and writes NaN (-1: MAX_SPIN)."""
    validate(x, out)
    if not isinstance(max_spin, int) or max_spin < -1:
        raise ValueError(f"max_spin: must be -1 (default {MAX_SPIN} polls) or an int >= 0, got {max_spin!r}")
    p = plan(x, out)
    comp = _compile(x.dtype, out.dtype, p)
    vec = p["vec"]
    units = x.shape[0] * p["parts"]
    slots = _slots(x.device, units)
    view = slots[:units]
    args = (to_cute(x, max(x.element_size(), vec * x.element_size())),
            to_cute(out, max(out.element_size(), vec * out.element_size())), to_cute(view, 8))
    spin = MAX_SPIN if max_spin < 0 else max_spin
    fn = comp.fn

    def launch():
        view.zero_()                                  # torch's current stream = the launch stream
        fn(*args, spin, *stream_args())

    return launch, comp, p


def softmax_split(x, out=None, max_spin: int = -1):
    """Row softmax of a 2-D CUDA tensor with long rows (fp32 math, output in x's dtype)."""
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    launch, _, _ = prepare_softmax_split(x, out, max_spin)
    launch()
    return out


def compile_only(dtype: torch.dtype, n: int, vec: int | None = None, m: int = 8192):
    """Compile the kernel a row of n elements would use, for sm_90a, without a GPU."""
    es = torch.empty((), dtype=dtype).element_size()
    if vec is None:
        vec = 16 // es if (n * es) % 16 == 0 else 1
    p = plan_for(m, n, vec)
    return _compile(dtype, dtype, p), p
