"""The fused epilogue of every CuTe GEMM here: + bias[col], then none / relu / gelu(tanh), on the
fp32 accumulators before any rounding. ``act`` and ``has_bias`` are run-time codes (one uniform
branch per tile), so one compile serves the six epilogues."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

ACTS = ("none", "relu", "gelu")          # act codes 0, 1, 2
GELU_C = 0.7978845608028654              # sqrt(2/pi)
LOG2E = 1.4426950408889634


def act_code(act: str) -> int:
    if act not in ACTS:
        raise ValueError(f"act: {act!r} is not one of {', '.join(ACTS)}")
    return ACTS.index(act)


@cute.jit
def gelu_tanh(v: cutlass.Float32) -> cutlass.Float32:
    """0.5 v (1 + tanh(u)) written as v / (1 + exp(-2u)): no cancellation at either tail (the
    1 + tanh form loses every digit for large negative v), one exp2 and one rcp.approx."""
    u = GELU_C * (v + 0.044715 * v * v * v)
    return v * cute.arch.rcp_approx(1.0 + cute.math.exp2(u * (-2.0 * LOG2E), fastmath=True))


@cute.jit
def bias_act(acc: cute.Tensor, coords: cute.Tensor, mBias: cute.Tensor, n: cutlass.Int32,
             has_bias: cutlass.Int32, act: cutlass.Int32):
    """In place on a thread's accumulators: + bias[col] where the accumulator's column (from the
    identity tensor partitioned exactly like the accumulators) is inside N, then the activation."""
    if has_bias != 0:
        for i in cutlass.range(cute.size(acc), unroll_full=True):
            col = coords[i][1]
            if col < n:
                acc[i] = acc[i] + mBias[col].to(cutlass.Float32)
    if act == 1:
        for i in cutlass.range(cute.size(acc), unroll_full=True):
            acc[i] = cute.arch.fmax(acc[i], cutlass.Float32(0.0))
    elif act == 2:
        for i in cutlass.range(cute.size(acc), unroll_full=True):
            acc[i] = gelu_tanh(acc[i])
