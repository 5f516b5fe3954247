"""The cuTile layer's planner for attention (part of its one planner: ``dispatch.py`` plans the
other problems, this file the fourth, kept apart while cutile:attention is a candidate). Plain
Python, no GPU, no compile: the rule reads the case's facts - query tiles against SMs, the head
dim - never a list of shapes; the numbers are the table below (docs/performance.md,
"cuTile / attention"). Nothing autotunes.
"""
from __future__ import annotations

H200_SMS = 132
HEAD_DIMS = (64, 128)
MAX_GRID_YZ = 65535     # CUDA's limit of a grid's second and third dimensions (heads, batch)

ATTENTION = {
    # query rows a program: 128 where the grid of 128-row tiles gives every SM at least
    # ``min_waves`` programs (and a tile holds more than 64 rows), else 64: twice the programs
    "block_m": (64, 128),
    "min_waves": 1.0,
    # keys a K / V tile, by the query tile: as many as its rows (the score tile a consumer
    # thread holds is the same either way)
    "block_n": {64: 64, 128: 128},
    # kernel hints by the query tile. 128 rows: 8 worker warps, which tileiras splits into two
    # consumer warpgroups and a TMA producer (384 threads, 168 registers, no spills at D = 128;
    # at its default 4 worker warps the 128 x 128 tile spills 280 bytes a thread). 64 rows:
    # occupancy 2, two programs an SM (256 threads, 128 registers, 58-100 KB of shared memory
    # each). Compile facts of tileiras 13.4 for sm_90; times await a GPU.
    "hints": {128: {"num_worker_warps": 8}, 64: {"occupancy": 2}},
    # the K / V loads' latency hint (1..10): at 2 tileiras keeps one more 128 x 128 K / V buffer
    # in shared memory than at its own choice or at 4-8 (132 KB against 99 KB at D = 128)
    "latency": 2,
}


def reachable(problem: str) -> tuple[str, ...]:
    """The variants the attention planner can choose (the default's lines of code count these)."""
    if problem == "attention":
        return ("tma",)
    raise ValueError(f"problem: {problem!r} is not planned here")


def plan_attention(B: int, Hq: int, Sq: int, D: int, sms: int = H200_SMS, A=None) -> dict:
    """The ``tma`` kernel's plan from the case's facts (see ATTENTION): the tile (TM query rows,
    TN keys), the latency hint, the grid (query tiles, Hq, B) and the kernel hints."""
    A = A or ATTENTION
    if D not in HEAD_DIMS:
        raise ValueError(f"D: head dim must be one of {HEAD_DIMS}, got {D}")
    if min(B, Hq, Sq, sms) < 1:
        raise ValueError(f"B, Hq, Sq, sms: must be positive, got {B}, {Hq}, {Sq}, {sms}")
    if max(B, Hq) > MAX_GRID_YZ:
        raise ValueError(f"B, Hq: {B} batches, {Hq} heads: the grid holds at most {MAX_GRID_YZ} of each")
    small, large = A["block_m"]
    fills = -(-Sq // large) * B * Hq >= A["min_waves"] * sms
    tm = large if Sq > small and fills else small
    return {"variant": "tma", "TM": tm, "TN": A["block_n"][tm], "LATENCY": A["latency"],
            "grid": [-(-Sq // tm), Hq, B], "hints": dict(A["hints"][tm])}
