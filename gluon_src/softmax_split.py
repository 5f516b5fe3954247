"""Row softmax, ``split``: one long row over C programs, for too few rows to fill the SMs a row a
program. Each program takes a chunk of CHUNK columns; the (max, sum of exp) partials are exchanged
through global memory between two launches (the kernel boundary is the synchronisation, so the
programs need not be co-resident):

1. ``softmax_split_partial_kernel``: program (c, row) writes its chunk's max and sum of exp(x - max);
2. ``softmax_split_write_kernel``: program (c, row) combines the row's C partials into the row's
   max and sum, reads its chunk again (from L2: the rows are few) and writes exp(x - max) / sum.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .runtime import Spec


@gluon.jit
def softmax_split_partial_kernel(x_ptr, ws_ptr, N, stride_x, C, CHUNK: gl.constexpr, VEC: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    c = gl.program_id(0)
    row = gl.program_id(1).to(gl.int64)
    cols = c * CHUNK + gl.arange(0, CHUNK, layout=layout)
    x = gl.load(x_ptr + row * stride_x + cols, mask=cols < N, other=-float("inf")).to(gl.float32)
    m = gl.max(x, axis=0)
    s = gl.sum(gl.where(m > -float("inf"), gl.exp(x - m), 0.0), axis=0)
    slot = ws_ptr + (row * C + c) * 2
    gl.store(slot, m)
    gl.store(slot + 1, s)


@gluon.jit
def softmax_split_write_kernel(x_ptr, out_ptr, ws_ptr, N, stride_x, stride_o, C, CHUNK: gl.constexpr,
                               VEC: gl.constexpr, C_PAD: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    parts: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    c = gl.program_id(0)
    row = gl.program_id(1).to(gl.int64)
    j = gl.arange(0, C_PAD, layout=parts)
    slots = ws_ptr + (row * C + j) * 2
    m_j = gl.load(slots, mask=j < C, other=-float("inf"))
    s_j = gl.load(slots + 1, mask=j < C, other=0.0)
    row_max = gl.max(m_j, axis=0)
    scaled = gl.where(m_j > -float("inf"), s_j * gl.exp(m_j - row_max), 0.0)
    inv = 1.0 / gl.sum(scaled, axis=0)
    inv = gl.where(row_max > -float("inf"), inv, float("nan"))   # a row of only -inf: NaN, as torch
    cols = c * CHUNK + gl.arange(0, CHUNK, layout=layout)
    mask = cols < N
    x = gl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf")).to(gl.float32)
    gl.store(out_ptr + row * stride_o + cols, (gl.exp(x - row_max) * inv).to(out_ptr.dtype.element_ty), mask=mask)


def config(N: int, elem_size: int, chunk: int, num_warps: int) -> dict:
    C = triton.cdiv(N, chunk)
    return {"CHUNK": chunk, "C": C, "C_PAD": max(32, triton.next_power_of_2(C)),
            "VEC": min(16 // elem_size, chunk // (32 * num_warps)), "num_warps": num_warps}


def launch_specs(x, out, ws, cfg: dict) -> list:
    M, N = x.shape
    C, grid, opts = cfg["C"], (cfg["C"], M), {"num_warps": cfg["num_warps"]}
    common = {"N": N, "stride_x": x.stride(0), "C": C, "CHUNK": cfg["CHUNK"], "VEC": cfg["VEC"]}
    return [Spec(softmax_split_partial_kernel, grid, {"x_ptr": x, "ws_ptr": ws, **common}, opts),
            Spec(softmax_split_write_kernel, grid, {"x_ptr": x, "out_ptr": out, "ws_ptr": ws, **common,
                                                    "stride_o": out.stride(0), "C_PAD": cfg["C_PAD"]}, opts)]


def workspace(x, cfg: dict) -> torch.Tensor:
    return torch.empty(x.shape[0] * cfg["C"] * 2, dtype=torch.float32, device=x.device)
