"""vector_add in Triton, the teaching twin: out = x + y.

The Triton tutorial's kernel: program ``pid`` owns BLOCK contiguous elements, loads x and y,
adds, stores; the mask switches off the lanes past the end in the last program. Offsets are 64-bit
so that tensors of more than 2^31 elements work. The sum is formed in fp32 and rounded once to the
output dtype (for fp16 / bf16 that is the correctly rounded sum).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import vector_add_args

BLOCK = 1024


@triton.jit
def vector_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


def vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x + y for 1-d contiguous tensors of one dtype and length."""
    out = vector_add_args(x, y, out)
    n = x.numel()
    vector_add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
