"""The TileLang layer's attention rule (``dispatch.plan`` answers every problem and hands attention
here). The rule reads the case's facts - query blocks against SMs,
bytes of a K / V tile, shared memory a CTA - never a list of shapes; the numbers it reads are the
plain-data table below (docs/performance.md, "TileLang / attention").

The plan is a compile class: (dtype, D, causal, bm, bn, stages, threads). Sizes and strides are
run-time values of the kernel, so every sequence length, batch and head count of a class shares
one compile.
"""
from __future__ import annotations

from kltools.plan import H200   # the GPU a plan assumes without one (132 SMs)

ATTENTION = {
    # query rows a CTA: 128 (two consumer warpgroups of 64 rows sharing every K / V stage: half
    # the shared-memory traffic of a FLOP) when the 128-row grid still gives every SM at least
    # ``min_waves`` CTAs; else 64 rows (one consumer warpgroup), twice the CTAs
    "block_m": (64, 128),
    "min_waves": 1.0,
    # keys a K / V tile: wgmma's N for S = Q K^T; the score tile a consumer thread holds is
    # 64 x bn / 128 fp32 values (64 at bn = 128) beside the 64 x D / 128 of the output
    "block_n": 128,
    # consumer threads per 64 query rows (a warpgroup); TileLang adds the producer warpgroup
    "threads_per_64_rows": 128,
    # K / V stages: as many as fit beside the Q and O tiles in a CTA's shared memory (one CTA an
    # SM: its consumers hold 240 registers a thread after setmaxnreg), between these bounds
    "stages": (2, 4),
    "smem_per_cta": 227 * 1024,
    "smem_reserve": 2048,          # mbarriers and the driver's 1 KB a block
}


def plan_attention(B: int, Hq: int, Sq: int, D: int, esize: int, A=None, sms: int | None = None) -> dict:
    """The ``ws`` kernel's tile class from the case's facts (see ATTENTION) on a GPU of ``sms`` SMs."""
    A, sms = A or ATTENTION, sms or H200.sms
    small, large = A["block_m"]
    fills = -(-Sq // large) * B * Hq >= A["min_waves"] * sms
    bm = large if Sq > small and fills else small
    bn = A["block_n"]
    lo, hi = A["stages"]
    room = A["smem_per_cta"] - A["smem_reserve"] - 2 * bm * D * esize    # beside Q and O
    stages = max(lo, min(hi, room // (2 * bn * D * esize)))
    return {"kernel": "ws", "bm": bm, "bn": bn, "stages": stages,
            "threads": bm // 64 * A["threads_per_64_rows"]}
