"""What the tuned CuTe softmax kernels share: 16-byte row access at any alignment, block and
group reductions, input validation and the fake tensors of a compile.

Rows at any alignment, 128-bit accesses. A row that starts ``phase`` elements past a 16-byte
boundary (N = 50257 bf16 rows: every row a different phase) is read as the 16-byte vectors that
tile it *from that boundary*: vector j holds columns [j*V - phase, j*V - phase + V), V = 16 bytes
of elements. Every vector that touches the row is one 128-bit load - including the first and the
last, whose bytes outside the row are replaced by -inf in registers (they lie in the same 16-byte
granule as row bytes, so inside the allocation: allocations are 256-byte granular). Stores never
touch outside the row: the first and last vectors go out element by element, the others as
128-bit stores when the output row has the same phase as the input row (contiguous tensors of the
same row length do), else every element goes out alone.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import torch

from . import cutlass_dtype

LOG2E = 1.4426950408889634


def vec_copy_atom(elem_type, vec: int):
    """Copy atom moving ``vec`` elements of ``elem_type`` per access (register <-> memory)."""
    return cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), elem_type, num_bits_per_copy=elem_type.width * vec)


def fmax(a, b):
    return cute.arch.fmax(a, b)


def add(a, b):
    return a + b


@cute.jit
def row_vectors(row: cute.Tensor, vec: cutlass.Constexpr):
    """(vectors, phase) of a 1-D row: the 16-byte vectors from the boundary at or before its first
    element, as a (vec, count) tensor, and the elements between that boundary and the row start."""
    p = row.iterator
    base = (p - (vec - 1)).align(16)                  # round up from vec-1 elements back: the floor
    phase = cutlass.Int32((p.toint() - base.toint()) // (row.element_type.width // 8))
    count = (cute.size(row) + phase + vec - 1) // vec
    return cute.make_tensor(base, cute.make_layout((vec, count))), phase


@cute.jit
def load_row(vecs: cute.Tensor, first, step, col0, col_step, n, rX: cute.Tensor):
    """rX[:, k] = vector ``first + k*step`` of ``vecs``, which holds the row's columns
    [col0 + k*col_step, +V); -inf where a column is outside [0, n), and for untouched vectors."""
    vec = cute.size(rX, mode=[0])
    atom = vec_copy_atom(vecs.element_type, vec)
    rX.fill(-cutlass.Float32.inf)
    for k in cutlass.range_constexpr(cute.size(rX, mode=[1])):
        c0 = col0 + k * col_step
        if c0 < n and c0 + vec > 0:
            cute.copy(atom, vecs[None, first + k * step], rX[None, k])
            if c0 < 0 or c0 + vec > n:                # the row's first or last vector
                for e in cutlass.range_constexpr(vec):
                    if c0 + e < 0 or c0 + e >= n:
                        rX[e, k] = rX.element_type(-cutlass.Float32.inf)


@cute.jit
def store_row(row: cute.Tensor, vecs: cute.Tensor, same_phase, first, step, col0, n, rO: cute.Tensor):
    """The row's columns [col0 + k*step*V, +V) = rO[:, k], written only inside [0, n): 128-bit
    stores (vector ``first + k*step`` of the output's ``vecs``) where the output has the input's
    phase and the vector lies wholly inside the row, element stores otherwise."""
    vec = cute.size(rO, mode=[0])
    atom = vec_copy_atom(vecs.element_type, vec)
    for k in cutlass.range_constexpr(cute.size(rO, mode=[1])):
        c0 = col0 + k * step * vec
        if same_phase and c0 >= 0 and c0 + vec <= n:
            cute.copy(atom, rO[None, k], vecs[None, first + k * step])
        else:
            if c0 < n and c0 + vec > 0:
                for e in cutlass.range_constexpr(vec):
                    if c0 + e >= 0 and c0 + e < n:
                        row[c0 + e] = rO[e, k]


@cute.jit
def block_reduce(val: cutlass.Float32, op, red: cute.Tensor, num_warps: cutlass.Constexpr):
    """Warp butterfly, then one value per warp through shared memory (every thread gets it)."""
    warp = cute.arch.warp_idx()
    val = cute.arch.warp_reduction(val, op)
    if cutlass.const_expr(num_warps > 1):
        if cute.arch.lane_idx() == 0:
            red[warp] = val
        cute.arch.barrier()
        val = red[0]
        for w in cutlass.range_constexpr(1, num_warps):
            val = op(val, red[w])
    return val


@cute.jit
def row_stats(rX: cute.Tensor, red_max: cute.Tensor, red_sum: cute.Tensor, num_warps: cutlass.Constexpr):
    """(max, sum of exp(x - max)) over the CTA's raw values of one row, in fp32. Element by element
    from the raw registers, so the fp32 copies never all live at once (a 64 KB bf16 chunk would
    need 128 more registers a thread). A row (or chunk) of only -inf has max -inf and sum 0."""
    m = -cutlass.Float32.inf
    for i in cutlass.range(cute.size(rX), unroll_full=True):
        m = cute.arch.fmax(m, rX[i].to(cutlass.Float32))
    m = block_reduce(m, fmax, red_max, num_warps)
    shift = m
    if m == -cutlass.Float32.inf:
        shift = cutlass.Float32(0.0)
    s = cutlass.Float32(0.0)
    for i in cutlass.range(cute.size(rX), unroll_full=True):
        s = s + cute.math.exp2((rX[i].to(cutlass.Float32) - shift) * LOG2E, fastmath=True)
    s = block_reduce(s, add, red_sum, num_warps)
    return m, s


@cute.jit
def normalise(rX: cute.Tensor, m, inv, rO: cute.Tensor):
    """rO = exp(x - m) * inv, element by element from the raw values (converted to rO's type)."""
    for i in cutlass.range(cute.size(rX), unroll_full=True):
        rO[i] = (cute.math.exp2((rX[i].to(cutlass.Float32) - m) * LOG2E, fastmath=True) * inv).to(rO.element_type)


def validate(x, out):
    for name, t in (("x", x), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
        if t.dim() != 2:
            raise ValueError(f"{name}: must be 2-D [M, N], got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{name}: dtype {t.dtype} is not float32, float16 or bfloat16")
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ValueError(f"{name}: the last dim must be contiguous (stride 1), got strides {t.stride()}")
        if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
            raise ValueError(f"{name}: row stride {t.stride(0)} is smaller than the row length {t.shape[1]}")
    if x.shape != out.shape:
        raise ValueError(f"out: shape {tuple(out.shape)} != x shape {tuple(x.shape)}")
    if x.dtype != out.dtype:
        raise TypeError(f"out: dtype {out.dtype} != x dtype {x.dtype}")
    if x.device != out.device:
        raise ValueError(f"out: device {out.device} != x device {x.device}")
    if x.shape[0] * x.shape[1] == 0:
        raise ValueError(f"x: empty tensor of shape {tuple(x.shape)}")
    if x.shape[0] >= 2 ** 31 or x.shape[1] >= 2 ** 31 - 64:
        raise ValueError(f"x: shape {tuple(x.shape)} is over the 2^31-1 this kernel indexes")


def fake_rows(dtype) -> list:
    """Fake [M, N] input and output for a compile: sizes, row strides and alignment all free (the
    kernels find each row's 16-byte phase at run time), so one compile serves every shape."""
    from cutlass.cute.runtime import make_fake_tensor

    es = torch.empty((), dtype=dtype).element_size()
    m, n = cute.sym_int32(), cute.sym_int32()
    return [make_fake_tensor(cutlass_dtype(dtype), (m, n), (cute.sym_int64(), 1), assumed_align=es)
            for _ in range(2)]


def row_args(x, out):
    """The compiled function's tensor arguments (tvm-ffi: the tensors themselves)."""
    from . import to_cute

    return to_cute(x, x.element_size()), to_cute(out, out.element_size())
