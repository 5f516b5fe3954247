"""Row softmax with the row staged in shared memory: one read, one write, for rows too long for
registers; a thread-block cluster of ``cluster`` CTAs per row where one CTA's shared memory is
too small.

CTA c of row r's cluster takes the c-th slice of the row's whole 16-byte groups
(``row_groups.bounds``) and:

1. copies its slice into shared memory with ``cp.async``, 16 bytes a thread a tile, every copy
   of the slice in flight at once (no registers staged; a copy past the slice is skipped);
2. reduces the max over the CTA, then walks its shared slice once more for the sum of
   exp(x - max) (each thread reads back the groups it copied; past the slice is masked);
3. with a cluster: publishes its (max, sum) pair to ``W[r, c]``, meets its peers at the cluster
   barrier (``T.cluster_sync``: arrive with release, wait with acquire semantics, so the pairs
   written before it are visible after it) and merges the ``cluster`` pairs;
4. writes exp(x - max) / sum from shared memory.

The row's partial head and tail groups (``edges``, a compile-time class) belong to CTA 0.
One compile per (dtype, cols, threads, cluster, edges); M, N, the row stride and the 16-byte
phase are run-time values.

``softmax_smem_element_kernel`` is the kernel today's default plans (pending the GPU check of
the one above, ``dispatch.SWITCHES["softmax_next"]``): a CTA per row (up to 220 KB), the row
copied element by element into shared memory, the (max, sum) folded online over its tiles.
"""
import tilelang.language as T

from .row_groups import LOG2E, bounds, edge_max, edge_sum, edge_write, vector_layout


def softmax_smem_kernel(dtype: str, cols: int, threads: int, cluster: int, edges: bool):
    L, R = T.dynamic("L"), T.dynamic("R")
    vec = 16 // (4 if dtype == "float32" else 2)
    tile = threads * vec
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_smem(X: T.Tensor((L,), dtype), Y: T.Tensor((L,), dtype), W: T.Tensor((R, cluster, 2), f32),
                     m: T.int32, n: T.int32, sx: T.int32, off: T.int32):
        with T.Kernel(cluster * m, threads=threads, cluster_dims=(cluster, 1, 1) if cluster > 1 else None) as bx:
            row = T.alloc_shared((cols,), dtype)
            part = T.alloc_fragment((tile,), f32)
            red = T.alloc_fragment((1,), f32)
            T.annotate_layout({part: vector_layout(tile, vec)})
            mx = T.alloc_local((1,), f32)
            s = T.alloc_local((1,), f32)
            c, r = bx % cluster, bx // cluster
            start = off + r * sx
            ga, gb = bounds(start, n, vec)
            per = T.ceildiv(T.max(gb - ga, 0), cluster * vec) * vec    # this CTA's slice, whole groups
            lo = ga + c * per
            hi = T.min(lo + per, gb)
            tx = T.get_thread_binding()
            for t in T.unroll(cols // tile):        # thread tx copies group tx of every tile
                g = t * tile + tx * vec
                T.ptx_cp_async(T.tvm_access_ptr(T.type_annotation(dtype), row.data, g, vec, 2),
                               T.tvm_access_ptr(T.type_annotation(dtype), X.data, lo + g, vec, 1), vec, lo + g < hi)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.sync_threads()
            T.fill(part, NEG)
            for t in T.serial(T.ceildiv(hi - lo, tile)):
                for j in T.Parallel(tile):      # past the slice the copy left zeros: masked
                    part[j] = T.max(part[j], T.if_then_else(lo + t * tile + j < hi, T.cast(row[t * tile + j], f32), NEG))
            T.reduce_max(part, red, dim=0)
            mx[0] = red[0]
            if edges:
                if c == 0:
                    edge_max(X, mx, start, n, ga, gb, vec)
            shift = T.if_then_else(mx[0] == NEG, T.float32(0), mx[0])    # an empty slice: sum 0
            T.fill(part, 0.0)
            for t in T.serial(T.ceildiv(hi - lo, tile)):
                for j in T.Parallel(tile):
                    if lo + t * tile + j < hi:
                        part[j] += T.exp2((T.cast(row[t * tile + j], f32) - shift) * LOG2E)
            T.reduce_sum(part, red, dim=0)
            s[0] = red[0]
            if edges:
                if c == 0:
                    edge_sum(X, s, shift, start, n, ga, gb, vec)
            if cluster > 1:
                if tx == 0:
                    W[r, c, 0] = shift
                    W[r, c, 1] = s[0]
                T.call_extern("handle", "__threadfence")   # the pair is out before the barrier ...
                T.cluster_sync()
                T.call_extern("handle", "__threadfence")   # ... and the peers' are read after it
                mx[0] = NEG
                for k in T.unroll(cluster):
                    mx[0] = T.max(mx[0], T.if_then_else(W[r, k, 1] > 0, W[r, k, 0], NEG))
                s[0] = 0.0
                for k in T.unroll(cluster):      # a slice with nothing in it has sum 0
                    s[0] += T.if_then_else(W[r, k, 1] > 0, W[r, k, 1] * T.exp2((W[r, k, 0] - mx[0]) * LOG2E), 0.0)
            else:
                mx[0] = shift
            s[0] = 1.0 / s[0]
            for t in T.serial(T.ceildiv(hi - lo, tile)):
                for j in T.Parallel(tile):
                    if lo + t * tile + j < hi:
                        Y[lo + t * tile + j] = T.cast(T.exp2((T.cast(row[t * tile + j], f32) - mx[0]) * LOG2E) * s[0], dtype)
            if edges:
                if c == 0:
                    edge_write(X, Y, tx, mx[0], s[0], start, n, ga, gb, vec, dtype)

    return softmax_smem


def softmax_smem_element_kernel(dtype: str, cols: int, tile: int, threads: int):
    M, N = T.dynamic("M"), T.dynamic("N")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    f32 = "float32"
    NEG = -T.infinity(f32)
    tiles = cols // tile

    @T.prim_func
    def softmax_smem_element(X: T.StridedTensor((M, N), (SX, 1), dtype), Y: T.StridedTensor((M, N), (SY, 1), dtype)):
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

    return softmax_smem_element
