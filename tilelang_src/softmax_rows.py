"""Row softmax with whole rows in registers: ``rows`` rows per CTA, one read and one write.

The CTA loads a ``rows x cols`` tile (``cols``, a power of two >= N, set by the planner per shape
class; out-of-row columns and rows past M read as -inf), reduces each row's max and sum of exp
across its threads (``T.reduce_max`` / ``T.reduce_sum`` along dim 1) and writes exp(x - max) / sum.
Short rows share a CTA (``rows`` > 1) so a CTA still has a few KB in flight; long rows take a CTA
each. Dynamic M, N and row strides: one compile per (dtype, cols, rows, threads). The guarded
accesses are element loads, right at any row alignment.

``softmax_rows_vec_kernel`` (the ``tilelang:softmax_rows`` variant; not yet run on a GPU) is the
same algorithm in 16-byte vectors. X and Y come as flat 1-D views that start on a 16-byte boundary
(the adapter builds them); row r is the elements [start, start + n), start = off + r * sx. Column
j of the fragment maps to the flat element (start // vec) * vec + j, so each thread's ``vec``
neighbours (vec = 16 bytes / element size) form one aligned 16-byte group: a group wholly inside
the row is one vector load with no per-element guard, and only the row's partial first and last
groups take guarded element loads. ``cols`` covers the row plus one group of slack where rows do
not start on 16 bytes. The kernel guards every access itself, so it is compiled with TileLang's
per-element bounds legalisation off (it would split the vectors). Y's rows have X's alignment
(the adapter checks it); m, n, sx and off are run-time values.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634


def softmax_rows_kernel(dtype: str, cols: int, rows: int, threads: int):
    M, N = T.dynamic("M"), T.dynamic("N")
    SX, SY = T.dynamic("SX"), T.dynamic("SY")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.prim_func
    def softmax_rows(X: T.StridedTensor((M, N), (SX, 1), dtype), Y: T.StridedTensor((M, N), (SY, 1), dtype)):
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

    return softmax_rows


def softmax_rows_vec_kernel(dtype: str, cols: int, rows: int, threads: int, vec: int):
    L = T.dynamic("L")
    f32 = "float32"
    NEG = -T.infinity(f32)

    @T.macro
    def groups(b, i, j, m, n, sx, off, whole):
        """(flat element of column j of CTA b's row i, is it to be moved by this pass)"""
        start = off + (b * rows + i) * sx
        g0 = (start // vec) * vec + (j // vec) * vec          # the first element of j's group
        inside = g0 >= start and g0 + vec <= start + n
        e = (start // vec) * vec + j
        return e, b * rows + i < m and (inside if whole else (not inside and e >= start and e < start + n))

    @T.prim_func
    def softmax_rows_vec(X: T.Tensor((L,), dtype), Y: T.Tensor((L,), dtype), m: T.int32, n: T.int32,
                     sx: T.int32, off: T.int32):
        with T.Kernel(T.ceildiv(m, rows), threads=threads) as b:
            x = T.alloc_fragment((rows, cols), f32)
            y = T.alloc_fragment((rows, cols), dtype)
            mx = T.alloc_fragment((rows,), f32)
            sm = T.alloc_fragment((rows,), f32)
            T.fill(x, NEG)
            for i, j in T.Parallel(rows, cols):      # whole groups: 16-byte loads
                e, go = groups(b, i, j, m, n, sx, off, True)
                if go:
                    x[i, j] = T.cast(X[e], f32)
            for i, j in T.Parallel(rows, cols):      # the row's partial first and last groups
                e, go = groups(b, i, j, m, n, sx, off, False)
                if go:
                    x[i, j] = T.cast(X[e], f32)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(rows, cols):
                x[i, j] = T.exp2((x[i, j] - mx[i]) * LOG2E)
            T.reduce_sum(x, sm, dim=1)
            for i in T.Parallel(rows):
                sm[i] = 1.0 / sm[i]
            for i, j in T.Parallel(rows, cols):
                y[i, j] = T.cast(x[i, j] * sm[i], dtype)
            for i, j in T.Parallel(rows, cols):
                e, go = groups(b, i, j, m, n, sx, off, True)
                if go:
                    Y[e] = y[i, j]
            for i, j in T.Parallel(rows, cols):
                e, go = groups(b, i, j, m, n, sx, off, False)
                if go:
                    Y[e] = y[i, j]

    return softmax_rows_vec
