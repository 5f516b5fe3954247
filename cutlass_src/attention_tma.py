"""Attention forward for Hopper (sm_90a) in the CuTe DSL: TMA + wgmma (cute:attention).

    O = softmax(Q K^T / sqrt(D) + causal mask) V      Q [B, Hq, Sq, D], K / V [B, Hkv, Sk, D]

One CTA per ``bm`` query rows of one head (grid: query blocks x Hq x B), ``bm / 64`` warpgroups,
each owning 64 rows. Every tensor moves by TMA through a descriptor over its (S, D, H, B) view
(V's as (D, S, H, B), so its tile lands D-major, the layout wgmma reads for the B operand of
P V); rows past Sq or Sk read as zeros and are never written, any row stride a multiple of 16
bytes (the [B, S, H, D] views too).

- **Pipeline.** K / V tiles of ``bn`` keys in a ring of ``stages`` slots, one "full" mbarrier a
  slot (TMA bytes); warp 0 keeps ``stages`` tiles in flight: it refills a slot once every warp
  has finished with it (a CTA barrier at the end of each step).
- **Step.** S = Q K^T by wgmma (both operands in shared memory, fp32 accumulators); the mask only
  on the steps that cross Sk or the causal diagonal; the online softmax in registers (row max
  over the quad of threads sharing a row, exp2 with the scale folded in, running output and sum
  rescaled); P rounded to the input dtype in registers, and O += P V by wgmma with P as the
  register A operand (the S accumulator's fragment is the A operand's, ``a_view``) and V from
  its slot. Each wgmma batch is waited before its result is read.
- **Causal.** Key blocks past the last query row's diagonal (bottom-right aligned: key j is seen
  by query i iff j <= i + Sk - Sq) are never loaded.
- **Epilogue.** O / sum rounded into Q's shared-memory tile, one TMA store.

Not warp-specialised (the ``ws`` word: a producer warp and consumer warpgroups ping-ponging the
two products, ``setmaxnreg``): the warpgroups meet at one CTA barrier a step, and a step's softmax
does not overlap its own MMAs.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum

from . import cached, compile_kernel, stream_args
from .attention import LOG2E, attention_args, fake_qkvo, online_softmax_rows, quad_reduce  # noqa: F401  (LOG2E)


def wgmma_mn_view(acc: cute.Tensor) -> cute.Tensor:
    """A wgmma accumulator ((2, 2, V), MMA_M, MMA_N) seen as (rows, columns) of this thread:
    ((2, MMA_M), (2, V, MMA_N)); the second value mode picks the row 8 below."""
    lay = cute.make_layout(acc.layout.shape)
    s, d = lay.shape, lay.stride
    mn = cute.make_layout(((s[0][1], s[1]), (s[0][0], s[0][2], s[2])),
                          stride=((d[0][1], d[1]), (d[0][0], d[0][2], d[2])))
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, mn))


def a_view(acc_layout: cute.Layout) -> cute.Layout:
    """A compact accumulator ((2, 2, V), 1, 1) of S seen as the register A operand of P V,
    ((2, 2, 2), 1, V / 2): value (column pair, row + 8, column group g) of S is value (k pair,
    row + 8, k + 8) of the k block g // 2 - the two fragments hold the same elements for 16-bit
    types, so P never leaves the registers."""
    s, d = acc_layout.shape, acc_layout.stride
    return cute.make_layout(((s[0][0], s[0][1], 2), 1, s[0][2] // 2),
                            stride=((d[0][0], d[0][1], d[0][2]), 0, 2 * d[0][2]))


class AttentionTma:
    def __init__(self, D: int, causal: bool, bm: int, bn: int, stages: int):
        if bm not in (64, 128) or bn not in (64, 128) or D not in (64, 128) or not 1 <= stages <= 8:
            raise ValueError(f"plan: bm {bm}, bn {bn} (64 or 128), D {D}, stages {stages} not supported")
        self.D, self.causal, self.bm, self.bn, self.stages = D, causal, bm, bn, stages
        self.threads = bm // 64 * 128
        self.n_bars = stages + 1                         # a "full" barrier a slot, and Q's

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 scale_log2: cutlass.Float32, stream):
        dt, D, bm, bn = mQ.element_type, self.D, self.bm, self.bn
        kmaj, mnmaj = LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR
        wgs = (bm // 64, 1, 1)
        mma_qk = sm90_utils.make_trivial_tiled_mma(dt, dt, kmaj.sm90_mma_major_mode(), kmaj.sm90_mma_major_mode(),
                                                   cutlass.Float32, wgs, tiler_mn=(64, bn))
        mma_pv = sm90_utils.make_trivial_tiled_mma(dt, dt, kmaj.sm90_mma_major_mode(), mnmaj.sm90_mma_major_mode(),
                                                   cutlass.Float32, wgs, tiler_mn=(64, D),
                                                   a_source=warpgroup.OperandSource.RMEM)   # P from registers
        q_smem = sm90_utils.make_smem_layout_a(kmaj, (bm, bn, D), dt, 1)               # (bm, D, 1)
        k_smem = sm90_utils.make_smem_layout_b(kmaj, (bm, bn, D), dt, self.stages)     # (bn, D, stages)
        v_smem = sm90_utils.make_smem_layout_b(mnmaj, (bm, D, bn), dt, self.stages)    # (D, bn, stages)
        # (S, D, H, B) views (V: (D, S, H, B)) for the descriptors: the tile modes first
        qv, kv, ov = (cute.make_tensor(t.iterator, cute.select(t.layout, mode=[2, 3, 1, 0])) for t in (mQ, mK, mO))
        vv = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[3, 2, 1, 0]))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, gq = cpasync.make_tiled_tma_atom(g2s, qv, cute.slice_(q_smem, (None, None, 0)), (bm, D))
        tma_k, gk = cpasync.make_tiled_tma_atom(g2s, kv, cute.slice_(k_smem, (None, None, 0)), (bn, D))
        tma_v, gv = cpasync.make_tiled_tma_atom(g2s, vv, cute.slice_(v_smem, (None, None, 0)), (D, bn))
        tma_o, go = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), ov,
                                                cute.slice_(q_smem, (None, None, 0)), (bm, D))

        @cute.struct
        class Storage:
            bars: cute.struct.MemRange[cutlass.Int64, self.n_bars]
            sQ: cute.struct.Align[cute.struct.MemRange[dt, cute.cosize(q_smem)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[dt, cute.cosize(k_smem)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[dt, cute.cosize(v_smem)], 1024]

        self.storage = Storage
        Sq, Sk = cute.size(mQ, mode=[2]), cute.size(mK, mode=[2])
        group = cute.size(mQ, mode=[1]) // cute.size(mK, mode=[1])
        grid = ((Sq + bm - 1) // bm, cute.size(mQ, mode=[1]), cute.size(mQ, mode=[0]))
        self.kernel(tma_q, gq, tma_k, gk, tma_v, gv, tma_o, go, mma_qk, mma_pv, q_smem, k_smem, v_smem,
                    Sq, Sk, group, scale_log2).launch(grid=grid, block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tma_q, gq: cute.Tensor, tma_k, gk: cute.Tensor, tma_v, gv: cute.Tensor, tma_o,
               go: cute.Tensor, mma_qk: cute.TiledMma, mma_pv: cute.TiledMma, q_smem: cute.ComposedLayout,
               k_smem: cute.ComposedLayout, v_smem: cute.ComposedLayout,
               Sq: cutlass.Int32, Sk: cutlass.Int32, group: cutlass.Int32, scale_log2: cutlass.Float32):
        tidx, _, _ = cute.arch.thread_idx()
        mb, h, b = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        sQ, sK, sV, bars = self.shared(tma_q, tma_k, tma_v, tma_o, q_smem, k_smem, v_smem, warp, 1)
        views = self.tma_views(tma_q, gq, tma_k, gk, tma_v, gv, sQ, sK, sV, h, b, group)
        n_tiles = self.key_tiles(mb, Sq, Sk)
        if warp == 0:                                    # TMA copies are issued by a whole warp (elect.sync)
            self.load_q(tma_q, views, bars + self.stages, mb)
            for i in cutlass.range_constexpr(self.stages):
                if i < n_tiles:
                    self.load_kv(tma_k, tma_v, views, bars + i, i, i)
        self.consume(tidx, cute.arch.make_warp_uniform(tidx // 128), views, tma_k, tma_v, mma_qk, mma_pv, sQ, sK, sV, bars, mb, Sq, Sk,
                     n_tiles, scale_log2)
        self.store_o(tma_o, go, mma_pv, tidx, warp == 0, sQ, h, b, mb)

    # ---- pieces the schedules share ----------------------------------------------------------
    @cute.jit
    def shared(self, tma_q, tma_k, tma_v, tma_o, q_smem: cute.ComposedLayout, k_smem: cute.ComposedLayout,
               v_smem: cute.ComposedLayout, warp, empty_count: cutlass.Constexpr):
        """The CTA's tiles and barriers: bars + i slot i full, + stages Q landed, + stages + 1 + i
        slot i empty (``empty_count`` arrivals; the warp-specialised schedule's)."""
        tidx, _, _ = cute.arch.thread_idx()
        if warp == 0:
            for atom in (tma_q, tma_k, tma_v, tma_o):
                cpasync.prefetch_descriptor(atom)
        storage = SmemAllocator().allocate(self.storage)
        sQ = storage.sQ.get_tensor(q_smem.outer, swizzle=q_smem.inner)
        sK = storage.sK.get_tensor(k_smem.outer, swizzle=k_smem.inner)
        sV = storage.sV.get_tensor(v_smem.outer, swizzle=v_smem.inner)
        bars = storage.bars.data_ptr()
        if tidx == 0:
            for i in cutlass.range_constexpr(self.n_bars):
                cute.arch.mbarrier_init(bars + i, 1 if i <= self.stages else empty_count)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()
        return sQ, sK, sV, bars

    @cute.jit
    def tma_views(self, tma_q, gq: cute.Tensor, tma_k, gk: cute.Tensor, tma_v, gv: cute.Tensor, sQ: cute.Tensor,
                  sK: cute.Tensor, sV: cute.Tensor, h, b, group):
        """(tQs, tQg, tKs, tKg, tVs, tVg): this head's tiles as TMA sees them, and their slots."""
        D, bm, bn = self.D, self.bm, self.bn
        hk = h // group
        tQs, tQg = cpasync.tma_partition(tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2),
                                         cute.group_modes(cute.local_tile(gq[None, None, h, b], (bm, D), (None, 0)), 0, 2))
        tKs, tKg = cpasync.tma_partition(tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2),
                                         cute.group_modes(cute.local_tile(gk[None, None, hk, b], (bn, D), (None, 0)), 0, 2))
        tVs, tVg = cpasync.tma_partition(tma_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2),
                                         cute.group_modes(cute.local_tile(gv[None, None, hk, b], (D, bn), (0, None)), 0, 2))
        return tQs, tQg, tKs, tKg, tVs, tVg

    @cute.jit
    def key_tiles(self, mb, Sq, Sk):
        """Key tiles the block visits: keys past its last row's diagonal are never loaded."""
        kend = Sk
        if cutlass.const_expr(self.causal):
            kend = cutlass.min(Sk, (mb + 1) * self.bm + Sk - Sq)
        return (kend + self.bn - 1) // self.bn

    @cute.jit
    def load_q(self, tma_q, views, bar, mb):
        """The Q tile on its barrier (one warp; one thread announces the bytes)."""
        tQs, tQg = views[0], views[1]
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, self.bm * self.D * tQs.element_type.width // 8)
        cute.copy(tma_q, tQg[(None, mb)], tQs[(None, 0)], tma_bar_ptr=bar)

    @cute.jit
    def consume(self, ct, cwg, views, tma_k, tma_v, mma_qk: cute.TiledMma, mma_pv: cute.TiledMma, sQ: cute.Tensor,
                sK: cute.Tensor, sV: cute.Tensor, bars, mb, Sq, Sk, n_tiles, scale_log2: cutlass.Float32):
        """A consumer thread (``ct`` among the consumers, of warpgroup ``cwg``): every key tile's two
        products and online softmax, then O / sum into Q's shared-memory tile."""
        bm, bn, stages = self.bm, self.bn, self.stages
        wg_qk, wg_pv = mma_qk.get_slice(cwg * 128), mma_pv.get_slice(cwg * 128)
        thr_qk, thr_pv = mma_qk.get_slice(ct), mma_pv.get_slice(ct)
        rQ, rK = mma_qk.make_fragment_A(wg_qk.partition_A(sQ)), mma_qk.make_fragment_B(wg_qk.partition_B(sK))
        rV = mma_pv.make_fragment_B(wg_pv.partition_B(sV))
        cS = cute.local_tile(cute.make_identity_tensor((Sq, Sk)), (bm, bn), (mb, None))
        acc_s = cute.make_rmem_tensor(thr_qk.partition_C(cS[None, None, 0]).shape, cutlass.Float32)
        rP = cute.make_rmem_tensor(acc_s.layout.shape, sQ.element_type)     # compact, as acc_s's values
        rPa = cute.make_tensor(rP.iterator, a_view(rP.layout))
        acc_o = cute.make_rmem_tensor(thr_pv.partition_C(sQ[None, None, 0]).shape, cutlass.Float32)
        acc_o.fill(0.0)
        o_mn = wgmma_mn_view(acc_o)
        row_max = cute.make_rmem_tensor((cute.size(o_mn, mode=[0]),), cutlass.Float32)
        row_sum = cute.make_rmem_tensor((cute.size(o_mn, mode=[0]),), cutlass.Float32)
        row_max.fill(-cutlass.Float32.inf)
        row_sum.fill(0.0)
        mma_qk.set(warpgroup.Field.ACCUMULATE, True)
        mma_pv.set(warpgroup.Field.ACCUMULATE, True)
        # the first key a step must mask for some row of the block: Sk, or the first row's diagonal
        clean = Sk
        if cutlass.const_expr(self.causal):
            clean = cutlass.min(Sk, mb * bm + 1 + Sk - Sq)
        cute.arch.mbarrier_wait(bars + stages, 0)
        for n in cutlass.range(n_tiles, unroll=1):
            slot = n % stages
            cute.arch.mbarrier_wait(bars + slot, (n // stages) % 2)
            acc_s.fill(0.0)
            self.wgmma(mma_qk, acc_s, rQ[None, None, None, 0], rK, slot)
            self.online_softmax(acc_s, thr_qk.partition_C(cS[None, None, n]), (n + 1) * bn > clean, Sq, Sk,
                                scale_log2, row_max, row_sum, o_mn)
            rP.store(acc_s.load().to(sQ.element_type))
            self.wgmma(mma_pv, acc_o, rPa, rV, slot)
            self.release(slot, n, n_tiles, bars, views, tma_k, tma_v)
        self.normalise(thr_pv, sQ, acc_o, row_sum)

    @cute.jit
    def release(self, slot, n, n_tiles, bars, views, tma_k, tma_v):
        """Step n is done with ``slot``: the CTA meets, then warp 0 refills the slot with tile
        n + stages."""
        cute.arch.sync_threads()
        if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == 0:
            if n + self.stages < n_tiles:
                self.load_kv(tma_k, tma_v, views, bars + slot, n + self.stages, slot)

    @cute.jit
    def normalise(self, thr_pv, sQ: cute.Tensor, acc_o: cute.Tensor, row_sum: cute.Tensor):
        """O / sum rounded into Q's tile (once every consumer has read Q for the last time)."""
        self.consumer_sync()
        o_mn, o_out = wgmma_mn_view(acc_o), wgmma_mn_view(thr_pv.partition_C(sQ[None, None, 0]))
        for r in cutlass.range_constexpr(cute.size(row_sum)):
            inv = cutlass.Float32(1.0) / quad_reduce(row_sum[r], lambda x, y: x + y)
            for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                o_out[r, c] = (o_mn[r, c] * inv).to(sQ.element_type)
        cute.arch.fence_proxy("async.shared", space="cta")     # visible to the TMA store
        self.consumer_sync()

    @cute.jit
    def consumer_sync(self):
        cute.arch.sync_threads()

    @cute.jit
    def store_o(self, tma_o, go: cute.Tensor, mma_pv: cute.TiledMma, t, is_store_warp, sQ: cute.Tensor, h, b, mb):
        """One TMA store of the O tile from Q's shared memory (rows past Sq clipped)."""
        if is_store_warp:
            tOs, tOg = cpasync.tma_partition(tma_o, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2),
                                             cute.group_modes(cute.local_tile(go[None, None, h, b], (self.bm, self.D),
                                                                              (None, 0)), 0, 2))
            cute.copy(tma_o, tOs[(None, 0)], tOg[(None, mb)])
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def load_kv(self, tma_k, tma_v, views, bar, n, slot):
        """K and V tiles ``n`` into ``slot``, both counted on its full barrier ``bar`` (one warp; one
        thread announces the bytes)."""
        tKs, tKg, tVs, tVg = views[2], views[3], views[4], views[5]
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, 2 * self.bn * self.D * tKs.element_type.width // 8)
        cute.copy(tma_k, tKg[(None, n)], tKs[(None, slot)], tma_bar_ptr=bar)
        cute.copy(tma_v, tVg[(None, n)], tVs[(None, slot)], tma_bar_ptr=bar)

    @cute.jit
    def wgmma(self, tiled_mma: cute.TiledMma, acc: cute.Tensor, rA: cute.Tensor, rB: cute.Tensor, b_slot):
        """acc += A B over the k blocks (B from its slot); waits for the result."""
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(rA, mode=[2])):
            cute.gemm(tiled_mma, acc, rA[None, None, kb], rB[None, None, kb, b_slot], acc)
        warpgroup.commit_group()
        warpgroup.wait_group(0)

    @cute.jit
    def online_softmax(self, acc_s: cute.Tensor, coords: cute.Tensor, masked, Sq, Sk, scale_log2: cutlass.Float32,
                       row_max: cute.Tensor, row_sum: cute.Tensor, o_mn: cute.Tensor):
        """The twin's online-softmax step (``online_softmax_rows``) on wgmma's accumulator layout,
        the mask on ``masked`` steps only."""
        online_softmax_rows(wgmma_mn_view(acc_s), wgmma_mn_view(coords), masked, self.causal, Sq, Sk, scale_log2,
                            row_max, row_sum, o_mn)

def compile_tma(dtype, D: int, causal: bool, plan: dict):
    """The kernel of a plan (bm, bn, stages), compiled once per (dtype, D, causal, plan)."""
    import cutlass as _c

    cfg = (plan["bm"], plan["bn"], plan["stages"])
    key = ("attention_tma", str(dtype), D, bool(causal)) + cfg
    c = cached(key)
    if c is not None:
        return c
    from . import fake_stream

    fakes = fake_qkvo(dtype, D, align=16)
    return compile_kernel(key, AttentionTma(D, bool(causal), *cfg), *fakes, _c.Float32(1.0), fake_stream())


def prepare_attention_tma(q, k, v, out, causal, plan: dict):
    """Compile (cached) the plan's kernel; returns (launch, compiled). The caller validated the
    tensors and checked that TMA takes them (``tma_ready``)."""
    comp = compile_tma(q.dtype, q.shape[3], causal, plan)
    args = attention_args(q, k, v, out, align=16)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp


def tma_ready(*tensors) -> bool:
    """Whether TMA takes every tensor: 16-byte aligned base and outer strides."""
    return all(t.data_ptr() % 16 == 0 and all(s * t.element_size() % 16 == 0 for s in t.stride()[:3])
               for t in tensors)
