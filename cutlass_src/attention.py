"""Attention forward in the CuTe DSL, the teaching twin (cute:attention_simple).

    O = softmax(Q K^T / sqrt(D) + causal mask) V      Q [B, Hq, Sq, D], K / V [B, Hkv, Sk, D]

One CTA of four warps per 64 query rows of one head (grid: query blocks x Hq x B); query head h
reads K / V head h // (Hq / Hkv). The Q tile is copied into shared memory once; then for each
block of 64 keys:

1. every thread copies its share of the K and V tiles into shared memory one element at a time,
   zero outside the tensors (any length, any row stride);
2. S = Q K^T on tensor cores (mma.sync m16n8k16, fp32 accumulators; each warp owns 16 query rows,
   each thread two of them, a row shared by the four threads of a quad);
3. the mask (key past Sk; causal: key j is seen by query i iff j <= i + Sk - Sq, bottom-right
   aligned), the online softmax in fp32 (row max over the quad by shuffles, the running output
   and sum rescaled by exp2 of the max's change; the scale folded into the exp2's argument);
4. P rounded to the input dtype and written to shared memory, read back as the A operand of
   O += P V (V's tile read transposed from the same shared memory).

At the end O / sum is stored, element by element, for the rows inside Sq. Causal key blocks past
the last query's diagonal are never visited. No pipelining, no vector copies, no TMA: the tuned
kernel (``attention_tma.py``) adds those.
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, cutlass_dtype, fake_stream, stream_args, to_cute

BM, BN, THREADS = 64, 64, 128             # query rows, keys a step, threads (4 warps x 16 rows)
LOG2E = 1.4426950408889634


def mn_view(acc: cute.Tensor) -> cute.Tensor:
    """An mma.sync accumulator ((2, 2), MMA_M, MMA_N) seen as (rows, columns) of this thread:
    ((2, MMA_M), (2, MMA_N)) - the second value mode picks the row 8 below, the first the column."""
    lay = cute.make_layout(acc.layout.shape)
    rows = ((lay.shape[0][1], lay.shape[1]), (lay.stride[0][1], lay.stride[1]))
    cols = ((lay.shape[0][0], lay.shape[2]), (lay.stride[0][0], lay.stride[2]))
    mn = cute.make_layout((rows[0], cols[0]), stride=(rows[1], cols[1]))
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, mn))


@cute.jit
def quad_reduce(val: cutlass.Float32, op):
    """Reduce over the four threads of a quad (they hold the same two rows)."""
    val = op(val, cute.arch.shuffle_sync_bfly(val, offset=2))
    return op(val, cute.arch.shuffle_sync_bfly(val, offset=1))


@cute.jit
def online_softmax_rows(s_mn: cute.Tensor, c_mn: cute.Tensor, masked, causal: cutlass.Constexpr, Sq, Sk,
                        scale_log2: cutlass.Float32, row_max: cute.Tensor, row_sum: cute.Tensor, o_mn: cute.Tensor):
    """One step of the online softmax on (row, column) views of S and its coordinates: the mask
    (where ``masked``: keys past Sk, and with ``causal`` past the row's diagonal), each row's
    running (max, sum) over its quad, O's rows rescaled; leaves P = exp(S - max), unnormalised, in
    S. The twin masks every step; the TMA kernels only the steps that cross Sk or the diagonal."""
    ncols = cute.size(s_mn, mode=[1])
    for r in cutlass.range_constexpr(cute.size(row_max)):
        if masked:
            limit = Sk
            if cutlass.const_expr(causal):
                limit = cutlass.min(Sk, c_mn[r, 0][0] + 1 + Sk - Sq)
            for c in cutlass.range_constexpr(ncols):
                if c_mn[r, c][1] >= limit:
                    s_mn[r, c] = -cutlass.Float32.inf
        m = row_max[r]
        for c in cutlass.range_constexpr(ncols):
            m = cute.arch.fmax(m, s_mn[r, c])
        m = quad_reduce(m, cute.arch.fmax)
        base = m * scale_log2
        if m == -cutlass.Float32.inf:                # nothing seen yet: every exp2 below is 0
            base = cutlass.Float32(0.0)
        corr = cute.math.exp2(row_max[r] * scale_log2 - base, fastmath=True)
        total = row_sum[r] * corr
        for c in cutlass.range_constexpr(ncols):
            p = cute.math.exp2(s_mn[r, c] * scale_log2 - base, fastmath=True)
            s_mn[r, c] = p
            total = total + p
        for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
            o_mn[r, c] = o_mn[r, c] * corr
        row_max[r] = m
        row_sum[r] = total


@cute.jit
def load_tile(gX: cute.Tensor, cX: cute.Tensor, rows, sX: cute.Tensor, thr_layout: cute.Layout):
    """sX = gX for the rows (from the identity tensor cX) below ``rows``, else 0."""
    t, _, _ = cute.arch.thread_idx()
    src = cute.local_partition(gX, thr_layout, t)
    coord = cute.local_partition(cX, thr_layout, t)
    dst = cute.local_partition(sX, thr_layout, t)
    for i in cutlass.range(cute.size(dst), unroll=8):      # a few loads in flight, not the tile
        dst[i] = sX.element_type(0)
        if coord[i][0] < rows:
            dst[i] = src[i]


@cute.jit
def gemm_slices(tiled_mma: cute.TiledMma, acc: cute.Tensor, sA: cute.Tensor, rA: cute.Tensor,
                sB: cute.Tensor, rB: cute.Tensor):
    """acc += A B, one 16-wide k slice at a time: each slice's fragments are read from shared
    memory just before its MMAs (a whole 64 x 128 K tile would need 128 registers a thread)."""
    for k in cutlass.range_constexpr(cute.size(rA, mode=[2])):
        cute.autovec_copy(sA[None, None, k], rA[None, None, k])
        cute.autovec_copy(sB[None, None, k], rB[None, None, k])
        cute.gemm(tiled_mma, acc, rA[None, None, k], rB[None, None, k], acc)


class AttentionSimple:
    def __init__(self, D: int, causal: bool):
        self.D, self.causal = D, causal

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
               scale_log2: cutlass.Float32, tiled_mma: cute.TiledMma):
        D = self.D
        tidx, _, _ = cute.arch.thread_idx()
        mb, h, b = cute.arch.block_idx()
        Sq, Sk = cute.size(mQ, mode=[2]), cute.size(mK, mode=[2])
        hk = h // (cute.size(mQ, mode=[1]) // cute.size(mK, mode=[1]))
        gQ = cute.local_tile(mQ[b, h, None, None], (BM, D), (mb, 0))
        gO = cute.local_tile(mO[b, h, None, None], (BM, D), (mb, 0))
        gK = cute.local_tile(mK[b, hk, None, None], (BN, D), (None, 0))        # (BN, D, n)
        gV = cute.local_tile(mV[b, hk, None, None], (BN, D), (None, 0))
        cQ = cute.local_tile(cute.make_identity_tensor((Sq, D)), (BM, D), (mb, 0))
        cK = cute.local_tile(cute.make_identity_tensor((Sk, D)), (BN, D), (None, 0))
        cS = cute.local_tile(cute.make_identity_tensor((Sq, Sk)), (BM, BN), (mb, None))

        smem = SmemAllocator()
        pad = D + 8                                      # rows 16 bytes apart from the banks' period
        sQ = smem.allocate_tensor(mQ.element_type, cute.make_layout((BM, D), stride=(pad, 1)), 16)
        sK = smem.allocate_tensor(mQ.element_type, cute.make_layout((BN, D), stride=(pad, 1)), 16)
        sV = smem.allocate_tensor(mQ.element_type, cute.make_layout((BN, D), stride=(pad, 1)), 16)
        sP = smem.allocate_tensor(mQ.element_type, cute.make_layout((BM, BN), stride=(BN + 8, 1)), 16)
        sVt = cute.make_tensor(sV.iterator, cute.make_layout((D, BN), stride=(1, pad)))   # V^T: (D, keys)
        along_d = cute.make_layout((THREADS // D, D), stride=(D, 1))

        thr = tiled_mma.get_slice(tidx)
        tSsQ, tSsK, tOsP, tOsV = thr.partition_A(sQ), thr.partition_B(sK), thr.partition_A(sP), thr.partition_B(sVt)
        rQ, rK = tiled_mma.make_fragment_A(tSsQ), tiled_mma.make_fragment_B(tSsK)
        rP, rV = tiled_mma.make_fragment_A(tOsP), tiled_mma.make_fragment_B(tOsV)
        tSsP = thr.partition_C(sP)
        acc_o = tiled_mma.make_fragment_C(thr.partition_C(gO))
        acc_o.fill(0.0)
        o_mn = mn_view(acc_o)
        nrows = cute.size(o_mn, mode=[0])
        row_max = cute.make_rmem_tensor((nrows,), cutlass.Float32)
        row_sum = cute.make_rmem_tensor((nrows,), cutlass.Float32)
        row_max.fill(-cutlass.Float32.inf)
        row_sum.fill(0.0)

        load_tile(gQ, cQ, Sq, sQ, along_d)
        # keys past the last query's diagonal are masked for every row of the block: not visited
        kend = Sk
        if cutlass.const_expr(self.causal):
            kend = cutlass.min(Sk, (mb + 1) * BM + Sk - Sq)
        for n in cutlass.range((kend + BN - 1) // BN, unroll=1):
            load_tile(gK[None, None, n], cK[None, None, n], Sk, sK, along_d)
            load_tile(gV[None, None, n], cK[None, None, n], Sk, sV, along_d)
            cute.arch.sync_threads()
            acc_s = tiled_mma.make_fragment_C(tSsP)
            acc_s.fill(0.0)
            gemm_slices(tiled_mma, acc_s, tSsQ, rQ, tSsK, rK)
            self.online_softmax(acc_s, thr.partition_C(cS[None, None, n]), Sq, Sk, scale_log2,
                                row_max, row_sum, o_mn)
            for i in cutlass.range_constexpr(cute.size(acc_s)):
                tSsP[i] = acc_s[i].to(mQ.element_type)
            cute.arch.sync_threads()
            gemm_slices(tiled_mma, acc_o, tOsP, rP, tOsV, rV)
            cute.arch.sync_threads()                     # every read done before the next copies

        coords = mn_view(thr.partition_C(cute.local_tile(cute.make_identity_tensor((Sq, D)), (BM, D), (mb, 0))))
        tOgO = mn_view(thr.partition_C(gO))
        for r in cutlass.range_constexpr(nrows):
            inv = cutlass.Float32(1.0) / quad_reduce(row_sum[r], lambda x, y: x + y)
            if coords[r, 0][0] < Sq:
                for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                    tOgO[r, c] = (o_mn[r, c] * inv).to(mO.element_type)

    @cute.jit
    def online_softmax(self, acc_s: cute.Tensor, coords: cute.Tensor, Sq, Sk, scale_log2: cutlass.Float32,
                       row_max: cute.Tensor, row_sum: cute.Tensor, o_mn: cute.Tensor):
        """Mask S, update each row's running (max, sum), rescale O's row, and leave P = exp(S - max)
        (unnormalised) in acc_s."""
        online_softmax_rows(mn_view(acc_s), mn_view(coords), True, self.causal, Sq, Sk, scale_log2,
                            row_max, row_sum, o_mn)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 scale_log2: cutlass.Float32, stream):
        mma = cute.nvgpu.warp.MmaF16BF16Op(mQ.element_type, cutlass.Float32, (16, 8, 16))
        tiled_mma = cute.make_tiled_mma(mma, cute.make_layout((THREADS // 32, 1, 1)))   # a warp per 16 rows
        grid = ((cute.size(mQ, mode=[2]) + BM - 1) // BM, cute.size(mQ, mode=[1]), cute.size(mQ, mode=[0]))
        self.kernel(mQ, mK, mV, mO, scale_log2, tiled_mma).launch(grid=grid, block=(THREADS, 1, 1), stream=stream)


def fake_qkvo(dtype, D: int, align: int = 2) -> list:
    """Fake Q, K, V, O for a compile: batch, heads, lengths and the three outer strides free (the
    [B, S, H, D] views too), the head dim static and contiguous; ``align``: bytes the bases and
    the outer strides are multiples of (16 for TMA)."""
    from cutlass.cute.runtime import make_fake_tensor

    def fake():
        shape = (cute.sym_int32(), cute.sym_int32(), cute.sym_int32(), D)
        strides = tuple(cute.sym_int64(divisibility=align // 2) for _ in range(3)) + (1,)
        return make_fake_tensor(cutlass_dtype(dtype), shape, strides, assumed_align=align)
    return [fake() for _ in range(4)]


def _compile(dtype, D: int, causal: bool):
    key = ("attention_simple", str(dtype), D, bool(causal))
    c = cached(key)
    if c is not None:
        return c
    return compile_kernel(key, AttentionSimple(D, bool(causal)), *fake_qkvo(dtype, D),
                          cutlass.Float32(1.0), fake_stream())


def validate(q, k, v, out, causal) -> None:
    """One-line ValueError / TypeError naming the argument that breaks the contract."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: must be 4-D [B, H, S, D], got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float16, torch.bfloat16) or t.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} must be q's, float16 or bfloat16")
        if t.stride(3) != 1:
            raise ValueError(f"{name}: the head dim must be contiguous (stride 1), got strides {t.stride()}")
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t.device.type != "cuda" or t.device != q.device:
            raise ValueError(f"{name}: must be a CUDA tensor on q's device, got {t.device}")
    B, Hq, Sq, D = q.shape
    if D not in (64, 128):
        raise ValueError(f"q: head dim must be 64 or 128, got {D}")
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k: shape {tuple(k.shape)} and v {tuple(v.shape)} must be [B, Hkv, Sk, D] with q's B, D")
    if Hq % k.shape[1]:
        raise ValueError(f"k: Hq={Hq} is not a multiple of Hkv={k.shape[1]}")
    if out.shape != q.shape:
        raise ValueError(f"out: shape {tuple(out.shape)} != q shape {tuple(q.shape)}")
    # (a length plus a 128-row block stays an Int32; the grid's y and z are Hq and B)
    if min(Sq, k.shape[2]) < 1 or max(Sq, k.shape[2]) >= 2 ** 31 - 256 or B >= 2 ** 16 or Hq >= 2 ** 16:
        raise ValueError(f"q: lengths Sq={Sq}, Sk={k.shape[2]} must be in [1, 2^31 - 256), B and Hq below 2^16")
    if causal and Sq > k.shape[2]:
        raise ValueError(f"q: a causal case needs Sq <= Sk, got Sq={Sq}, Sk={k.shape[2]}")


def attention_args(q, k, v, out, align: int = 2):
    """The compiled function's arguments: the four tensors and the scale's log2 form."""
    return (*(to_cute(t, align) for t in (q, k, v, out)), LOG2E / math.sqrt(q.shape[3]))


def prepare_attention_simple(q, k, v, out, causal):
    """Validate, compile (cached); returns (launch, compiled)."""
    validate(q, k, v, out, causal)
    comp = _compile(q.dtype, q.shape[3], causal)
    args = attention_args(q, k, v, out)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp
