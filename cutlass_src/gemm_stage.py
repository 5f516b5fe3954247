"""Staging copies for the CuTe GEMM family: an operand whose rows TMA cannot read (rows of N = 2047
or K = 777 16-bit elements are not 16-byte multiples) copied once a call into a workspace whose
rows are, so that the family's TMA loads take it (dispatch.plan_gemm's ``stage``; the descriptor
keeps the real column count, so boxes still clip at the matrix edge).

One thread a 16-byte chunk of a destination row: eight 2-byte loads from the source (any
alignment; zeros past its last column), one 128-bit store. The destination's row stride is a
multiple of 8 elements, so every chunk is 16-byte aligned. Sizes and strides are run-time: one
compile per dtype.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import torch

from . import cached, compile_kernel, cutlass_dtype, fake_stream, stream_args, to_cute

THREADS = 256
VEC = 8                                  # elements of a 16-byte chunk


class StageRows:
    @cute.kernel
    def kernel(self, mS: cute.Tensor, mD: cute.Tensor, cols: cutlass.Int32, chunks_per_row: cutlass.Int32,
               total: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * THREADS + tidx
        if i < total:
            r = i // chunks_per_row
            q = i - r * chunks_per_row
            gD = cute.local_tile(mD[r, None], (VEC,), (q,))                 # 16-byte aligned
            regs = cute.make_rmem_tensor(cute.make_layout((VEC,)), mD.element_type)
            for v in cutlass.range_constexpr(VEC):
                c = q * VEC + v
                regs[v] = mD.element_type(0)
                if c < cols:
                    regs[v] = mS[r, c]
            atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), mD.element_type,
                                       num_bits_per_copy=mD.element_type.width * VEC)
            cute.copy(atom, regs, gD)

    @cute.jit
    def __call__(self, mS: cute.Tensor, mD: cute.Tensor, stream):
        rows = cute.size(mS, mode=[0])
        cols = cute.size(mS, mode=[1])
        cpr = (cols + VEC - 1) // VEC
        total = rows * cpr
        self.kernel(mS, mD, cols, cpr, total).launch(grid=((total + THREADS - 1) // THREADS, 1, 1),
                                                    block=(THREADS, 1, 1), stream=stream)


def compile_stage(dtype):
    """Compile (cached) the copy for a 16-bit dtype against fake tensors: no GPU needed."""
    key = ("gemm_stage", str(dtype))
    c = cached(key)
    if c is not None:
        return c
    from cutlass.cute.runtime import make_fake_tensor

    cdt = cutlass_dtype(dtype)
    rows = cute.sym_int32()
    src = make_fake_tensor(cdt, (rows, cute.sym_int32()), (cute.sym_int64(), 1), assumed_align=2)
    dst = make_fake_tensor(cdt, (rows, cute.sym_int32(divisibility=VEC)), (cute.sym_int64(divisibility=VEC), 1),
                           assumed_align=16)
    return compile_kernel(key, StageRows(), src, dst, fake_stream())


def staged(t: torch.Tensor) -> torch.Tensor:
    """A workspace for ``t`` [rows, cols] with rows of a multiple of 8 elements (the full padded
    buffer; ``[:, :cols]`` is the operand the GEMM reads)."""
    rows, cols = t.shape
    return torch.empty((rows, -(-max(cols, 1) // VEC) * VEC), dtype=t.dtype, device=t.device)


def stage_launch(src: torch.Tensor, dst: torch.Tensor):
    """(launch, compiled): the copy src -> dst[:, :cols] (dst from ``staged``), arguments bound once."""
    comp = compile_stage(src.dtype)
    args = (to_cute(src, 2), to_cute(dst, 16))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())
    return launch, comp
