"""The Triton layer's planner for attention (part of its one planner: ``dispatch.py`` plans the
other problems, this file the fourth, so that each stays readable).

``attention_choice(shape facts) -> (variant, config)`` needs no tensor (compile_only uses it without
a GPU); ``bind_variant`` binds the chosen variant to the tensors. Every rule reads the case's facts - rows a
program, bytes of a K / V tile, shared memory an SM, programs against SMs - never a list of shapes;
the numbers they read are the table below (docs/performance.md, "Triton / attention").
"""
from __future__ import annotations

ATTENTION = {
    # query rows a program: 128 (two warpgroups of 64 rows, 4 warps each, sharing every K / V tile
    # they load: half the shared-memory reads of a FLOP) when the grid of 128-row blocks still
    # gives every SM at least ``min_waves`` programs; else 64 rows and 4 warps, twice the programs
    "block_m": (64, 128),
    "warps_per_64_rows": 4,
    "min_waves": 1.0,
    # keys a K / V tile, by BLOCK_M: as many as the rows (a [128, D] tile is 16 KB at D = 64,
    # 32 KB at D = 128), so the score tile a warp holds is the same either way
    "block_n": {64: 64, 128: 128},
    # programs an SM should hold, by BLOCK_M: one of 8 warps (~190 registers a thread: the
    # register file holds one), two of 4 warps (so that an SM still runs 8 warps)
    "programs_per_sm": {64: 2, 128: 1},
    # K / V stages: as many as a program's share of the SM's shared memory holds beside the Q
    # tile (O's TMA staging reuses a freed buffer: 3 stages of 128 x 128 at D = 128 compile to
    # 225 KB), between these bounds
    "stages": (2, 4),
    # bytes of an SM's shared memory a program cannot have: the driver's 1 KB a block, and
    # Triton's pipeline barriers
    "smem_reserve": 2048,
    # few query blocks (``split``, off until a GPU has timed it): when the programs of the grid
    # are fewer than ``split_below_waves`` x SMs, cut the key axis into ranges of at least
    # ``split_min_blocks`` key blocks, as many as bring the programs to ``split_target_waves``
    # x SMs; a combine kernel of ``combine_m`` rows a program merges the ranges
    "split": False,
    "split_below_waves": 1.0,
    "split_target_waves": 2.0,
    "split_min_blocks": 4,
    "combine_m": 64,
}
#: the switches of the candidate ``triton:attention_next`` (today's default with them on)
ATTENTION_NEXT = {"split": True}


def attention_tma_config(B: int, Hq: int, Sq: int, D: int, elem_size: int, facts: dict, A=None) -> dict:
    """Tiles, warps and stages of the ``tma`` kernel from the case's facts (see ATTENTION)."""
    A = A or ATTENTION
    small, large = A["block_m"]
    fills = -(-Sq // large) * B * Hq >= A["min_waves"] * facts["sms"]
    bm = large if Sq > small and fills else small
    bn = A["block_n"][bm]
    lo, hi = A["stages"]
    tile_bytes = D * elem_size
    share = facts["smem_per_sm"] // A["programs_per_sm"][bm]
    room = share - A["smem_reserve"] - bm * tile_bytes    # beside the Q tile
    stages = max(lo, min(hi, room // (2 * bn * tile_bytes)))
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": bm // 64 * A["warps_per_64_rows"],
            "num_stages": stages}


def attention_split_config(B: int, Hq: int, Sq: int, Sk: int, D: int, elem_size: int, facts: dict,
                           A=None) -> dict | None:
    """The ``split`` configuration where the rule takes it (see ATTENTION), else None."""
    A = A or ATTENTION
    cfg = attention_tma_config(B, Hq, Sq, D, elem_size, facts, A)
    programs = -(-Sq // cfg["BLOCK_M"]) * B * Hq
    if not A["split"] or programs >= A["split_below_waves"] * facts["sms"]:
        return None
    blocks = -(-Sk // cfg["BLOCK_N"])
    splits = min(-(-int(A["split_target_waves"] * facts["sms"]) // programs), blocks // A["split_min_blocks"])
    if splits < 2:
        return None
    per = -(-blocks // splits)
    return {**cfg, "SPLITS": -(-blocks // per), "BLOCKS_PER_SPLIT": per, "COMBINE_M": A["combine_m"]}


def attention_choice(B: int, Hq: int, Sq: int, Sk: int, D: int, elem_size: int, facts: dict,
                     A=None) -> tuple[str, dict]:
    split = attention_split_config(B, Hq, Sq, Sk, D, elem_size, facts, A)
    if split is not None:
        return "split", split
    return "tma", attention_tma_config(B, Hq, Sq, D, elem_size, facts, A)


def bind_variant(variant: str, q, k, v, out, causal: int, cfg: dict):
    from . import attention_split, attention_tma, interpreting
    if interpreting():
        cfg = {**cfg, "num_stages": 1}
    module = attention_split if variant == "split" else attention_tma
    return cfg, module.bind_launch(q, k, v, out, causal, cfg)

