"""GEMM + fused epilogue for Hopper (sm_90a) in the CuTe DSL: C = act(A @ B + bias).

A is [M, K] row-major (K-major for wgmma); B is [K, N] row-major, which the kernel sees as the
[N, K] operand with N contiguous (MN-major - wgmma reads 16-bit MN-major operands straight from
shared memory, so no transpose pass). fp16/bf16 in, fp32 accumulation, output in the input type.

Mainloop: a CTA computes a TILE_M x TILE_N tile with two warpgroups (wgmma m64nNk16, one 64-row
half each). A ``STAGES``-deep ring of shared-memory buffers is filled by TMA (``cp.async.bulk.tensor``)
issued from warp 0; each stage has a "full" mbarrier (TMA transaction bytes) and an "empty"
mbarrier (released by the consumers once the wgmmas that read it retired), so loads for k-tiles
ahead overlap the wgmmas of the current one and one wgmma batch stays in flight.

Epilogue (the point of this problem): on the fp32 accumulators in registers, before any rounding,
add bias[n] (coordinates from an identity tensor partitioned exactly like the accumulators) and
apply none / relu / gelu-tanh, then convert, ``stmatrix`` into shared memory (reusing the A
buffers), fence the async proxy and TMA-store each epilogue sub-tile. TMA zero-fills out-of-range
loads and clips out-of-range stores, so ragged M, N, K need no masks in the mainloop.

M, N, K are symbolic: one compile per (dtype, act, bias?, tile config). TMA needs 16-byte aligned
rows: K % 8 == 0 (A), N % 8 == 0 (B, C) and 16-byte aligned base pointers; other shapes are
declined by ``check`` with the reason.
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.memory import SmemAllocator
import torch

from . import cached, compile_kernel, cutlass_dtype, fake_stream, stream_args, to_cute

ACTS = ("none", "relu", "gelu")
GELU_C = 0.7978845608028654  # sqrt(2/pi)
LOG2E = 1.4426950408889634
GROUP_M = 8                  # CTA rasterisation: 8 M-tiles share a column of B tiles in L2


@cute.jit
def apply_act(v: cutlass.Float32, act: cutlass.Constexpr):
    if cutlass.const_expr(act == "relu"):
        v = cute.arch.fmax(v, cutlass.Float32(0.0))
    elif cutlass.const_expr(act == "gelu"):
        # 0.5 v (1 + tanh(u)), tanh(u) = 1 - 2 / (exp(2u) + 1): exact at both tails. The
        # reciprocal is rcp.approx (one MUFU op, ~1 ulp): an IEEE division here compiled to 128
        # div.rn.f32 sequences (each a dozen instructions and a slow-path branch) per thread and
        # tile, the likely cause of the GELU epilogue's 20-30 % loss in the 2026-11-29 H200 run
        u = GELU_C * (v + 0.044715 * v * v * v)
        e = cute.math.exp2(u * (2.0 * LOG2E), fastmath=True) + 1.0
        t = 1.0 - 2.0 * cute.arch.rcp_approx(e)
        v = 0.5 * v * (1.0 + t)
    return v


@cute.jit
def bias_act(acc: cute.Tensor, tCcC: cute.Tensor, mBias: cute.Tensor, n, has_bias: cutlass.Constexpr,
             act: cutlass.Constexpr):
    """The fused epilogue on a thread's fp32 accumulators, in place: + bias[col] where the
    accumulator's column (from the matching coordinate partition ``tCcC``) is inside N, then
    the activation. Shared by every CuTe GEMM kernel of this package."""
    for i in cutlass.range(cute.size(acc), unroll_full=True):
        v = acc[i]
        if cutlass.const_expr(has_bias):
            col = tCcC[i][1]
            if col < n:
                v = v + mBias[col].to(cutlass.Float32)
        acc[i] = apply_act(v, act)


class GemmEpilogue:
    def __init__(self, act: str, has_bias: bool, tile_n: int = 256, stages: int | None = None):
        if act not in ACTS:
            raise ValueError(f"act: {act!r} is not one of {', '.join(ACTS)}")
        self.act, self.has_bias = act, has_bias
        self.tile_m, self.tile_n = 128, tile_n
        self.atom_layout = (2, 1, 1)          # two consumer warpgroups, 64 rows each
        self.threads = 256
        self.acc_dtype = cutlass.Float32
        self.stages_override = stages
        self.epi_stage = 4

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
        cap = utils.get_smem_capacity_in_bytes("sm_90")
        self.stages = self.stages_override or (cap - 1024) // per_stage
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

        @cute.struct
        class Storage:
            bars: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(self.a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem)], 1024]

        self.storage = Storage
        self.kernel(tma_a, tA, tma_b, tB, tma_c, tC, mBias, self.tiled_mma, self.a_smem,
                    self.b_smem, self.c_smem, m_tiles, n_tiles).launch(
            grid=(m_tiles * n_tiles, 1, 1), block=(self.threads, 1, 1), cluster=(1, 1, 1),
            stream=stream)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, mBias: cute.Tensor, tiled_mma: cute.TiledMma,
               a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
               c_smem: cute.ComposedLayout, m_tiles: cutlass.Int32, n_tiles: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)

        # grouped rasterisation: GROUP_M consecutive M-tiles per column of B tiles
        per_group = GROUP_M * n_tiles
        first_m = (bid // per_group) * GROUP_M
        group_m = cutlass.min(m_tiles - first_m, GROUP_M)
        pid_m = first_m + (bid % per_group) % group_m
        pid_n = (bid % per_group) // group_m
        coord = (pid_m, pid_n, None)

        storage = SmemAllocator().allocate(self.storage)
        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        # the epilogue staging buffer reuses A's ring once the mainloop is done
        sC = cute.make_tensor(cute.recast_ptr(sA.iterator, c_smem.inner, dtype=self.c_dtype),
                              c_smem.outer)

        tx_bytes = (cute.size_in_bytes(self.a_dtype, cute.slice_(a_smem, (None, None, 0)))
                    + cute.size_in_bytes(self.b_dtype, cute.slice_(b_smem, (None, None, 0))))
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.bars.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.threads // 32),
            tx_count=tx_bytes, cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))

        gA = cute.local_tile(mA, self.tile, coord, proj=(1, None, 1))      # (bM, bK, k-tiles)
        gB = cute.local_tile(mB, self.tile, coord, proj=(None, 1, 1))      # (bN, bK, k-tiles)
        gC = cute.local_tile(mC, self.tile, coord, proj=(1, 1, None))      # (bM, bN)
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))

        wg = cute.arch.make_warp_uniform(tidx // 128)
        thr_mma = tiled_mma.get_slice(cute.make_layout(2, stride=128)(wg))
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gC).shape, self.acc_dtype)
        cute.arch.sync_threads()

        k_tiles = cute.size(gA, mode=[2])
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)

        # prologue: fill the ring
        if warp == 0:
            for _ in cutlass.range(cutlass.min(self.stages, k_tiles), unroll=1):
                ring.producer_acquire(prod)
                cute.copy(tma_a, tAgA[(None, prod.count)], tAsA[(None, prod.index)],
                          tma_bar_ptr=ring.producer_get_barrier(prod))
                cute.copy(tma_b, tBgB[(None, prod.count)], tBsB[(None, prod.index)],
                          tma_bar_ptr=ring.producer_get_barrier(prod))
                ring.producer_commit(prod)
                prod.advance()

        k_blocks = cute.size(tCrA, mode=[2])
        # first k-tile peeled: it starts the accumulation (ACCUMULATE off for its first wgmma)
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
        ring.consumer_wait(read)
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(k_blocks):
            cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                      tCrB[(None, None, kb, read.index)], acc)
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        cute.nvgpu.warpgroup.commit_group()
        read.advance()
        for kt in cutlass.range(1, k_tiles, 1, unroll=1):
            ring.consumer_wait(read)
            cute.nvgpu.warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                          tCrB[(None, None, kb, read.index)], acc)
            cute.nvgpu.warpgroup.commit_group()
            # this k-tile's wgmmas stay in flight; the previous tile's have retired: free its slot
            cute.nvgpu.warpgroup.wait_group(1)
            ring.consumer_release(release)
            release.advance()
            read.advance()
            # warp 0 refills the slot just freed with the k-tile `stages` ahead
            if warp == 0 and prod.count < k_tiles:
                ring.producer_acquire(prod)
                cute.copy(tma_a, tAgA[(None, prod.count)], tAsA[(None, prod.index)],
                          tma_bar_ptr=ring.producer_get_barrier(prod))
                cute.copy(tma_b, tBgB[(None, prod.count)], tBsB[(None, prod.index)],
                          tma_bar_ptr=ring.producer_get_barrier(prod))
                ring.producer_commit(prod)
                prod.advance()
        cute.nvgpu.warpgroup.wait_group(0)

        # ---- fused epilogue on the fp32 accumulators -------------------------------------
        if cutlass.const_expr(self.has_bias or self.act != "none"):
            cC = cute.local_tile(cute.make_identity_tensor(mC.shape), self.tile, coord, proj=(1, 1, None))
            # per-thread coordinates: the slice of *this* thread (thr_mma above is the warpgroup's
            # slice, which is all the wgmma operands need but names only its first thread's
            # accumulator coordinates)
            tCcC = tiled_mma.get_slice(tidx).partition_C(cC)
            if cutlass.const_expr(cute.size(tCcC) != cute.size(acc)):
                raise ValueError("accumulator / coordinate partitions differ in size")
            bias_act(acc, tCcC, mBias, cute.size(mC, mode=[1]), self.has_bias, self.act)

        cute.arch.sync_threads()          # every warpgroup is done reading sA before it is reused
        r2s_atom = sm90_utils.sm90_get_smem_store_op(self.c_layout, elem_ty_d=self.c_dtype,
                                                     elem_ty_acc=self.acc_dtype)
        stm = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(self.c_layout.is_m_major_c(), 4),
                                  self.c_dtype)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm, tiled_mma))
        thr_r2s = r2s.get_slice(tidx)
        tRS_sC = thr_r2s.partition_D(sC)
        tRS_acc = r2s.retile(acc)
        rD_layout = cute.make_layout(cute.shape(thr_r2s.partition_S(sC))[:3])
        rD = cute.make_rmem_tensor_like(rD_layout, self.acc_dtype)
        per_epi = cute.size(rD)

        gC_epi = cute.zipped_divide(gC, self.epi_tile)
        bsC, bgC = cute.nvgpu.cpasync.tma_partition(tma_c, 0, cute.make_layout(1),
                                                    cute.group_modes(sC, 0, 2), gC_epi)
        epi_count = cute.size(gC_epi, mode=[1])
        epi_shape = gC_epi.shape[1]
        epi_order = cute.make_layout(epi_shape, stride=(epi_shape[1], 1))
        store_ring = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.threads))

        for e in cutlass.range_constexpr(epi_count):
            for v in cutlass.range_constexpr(per_epi):
                rD[v] = tRS_acc[e * per_epi + v]
            rOut = cute.make_rmem_tensor_like(rD_layout, self.c_dtype)
            rOut.store(rD.load().to(self.c_dtype))
            buf = e % self.epi_stage
            cute.copy(r2s, rOut, tRS_sC[(None, None, None, buf)])
            # generic-proxy smem writes must be visible to the TMA (async proxy) store
            cute.arch.fence_proxy("async.shared", space="cta")
            pipeline.sync(barrier_id=1)
            if warp == 0:
                cute.copy(tma_c, bsC[(None, buf)], bgC[(None, epi_order.get_hier_coord(e))])
                store_ring.producer_commit()
                store_ring.producer_acquire()
            pipeline.sync(barrier_id=1)
        if warp == 0:
            store_ring.producer_tail()


def check(M: int, N: int, K: int, dtype, a=None, b=None, bias=None) -> str | None:
    """None when TMA can take these shapes/tensors, else the reason."""
    if dtype not in (torch.float16, torch.bfloat16):
        return f"dtype {dtype} is not float16/bfloat16 (wgmma 16-bit path)"
    if K % 8:
        return f"K={K} is not a multiple of 8: A's rows are not 16-byte aligned, which TMA requires"
    if N % 8:
        return f"N={N} is not a multiple of 8: B's and C's rows are not 16-byte aligned, which TMA requires"
    for name, t in (("a", a), ("b", b), ("bias", bias)):
        if t is not None and t.data_ptr() % 16 and name != "bias":
            return f"{name}: base address not 16-byte aligned (TMA)"
    return None


def _compile(dtype, act: str, has_bias: bool, tile_n: int = 256, stages: int | None = None):
    key = ("gemm", str(dtype), act, has_bias, tile_n, stages)
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
    return compile_kernel(key, GemmEpilogue(act, has_bias, tile_n, stages), a, b, c, bias, fake_stream())


def validate(a, b, bias, out, act):
    for name, t in (("a", a), ("b", b), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
        if t.dim() != 2:
            raise ValueError(f"{name}: must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"{name}: dtype {t.dtype} is not float16 or bfloat16")
        if t.dtype != a.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from a's {a.dtype}")
        if t.stride(1) != 1 and t.shape[1] > 1:
            raise ValueError(f"{name}: must be row-major (last stride 1), got strides {t.stride()}")
    M, K = a.shape
    if b.shape[0] != K:
        raise ValueError(f"b: shape {tuple(b.shape)} does not match a's K={K}")
    N = b.shape[1]
    if min(M, N, K) < 1:
        # K = 0 would leave the consumers waiting on a k-tile no producer loads
        raise ValueError(f"a, b: empty GEMM (M={M}, N={N}, K={K})")
    if tuple(out.shape) != (M, N):
        raise ValueError(f"out: shape {tuple(out.shape)} != ({M}, {N})")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias: expected a torch.Tensor or None, got {type(bias).__name__}")
        if bias.device != a.device or bias.dtype != a.dtype:
            raise TypeError(f"bias: must be {a.dtype} on {a.device}, got {bias.dtype} on {bias.device}")
        if tuple(bias.shape) != (N,) or (N > 1 and bias.stride(0) != 1):
            raise ValueError(f"bias: must be a contiguous [{N}] vector, got shape {tuple(bias.shape)}")
    if act not in ACTS:
        raise ValueError(f"act: {act!r} is not one of {', '.join(ACTS)}")
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t.shape[0] > 1 and (t.stride(0) * t.element_size()) % 16:
            raise ValueError(f"{name}: row stride {t.stride(0)} elements is not 16-byte aligned (TMA)")
    why = check(M, N, K, a.dtype, a, b)
    if why is None and out.data_ptr() % 16:
        why = "out: base address not 16-byte aligned (TMA)"
    if why:
        raise ValueError(why)


def prepare_gemm(a, b, bias, out, act="relu", tile_n=256, stages=None):
    validate(a, b, bias, out, act)
    comp = _compile(a.dtype, act, bias is not None, tile_n, stages)
    bias_t = bias if bias is not None else torch.zeros(8, dtype=a.dtype, device=a.device)
    args = (to_cute(a, 16), to_cute(b.t(), 16, leading_dim=0), to_cute(out, 16),
            to_cute(bias_t, 2))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp


def gemm_epilogue(a, b, bias=None, act="relu", out=None):
    """act(a @ b + bias) for CUDA fp16/bf16 row-major a [M, K], b [K, N]."""
    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    launch, _ = prepare_gemm(a, b, bias, out, act)
    launch()
    return out


def compile_only(dtype=torch.bfloat16, act="relu", has_bias=True, tile_n=256):
    return _compile(dtype, act, has_bias, tile_n)
