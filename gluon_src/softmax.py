"""Row softmax, the teaching twin: one program a row, column tiles of BLOCK.

Pass 1 keeps a running max and sum of exp a lane (rescaling the sum when the max grows), then
combines the lanes; pass 2 reads the row again and writes exp(x - max) / sum. Any N, any row
stride; a row of only -inf gives NaN, as torch does.
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def softmax_kernel(x_ptr, out_ptr, N, stride_x, stride_out, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    row = gl.program_id(0).to(gl.int64)
    x_row = x_ptr + row * stride_x
    o_row = out_ptr + row * stride_out
    cols = gl.arange(0, BLOCK, layout=layout)
    m = gl.full([BLOCK], -float("inf"), gl.float32, layout)
    s = gl.zeros([BLOCK], gl.float32, layout)
    for start in range(0, N, BLOCK):
        x = gl.load(x_row + start + cols, mask=start + cols < N, other=-float("inf")).to(gl.float32)
        m_new = gl.maximum(m, x)
        live = m_new > -float("inf")          # a lane that has seen only -inf adds nothing yet
        s = gl.where(live, s * gl.exp(m - m_new) + gl.exp(x - m_new), 0.0)
        m = m_new
    row_max = gl.max(m, axis=0)
    row_sum = gl.sum(s * gl.exp(m - row_max), axis=0)   # NaN for a row of only -inf
    for start in range(0, N, BLOCK):
        mask = start + cols < N
        x = gl.load(x_row + start + cols, mask=mask, other=-float("inf")).to(gl.float32)
        y = gl.exp(x - row_max) / row_sum
        gl.store(o_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    BLOCK = min(triton.next_power_of_2(N), 4096)
    softmax_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK=BLOCK, num_warps=8)
    return out
