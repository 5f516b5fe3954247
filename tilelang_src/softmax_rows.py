"""Row softmax with whole rows in registers: ``rows`` rows per CTA, one read and one write.

The CTA loads a ``rows x cols`` tile (``cols``, a power of two >= N, set by the planner per shape
class; columns past N and rows past M read as -inf), reduces each row's max and sum of exp
across the threads that hold it (``T.reduce_max`` / ``T.reduce_sum`` along dim 1) and writes
exp(x - max) * (1 / sum). TileLang spreads the tile over the threads in 16-byte groups of
consecutive columns, so a row of up to 32 groups sits in one warp (shuffle reductions only) and
short rows share a CTA.

M, N and both row strides are dynamic: one compile per (dtype, cols, rows, threads, aligned).
``aligned`` is the alignment class, a compile-time fact: N and both row strides are multiples of
16 bytes and both tensors start on 16 bytes (the host checks). ``T.assume`` hands those facts to
TileLang, which then proves every group of ``vec`` columns wholly inside or wholly outside the row
and moves it as one 16-byte access. Without them (odd N, an odd stride or start) the same code
moves single elements, right at any alignment.

``softmax_rows_element_kernel`` is the kernel today's default plans (pending the GPU check of
the one above, ``dispatch.SWITCHES["softmax_next"]``): the same algorithm with a CTA-wide
layout and element accesses at every alignment.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634


def row_layout(rows: int, cols: int, threads: int, tpr: int, vec: int):
    """The fragment layout: ``tpr`` consecutive threads a row (a warp or fewer: shuffle-only
    reductions; or the whole CTA), each holding every ``tpr``-th 16-byte group of ``vec`` columns,
    ``threads // tpr`` rows side by side; a warp's accesses cover consecutive groups."""
    per_pass = threads // tpr

    def forward(i, j):
        group = j // vec
        thread = (i % per_pass) * tpr + group % tpr
        index = (i // per_pass) * (cols // tpr) + (group // tpr) * vec + j % vec
        return thread, index
    return T.Fragment((rows, cols), forward_fn=forward)


def softmax_rows_kernel(dtype: str, cols: int, rows: int, threads: int, tpr: int, aligned: bool):
    M, N = T.dynamic("M"), T.dynamic("N")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    vec = 16 // (4 if dtype == "float32" else 2)
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_rows(X: T.StridedTensor((M, N), (SX, 1), dtype), Y: T.StridedTensor((M, N), (SY, 1), dtype)):
        with T.Kernel(T.ceildiv(M, rows), threads=threads) as b:
            if aligned:
                T.assume(N % vec == 0)
                T.assume(SX % vec == 0)
                T.assume(SY % vec == 0)
            raw = T.alloc_fragment((rows, cols), dtype)
            x = T.alloc_fragment((rows, cols), f32)
            T.annotate_layout({raw: row_layout(rows, cols, threads, tpr, vec), x: row_layout(rows, cols, threads, tpr, vec)})
            mx = T.alloc_fragment((rows,), f32)
            sm = T.alloc_fragment((rows,), f32)
            for i, j in T.Parallel(rows, cols):     # every load issued before the first is used
                if b * rows + i < M and j < N:
                    raw[i, j] = X[b * rows + i, j]
            for i, j in T.Parallel(rows, cols):
                x[i, j] = T.if_then_else(b * rows + i < M and j < N, T.cast(raw[i, j], f32), NEG)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(rows, cols):
                x[i, j] = T.exp2((x[i, j] - mx[i]) * LOG2E)
            T.reduce_sum(x, sm, dim=1)
            for i in T.Parallel(rows):
                sm[i] = 1.0 / sm[i]
            for i, j in T.Parallel(rows, cols):
                if b * rows + i < M and j < N:
                    Y[b * rows + i, j] = T.cast(x[i, j] * sm[i], dtype)

    return softmax_rows


def softmax_rows_element_kernel(dtype: str, cols: int, rows: int, threads: int):
    M, N = T.dynamic("M"), T.dynamic("N")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_rows_element(X: T.StridedTensor((M, N), (SX, 1), dtype), Y: T.StridedTensor((M, N), (SY, 1), dtype)):
        with T.Kernel(T.ceildiv(M, rows), threads=threads) as b:
            x = T.alloc_fragment((rows, cols), f32)
            mx = T.alloc_fragment((rows,), f32)
            sm = T.alloc_fragment((rows,), f32)
            for i, j in T.Parallel(rows, cols):
                x[i, j] = T.if_then_else(b * rows + i < M and j < N, T.cast(X[b * rows + i, j], f32), NEG)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(rows, cols):
                x[i, j] = T.exp2((x[i, j] - mx[i]) * LOG2E)
            T.reduce_sum(x, sm, dim=1)
            for i, j in T.Parallel(rows, cols):
                if b * rows + i < M and j < N:
                    Y[b * rows + i, j] = T.cast(x[i, j] / sm[i], dtype)

    return softmax_rows_element
