"""Row softmax in Triton, the teaching twin: y = exp(x - max) / sum(exp(x - max)) per row.

One program per row walks the row in tiles of BLOCK columns, so any row length works. Pass 1 is
the online softmax (Milakov & Gimelshein, 2018): a running max ``m`` and a running sum ``s`` of
exp(x - m); when a tile raises the max, the sum so far is rescaled by exp(old m - new m). Pass 2
reads the row again and writes exp(x - m) / s. Subtracting the max keeps exp from overflowing
(inputs of 1e4 are fine) and from underflowing to 0/0 (rows whose every entry is -100 or less).

Starting ``m`` at the lowest finite float instead of -inf keeps every exponent finite: a tile of
only -inf (or the padding of the last tile) then adds exp(-inf) = 0 to the sum instead of
exp(-inf - -inf) = NaN; a row of only -inf ends with s = 0 and gives 0/0 = NaN, as torch does.
Math in fp32 whatever the input dtype; rows may have any stride (views of wider tensors).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import softmax_args


@triton.jit
def softmax_kernel(x_ptr, out_ptr, N, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK)
    m = -3.4028234663852886e38  # lowest fp32: see the module docstring
    s = 0.0
    for start in range(0, N, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < N, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, N, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < N, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - m) / s
        tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=start + cols < N)


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dimension of a 2-d tensor (unit column stride, any row stride)."""
    M, N, out = softmax_args(x, out)
    BLOCK = min(triton.next_power_of_2(N), 4096)
    softmax_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK=BLOCK)
    return out
