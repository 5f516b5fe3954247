"""Vector add, the teaching twin: one masked block a program, four elements a thread."""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

BLOCK = 1024


@gluon.jit
def vector_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: gl.constexpr):
    # the layout says who holds what: 4 consecutive elements a thread, 32 threads a warp
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask)
    y = gl.load(y_ptr + offs, mask=mask)
    gl.store(out_ptr + offs, x + y, mask=mask)


def vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    vector_add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=4)
    return out
