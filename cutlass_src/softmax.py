"""Row softmax in the CuTe DSL, the teaching twin (cute:softmax_simple).

One CTA of 256 threads per row, two passes over the row, fp32 math, any N and any layout:

1. each thread walks the columns t, t + 256, ... keeping a running max m and a running sum
   s = sum exp(x - m) (when a larger value arrives, the sum so far is rescaled by exp(old - new));
2. the 256 (m, s) pairs are merged - warp butterflies, then one pair per warp through shared
   memory - into the row's max M and sum S;
3. each thread walks its columns again and writes exp(x - M) / S.

The row is read twice (3 x the bytes of the tuned kernels' single read + write). The tuned
variants keep the row in registers, move 16 bytes per access, and overlap rows (``softmax_rows``,
``softmax_block``, ``softmax_split``, ``softmax_cluster``; chosen by ``dispatch.plan_softmax``).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, fake_stream, stream_args

THREADS = 256
LOG2E = 1.4426950408889634


@cute.jit
def merge(m: cutlass.Float32, s: cutlass.Float32, om: cutlass.Float32, os_: cutlass.Float32):
    """(max, sum) of two partial (max, sum of exp(x - max)); a max of -inf contributes nothing."""
    top = cute.arch.fmax(m, om)
    out = cutlass.Float32(0.0)
    if m != -cutlass.Float32.inf:
        out = out + s * cute.math.exp2((m - top) * LOG2E, fastmath=True)
    if om != -cutlass.Float32.inf:
        out = out + os_ * cute.math.exp2((om - top) * LOG2E, fastmath=True)
    return top, out


class SoftmaxSimple:
    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor):
        t, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        n = cute.size(mX, mode=[1])
        x, out = mX[row, None], mO[row, None]

        m, s = -cutlass.Float32.inf, cutlass.Float32(0.0)     # pass 1: running max and sum
        for c in cutlass.range(t, n, THREADS, unroll=1):
            m, s = merge(m, s, x[c].to(cutlass.Float32), cutlass.Float32(1.0))

        for off in cutlass.range_constexpr(5):                   # the warp's pairs
            m, s = merge(m, s, cute.arch.shuffle_sync_bfly(m, 16 >> off),
                         cute.arch.shuffle_sync_bfly(s, 16 >> off))
        pairs = SmemAllocator().allocate_tensor(cutlass.Float32, cute.make_layout((2, THREADS // 32)), 16)
        warp = cute.arch.warp_idx()       # a shuffle of the whole warp: outside the lane-0 branch
        if cute.arch.lane_idx() == 0:
            pairs[0, warp] = m
            pairs[1, warp] = s
        cute.arch.sync_threads()
        m, s = pairs[0, 0], pairs[1, 0]                          # the CTA's pairs
        for w in cutlass.range_constexpr(1, THREADS // 32):
            m, s = merge(m, s, pairs[0, w], pairs[1, w])

        inv = cutlass.Float32(1.0) / s                           # a row of only -inf: NaN, as torch
        for c in cutlass.range(t, n, THREADS, unroll=1):         # pass 2: write
            v = cute.math.exp2((x[c].to(cutlass.Float32) - m) * LOG2E, fastmath=True) * inv
            out[c] = v.to(mO.element_type)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream):
        self.kernel(mX, mO).launch(grid=(cute.size(mX, mode=[0]), 1, 1), block=(THREADS, 1, 1),
                                   stream=stream)


def _compile(dtype):
    key = ("softmax_simple", str(dtype))
    c = cached(key)
    if c is not None:
        return c
    from .softmax_base import fake_rows

    return compile_kernel(key, SoftmaxSimple(), *fake_rows(dtype), fake_stream())


def prepare_softmax_simple(x, out):
    """Validate, compile (cached); returns (launch, compiled)."""
    from .softmax_base import row_args, validate

    validate(x, out)
    comp = _compile(x.dtype)
    args = row_args(x, out)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp
