"""Row softmax, ``block``: one program a row, the whole row in registers (fp32), one read and one
write of HBM. Each thread holds VEC consecutive columns (16 bytes) BLOCK_N / (32 x warps x VEC)
times; the max and the sum reduce across the program's warps through shared memory."""
from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .runtime import Spec

#: the longest padded row by element size (a thread holds at most 64 fp32 values at 16 warps)
MAX_COLS = {4: 32768, 2: 32768}


@gluon.jit
def softmax_block_kernel(x_ptr, out_ptr, N, stride_x, stride_o, BLOCK_N: gl.constexpr, VEC: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, BLOCK_N, layout=layout)
    mask = cols < N
    x = gl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf")).to(gl.float32)
    e = gl.exp(x - gl.max(x, axis=0))          # a row of only -inf: NaN, as torch
    y = e / gl.sum(e, axis=0)
    gl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


#: warps by padded row length: (up to this many columns, warps)
WARPS = ((2048, 4), (8192, 8), (1 << 30, 16))


def config(N: int, elem_size: int) -> dict:
    block_n = max(16, triton.next_power_of_2(N))
    warps = next(w for cols, w in WARPS if block_n <= cols)
    vec = min(16 // elem_size, max(1, block_n // (32 * warps)))
    return {"BLOCK_N": block_n, "VEC": vec, "num_warps": warps}


def supports(N: int, elem_size: int) -> str | None:
    top = MAX_COLS[elem_size]
    return None if triton.next_power_of_2(N) <= top else f"N = {N}: block holds rows of at most {top} columns"


def launch_spec(x, out, cfg: dict) -> Spec:
    M, N = x.shape
    return Spec(softmax_block_kernel, (M,),
                {"x_ptr": x, "out_ptr": out, "N": N, "stride_x": x.stride(0), "stride_o": out.stride(0),
                 "BLOCK_N": cfg["BLOCK_N"], "VEC": cfg["VEC"]}, {"num_warps": cfg["num_warps"]})
