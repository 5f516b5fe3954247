"""GEMM + bias + activation, the TileLang way, shortest form: C = act(A @ B + bias).

A CTA per 128 x 128 tile of C; the K loop copies a 128 x 32 slice of A and a 32 x 128 slice of B
into shared memory (``T.copy``: element copies, zero-filled past the edges, so any M, N, K) and
``T.gemm`` multiplies them on the tensor cores into the fp32 accumulator fragment. The epilogue
(bias + activation) runs on that fragment in registers before the one store. No pipelining hints,
no TMA, no swizzles: TileLang picks the shared layouts and the MMA.
"""
import tilelang.language as T

from .epilogue import bias_act

BM, BN, BK = 128, 128, 32
THREADS = 256


def gemm_kernel(dtype: str, has_bias: bool):
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")

    @T.macro
    def body(A, B, bias, C, act):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=THREADS) as (bx, by):
            A_s = T.alloc_shared((BM, BK), dtype)
            B_s = T.alloc_shared((BK, BN), dtype)
            acc = T.alloc_fragment((BM, BN), "float32")
            T.clear(acc)
            for k in T.serial(T.ceildiv(K, BK)):
                T.copy(A[by * BM, k * BK], A_s, disable_tma=True)
                T.copy(B[k * BK, bx * BN], B_s, disable_tma=True)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(BM, BN):
                acc[i, j] = bias_act(acc[i, j], bias, bx * BN + j, N, act)
            T.copy(acc, C[by * BM, bx * BN])

    if has_bias:
        @T.prim_func
        def gemm_epilogue(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), bias: T.Tensor((N,), dtype),
                          C: T.Tensor((M, N), dtype),
                act: T.int32):
            body(A, B, bias, C, act)
    else:
        @T.prim_func
        def gemm_epilogue(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype),
                act: T.int32):
            body(A, B, None, C, act)
    return gemm_epilogue
