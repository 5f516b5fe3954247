"""Attention forward, ``tma``: the twin's algorithm with Q, K, V and O through TMA descriptors.

What changes against the twin (``attention.py``), each for a reason in bytes or instructions:
- Host-built 4-d TMA descriptors over the [B, H, S, D] views (any strides that are 16-byte
  multiples: the contiguous layout and the [B, S, H, D] storage alike). The copy engine moves
  whole [BLOCK_N, D] boxes into swizzled shared memory, where the wgmma instructions read them;
  no address arithmetic, no masks on the loads: rows past S read as zero and the O store clips
  them, per (batch, head), so a ragged S never touches a neighbouring head.
- The K / V loop is software-pipelined over ``num_stages`` (dispatch: as many stages of K and V
  tiles as the shared memory holds beside Q), so the next tiles are in flight while this tile's
  two MMAs and softmax run.
- exp2 with the scale folded into one constant, scale * log2(e): one multiply per score.
- Two loops: keys every row of the block sees (no mask, the bulk of the work), then the blocks
  that need a mask - the ragged end of Sk and, when causal, the diagonal. Causal blocks wholly
  above the diagonal are never visited, and the query blocks are launched latest first (they
  have the most keys), so the short ones fill the tail of the grid.
- Grouped-query heads by head mapping: query head h reads the K / V descriptor at head h // GROUP.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .runtime import Spec, bind_spec

LOG2E = 1.4426950408889634


@triton.jit
def _key_blocks(acc, l, m, q, k_desc, v_desc, b, hk, lo, hi, rows, Sk, diag, qk_scale,
                MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    """Keys [lo, hi) in blocks of BLOCK_N into the running (acc, l, m); m is in log2 units."""
    for start in tl.range(lo, hi, BLOCK_N):
        k = k_desc.load([b, hk, start, 0]).reshape(BLOCK_N, D)
        s = tl.dot(q, k.T)
        if MASKED:
            keys = start + tl.arange(0, BLOCK_N)
            seen = keys[None, :] < Sk
            if CAUSAL:
                seen = seen & (keys[None, :] <= rows[:, None] + diag)
            s = tl.where(seen, s * qk_scale, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            s = s - m_new[:, None]
        else:
            m_new = tl.maximum(m, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        v = v_desc.load([b, hk, start, 0]).reshape(BLOCK_N, D)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m = m_new
    return acc, l, m


@triton.jit
def attention_tma_kernel(q_desc, k_desc, v_desc, o_desc, Hq, GROUP, Sq, Sk, qk_scale,
                         CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m     # the longest query blocks first
    b = tl.program_id(1) // Hq
    h = tl.program_id(1) % Hq
    start_m = pid_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    diag = Sk - Sq                                   # query i sees keys j <= i + diag (causal)
    q = q_desc.load([b, h, start_m, 0]).reshape(BLOCK_M, D)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    if CAUSAL:
        # keys up to the block's first row's diagonal are seen by every row; none past its last
        end = tl.minimum(Sk, start_m + BLOCK_M + diag)
        bulk = tl.minimum(start_m + diag + 1, Sk) // BLOCK_N * BLOCK_N
    else:
        end = Sk
        bulk = Sk // BLOCK_N * BLOCK_N
    acc, l, m = _key_blocks(acc, l, m, q, k_desc, v_desc, b, h // GROUP, 0, bulk, rows, Sk, diag,
                            qk_scale, False, CAUSAL, BLOCK_N, D)
    acc, l, m = _key_blocks(acc, l, m, q, k_desc, v_desc, b, h // GROUP, bulk, end, rows, Sk, diag,
                            qk_scale, True, CAUSAL, BLOCK_N, D)
    o = acc / l[:, None]
    o_desc.store([b, h, start_m, 0], o.to(o_desc.dtype).reshape(1, 1, BLOCK_M, D))


def tma_check(*tensors) -> str | None:
    """None when TMA descriptors can address every tensor (16-byte aligned base and strides, a unit
    last stride), else why not (naming the tensor by its place: q, k, v, out)."""
    for name, t in zip(("q", "k", "v", "out"), tensors):
        es = t.element_size()
        if t.stride(3) != 1:
            return f"{name}: last stride {t.stride(3)}; TMA descriptors need a unit inner stride"
        bad = [s for s in t.stride()[:3] if (s * es) % 16]
        if bad:
            return f"{name}: strides {t.stride()} are not all 16-byte multiples, as TMA descriptors need"
        if t.device.type == "cuda" and t.data_ptr() % 16:
            return f"{name}: base address {t.data_ptr():#x} is not 16-byte aligned, as TMA descriptors need"
    return None


def descriptors(q, k, v, out, cfg: dict):
    """Host TMA descriptors of the [B, H, S, D] views, boxes of one head's BLOCK_M (Q, O) or
    BLOCK_N (K, V) rows."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    D = q.shape[3]
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]

    def desc(t, rows):
        return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, D])
    return desc(q, bm), desc(k, bn), desc(v, bn), desc(out, bm)


def launch_spec(q, k, v, out, causal: int, cfg: dict) -> Spec:
    B, Hq, Sq, D = q.shape
    q_desc, k_desc, v_desc, o_desc = descriptors(q, k, v, out, cfg)
    args = {"q_desc": q_desc, "k_desc": k_desc, "v_desc": v_desc, "o_desc": o_desc, "Hq": Hq,
            "GROUP": Hq // k.shape[1], "Sq": Sq, "Sk": k.shape[2], "qk_scale": LOG2E / math.sqrt(D),
            "CAUSAL": bool(causal), "D": D, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"]}
    return Spec(attention_tma_kernel, (triton.cdiv(Sq, cfg["BLOCK_M"]), B * Hq), args,
                {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})


def bind_launch(q, k, v, out, causal: int, cfg: dict):
    """Zero-argument launch with ``cfg`` (BLOCK_M, BLOCK_N, num_warps, num_stages). Raises
    ValueError naming the tensor TMA cannot address."""
    if (why := tma_check(q, k, v, out)):
        raise ValueError(why)
    return bind_spec(launch_spec(q, k, v, out, causal, cfg), q.device)
