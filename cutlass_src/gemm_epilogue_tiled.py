"""Tiled copies for the CuTe GEMM family (cute:gemm_epilogue_tiled): A and B by the producer
warpgroup's predicated tiled copies (no TMA, any shape and stride), C by a predicated tiled copy.

``TiledCopies`` is a base of ``gemm_base.GemmSm90``: an operand whose rows TMA cannot take takes
the "vN" load (``gmem_copy`` + ``copy_predicated``: N-element vectors, zero-filled outside the
matrix) into the same swizzled stage the TMA path fills; C rows that TMA cannot store go out by
``c_copy``. The planner (``dispatch.plan_gemm``) chooses per operand; ``tma=False`` forces these
copies everywhere (this id).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

COPY_BATCH_REGS = 32        # registers a producer thread fills before it writes them to the stage


class TiledCopies:
    """The predicated tiled copies of the GEMM family (a base class of ``gemm_base.GemmSm90``)."""

    def gmem_copy(self, dtype, vec: int, rows: int, contiguous_mode: int):
        """The producer's tiled copy of a (rows, K_TILE) operand tile whose mode ``contiguous_mode``
        is contiguous in memory: 128 threads, ``vec``-element accesses along that mode, a warp's
        accesses adjacent (coalesced)."""
        K_TILE, PRODUCER_THREADS = self.k_tile, self.producer_threads   # the family's (gemm_base.py)

        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=dtype.width * vec)
        extent = K_TILE if contiguous_mode == 1 else rows
        across = min(extent // vec, PRODUCER_THREADS)
        other = PRODUCER_THREADS // across
        if contiguous_mode == 1:
            thr = cute.make_layout((other, across), stride=(across, 1))
            val = cute.make_layout((1, vec))
        else:
            thr = cute.make_layout((across, other), stride=(1, across))
            val = cute.make_layout((vec, 1))
        return cute.make_tiled_copy_tv(atom, thr, val)

    @cute.jit
    def copy_predicated(self, tiled: cute.TiledCopy, t, src: cute.Tensor, coords: cute.Tensor,
                        extent, dst: cute.Tensor, vec: cutlass.Constexpr):
        """src -> dst for thread t of ``tiled``, vector by vector: a vector whose first element is
        outside ``extent`` is written as zeros (vec divides the contiguous extent, so a vector is
        wholly in or out). Batches of COPY_BATCH_REGS registers: loads first, then stores."""
        thr = tiled.get_slice(t)
        tS = cute.group_modes(thr.partition_S(src), 1, 3)        # (vector, rest)
        tD = cute.group_modes(thr.partition_D(dst), 1, 3)
        tC = cute.group_modes(thr.partition_S(coords), 1, 3)
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), src.element_type,
                                   num_bits_per_copy=src.element_type.width * vec)
        rest = cute.size(tS, mode=[1])
        batch = min(rest, max(1, COPY_BATCH_REGS // max(1, vec * src.element_type.width // 32)))
        regs = cute.make_rmem_tensor(cute.make_layout((vec, batch)), src.element_type)
        for b0 in cutlass.range_constexpr(0, rest, batch):
            regs.fill(0)
            for i in cutlass.range_constexpr(min(batch, rest - b0)):
                if cute.elem_less(tC[0, b0 + i], extent):
                    cute.copy(atom, tS[None, b0 + i], regs[None, i])
            for i in cutlass.range_constexpr(min(batch, rest - b0)):
                cute.copy(atom, regs[None, i], tD[None, b0 + i])

    def c_copy(self, dtype):
        """Tiled copy of one epilogue sub-tile, staging buffer -> C, for C rows that TMA cannot
        store: ``vc``-element accesses along N, the epilogue group's threads, predicated."""
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=dtype.width * self.vc)
        across = min(self.epi_tile[1] // self.vc, self.epi_threads)
        thr = cute.make_layout((self.epi_threads // across, across), stride=(across, 1))
        return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, self.vc))), atom
