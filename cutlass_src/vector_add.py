"""vector_add in the CuTe DSL, the teaching twin (cute:vector_add_simple): out = x + y.

Each CTA of 256 threads owns a tile of 256 x 4 elements. ``cute.zipped_divide`` cuts the vector
into such tiles; the thread-value layout ``(256, 4) : (1, 256)`` gives thread t the elements t,
t + 256, t + 512, t + 768 of its CTA's tile, so each of a warp's four accesses covers adjacent
elements (coalesced). An identity tensor partitioned the same way gives every element's index,
and an element is touched only where that index is below N: the last, ragged tile needs no other
code. One element per access at any alignment; the tuned kernel (``vector_add_unmasked.py``) moves
16 bytes per access.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from . import cached, compile_kernel, fake_stream, stream_args, to_cute

THREADS, PER_THREAD = 256, 4
TILE = THREADS * PER_THREAD


class VectorAddSimple:
    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor, mO: cute.Tensor):
        t, _, _ = cute.arch.thread_idx()
        b, _, _ = cute.arch.block_idx()
        tv = cute.make_layout((THREADS, PER_THREAD), stride=(1, THREADS))   # (thread, value) -> element
        tiles = [cute.zipped_divide(m, (TILE,)) for m in (mX, mY, mO)]
        gX, gY, gO = [cute.composition(tile[(None, b)], tv)[t, None] for tile in tiles]
        index = cute.composition(cute.zipped_divide(cute.make_identity_tensor(mX.shape), (TILE,))[(None, b)], tv)[t, None]
        for i in cutlass.range_constexpr(PER_THREAD):
            if cute.elem_less(index[i], mX.shape):
                gO[i] = gX[i] + gY[i]

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, mO: cute.Tensor, stream):
        tiles = (cute.size(mX) + TILE - 1) // TILE
        self.kernel(mX, mY, mO).launch(grid=(tiles, 1, 1), block=(THREADS, 1, 1), stream=stream)


def _compile(dtype):
    key = ("vector_add_simple", str(dtype))
    c = cached(key)
    if c is not None:
        return c
    import torch
    from cutlass.cute.runtime import make_fake_compact_tensor

    from . import cutlass_dtype

    n = cute.sym_int32()
    es = torch.empty((), dtype=dtype).element_size()
    fakes = [make_fake_compact_tensor(cutlass_dtype(dtype), (n,), assumed_align=es) for _ in range(3)]
    return compile_kernel(key, VectorAddSimple(), *fakes, fake_stream())


def prepare_vector_add_simple(x, y, out):
    """Validate, compile (cached); returns (launch, compiled)."""
    from .vector_add_unmasked import validate

    validate(x, y, out)
    comp = _compile(x.dtype)
    args = tuple(to_cute(t, t.element_size()) for t in (x, y, out))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp
