"""The ``tiled`` GEMM's loads: guarded element copies of the A and B slices into the pipeline's
swizzled shared memory (zero past the edges), for operands whose rows are not 16-byte multiples
(N or K not a multiple of 8 in 16-bit types), which a TMA descriptor cannot describe.

The pipeline around them (``T.Pipelined`` over K, wgmma on the swizzled buffers, bias +
activation on the accumulator fragment) is ``gemm_epilogue_tma.gemm_tma_kernel(..., tma=False)``:
the two variants differ only in how a K slice reaches shared memory.
"""
import tilelang.language as T


@T.macro
def load_tiles_guarded(A, B, A_s, B_s, M, N, K, by, bx, k, bm: int, bn: int, bk: int):
    for i, j in T.Parallel(bm, bk):
        A_s[i, j] = T.if_then_else(by * bm + i < M and k * bk + j < K, A[by * bm + i, k * bk + j], 0)
    for i, j in T.Parallel(bk, bn):
        B_s[i, j] = T.if_then_else(k * bk + i < K and bx * bn + j < N, B[k * bk + i, bx * bn + j], 0)
