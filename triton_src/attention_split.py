"""Attention forward, ``split``: the key axis split over programs, then a combine (flash-decoding).

For few query blocks - a decode-like chunk of Sq queries against a long cache of Sk keys, where
B x Hq x cdiv(Sq, BLOCK_M) programs leave SMs idle and each walks the whole key axis alone - the
keys are cut into SPLITS ranges of whole blocks, one program per (query block, head, range):
- ``attention_split_kernel`` runs the ``tma`` kernel's loop (TMA descriptors, pipelined K / V,
  exp2) over its range and writes the range's normalised partial output (fp32) and its
  log-sum-exp lse = m + log2(l) (log2 units) to a workspace. A row that sees no key of the range
  (the causal diagonal) writes lse = -inf and zeros; its running max stays -inf until a key
  arrives, so the exponents use 0 in its place instead of producing -inf - -inf = NaN.
- ``attention_combine_kernel`` merges the ranges per row as the online softmax merges blocks:
  O = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M), M the largest lse, stored in the output dtype.
The cost: the workspace's fp32 write and read (SPLITS x Sq x D a head) and a second launch.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .attention_tma import LOG2E, descriptors, tma_check
from .runtime import Spec, bind_spec


@triton.jit
def attention_split_kernel(q_desc, k_desc, v_desc, part_ptr, lse_ptr, Hq, GROUP, Sq, Sk, qk_scale,
                           BLOCKS_PER_SPLIT, CAUSAL: tl.constexpr, D: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    split = tl.program_id(2)
    b = bh // Hq
    h = bh % Hq
    start_m = pid_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    diag = Sk - Sq
    q = q_desc.load([b, h, start_m, 0]).reshape(BLOCK_M, D)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    end = tl.minimum(Sk, start_m + BLOCK_M + diag) if CAUSAL else Sk
    lo = split * BLOCKS_PER_SPLIT * BLOCK_N
    hi = tl.minimum(end, lo + BLOCKS_PER_SPLIT * BLOCK_N)
    for start in tl.range(lo, hi, BLOCK_N):
        k = k_desc.load([b, h // GROUP, start, 0]).reshape(BLOCK_N, D)
        keys = start + tl.arange(0, BLOCK_N)
        seen = keys[None, :] < Sk
        if CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + diag)
        s = tl.where(seen, tl.dot(q, k.T) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # a row with no key yet
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m - m_use)
        l = l * alpha + tl.sum(p, 1)
        v = v_desc.load([b, h // GROUP, start, 0]).reshape(BLOCK_N, D)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m = m_new
    live = l > 0
    out = acc / tl.where(live, l, 1.0)[:, None]
    lse = tl.where(live, m + tl.math.log2(tl.where(live, l, 1.0)), float("-inf"))
    base = (split * tl.num_programs(1) + bh).to(tl.int64) * Sq
    dims = tl.arange(0, D)
    tl.store(part_ptr + (base + rows[:, None]) * D + dims[None, :], out, mask=rows[:, None] < Sq)
    tl.store(lse_ptr + base + rows, lse, mask=rows < Sq)


@triton.jit
def attention_combine_kernel(part_ptr, lse_ptr, o_ptr, so_b, so_h, so_s, Hq, Sq, SPLITS, HEADS,
                             D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    inside = rows < Sq
    big = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for split in range(0, SPLITS):
        base = (split * HEADS + bh).to(tl.int64) * Sq
        lse = tl.load(lse_ptr + base + rows, mask=inside, other=0.0)    # rows past Sq: no 0 / 0
        part = tl.load(part_ptr + (base + rows[:, None]) * D + dims[None, :], mask=inside[:, None], other=0.0)
        big_new = tl.maximum(big, lse)
        use = tl.where(big_new == float("-inf"), 0.0, big_new)
        w = tl.math.exp2(lse - use)
        alpha = tl.math.exp2(big - use)
        total = total * alpha + w
        acc = acc * alpha[:, None] + w[:, None] * part
        big = big_new
    o = acc / total[:, None]
    b = bh // Hq
    h = bh % Hq
    tl.store(o_ptr + b.to(tl.int64) * so_b + h * so_h + rows[:, None] * so_s + dims[None, :],
             o.to(o_ptr.dtype.element_ty), mask=inside[:, None])


def workspace(q, splits: int, device=None):
    """(partial outputs fp32 [SPLITS, B Hq, Sq, D], their lse fp32 [SPLITS, B Hq, Sq])."""
    B, Hq, Sq, D = q.shape
    dev = device or q.device
    return (torch.empty((splits, B * Hq, Sq, D), dtype=torch.float32, device=dev),
            torch.empty((splits, B * Hq, Sq), dtype=torch.float32, device=dev))


def launch_specs(q, k, v, out, causal: int, cfg: dict, part, lse) -> list:
    """The two launches (partial ranges, then the combine) with ``cfg`` (BLOCK_M, BLOCK_N, SPLITS,
    BLOCKS_PER_SPLIT, num_warps, num_stages) and the workspace ``part``, ``lse``."""
    B, Hq, Sq, D = q.shape
    q_desc, k_desc, v_desc, _ = descriptors(q, k, v, out, cfg)
    grid = (triton.cdiv(Sq, cfg["BLOCK_M"]), B * Hq, cfg["SPLITS"])
    partial = Spec(attention_split_kernel, grid,
                   {"q_desc": q_desc, "k_desc": k_desc, "v_desc": v_desc, "part_ptr": part, "lse_ptr": lse,
                    "Hq": Hq, "GROUP": Hq // k.shape[1], "Sq": Sq, "Sk": k.shape[2],
                    "qk_scale": LOG2E / math.sqrt(D), "BLOCKS_PER_SPLIT": cfg["BLOCKS_PER_SPLIT"],
                    "CAUSAL": bool(causal), "D": D, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"]},
                   {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    cm = cfg["COMBINE_M"]
    combine = Spec(attention_combine_kernel, (triton.cdiv(Sq, cm), B * Hq),
                   {"part_ptr": part, "lse_ptr": lse, "o_ptr": out, "so_b": out.stride(0), "so_h": out.stride(1),
                    "so_s": out.stride(2), "Hq": Hq, "Sq": Sq, "SPLITS": cfg["SPLITS"], "HEADS": B * Hq,
                    "D": D, "BLOCK_M": cm}, {"num_warps": 4})
    return [partial, combine]


def bind_launch(q, k, v, out, causal: int, cfg: dict):
    """Zero-argument launch of both kernels on a workspace this launch owns. Raises ValueError
    naming the tensor TMA cannot address."""
    if (why := tma_check(q, k, v, out)):
        raise ValueError(why)
    part, lse = workspace(q, cfg["SPLITS"])
    first, second = (bind_spec(s, q.device) for s in launch_specs(q, k, v, out, causal, cfg, part, lse))

    def launch():
        first()
        second()
    launch.compiled = first.compiled
    launch.keep = (part, lse)
    return launch
