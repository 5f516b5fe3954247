"""GEMM + bias + activation split over K, for few output tiles (small M): more CTAs than tiles.

Kernel 1 runs a CTA per (tile of C, slice of K): the same pipelined TMA + wgmma main loop as
gemm_epilogue_tma over its ``ceil(K tiles / S)`` K tiles, and stores its fp32 accumulator
fragment to ``W[split]`` (a workspace of S fp32 planes, no atomics: the sum is deterministic).
Kernel 2 sums the S planes of each element in split order and applies bias + activation to the
fp32 sum before the one store to C. S is the workspace's leading dimension (dynamic), so one
compile serves every split count.
"""
import tilelang.language as T
from tilelang.layout import make_swizzled_layout

from .epilogue import act as activation
from .epilogue import bias_act

EPI_BM, EPI_BN, EPI_THREADS = 16, 256, 256


def gemm_splitk_partial_kernel(dtype: str, bm: int, bn: int, bk: int, stages: int, threads: int):
    M, N, K, S = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("S")

    @T.prim_func
    def gemm_splitk_partial(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), W: T.Tensor((S, M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), S, threads=threads) as (bx, by, bz):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.annotate_layout({A_s: make_swizzled_layout(A_s), B_s: make_swizzled_layout(B_s)})
            per = T.ceildiv(T.ceildiv(K, bk), S)          # K tiles of each split
            T.clear(acc)
            for k in T.Pipelined(per, num_stages=stages):
                T.copy(A[by * bm, (bz * per + k) * bk], A_s)   # past K: zero-filled by TMA
                T.copy(B[(bz * per + k) * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, W[bz, by * bm, bx * bn])

    return gemm_splitk_partial


def gemm_splitk_epilogue_kernel(dtype: str, has_bias: bool):
    M, N, S = T.dynamic("M"), T.dynamic("N"), T.dynamic("S")

    @T.macro
    def body(W, bias, C, act):
        with T.Kernel(T.ceildiv(N, EPI_BN), T.ceildiv(M, EPI_BM), threads=EPI_THREADS) as (bx, by):
            acc = T.alloc_fragment((EPI_BM, EPI_BN), "float32")
            T.clear(acc)
            for s in T.serial(S):
                for i, j in T.Parallel(EPI_BM, EPI_BN):
                    if by * EPI_BM + i < M and bx * EPI_BN + j < N:
                        acc[i, j] += W[s, by * EPI_BM + i, bx * EPI_BN + j]
            for i, j in T.Parallel(EPI_BM, EPI_BN):
                if by * EPI_BM + i < M and bx * EPI_BN + j < N:
                    C[by * EPI_BM + i, bx * EPI_BN + j] = T.cast(bias_act(acc[i, j], bias, bx * EPI_BN + j, N, act), dtype)

    if has_bias:
        @T.prim_func
        def gemm_splitk_epilogue(W: T.Tensor((S, M, N), "float32"), bias: T.Tensor((N,), dtype), C: T.Tensor((M, N), dtype),
                act: T.int32):
            body(W, bias, C, act)
    else:
        @T.prim_func
        def gemm_splitk_epilogue(W: T.Tensor((S, M, N), "float32"), C: T.Tensor((M, N), dtype),
                act: T.int32):
            body(W, None, C, act)
    return gemm_splitk_epilogue


def gemm_splitk_sum_kernel(dtype: str):
    """Kernel 2 of the staged plan (``dispatch.SWITCHES["gemm_next"]``): the S planes summed in
    split order, then bias + activation. The planes may be wider than C (``NW`` >= N: B staged to
    16-byte rows); ``has_bias`` and ``act`` are run-time values (a missing bias is a one-element
    dummy), so one compile per dtype."""
    M, N, S = T.dynamic("M"), T.dynamic("N"), T.dynamic("S")
    NW, NBIAS = T.dynamic("NW"), T.dynamic("NBIAS")

    @T.prim_func
    def gemm_splitk_sum(W: T.Tensor((S, M, NW), "float32"), bias: T.Tensor((NBIAS,), dtype), C: T.Tensor((M, N), dtype),
                        has_bias: T.int32, act: T.int32):
        with T.Kernel(T.ceildiv(N, EPI_BN), T.ceildiv(M, EPI_BM), threads=EPI_THREADS) as (bx, by):
            acc = T.alloc_fragment((EPI_BM, EPI_BN), "float32")
            T.clear(acc)
            for s in T.serial(S):
                for i, j in T.Parallel(EPI_BM, EPI_BN):
                    if by * EPI_BM + i < M and bx * EPI_BN + j < N:
                        acc[i, j] += W[s, by * EPI_BM + i, bx * EPI_BN + j]
            for i, j in T.Parallel(EPI_BM, EPI_BN):
                if by * EPI_BM + i < M and bx * EPI_BN + j < N:
                    C[by * EPI_BM + i, bx * EPI_BN + j] = T.cast(activation(
                        acc[i, j] + T.if_then_else(has_bias != 0, T.cast(bias[bx * EPI_BN + j], "float32"), 0.0), act), dtype)

    return gemm_splitk_sum
