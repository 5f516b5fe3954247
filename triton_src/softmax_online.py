"""Row softmax, ``online``: rows of any length in column tiles, on a persistent grid.

Pass 1 streams a row's tiles keeping a running max and a running sum per lane, rescaled as the
max grows (one exp per element: of the old max and the new value one is the new max, so only
exp(min - max) is needed). Pass 2 streams the tiles again, last tile first, and writes
exp(x - max) / sum: the tiles read last in pass 1 are the likeliest to be still in L2 (pass 1 loads
``evict_last``, pass 2 ``evict_first``). HBM traffic is one write and one to two reads, depending on
how much of the rows in flight L2 holds: the grid is persistent (programs loop over rows
``pid, pid + grid, ...``) so that ``dispatch`` can bound the rows in flight (grid x row bytes)
by the L2 size.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .runtime import Spec, bind_spec


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, M, N, stride_x, stride_out, BLOCK_N: tl.constexpr,
                          NUM_STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    n_tiles = tl.cdiv(N, BLOCK_N)
    NEG_INF: tl.constexpr = -float("inf")
    for row in tl.range(tl.program_id(0), M, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * stride_x
        o_row = out_ptr + tl.cast(row, tl.int64) * stride_out
        # pass 1: per-lane running max m and running sum s of exp(x - m)
        m = tl.full([BLOCK_N], NEG_INF, tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
            c = start + cols
            x = tl.load(x_row + c, mask=c < N, other=NEG_INF, eviction_policy="evict_last").to(tl.float32)
            hi = tl.maximum(m, x)
            e = tl.exp(tl.minimum(m, x) - hi)          # exp(old max - new max) or exp(x - new max)
            e = tl.where(hi == NEG_INF, 0.0, e)        # both -inf: nothing seen yet in this lane
            s = tl.where(x > m, s * e + 1.0, s + e)
            m = hi
        row_max = tl.max(m, axis=0)
        inv_sum = 1.0 / tl.sum(s * tl.where(m == NEG_INF, 0.0, tl.exp(m - row_max)), axis=0)
        # pass 2: newest tiles first (most likely still in L2), write exp(x - max) / sum
        for t in tl.range(0, n_tiles, num_stages=NUM_STAGES):
            c = (n_tiles - 1 - t) * BLOCK_N + cols
            x = tl.load(x_row + c, mask=c < N, other=NEG_INF, eviction_policy="evict_first").to(tl.float32)
            tl.store(o_row + c, (tl.exp(x - row_max) * inv_sum).to(out_ptr.dtype.element_ty), mask=c < N)


def config(N: int, block: int, num_warps: int, num_stages: int, programs: int) -> dict:
    if block < 16 or block & (block - 1):
        raise ValueError(f"block: must be a power of two >= 16, got {block}")
    return {"BLOCK_N": min(block, max(16, triton.next_power_of_2(N))), "num_warps": num_warps,
            "NUM_STAGES": num_stages, "programs": programs}


def launch_spec(x, out, cfg: dict) -> Spec:
    M, N = x.shape
    return Spec(softmax_online_kernel, (max(1, min(M, cfg["programs"])),),
                {"x_ptr": x, "out_ptr": out, "M": M, "N": N, "stride_x": x.stride(0),
                 "stride_out": out.stride(0), "BLOCK_N": cfg["BLOCK_N"],
                 "NUM_STAGES": cfg["NUM_STAGES"]}, {"num_warps": cfg["num_warps"]})


def bind_launch(x, out, cfg: dict):
    return bind_spec(launch_spec(x, out, cfg), x.device)
