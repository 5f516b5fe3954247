"""Row softmax, ``block``: one program per row, the whole row in registers.

One read and one write of each row: load (padding lanes -inf), max, exp, sum, scale, store.
BLOCK_N is the row length rounded up to a power of two (rows that Triton cannot prove 16-byte
aligned are addressed from their 16-byte boundary: ``VEC``, ``triton_src.aligned_frame``); the
row must fit the registers of one program (MAX_COLS fp32 values: at 16 warps that is 64 values a thread, twice that spills), and
how many programs an SM holds follows from the same registers: ``dispatch`` picks num_warps.
"""
from __future__ import annotations

import triton
import triton.language as tl

from . import aligned_frame, next_pow2
from .runtime import Spec, bind_spec

MAX_COLS = 32768


@triton.jit
def softmax_block_kernel(x_ptr, out_ptr, N, stride_x, stride_out, BLOCK_N: tl.constexpr,
                         VEC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    if VEC == 0:
        mask = cols < N
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e * (1.0 / tl.sum(e, axis=0))
        tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        # lanes from the 16-byte boundary at or before the row (triton_src.aligned_frame): loads
        # of whole 16-byte groups, stores of the groups inside the row, then the row's edges
        start = row * stride_x
        base = (start // VEC) * VEC
        lead = (start - base).to(tl.int32)
        g = (cols // VEC) * VEC
        x = tl.load(x_ptr + base + cols, mask=(g + VEC > lead) & (g < lead + N), other=-float("inf"))
        valid = (cols >= lead) & (cols < lead + N)
        x = tl.where(valid, x.to(tl.float32), -float("inf"))
        m = tl.max(x, axis=0)
        e = tl.exp(x - m)
        inv = 1.0 / tl.sum(e, axis=0)
        y = (e * inv).to(out_ptr.dtype.element_ty)
        o_base = (row * stride_out // VEC) * VEC
        tl.store(out_ptr + o_base + cols, y, mask=(g >= lead) & (g + VEC <= lead + N))
        # the row's first and last partial groups: recomputed from x, VEC lanes each
        j = tl.arange(0, VEC)
        tail = ((lead + N) // VEC) * VEC
        for q in tl.static_range(2):
            pos = j + tail if q == 1 else j
            em = (pos >= lead) & (pos < lead + N)
            xe = tl.load(x_ptr + base + pos, mask=em, other=-float("inf")).to(tl.float32)
            tl.store(out_ptr + o_base + pos, (tl.exp(xe - m) * inv).to(out_ptr.dtype.element_ty), mask=em)


def supports(N: int) -> str | None:
    if next_pow2(N) > MAX_COLS:
        return (f"a row of {N} columns does not fit one program's registers (at most {MAX_COLS} "
                f"columns); softmax_split / softmax_online take it")
    return None


def config(N: int, num_warps: int) -> dict:
    return {"BLOCK_N": max(16, next_pow2(N)), "num_warps": num_warps}


def frame(x, out, block_n: int) -> int:
    """``aligned_frame`` where the row, moved up to VEC - 1 lanes, still fits BLOCK_N lanes."""
    vec = aligned_frame(x, out)
    return vec if vec and x.shape[1] + vec - 1 <= block_n else 0


def row_args(x, out, cfg: dict) -> dict:
    """N, the row strides and the addressing constexpr of a row kernel: the aligned frame (``VEC``)
    where it applies and the config leaves it on (``FRAME``)."""
    vec = frame(x, out, cfg["BLOCK_N"]) if cfg.get("FRAME", True) else 0
    return {"N": x.shape[1], "stride_x": x.stride(0), "stride_out": out.stride(0), "VEC": vec}


def launch_spec(x, out, cfg: dict) -> Spec:
    M, N = x.shape
    return Spec(softmax_block_kernel, (M,),
                {"x_ptr": x, "out_ptr": out, "BLOCK_N": cfg["BLOCK_N"], **row_args(x, out, cfg)},
                {"num_warps": cfg["num_warps"]})


def bind_launch(x, out, cfg: dict):
    return bind_spec(launch_spec(x, out, cfg), x.device)
