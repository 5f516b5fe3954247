"""Row softmax split over CTAs, for few long rows: ``C`` CTAs per row, so a handful of rows still
fills the GPU.

Kernel 1: CTA (c, r) walks chunk c of row r (``ceil(tiles / C)`` tiles of ``tile`` columns) with the
running (max, sum of exp) kept online, and stores the pair to ``W[r, c]``. Kernel 2: CTA (c, r)
merges the C pairs of its row (max of the maxima; sum of s_c exp(m_c - m)) and writes its chunk,
exp(x - m) / s, reading the chunk again (mostly from L2). C is W's second dimension (dynamic), so
one compile serves every split.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634


def softmax_split_stats_kernel(dtype: str, tile: int, threads: int):
    M, N, C = T.dynamic("M"), T.dynamic("N"), T.dynamic("C")
    SX = T.dynamic("SX")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_split_stats(X: T.StridedTensor((M, N), (SX, 1), dtype), W: T.Tensor((M, C, 2), f32)):
        with T.Kernel(C, M, threads=threads) as (c, r):
            x = T.alloc_fragment((tile,), f32)
            tmax = T.alloc_fragment((1,), f32)
            tsum = T.alloc_fragment((1,), f32)
            shift = T.alloc_fragment((1,), f32)
            m = T.alloc_fragment((1,), f32)
            s = T.alloc_fragment((1,), f32)
            per = T.ceildiv(T.ceildiv(N, tile), C)
            T.fill(m, NEG)
            T.fill(s, 0.0)
            for t in T.serial(per):
                col0 = (c * per + t) * tile
                for j in T.Parallel(tile):
                    x[j] = T.if_then_else(col0 + j < N, T.cast(X[r, col0 + j], f32), NEG)
                T.reduce_max(x, tmax, dim=0)
                for i in T.Parallel(1):
                    tmax[i] = T.max(m[i], tmax[i])
                    shift[i] = T.if_then_else(tmax[i] == NEG, 0.0, tmax[i])
                for j in T.Parallel(tile):
                    x[j] = T.exp2((x[j] - shift[0]) * LOG2E)
                T.reduce_sum(x, tsum, dim=0)
                for i in T.Parallel(1):
                    s[i] = s[i] * T.exp2((m[i] - shift[i]) * LOG2E) + tsum[i]
                    m[i] = tmax[i]
            W[r, c, 0] = m[0]
            W[r, c, 1] = s[0]

    return softmax_split_stats


def softmax_split_write_kernel(dtype: str, tile: int, threads: int):
    M, N, C = T.dynamic("M"), T.dynamic("N"), T.dynamic("C")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_split_write(X: T.StridedTensor((M, N), (SX, 1), dtype), W: T.Tensor((M, C, 2), f32),
                            Y: T.StridedTensor((M, N), (SY, 1), dtype)):
        with T.Kernel(C, M, threads=threads) as (c, r):
            m = T.alloc_local((1,), f32)
            s = T.alloc_local((1,), f32)
            per = T.ceildiv(T.ceildiv(N, tile), C)
            m[0] = NEG
            for k in T.serial(C):
                m[0] = T.max(m[0], W[r, k, 0])
            s[0] = 0.0
            for k in T.serial(C):   # a chunk past the row's end has (-inf, 0): it adds nothing
                s[0] += T.if_then_else(W[r, k, 1] > 0.0, W[r, k, 1] * T.exp2((W[r, k, 0] - m[0]) * LOG2E), 0.0)
            s[0] = 1.0 / s[0]
            for t in T.serial(per):
                col0 = (c * per + t) * tile
                for j in T.Parallel(tile):
                    if col0 + j < N:
                        Y[r, col0 + j] = T.cast(T.exp2((T.cast(X[r, col0 + j], f32) - m[0]) * LOG2E) * s[0], dtype)

    return softmax_split_write
