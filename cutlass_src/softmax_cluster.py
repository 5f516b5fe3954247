"""softmax, a row over a thread-block cluster of C >= 2 CTAs, each CTA's share held in its
REGISTERS, the partial (max, sum) pairs exchanged through distributed shared memory
(cute:softmax_cluster; not yet run on a GPU, no default reaches it).

Beside ``softmax_smem.py`` (each CTA's slice staged raw in shared memory by bulk copies, two
passes over it, exponentials computed twice): here every value is read once into registers and
exponentiated once - the mechanisms of quack-kernels' CuTe softmax (256 threads, up to 64 values
a thread, clusters up to 16), written anew on this layer's 16-byte row access at any alignment.

The block kernel (``softmax_block.py``) holds a whole row in one CTA's registers; this one spreads
the row over C CTAs of a cluster (C up to 16: the DSL's launch allows non-portable sizes). The
row is read as 16-byte vectors from the 16-byte boundary at or before its first element
(``softmax_base``: any alignment keeps 128-bit accesses). Thread t of cluster rank r holds vectors
(k*C + r)*T + t, k < K - a warp's accesses adjacent, the C ranks' shares of a row equal (every
rank touches the row, however short the last step).

1. Load: every vector of the thread issued before the first use; with ``stage`` by ``cp.async``
   into the thread's own slots of shared memory (no registers held while in flight; the thread
   reads back only what it copied, so no CTA barrier), else straight into registers.
2. One exponential per element: the thread's max m_t, e = exp(x - m_t) kept in fp32 registers,
   s_t = sum e. The exponent is (x - m_t) * log2(e), never x * log2(e) - m_t * log2(e): ptxas
   fuses the latter into an fma that rounds m_t * log2(e) once per thread, an error of up to half
   an ulp of |m_t| * 1.44 (5e-4 at |x| ~ 1e4) that differs between threads and so survives the
   normalisation (a 3e-4 relative error on fp32 rows of large values; the tolerance is 1e-4). Warp butterflies merge (m, s) pairs; lane 0 publishes its warp's pair as one 64-bit
   word in shared memory.
3. A cluster barrier (release / acquire) makes all C x W words visible;
   every warp reads them all (``mapa`` + ``ld.shared::cluster``), merges them in a fixed order and
   a fixed butterfly, so every CTA gets the same (M, S). A second cluster barrier, arrived here
   (relaxed: the merge consumed the words) and waited at the end, keeps each CTA's shared memory
   alive until its peers have read it.
4. out = e * exp(m_t - M) / S, from the registers (16-byte stores where the output row has the
   input's phase). A thread whose values are all -inf (past the row end) contributes nothing; a
   row of only -inf gives NaN, as torch.

One read and one write of HBM per element. T, K, C, V, ``stage`` are compile-time (from N); M, N,
strides and alignment are run-time.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync
from cutlass.cutlass_dsl import T as IR, dsl_user_op
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, fake_stream, stream_args
from .softmax_base import LOG2E, fake_rows, load_row, row_args, row_vectors, store_row, validate
from .softmax_split import merge, pack_pair, unpack_pair


@dsl_user_op
def load_peer_f32(local: cute.Tensor, index: int, peer_rank, *, loc=None, ip=None) -> cutlass.Float32:
    """``local[index]`` as held by CTA ``peer_rank`` of this cluster (``mapa`` + a cluster load)."""
    remote = cute.arch.map_dsmem_ptr(local.iterator + index, peer_rank, loc=loc, ip=ip)
    return cutlass.Float32(llvm.load(IR.f32(), remote.to_llvm_ptr(loc=loc, ip=ip), loc=loc, ip=ip))


@dsl_user_op
def load_peer_i64(local: cute.Tensor, index, peer_rank, *, loc=None, ip=None) -> cutlass.Int64:
    """The 64-bit word ``local[index]`` as held by CTA ``peer_rank`` of this cluster."""
    remote = cute.arch.map_dsmem_ptr(local.iterator + index, peer_rank, loc=loc, ip=ip)
    return cutlass.Int64(llvm.load(IR.i64(), remote.to_llvm_ptr(loc=loc, ip=ip), loc=loc, ip=ip))


class SoftmaxCluster:
    def __init__(self, threads: int, k: int, vec: int, cluster: int, stage: bool = True):
        if cluster < 2 or cluster > 16 or cluster & (cluster - 1):
            raise ValueError(f"cluster: the cluster kernel takes C = 2, 4, 8 or 16 CTAs a row, got {cluster} "
                             f"(a CTA a row is softmax_block or softmax_smem)")
        self.threads, self.k, self.vec, self.cluster, self.stage = threads, k, vec, cluster, stage
        self.num_warps = threads // 32

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        T, K, V, C, W = self.threads, self.k, self.vec, self.cluster, self.num_warps
        n = cute.size(mX, mode=[1])
        row = bidx // C
        rank = cute.arch.block_idx_in_cluster()
        smem = SmemAllocator()
        words = smem.allocate_tensor(cutlass.Int64, cute.make_layout(W), byte_alignment=16)

        vx, phase = row_vectors(mX[row, None], V)
        vo, phase_o = row_vectors(mO[row, None], V)
        first = rank * T + tidx                           # this thread's first vector
        step = C * T                                      # between its vectors
        col0 = first * V - phase
        rX = cute.make_rmem_tensor(cute.make_layout((V, K)), mX.element_type)
        if cutlass.const_expr(self.stage):
            sX = smem.allocate_tensor(mX.element_type, cute.make_layout((V, K * T)), byte_alignment=128)
            g2s = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), mX.element_type, num_bits_per_copy=mX.element_type.width * V)
            for k in cutlass.range_constexpr(K):
                c0 = col0 + k * step * V
                if c0 < n and c0 + V > 0:
                    cute.copy(g2s, vx[None, first + k * step], sX[None, k * T + tidx])
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(0)              # this thread's own copies have landed
            load_row(sX, tidx, T, col0, step * V, n, rX)
        else:
            load_row(vx, first, step, col0, step * V, n, rX)

        # one exponential per element, relative to the thread's own max
        x = rX.load().to(cutlass.Float32)
        m_t = x.reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0)
        shift = m_t
        if m_t == -cutlass.Float32.inf:
            shift = cutlass.Float32(0.0)                  # all -inf: e = 0, no (-inf) - (-inf)
        e = cute.math.exp2((x - shift) * LOG2E, fastmath=True)   # not x*L - m*L: see below
        m, s = m_t, e.reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
        for off in cutlass.range_constexpr(5):            # the warp's pairs
            m, s = merge(m, s, cute.arch.shuffle_sync_bfly(m, 16 >> off), cute.arch.shuffle_sync_bfly(s, 16 >> off))
        warp = cute.arch.warp_idx()
        lane = cute.arch.lane_idx()
        if lane == 0:
            words[warp] = pack_pair(m, s)
        cute.arch.cluster_arrive()                        # release: our words are written
        cute.arch.cluster_wait()                          # acquire: every peer's are

        # every warp merges all C x W words: lane j takes words j, j + 32, ... (rank-major)
        g_max = cutlass.Float32(-cutlass.Float32.inf)
        g_sum = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr((C * W + 31) // 32):
            idx = lane + i * 32
            if idx < C * W:
                pm, ps = unpack_pair(load_peer_i64(words, idx % W, idx // W))
                g_max, g_sum = merge(g_max, g_sum, pm, ps)
        for off in cutlass.range_constexpr(5):
            g_max, g_sum = merge(g_max, g_sum, cute.arch.shuffle_sync_bfly(g_max, 16 >> off),
                                 cute.arch.shuffle_sync_bfly(g_sum, 16 >> off))
        cute.arch.cluster_arrive_relaxed()                # peers may leave once we have read them
                                                          # (values consumed above: no release)

        scale = cutlass.Float32(0.0)
        if m_t != -cutlass.Float32.inf:
            scale = cute.math.exp2((m_t - g_max) * LOG2E, fastmath=True)
        scale = scale * (cutlass.Float32(1.0) / g_sum)     # a row of only -inf: 0 * inf = NaN
        rO = cute.make_rmem_tensor(cute.make_layout((V, K)), mO.element_type)
        rO.store((e * scale).to(mO.element_type))
        store_row(mO[row, None], vo, phase_o == phase, first, step, col0, n, rO)
        cute.arch.cluster_wait()

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream):
        m = cute.size(mX, mode=[0])
        self.kernel(mX, mO).launch(grid=(m * self.cluster, 1, 1), block=(self.threads, 1, 1),
                                   cluster=(self.cluster, 1, 1), stream=stream)


def compile_cluster(dtype, p: dict):
    """Compile (cached) for a plan {vec, threads, k, cluster >= 2, stage}."""
    key = ("softmax_cluster", str(dtype), p["vec"], p["threads"], p["k"], p["cluster"], p.get("stage", True))
    c = cached(key)
    if c is not None:
        return c
    return compile_kernel(key, SoftmaxCluster(p["threads"], p["k"], p["vec"], p["cluster"], p.get("stage", True)),
                          *fake_rows(dtype), fake_stream())


def prepare_softmax_cluster(x, out, plan: dict):
    """Validate, compile (cached) the plan's kernel; returns (launch, compiled, plan)."""
    validate(x, out)
    v = plan["vec"]
    es = x.element_size()
    aligned = x.data_ptr() % 16 == 0 and (x.shape[0] == 1 or x.stride(0) * es % 16 == 0)
    count = -(-(x.shape[1] + (0 if aligned else v - 1)) // v)   # vectors a row of x may touch
    if count > plan["k"] * plan["cluster"] * plan["threads"]:
        raise ValueError(f"N={x.shape[1]}: {count} vectors a row are more than the plan's cluster holds "
                         f"({plan['cluster']} x {plan['threads']} threads x {plan['k']})")
    if x.shape[0] * plan["cluster"] >= 2 ** 31:
        raise ValueError(f"x: {x.shape[0]} rows x {plan['cluster']} CTAs is over the 2^31-1 CTAs of a grid")
    comp = compile_cluster(x.dtype, plan)
    args = row_args(x, out)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp, plan
