"""The Gluon layer's planner for attention (part of its one planner: ``dispatch.py`` plans the
other problems, this file the fourth). The rules read the case's facts - programs against SMs,
bytes of a K / V tile, shared memory an SM - never a list of shapes (docs/performance.md,
"Gluon / attention"); the table is plain data.
"""
from __future__ import annotations

from .runtime import Plan, bind

ATTENTION = {
    # query rows a program: 128 (two 64-row warpgroups sharing each K / V tile) when the 128-row
    # grid gives every SM at least ``min_waves`` programs, else 64 (one warpgroup, twice the programs)
    "block_m": (64, 128),
    "min_waves": 1.0,
    # keys a tile (wgmma's N for S = Q K^T), by BLOCK_M
    "block_n": {64: 64, 128: 128},
    # programs an SM should hold, by BLOCK_M (~165 registers a thread at 8 warps: one program)
    "programs_per_sm": {64: 2, 128: 1},
    # K / V ring stages: as many as the program's share of shared memory holds beside Q
    "stages": (2, 4),
    "smem_reserve": 2048,
}


def attention_choice(B: int, Hq: int, Sq: int, D: int, elem_size: int, facts: dict, A=None) -> tuple[str, dict]:
    """("tma", its BLOCK_M, BLOCK_N, num_warps, STAGES) from the case's facts (see ATTENTION)."""
    A = A or ATTENTION
    small, large = A["block_m"]
    fills = -(-Sq // large) * B * Hq >= A["min_waves"] * facts["sms"]
    bm = large if Sq > small and fills else small
    bn = A["block_n"][bm]
    lo, hi = A["stages"]
    room = facts["smem_per_sm"] // A["programs_per_sm"][bm] - A["smem_reserve"] - bm * D * elem_size
    stages = max(lo, min(hi, room // (2 * bn * D * elem_size)))
    return "tma", {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": bm // 16, "STAGES": stages}


def plan_attention(q, k, v, out, causal: int, A=None) -> Plan:
    from . import attention_tma, device_facts
    if (why := attention_tma.check(q, k, v, out)):
        raise ValueError(why)
    variant, cfg = attention_choice(q.shape[0], q.shape[1], q.shape[2], q.shape[3], q.element_size(),
                                    device_facts(q.device), A)
    return Plan(variant, cfg, bind(attention_tma.launch_spec(q, k, v, out, causal, cfg), q.device))
