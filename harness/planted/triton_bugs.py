"""Triton kernels with planted bugs, and their correct twins (run under TRITON_INTERPRET=1).

Each ``prepare_*`` has the registry's signature ``prepare(case, inputs, out) -> launch``.
"""
from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024


# -- vector add ------------------------------------------------------------------------------
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Correct: one block per program, the tail masked."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def add_kernel_no_mask(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    """BUG (missing tail mask): no mask at all, so the wrapper may only launch full blocks."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


@triton.jit
def add_kernel_off_by_one(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """BUG (unwritten last element): the mask stops one short (``< n - 1``)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - 1
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def add_kernel_scratch_x(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """BUG (input-mutating): keeps its partial result in x, overwriting the caller's input."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, s, mask=mask)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def _add(kernel, full_blocks_only=False, with_n=True):
    def prepare(case, inputs, out):
        x, y = inputs
        n = x.numel()
        programs = n // BLOCK if full_blocks_only else triton.cdiv(n, BLOCK)

        def launch():
            if programs == 0:
                return
            if with_n:
                kernel[(programs,)](x, y, out, n, BLOCK=BLOCK)
            else:
                kernel[(programs,)](x, y, out, BLOCK=BLOCK)
        return launch
    return prepare


prepare_add = _add(add_kernel)
prepare_add_missing_tail = _add(add_kernel_no_mask, full_blocks_only=True, with_n=False)
prepare_add_last_unwritten = _add(add_kernel_off_by_one)
prepare_add_mutates_input = _add(add_kernel_scratch_x)


# -- softmax ---------------------------------------------------------------------------------
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """Correct: one row per program, padding lanes -inf, the row's own stride."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_kernel_pad_zero(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """BUG: padding lanes load 0.0 instead of -inf, so exp(0 - max) joins every row's sum."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_kernel_wrong_stride(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride,
                                BLOCK: tl.constexpr):
    """BUG: rows addressed as ``row * n_cols`` (assumes contiguous rows; x_row_stride unused)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _softmax(kernel):
    def prepare(case, inputs, out):
        (x,) = inputs
        m, n = x.shape
        block = triton.next_power_of_2(n)

        def launch():
            kernel[(m,)](x, out, n, x.stride(0), out.stride(0), BLOCK=block)
        return launch
    return prepare


prepare_softmax = _softmax(softmax_kernel)
prepare_softmax_pad_zero = _softmax(softmax_kernel_pad_zero)
prepare_softmax_wrong_stride = _softmax(softmax_kernel_wrong_stride)
