"""GEMM + epilogue, persistent and warp-specialised, cooperative schedule (cute:gemm_epilogue_ws).

384 threads. Warpgroup 0 produces: it gives registers back (``setmaxnreg``) and fills the ring with
every k-tile of every unit this CTA owns, as far ahead as the stages allow. Warpgroups 1-2 consume:
each holds 64 rows of the 128-row tile's fp32 accumulators, runs the wgmma mainloop, then the
epilogue, while the producer already fills the ring with the next unit's k-tiles. With
``cluster_m = 2`` two CTAs on vertically adjacent tiles share each B tile: each loads half of it
with a multicast TMA into both CTAs, and a consumer warp releases a slot in both.
The pieces (operand loads, ring, mainloop, epilogue, split-K) are ``gemm_base.GemmSm90``'s.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.memory import SmemAllocator

from .gemm_base import EPI_STAGES, GemmSm90, raster, split_range


class GemmWS(GemmSm90):
    pingpong = False

    @cute.kernel
    def kernel(self, tma_a, mA: cute.Tensor, tma_b, mB: cute.Tensor, tma_c, mC: cute.Tensor,
               mBias: cute.Tensor, mWork: cute.Tensor, mCount: cute.Tensor, tiled_mma: cute.TiledMma,
               a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout, c_smem: cute.ComposedLayout,
               cm_tiles: cutlass.Int32, n_tiles: cutlass.Int32, k_tiles: cutlass.Int32,
               splits: cutlass.Int32, units: cutlass.Int32, has_bias: cutlass.Int32, act: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // 128)
        if warp == 0:
            for atom in (tma_a, tma_b, tma_c):
                if cutlass.const_expr(atom is not None):
                    cpasync.prefetch_descriptor(atom)
        rank = 0
        if cutlass.const_expr(self.cluster_m > 1):
            rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_id = bid // self.cluster_m
        clusters = gdim // self.cluster_m

        storage = SmemAllocator().allocate(self.storage)
        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sC = storage.sC.get_tensor(c_smem.outer, swizzle=c_smem.inner)
        ring = self.make_ring(storage, 8)                 # 8 consumer warps read every slot
        if cutlass.const_expr(self.cluster_m > 1):
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()

        if wg == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if cutlass.const_expr(self.pred_loads):             # the whole warpgroup copies
                self.produce(ring, tma_a, mA, tma_b, mB, sA, sB, cm_tiles, n_tiles, k_tiles, splits,
                             units, cluster_id, clusters, rank)
            else:
                if warp == 0:                                   # one warp issues the TMA loads
                    self.produce(ring, tma_a, mA, tma_b, mB, sA, sB, cm_tiles, n_tiles, k_tiles,
                                 splits, units, cluster_id, clusters, rank)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            ct = tidx - 128                                    # thread among the consumers
            gC = cute.local_tile(mC, self.tile, (None, None, None), proj=(1, 1, None))
            cC = cute.local_tile(cute.make_identity_tensor(mC.shape), self.tile, (None, None, None),
                                 proj=(1, 1, None))
            wg_mma = tiled_mma.get_slice(cute.make_layout(2, stride=128)(wg - 1))
            my_mma = tiled_mma.get_slice(ct)                   # this thread's accumulator coordinates
            tCrA = tiled_mma.make_fragment_A(wg_mma.partition_A(sA))
            tCrB = tiled_mma.make_fragment_B(wg_mma.partition_B(sB))
            acc = cute.make_rmem_tensor(wg_mma.partition_C(gC[(None, None, 0, 0)]).shape, self.acc_dtype)
            parts = self.epilogue_parts(tiled_mma, acc, sC, ct)
            epi_bar = pipeline.NamedBarrier(barrier_id=1, num_threads=self.mma_threads)
            store_ring = pipeline.PipelineTmaStore.create(
                num_stages=EPI_STAGES, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.mma_threads))
            is_store_warp = warp == 4
            flag = storage.flag.get_tensor(cute.make_layout(2))
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            stored = cutlass.Int32(0)                          # epilogue sub-tiles stored so far
            for u in cutlass.range(cluster_id, units, clusters, unroll=1):
                tile = u // splits
                split = u - tile * splits
                pm, pn = raster(tile, cm_tiles, n_tiles, self.cluster_m, rank, cutlass.min)
                k0, k1 = split_range(split, splits, k_tiles)
                read, release = self.mainloop(ring, read, release, k1 - k0, tiled_mma, acc, tCrA, tCrB)
                store = cutlass.Boolean(True)
                if cutlass.const_expr(self.splitk):
                    if splits > 1:
                        store = self.splitk_fixup(acc, my_mma.partition_C(cC[(None, None, pm, pn)]),
                                                  cute.size(mC, mode=[0]), mWork, mCount,
                                                  pm * n_tiles + pn, split, splits, ct, epi_bar, flag)
                if store:
                    stored = self.epilogue(acc, parts, my_mma.partition_C(cC[(None, None, pm, pn)]),
                                           gC[(None, None, pm, pn)], cC[(None, None, pm, pn)], tma_c, mC, sC,
                                           0, stored, ct, epi_bar, is_store_warp, store_ring, mBias,
                                           has_bias, act)
            if is_store_warp:
                store_ring.producer_tail()
