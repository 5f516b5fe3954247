"""Attention forward, warp-specialised (FlashAttention-3's split of roles) for Hopper in the CuTe
DSL (cute:attention_ws).

The same tiles, TMA descriptors, wgmma products and online softmax as ``attention_tma.py`` (whose
pieces this schedule reuses); what changes is who waits for whom:

- **Producer.** Warpgroup 0 gives its registers back (``setmaxnreg``); its first warp loads Q, then
  every K / V tile of the block into the ring, as far ahead as the stages allow: before reusing a
  slot it waits on the slot's "empty" mbarrier.
- **Consumers.** Warpgroups 1-2 (or 1) take the registers (``setmaxnreg``), 64 query rows each;
  after a step's P V every consumer warp arrives on the slot's "empty" barrier - no CTA barrier in
  the loop, so the two consumer warpgroups drift apart and one's softmax runs under the other's
  wgmmas (without FlashAttention-3's explicit ping-pong ordering).
- **Epilogue.** The consumers meet on a named barrier (the producer has left), write O / sum into
  Q's tile, meet again, and one consumer warp issues the TMA store.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from . import cached, compile_kernel, stream_args
from .attention import attention_args, fake_qkvo
from .attention_tma import AttentionTma

PRODUCER_REGS = 40
CONSUMER_REGS = {1: 240, 2: 232}       # by consumer warpgroups: 128 x 40 + 256 x 232 <= 64K registers


class AttentionWS(AttentionTma):
    def __init__(self, D: int, causal: bool, bm: int, bn: int, stages: int):
        super().__init__(D, causal, bm, bn, stages)
        self.consumers = self.threads                   # 128 a 64-row warpgroup
        self.threads = 128 + self.consumers             # warpgroup 0 produces
        self.n_bars = 2 * stages + 1                    # full, Q, empty

    @cute.kernel
    def kernel(self, tma_q, gq: cute.Tensor, tma_k, gk: cute.Tensor, tma_v, gv: cute.Tensor, tma_o,
               go: cute.Tensor, mma_qk: cute.TiledMma, mma_pv: cute.TiledMma, q_smem: cute.ComposedLayout,
               k_smem: cute.ComposedLayout, v_smem: cute.ComposedLayout,
               Sq: cutlass.Int32, Sk: cutlass.Int32, group: cutlass.Int32, scale_log2: cutlass.Float32):
        stages = self.stages
        tidx, _, _ = cute.arch.thread_idx()
        mb, h, b = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // 128)
        sQ, sK, sV, bars = self.shared(tma_q, tma_k, tma_v, tma_o, q_smem, k_smem, v_smem, warp, self.consumers // 32)
        views = self.tma_views(tma_q, gq, tma_k, gk, tma_v, gv, sQ, sK, sV, h, b, group)
        n_tiles = self.key_tiles(mb, Sq, Sk)
        if wg == 0:
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp == 0:
                self.load_q(tma_q, views, bars + stages, mb)
                for n in cutlass.range(n_tiles, unroll=1):
                    slot = n % stages
                    if n >= stages:                     # the slot's previous tile released
                        cute.arch.mbarrier_wait(bars + stages + 1 + slot, (n // stages - 1) % 2)
                    self.load_kv(tma_k, tma_v, views, bars + slot, n, slot)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS[self.consumers // 128])
            self.consume(tidx - 128, wg - 1, views, tma_k, tma_v, mma_qk, mma_pv, sQ, sK, sV, bars, mb, Sq, Sk,
                         n_tiles, scale_log2)
            self.store_o(tma_o, go, mma_pv, tidx, warp == 4, sQ, h, b, mb)

    @cute.jit
    def release(self, slot, n, n_tiles, bars, views, tma_k, tma_v):
        """Step n is done with ``slot``: one arrival per consumer warp on its empty barrier."""
        if cute.arch.lane_idx() == 0:
            cute.arch.mbarrier_arrive(bars + self.stages + 1 + slot)

    @cute.jit
    def consumer_sync(self):
        """The consumer warpgroups meet (named barrier 1; the producer does not take part)."""
        cute.arch.barrier(barrier_id=1, number_of_threads=self.consumers)


def compile_ws(dtype, D: int, causal: bool, plan: dict):
    """The warp-specialised kernel of a plan (bm, bn, stages), once per (dtype, D, causal, plan)."""
    cfg = (plan["bm"], plan["bn"], plan["stages"])
    key = ("attention_ws", str(dtype), D, bool(causal)) + cfg
    c = cached(key)
    if c is not None:
        return c
    from . import fake_stream

    return compile_kernel(key, AttentionWS(D, bool(causal), *cfg), *fake_qkvo(dtype, D, align=16),
                          cutlass.Float32(1.0), fake_stream())


def prepare_attention_ws(q, k, v, out, causal, plan: dict):
    """Compile (cached) the plan's kernel; returns (launch, compiled). The caller validated the
    tensors and checked that TMA takes them."""
    comp = compile_ws(q.dtype, q.shape[3], causal, plan)
    args = attention_args(q, k, v, out, align=16)
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp
