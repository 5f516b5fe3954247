"""Attention forward, ``tma``: TMA loads into a STAGES-deep ring of K / V tiles with one mbarrier
each, both products on wgmma (Hopper), the online softmax in registers.

A program owns BLOCK_M query rows of one (batch, head): 4 warps a 64-row warpgroup, so the
scores S = Q K^T [BLOCK_M, BLOCK_N] and the output accumulator [BLOCK_M, D] are wgmma accumulator
layouts whose rows never leave a warp. Per key block j:
- its K tile waits on its barrier; S = wgmma(Q from shared memory, K^T as a transposed view of
  the K tile);
- the online softmax in the log2 domain (exp2, scale * log2(e) folded), masks only in the blocks
  that need them (the ragged end of Sk, the causal diagonal); causal blocks past the diagonal are
  never visited and the longest query blocks go first;
- P goes to the second wgmma straight from registers (the A operand's layout of the O
  accumulator), V from its tile;
- the loads of block j + STAGES - 1 go into the stage block j - 1 used, whose two MMAs have
  retired, so STAGES - 1 blocks of K and V are in flight while this one computes.

Q, K and V are read through 2-d TMA descriptors over row views of the [B, H, S, D] tensors
(``row_view``: rows of D elements of the contiguous layout, or columns h D .. h D + D of the
[B, S, H, D] storage): a tile past a head's last position reads the next head's rows (or zeros at
the end), which the key mask and the row mask of the store discard. O is stored with pointers
(16-byte stores, rows past Sq masked), so a ragged Sq never writes a neighbour.
"""
from __future__ import annotations

import math

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ._compat import tma_load
from .gemm_epilogue_tma import gl_dtype
from .runtime import Spec

LOG2E = 1.4426950408889634


@gluon.jit
def _issue(k_desc, v_desc, k_s, v_s, k_bar, v_bar, j, n_blocks, row, col,
           STAGES: gl.constexpr, BLOCK_N: gl.constexpr, NBYTES: gl.constexpr):
    """The TMA loads of key block j (when it exists) into stage j % STAGES."""
    st = j % STAGES
    go = j < n_blocks
    mbarrier.expect(k_bar.index(st), NBYTES, pred=go)
    tma_load(k_desc, [row + j * BLOCK_N, col], k_bar.index(st), k_s.index(st), pred=go)
    mbarrier.expect(v_bar.index(st), NBYTES, pred=go)
    tma_load(v_desc, [row + j * BLOCK_N, col], v_bar.index(st), v_s.index(st), pred=go)


@gluon.jit
def _step(acc, l, m, q_s, k_desc, v_desc, k_s, v_s, k_bar, v_bar, j, n_blocks, row, col,
          rows, Sk, diag, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
          STAGES: gl.constexpr, NBYTES: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
          dtype: gl.constexpr, s_layout: gl.constexpr, o_layout: gl.constexpr):
    """Key block j into the running (acc, l, m); m in log2 units."""
    _issue(k_desc, v_desc, k_s, v_s, k_bar, v_bar, j + STAGES - 1, n_blocks, row, col, STAGES, BLOCK_N, NBYTES)
    st = j % STAGES
    phase = (j // STAGES) & 1
    mbarrier.wait(k_bar.index(st), phase)
    s = warpgroup_mma(q_s, k_s.index(st).permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                      use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    if MASKED:
        keys = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        seen = keys[None, :] < Sk
        if CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + diag)
        s = gl.where(seen, s * qk_scale, float("-inf"))
        m_new = gl.maximum(m, gl.max(s, axis=1))
        p = gl.exp2(s - m_new[:, None])
    else:
        m_new = gl.maximum(m, gl.max(s, axis=1) * qk_scale)
        p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m - m_new)
    l = l * alpha + gl.sum(p, axis=1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    p_op = gl.convert_layout(p.to(dtype), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    mbarrier.wait(v_bar.index(st), phase)
    acc = warpgroup_mma(p_op, v_s.index(st), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    return acc, l, m_new


@gluon.jit
def attention_tma_kernel(q_desc, k_desc, v_desc, o_ptr, so_b, so_h, so_s, Hq, GROUP, Sq, Sk, qk_scale,
                         q_rb, q_rh, q_ch, kv_rb, kv_rh, kv_ch,
                         CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    NBYTES: gl.constexpr = BLOCK_N * D * dtype.primitive_bitwidth // 8
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                       instr_shape=[16, D, 16])
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m       # the longest query blocks first
    b = gl.program_id(1) // Hq
    h = gl.program_id(1) % Hq
    start_m = pid_m * BLOCK_M
    q_s = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
    k_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    k_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(k_bar.index(st), count=1)
        mbarrier.init(v_bar.index(st), count=1)
    mbarrier.init(q_bar, count=1)
    fence_async_shared()

    mbarrier.expect(q_bar, BLOCK_M * D * dtype.primitive_bitwidth // 8)
    tma_load(q_desc, [b * q_rb + h * q_rh + start_m, h * q_ch], q_bar, q_s)
    hk = h // GROUP
    row = b * kv_rb + hk * kv_rh
    col = hk * kv_ch
    diag = Sk - Sq                                    # query i sees keys j <= i + diag (causal)
    if CAUSAL:
        end = gl.minimum(Sk, start_m + BLOCK_M + diag)
        bulk = gl.minimum(start_m + diag + 1, Sk) // BLOCK_N
    else:
        end = Sk
        bulk = Sk // BLOCK_N
    n_blocks = (end + BLOCK_N - 1) // BLOCK_N
    for j in gl.static_range(STAGES - 1):
        _issue(k_desc, v_desc, k_s, v_s, k_bar, v_bar, j, n_blocks, row, col, STAGES, BLOCK_N, NBYTES)

    rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    m = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, D], gl.float32, o_layout)
    mbarrier.wait(q_bar, 0)
    for j in range(0, bulk):
        acc, l, m = _step(acc, l, m, q_s, k_desc, v_desc, k_s, v_s, k_bar, v_bar, j, n_blocks, row, col,
                          rows, Sk, diag, qk_scale, False, CAUSAL, STAGES, NBYTES, BLOCK_M, BLOCK_N, dtype,
                          s_layout, o_layout)
    for j in range(bulk, n_blocks):
        acc, l, m = _step(acc, l, m, q_s, k_desc, v_desc, k_s, v_s, k_bar, v_bar, j, n_blocks, row, col,
                          rows, Sk, diag, qk_scale, True, CAUSAL, STAGES, NBYTES, BLOCK_M, BLOCK_N, dtype,
                          s_layout, o_layout)
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(k_bar.index(st))
        mbarrier.invalidate(v_bar.index(st))
    mbarrier.invalidate(q_bar)

    out: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])   # 16-byte stores
    o = gl.convert_layout((acc / gl.convert_layout(l, gl.SliceLayout(1, o_layout))[:, None]).to(dtype), out)
    r = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, out))
    c = gl.arange(0, D, layout=gl.SliceLayout(0, out))
    gl.store(o_ptr + b.to(gl.int64) * so_b + h * so_h + (r * so_s)[:, None] + c[None, :], o,
             mask=(r < Sq)[:, None])


def row_view(t):
    """(2-d view, row per batch, row per head, column per head) of t [B, H, S, D], so that position
    s of head h of batch b starts at row b rb + h rh + s, column h ch; None when its strides are
    neither layout's (the contiguous one or the [B, S, H, D] storage)."""
    B, H, S, D = t.shape
    sb, sh, ss, sd = t.stride()
    if sd == 1 and ss == D and sh == S * D and sb == H * S * D:
        return t.reshape(B * H * S, D), H * S, S, 0
    if sd == 1 and sh == D and ss == H * D and sb == S * H * D:
        return t.transpose(1, 2).reshape(B * S, H * D), S, 0, D
    return None


def check(q, k, v, out) -> str | None:
    """None when the kernel can address the tensors, else why not (naming the tensor)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if row_view(t) is None:
            return (f"{name}: strides {t.stride()} are neither a contiguous [B, H, S, D] nor a "
                    f"[B, S, H, D] storage, the row views the TMA descriptors read")
        if t.device.type == "cuda" and t.data_ptr() % 16:
            return f"{name}: base address {t.data_ptr():#x} is not 16-byte aligned, as TMA needs"
    if out.stride(3) != 1:
        return f"out: last stride {out.stride(3)}; the store needs a unit inner stride"
    return None


def launch_spec(q, k, v, out, causal: int, cfg: dict) -> Spec:
    B, Hq, Sq, D = q.shape
    gdt = gl_dtype(q.dtype)
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    (qv, q_rb, q_rh, q_ch), (kv, kv_rb, kv_rh, kv_ch), (vv, *_) = (row_view(t) for t in (q, k, v))

    def desc(view, rows):
        layout = gl.NVMMASharedLayout.get_default_for([rows, D], gdt)
        return TensorDescriptor(view, list(view.shape), list(view.stride()), [rows, D], layout)
    args = {"q_desc": desc(qv, bm), "k_desc": desc(kv, bn), "v_desc": desc(vv, bn), "o_ptr": out,
            "so_b": out.stride(0), "so_h": out.stride(1), "so_s": out.stride(2), "Hq": Hq,
            "GROUP": Hq // k.shape[1], "Sq": Sq, "Sk": k.shape[2], "qk_scale": LOG2E / math.sqrt(D),
            "q_rb": q_rb, "q_rh": q_rh, "q_ch": q_ch, "kv_rb": kv_rb, "kv_rh": kv_rh, "kv_ch": kv_ch,
            "CAUSAL": bool(causal), "STAGES": cfg["STAGES"]}
    return Spec(attention_tma_kernel, (triton.cdiv(Sq, bm), B * Hq), args, {"num_warps": cfg["num_warps"]})
