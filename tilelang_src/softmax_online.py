"""Row softmax for rows longer than registers hold: a CTA per row, online (max, sum), then a write pass.

Pass 1 walks the row in tiles of ``tile`` columns with the running max and sum of exp kept online
(each tile's max raises the running max; the sum is rescaled by exp(old - new)); pass 2 reads the
row again (mostly from L2) and writes exp(x - max) / sum. Reads the row twice: 3 x N elements of
traffic per row against the 2 x N of a copy. Dynamic M, N and row strides.

``softmax_online_vec_kernel`` (the ``tilelang:softmax_online`` variant; not yet run on a GPU) is
the same algorithm in 16-byte vectors over flat views from a 16-byte boundary (row r is the
elements [start, start + n), start = off + r * sx): the row is walked in tiles from the 16-byte
group at or below ``start``; a thread's ``vec`` neighbours are one aligned group, loaded as one
vector where the group lies wholly inside the row; the row's partial first and last groups take
guarded element loads (only in the first and the last tile). Compiled with TileLang's per-element
bounds legalisation off (the kernel guards every access itself).
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


def softmax_online_vec_kernel(dtype: str, tile: int, threads: int, vec: int):
    L = T.dynamic("L")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.macro
    def group(base, j, start, n, whole):
        g0 = base + (j // vec) * vec
        inside = g0 >= start and g0 + vec <= start + n
        e = base + j
        return e, (inside if whole else (not inside and e >= start and e < start + n))

    @T.prim_func
    def softmax_online_vec(X: T.Tensor((L,), dtype), Y: T.Tensor((L,), dtype), n: T.int32, sx: T.int32,
                       off: T.int32, m: T.int32):
        with T.Kernel(m, threads=threads) as r:
            x = T.alloc_fragment((tile,), f32)
            y = T.alloc_fragment((tile,), dtype)
            tmax = T.alloc_fragment((1,), f32)
            tsum = T.alloc_fragment((1,), f32)
            shift = T.alloc_fragment((1,), f32)
            mm = T.alloc_fragment((1,), f32)
            s = T.alloc_fragment((1,), f32)
            start = off + r * sx
            a0 = (start // vec) * vec
            tiles = T.ceildiv(start + n - a0, tile)
            T.fill(mm, NEG)
            T.fill(s, 0.0)
            for t in T.serial(tiles):
                T.fill(x, NEG)
                for j in T.Parallel(tile):
                    e, go = group(a0 + t * tile, j, start, n, True)
                    if go:
                        x[j] = T.cast(X[e], f32)
                if t == 0 or t == tiles - 1:
                    for j in T.Parallel(tile):
                        e, go = group(a0 + t * tile, j, start, n, False)
                        if go:
                            x[j] = T.cast(X[e], f32)
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
            for t in T.serial(tiles):
                for j in T.Parallel(tile):
                    e, go = group(a0 + t * tile, j, start, n, True)
                    x[j] = NEG
                    if go:
                        x[j] = T.cast(X[e], f32)
                for j in T.Parallel(tile):
                    y[j] = T.cast(T.exp2((x[j] - mm[0]) * LOG2E) * s[0], dtype)
                for j in T.Parallel(tile):
                    e, go = group(a0 + t * tile, j, start, n, True)
                    if go:
                        Y[e] = y[j]
                if t == 0 or t == tiles - 1:
                    for j in T.Parallel(tile):
                        e, go = group(a0 + t * tile, j, start, n, False)
                        if go:
                            Y[e] = T.cast(T.exp2((T.cast(X[e], f32) - mm[0]) * LOG2E) * s[0], dtype)

    return softmax_online_vec
