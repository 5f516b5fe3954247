"""GEMM + fused epilogue in the CuTe DSL, the teaching twin (cute:gemm_epilogue_simple).

    C = act(A @ B + bias)     A [M, K], B [K, N] row-major, fp16/bf16 in, fp32 accumulation

One CTA of four warps per 64 x 64 tile of C, on tensor cores (mma.sync m16n8k16; the tiled MMA
spreads the tile over the warps). For each 32-wide slice of K, every thread copies its share of the
A and B tiles into shared memory one element at a time and writes zero where the element lies
outside the matrix, so any M, N, K and any alignment work, and the K tail adds nothing to the sum.
A barrier; each thread loads its MMA fragments from shared memory and multiplies; a barrier. Then
the fused epilogue on the fp32 accumulators (bias, activation: ``epilogue.py``) and a store of the
elements that lie inside C. No pipelining, no TMA, no vector accesses: the tuned family
(``gemm_base.py`` and its schedules) adds those.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import torch
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, cutlass_dtype, fake_stream, stream_args, to_cute
from .epilogue import act_code, bias_act

TILE = (64, 64, 32)                       # (M, N, K) of one CTA's step


@cute.jit
def load_tile(gX: cute.Tensor, cX: cute.Tensor, extent, sX: cute.Tensor, thr_layout: cute.Layout):
    """sX = gX where the coordinate (from the identity tensor cX) is inside extent, else 0."""
    t, _, _ = cute.arch.thread_idx()
    src = cute.local_partition(gX, thr_layout, t)
    coord = cute.local_partition(cX, thr_layout, t)
    dst = cute.local_partition(sX, thr_layout, t)
    for i in cutlass.range_constexpr(cute.size(dst)):
        dst[i] = gX.element_type(0)
        if cute.elem_less(coord[i], extent):
            dst[i] = src[i]


class GemmSimple:
    @cute.kernel
    def kernel(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mBias: cute.Tensor,
               has_bias: cutlass.Int32, act: cutlass.Int32, tiled_mma: cute.TiledMma):
        tidx, _, _ = cute.arch.thread_idx()
        bm, bn, _ = cute.arch.block_idx()
        # this CTA's tiles; B is seen as [N, K], so A and B are both tiled (rows, K)
        gA = cute.local_tile(mA, TILE, (bm, bn, None), proj=(1, None, 1))        # (64, 32, k)
        gB = cute.local_tile(mB, TILE, (bm, bn, None), proj=(None, 1, 1))        # (64, 32, k)
        gC = cute.local_tile(mC, TILE, (bm, bn, None), proj=(1, 1, None))        # (64, 64)
        cA = cute.local_tile(cute.make_identity_tensor(mA.shape), TILE, (bm, bn, None), proj=(1, None, 1))
        cB = cute.local_tile(cute.make_identity_tensor(mB.shape), TILE, (bm, bn, None), proj=(None, 1, 1))
        cC = cute.local_tile(cute.make_identity_tensor(mC.shape), TILE, (bm, bn, None), proj=(1, 1, None))

        smem = SmemAllocator()
        sA = smem.allocate_tensor(mA.element_type, cute.make_layout((64, 32), stride=(32, 1)), 16)
        sB = smem.allocate_tensor(mB.element_type, cute.make_layout((64, 32), stride=(1, 64)), 16)
        # copy threads follow each matrix's contiguous dimension, so a warp's accesses are adjacent
        along_k = cute.make_layout((4, 32), stride=(32, 1))
        along_n = cute.make_layout((64, 2), stride=(1, 64))

        thr_mma = tiled_mma.get_slice(tidx)
        tCsA, tCsB = thr_mma.partition_A(sA), thr_mma.partition_B(sB)
        tCrA, tCrB = tiled_mma.make_fragment_A(tCsA), tiled_mma.make_fragment_B(tCsB)
        acc = tiled_mma.make_fragment_C(thr_mma.partition_C(gC))
        acc.fill(0.0)

        for kt in cutlass.range(cute.size(gA, mode=[2]), unroll=1):
            load_tile(gA[None, None, kt], cA[None, None, kt], mA.shape, sA, along_k)
            load_tile(gB[None, None, kt], cB[None, None, kt], mB.shape, sB, along_n)
            cute.arch.sync_threads()
            cute.autovec_copy(tCsA, tCrA)
            cute.autovec_copy(tCsB, tCrB)
            cute.gemm(tiled_mma, acc, tCrA, tCrB, acc)
            cute.arch.sync_threads()              # everyone done reading before the next copy

        coords = thr_mma.partition_C(cC)
        bias_act(acc, coords, mBias, cute.size(mC, mode=[1]), has_bias, act)
        tCgC = thr_mma.partition_C(gC)
        for i in cutlass.range_constexpr(cute.size(acc)):
            if cute.elem_less(coords[i], mC.shape):
                tCgC[i] = acc[i].to(mC.element_type)

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mBias: cute.Tensor,
                 has_bias: cutlass.Int32, act: cutlass.Int32, stream):
        mma = cute.nvgpu.warp.MmaF16BF16Op(mA.element_type, cutlass.Float32, (16, 8, 16))
        tiled_mma = cute.make_tiled_mma(mma, cute.make_layout((2, 2, 1)))       # 2 x 2 warps
        grid = ((cute.size(mC, mode=[0]) + 63) // 64, (cute.size(mC, mode=[1]) + 63) // 64, 1)
        self.kernel(mA, mB, mC, mBias, has_bias, act, tiled_mma).launch(grid=grid, block=(128, 1, 1),
                                                                        stream=stream)


def _compile(dtype):
    key = ("gemm_simple", str(dtype))
    c = cached(key)
    if c is not None:
        return c
    from cutlass.cute.runtime import make_fake_tensor

    cdt = cutlass_dtype(dtype)
    m, n, k = cute.sym_int32(), cute.sym_int32(), cute.sym_int32()
    a = make_fake_tensor(cdt, (m, k), (cute.sym_int64(), 1), assumed_align=2)
    b = make_fake_tensor(cdt, (n, k), (1, cute.sym_int64()), assumed_align=2)     # B[K, N] as [N, K]
    c = make_fake_tensor(cdt, (m, n), (cute.sym_int64(), 1), assumed_align=2)
    bias = make_fake_tensor(cdt, (cute.sym_int32(),), (1,), assumed_align=2)
    return compile_kernel(key, GemmSimple(), a, b, c, bias, cutlass.Int32(1), cutlass.Int32(0), fake_stream())


def prepare_gemm_simple(a, b, bias, out, act="relu"):
    """Validate, compile (cached); returns (launch, compiled)."""
    from .gemm_launch import validate

    validate(a, b, bias, out, act)
    comp = _compile(a.dtype)
    bias_t = bias if bias is not None else torch.zeros(1, dtype=a.dtype, device=a.device)
    args = (to_cute(a, 2), to_cute(b.t(), 2, leading_dim=0), to_cute(out, 2), to_cute(bias_t, 2),
            int(bias is not None), act_code(act))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp
