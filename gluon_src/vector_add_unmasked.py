"""Vector add with an explicit blocked layout and 128-bit accesses: each thread holds ``VEC``
consecutive elements (16 bytes where the pointers allow it) ``REPS`` times, a warp's 32 threads
cover 32 x VEC consecutive elements, so every load and store instruction moves 16 bytes a thread
and a warp's accesses are contiguous. Full blocks run unmasked (the mask would hide the 16-byte
groups from the compiler when n is not a multiple of 16); only the last program's partial block
is masked.

Misaligned inputs (a view starting a few elements into its storage): the planner
(``dispatch.vector_add_choice``) takes VEC from the pointers' common alignment (the largest
power of two dividing every address, in elements, up to 16 bytes), so the layout asks for no
wider access than the addresses allow; the compiler proves 16-byte alignment only for pointers
divisible by 16, and emits element-wide accesses otherwise.
"""
from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .runtime import Spec


@gluon.jit
def vector_add_unmasked_kernel(x_ptr, y_ptr, out_ptr, n, VEC: gl.constexpr, REPS: gl.constexpr):
    BLOCK: gl.constexpr = VEC * 32 * gl.num_warps() * REPS
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    start = gl.program_id(0).to(gl.int64) * BLOCK
    offs = gl.arange(0, BLOCK, layout=layout)
    if start + BLOCK <= n:
        x = gl.load(x_ptr + start + offs)
        y = gl.load(y_ptr + start + offs)
        gl.store(out_ptr + start + offs, x + y)
    else:
        mask = offs < n - start
        x = gl.load(x_ptr + start + offs, mask=mask)
        y = gl.load(y_ptr + start + offs, mask=mask)
        gl.store(out_ptr + start + offs, x + y, mask=mask)


def config(vec: int, reps: int, num_warps: int) -> dict:
    return {"VEC": vec, "REPS": reps, "num_warps": num_warps, "BLOCK": vec * reps * 32 * num_warps}


def launch_spec(x, y, out, cfg: dict) -> Spec:
    n = out.numel()
    return Spec(vector_add_unmasked_kernel, (max(1, triton.cdiv(n, cfg["BLOCK"])),),
                {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": n, "VEC": cfg["VEC"], "REPS": cfg["REPS"]},
                {"num_warps": cfg["num_warps"]})
