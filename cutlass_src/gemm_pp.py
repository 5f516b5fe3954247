"""GEMM + fused epilogue for Hopper (sm_90a), persistent, warp-specialised, **ping-pong**:
C = act(A @ B + bias).

Like ``gemm_ws.py`` (producer warpgroup issuing TMA, persistent grid, grouped raster), but the
two consumer warpgroups do not share a tile: each owns whole 128 x TILE_N tiles, alternately -
the CTA's j-th tile goes to warpgroup j % 2. The producer fills one shared ring with the k-tiles
of tile 0, then tile 1, then tile 2, ...; a warpgroup waits only on the slots of its own tiles and
steps its ring position over the other's (``advance`` k-tiles times, no waiting), and it alone
releases the slots it read (4 warp arrivals per slot). Two more mbarriers make the mainloops
take turns in tile order (tile j's starts when tile j-1's has finished): warpgroup 1's mainloop
runs while warpgroup 0 does its epilogue and vice versa, so one warpgroup's epilogue
(bias + act, ``stmatrix``, TMA store) runs while the other's wgmmas keep the tensor cores busy -
the overlap the cooperative kernel cannot have.

Per warpgroup: wgmma m64nNk16 twice along M (128 rows), fp32 accumulators 128 x TILE_N / 128
threads, its own 4-deep epilogue staging buffer, named barrier and TMA-store warp.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
import torch
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, cutlass_dtype, fake_stream, stream_args, to_cute
from .gemm_epilogue import ACTS, bias_act, check, validate
from .gemm_ws import DEFAULT_SMS, raster

PRODUCER_REGS = 40
CONSUMER_REGS = 232


class GemmPingPong:
    def __init__(self, act: str, has_bias: bool, tile_n: int = 128, max_clusters: int = DEFAULT_SMS,
                 stages: int | None = None):
        if act not in ACTS:
            raise ValueError(f"act: {act!r} is not one of {', '.join(ACTS)}")
        self.act, self.has_bias = act, has_bias
        self.tile_m, self.tile_n = 128, tile_n
        self.max_clusters = max_clusters
        self.threads = 384                     # producer warpgroup + two consumer warpgroups
        self.acc_dtype = cutlass.Float32
        self.stages_override = stages
        self.epi_stage = 4

    def _setup(self):
        # one warpgroup's MMA: m64 atoms, tiled twice along M by the partition (128 rows)
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype, self.b_dtype, self.a_layout.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(), self.acc_dtype, (1, 1, 1),
            tiler_mn=(64, self.tile_n))
        k_inst = cute.size(self.tiled_mma.shape_mnk, mode=[2])
        self.tile = (self.tile_m, self.tile_n, k_inst * 4)
        self.epi_tile = sm90_utils.compute_tile_shape_or_override(self.tile, self.c_dtype,
                                                                  is_cooperative=False)
        per_stage = (self.tile_m + self.tile_n) * self.tile[2] * self.a_dtype.width // 8
        epi_bytes = self.epi_tile[0] * self.epi_tile[1] * self.c_dtype.width // 8 * 2 * self.epi_stage
        cap = utils.get_smem_capacity_in_bytes("sm_90")
        self.stages = self.stages_override or (cap - epi_bytes - 1024) // per_stage
        self.a_smem = sm90_utils.make_smem_layout_a(self.a_layout, self.tile, self.a_dtype, self.stages)
        self.b_smem = sm90_utils.make_smem_layout_b(self.b_layout, self.tile, self.b_dtype, self.stages)
        # both warpgroups' staging buffers: warpgroup w uses stages [w*EPI, (w+1)*EPI)
        self.c_smem = sm90_utils.make_smem_layout_epi(self.c_dtype, self.c_layout, self.epi_tile,
                                                      2 * self.epi_stage)

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mBias: cute.Tensor, stream):
        self.a_dtype, self.b_dtype, self.c_dtype = mA.element_type, mB.element_type, mC.element_type
        self.a_layout = utils.LayoutEnum.from_tensor(mA)
        self.b_layout = utils.LayoutEnum.from_tensor(mB)
        self.c_layout = utils.LayoutEnum.from_tensor(mC)
        self._setup()

        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_a, tA = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, mA, cute.slice_(self.a_smem, (None, None, 0)), (self.tile[0], self.tile[2]))
        tma_b, tB = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, mB, cute.slice_(self.b_smem, (None, None, 0)), (self.tile[1], self.tile[2]))
        tma_c, tC = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), mC,
            cute.slice_(self.c_smem, (None, None, 0)), self.epi_tile)

        m, n = cute.size(mC, mode=[0]), cute.size(mC, mode=[1])
        m_tiles = (m + self.tile_m - 1) // self.tile_m
        n_tiles = (n + self.tile_n - 1) // self.tile_n
        units = m_tiles * n_tiles
        ctas = cutlass.min(units, self.max_clusters)

        @cute.struct
        class Storage:
            bars: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            order: cute.struct.MemRange[cutlass.Int64, 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(self.a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(self.c_smem)], 1024]

        self.storage = Storage
        self.kernel(tma_a, tA, tma_b, tB, tma_c, tC, mBias, self.tiled_mma, self.a_smem,
                    self.b_smem, self.c_smem, m_tiles, n_tiles, units).launch(
            grid=(ctas, 1, 1), block=(self.threads, 1, 1), cluster=(1, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, mBias: cute.Tensor, tiled_mma: cute.TiledMma,
               a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
               c_smem: cute.ComposedLayout, m_tiles: cutlass.Int32, n_tiles: cutlass.Int32,
               units: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // 128)
        if warp == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)

        storage = SmemAllocator().allocate(self.storage)
        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)

        tx_bytes = (cute.size_in_bytes(self.a_dtype, cute.slice_(a_smem, (None, None, 0)))
                    + cute.size_in_bytes(self.b_dtype, cute.slice_(b_smem, (None, None, 0))))
        # mainloop order: warpgroup w waits on order[w], which the other warpgroup's 4 warps
        # arrive on when they leave a mainloop (initialised here; the ring's creation fences
        # and syncs the CTA)
        order = storage.order.data_ptr()
        if tidx == 0:
            cute.arch.mbarrier_init(order, 4)
            cute.arch.mbarrier_init(order + 1, 4)
        # a slot is read, and released, by one warpgroup: 4 warp arrivals
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.bars.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 4),
            tx_count=tx_bytes, cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))

        gA = cute.local_tile(mA, self.tile, (None, None, None), proj=(1, None, 1))
        gB = cute.local_tile(mB, self.tile, (None, None, None), proj=(None, 1, 1))
        gC = cute.local_tile(mC, self.tile, (None, None, None), proj=(1, 1, None))
        cC = cute.local_tile(cute.make_identity_tensor(mC.shape), self.tile, (None, None, None),
                             proj=(1, 1, None))
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
        k_tiles = cute.size(gA, mode=[3])

        if wg == 0:
            # ---------------- producer: every k-tile of every tile, in tile order -------------
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp == 0:
                prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                for u in cutlass.range(bid, units, gdim, unroll=1):
                    pm, pn = raster(u, m_tiles, n_tiles, 1, 0, cutlass.min)
                    for kt in cutlass.range(k_tiles, unroll=1):
                        ring.producer_acquire(prod)
                        cute.copy(tma_a, tAgA[(None, pm, kt)], tAsA[(None, prod.index)],
                                  tma_bar_ptr=ring.producer_get_barrier(prod))
                        cute.copy(tma_b, tBgB[(None, pn, kt)], tBsB[(None, prod.index)],
                                  tma_bar_ptr=ring.producer_get_barrier(prod))
                        ring.producer_commit(prod)
                        prod.advance()
                ring.producer_tail(prod)
        else:
            # ---------------- consumer warpgroup `me` owns this CTA's tiles j = me, me+2, ... --
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            me = wg - 1
            t = tidx % 128                                     # thread within the warpgroup
            sC = storage.sC.get_tensor(c_smem.outer, swizzle=c_smem.inner)
            wg_mma = tiled_mma.get_slice(0)                    # the warpgroup's operand view
            thr_mma = tiled_mma.get_slice(t)                   # this thread's accumulators
            tCrA = tiled_mma.make_fragment_A(wg_mma.partition_A(sA))
            tCrB = tiled_mma.make_fragment_B(wg_mma.partition_B(sB))
            acc = cute.make_rmem_tensor(thr_mma.partition_C(gC[(None, None, 0, 0)]).shape,
                                        self.acc_dtype)
            k_blocks = cute.size(tCrA, mode=[2])

            r2s_atom = sm90_utils.sm90_get_smem_store_op(self.c_layout, elem_ty_d=self.c_dtype,
                                                         elem_ty_acc=self.acc_dtype)
            stm = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(self.c_layout.is_m_major_c(), 4),
                                      self.c_dtype)
            r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm, tiled_mma))
            thr_r2s = r2s.get_slice(t)
            tRS_sC = thr_r2s.partition_D(sC)
            tRS_acc = r2s.retile(acc)
            rD_layout = cute.make_layout(cute.shape(thr_r2s.partition_S(sC))[:3])
            rD = cute.make_rmem_tensor_like(rD_layout, self.acc_dtype)
            rOut = cute.make_rmem_tensor_like(rD_layout, self.c_dtype)
            per_epi = cute.size(rD)
            store_ring = pipeline.PipelineTmaStore.create(
                num_stages=self.epi_stage,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128))
            epi_bar = pipeline.NamedBarrier(barrier_id=1 + me, num_threads=128)
            is_store_warp = warp % 4 == 0
            n = cute.size(mC, mode=[1])

            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            # the other warpgroup's first tile (when we are warpgroup 1) comes first in the ring
            if me == 1:
                for _ in cutlass.range(k_tiles, unroll=1):
                    read.advance()
                    release.advance()
            done = cutlass.Int32(0)
            for u in cutlass.range(bid + me * gdim, units, 2 * gdim, unroll=1):
                pm, pn = raster(u, m_tiles, n_tiles, 1, 0, cutlass.min)
                # Mainloops run in tile order (j-1 done before j starts). Beyond taking turns on
                # the tensor cores this is what makes the ring's parity waits sound: having
                # stepped over the other warpgroup's tile without waiting, we must not test a
                # slot whose previous fill (the other's tile) has not landed - its barrier could
                # still show the completed phase of two fills back, which has our parity.
                turn = done - 1 + me                       # completions of order[me] to await
                if turn >= 0:
                    cute.arch.mbarrier_wait(order + me, turn % 2)
                acc.fill(0.0)
                ring.consumer_wait(read)
                cute.nvgpu.warpgroup.fence()
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                              tCrB[(None, None, kb, read.index)], acc)
                cute.nvgpu.warpgroup.commit_group()
                read.advance()
                for kt in cutlass.range(1, k_tiles, 1, unroll=1):
                    ring.consumer_wait(read)
                    cute.nvgpu.warpgroup.fence()
                    for kb in cutlass.range_constexpr(k_blocks):
                        cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                                  tCrB[(None, None, kb, read.index)], acc)
                    cute.nvgpu.warpgroup.commit_group()
                    cute.nvgpu.warpgroup.wait_group(1)
                    ring.consumer_release(release)
                    release.advance()
                    read.advance()
                cute.nvgpu.warpgroup.wait_group(0)
                ring.consumer_release(release)
                release.advance()
                if cute.arch.lane_idx() == 0:                # our mainloop is over: other's turn
                    cute.arch.mbarrier_arrive(order + (1 - me))
                # step over the other warpgroup's next tile in the ring (if the CTA has one)
                if u + gdim < units:
                    for _ in cutlass.range(k_tiles, unroll=1):
                        read.advance()
                        release.advance()

                # ---- fused epilogue (overlaps the other warpgroup's mainloop) -------------
                if cutlass.const_expr(self.has_bias or self.act != "none"):
                    bias_act(acc, thr_mma.partition_C(cC[(None, None, pm, pn)]), mBias, n,
                             self.has_bias, self.act)

                gC_epi = cute.zipped_divide(gC[(None, None, pm, pn)], self.epi_tile)
                bsC, bgC = cute.nvgpu.cpasync.tma_partition(tma_c, 0, cute.make_layout(1),
                                                            cute.group_modes(sC, 0, 2), gC_epi)
                epi_count = cute.size(gC_epi, mode=[1])
                epi_shape = gC_epi.shape[1]
                epi_order = cute.make_layout(epi_shape, stride=(epi_shape[1], 1))
                for e in cutlass.range_constexpr(epi_count):
                    for v in cutlass.range_constexpr(per_epi):
                        rD[v] = tRS_acc[e * per_epi + v]
                    rOut.store(rD.load().to(self.c_dtype))
                    buf = me * self.epi_stage + (done * epi_count + e) % self.epi_stage
                    cute.copy(r2s, rOut, tRS_sC[(None, None, None, buf)])
                    cute.arch.fence_proxy("async.shared", space="cta")
                    epi_bar.arrive_and_wait()
                    if is_store_warp:
                        cute.copy(tma_c, bsC[(None, buf)], bgC[(None, epi_order.get_hier_coord(e))])
                        store_ring.producer_commit()
                        store_ring.producer_acquire()
                    epi_bar.arrive_and_wait()
                done += 1
            if is_store_warp:
                store_ring.producer_tail()


def _compile(dtype, act: str, has_bias: bool, tile_n: int = 128, ctas: int | None = None,
             stages: int | None = None):
    from .gemm_ws import max_clusters

    ctas = ctas or max_clusters(1)
    key = ("gemm_pp", str(dtype), act, has_bias, tile_n, 1, ctas, stages)
    c = cached(key)
    if c is not None:
        return c
    from cutlass.cute.runtime import make_fake_tensor

    cdt = cutlass_dtype(dtype)
    m, n, k = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=8)
    sk, sn = cute.sym_int64(divisibility=8), cute.sym_int64(divisibility=8)
    sn_c = cute.sym_int64(divisibility=8)
    a = make_fake_tensor(cdt, (m, k), (sk, 1), assumed_align=16)
    b = make_fake_tensor(cdt, (n, k), (1, sn), assumed_align=16)      # B[K, N] seen as [N, K]
    c = make_fake_tensor(cdt, (m, n), (sn_c, 1), assumed_align=16)
    bias = make_fake_tensor(cdt, (cute.sym_int32(),), (1,), assumed_align=2)
    return compile_kernel(key, GemmPingPong(act, has_bias, tile_n, ctas, stages), a, b, c, bias,
                          fake_stream())


def prepare_gemm_pp(a, b, bias, out, act="relu", tile_n=128, stages=None):
    validate(a, b, bias, out, act)
    comp = _compile(a.dtype, act, bias is not None, tile_n, None, stages)
    bias_t = bias if bias is not None else torch.zeros(8, dtype=a.dtype, device=a.device)
    args = (to_cute(a, 16), to_cute(b.t(), 16, leading_dim=0), to_cute(out, 16),
            to_cute(bias_t, 2))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp


def compile_only(dtype=torch.bfloat16, act="relu", has_bias=True, tile_n=128, ctas=None):
    return _compile(dtype, act, has_bias, tile_n, ctas)


__all__ = ["GemmPingPong", "check", "prepare_gemm_pp", "compile_only"]
