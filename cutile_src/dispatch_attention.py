"""The cuTile layer's planner for attention (part of its one planner: ``dispatch.plan`` answers
every problem and hands attention to ``plan`` here; the rules live in a file of their own). Plain
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
    # at its default 4 worker warps the 128 x 128 tile spills 440 bytes a thread). 64 rows:
    # occupancy 2, two programs an SM (256 threads, 128 registers, 83-100 KB of shared memory
    # each). Compile facts of tileiras 13.4 for sm_90; times await a GPU.
    "hints": {128: {"num_worker_warps": 8}, 64: {"occupancy": 2}},
    # the K / V loads' latency hint (1..10): at 2 tileiras keeps one more 128 x 128 K / V buffer
    # in shared memory than at its own choice or at 4-8 (132 KB against 99 KB at D = 128)
    "latency": 2,
    # few query tiles (``split``, off until a GPU has timed it: the candidate
    # cutile:attention_split): where the grid has fewer programs than ``split_below_waves`` x SMs,
    # cut each query tile's key tiles into ranges of at least ``split_min_tiles``, as many as
    # bring the programs to ``split_target_waves`` x SMs; a combine kernel merges them
    "split": False,
    "split_below_waves": 1.0,
    "split_target_waves": 2.0,
    "split_min_tiles": 4,
}


def _src(file: str, kernels: tuple, host: tuple):
    from kltools.plan import Source
    return (Source(f"cutile_src/{file}", kernels=kernels, host=host),)


#: the variants the attention planner plans among, by algorithm word (kltools.plan's contract, as
#: dispatch.py's VARIANTS for the other problems)
VARIANTS = {"attention": {
    "tma": _src("attention_tma.py", ("attention_tma_kernel",), ("launch_args", "bind_launch")),
    "split": _src("attention_split.py", ("attention_split_kernel", "attention_combine_kernel"),
                  ("workspace", "launch_args", "bind_launch")),
}}


def plan(problem: str, facts):
    """The default's plan (``cutile:attention``) for one case given as ``kltools.plan.Facts``."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    cfg = plan_attention(facts.B, facts.Hq, facts.Sq, facts.Sk, facts.D, facts.device.sms)
    return make_plan(problem, cfg["variant"], VARIANTS, cfg)


def reachable(problem: str, A=None) -> tuple[str, ...]:
    """The variants the attention planner can choose (the default's lines of code count these)."""
    if problem == "attention":
        return ("tma",) + (("split",) if (A or ATTENTION)["split"] else ())
    raise ValueError(f"problem: {problem!r} is not planned here")


def tma_config(B: int, Hq: int, Sq: int, D: int, sms: int = H200_SMS, A=None) -> dict:
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


def split_config(B: int, Hq: int, Sq: int, Sk: int, D: int, sms: int = H200_SMS, A=None) -> dict | None:
    """The ``split`` plan where its rule takes the case (see ATTENTION; the switch ``split`` is the
    caller's to read), else None: the tma tile, SPLITS ranges of PER key tiles, the partial
    kernel's grid (query tiles x SPLITS, Hq, B) and the combine kernel's (query tiles, Hq, B)."""
    A = A or ATTENTION
    cfg = tma_config(B, Hq, Sq, D, sms, A)
    programs = cfg["grid"][0] * Hq * B
    if programs >= A["split_below_waves"] * sms:
        return None
    tiles = -(-Sk // cfg["TN"])
    splits = min(-(-int(A["split_target_waves"] * sms) // programs), tiles // A["split_min_tiles"])
    if splits < 2:
        return None
    per = -(-tiles // splits)
    splits = -(-tiles // per)          # no empty range
    return cfg | {"variant": "split", "SPLITS": splits, "PER": per,
                  "grid": [cfg["grid"][0] * splits, Hq, B], "combine_grid": list(cfg["grid"])}


def plan_attention(B: int, Hq: int, Sq: int, Sk: int, D: int, sms: int = H200_SMS, A=None) -> dict:
    """The default's plan: ``split`` where its switch is on and its rule takes the case, else tma."""
    A = A or ATTENTION
    split = split_config(B, Hq, Sq, Sk, D, sms, A) if A["split"] else None
    return split or tma_config(B, Hq, Sq, D, sms, A)
