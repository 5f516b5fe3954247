"""softmax, a row over a thread-block cluster of C CTAs, each CTA's share in its registers, (max,
sum) exchanged through distributed shared memory (cute:softmax_cluster).

The block kernel (``softmax_block.py``) holds a whole row in one CTA's registers; this one spreads
the row over C CTAs of a cluster. The row is read as 16-byte vectors from the 16-byte boundary at
or before its first element (``softmax_base``: any alignment keeps 128-bit accesses). Thread t of
cluster rank r holds vectors (k*C + r)*T + t, k < K - a warp's loads adjacent, the C ranks' shares
of a row equal - all loaded before the first use. Then in fp32: the CTA's max and sum of
exp(x - max) (warp butterflies, one value per warp in shared memory); each CTA publishes its pair
in shared memory, a cluster barrier makes the pairs visible, every CTA reads all C through DSMEM
(``mapa`` + ``ld.shared::cluster``) and merges them, and a second barrier keeps each CTA's shared
memory alive until every peer has read it. Last, out = exp(x - M) / S from the raw values still in
registers. One read and one write per element. T, K, C are compile-time (from N); M, N, strides
and alignment are run-time.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T as IR, dsl_user_op
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, fake_stream, stream_args
from .softmax_base import LOG2E, fake_rows, load_row, normalise, row_args, row_stats, row_vectors, store_row, validate


@dsl_user_op
def load_peer_f32(local: cute.Tensor, index: int, peer_rank, *, loc=None, ip=None) -> cutlass.Float32:
    """``local[index]`` as held by CTA ``peer_rank`` of this cluster (``mapa`` + a cluster load)."""
    remote = cute.arch.map_dsmem_ptr(local.iterator + index, peer_rank, loc=loc, ip=ip)
    return cutlass.Float32(llvm.load(IR.f32(), remote.to_llvm_ptr(loc=loc, ip=ip), loc=loc, ip=ip))


class SoftmaxCluster:
    def __init__(self, threads: int, k: int, vec: int, cluster: int):
        if cluster < 2:
            raise ValueError(f"cluster: the cluster kernel takes C >= 2 CTAs a row, got {cluster} "
                             f"(a CTA a row is softmax_block)")
        self.threads, self.k, self.vec, self.cluster = threads, k, vec, cluster

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        n = cute.size(mX, mode=[1])
        row = bidx // self.cluster
        rank = cute.arch.block_idx_in_cluster()
        smem = SmemAllocator()
        red_max = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        red_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        pair = smem.allocate_tensor(cutlass.Float32, cute.make_layout(2), byte_alignment=16)

        vx, phase = row_vectors(mX[row, None], self.vec)
        vo, phase_o = row_vectors(mO[row, None], self.vec)
        first = rank * self.threads + tidx                 # this thread's first vector
        step = self.cluster * self.threads                   # between its vectors
        col0 = first * self.vec - phase
        rX = cute.make_rmem_tensor(cute.make_layout((self.vec, self.k)), mX.element_type)
        load_row(vx, first, step, col0, step * self.vec, n, rX)
        m, s = row_stats(rX, red_max, red_sum, self.threads // 32)

        if tidx == 0:
            pair[0] = m
            pair[1] = s
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()
        g_max = -cutlass.Float32.inf
        for r in cutlass.range_constexpr(self.cluster):
            g_max = cute.arch.fmax(g_max, load_peer_f32(pair, 0, r))
        g_sum = cutlass.Float32(0.0)
        for r in cutlass.range_constexpr(self.cluster):
            pm = load_peer_f32(pair, 0, r)
            if pm != -cutlass.Float32.inf:
                g_sum = g_sum + load_peer_f32(pair, 1, r) * cute.math.exp2((pm - g_max) * LOG2E, fastmath=True)
        cute.arch.cluster_arrive()                          # peers may leave once we have read them

        # a row of only -inf: (-inf) - (-inf) = NaN, and NaN is torch's answer too
        rO = cute.make_rmem_tensor(cute.make_layout((self.vec, self.k)), mO.element_type)
        normalise(rX, g_max, cutlass.Float32(1.0) / g_sum, rO)
        store_row(mO[row, None], vo, phase_o == phase, first, step, col0, n, rO)
        cute.arch.cluster_wait()

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream):
        m = cute.size(mX, mode=[0])
        self.kernel(mX, mO).launch(grid=(m * self.cluster, 1, 1), block=(self.threads, 1, 1),
                                   cluster=(self.cluster, 1, 1), stream=stream)


def compile_cluster(dtype, p: dict):
    """Compile (cached) for a plan {vec, threads, k, cluster >= 2}."""
    key = ("softmax_cluster", str(dtype), p["vec"], p["threads"], p["k"], p["cluster"])
    c = cached(key)
    if c is not None:
        return c
    return compile_kernel(key, SoftmaxCluster(p["threads"], p["k"], p["vec"], p["cluster"]),
                          *fake_rows(dtype), fake_stream())


def prepare_softmax_cluster(x, out, plan: dict):
    """Validate, compile (cached) the plan's kernel; returns (launch, compiled, plan)."""
    validate(x, out)
    comp = compile_cluster(x.dtype, plan)
    args = row_args(x, out)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp, plan
