"""Row softmax for rows longer than registers hold: a CTA per row, online (max, sum), then a write pass.

Pass 1 walks the row in tiles of ``tile`` columns with the running max and sum of exp kept online
(each tile's max raises the running max; the sum is rescaled by exp(old - new)); pass 2 reads the
row again (mostly from L2) and writes exp(x - max) / sum. Reads the row twice: 3 x N elements of
traffic per row against the 2 x N of a copy. Dynamic M, N and row strides.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634


def softmax_online_kernel(dtype: str, tile: int, threads: int):
    M, N = T.dynamic("M"), T.dynamic("N")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_online(X: T.StridedTensor((M, N), (SX, 1), dtype), Y: T.StridedTensor((M, N), (SY, 1), dtype)):
        with T.Kernel(M, threads=threads) as r:
            x = T.alloc_fragment((tile,), f32)
            tmax = T.alloc_fragment((1,), f32)
            tsum = T.alloc_fragment((1,), f32)
            shift = T.alloc_fragment((1,), f32)
            m = T.alloc_fragment((1,), f32)
            s = T.alloc_fragment((1,), f32)
            T.fill(m, NEG)
            T.fill(s, 0.0)
            for t in T.serial(T.ceildiv(N, tile)):
                for j in T.Parallel(tile):
                    x[j] = T.if_then_else(t * tile + j < N, T.cast(X[r, t * tile + j], f32), NEG)
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
            for i in T.Parallel(1):
                s[i] = 1.0 / s[i]
            for t in T.serial(T.ceildiv(N, tile)):
                for j in T.Parallel(tile):
                    if t * tile + j < N:
                        Y[r, t * tile + j] = T.cast(T.exp2((T.cast(X[r, t * tile + j], f32) - m[0]) * LOG2E) * s[0], dtype)

    return softmax_online
