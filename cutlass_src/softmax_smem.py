"""softmax for long rows with the row staged in SHARED memory (cute:softmax_smem): a row per CTA,
or a row over a cluster of C CTAs, each CTA holding its slice of the row in dynamic shared memory.

Why: the register kernels (``softmax_block.py``, ``softmax_cluster.py``) hold ~32 values a thread at ~2
registers a value, so two CTAs of 512 threads fill an SM with 64 KB of bf16 in flight, and none
while a CTA reduces and stores. Here the row's bytes sit in shared memory (up to 227 KB a CTA),
copied there by the bulk-copy engine (``cp.async.bulk``, no registers held), so an SM holds one
or two rows' slices (a 100 KB bf16 row: two CTAs, 200 KB in flight) and the registers stay few.

One CTA (cluster rank r of C) of row ``blockIdx.x / C``:
1. The row is read as the 16-byte vectors that tile it from the 16-byte boundary at or before its
   first element (``softmax_base.row_vectors``: any alignment keeps 16-byte copies; bytes outside
   the row lie in the row's first and last 16-byte granules, so inside the allocation). Of its
   ``count`` vectors, rank r owns [r*P, min(count, (r+1)*P)), P = ceil(count / C): ``nv`` vectors,
   copied by thread 0 as CHUNKS bulk copies, chunk k completing on its own mbarrier.
2. Pass 1, chunk by chunk as the chunks land: each thread keeps a running (max, sum of exp(x -
   max)) over its vectors (j = tidx, tidx + T, ...; columns outside [0, N) count as -inf); then
   warp butterflies and one pair per warp in shared memory give the CTA's pair.
3. (C > 1) each CTA publishes its pair in shared memory; a cluster barrier makes the pairs
   visible; every thread reads all C through DSMEM (``mapa`` + ``ld.shared::cluster``) and merges
   them in rank order; a second barrier, arrived here and waited at the end, keeps every CTA's
   shared memory alive until its peers have read it.
4. Pass 2 from shared memory: exp(x - M) / S, 16-byte stores where the output row has the input
   row's 16-byte phase and the vector lies wholly in the row, element stores otherwise.

One read and one write of HBM per element. T, C and the element type are compile-time; M, N,
strides, alignment and the shared-memory size (the launch's dynamic size, from the plan's slice
capacity) are run-time, so one compile serves every row length of a (dtype, T, C).
Shared memory: HEADER bytes (mbarriers, reduction slots, the published pair), then the slice.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from . import cached, compile_kernel, fake_stream, stream_args
from .softmax_base import LOG2E, fake_rows, row_args, row_vectors, validate, vec_copy_atom
from .softmax_cluster import load_peer_f32
from .softmax_split import bulk_g2s, merge

CHUNKS = 8                 # bulk copies (and mbarriers) per slice: pass 1 starts on the first
HEADER = 512               # bytes before the slice: mbarriers, reduction slots, the pair
_BARS, _RED_MAX, _RED_SUM, _PAIR = 0, 64, 192, 320     # byte offsets inside the header
ALIGN_SLACK = 128          # the dynamic base is aligned up to 128 bytes: room for the shift


def smem_bytes(cap_vectors: int) -> int:
    """Dynamic shared memory of a launch whose slices hold up to ``cap_vectors`` 16-byte vectors."""
    return ALIGN_SLACK + HEADER + 16 * cap_vectors


class SoftmaxSmem:
    def __init__(self, threads: int, vec: int, cluster: int = 1):
        self.threads, self.vec, self.cluster = threads, vec, cluster
        self.num_warps = threads // 32

    @cute.jit
    def vector(self, sbuf: cute.Tensor, j, c, n, rX: cute.Tensor):
        """rX = slice vector j (its columns [c, c + V)) from shared memory, as fp32-convertible raw
        values; -inf where a column lies outside [0, n) (only the row's first and last vectors)."""
        cute.copy(vec_copy_atom(sbuf.element_type, self.vec), sbuf[None, j], rX)
        if c < 0 or c + self.vec > n:
            for e in cutlass.range_constexpr(self.vec):
                if c + e < 0 or c + e >= n:
                    rX[e] = rX.element_type(-cutlass.Float32.inf)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        V, T, C = self.vec, self.threads, self.cluster
        n = cute.size(mX, mode=[1])
        row = bidx // C
        rank = 0
        if cutlass.const_expr(C > 1):
            rank = cute.arch.block_idx_in_cluster()

        # the header and the slice, carved by hand from the dynamic shared memory (its size is a
        # launch argument: the static allocator would fix it at compile time)
        base = cute.arch.get_dyn_smem(cutlass.Int8, alignment=128)
        bars = cute.recast_ptr(base + _BARS, dtype=cutlass.Int64)
        red_max = cute.make_tensor(cute.recast_ptr(base + _RED_MAX, dtype=cutlass.Float32), cute.make_layout(32))
        red_sum = cute.make_tensor(cute.recast_ptr(base + _RED_SUM, dtype=cutlass.Float32), cute.make_layout(32))
        pair = cute.make_tensor(cute.recast_ptr(base + _PAIR, dtype=cutlass.Float32), cute.make_layout(2))

        vx, phase = row_vectors(mX[row, None], V)
        count = cute.size(vx, mode=[1])
        per_rank = (count + C - 1) // C
        v0 = rank * per_rank                              # the slice's first vector of the row
        nv = cutlass.max(cutlass.min(count - v0, per_rank), 0)
        col0 = v0 * V - phase                             # the column of the slice's element 0
        sbuf = cute.make_tensor(cute.recast_ptr(base + HEADER, dtype=mX.element_type),
                                cute.make_layout((V, cutlass.max(nv, 1))))
        per = (nv + CHUNKS - 1) // CHUNKS                 # vectors per chunk (the last may be short)

        if tidx == 0:
            for k in cutlass.range_constexpr(CHUNKS):
                cute.arch.mbarrier_init(bars + k, 1)
            cute.arch.mbarrier_init_fence()               # visible to the bulk-copy engine
            for k in cutlass.range_constexpr(CHUNKS):
                a = k * per
                b = cutlass.min(nv, a + per)
                if a < b:
                    cute.arch.mbarrier_arrive_and_expect_tx(bars + k, (b - a) * 16)
                    bulk_g2s(sbuf[None, a].iterator, vx[None, v0 + a].iterator, (b - a) * 16, bars + k)
        cute.arch.barrier()                               # the mbarriers are initialised before any wait

        # pass 1: running (max, sum) over this thread's vectors, chunk by chunk as they land
        rX = cute.make_rmem_tensor(cute.make_layout(V), mX.element_type)
        m = cutlass.Float32(-cutlass.Float32.inf)
        s = cutlass.Float32(0.0)
        for k in cutlass.range_constexpr(CHUNKS):
            a = k * per
            b = cutlass.min(nv, a + per)
            if a < b:
                cute.arch.mbarrier_wait(bars + k, 0)      # chunk k has landed (phase 0 completed)
                for j in cutlass.range(a + tidx, b, T, unroll=2):
                    self.vector(sbuf, j, col0 + j * V, n, rX)
                    tm = rX[0].to(cutlass.Float32)
                    for e in cutlass.range_constexpr(1, V):
                        tm = cute.arch.fmax(tm, rX[e].to(cutlass.Float32))
                    if tm > m:                            # from m = -inf: s = 0 * 0 = 0
                        s = s * cute.math.exp2((m - tm) * LOG2E, fastmath=True)
                        m = tm
                    if m != -cutlass.Float32.inf:         # else every value so far is -inf
                        ml = m * LOG2E
                        for e in cutlass.range_constexpr(V):
                            s = s + cute.math.exp2(rX[e].to(cutlass.Float32) * LOG2E - ml, fastmath=True)

        # the CTA's pair: warp butterflies (fixed order), then one pair per warp in shared memory
        for off in cutlass.range_constexpr(5):
            om = cute.arch.shuffle_sync_bfly(m, 16 >> off)
            os_ = cute.arch.shuffle_sync_bfly(s, 16 >> off)
            m, s = merge(m, s, om, os_)
        warp = cute.arch.warp_idx()
        if cute.arch.lane_idx() == 0:
            red_max[warp] = m
            red_sum[warp] = s
        cute.arch.barrier()
        m, s = red_max[0], red_sum[0]
        for w in cutlass.range_constexpr(1, self.num_warps):
            m, s = merge(m, s, red_max[w], red_sum[w])

        if cutlass.const_expr(C > 1):
            if tidx == 0:
                pair[0] = m
                pair[1] = s
            cute.arch.cluster_arrive()                    # release: our pair is written
            cute.arch.cluster_wait()                      # acquire: every peer's pair is
            g_max = cutlass.Float32(-cutlass.Float32.inf)
            g_sum = cutlass.Float32(0.0)
            for r in cutlass.range_constexpr(C):          # rank order: every CTA gets the same pair
                g_max, g_sum = merge(g_max, g_sum, load_peer_f32(pair, 0, r), load_peer_f32(pair, 1, r))
            cute.arch.cluster_arrive()                    # peers may leave once we have read them
            m, s = g_max, g_sum

        # pass 2: exp(x - M) / S from shared memory (a row of only -inf: NaN, as torch)
        inv = cutlass.Float32(1.0) / s
        ml = m * LOG2E
        vo, phase_o = row_vectors(mO[row, None], V)
        out_row = mO[row, None]
        same_phase = phase_o == phase
        store = vec_copy_atom(mO.element_type, V)
        rO = cute.make_rmem_tensor(cute.make_layout(V), mO.element_type)
        for j in cutlass.range(tidx, nv, T, unroll=2):
            c = col0 + j * V
            cute.copy(vec_copy_atom(sbuf.element_type, V), sbuf[None, j], rX)
            for e in cutlass.range_constexpr(V):
                rO[e] = (cute.math.exp2(rX[e].to(cutlass.Float32) * LOG2E - ml, fastmath=True) * inv).to(
                    mO.element_type)
            if same_phase and c >= 0 and c + V <= n:
                cute.copy(store, rO, vo[None, v0 + j])
            else:
                for e in cutlass.range_constexpr(V):
                    if c + e >= 0 and c + e < n:
                        out_row[c + e] = rO[e]
        if cutlass.const_expr(C > 1):
            cute.arch.cluster_wait()

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, smem: cutlass.Int32, stream):
        m = cute.size(mX, mode=[0])
        # carveout 100 %: the whole 228 KB an SM as shared memory, so 2-3 slices share an SM (stated
        # here, the compile needs no device query)
        if cutlass.const_expr(self.cluster > 1):
            self.kernel(mX, mO).launch(grid=(m * self.cluster, 1, 1), block=(self.threads, 1, 1),
                                       cluster=(self.cluster, 1, 1), smem=smem, stream=stream,
                                       preferred_smem_carveout=100)
        else:
            self.kernel(mX, mO).launch(grid=(m, 1, 1), block=(self.threads, 1, 1), smem=smem, stream=stream,
                                       preferred_smem_carveout=100)


def compile_smem(dtype, p: dict):
    """Compile (cached) for a plan {vec, threads, cluster, cap}: one compile per (dtype, T, C); the
    slice capacity is the launch's dynamic shared-memory size, a run-time argument."""
    key = ("softmax_smem", str(dtype), p["vec"], p["threads"], p["cluster"])
    c = cached(key)
    if c is not None:
        return c
    return compile_kernel(key, SoftmaxSmem(p["threads"], p["vec"], p["cluster"]), *fake_rows(dtype),
                          cutlass.Int32(smem_bytes(p["cap"])), fake_stream())


def prepare_softmax_smem(x, out, plan: dict):
    """Validate, compile (cached) the plan's kernel; returns (launch, compiled, plan)."""
    validate(x, out)
    v = plan["vec"]
    count = -(-(x.shape[1] + v - 1) // v)                 # vectors a row may touch, any alignment
    if -(-count // plan["cluster"]) > plan["cap"]:
        raise ValueError(f"N={x.shape[1]}: a slice of {-(-count // plan['cluster'])} vectors is over the "
                         f"plan's capacity of {plan['cap']}")
    if x.shape[0] * plan["cluster"] >= 2 ** 31:
        raise ValueError(f"x: {x.shape[0]} rows x {plan['cluster']} CTAs is over the 2^31-1 CTAs of a grid")
    comp = compile_smem(x.dtype, plan)
    args = (*row_args(x, out), smem_bytes(plan["cap"]))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp, plan
