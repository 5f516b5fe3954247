"""softmax for short rows (cute:softmax_rows): several rows per CTA, a row per group of lanes, per
warp or per few warps, and the next row's loads in flight while the current row is reduced and
stored.

With a CTA per row (``softmax_block.py``) a row of a few KB lives for one load -> reduce -> store
chain, and the SM's loads stop while its CTAs reduce and store. Here a CTA of 256 threads holds
256/G row groups of G threads (G <= 32: lanes of one warp, shuffles only, no barrier; G is
chosen so the row fills the group's vectors, a 256-byte row on 4 lanes). The grid is capped at
what fits on the GPU at once, so each group walks rows with a grid stride and, before it reduces
row i, issues the 128-bit loads of row i + stride into a second register buffer: HBM keeps
streaming while the shuffles, exps and stores of the current row run. Per row (fp32 math): max,
then sum of exp(x - max), then exp(x - max) / sum from the raw values in registers. Rows at any
alignment: ``softmax_base``'s 16-byte vectors from the boundary at or before each row.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, fake_stream, stream_args
from .softmax_base import LOG2E, add, fake_rows, fmax, load_row, row_args, row_vectors, store_row, validate

THREADS = 256


@cute.jit
def group_reduce(val: cutlass.Float32, op, red: cute.Tensor, group, warps_per_group: cutlass.Constexpr,
                 lanes: cutlass.Constexpr = 32):
    """Butterfly over ``lanes`` lanes (a group smaller than a warp: its own lanes only); with several
    warps per row group, one value per warp through shared memory (every warp of the CTA reaches
    the barrier: the row loop's trip count is CTA-uniform)."""
    val = cute.arch.warp_reduction(val, op, threads_in_group=lanes)
    if cutlass.const_expr(warps_per_group > 1):
        wig = cute.arch.warp_idx() % warps_per_group
        if cute.arch.lane_idx() == 0:
            red[group * warps_per_group + wig] = val
        cute.arch.barrier()
        val = red[group * warps_per_group]
        for w in cutlass.range_constexpr(1, warps_per_group):
            val = op(val, red[group * warps_per_group + w])
    return val


class SoftmaxRows:
    def __init__(self, group: int, k: int, vec: int, grid_cap: int, ctas_per_sm: int = 0):
        self.g, self.k, self.vec, self.grid_cap = group, k, vec, grid_cap
        self.ctas_per_sm = ctas_per_sm               # launch bound: the capped grid is resident at once
        self.threads = max(THREADS, group)
        self.rows = self.threads // group            # row groups per CTA
        self.wpg = group // 32                        # warps per row group

    @cute.jit
    def load(self, mX: cute.Tensor, row, m, n, t, rX: cute.Tensor):
        """This thread's vectors of row ``row`` (all -inf past the last row)."""
        if row < m:
            vx, phase = row_vectors(mX[row, None], self.vec)
            load_row(vx, t, self.g, t * self.vec - phase, self.g * self.vec, n, rX)
        else:
            rX.fill(-cutlass.Float32.inf)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        m = cute.size(mX, mode=[0])
        n = cute.size(mX, mode=[1])
        grp = tidx // self.g                          # row group within the CTA
        t = tidx % self.g                             # thread within the row group
        smem = SmemAllocator()
        # two buffers: a row's max buffer is rewritten (next row) only after every thread passed
        # the barrier of this row's sum reduction, which follows its reads
        red_max = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        red_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)

        frag = cute.make_layout((self.vec, self.k))
        rCur = cute.make_rmem_tensor(frag, mX.element_type)
        rNext = cute.make_rmem_tensor(frag, mX.element_type)
        rO = cute.make_rmem_tensor(frag, mO.element_type)
        blocks = (m + self.rows - 1) // self.rows     # row blocks of R rows
        self.load(mX, bidx * self.rows + grp, m, n, t, rCur)
        # CTA-uniform trip count: every warp reaches the group barriers of every iteration
        for blk in cutlass.range(bidx, blocks, gdim, unroll=1):
            row = blk * self.rows + grp
            self.load(mX, (blk + gdim) * self.rows + grp, m, n, t, rNext)   # next row, in flight
            x = rCur.load().to(cutlass.Float32)
            row_max = group_reduce(x.reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0), fmax,
                                   red_max, grp, self.wpg, min(self.g, 32))
            shift = row_max
            if row_max == -cutlass.Float32.inf:
                shift = cutlass.Float32(0.0)
            e = cute.math.exp2((x - shift) * LOG2E, fastmath=True)
            row_sum = group_reduce(e.reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0), add,
                                   red_sum, grp, self.wpg, min(self.g, 32))
            rO.store((e * (cutlass.Float32(1.0) / row_sum)).to(mO.element_type))
            if row < m:
                vx, phase = row_vectors(mX[row, None], self.vec)
                vo, phase_o = row_vectors(mO[row, None], self.vec)
                store_row(mO[row, None], vo, phase_o == phase, t, self.g, t * self.vec - phase, n, rO)
            rCur.store(rNext.load())

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream):
        m = cute.size(mX, mode=[0])
        blocks = (m + self.rows - 1) // self.rows
        grid = cutlass.min(blocks, self.grid_cap)
        self.kernel(mX, mO).launch(grid=(grid, 1, 1), block=(self.threads, 1, 1), stream=stream,
                                   min_blocks_per_mp=self.ctas_per_sm,
                                   # a stated carveout keeps the compile free of device queries
                                   preferred_smem_carveout=100 if self.ctas_per_sm > 1 else None)


def compile_rows(dtype, p: dict):
    """Compile (cached) for a plan {vec, group, k, grid_cap, ctas_per_sm}."""
    key = ("softmax_rows", str(dtype), p["vec"], p["group"], p["k"], p["grid_cap"], p.get("ctas_per_sm", 0))
    c = cached(key)
    if c is not None:
        return c
    return compile_kernel(key, SoftmaxRows(p["group"], p["k"], p["vec"], p["grid_cap"], p.get("ctas_per_sm", 0)),
                          *fake_rows(dtype), fake_stream())


def prepare_softmax_rows(x, out, plan: dict):
    """Validate, compile (cached) the plan's kernel; returns (launch, compiled, plan)."""
    validate(x, out)
    comp = compile_rows(x.dtype, plan)
    args = row_args(x, out)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp, plan
