"""GEMM + fused epilogue for Hopper (sm_90a), persistent and warp-specialised: C = act(A @ B + bias).

Same problem, operands, tile (128 x TILE_N x 64, wgmma m64nNk16, two consumer warpgroups of 64
rows each) and epilogue as ``gemm_epilogue.py``; what changes is who does what, and for how long:

- **Persistent**: the grid is one CTA per SM (or per SM pair with clusters); each CTA walks the
  output tiles ``u = cluster_id, cluster_id + clusters, ...`` in a grouped raster order (GROUP_M
  tile rows share a column of B tiles in L2). One launch ramp per SM instead of one per tile.
- **Warp-specialised**: 384 threads. Warpgroup 0 is the producer: it gives registers back
  (``setmaxnreg`` 40) and its warp 0 issues the TMA loads of every k-tile of every tile this CTA
  owns, as far ahead as the ``STAGES``-deep shared-memory ring allows. Warpgroups 1-2 (232
  registers each thread) only wait on the "full" mbarriers, run the wgmmas (one batch in flight),
  release slots, and run the epilogue. While they do a tile's epilogue the producer is already
  filling the ring with the next tile's k-tiles, so the next mainloop starts on a full pipeline.
- **Epilogue**: bias + none/relu/gelu-tanh on the fp32 accumulators (per-thread coordinates from
  an identity tensor partitioned like the accumulators), convert, ``stmatrix`` into a dedicated
  4-deep staging buffer (not the A ring, which the producer is refilling), TMA store.
- **Cluster 2x1 (optional, ``cluster_m`` = 2)**: two CTAs on vertically adjacent tiles share each
  B tile: each loads half of it with a multicast TMA into both CTAs' shared memory; a consumer
  warp releases a ring slot in both CTAs (the peer's multicast writes into ours). B's L2->SM
  traffic halves. With an odd number of tile rows the second CTA of the last cluster computes
  a tile wholly below M: TMA zero-fills its A loads and clips its stores, and it still supplies
  its half of B to its peer.

M, N, K are symbolic; one compile per (dtype, act, bias?, tile, cluster, resident clusters). Alignment
rules are those of TMA (``gemm_epilogue.check``).
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

GROUP_M = 8                  # raster: 8 tile rows per band (in CTA tiles)
DEFAULT_SMS = 132            # H100 SXM / H200; the real count is read from the GPU when present
PRODUCER_REGS = 40
CONSUMER_REGS = 232


def raster(u, cm_tiles, n_tiles, cluster_m, rank, min_fn=min):
    """(tile row, tile column) of work unit ``u`` for CTA ``rank`` of its cluster: bands of
    GROUP_M tile rows walked column by column, so the CTAs running at once share B tiles in L2.
    Plain arithmetic: the kernel calls it on DSL integers, the tests on Python ints."""
    group = GROUP_M // cluster_m                                       # band height in clusters
    per_band = group * n_tiles
    first = (u // per_band) * group
    height = min_fn(cm_tiles - first, group)
    cm = first + (u % per_band) % height
    pn = (u % per_band) // height
    return cm * cluster_m + rank, pn


class GemmWS:
    def __init__(self, act: str, has_bias: bool, tile_n: int = 256, cluster_m: int = 1,
                 max_clusters: int = DEFAULT_SMS, stages: int | None = None):
        if act not in ACTS:
            raise ValueError(f"act: {act!r} is not one of {', '.join(ACTS)}")
        if cluster_m not in (1, 2):
            raise ValueError(f"cluster_m: {cluster_m} is not 1 or 2")
        self.act, self.has_bias = act, has_bias
        self.tile_m, self.tile_n = 128, tile_n
        self.cluster_m = cluster_m
        self.max_clusters = max_clusters       # clusters resident at once (the persistent grid)
        self.atom_layout = (2, 1, 1)          # two consumer warpgroups, 64 rows each
        self.mma_threads = 256
        self.threads = 128 + self.mma_threads  # + the producer warpgroup
        self.acc_dtype = cutlass.Float32
        self.stages_override = stages
        self.epi_stage = 4
        self.epi_bar = pipeline.NamedBarrier(barrier_id=1, num_threads=self.mma_threads)

    def _setup(self):
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype, self.b_dtype, self.a_layout.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(), self.acc_dtype, self.atom_layout,
            tiler_mn=(64, self.tile_n))
        k_inst = cute.size(self.tiled_mma.shape_mnk, mode=[2])
        self.tile = (self.tile_m, self.tile_n, k_inst * 4)           # K tile 64 for 16-bit
        self.epi_tile = sm90_utils.compute_tile_shape_or_override(self.tile, self.c_dtype,
                                                                  is_cooperative=True)
        per_stage = (self.tile_m + self.tile_n) * self.tile[2] * self.a_dtype.width // 8
        epi_bytes = self.epi_tile[0] * self.epi_tile[1] * self.c_dtype.width // 8 * self.epi_stage
        cap = utils.get_smem_capacity_in_bytes("sm_90")
        self.stages = self.stages_override or (cap - epi_bytes - 1024) // per_stage
        self.a_smem = sm90_utils.make_smem_layout_a(self.a_layout, self.tile, self.a_dtype, self.stages)
        self.b_smem = sm90_utils.make_smem_layout_b(self.b_layout, self.tile, self.b_dtype, self.stages)
        self.c_smem = sm90_utils.make_smem_layout_epi(self.c_dtype, self.c_layout, self.epi_tile,
                                                      self.epi_stage)

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mBias: cute.Tensor, stream):
        self.a_dtype, self.b_dtype, self.c_dtype = mA.element_type, mB.element_type, mC.element_type
        self.a_layout = utils.LayoutEnum.from_tensor(mA)
        self.b_layout = utils.LayoutEnum.from_tensor(mB)
        self.c_layout = utils.LayoutEnum.from_tensor(mC)
        self._setup()

        tma_a, tA = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), mA,
            cute.slice_(self.a_smem, (None, None, 0)), (self.tile[0], self.tile[2]))
        b_op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if self.cluster_m > 1
                else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp())
        tma_b, tB = cute.nvgpu.cpasync.make_tiled_tma_atom(
            b_op, mB, cute.slice_(self.b_smem, (None, None, 0)), (self.tile[1], self.tile[2]),
            num_multicast=self.cluster_m)
        tma_c, tC = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), mC,
            cute.slice_(self.c_smem, (None, None, 0)), self.epi_tile)

        m, n = cute.size(mC, mode=[0]), cute.size(mC, mode=[1])
        m_tiles = (m + self.tile_m - 1) // self.tile_m
        n_tiles = (n + self.tile_n - 1) // self.tile_n
        cm_tiles = (m_tiles + self.cluster_m - 1) // self.cluster_m   # tile rows of clusters
        units = cm_tiles * n_tiles                                     # cluster work units
        clusters = cutlass.min(units, self.max_clusters)

        @cute.struct
        class Storage:
            bars: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(self.a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(self.c_smem)], 1024]

        self.storage = Storage
        self.kernel(tma_a, tA, tma_b, tB, tma_c, tC, mBias, self.tiled_mma, self.a_smem,
                    self.b_smem, self.c_smem, cm_tiles, n_tiles, units).launch(
            grid=(clusters * self.cluster_m, 1, 1), block=(self.threads, 1, 1),
            cluster=(self.cluster_m, 1, 1), stream=stream)

    @cute.jit
    def tile_of(self, u, cm_tiles, n_tiles, rank):
        return raster(u, cm_tiles, n_tiles, self.cluster_m, rank, cutlass.min)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, mBias: cute.Tensor, tiled_mma: cute.TiledMma,
               a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
               c_smem: cute.ComposedLayout, cm_tiles: cutlass.Int32, n_tiles: cutlass.Int32,
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
        rank = 0
        if cutlass.const_expr(self.cluster_m > 1):
            rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_id = bid // self.cluster_m
        clusters = gdim // self.cluster_m

        storage = SmemAllocator().allocate(self.storage)
        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sC = storage.sC.get_tensor(c_smem.outer, swizzle=c_smem.inner)

        tx_bytes = (cute.size_in_bytes(self.a_dtype, cute.slice_(a_smem, (None, None, 0)))
                    + cute.size_in_bytes(self.b_dtype, cute.slice_(b_smem, (None, None, 0))))
        # each consumer warp releases a slot once in every CTA that writes into it (itself and,
        # with a cluster, the peer multicasting half of B): 8 warps x cluster_m arrivals
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.bars.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     self.mma_threads // 32 * self.cluster_m),
            tx_count=tx_bytes, cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1)))

        # (bM, bK, m-tiles, k-tiles), (bN, bK, n-tiles, k-tiles), (bM, bN, m-tiles, n-tiles)
        gA = cute.local_tile(mA, self.tile, (None, None, None), proj=(1, None, 1))
        gB = cute.local_tile(mB, self.tile, (None, None, None), proj=(None, 1, 1))
        gC = cute.local_tile(mC, self.tile, (None, None, None), proj=(1, 1, None))
        cC = cute.local_tile(cute.make_identity_tensor(mC.shape), self.tile, (None, None, None),
                             proj=(1, 1, None))
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        # B: this CTA's share of the tile, multicast to every CTA of the cluster
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_b, rank, cute.make_layout(self.cluster_m), cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2))
        b_mask = None
        if cutlass.const_expr(self.cluster_m > 1):
            b_mask = cutlass.Int16((1 << self.cluster_m) - 1)
        k_tiles = cute.size(gA, mode=[3])

        if wg == 0:
            # ---------------- producer warpgroup: one warp issues every TMA load --------------
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp == 0:
                prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                for u in cutlass.range(cluster_id, units, clusters, unroll=1):
                    pm, pn = self.tile_of(u, cm_tiles, n_tiles, rank)
                    for kt in cutlass.range(k_tiles, unroll=1):
                        ring.producer_acquire(prod)
                        cute.copy(tma_a, tAgA[(None, pm, kt)], tAsA[(None, prod.index)],
                                  tma_bar_ptr=ring.producer_get_barrier(prod))
                        if cutlass.const_expr(self.cluster_m > 1):
                            cute.copy(tma_b, tBgB[(None, pn, kt)], tBsB[(None, prod.index)],
                                      tma_bar_ptr=ring.producer_get_barrier(prod), mcast_mask=b_mask)
                        else:
                            cute.copy(tma_b, tBgB[(None, pn, kt)], tBsB[(None, prod.index)],
                                      tma_bar_ptr=ring.producer_get_barrier(prod))
                        ring.producer_commit(prod)
                        prod.advance()
                # every slot released (by our consumers and the peer's) before this CTA exits
                ring.producer_tail(prod)
        else:
            # ---------------- consumer warpgroups: wgmma mainloop + fused epilogue -----------
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            ct = tidx - 128                                    # thread index among consumers
            thr_mma = tiled_mma.get_slice(cute.make_layout(2, stride=128)(wg - 1))
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
            tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
            acc = cute.make_rmem_tensor(thr_mma.partition_C(gC[(None, None, 0, 0)]).shape,
                                        self.acc_dtype)
            my_mma = tiled_mma.get_slice(ct)                   # per-thread accumulator coordinates
            k_blocks = cute.size(tCrA, mode=[2])

            r2s_atom = sm90_utils.sm90_get_smem_store_op(self.c_layout, elem_ty_d=self.c_dtype,
                                                         elem_ty_acc=self.acc_dtype)
            stm = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(self.c_layout.is_m_major_c(), 4),
                                      self.c_dtype)
            r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm, tiled_mma))
            thr_r2s = r2s.get_slice(ct)
            tRS_sC = thr_r2s.partition_D(sC)
            tRS_acc = r2s.retile(acc)
            rD_layout = cute.make_layout(cute.shape(thr_r2s.partition_S(sC))[:3])
            rD = cute.make_rmem_tensor_like(rD_layout, self.acc_dtype)
            rOut = cute.make_rmem_tensor_like(rD_layout, self.c_dtype)
            per_epi = cute.size(rD)
            store_ring = pipeline.PipelineTmaStore.create(
                num_stages=self.epi_stage,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.mma_threads))
            is_store_warp = warp == 4
            n = cute.size(mC, mode=[1])

            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            done = cutlass.Int32(0)                            # tiles finished by this CTA
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            for u in cutlass.range(cluster_id, units, clusters, unroll=1):
                pm, pn = self.tile_of(u, cm_tiles, n_tiles, rank)

                # zeroed accumulators, ACCUMULATE always on: no MMA state carried between tiles
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
                    # this k-tile's wgmmas stay in flight; the previous tile's have retired
                    cute.nvgpu.warpgroup.wait_group(1)
                    ring.consumer_release(release)
                    release.advance()
                    read.advance()
                cute.nvgpu.warpgroup.wait_group(0)
                ring.consumer_release(release)
                release.advance()

                # ---- fused epilogue on the fp32 accumulators -------------------------------
                if cutlass.const_expr(self.has_bias or self.act != "none"):
                    bias_act(acc, my_mma.partition_C(cC[(None, None, pm, pn)]), mBias, n,
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
                    buf = (done * epi_count + e) % self.epi_stage
                    cute.copy(r2s, rOut, tRS_sC[(None, None, None, buf)])
                    # generic-proxy smem writes must be visible to the TMA (async proxy) store
                    cute.arch.fence_proxy("async.shared", space="cta")
                    self.epi_bar.arrive_and_wait()
                    if is_store_warp:
                        cute.copy(tma_c, bsC[(None, buf)], bgC[(None, epi_order.get_hier_coord(e))])
                        store_ring.producer_commit()
                        store_ring.producer_acquire()     # staging slot `buf + 1` free again
                    self.epi_bar.arrive_and_wait()
                done += 1
            if is_store_warp:
                store_ring.producer_tail()


def max_clusters(cluster_m: int) -> int:
    """Clusters of ``cluster_m`` full-SM CTAs resident at once: the driver's occupancy answer
    (cuOccupancyMaxActiveClusters, through cutlass.utils.HardwareInfo) on a GPU - an SM count
    that is not a multiple of the cluster size per GPC leaves some SMs out, and a persistent grid
    larger than what is resident would run its last clusters as a second wave - else SMs / size."""
    try:
        if torch.cuda.is_available():
            if cluster_m == 1:
                return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
            return int(utils.HardwareInfo(torch.cuda.current_device()).get_max_active_clusters(cluster_m))
    except Exception:
        pass
    return DEFAULT_SMS // cluster_m


def _compile(dtype, act: str, has_bias: bool, tile_n: int = 256, cluster_m: int = 1,
             clusters: int | None = None, stages: int | None = None):
    clusters = clusters or max_clusters(cluster_m)
    key = ("gemm_ws", str(dtype), act, has_bias, tile_n, cluster_m, clusters, stages)
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
    return compile_kernel(key, GemmWS(act, has_bias, tile_n, cluster_m, clusters, stages),
                          a, b, c, bias, fake_stream())


def prepare_gemm_ws(a, b, bias, out, act="relu", tile_n=256, cluster_m=1, stages=None):
    validate(a, b, bias, out, act)
    comp = _compile(a.dtype, act, bias is not None, tile_n, cluster_m, None, stages)
    bias_t = bias if bias is not None else torch.zeros(8, dtype=a.dtype, device=a.device)
    args = (to_cute(a, 16), to_cute(b.t(), 16, leading_dim=0), to_cute(out, 16),
            to_cute(bias_t, 2))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp


def gemm_ws(a, b, bias=None, act="relu", out=None, cluster_m=1):
    """act(a @ b + bias) for CUDA fp16/bf16 row-major a [M, K], b [K, N] (persistent, warp-specialised)."""
    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    launch, _ = prepare_gemm_ws(a, b, bias, out, act, cluster_m=cluster_m)
    launch()
    return out


def compile_only(dtype=torch.bfloat16, act="relu", has_bias=True, tile_n=256, cluster_m=1, clusters=None):
    return _compile(dtype, act, has_bias, tile_n, cluster_m, clusters)


__all__ = ["GemmWS", "check", "prepare_gemm_ws", "gemm_ws", "compile_only"]
