"""The aligned frame: how Helion's row kernels reach 16-byte accesses on rows of any length and
stride (host side: the flat views and the facts the kernels take).

Triton issues a 16-byte load only where it can prove the address and the mask constant over 16
bytes. Through ``x[rows, cols]`` it can prove neither unless the row stride and the row length
are specialised as multiples of 16 elements (Triton specialises an integer argument by
divisibility by 16, nothing finer), and Helion has no hint to say more: a row of 50257 bf16, or
of 200 fp16, moves 2 bytes an instruction. So the kernels address the storage as one flat run
of elements (``xf``) and compute each row's place themselves: the row starts at
``r * sx + lx``; the frame starts at the 16-byte boundary at or before it, ``start // v * v``,
which Triton proves a multiple of ``v = 16 / element size`` (a product with the constant v); the
row sits ``lead = start - base`` elements into its frame. Masks are taken a 16-byte group at a
time (``g = c // v * v``: constant over v lanes), so loads move whole groups (the edge groups
also read a few elements beside the row, which are never used), stores write the groups inside
the row as vectors and the row's two edge groups element by element.

The output row must sit as far into its frame as the input row (one register lane writes the
element it read): both tensors' rows start equally far past a 16-byte boundary. ``frame_args``
returns None otherwise, and the planner then keeps the kernels that index ``x[rows, :]``.

Nor is a row stride of 1 framed (rows of one element, or overlapping rows) where there are several
rows: Triton specialises the stride as the constant 1, so ``start`` is one contiguous run across
the rows of a tile, its first element a multiple of 16; Triton 3.6 (before triton-lang/triton#9297)
keeps that divisibility through ``start - base`` although the difference is no longer contiguous,
and so takes every row's ``lead`` for a multiple of v: it folds ``c >= lead`` over each group, and
the lanes at positions 1..v-1 of a group are never stored (of 129 rows of 1 fp32, the 96 whose
lead is 1..3 were left unwritten). Any other stride is a runtime value, where the product
``r * sx`` already loses the run's divisibility (the claims that remain are true).
"""
from __future__ import annotations

import torch


def _address(t: torch.Tensor) -> int:
    """The byte address of t[0, 0] (relative to its storage on meta tensors, whose storage the
    CPU mode takes as 16-byte aligned, as a CUDA allocation is)."""
    if t.device.type == "meta":
        return t.storage_offset() * t.element_size()
    return t.data_ptr()


def _flat(t: torch.Tensor, lead: int) -> torch.Tensor:
    """The storage of the rows of ``t`` as one run of elements from ``lead`` elements before
    t[0, 0] (its 16-byte boundary) to its last element."""
    m, n = t.shape
    return torch.as_strided(t, ((m - 1) * t.stride(0) + n + lead,), (1,), t.storage_offset() - lead)


def frame_args(x: torch.Tensor, out: torch.Tensor) -> dict | None:
    """The flat views and facts of the frame kernels' signature (``xf``, ``of``, ``sx``, ``so``,
    ``lx``, ``lo``, ``v``), or None where the frame cannot pair input and output lanes: rows that
    are not unit-stride, an address that is not a multiple of the element size, or rows of x and
    out that start differently far past a 16-byte boundary, several rows of row stride 1 (see the
    module docstring)."""
    e = x.element_size()
    v = 16 // e
    if x.stride(1) != 1 or out.stride(1) != 1 or _address(x) % e or _address(out) % e:
        return None
    if x.shape[0] > 1 and 1 in (x.stride(0), out.stride(0)):
        return None
    lx, lo = _address(x) % 16 // e, _address(out) % 16 // e
    sx, so = x.stride(0), out.stride(0)
    if (sx - so) % v or (lx - lo) % v:
        return None
    return {"xf": _flat(x, lx), "of": _flat(out, lo), "sx": sx, "so": so, "lx": lx, "lo": lo, "v": v}


def frame_width(n: int, v: int) -> int:
    """Frame positions that cover a row of n elements wherever it starts in its first group."""
    return -(-(n + v - 1) // v) * v
