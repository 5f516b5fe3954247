"""Row softmax with whole rows in registers: ``rows`` rows per CTA, one read and one write.

The CTA loads a ``rows x cols`` tile (``cols``, a power of two >= N, set by the planner per shape
class; out-of-row columns and rows past M read as -inf), reduces each row's max and sum of exp
across its threads (``T.reduce_max`` / ``T.reduce_sum`` along dim 1) and writes exp(x - max) / sum.
Short rows share a CTA (``rows`` > 1) so a CTA still has a few KB in flight; long rows take a CTA
each. Dynamic M, N and row strides: one compile per (dtype, cols, rows, threads). The guarded
accesses are element loads, right at any row alignment.
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
