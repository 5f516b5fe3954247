"""Row softmax with the row staged in shared memory: a CTA per row, one read and one write.

The CTA first copies its whole row, raw, into shared memory (``cols`` elements, the row length
rounded up to the tile; every thread's loads issued back to back, so a CTA has the row in
flight), then walks it in tiles of ``tile`` columns from shared memory folding the running
(max, sum of exp) online, and finally writes exp(x - max) / sum from shared memory. Rows too long for registers but short enough for shared
memory (up to ~200 KB a CTA) move 2 x N elements, as a copy does. Dynamic M, N and strides.

``softmax_smem_vec_kernel`` (the ``tilelang:softmax_smem`` variant; not yet run on a GPU) is the
same algorithm in 16-byte vectors over flat views from a 16-byte boundary (row r is the elements
[start, start + n), start = off + r * sx): the staged span starts at the 16-byte group at or
below ``start`` (``cols`` covers the row plus one group of slack); whole groups are copied to
shared memory as vectors, the row's partial first and last groups element by element, the rest
of the span set to -inf; the output is written back in the same split. Compiled with TileLang's
per-element bounds legalisation off (the kernel guards every access itself).
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


def softmax_smem_vec_kernel(dtype: str, cols: int, tile: int, threads: int, vec: int):
    L = T.dynamic("L")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.macro
    def group(a0, c, start, n, whole):
        g0 = a0 + (c // vec) * vec
        inside = g0 >= start and g0 + vec <= start + n
        e = a0 + c
        return e, (inside if whole else (not inside and e >= start and e < start + n))

    @T.prim_func
    def softmax_smem_vec(X: T.Tensor((L,), dtype), Y: T.Tensor((L,), dtype), n: T.int32, sx: T.int32,
                         off: T.int32, m: T.int32):
        with T.Kernel(m, threads=threads) as r:
            row = T.alloc_shared((cols,), dtype)
            x = T.alloc_fragment((tile,), f32)
            y = T.alloc_fragment((tile,), dtype)
            tmax = T.alloc_fragment((1,), f32)
            tsum = T.alloc_fragment((1,), f32)
            shift = T.alloc_fragment((1,), f32)
            mm = T.alloc_fragment((1,), f32)
            s = T.alloc_fragment((1,), f32)
            start = off + r * sx
            a0 = (start // vec) * vec
            T.fill(mm, NEG)
            T.fill(s, 0.0)
            T.fill(row, T.cast(NEG, dtype))
            for c in T.Parallel(cols):      # the whole span's loads in flight at once
                e, go = group(a0, c, start, n, True)
                if go:
                    row[c] = X[e]
            for c in T.Parallel(cols):      # the row's partial first and last groups
                e, go = group(a0, c, start, n, False)
                if go:
                    row[c] = X[e]
            for t in T.serial(T.ceildiv(start + n - a0, tile)):
                for j in T.Parallel(tile):
                    x[j] = T.cast(row[t * tile + j], f32)
                T.reduce_max(x, tmax, dim=0)
                for i in T.Parallel(1):
                    tmax[i] = T.max(mm[i], tmax[i])
                    shift[i] = T.if_then_else(tmax[i] == NEG, 0.0, tmax[i])
                for j in T.Parallel(tile):
                    x[j] = T.exp2((x[j] - shift[0]) * LOG2E)
                T.reduce_sum(x, tsum, dim=0)
                for i in T.Parallel(1):
                    s[i] = s[i] * T.exp2((mm[i] - shift[i]) * LOG2E) + tsum[i]
                    mm[i] = tmax[i]
            for i in T.Parallel(1):
                s[i] = 1.0 / s[i]
            for t in T.serial(T.ceildiv(start + n - a0, tile)):
                for j in T.Parallel(tile):
                    y[j] = T.cast(T.exp2((T.cast(row[t * tile + j], f32) - mm[0]) * LOG2E) * s[0], dtype)
                for j in T.Parallel(tile):
                    e, go = group(a0, t * tile + j, start, n, True)
                    if go:
                        Y[e] = y[j]
                for j in T.Parallel(tile):
                    e, go = group(a0, t * tile + j, start, n, False)
                    if go:
                        Y[e] = y[j]

    return softmax_smem_vec
