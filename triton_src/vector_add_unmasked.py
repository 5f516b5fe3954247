"""vector_add, the tuned kernel behind ``triton:vector_add``: unmasked full blocks, a masked tail.

Why not the twin's kernel: a masked load is only as wide as the mask is provably constant, and
Triton knows ``offs < n`` to be constant over 16 lanes only when ``n`` itself is specialised as a
multiple of 16. For any other length (an odd N, say) every load and store of every program is
issued one element at a time: 2-byte accesses for bf16, a quarter of the bandwidth per instruction
of 16-byte ones, and too few bytes in flight to fill HBM. Here every program but the last takes a
branch without a mask, where the loads are full 16-byte vectors whenever the pointers are 16-byte
aligned (Triton specialises on that); only the last program masks. BLOCK and num_warps come from
``dispatch.VECTOR_ADD`` (bytes per thread, warps); 32-bit offsets unless the tensor needs more.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import vector_add_args
from .runtime import Spec, bind_spec

INT32_LIMIT = 2 ** 31 - 1


@triton.jit
def vector_add_unmasked_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, INT64: tl.constexpr):
    pid = tl.program_id(0)
    if INT64:  # offsets past 2^31 elements need 64-bit arithmetic
        pid = pid.to(tl.int64)
    start = pid * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:
        x = tl.load(x_ptr + offs).to(tl.float32)
        y = tl.load(y_ptr + offs).to(tl.float32)
        tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty))
    else:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
        tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


def config(n: int, elem_size: int, bytes_per_thread: int, num_warps: int) -> dict:
    """BLOCK = the elements ``num_warps`` warps hold at ``bytes_per_thread`` bytes per thread."""
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps: must be a power of two from 1 to 32, got {num_warps}")
    if bytes_per_thread < elem_size or bytes_per_thread & (bytes_per_thread - 1):
        raise ValueError(f"bytes_per_thread: must be a power of two >= {elem_size}, got {bytes_per_thread}")
    block = bytes_per_thread // elem_size * 32 * num_warps
    return {"BLOCK": block, "INT64": n + block > INT32_LIMIT, "num_warps": num_warps}


def launch_spec(x, y, out, cfg: dict) -> Spec:
    n = x.numel()
    return Spec(vector_add_unmasked_kernel, (triton.cdiv(n, cfg["BLOCK"]),),
                {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": n, "BLOCK": cfg["BLOCK"],
                 "INT64": cfg["INT64"]}, {"num_warps": cfg["num_warps"]})


def bind_launch(x, y, out, cfg: dict):
    """Zero-argument launch of out = x + y with config ``cfg`` (see ``config``)."""
    return bind_spec(launch_spec(x, y, out, cfg), x.device)


def vector_add_unmasked(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None, *,
                        bytes_per_thread: int = 32, num_warps: int = 4) -> torch.Tensor:
    """out = x + y with this kernel and an explicit config (one-off calls, scripts, tests)."""
    out = vector_add_args(x, y, out)
    bind_launch(x, y, out, config(x.numel(), x.element_size(), bytes_per_thread, num_warps))()
    return out
