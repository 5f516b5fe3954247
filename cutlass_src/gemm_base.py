"""The CuTe GEMM family for Hopper (sm_90a): C = act(A @ B + bias), fp32 accumulation.

A is [M, K] row-major (K-major for wgmma); B is [K, N] row-major, seen as the [N, K] operand with N
contiguous (MN-major: wgmma reads 16-bit MN-major operands straight from shared memory). This file
is the family's vocabulary; the schedules are subclasses that decide who runs it and when:
``gemm_epilogue_ws.py`` (cooperative: two consumer warpgroups share each 128-row tile, optionally a
2x1 cluster sharing B by TMA multicast) and ``gemm_epilogue_pingpong.py`` (each consumer warpgroup
owns whole tiles; one's epilogue runs under the other's mainloop). Both are persistent and
warp-specialised: warpgroup 0 produces, warpgroups 1-2 consume.

- **Operands.** Each of A and B arrives by TMA ("tma": rows 16-byte aligned, K or N a multiple
  of 8) or, when TMA cannot take its rows, through the 128 producer threads' registers into the
  same swizzled stage: "realign" (16-byte loads from the 16-byte boundary at or before each row
  segment, shifted into place in registers) or "vN" (a predicated tiled copy of N-element vectors,
  N = the widest access the rows allow, down to one element). Either way they zero-fill what lies
  outside the matrix, fence the writes for the async proxy (wgmma reads shared memory through it)
  and arrive on the stage's barrier. So N = 50257 or K = 33 take the same mainloop; only the
  producer changes.
- **Ring.** Per stage a "full" mbarrier (TMA bytes and/or one arrival per copying thread) and an
  "empty" one (one arrival per consumer warp, per CTA of the cluster).
- **Mainloop.** wgmma over a unit's k-tiles, one batch in flight, a slot released as soon as the
  wgmmas that read it have retired.
- **Epilogue.** Split-K fix-up (each split writes its fp32 partial in fragment order to a
  workspace; the last split of a tile to arrive sums all of them in split order: deterministic),
  bias + act on the fp32 accumulators, stmatrix into a staging buffer, then a TMA store, or a
  predicated tiled copy to C when C's rows are not 16-byte aligned.
- **Units.** A persistent CTA walks units u = (tile, split) in a grouped raster (GROUP_M tile rows
  share a column of B tiles in L2); split s of S owns k-tiles [s*KT/S, (s+1)*KT/S).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.memory import SmemAllocator, get_smem_capacity_in_bytes
from cutlass.tensor_utils import LayoutEnum

from .epilogue import bias_act
from .gemm_epilogue_splitk import SplitK, split_range
from .gemm_epilogue_tiled import COPY_BATCH_REGS, TiledCopies  # noqa: F401  (COPY_BATCH_REGS: the producer's budget)

GROUP_M = 8                 # raster: tile rows per band
K_TILE = 64                 # 4 wgmma k-steps of 16 for 16-bit inputs
PRODUCER_THREADS = 128      # warpgroup 0
EPI_STAGES = 4              # staging buffers per epilogue group


def raster(u, cm_tiles, n_tiles, cluster_m, rank, min_fn=min):
    """(tile row, tile column) of tile unit ``u`` for CTA ``rank`` of its cluster: bands of GROUP_M
    tile rows walked column by column, so the CTAs running at once share B tiles in L2. Plain
    arithmetic: the kernels call it on DSL integers, the tests on Python ints."""
    group = GROUP_M // cluster_m
    per_band = group * n_tiles
    first = (u // per_band) * group
    height = min_fn(cm_tiles - first, group)
    cm = first + (u % per_band) % height
    return cm * cluster_m + rank, (u % per_band) // height


@dataclass(frozen=True)
class Ring:
    """The k-tile ring's mbarriers: ``full(i)`` then ``empty(i)`` for each of ``stages`` slots.
    Frozen: the DSL then treats it as read-only inside dynamic control flow."""

    bars: cute.Pointer
    stages: int

    def full(self, i):
        return self.bars + i

    def empty(self, i):
        return self.bars + self.stages + i


class GemmSm90(TiledCopies, SplitK):
    """Base of the family. ``loads`` = (a, b, c) kinds: "tma", "realign" (A, B) or "vN" (a
    predicated copy of N-element vectors; for C the predicated store). ``splitk`` compiles the
    split-K fix-up (the split count is a run-time argument; the fix-up is ``SplitK``'s, in
    gemm_epilogue_splitk.py); the predicated tiled copies of operands TMA cannot take are
    ``TiledCopies``' (gemm_epilogue_tiled.py). Subclasses set ``pingpong`` and write ``kernel``."""

    pingpong = False
    k_tile = K_TILE                          # read by the bases (TiledCopies), which import nothing back
    producer_threads = PRODUCER_THREADS

    def __init__(self, tile_mn=(128, 256), loads=("tma", "tma", "tma"), cluster_m: int = 1, splitk: bool = False):
        self.tile_m, self.tile_n = tile_mn
        self.ka, self.kb, self.kc = loads
        for name, kind, ok in (("a", self.ka, ("tma", "realign")), ("b", self.kb, ("tma", "realign")),
                               ("c", self.kc, ("tma",))):
            if kind not in ok and not re.fullmatch(r"v[1248]", kind):
                raise ValueError(f"loads: {name} kind {kind!r} is not one of {', '.join(ok)}, v1, v2, v4, v8")
        self.va, self.vb, self.vc = (0 if k in ("tma", "realign") else int(k[1:]) for k in loads)
        self.cluster_m, self.splitk = cluster_m, splitk
        if cluster_m not in (1, 2) or (cluster_m > 1 and (self.ka != "tma" or self.kb != "tma")):
            raise ValueError("cluster_m: 2 needs A and B both by TMA (B is multicast)")
        if self.tile_m not in (64, 128) or self.tile_n not in (64, 128, 192, 256):
            raise ValueError(f"tile: {tile_mn} is not in (64|128) x (64|128|256)")
        if not self.pingpong and self.tile_m != 128:
            raise ValueError("the cooperative schedule splits a 128-row tile over two warpgroups")
        self.mma_threads = 256
        self.threads = PRODUCER_THREADS + self.mma_threads
        self.epi_threads = 128 if self.pingpong else 256      # threads sharing one tile's epilogue
        self.acc_dtype = cutlass.Float32
        self.pred_loads = self.ka != "tma" or self.kb != "tma"        # the producer warpgroup copies
        self.tma_loads = self.ka == "tma" or self.kb == "tma"
        # a predicated producer keeps COPY_BATCH_REGS of data: give it registers, take them from
        # the consumers (128 x 88 + 256 x 208 <= 64K)
        self.producer_regs, self.consumer_regs = (88, 208) if self.pred_loads else (40, 232)

    # ---- compile-time set-up (inside __call__, from the tensors' types) ----------------------
    def _setup(self, mA, mB, mC):
        self.a_dtype, self.b_dtype, self.c_dtype = mA.element_type, mB.element_type, mC.element_type
        self.a_layout, self.b_layout = LayoutEnum.from_tensor(mA), LayoutEnum.from_tensor(mB)
        self.c_layout = LayoutEnum.from_tensor(mC)
        atoms = (1, 1, 1) if self.pingpong else (2, 1, 1)      # warpgroups along M per tile
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype, self.b_dtype, self.a_layout.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(), self.acc_dtype, atoms, tiler_mn=(64, self.tile_n))
        self.tile = (self.tile_m, self.tile_n, K_TILE)
        self.epi_tile = sm90_utils.compute_tile_shape_or_override(self.tile, self.c_dtype,
                                                                  is_cooperative=not self.pingpong)
        groups = 2 if self.pingpong else 1
        per_stage = (self.tile_m + self.tile_n) * K_TILE * self.a_dtype.width // 8
        epi_bytes = self.epi_tile[0] * self.epi_tile[1] * self.c_dtype.width // 8 * EPI_STAGES * groups
        self.stages = (get_smem_capacity_in_bytes("sm_90") - epi_bytes - 2048) // per_stage
        self.a_smem = sm90_utils.make_smem_layout_a(self.a_layout, self.tile, self.a_dtype, self.stages)
        self.b_smem = sm90_utils.make_smem_layout_b(self.b_layout, self.tile, self.b_dtype, self.stages)
        self.c_smem = sm90_utils.make_smem_layout_epi(self.c_dtype, self.c_layout, self.epi_tile,
                                                      EPI_STAGES * groups)

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mBias: cute.Tensor,
                 mWork: cute.Tensor, mCount: cute.Tensor, splits: cutlass.Int32,
                 max_clusters: cutlass.Int32, has_bias: cutlass.Int32, act: cutlass.Int32, stream):
        self._setup(mA, mB, mC)
        tma_a = tma_b = tma_c = None
        tA, tB, tC = mA, mB, mC
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        if cutlass.const_expr(self.ka == "tma"):
            tma_a, tA = cpasync.make_tiled_tma_atom(g2s, mA, cute.slice_(self.a_smem, (None, None, 0)),
                                                    (self.tile_m, K_TILE))
        if cutlass.const_expr(self.kb == "tma"):
            b_op = cpasync.CopyBulkTensorTileG2SMulticastOp() if self.cluster_m > 1 else g2s
            tma_b, tB = cpasync.make_tiled_tma_atom(b_op, mB, cute.slice_(self.b_smem, (None, None, 0)),
                                                    (self.tile_n, K_TILE), num_multicast=self.cluster_m)
        if cutlass.const_expr(self.kc == "tma"):
            tma_c, tC = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mC,
                                                    cute.slice_(self.c_smem, (None, None, 0)), self.epi_tile)

        m, n, k = cute.size(mC, mode=[0]), cute.size(mC, mode=[1]), cute.size(mA, mode=[1])
        m_tiles = (m + self.tile_m - 1) // self.tile_m
        n_tiles = (n + self.tile_n - 1) // self.tile_n
        k_tiles = (k + K_TILE - 1) // K_TILE
        cm_tiles = (m_tiles + self.cluster_m - 1) // self.cluster_m     # tile rows of clusters
        units = cm_tiles * n_tiles * splits
        clusters = cutlass.min(units, max_clusters)

        @cute.struct
        class Storage:
            bars: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            order: cute.struct.MemRange[cutlass.Int64, 2]      # ping-pong turn barriers
            flag: cute.struct.MemRange[cutlass.Int32, 2]       # split-K "last split" per group
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(self.a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(self.c_smem)], 1024]

        self.storage = Storage
        self.kernel(tma_a, tA, tma_b, tB, tma_c, tC, mBias, mWork, mCount, self.tiled_mma,
                    self.a_smem, self.b_smem, self.c_smem, cm_tiles, n_tiles, k_tiles, splits, units,
                    has_bias, act).launch(
            grid=(clusters * self.cluster_m, 1, 1), block=(self.threads, 1, 1),
            cluster=(self.cluster_m, 1, 1), stream=stream)

    # ---- the ring -------------------------------------------------------------------------------
    @cute.jit
    def make_ring(self, storage, consumer_warps_per_slot: cutlass.Constexpr) -> Ring:
        """Initialise the ring's barriers (one thread) and fence them; the caller syncs the CTA
        (and the cluster) before anyone uses them."""
        ring = Ring(storage.bars.data_ptr(), self.stages)
        full_count = (1 if self.tma_loads else 0) + (PRODUCER_THREADS if self.pred_loads else 0)
        tidx, _, _ = cute.arch.thread_idx()
        if tidx == 0:
            for i in cutlass.range_constexpr(self.stages):
                cute.arch.mbarrier_init(ring.full(i), full_count)
                cute.arch.mbarrier_init(ring.empty(i), consumer_warps_per_slot * self.cluster_m)
        cute.arch.mbarrier_init_fence()
        return ring

    # ---- producer: every k-tile of every unit this CTA owns, in unit order -----------------------
    @cute.jit
    def copy_realign(self, t, mX: cute.Tensor, row0, col0, dst: cute.Tensor, rows_mode: cutlass.Constexpr,
                     width: cutlass.Constexpr, rows: cutlass.Constexpr, zero_tail: cutlass.Constexpr):
        """An operand tile whose rows TMA cannot take (their starts are not 16-byte aligned), with
        16-byte loads: ``rows`` rows of ``width`` contiguous elements starting at (row0, col0) of
        mX, whose non-contiguous mode is ``rows_mode``, into the swizzled stage ``dst``.

        Thread t copies runs of RUN 16-byte chunks of one row: it loads the RUN + 1 aligned
        16-byte vectors from the boundary at or before the run's first element (only those that
        touch the row's valid columns; they lie in 16-byte granules holding matrix bytes), shifts
        them by the run's phase s (elements past that boundary: a two-stage word shift, then a
        byte permute for odd s), and stores RUN 16-byte chunks into the stage. Two runs' loads
        are in flight together (160 bytes a thread, 20 KB a CTA) before their shifts and stores. Rows outside the
        matrix are zero; with ``zero_tail`` so are columns past its end (A's K tail must add
        nothing; B's N tail only feeds output columns that are never stored)."""
        RUN = 4
        chunks_per_row = width // 8
        runs_per_row = chunks_per_row // RUN
        per_thread = rows * runs_per_row // PRODUCER_THREADS
        valid_rows = cute.size(mX, mode=[rows_mode]) - row0
        valid_cols = cute.size(mX, mode=[1 - rows_mode]) - col0
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), mX.element_type, num_bits_per_copy=128)
        # dst as 16-byte chunks, indexed (row, chunk)
        chunks = None
        if cutlass.const_expr(rows_mode == 0):
            chunks = cute.zipped_divide(dst, (1, 8))                    # ((1, 8), (rows, width / 8))
        else:
            chunks = cute.zipped_divide(dst, (8, 1))                    # ((8, 1), (width / 8, rows))
        batch = 2 if per_thread % 2 == 0 else 1                         # runs whose loads fly together
        raw = cute.make_rmem_tensor(cute.make_layout((8, (RUN + 1) * batch)), mX.element_type)
        shift = cute.make_rmem_tensor(cute.make_layout(batch), cutlass.Int32)
        out = cute.make_rmem_tensor(cute.make_layout((4, RUN)), cutlass.Uint32)
        for j0 in cutlass.range_constexpr(0, per_thread, batch):
            raw.fill(0)
            for b in cutlass.range_constexpr(batch):                    # 1. the batch's loads
                run = (j0 + b) * PRODUCER_THREADS + t
                r = run // runs_per_row
                c0 = (run - r * runs_per_row) * (RUN * 8)               # the run's first column
                shift[b] = cutlass.Int32(0)
                if r < valid_rows:
                    line = None
                    if cutlass.const_expr(rows_mode == 0):
                        line = mX[row0 + r, None]
                    else:
                        line = mX[None, row0 + r]
                    p = line.iterator + (col0 + c0)
                    base = (p - 7).align(16)                            # 16-byte boundary at or before p
                    s = cutlass.Int32((p.toint() - base.toint()) // 2)
                    shift[b] = s
                    vecs = cute.make_tensor(base, cute.make_layout((8, RUN + 1)))
                    for q in cutlass.range_constexpr(RUN + 1):
                        first = c0 + 8 * q - s                          # column of the vector's element 0
                        if first < valid_cols and first + 8 > 0:
                            cute.copy(atom, vecs[None, q], raw[None, b * (RUN + 1) + q])
            w = cute.recast_tensor(raw, cutlass.Uint32)                 # (4, (RUN + 1) * batch) words
            for b in cutlass.range_constexpr(batch):                    # 2. shift and store
                run = (j0 + b) * PRODUCER_THREADS + t
                r = run // runs_per_row
                c0 = (run - r * runs_per_row) * (RUN * 8)
                s = shift[b]
                words = [w[i % 4, b * (RUN + 1) + i // 4] for i in range(4 * (RUN + 1))] + [cutlass.Uint32(0)] * 2
                by2 = (s & 4) != 0                                      # shift by 2 words,
                by1 = (s & 2) != 0                                      # then by 1 word,
                odd = (s & 1) != 0                                      # then by one element
                y = [cutlass.Uint32(cutlass.select_(by2, words[i + 2], words[i])) for i in range(4 * RUN + 2)]
                z = [cutlass.Uint32(cutlass.select_(by1, y[i + 1], y[i])) for i in range(4 * RUN + 1)]
                for i in cutlass.range_constexpr(4 * RUN):
                    half = cutlass.Uint32(cute.arch.prmt(z[i], z[i + 1], 0x5432))   # z[i] high, z[i+1] low
                    out[i % 4, i // 4] = cutlass.Uint32(cutlass.select_(odd, half, z[i]))
                vals = cute.recast_tensor(out, mX.element_type)                 # (8, RUN) elements
                if cutlass.const_expr(zero_tail):
                    if c0 + RUN * 8 > valid_cols:
                        for e in cutlass.range_constexpr(8 * RUN):
                            if c0 + e >= valid_cols:
                                vals[e % 8, e // 8] = mX.element_type(0)
                for i in cutlass.range_constexpr(RUN):
                    if cutlass.const_expr(rows_mode == 0):
                        cute.copy(atom, vals[None, i], chunks[(None, (r, c0 // 8 + i))])
                    else:
                        cute.copy(atom, vals[None, i], chunks[(None, (c0 // 8 + i, r))])

    @cute.jit
    def produce(self, ring: Ring, tma_a, mA: cute.Tensor, tma_b, mB: cute.Tensor, sA: cute.Tensor,
                sB: cute.Tensor, cm_tiles, n_tiles, k_tiles, splits, units, first, stride, rank):
        """The producer warpgroup's loop (warp 0 alone when both operands come by TMA)."""
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        # (tile, K_TILE, tiles, k-tiles) views: TMA coordinates, or the tensors themselves
        gA = cute.local_tile(mA, self.tile, (None, None, None), proj=(1, None, 1))
        gB = cute.local_tile(mB, self.tile, (None, None, None), proj=(None, 1, 1))
        tAsA = tAgA = tBsB = tBgB = cA = cB = copy_a = copy_b = None
        if cutlass.const_expr(self.ka == "tma"):
            tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                               cute.group_modes(gA, 0, 2))
        elif cutlass.const_expr(self.va > 0):
            cA = cute.local_tile(cute.make_identity_tensor(mA.shape), self.tile, (None, None, None),
                                 proj=(1, None, 1))
            copy_a = self.gmem_copy(mA.element_type, self.va, self.tile_m, 1)
        if cutlass.const_expr(self.kb == "tma"):
            # this CTA's share of the B tile, multicast to every CTA of the cluster
            tBsB, tBgB = cpasync.tma_partition(tma_b, rank, cute.make_layout(self.cluster_m),
                                               cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
        elif cutlass.const_expr(self.vb > 0):
            cB = cute.local_tile(cute.make_identity_tensor(mB.shape), self.tile, (None, None, None),
                                 proj=(None, 1, 1))
            copy_b = self.gmem_copy(mB.element_type, self.vb, self.tile_n, 0)
        # bytes the TMA loads of one stage bring (the whole B tile even when a peer multicasts half)
        tma_bytes = ((self.tile_m if self.ka == "tma" else 0) + (self.tile_n if self.kb == "tma" else 0)) * K_TILE \
            * self.a_dtype.width // 8
        mask = None
        if cutlass.const_expr(self.cluster_m > 1):
            mask = cutlass.Int16((1 << self.cluster_m) - 1)

        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        for u in cutlass.range(first, units, stride, unroll=1):
            tile = u // splits
            pm, pn = raster(tile, cm_tiles, n_tiles, self.cluster_m, rank, cutlass.min)
            k0, k1 = split_range(u - tile * splits, splits, k_tiles)
            for kt in cutlass.range(k0, k1, unroll=1):
                slot = prod.index
                cute.arch.mbarrier_wait(ring.empty(slot), prod.phase)
                full = ring.full(slot)
                if cutlass.const_expr(self.tma_loads):
                    if warp == 0:
                        with cute.arch.elect_one():
                            cute.arch.mbarrier_arrive_and_expect_tx(full, tma_bytes)
                        if cutlass.const_expr(self.ka == "tma"):
                            cute.copy(tma_a, tAgA[(None, pm, kt)], tAsA[(None, slot)], tma_bar_ptr=full)
                        if cutlass.const_expr(self.kb == "tma"):
                            cute.copy(tma_b, tBgB[(None, pn, kt)], tBsB[(None, slot)], tma_bar_ptr=full,
                                      mcast_mask=mask)
                if cutlass.const_expr(self.pred_loads):
                    if cutlass.const_expr(self.ka == "realign"):
                        self.copy_realign(tidx, mA, pm * self.tile_m, kt * K_TILE, sA[(None, None, slot)],
                                          0, K_TILE, self.tile_m, True)
                    elif cutlass.const_expr(self.va > 0):
                        self.copy_predicated(copy_a, tidx, gA[(None, None, pm, kt)], cA[(None, None, pm, kt)],
                                             mA.shape, sA[(None, None, slot)], self.va)
                    if cutlass.const_expr(self.kb == "realign"):
                        self.copy_realign(tidx, mB, kt * K_TILE, pn * self.tile_n, sB[(None, None, slot)],
                                          1, self.tile_n, K_TILE, False)
                    elif cutlass.const_expr(self.vb > 0):
                        self.copy_predicated(copy_b, tidx, gB[(None, None, pn, kt)], cB[(None, None, pn, kt)],
                                             mB.shape, sB[(None, None, slot)], self.vb)
                    # generic-proxy writes made visible to wgmma (async proxy), then announced
                    cute.arch.fence_proxy("async.shared", space="cta")
                    cute.arch.mbarrier_arrive(full)
                prod.advance()
        # every slot released (by our consumers and the cluster peer's) before this CTA exits
        if warp == 0:
            for _ in cutlass.range_constexpr(self.stages):
                cute.arch.mbarrier_wait(ring.empty(prod.index), prod.phase)
                prod.advance()

    # ---- consumer: the wgmma mainloop of one unit -----------------------------------------------
    @cute.jit
    def mainloop(self, ring: Ring, read, release, k_count, tiled_mma: cute.TiledMma, acc: cute.Tensor,
                 tCrA: cute.Tensor, tCrB: cute.Tensor):
        """acc = sum over the unit's k_count (>= 1) k-tiles; one wgmma batch stays in flight, and
        the slot of the batch before it is released. Returns the advanced (read, release)."""
        lane = cute.arch.lane_idx()
        k_blocks = cute.size(tCrA, mode=[2])
        acc.fill(0.0)                       # ACCUMULATE stays on: no MMA state between units
        for kt in cutlass.range(k_count, unroll=1):
            cute.arch.mbarrier_wait(ring.full(read.index), read.phase)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                          tCrB[(None, None, kb, read.index)], acc)
            warpgroup.commit_group()
            read.advance()
            if kt > 0:
                warpgroup.wait_group(1)     # the previous k-tile's batch retired: free its slot
                self.release(ring, release, lane)
                release.advance()
        warpgroup.wait_group(0)
        self.release(ring, release, lane)
        release.advance()
        return read, release

    @cute.jit
    def release(self, ring: Ring, state, lane):
        """One arrival per consumer warp on the slot's empty barrier, in every CTA of the cluster
        (the peer multicasts half of B into our slot, we into its)."""
        if cutlass.const_expr(self.cluster_m == 1):
            if lane == 0:
                cute.arch.mbarrier_arrive(ring.empty(state.index))
        else:
            if lane < self.cluster_m:
                cute.arch.mbarrier_arrive(ring.empty(state.index), lane)

    # ---- consumer: the epilogue of one unit -----------------------------------------------------
    def epilogue_parts(self, tiled_mma: cute.TiledMma, acc: cute.Tensor, sC: cute.Tensor, t):
        """Loop-invariant pieces of the epilogue for thread t of its group: the stmatrix tiled copy
        from the accumulators to the staging buffers and the register fragments it fills."""
        r2s_op = sm90_utils.sm90_get_smem_store_op(self.c_layout, elem_ty_d=self.c_dtype,
                                                   elem_ty_acc=self.acc_dtype)
        stm = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(self.c_layout.is_m_major_c(), 4),
                                  self.c_dtype)
        r2s = cute.make_tiled_copy_S(r2s_op, cute.make_tiled_copy_C_atom(stm, tiled_mma))
        thr = r2s.get_slice(t)
        rD_layout = cute.make_layout(cute.shape(thr.partition_S(sC))[:3])
        return {"r2s": r2s, "tRS_sC": thr.partition_D(sC), "tRS_acc": r2s.retile(acc),
                "rD": cute.make_rmem_tensor_like(rD_layout, self.acc_dtype),
                "rOut": cute.make_rmem_tensor_like(rD_layout, self.c_dtype)}

    @cute.jit
    def epilogue(self, acc: cute.Tensor, parts: dict, coords: cute.Tensor, gC: cute.Tensor, cC: cute.Tensor,
                 tma_c, mC: cute.Tensor, sC: cute.Tensor, buf0, done, t, epi_bar, is_store_warp,
                 store_ring, mBias: cute.Tensor, has_bias, act):
        """bias + act on the accumulators, then per epilogue sub-tile: convert, stmatrix into
        staging buffer ``buf0 + (i % EPI_STAGES)``, and a TMA store (one warp) or a predicated copy
        (every thread of the group) to C. ``done``: sub-tiles this group stored before."""
        bias_act(acc, coords, mBias, cute.size(mC, mode=[1]), has_bias, act)
        r2s, tRS_sC, tRS_acc, rD, rOut = parts["r2s"], parts["tRS_sC"], parts["tRS_acc"], parts["rD"], parts["rOut"]
        per_epi = cute.size(rD)
        gC_epi = cute.zipped_divide(gC, self.epi_tile)
        epi_count = cute.size(gC_epi, mode=[1])
        epi_shape = gC_epi.shape[1]
        epi_order = cute.make_layout(epi_shape, stride=(epi_shape[1], 1))
        bsC = bgC = copy_c = atom_c = None
        if cutlass.const_expr(self.kc == "tma"):
            bsC, bgC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_epi)
        else:
            copy_c, atom_c = self.c_copy(self.c_dtype)
        for e in cutlass.range_constexpr(epi_count):
            for v in cutlass.range_constexpr(per_epi):
                rD[v] = tRS_acc[e * per_epi + v]
            rOut.store(rD.load().to(self.c_dtype))
            buf = buf0 + (done + e) % EPI_STAGES
            cute.copy(r2s, rOut, tRS_sC[(None, None, None, buf)])
            # generic-proxy smem writes made visible to the TMA store (async proxy)
            cute.arch.fence_proxy("async.shared", space="cta")
            epi_bar.arrive_and_wait()
            sub = epi_order.get_hier_coord(e)
            if cutlass.const_expr(self.kc == "tma"):
                if is_store_warp:
                    cute.copy(tma_c, bsC[(None, buf)], bgC[(None, sub)])
                    store_ring.producer_commit()
                    store_ring.producer_acquire()       # staging buffer `buf + 1` free again
            else:
                thr = copy_c.get_slice(t)
                tS = thr.partition_S(sC[(None, None, buf)])
                tG = thr.partition_D(cute.local_tile(gC, self.epi_tile, sub))
                tP = thr.partition_D(cute.local_tile(cC, self.epi_tile, sub))
                regs = cute.make_fragment_like(tS)
                cute.copy(atom_c, tS, regs)
                for i in cutlass.range_constexpr(cute.size(tS, mode=[1])):
                    for j in cutlass.range_constexpr(cute.size(tS, mode=[2])):
                        if cute.elem_less(tP[0, i, j], mC.shape):
                            cute.copy(atom_c, regs[None, i, j], tG[None, i, j])
            epi_bar.arrive_and_wait()
        return done + epi_count


__all__ = ["GemmSm90", "Ring", "raster", "split_range", "GROUP_M", "K_TILE", "EPI_STAGES"]
