"""Row softmax with the row staged in shared memory: a CTA per row, one read and one write.

The CTA first copies its whole row, raw, into shared memory (``cols`` elements, the row length
rounded up to the tile; every thread's loads issued back to back, so a CTA has the row in
flight), then walks it in tiles of ``tile`` columns from shared memory folding the running
(max, sum of exp) online, and finally writes exp(x - max) / sum from shared memory. Rows too long for registers but short enough for shared
memory (up to ~200 KB a CTA) move 2 x N elements, as a copy does. Dynamic M, N and strides.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634


def softmax_smem_kernel(dtype: str, cols: int, tile: int, threads: int):
    M, N = T.dynamic("M"), T.dynamic("N")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    f32 = "float32"
    NEG = -T.infinity(f32)
    tiles = cols // tile

    @T.prim_func
    def softmax_smem(X: T.StridedTensor((M, N), (SX, 1), dtype), Y: T.StridedTensor((M, N), (SY, 1), dtype)):
        with T.Kernel(M, threads=threads) as r:
            row = T.alloc_shared((tiles, tile), dtype)
            x = T.alloc_fragment((tile,), f32)
            tmax = T.alloc_fragment((1,), f32)
            tsum = T.alloc_fragment((1,), f32)
            shift = T.alloc_fragment((1,), f32)
            m = T.alloc_fragment((1,), f32)
            s = T.alloc_fragment((1,), f32)
            T.fill(m, NEG)
            T.fill(s, 0.0)
            for t, j in T.Parallel(tiles, tile):    # the whole row's loads in flight at once
                row[t, j] = T.if_then_else(t * tile + j < N, X[r, t * tile + j], T.cast(NEG, dtype))
            for t in T.serial(T.ceildiv(N, tile)):
                for j in T.Parallel(tile):
                    x[j] = T.cast(row[t, j], f32)
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
                        Y[r, t * tile + j] = T.cast(T.exp2((T.cast(row[t, j], f32) - m[0]) * LOG2E) * s[0], dtype)

    return softmax_smem
