"""softmax, a row per CTA held in registers (cute:softmax_block).

The row is read as 16-byte vectors from the 16-byte boundary at or before its first element
(``softmax_base``: any alignment keeps 128-bit accesses). Thread t holds vectors k*T + t, k < K -
a warp's loads adjacent - all loaded before the first use. Then in fp32: the CTA's max and sum of
exp(x - max) (warp butterflies, one value per warp in shared memory), and out = exp(x - M) / S
from the raw values still in registers. One read and one write per element. T and K are
compile-time (from N); M, N, strides and alignment are run-time. A row longer than a CTA's
registers hold goes to a cluster of CTAs (``softmax_cluster.py``).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, fake_stream, stream_args
from .softmax_base import fake_rows, load_row, normalise, row_args, row_stats, row_vectors, store_row, validate


class SoftmaxBlock:
    def __init__(self, threads: int, k: int, vec: int):
        self.threads, self.k, self.vec = threads, k, vec

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        n = cute.size(mX, mode=[1])
        smem = SmemAllocator()
        red_max = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        red_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)

        vx, phase = row_vectors(mX[bidx, None], self.vec)
        vo, phase_o = row_vectors(mO[bidx, None], self.vec)
        col0 = tidx * self.vec - phase
        rX = cute.make_rmem_tensor(cute.make_layout((self.vec, self.k)), mX.element_type)
        load_row(vx, tidx, self.threads, col0, self.threads * self.vec, n, rX)
        m, s = row_stats(rX, red_max, red_sum, self.threads // 32)

        # a row of only -inf: (-inf) - (-inf) = NaN, and NaN is torch's answer too
        rO = cute.make_rmem_tensor(cute.make_layout((self.vec, self.k)), mO.element_type)
        normalise(rX, m, cutlass.Float32(1.0) / s, rO)
        store_row(mO[bidx, None], vo, phase_o == phase, tidx, self.threads, col0, n, rO)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream):
        m = cute.size(mX, mode=[0])
        self.kernel(mX, mO).launch(grid=(m, 1, 1), block=(self.threads, 1, 1), stream=stream)


def compile_block(dtype, p: dict):
    """Compile (cached) for a plan {vec, threads, k} (a CTA a row: cluster 1)."""
    if p.get("cluster", 1) != 1:
        raise ValueError(f"cluster: softmax_block runs a CTA a row, got cluster {p['cluster']} "
                         f"(softmax_cluster takes C >= 2)")
    key = ("softmax_block", str(dtype), p["vec"], p["threads"], p["k"])
    c = cached(key)
    if c is not None:
        return c
    return compile_kernel(key, SoftmaxBlock(p["threads"], p["k"], p["vec"]), *fake_rows(dtype), fake_stream())


def prepare_softmax_block(x, out, plan: dict):
    """Validate, compile (cached) the plan's kernel; returns (launch, compiled, plan)."""
    validate(x, out)
    comp = compile_block(x.dtype, plan)
    args = row_args(x, out)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp, plan
