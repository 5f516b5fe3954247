"""softmax in the CuTe DSL: a row in registers, warp + block reductions, and a cluster (DSMEM)
reduction for rows longer than one CTA can hold.

One row is split over a cluster of ``C`` CTAs (``C`` = 1 for rows up to 64K fp32 values); CTA
rank ``r`` owns columns ``[r*CHUNK, (r+1)*CHUNK)`` with ``CHUNK = THREADS * K * VEC``. Thread
``t`` loads ``K`` vectors of ``VEC`` contiguous elements (16 bytes when the rows are 16-byte
aligned) at ``(k*THREADS + t)*VEC``: coalesced 128-bit loads, all issued before the first use.
Out-of-bounds lanes are filled with -inf, so they drop out of the max and add exp(-inf) = 0 to the
sum. Then, in fp32:

1. thread max -> warp max (butterfly shuffles) -> block max (one value per warp in shared memory);
2. thread sum of exp(x - max) -> warp -> block sum;
3. with ``C`` > 1 each CTA publishes its (max, sum) in its shared memory, a cluster barrier
   (release/acquire) makes them visible, and every CTA reads all ``C`` pairs through distributed
   shared memory (``mapa`` + ``ld.shared::cluster``) and combines them as
   ``M = max m_i``, ``S = sum s_i * exp(m_i - M)``; a second cluster barrier keeps each CTA's
   shared memory alive until every peer has read it;
4. out = exp(x - M) / S, converted to the output type, 128-bit stores.

The row is read once and written once (2MN elements of traffic) at every N. THREADS, K, VEC and C
are compile-time constants chosen from N; M, N and both row strides are symbolic, so one compile
serves every shape of a bucket.
"""
from __future__ import annotations

import math
import os

import cutlass
import cutlass.cute as cute
import torch
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass.memory import SmemAllocator

from . import align_of, cached, compile_kernel, cutlass_dtype, fake_stream, stream_args, to_cute

LOG2E = 1.4426950408889634
MAX_PER_THREAD = 32      # fp32 values a thread keeps in registers (64 for the largest rows)
MAX_CLUSTER = 8          # portable cluster size


@dsl_user_op
def load_peer_f32(local: cute.Tensor, index: int, peer_rank, *, loc=None, ip=None) -> cutlass.Float32:
    """``local[index]`` as held by CTA ``peer_rank`` of this cluster: ``mapa`` turns our
    shared-memory address into the peer's, and an ``ld.shared::cluster`` reads it."""
    remote = cute.arch.map_dsmem_ptr(local.iterator + index, peer_rank, loc=loc, ip=ip)
    val = llvm.load(T.f32(), remote.to_llvm_ptr(loc=loc, ip=ip), loc=loc, ip=ip)
    return cutlass.Float32(val)


@cute.jit
def block_reduce(val: cutlass.Float32, op, red: cute.Tensor, num_warps: cutlass.Constexpr):
    """Warp butterfly reduction, then one value per warp through shared memory."""
    warp = cute.arch.warp_idx()
    lane = cute.arch.lane_idx()
    val = cute.arch.warp_reduction(val, op)
    if cutlass.const_expr(num_warps > 1):
        if lane == 0:
            red[warp] = val
        cute.arch.barrier()
        val = red[0]
        for w in cutlass.range_constexpr(1, num_warps):
            val = op(val, red[w])
    return val


def vec_copy_atom(elem_type, vec: int):
    """Copy atom moving ``vec`` elements of ``elem_type`` per access (128 bits when vec * width
    is 128): register <-> global or shared memory."""
    return cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), elem_type, num_bits_per_copy=elem_type.width * vec)


def _fmax(a, b):
    return cute.arch.fmax(a, b)


def _add(a, b):
    return a + b


class Softmax:
    def __init__(self, threads: int, k: int, vec: int, cluster: int):
        self.threads, self.k, self.vec, self.cluster = threads, k, vec, cluster
        self.chunk = threads * k * vec
        self.num_warps = threads // 32

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        n = cute.size(mX, mode=[1])
        row = bidx // self.cluster
        rank = 0
        if cutlass.const_expr(self.cluster > 1):
            rank = cute.arch.block_idx_in_cluster()

        smem = SmemAllocator()
        red_max = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        red_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        part = smem.allocate_tensor(cutlass.Float32, cute.make_layout(2), byte_alignment=16)

        # this thread's (VEC, K) slice of the row chunk
        tv = cute.make_layout((self.vec, self.threads, self.k),
                              stride=(1, self.vec, self.vec * self.threads))
        gX = cute.composition(cute.local_tile(mX[row, None], (self.chunk,), (rank,)), tv)[None, tidx, None]
        gO = cute.composition(cute.local_tile(mO[row, None], (self.chunk,), (rank,)), tv)[None, tidx, None]
        col0 = rank * self.chunk + tidx * self.vec

        atom_in = vec_copy_atom(mX.element_type, self.vec)
        atom_out = vec_copy_atom(mO.element_type, self.vec)
        rX = cute.make_rmem_tensor_like(gX)
        rX.fill(-cutlass.Float32.inf)
        for k in cutlass.range_constexpr(self.k):
            if col0 + k * self.threads * self.vec < n:
                cute.copy(atom_in, gX[None, k], rX[None, k])

        x = rX.load().to(cutlass.Float32)
        local_max = x.reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0)
        row_max = block_reduce(local_max, _fmax, red_max, self.num_warps)
        shift = row_max
        if row_max == -cutlass.Float32.inf:             # chunk entirely -inf / out of range
            shift = cutlass.Float32(0.0)
        # exp(x - max) as 2^((x - max)*log2 e): the subtraction first keeps it exact near the max
        e = cute.math.exp2((x - shift) * LOG2E, fastmath=True)
        local_sum = e.reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
        row_sum = block_reduce(local_sum, _add, red_sum, self.num_warps)

        scale = cutlass.Float32(1.0)
        if cutlass.const_expr(self.cluster > 1):
            # exchange (max, sum) with the peers through distributed shared memory
            if tidx == 0:
                part[0] = row_max
                part[1] = row_sum
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
            g_max = -cutlass.Float32.inf
            for r in cutlass.range_constexpr(self.cluster):
                g_max = cute.arch.fmax(g_max, load_peer_f32(part, 0, r))
            g_sum = cutlass.Float32(0.0)
            for r in cutlass.range_constexpr(self.cluster):
                pm = load_peer_f32(part, 0, r)
                if pm != -cutlass.Float32.inf:
                    g_sum = g_sum + load_peer_f32(part, 1, r) * cute.math.exp2((pm - g_max) * LOG2E, fastmath=True)
            cute.arch.cluster_arrive()                  # peers may now leave; we still wait below
            # our own exps were taken against `shift`; rescale them to the global max
            if row_max != -cutlass.Float32.inf:
                scale = cute.math.exp2((shift - g_max) * LOG2E, fastmath=True) / g_sum
        else:
            scale = cutlass.Float32(1.0) / row_sum

        rO = cute.make_rmem_tensor_like(gO)
        rO.store((e * scale).to(mO.element_type))
        for k in cutlass.range_constexpr(self.k):
            if col0 + k * self.threads * self.vec < n:
                cute.copy(atom_out, rO[None, k], gO[None, k])
        if cutlass.const_expr(self.cluster > 1):
            cute.arch.cluster_wait()

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream):
        m = cute.size(mX, mode=[0])
        self.kernel(mX, mO).launch(grid=(m * self.cluster, 1, 1), block=(self.threads, 1, 1),
                                   cluster=(self.cluster, 1, 1), stream=stream)


def config(n: int, vec: int) -> tuple[int, int, int] | None:
    """(THREADS, K, CLUSTER) for a row of n elements moved VEC at a time; None when too long.

    Fewest threads that keep <= 32 values per thread (128..1024 threads), then clusters of
    2..8 CTAs of 1024 threads; 64 values per thread only at the largest cluster."""
    vecs = -(-n // vec)
    for cluster in (1, 2, 4, 8):
        for threads in (32, 64, 128, 256, 512, 1024):
            if cluster > 1 and threads < 1024:
                continue
            if threads < 128 and vecs > threads:
                continue
            k = -(-vecs // (threads * cluster))
            kp = 1 << (k - 1).bit_length()            # round K up to a power of two: fewer compiles
            if kp * vec <= MAX_PER_THREAD:
                return threads, kp, cluster
            if cluster == MAX_CLUSTER and threads == 1024 and k * vec <= 2 * MAX_PER_THREAD:
                return threads, k, cluster
    return None


MAX_N = 1024 * 2 * MAX_PER_THREAD * MAX_CLUSTER

# -- long rows (cute:softmax_long): same kernel, 512-thread CTAs and clusters of up to 16 ---------
# A 1024-thread CTA holding 32-64 values per thread fills the SM's register file, so one CTA per
# SM: its loads, its reductions and cluster barriers, and its stores run back to back. At 512
# threads and <= 64 registers two CTAs (of two different rows) share an SM and one's reduction
# hides behind the other's loads; the row then needs twice the CTAs, i.e. clusters of 16
# (non-portable: the DSL sets CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED on its kernels).
LONG_THREADS = 512


def long_max_cluster() -> int:
    """``KL_CUTE_SOFTMAX_LONG_MAX_CLUSTER`` (default 16; 8 keeps to portable cluster sizes)."""
    return int(os.environ.get("KL_CUTE_SOFTMAX_LONG_MAX_CLUSTER", "16"))


def config_long(n: int, vec: int) -> tuple[int, int, int] | None:
    """(512, K, CLUSTER) for a row of n elements: <= 32 values per thread, 2..16 CTAs per row
    (64 values per thread only at the largest cluster); None when it would fit one CTA (the
    single-CTA kernels do that better) or not fit at all."""
    if n <= 1024 * MAX_PER_THREAD:
        return None
    vecs = -(-n // vec)
    top = long_max_cluster()
    for cluster in (2, 4, 8, 16):
        if cluster > top:
            break
        k = -(-vecs // (LONG_THREADS * cluster))
        kp = 1 << (k - 1).bit_length()
        if kp * vec <= MAX_PER_THREAD:
            return LONG_THREADS, kp, cluster
        if cluster == top and k * vec <= 2 * MAX_PER_THREAD:
            return LONG_THREADS, k, cluster
    return None


def max_n_long() -> int:
    return LONG_THREADS * 2 * MAX_PER_THREAD * long_max_cluster()


def access_width(x: torch.Tensor, out: torch.Tensor) -> int:
    """Elements per access: 16 bytes when both base pointers, both row strides and the row length
    are 16-byte multiples, else the widest power of two that divides them all."""
    es = x.element_size()
    align = align_of(x.data_ptr(), out.data_ptr(), x.stride(0) * es if x.shape[0] > 1 else 16,
                     out.stride(0) * out.element_size() if out.shape[0] > 1 else 16, x.shape[1] * es)
    return max(1, align // es)


def fake_rows(in_dtype, out_dtype, vec: int) -> list:
    """Fake [M, N] input and output tensors for a compile: M, N and both row strides symbolic (N
    and the strides divisible by ``vec``), rows ``vec`` elements aligned."""
    from cutlass.cute.runtime import make_fake_tensor

    m, n = cute.sym_int32(), cute.sym_int32(divisibility=vec)
    fakes = []
    for dt in (in_dtype, out_dtype):
        es = torch.empty((), dtype=dt).element_size()
        ld = cute.sym_int64(divisibility=vec)
        fakes.append(make_fake_tensor(cutlass_dtype(dt), (m, n), (ld, 1), assumed_align=max(es, vec * es)))
    return fakes


def plan(x: torch.Tensor, out: torch.Tensor, long: bool = False) -> dict:
    """Access width and (THREADS, K, CLUSTER) for these tensors; ValueError when unsupported.
    ``long``: the 512-thread, up-to-16-CTA cluster configuration (cute:softmax_long)."""
    n = x.shape[1]
    vec = access_width(x, out)
    if long:
        cfg = config_long(n, vec)
        if cfg is None:
            raise ValueError(f"x: rows of {n} elements do not take the long-row configuration "
                             f"({1024 * MAX_PER_THREAD} < N <= {max_n_long()}); use cute:softmax")
        return {"vec": vec, "threads": cfg[0], "k": cfg[1], "cluster": cfg[2]}
    cfg = config(n, vec)
    if cfg is None:
        raise ValueError(f"x: rows of {n} elements (access width {vec}) are longer than this "
                         f"kernel holds on chip ({MAX_CLUSTER} CTAs x 1024 threads x "
                         f"{2 * MAX_PER_THREAD} values)")
    threads, k, cluster = cfg
    return {"vec": vec, "threads": threads, "k": k, "cluster": cluster}


def _compile(in_dtype, out_dtype, p: dict):
    key = ("softmax", str(in_dtype), str(out_dtype), p["vec"], p["threads"], p["k"], p["cluster"])
    c = cached(key)
    if c is not None:
        return c
    vec = p["vec"]
    return compile_kernel(key, Softmax(p["threads"], p["k"], vec, p["cluster"]),
                          *fake_rows(in_dtype, out_dtype, vec), fake_stream())


def validate(x, out):
    for name, t in (("x", x), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
        if t.dim() != 2:
            raise ValueError(f"{name}: must be 2-D [M, N], got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{name}: dtype {t.dtype} is not float32, float16 or bfloat16")
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ValueError(f"{name}: the last dim must be contiguous (stride 1), got strides {t.stride()}")
        if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
            raise ValueError(f"{name}: row stride {t.stride(0)} is smaller than the row length {t.shape[1]}")
    if x.shape != out.shape:
        raise ValueError(f"out: shape {tuple(out.shape)} != x shape {tuple(x.shape)}")
    if x.device != out.device:
        raise ValueError(f"out: device {out.device} != x device {x.device}")
    if x.shape[0] * max(1, x.shape[1]) == 0:
        raise ValueError(f"x: empty tensor of shape {tuple(x.shape)}")


def prepare_softmax(x, out, long: bool = False):
    """Validate, plan, compile (cached); returns (launch, compiled, plan)."""
    validate(x, out)
    p = plan(x, out, long)
    comp = _compile(x.dtype, out.dtype, p)
    vec = p["vec"]
    args = (to_cute(x, max(x.element_size(), vec * x.element_size())),
            to_cute(out, max(out.element_size(), vec * out.element_size())))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp, p


def softmax(x, out=None):
    """Row softmax over the last dim of a 2-D CUDA tensor (fp32 math, output in x's dtype)."""
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    launch, _, _ = prepare_softmax(x, out)
    launch()
    return out


def compile_only(dtype: torch.dtype, n: int, vec: int | None = None, long: bool = False):
    """Compile the kernel a row of n elements would use, for sm_90a, without a GPU."""
    es = torch.empty((), dtype=dtype).element_size()
    if vec is None:
        vec = 16 // es if (n * es) % 16 == 0 else 1
    cfg = config_long(n, vec) if long else config(n, vec)
    if cfg is None:
        raise ValueError(f"n: {n} is longer than the supported maximum")
    p = {"vec": vec, "threads": cfg[0], "k": cfg[1], "cluster": cfg[2]}
    return _compile(dtype, dtype, p), p
