"""The CuTe layer's attention rule (``dispatch.plan`` answers every problem and hands attention here).

Pure Python, no GPU. The rule reads the case's facts - query blocks against SMs, the bytes of the
tiles a CTA holds in shared memory, whether TMA can take the tensors, whether the GPU is a Hopper -
never a list of shapes; the numbers it reads are the plain-data table below.

A plan is a compile class of ``attention_tma.py``: (dtype, D, causal, bm, bn, stages). Lengths,
batch, heads and strides are run-time values, so every case of a class shares one compile. Where
TMA cannot take a tensor (a base or an outer stride not a multiple of 16 bytes) or the GPU is not
sm_90, the plan is the twin's kernel (``attention.py``), which takes any valid case.
"""
from __future__ import annotations

from kltools.plan import H200   # the GPU a plan assumes without one (132 SMs)

ATTENTION = {
    # query rows a CTA: 128 (two warpgroups of 64 rows sharing every K / V tile: half the shared
    # memory traffic a FLOP) while the 128-row grid gives every SM at least ``min_waves`` CTAs;
    # else 64 rows (one warpgroup), twice the CTAs
    "block_m": (64, 128),
    "min_waves": 1.0,
    # keys a K / V tile, largest first: the largest that leaves ``min_stages`` stages beside the Q
    # (and O) tile; a thread holds 64 x bn / 128 fp32 scores and their 16-bit P
    "block_n": (128, 64),
    "min_stages": 3,
    "max_stages": 4,
    "smem_per_cta": 227 * 1024,
    "smem_reserve": 2048,          # the mbarriers, alignment padding and the driver's 1 KB a block
}


def smem_bytes(bm: int, bn: int, D: int, stages: int, esize: int) -> int:
    """Shared memory of a plan: Q (reused for O) and ``stages`` K + V tiles (P stays in registers)."""
    return (bm * D + stages * 2 * bn * D) * esize


def plan_attention(B: int, Hq: int, Sq: int, D: int, esize: int, tma: bool = True, hopper: bool = True,
                   sms: int | None = None, A: dict | None = None) -> dict:
    """The kernel and its tile class for a case: ``tma``: every tensor TMA-ready (16-byte bases and
    outer strides); ``hopper``: the GPU is sm_90 (or none: the CPU compiles for sm_90a)."""
    A = A or ATTENTION
    if min(B, Hq, Sq) < 1 or D not in (64, 128) or esize != 2:
        raise ValueError(f"D: a case of B={B}, Hq={Hq}, Sq={Sq}, D={D}, {esize}-byte elements is not attention's")
    if not (tma and hopper):
        why = "TMA cannot take a tensor" if not tma else "not a Hopper GPU"
        return {"kernel": "simple", "why": why}
    sms = sms or H200.sms
    small, large = A["block_m"]
    fills = -(-Sq // large) * B * Hq >= A["min_waves"] * sms
    bm = large if Sq > small and fills else small
    room = A["smem_per_cta"] - A["smem_reserve"]
    for bn in A["block_n"]:
        stages = (room - smem_bytes(bm, bn, D, 0, esize)) // (2 * bn * D * esize)
        if stages >= A["min_stages"] or bn == A["block_n"][-1]:
            break
    stages = min(A["max_stages"], stages)
    return {"kernel": "tma", "bm": bm, "bn": bn, "stages": stages, "threads": bm // 64 * 128,
            "smem_bytes": smem_bytes(bm, bn, D, stages, esize)}
