"""Row softmax split over CTAs, for few long rows: ``C`` CTAs per row, so a handful of rows still
fills the GPU.

Kernel 1 (stats): CTA (c, r) walks chunk c of row r's whole 16-byte groups (``row_groups``) in
tiles of ``units`` groups a thread. A tile is a ``threads x units * vec`` fragment, row i in
thread i (``thread_rows``), so its max and its sum of exp are thread-local reductions: each
thread keeps a running (max, sum) of its own elements, rescaled once a tile, one exp an
element. The CTA then merges its threads' pairs and stores the chunk's pair to ``W[r, c]``;
CTA 0 of the row folds in the row's partial head and tail groups (``edges``).
Kernel 2 (write): CTA (c, r) merges the C pairs of its row (max of the maxima; sum of
s_c exp(m_c - m)) and streams its chunk again (mostly from L2): exp(x - m) / s.
C is W's second dimension (dynamic): one compile per (dtype, threads, units, edges) serves
every split; the grid is C x M (the planner sends only rows fewer than the SMs here).

``softmax_split_element_stats_kernel`` / ``softmax_split_element_write_kernel`` are the kernels
today's default plans (pending the GPU check of the ones above,
``dispatch.SWITCHES["softmax_next"]``): the same two steps on the 2-D tensors with element
accesses and a CTA-wide reduction a tile.
"""
import tilelang.language as T

from .row_groups import LOG2E, bounds, edge_max, edge_sum, edge_write


def thread_rows(threads: int, width: int, vec: int):
    """Row i of a ``threads x width`` fragment in thread i; column k of it at flat offset
    (k // vec) * threads * vec + i * vec + k % vec of the tile (a warp's loads are consecutive)."""
    return T.Fragment((threads, width), forward_fn=lambda i, k: (i, k))


def tile_offset(i, k, threads: int, vec: int):
    return (k // vec) * threads * vec + i * vec + k % vec


def chunk(start, n, c, C, vec: int):
    """(ga, gb, lo, hi): the row's whole groups and chunk c of them, [lo, hi)."""
    ga, gb = bounds(start, n, vec)
    per = T.ceildiv(T.max(gb - ga, 0), C * vec) * vec
    return ga, gb, ga + c * per, T.min(ga + c * per + per, gb)


def softmax_split_stats_kernel(dtype: str, threads: int, units: int, edges: bool):
    L, R, C = T.dynamic("L"), T.dynamic("R"), T.dynamic("C")
    vec = 16 // (4 if dtype == "float32" else 2)
    width, tile = units * vec, threads * units * vec
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_split_stats(X: T.Tensor((L,), dtype), W: T.Tensor((R, C, 2), f32), m: T.int32, n: T.int32,
                            sx: T.int32, off: T.int32):
        with T.Kernel(C, m, threads=threads) as (c, r):
            raw = T.alloc_fragment((threads, width), dtype)
            x = T.alloc_fragment((threads, width), f32)
            tm = T.alloc_fragment((threads,), f32)        # this tile's max, then its sum, a thread
            pm = T.alloc_fragment((threads,), f32)        # running max, a thread
            ps = T.alloc_fragment((threads,), f32)        # running sum of exp(x - pm), a thread
            red = T.alloc_fragment((1,), f32)
            mx = T.alloc_local((1,), f32)
            s = T.alloc_local((1,), f32)
            T.annotate_layout({raw: thread_rows(threads, width, vec), x: thread_rows(threads, width, vec)})
            start = off + r * sx
            ga, gb, lo, hi = chunk(start, n, c, C, vec)
            T.fill(pm, NEG)
            T.fill(ps, 0.0)
            for t in T.serial(T.ceildiv(hi - lo, tile)):
                for i, k in T.Parallel(threads, width):     # every load issued before the first is used
                    if lo + t * tile + tile_offset(i, k, threads, vec) < hi:
                        raw[i, k] = X[lo + t * tile + tile_offset(i, k, threads, vec)]
                for i, k in T.Parallel(threads, width):
                    x[i, k] = T.if_then_else(lo + t * tile + tile_offset(i, k, threads, vec) < hi, T.cast(raw[i, k], f32), NEG)
                T.reduce_max(x, tm, dim=1)
                for i in T.Parallel(threads):
                    tm[i] = T.max(tm[i], pm[i])
                    ps[i] = T.if_then_else(tm[i] == NEG, 0.0, ps[i] * T.exp2((pm[i] - tm[i]) * LOG2E))
                    pm[i] = tm[i]
                for i, k in T.Parallel(threads, width):
                    x[i, k] = T.exp2((x[i, k] - T.if_then_else(pm[i] == NEG, 0.0, pm[i])) * LOG2E)
                T.reduce_sum(x, tm, dim=1)
                for i in T.Parallel(threads):
                    ps[i] += tm[i]
            T.reduce_max(pm, red, dim=0)
            mx[0] = red[0]
            if edges:
                if c == 0:
                    edge_max(X, mx, start, n, ga, gb, vec)
            shift = T.if_then_else(mx[0] == NEG, T.float32(0), mx[0])
            for i in T.Parallel(threads):       # each thread's sum, moved to the common shift
                tm[i] = T.if_then_else(ps[i] > 0, ps[i] * T.exp2((pm[i] - shift) * LOG2E), 0.0)
            T.reduce_sum(tm, red, dim=0)
            s[0] = red[0]
            if edges:
                if c == 0:
                    edge_sum(X, s, shift, start, n, ga, gb, vec)
            if T.get_thread_binding() == 0:
                W[r, c, 0] = shift
                W[r, c, 1] = s[0]

    return softmax_split_stats


def softmax_split_write_kernel(dtype: str, threads: int, units: int, edges: bool):
    L, R, C = T.dynamic("L"), T.dynamic("R"), T.dynamic("C")
    vec = 16 // (4 if dtype == "float32" else 2)
    width, tile = units * vec, threads * units * vec
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_split_write(X: T.Tensor((L,), dtype), W: T.Tensor((R, C, 2), f32), Y: T.Tensor((L,), dtype),
                            m: T.int32, n: T.int32, sx: T.int32, off: T.int32):
        with T.Kernel(C, m, threads=threads) as (c, r):
            x = T.alloc_fragment((threads, width), dtype)
            part = T.alloc_fragment((threads,), f32)
            red = T.alloc_fragment((1,), f32)
            mx = T.alloc_local((1,), f32)
            s = T.alloc_local((1,), f32)
            T.annotate_layout({x: thread_rows(threads, width, vec)})
            start = off + r * sx
            ga, gb, lo, hi = chunk(start, n, c, C, vec)
            T.fill(part, NEG)            # the C pairs merged by the whole CTA, a pair a thread
            for q in T.serial(T.ceildiv(C, threads)):
                for i in T.Parallel(threads):
                    if q * threads + i < C:
                        if W[r, q * threads + i, 1] > 0:
                            part[i] = T.max(part[i], W[r, q * threads + i, 0])
            T.reduce_max(part, red, dim=0)
            mx[0] = red[0]
            T.fill(part, 0.0)
            for q in T.serial(T.ceildiv(C, threads)):
                for i in T.Parallel(threads):   # a chunk with nothing in it has (shift, 0): it adds nothing
                    if q * threads + i < C:
                        if W[r, q * threads + i, 1] > 0:
                            part[i] += W[r, q * threads + i, 1] * T.exp2((W[r, q * threads + i, 0] - mx[0]) * LOG2E)
            T.reduce_sum(part, red, dim=0)
            s[0] = 1.0 / red[0]
            for t in T.serial(T.ceildiv(hi - lo, tile)):
                for i, k in T.Parallel(threads, width):
                    if lo + t * tile + tile_offset(i, k, threads, vec) < hi:
                        x[i, k] = X[lo + t * tile + tile_offset(i, k, threads, vec)]
                for i, k in T.Parallel(threads, width):
                    if lo + t * tile + tile_offset(i, k, threads, vec) < hi:
                        Y[lo + t * tile + tile_offset(i, k, threads, vec)] = T.cast(
                            T.exp2((T.cast(x[i, k], f32) - mx[0]) * LOG2E) * s[0], dtype)
            if edges:
                if c == 0:
                    edge_write(X, Y, T.get_thread_binding(), mx[0], s[0], start, n, ga, gb, vec, dtype)

    return softmax_split_write


def softmax_split_element_stats_kernel(dtype: str, tile: int, threads: int):
    M, N, C = T.dynamic("M"), T.dynamic("N"), T.dynamic("C")
    SX = T.dynamic("SX")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_split_element_stats(X: T.StridedTensor((M, N), (SX, 1), dtype), W: T.Tensor((M, C, 2), f32)):
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

    return softmax_split_element_stats


def softmax_split_element_write_kernel(dtype: str, tile: int, threads: int):
    M, N, C = T.dynamic("M"), T.dynamic("N"), T.dynamic("C")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_split_element_write(X: T.StridedTensor((M, N), (SX, 1), dtype), W: T.Tensor((M, C, 2), f32),
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

    return softmax_split_element_write
