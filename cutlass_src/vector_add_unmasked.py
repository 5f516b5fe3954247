"""vector_add in the CuTe DSL, the tuned default (cute:vector_add): out = x + y, the `unmasked`
algorithm (docs/DESIGN.md): full tiles of 128-bit accesses without masks, one predicated tail.

Each CTA owns a tile of ``THREADS * UNROLL * VEC`` elements (UNROLL from ``dispatch``: fewer
accesses a thread for a vector too short to give every SM a CTA). The tile is viewed through the layout
``(VEC, THREADS, UNROLL) : (1, VEC, VEC*THREADS)``: thread ``t`` takes the ``VEC`` contiguous
elements at ``(u*THREADS + t)*VEC`` for each ``u`` - one 128-bit access per ``u``, and a warp's
accesses are contiguous (coalesced). ``VEC`` is 16 bytes of elements when every pointer is 16-byte
aligned, fewer when the inputs start misaligned (``misalign``): the same kernel then moves 8, 4
or 2 bytes per access. Full tiles copy without predicates; the one ragged tile at the end (N not
a multiple of the tile) takes an element-wise path guarded by ``i < N``.
N is a symbolic size: one compile per (dtype, access width) serves every N.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import torch

from . import align_of, compile_kernel, cutlass_dtype, fake_stream, stream_args, to_cute

THREADS = 256


class VectorAdd:
    def __init__(self, vec: int, unroll: int):
        self.vec, self.unroll = vec, unroll
        self.tile = THREADS * unroll * vec

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor, mO: cute.Tensor, n: cutlass.Int32,
               n_full: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        # per-thread view of this CTA's tile: (VEC, UNROLL) elements
        tv = cute.make_layout((self.vec, THREADS, self.unroll), stride=(1, self.vec, self.vec * THREADS))
        if bidx < n_full:
            gX = cute.composition(cute.local_tile(mX, (self.tile,), (bidx,)), tv)[None, tidx, None]
            gY = cute.composition(cute.local_tile(mY, (self.tile,), (bidx,)), tv)[None, tidx, None]
            gO = cute.composition(cute.local_tile(mO, (self.tile,), (bidx,)), tv)[None, tidx, None]
            atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), mX.element_type,
                                       num_bits_per_copy=mX.element_type.width * self.vec)
            rX = cute.make_rmem_tensor_like(gX)
            rY = cute.make_rmem_tensor_like(gY)
            cute.copy(atom, gX, rX)
            cute.copy(atom, gY, rY)
            rO = cute.make_rmem_tensor_like(gO)
            rO.store(rX.load() + rY.load())
            cute.copy(atom, rO, gO)
        else:
            # the ragged last tile: element-wise, every access guarded
            base = bidx * self.tile
            for u in cutlass.range_constexpr(self.unroll):
                for v in cutlass.range_constexpr(self.vec):
                    i = base + (u * THREADS + tidx) * self.vec + v
                    if i < n:
                        mO[i] = mX[i] + mY[i]

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, mO: cute.Tensor, stream):
        n = cute.size(mX, mode=[0])
        n_full = n // self.tile
        n_tiles = (n + self.tile - 1) // self.tile
        self.kernel(mX, mY, mO, n, n_full).launch(grid=(n_tiles, 1, 1), block=(THREADS, 1, 1),
                                                  stream=stream)


def _compile(dtype: torch.dtype, align: int, unroll: int):
    """Compile (cached) for an element type, a common pointer alignment in bytes and the 128-bit
    accesses a thread per operand."""
    cdt = cutlass_dtype(dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    vec = _vec(dtype, align)
    key = ("vector_add", str(dtype), vec, unroll)

    def build():
        from cutlass.cute.runtime import make_fake_compact_tensor

        n = cute.sym_int32()
        a = max(esize, vec * esize)
        fakes = [make_fake_compact_tensor(cdt, (n,), assumed_align=a) for _ in range(3)]
        return fakes

    from . import cached

    c = cached(key)
    if c is not None:
        return c, vec
    return compile_kernel(key, VectorAdd(vec, unroll), *build(), fake_stream()), vec


def validate(x, y, out):
    for name, t in (("x", x), ("y", y), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
        if t.dim() != 1:
            raise ValueError(f"{name}: must be 1-D, got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{name}: dtype {t.dtype} is not float32, float16 or bfloat16")
        if t.numel() > 0 and t.stride(0) != 1:
            raise ValueError(f"{name}: must be contiguous (stride 1), got stride {t.stride(0)}")
    if not (x.dtype == y.dtype == out.dtype):
        raise TypeError(f"y/out: dtypes differ: x {x.dtype}, y {y.dtype}, out {out.dtype}")
    if not (x.shape == y.shape == out.shape):
        raise ValueError(f"y/out: shapes differ: x {tuple(x.shape)}, y {tuple(y.shape)}, "
                         f"out {tuple(out.shape)}")
    if not (x.device == y.device == out.device):
        raise ValueError(f"y/out: devices differ: {x.device}, {y.device}, {out.device}")
    if x.numel() >= 2 ** 31:
        raise ValueError(f"x: {x.numel()} elements is over the 2^31-1 this kernel indexes")


def _vec(dtype: torch.dtype, align: int) -> int:
    """Elements one access moves when every pointer is ``align``-byte aligned."""
    return max(1, align // torch.empty((), dtype=dtype).element_size())


def access_plan(n: int, dtype: torch.dtype, align: int) -> tuple[int, int]:
    """(vec, unroll): elements an access moves at this alignment, accesses a thread per operand."""
    from . import dispatch
    vec = _vec(dtype, align)
    return vec, dispatch.vector_add_unroll(n, vec, THREADS)


def prepare_vector_add(x, y, out):
    """Validate, compile (cached) and return (launch, compiled, vec, unroll)."""
    validate(x, y, out)
    align = align_of(x.data_ptr(), y.data_ptr(), out.data_ptr())
    unroll = access_plan(x.numel(), x.dtype, align)[1]
    comp, vec = _compile(x.dtype, align, unroll)
    a = max(x.element_size(), vec * x.element_size())
    args = (to_cute(x, a), to_cute(y, a), to_cute(out, a))
    fn = comp.fn

    def launch():
        if x.numel():
            fn(*args, *stream_args())

    return launch, comp, vec, unroll


def vector_add(x, y, out=None):
    """out = x + y (CUDA tensors, fp32/fp16/bf16, 1-D)."""
    if out is None:
        out = torch.empty_like(x)
    launch = prepare_vector_add(x, y, out)[0]
    launch()
    return out


def compile_only(dtype: torch.dtype, align: int = 16, n: int = 1 << 24):
    """Compile for sm_90a without a GPU (the plan for ``n`` elements); returns the Compiled record."""
    return _compile(dtype, align, access_plan(n, dtype, align)[1])[0]
