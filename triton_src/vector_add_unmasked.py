"""vector_add in Triton: out = x + y.

One program per BLOCK contiguous elements; the last program masks its tail. The sum is formed
in fp32 and rounded once to the output dtype (also the form the interpreter gets right for bf16,
whose values it holds as raw 16-bit integers). The kernel does no
arithmetic worth counting (1 FLOP per 12 bytes in fp32), so the only goal is to keep enough bytes
in flight to saturate HBM: BLOCK elements over ``num_warps`` warps gives each thread
BLOCK / (32 * num_warps) elements, i.e. several 16-byte loads per operand in flight per thread.
Defaults were picked by scripts/tune_triton.py on an H200 (see docs/perf-notes.md, "Triton").
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import check_same_device, check_tensor

#: (BLOCK, num_warps) measured best on the H200 at N = 2^28 fp32 (scripts/tune_triton.py, 2026-11-29:
#: 4.38 TB/s; all 15 configs from 1024/4 to 16384/16 landed within 4.17-4.38 TB/s)
DEFAULT_BLOCK = 1024
DEFAULT_WARPS = 8
INT32_LIMIT = 2 ** 31 - 1


@triton.jit
def vector_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, INT64: tl.constexpr):
    pid = tl.program_id(0)
    if INT64:  # offsets past 2^31 elements need 64-bit arithmetic
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


def vector_add_config(n: int, block: int | None = None, num_warps: int | None = None) -> dict:
    block = DEFAULT_BLOCK if block is None else int(block)
    num_warps = DEFAULT_WARPS if num_warps is None else int(num_warps)
    if block < 1 or block & (block - 1):
        raise ValueError(f"block: must be a power of two, got {block}")
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps: must be a power of two from 1 to 32, got {num_warps}")
    return {"BLOCK": block, "num_warps": num_warps, "INT64": n + block > INT32_LIMIT}


def vector_add_grid(n: int, block: int) -> tuple[int]:
    return (triton.cdiv(n, block),)


def vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None, *,
               block: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """out = x + y for 1-d tensors of the same dtype and length (any start address)."""
    check_tensor("x", x, ndim=1)
    check_tensor("y", y, ndim=1)
    if y.dtype != x.dtype:
        raise TypeError(f"y: dtype {y.dtype} differs from x's {x.dtype}")
    if y.shape != x.shape:
        raise ValueError(f"y: shape {tuple(y.shape)} differs from x's {tuple(x.shape)}")
    for name, t in (("x", x), ("y", y)):
        if t.numel() > 1 and t.stride(0) != 1:
            raise ValueError(f"{name}: must be contiguous (stride 1), got stride {t.stride(0)}")
    if out is None:
        out = torch.empty_like(x)
    check_tensor("out", out, ndim=1)
    if out.dtype != x.dtype or out.shape != x.shape:
        raise ValueError(f"out: expected {tuple(x.shape)} {x.dtype}, got {tuple(out.shape)} {out.dtype}")
    if out.numel() > 1 and out.stride(0) != 1:
        raise ValueError(f"out: must be contiguous (stride 1), got stride {out.stride(0)}")
    check_same_device(x=x, y=y, out=out)
    n = x.numel()
    if n == 0:
        return out
    cfg = vector_add_config(n, block, num_warps)
    vector_add_kernel[vector_add_grid(n, cfg["BLOCK"])](x, y, out, n, BLOCK=cfg["BLOCK"],
                                                        INT64=cfg["INT64"], num_warps=cfg["num_warps"])
    return out
