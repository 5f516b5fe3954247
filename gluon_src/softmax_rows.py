"""Row softmax, ``rows``: several short rows a program, each row held by one warp (or by a part
of a warp, for rows shorter than 32 x VEC), its values in registers.

Layout [ROWS, BLOCK_N]: a thread holds VEC consecutive columns (16 bytes), TPW_C threads of a warp
span a row's BLOCK_N columns (BLOCK_N / (TPW_C x VEC) times), the warp's other TPW_R threads take
the next rows, and the warps take the next rows again (RPT times). The row max and sum are
reductions along axis 1: within a warp, no shared memory. Rows of whole 16-byte groups that the
compiler cannot prove so take N and the strides in 16-byte units (``softmax_block.units``).
"""
from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .runtime import Spec
from .softmax_block import row_args

MAX_COLS = 1024


@gluon.jit
def softmax_rows_kernel(x_ptr, out_ptr, M, N, stride_x, stride_o, BLOCK_N: gl.constexpr,
                        VEC: gl.constexpr, TPW_R: gl.constexpr, TPW_C: gl.constexpr, RPT: gl.constexpr,
                        UNIT: gl.constexpr = 1):
    N, stride_x, stride_o = N * UNIT, stride_x * UNIT, stride_o * UNIT     # softmax_block.units
    ROWS: gl.constexpr = TPW_R * gl.num_warps() * RPT
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [TPW_R, TPW_C], [gl.num_warps(), 1], [1, 0])
    rows = gl.program_id(0) * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    r64 = rows.to(gl.int64)
    x = gl.load(x_ptr + (r64 * stride_x)[:, None] + cols[None, :], mask=mask, other=-float("inf"))
    x = x.to(gl.float32)
    row_max = gl.max(x, axis=1)
    e = gl.exp(x - row_max[:, None])          # a row of only -inf: NaN, as torch
    y = e / gl.sum(e, axis=1)[:, None]
    gl.store(out_ptr + (r64 * stride_o)[:, None] + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def config(N: int, elem_size: int, num_warps: int = 4, values_per_thread: int = 16) -> dict:
    block_n = max(1, triton.next_power_of_2(N))
    vec = min(16 // elem_size, block_n)
    tpw_c = min(32, block_n // vec)
    tpw_r = 32 // tpw_c
    per_pass = tpw_r * num_warps                      # rows one pass of the layout covers
    rpt = max(1, values_per_thread * 32 * num_warps // (block_n * per_pass))
    return {"BLOCK_N": block_n, "VEC": vec, "TPW_R": tpw_r, "TPW_C": tpw_c, "RPT": rpt,
            "ROWS": per_pass * rpt, "num_warps": num_warps}


def supports(N: int) -> str | None:
    return None if N <= MAX_COLS else f"N = {N}: rows holds rows of at most {MAX_COLS} columns"


def launch_spec(x, out, cfg: dict) -> Spec:
    M, N = x.shape
    return Spec(softmax_rows_kernel, (triton.cdiv(M, cfg["ROWS"]),),
                {"x_ptr": x, "out_ptr": out, "M": M, **row_args(x, out, cfg),
                 **{k: cfg[k] for k in ("BLOCK_N", "VEC", "TPW_R", "TPW_C", "RPT")}},
                {"num_warps": cfg["num_warps"]})
