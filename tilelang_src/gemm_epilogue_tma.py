"""GEMM + bias + activation, pipelined for Hopper: TMA loads into swizzled shared memory, wgmma.

A CTA per ``bm x bn`` tile of C (rastered in panels of ``PANEL`` tiles, ``T.use_swizzle``, so that
neighbouring CTAs share A and B slices in L2). The K loop is ``T.Pipelined`` with ``stages``
shared-memory buffers: TileLang issues the TMA copies ``stages - 1`` slices ahead on mbarriers,
warp-specialises a producer, and lowers ``T.gemm`` to wgmma on the 128-byte swizzled layouts
annotated here. The epilogue (bias + activation) runs on the fp32 accumulator fragment in
registers, then one store.

``stage_bias=True`` (the ``tilelang:gemm_epilogue_tma`` variant; not yet run on a GPU) copies the
tile's bias slice to shared memory once, before the K loop, and the epilogue reads it from there:
a guarded global load of bias per accumulator element (128 a consumer thread in a 128 x 256 tile)
is what made ptxas spill the wide tile (296 B at 240 registers a consumer thread; 0 B without
the bias term).

``tma=False`` builds the same pipeline with the ``tiled`` variant's guarded element loads
(``gemm_epilogue_tiled.py``): the path for operands whose rows are not 16-byte multiples.
"""
import tilelang.language as T
from tilelang.layout import make_swizzled_layout

from .epilogue import act as activation
from .epilogue import bias_act
from .gemm_epilogue_tiled import load_tiles_guarded

PANEL = 8


def gemm_tma_kernel(dtype: str, has_bias: bool, bm: int, bn: int, bk: int, stages: int,
                    threads: int, tma: bool = True, stage_bias: bool = False):
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")

    @T.macro
    def body(A, B, bias, C, act):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.annotate_layout({A_s: make_swizzled_layout(A_s), B_s: make_swizzled_layout(B_s)})
            T.use_swizzle(panel_size=PANEL)
            if stage_bias and bias is not None:    # the tile's bias slice, once, zero past N
                bias_s = T.alloc_shared((bn,), dtype)
                for j in T.Parallel(bn):
                    bias_s[j] = T.if_then_else(bx * bn + j < N, bias[bx * bn + j], 0)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if tma:
                    T.copy(A[by * bm, k * bk], A_s)
                    T.copy(B[k * bk, bx * bn], B_s)
                else:   # the tiled variant's guarded element loads (gemm_epilogue_tiled.py)
                    load_tiles_guarded(A, B, A_s, B_s, M, N, K, by, bx, k, bm, bn, bk)
                T.gemm(A_s, B_s, acc)
            if stage_bias and bias is not None:
                for i, j in T.Parallel(bm, bn):
                    acc[i, j] = activation(acc[i, j] + T.cast(bias_s[j], "float32"), act)
            else:
                for i, j in T.Parallel(bm, bn):
                    acc[i, j] = bias_act(acc[i, j], bias, bx * bn + j, N, act)
            T.copy(acc, C[by * bm, bx * bn])

    if has_bias:
        @T.prim_func
        def gemm_epilogue_tma(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), bias: T.Tensor((N,), dtype),
                              C: T.Tensor((M, N), dtype),
                act: T.int32):
            body(A, B, bias, C, act)
    else:
        @T.prim_func
        def gemm_epilogue_tma(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype),
                act: T.int32):
            body(A, B, None, C, act)
    return gemm_epilogue_tma
