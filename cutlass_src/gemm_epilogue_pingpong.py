"""GEMM + epilogue, persistent, warp-specialised, ping-pong schedule (cute:gemm_epilogue_pingpong).

The two consumer warpgroups own alternate units of the CTA's sequence: each holds a whole
TILE_M x TILE_N tile's accumulators (wgmma m64 atoms, twice along M for 128 rows), its own
staging buffers, named barrier and store warp. The producer fills one ring in unit order; a
warpgroup steps its ring position over the other's unit without waiting and alone releases the
slots it read. Two mbarriers make the mainloops take turns in unit order, so one warpgroup's
epilogue (split-K fix-up, bias, act, stores) runs while the other's wgmmas run. The turn-taking is
also what keeps the ring's parity waits sound: a warpgroup that stepped over the other's unit must
not test a slot whose previous fill (the other's unit) has not landed - its barrier could still
show the completed phase of two fills back, which has the same parity.
The pieces (operand loads, ring, mainloop, epilogue, split-K) are ``gemm_base.GemmSm90``'s.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.memory import SmemAllocator

from .gemm_base import EPI_STAGES, GemmSm90, raster, split_range


class GemmPingpong(GemmSm90):
    pingpong = True

    @cute.jit
    def step_over(self, read, release, u, splits, k_tiles, units):
        """Advance past unit u's k-tiles in the ring (the other warpgroup's unit), if it exists."""
        if u < units:
            tile = u // splits
            k0, k1 = split_range(u - tile * splits, splits, k_tiles)
            for _ in cutlass.range(k1 - k0, unroll=1):
                read.advance()
                release.advance()
        return read, release

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

        storage = SmemAllocator().allocate(self.storage)
        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sC = storage.sC.get_tensor(c_smem.outer, swizzle=c_smem.inner)
        ring = self.make_ring(storage, 4)                 # a slot is read by one warpgroup
        # turn barriers: warpgroup w waits on order[w]; the other's 4 warps arrive when they leave
        # a mainloop
        order = storage.order.data_ptr()
        if tidx == 0:
            cute.arch.mbarrier_init(order, 4)
            cute.arch.mbarrier_init(order + 1, 4)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        if wg == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if cutlass.const_expr(self.pred_loads):
                self.produce(ring, tma_a, mA, tma_b, mB, sA, sB, cm_tiles, n_tiles, k_tiles, splits,
                             units, bid, gdim, 0)
            else:
                if warp == 0:
                    self.produce(ring, tma_a, mA, tma_b, mB, sA, sB, cm_tiles, n_tiles, k_tiles,
                                 splits, units, bid, gdim, 0)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            me = wg - 1
            t = tidx % 128                                     # thread within the warpgroup
            gC = cute.local_tile(mC, self.tile, (None, None, None), proj=(1, 1, None))
            cC = cute.local_tile(cute.make_identity_tensor(mC.shape), self.tile, (None, None, None),
                                 proj=(1, 1, None))
            wg_mma = tiled_mma.get_slice(0)                    # the warpgroup's operand view
            thr_mma = tiled_mma.get_slice(t)                   # this thread's accumulators
            tCrA = tiled_mma.make_fragment_A(wg_mma.partition_A(sA))
            tCrB = tiled_mma.make_fragment_B(wg_mma.partition_B(sB))
            acc = cute.make_rmem_tensor(thr_mma.partition_C(gC[(None, None, 0, 0)]).shape, self.acc_dtype)
            parts = self.epilogue_parts(tiled_mma, acc, sC, t)
            epi_bar = pipeline.NamedBarrier(barrier_id=1 + me, num_threads=128)
            store_ring = pipeline.PipelineTmaStore.create(
                num_stages=EPI_STAGES, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128))
            is_store_warp = warp % 4 == 0
            my_flag = cute.make_tensor(storage.flag.data_ptr() + me, cute.make_layout(1))
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            if me == 1:                     # warpgroup 0's first unit comes first in the ring
                read, release = self.step_over(read, release, bid, splits, k_tiles, units)
            turns = cutlass.Int32(0)                           # mainloops this warpgroup ran
            stored = cutlass.Int32(0)                          # epilogue sub-tiles it stored
            for u in cutlass.range(bid + me * gdim, units, 2 * gdim, unroll=1):
                tile = u // splits
                split = u - tile * splits
                pm, pn = raster(tile, cm_tiles, n_tiles, 1, 0, cutlass.min)
                k0, k1 = split_range(split, splits, k_tiles)
                wait_for = turns - 1 + me                      # completions of order[me] to await
                if wait_for >= 0:
                    cute.arch.mbarrier_wait(order + me, wait_for % 2)
                read, release = self.mainloop(ring, read, release, k1 - k0, tiled_mma, acc, tCrA, tCrB)
                if cute.arch.lane_idx() == 0:                  # our mainloop is over: other's turn
                    cute.arch.mbarrier_arrive(order + (1 - me))
                read, release = self.step_over(read, release, u + gdim, splits, k_tiles, units)
                turns += 1

                # ---- epilogue, under the other warpgroup's mainloop ----------------------------
                store = cutlass.Boolean(True)
                if cutlass.const_expr(self.splitk):
                    if splits > 1:
                        store = self.splitk_fixup(acc, thr_mma.partition_C(cC[(None, None, pm, pn)]),
                                                  cute.size(mC, mode=[0]), mWork, mCount,
                                                  pm * n_tiles + pn, split, splits, t, epi_bar, my_flag)
                if store:
                    stored = self.epilogue(acc, parts, thr_mma.partition_C(cC[(None, None, pm, pn)]),
                                           gC[(None, None, pm, pn)], cC[(None, None, pm, pn)], tma_c, mC, sC,
                                           me * EPI_STAGES, stored, t, epi_bar, is_store_warp, store_ring,
                                           mBias, has_bias, act)
            if is_store_warp:
                store_ring.producer_tail()
