"""Row softmax, ``online``: column tiles of BLOCK_N with a running max and sum of exp a lane (any
row length), then a second pass that writes exp(x - max) / sum, newest tile first: the tiles read
last in pass 1 are the likeliest still in L2. A persistent grid of PROGRAMS programs takes rows
p, p + PROGRAMS, ...; several programs an SM keep its loads in flight."""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .runtime import Spec


@gluon.jit
def softmax_online_kernel(x_ptr, out_ptr, M, N, stride_x, stride_o, BLOCK_N: gl.constexpr, VEC: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    cols = gl.arange(0, BLOCK_N, layout=layout)
    tiles = (N + BLOCK_N - 1) // BLOCK_N
    for row in range(gl.program_id(0), M, gl.num_programs(0)):
        x_row = x_ptr + row.to(gl.int64) * stride_x
        o_row = out_ptr + row.to(gl.int64) * stride_o
        m = gl.full([BLOCK_N], -float("inf"), gl.float32, layout)
        s = gl.zeros([BLOCK_N], gl.float32, layout)
        for t in range(tiles):
            c = t * BLOCK_N + cols
            x = gl.load(x_row + c, mask=c < N, other=-float("inf")).to(gl.float32)
            m_new = gl.maximum(m, x)
            live = m_new > -float("inf")
            s = gl.where(live, s * gl.exp(m - m_new) + gl.exp(x - m_new), 0.0)
            m = m_new
        row_max = gl.max(m, axis=0)
        inv = 1.0 / gl.sum(s * gl.exp(m - row_max), axis=0)     # NaN for a row of only -inf
        for i in range(tiles):
            c = (tiles - 1 - i) * BLOCK_N + cols
            mask = c < N
            x = gl.load(x_row + c, mask=mask, other=-float("inf")).to(gl.float32)
            gl.store(o_row + c, (gl.exp(x - row_max) * inv).to(out_ptr.dtype.element_ty), mask=mask)


def config(elem_size: int, block_n: int, num_warps: int, programs: int) -> dict:
    vec = min(16 // elem_size, block_n // (32 * num_warps))
    return {"BLOCK_N": block_n, "VEC": vec, "num_warps": num_warps, "PROGRAMS": programs}


def launch_spec(x, out, cfg: dict) -> Spec:
    M, N = x.shape
    return Spec(softmax_online_kernel, (max(1, min(M, cfg["PROGRAMS"])),),
                {"x_ptr": x, "out_ptr": out, "M": M, "N": N, "stride_x": x.stride(0), "stride_o": out.stride(0),
                 "BLOCK_N": cfg["BLOCK_N"], "VEC": cfg["VEC"]}, {"num_warps": cfg["num_warps"]})
