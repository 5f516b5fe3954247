"""GEMM + bias + activation, pipelined for Hopper: TMA loads into swizzled shared memory, wgmma.

A CTA per ``bm x bn`` tile of C (rastered in panels of ``PANEL`` tiles, ``T.use_swizzle``, so that
neighbouring CTAs share A and B slices in L2). The K loop is ``T.Pipelined`` with ``stages``
shared-memory buffers: TileLang issues the TMA copies ``stages - 1`` slices ahead on mbarriers,
warp-specialises a producer, and lowers ``T.gemm`` to wgmma on the 128-byte swizzled layouts
annotated here.

``gemm_tma_kernel`` (today's default): bias + activation on the fp32 accumulator fragment in
registers, then one guarded store from the fragment. ``tma=False`` builds the same pipeline with
the ``tiled`` variant's guarded element loads (``gemm_epilogue_tiled.py``).

``gemm_tma_staged_kernel`` (the default's staged plans, ``dispatch.SWITCHES["gemm_next"]``, run
on a GPU) stages both ends of the epilogue in shared memory. Staging an operand (docs/DESIGN.md:
a plan's ``stage``): ``stage_rows_kernel`` copies an operand whose rows are not 16-byte multiples
into one whose rows are, so every operand load is TMA
(docs/performance.md, "TileLang / GEMM + epilogue"); ``stage_pair_kernel`` (the default's plans where both operands need it,
``dispatch.plan_gemm_small``) copies A and B in one launch. Both copy their tiles with the
``stage_tile`` macro.
"""
import tilelang.language as T
from tilelang.layout import make_swizzled_layout

from .epilogue import act as activation
from .epilogue import bias_act
from .gemm_epilogue_tiled import load_tiles_guarded

PANEL = 8


def gemm_tma_kernel(dtype: str, has_bias: bool, bm: int, bn: int, bk: int, stages: int,
                    threads: int, tma: bool = True):
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")

    @T.macro
    def body(A, B, bias, C, act):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.annotate_layout({A_s: make_swizzled_layout(A_s), B_s: make_swizzled_layout(B_s)})
            T.use_swizzle(panel_size=PANEL)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if tma:
                    T.copy(A[by * bm, k * bk], A_s)
                    T.copy(B[k * bk, bx * bn], B_s)
                else:   # the tiled variant's guarded element loads (gemm_epilogue_tiled.py)
                    load_tiles_guarded(A, B, A_s, B_s, M, N, K, by, bx, k, bm, bn, bk)
                T.gemm(A_s, B_s, acc)
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


def gemm_tma_staged_kernel(dtype: str, bm: int, bn: int, bk: int, stages: int, threads: int, aligned_n: bool):
    """The same pipeline with both ends of the epilogue in shared memory: the tile's bias slice is
    staged before the K loop (the accumulator loop reads it there: no guarded global load per
    element, no spills at 128 x 256), and the finished tile goes back through shared memory
    (``stmatrix``), then out by TMA where C's rows are 16-byte multiples (``aligned_n``, a
    compile-time class) or in coalesced row-wise stores where they are not. B has its own column
    count ``NB`` (>= N: a copy padded to 16-byte rows, ``stage_rows_kernel``, where B's rows are not
    16-byte multiples); ``has_bias`` and ``act`` are run-time values (a missing bias is a
    one-element dummy), so one compile serves bias on and off and every activation."""
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    NB, NBIAS = T.dynamic("NB"), T.dynamic("NBIAS")

    @T.prim_func
    def gemm_epilogue_staged(A: T.Tensor((M, K), dtype), B: T.Tensor((K, NB), dtype), bias: T.Tensor((NBIAS,), dtype),
                             C: T.Tensor((M, N), dtype), has_bias: T.int32, act: T.int32):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if aligned_n:
                T.assume(N % 8 == 0)
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            bias_s = T.alloc_shared((bn,), dtype)
            C_s = T.alloc_shared((bm, bn), dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.annotate_layout({A_s: make_swizzled_layout(A_s), B_s: make_swizzled_layout(B_s)})
            T.use_swizzle(panel_size=PANEL)
            for j in T.Parallel(bn):
                bias_s[j] = T.if_then_else(has_bias != 0 and bx * bn + j < N, bias[bx * bn + j], 0)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(bm, bn):
                acc[i, j] = activation(acc[i, j] + T.cast(bias_s[j], "float32"), act)
            T.copy(acc, C_s)
            T.copy(C_s, C[by * bm, bx * bn], disable_tma=not aligned_n)

    return gemm_epilogue_staged


@T.macro
def stage_tile(src, dst, R0, C0, R, P, by, bx, rows: int, cols: int):
    """Tile (by, bx) of the copy, ``rows x cols`` elements: ``dst[i, j] = src[i, j]`` inside src
    (R0 x C0), 0 in dst's padding (dst: R x P). Consecutive threads take consecutive columns:
    coalesced element loads and stores."""
    for i, j in T.Parallel(rows, cols):
        if by * rows + i < R and bx * cols + j < P:
            dst[by * rows + i, bx * cols + j] = T.if_then_else(
                by * rows + i < R0 and bx * cols + j < C0, src[by * rows + i, bx * cols + j], 0)


def stage_rows_kernel(dtype: str, rows: int = 16, cols: int = 256, threads: int = 256):
    """An operand whose rows are not 16-byte multiples copied into one whose rows are (``P``
    columns, a multiple of 8; zeros in the padding), so TMA can read it: a 2-D grid of
    ``stage_tile``'s tiles."""
    R0, C0, R, P = T.dynamic("R0"), T.dynamic("C0"), T.dynamic("R"), T.dynamic("P")

    @T.prim_func
    def stage_rows(src: T.Tensor((R0, C0), dtype), dst: T.Tensor((R, P), dtype)):
        with T.Kernel(T.ceildiv(P, cols), T.ceildiv(R, rows), threads=threads) as (bx, by):
            stage_tile(src, dst, R0, C0, R, P, by, bx, rows, cols)

    return stage_rows


def stage_pair_kernel(dtype: str, rows: int = 16, cols: int = 256, threads: int = 256):
    """``stage_rows_kernel`` for A and B in one launch (``dispatch.plan_gemm_small``'s
    ``stage_pair``): a 1-D grid whose first CTAs copy A (M x K) into Ap (M x KP), the rest
    B (K x N) into Bp (KP x NP), each CTA one ``stage_tile``, so a GEMM with both operands' rows
    off 16 bytes pays one launch for its copies."""
    M, K, N = T.dynamic("M"), T.dynamic("K"), T.dynamic("N")
    KP, NP = T.dynamic("KP"), T.dynamic("NP")

    @T.prim_func
    def stage_pair(A: T.Tensor((M, K), dtype), Ap: T.Tensor((M, KP), dtype),
                   B: T.Tensor((K, N), dtype), Bp: T.Tensor((KP, NP), dtype)):
        a_cols, b_cols = T.ceildiv(KP, cols), T.ceildiv(NP, cols)
        a_ctas = a_cols * T.ceildiv(M, rows)
        with T.Kernel(a_ctas + b_cols * T.ceildiv(KP, rows), threads=threads) as bid:
            if bid < a_ctas:
                stage_tile(A, Ap, M, K, M, KP, bid // a_cols, bid % a_cols, rows, cols)
            else:
                stage_tile(B, Bp, K, N, KP, NP, (bid - a_ctas) // b_cols, (bid - a_ctas) % b_cols, rows, cols)

    return stage_pair
