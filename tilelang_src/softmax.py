"""Row softmax, the TileLang way, shortest form: a CTA per row, two passes over the row in tiles.

Pass 1 walks the row in tiles of BLOCK columns and keeps the running (max, sum of exp) online:
each tile's max (``T.reduce_max``) raises the running max and rescales the sum. Pass 2 reads the
row again and writes exp(x - max) / sum. Out-of-row columns read as -inf (they add exp = 0).
Any row length, any row stride (``T.StridedTensor`` with a dynamic stride) and any alignment: the
guarded loads are element accesses. fp32 math; exp as exp2 of the scaled difference.
"""

import tilelang.language as T

BLOCK = 1024
THREADS = 256
LOG2E = 1.4426950408889634


def softmax_kernel(dtype: str):
    M, N = T.dynamic("M"), T.dynamic("N")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax(X: T.StridedTensor((M, N), (SX, 1), dtype), Y: T.StridedTensor((M, N), (SY, 1), dtype)):
        with T.Kernel(M, threads=THREADS) as r:
            x = T.alloc_fragment((BLOCK,), f32)
            tile_max = T.alloc_fragment((1,), f32)
            tile_sum = T.alloc_fragment((1,), f32)
            shift = T.alloc_fragment((1,), f32)  # the new max, 0 while the row has been all -inf
            m = T.alloc_fragment((1,), f32)      # running max
            s = T.alloc_fragment((1,), f32)      # running sum of exp(x - m)
            T.fill(m, NEG)
            T.fill(s, 0.0)
            for t in T.serial(T.ceildiv(N, BLOCK)):
                for j in T.Parallel(BLOCK):
                    x[j] = T.if_then_else(t * BLOCK + j < N, T.cast(X[r, t * BLOCK + j], f32), NEG)
                T.reduce_max(x, tile_max, dim=0)
                for i in T.Parallel(1):
                    tile_max[i] = T.max(m[i], tile_max[i])          # the new running max
                    shift[i] = T.if_then_else(tile_max[i] == NEG, 0.0, tile_max[i])
                for j in T.Parallel(BLOCK):
                    x[j] = T.exp2((x[j] - shift[0]) * LOG2E)
                T.reduce_sum(x, tile_sum, dim=0)
                for i in T.Parallel(1):
                    s[i] = s[i] * T.exp2((m[i] - shift[i]) * LOG2E) + tile_sum[i]
                    m[i] = tile_max[i]
            for t in T.serial(T.ceildiv(N, BLOCK)):
                for j in T.Parallel(BLOCK):
                    if t * BLOCK + j < N:
                        Y[r, t * BLOCK + j] = T.cast(T.exp2((T.cast(X[r, t * BLOCK + j], f32) - m[0]) * LOG2E) / s[0], dtype)

    return softmax
