"""Vector add, unmasked: full tiles of 16-byte vectors without a guard, one guarded last tile.

A CTA of ``threads`` threads covers ``threads * vec * unroll`` elements. Where the whole tile is in
bounds the loop has no guard, so TileLang's vectoriser turns each thread's ``vec`` neighbours into
one 16-byte load (``vec = 16 / element size``) and the tile into ``unroll`` such loads per operand;
the one tile that straddles N takes the guarded element path. The vectors assume 16-byte aligned
pointers (the planner sends misaligned views to the element kernel).
"""

import tilelang.language as T


def vector_add_unmasked_kernel(dtype: str, threads: int, vec: int, unroll: int):
    N = T.dynamic("N")
    tile = threads * vec * unroll

    @T.prim_func
    def vector_add_unmasked(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, tile), threads=threads) as bx:
            base = bx * tile
            if base + tile <= N:
                for i in T.Parallel(tile):
                    Z[base + i] = X[base + i] + Y[base + i]
            else:
                for i in T.Parallel(tile):
                    if base + i < N:
                        Z[base + i] = X[base + i] + Y[base + i]

    return vector_add_unmasked
