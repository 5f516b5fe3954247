"""Vector add, the TileLang way, shortest form: out = x + y.

One CTA of 256 threads per 1024 elements; ``T.Parallel`` spreads the tile over the threads and the
guard ``i < N`` masks the last tile. N is a dynamic dimension (``T.dynamic``), so one compile serves
every length. The guarded loop is left as element accesses (the vectoriser cannot prove a guarded
group of elements in bounds), which also makes it right at any pointer alignment.
"""

import tilelang.language as T

BLOCK = 1024
THREADS = 256


def vector_add_kernel(dtype: str):
    N = T.dynamic("N")

    @T.prim_func
    def vector_add(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK), threads=THREADS) as bx:
            for i in T.Parallel(BLOCK):
                if bx * BLOCK + i < N:
                    Z[bx * BLOCK + i] = X[bx * BLOCK + i] + Y[bx * BLOCK + i]

    return vector_add
