"""The Helion planner for attention (part of the layer's one planner: ``dispatch.py`` plans the
other problems, this file the fourth's rules). ``attention_config(shape facts)`` needs no tensor, so
compile-only uses it without a GPU. Every rule reads the case's facts - query rows against SMs,
bytes of a K / V tile, shared memory an SM, 16-byte aligned tensors - never a list of shapes; the
numbers are the table below. Nothing autotunes: the configuration is the rule's.
"""
from __future__ import annotations


ATTENTION = {
    # query rows a program: 128 (two warpgroups of 64 rows, 4 warps each, sharing every K / V tile
    # they load) when the grid of 128-row tiles still gives every SM ``min_waves`` programs; else
    # 64 rows and 4 warps, twice the programs
    "block_m": (64, 128),
    "warps_per_64_rows": 4,
    "min_waves": 1.0,
    # keys a K / V tile, by the query tile: as many as its rows (the score tile a warp holds is
    # the same either way: 64 fp32 values a thread)
    "block_n": {64: 64, 128: 128},
    # programs an SM should hold, by the query tile: one of 8 warps (about 210 registers a
    # thread at D = 128: the register file holds one), two of 4 warps
    "programs_per_sm": {64: 2, 128: 1},
    # K / V stages: as many as the program's share of shared memory holds beside the Q tile,
    # between these bounds
    "stages": (2, 4),
    # bytes of an SM's shared memory a program cannot have (the driver's 1 KB a block, barriers)
    "smem_reserve": 2048,
}


def attention_config(B: int, Hq: int, Sq: int, D: int, elem: int, sms: int, smem_per_sm: int,
                     aligned: bool = True, A=None) -> dict:
    """The Helion configuration of ``attention_tma`` for the case's facts (see ATTENTION);
    ``aligned``: every tensor starts on a 16-byte boundary (TMA descriptors need it; the strides
    are multiples of D elements, 128 bytes or more)."""
    A = A or ATTENTION
    small, large = A["block_m"]
    fills = -(-Sq // large) * B * Hq >= A["min_waves"] * sms
    bm = large if Sq > small and fills else small
    bn = A["block_n"][bm]
    lo, hi = A["stages"]
    tile_bytes = D * elem
    room = smem_per_sm // A["programs_per_sm"][bm] - A["smem_reserve"] - bm * tile_bytes
    stages = max(lo, min(hi, room // (2 * bn * tile_bytes)))
    return {"block_sizes": [bm, bn], "num_warps": bm // 64 * A["warps_per_64_rows"], "num_stages": stages,
            # the query tiles of a head launched together, then its group's heads (L2 reuse)
            "loop_orders": [[2, 1, 0]],
            "indexing": "tensor_descriptor" if aligned else "pointer"}
