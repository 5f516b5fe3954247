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
def softmax_block_kernel(x_ptr, out_ptr, N, stride_x, stride_o, BLOCK_N: gl.constexpr, VEC: gl.constexpr,
                         UNIT: gl.constexpr = 1):
    N, stride_x, stride_o = N * UNIT, stride_x * UNIT, stride_o * UNIT     # see ``units``
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


def units(x, out) -> int:
    """Elements in 16 bytes when every row of both tensors is whole 16-byte groups that the
    compiler cannot prove so (N and the row strides multiples of 16 bytes but not all of 16
    elements: a row of 200 fp16), else 1. The compiler proves 16-byte accesses only from arguments
    it specialises as multiples of 16, so such rows move 2 or 4 bytes an access; a kernel given N
    and the strides in these units, multiplied back by the constexpr UNIT, proves them."""
    vec = 16 // x.element_size()
    N, sx, so = x.shape[1], x.stride(0), out.stride(0)
    if N % 16 == 0 and sx % 16 == 0 and so % 16 == 0:
        return 1   # the compiler's own specialisation proves them
    if N % vec or sx % vec or so % vec or x.data_ptr() % 16 or out.data_ptr() % 16:
        return 1
    return vec


def row_args(x, out, cfg: dict) -> dict:
    """N and the row strides of a row kernel, in 16-byte units (``units``) where the config asks
    for them (``UNITS``) and they apply."""
    unit = units(x, out) if cfg.get("UNITS") else 1
    return {"N": x.shape[1] // unit, "stride_x": x.stride(0) // unit, "stride_o": out.stride(0) // unit,
            "UNIT": unit}


def launch_spec(x, out, cfg: dict) -> Spec:
    M, N = x.shape
    return Spec(softmax_block_kernel, (M,),
                {"x_ptr": x, "out_ptr": out, "BLOCK_N": cfg["BLOCK_N"], "VEC": cfg["VEC"], **row_args(x, out, cfg)},
                {"num_warps": cfg["num_warps"]})
