"""Split-K for the CuTe GEMM family (cute:gemm_epilogue_splitk): K split over CTAs into fp32
partials, then one reduction with bias + activation.

``split_range`` gives split s of S its k-tiles; ``SplitK.splitk_fixup`` (a base of
``gemm_base.GemmSm90``, so every schedule has it) runs in the epilogue: each split writes its fp32
partial to a workspace, counts itself in, and the last split of a tile to arrive sums every
partial in split order (deterministic) before bias + act and the store. The planner
(``dispatch.plan_gemm``) picks the split count; ``min_splits=2`` forces split-K (this id).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute


def split_range(s, splits, k_tiles):
    """k-tiles [k0, k1) of split s: balanced, every split non-empty when splits <= k_tiles."""
    return (s * k_tiles) // splits, ((s + 1) * k_tiles) // splits


class SplitK:
    """The split-K fix-up of the GEMM family (a base class of ``gemm_base.GemmSm90``)."""

    @cute.jit
    def splitk_fixup(self, acc: cute.Tensor, coords: cute.Tensor, rows, mWork: cute.Tensor,
                     mCount: cute.Tensor, tile_id, split, splits, t, epi_bar, flag: cute.Tensor):
        """Split-K: write this split's fp32 partial (fragment order: element 4j..4j+3 of thread t
        at (j * threads + t) * 4, so a warp writes 512 contiguous bytes), count the tile's arrivals
        (release/acquire at gpu scope, as CUTLASS's serial reduction does), and in the last split
        to arrive sum every partial in split order into acc. Returns whether this one stores C.

        Only the groups of 4 holding a row inside C (``coords``: the identity tensor partitioned
        like acc; a group is 2 columns of rows r and r + 8) are written and read: a few-row GEMM's
        tile is mostly padding rows. With two splits the last one adds the other's partial to its
        own accumulators: one read of L2 instead of two, and p0 + p1 = p1 + p0 exactly, so the
        sum is the split-order sum bit for bit."""
        frag = cute.size(acc)
        region = cutlass.Int64(self.epi_threads * frag)
        flat = cute.make_tensor(acc.iterator, cute.make_layout((4, frag // 4)))
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float32, num_bits_per_copy=128)
        mine = cute.make_tensor((mWork.iterator + (cutlass.Int64(tile_id) * splits + split) * region
                                 + t * 4).align(16),
                                cute.make_layout((4, frag // 4), stride=(1, 4 * self.epi_threads)))
        for j in cutlass.range_constexpr(frag // 4):
            if cutlass.min(coords[4 * j][0], coords[4 * j + 2][0]) < rows:
                cute.copy(atom, flat[None, j], mine[None, j])
        epi_bar.arrive_and_wait()
        if t == 0:
            cute.arch.fence_acq_rel_gpu()
            old = cute.arch.atomic_add(mCount.iterator + tile_id, cutlass.Int32(1), sem="relaxed", scope="gpu")
            last = cutlass.Int32(0)
            if old == splits - 1:
                last = cutlass.Int32(1)
                mCount[tile_id] = cutlass.Int32(0)             # ready for the next launch
                cute.arch.fence_acq_rel_gpu()
            flag[0] = last
        epi_bar.arrive_and_wait()
        is_last = flag[0] != 0
        if is_last:
            part = cute.make_rmem_tensor(cute.make_layout(4), cutlass.Float32)
            first = cutlass.Int32(0)
            count = cutlass.Int32(splits)
            if splits == 2:
                first = 1 - split                              # only the other split's partial
                count = cutlass.Int32(1)
            else:
                acc.fill(0.0)
            for s in cutlass.range(first, first + count, unroll=1):
                theirs = cute.make_tensor((mWork.iterator + (cutlass.Int64(tile_id) * splits + s) * region
                                           + t * 4).align(16),
                                          cute.make_layout((4, frag // 4), stride=(1, 4 * self.epi_threads)))
                for j in cutlass.range_constexpr(frag // 4):
                    if cutlass.min(coords[4 * j][0], coords[4 * j + 2][0]) < rows:
                        cute.copy(atom, theirs[None, j], part)
                        for i in cutlass.range_constexpr(4):
                            flat[i, j] = flat[i, j] + part[i]
        return is_last
