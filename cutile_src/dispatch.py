"""cuTile planner: one rule per problem over facts of the case (bytes per row, tiles against the
SMs, K per tile), choosing a variant and its configuration; the tables are plain data.

Planning is one-way: this module imports the variants and reads facts; no variant imports it.
Every plan is a dict: ``variant``, the kernel's constants, ``hints`` (cuTile kernel hints:
``occupancy``, ``num_worker_warps``) and, where the kernel has one, ``grid``.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import dispatch_attention as _attention

H200_SMS = 132

# Switches of rules built and checked on the CPU (compile-only for sm_90, SASS) that wait for a
# GPU run; the default routes by them only once they PASSed the verify suite on the H200 and beat
# what they replace there. Each has its own candidate id (cutile:softmax_split, cutile:softmax_rows_tma,
# cutile:softmax_online_tma, cutile:softmax_online_flat, ...) and all
# of them together are the candidate cutile:softmax_next (NEXT: the default's planner with every
# switch on); flip an entry when its candidate has won there (the default's plan and reachable()
# follow).
#   split        few long rows: a row across many programs (softmax_split)
#   rows_tma     rows masked by column index: TMA loads (softmax_rows_tma)
#   online_tma   online masked by column index: TMA loads, the grid and hints by L2 (softmax_online_tma)
#   online_flat  contiguous rows whose bytes are no 16-byte multiple: aligned 1-d tiles (softmax_online_flat)
#   stage        GEMM operands whose rows are no 16-byte multiples are staged first (gemm_stage;
#                formerly the switch pack)
#   persistent   GEMM tiles > SMs: a grid of one program an SM looping over the tiles (gemm_epilogue_tiled)
#   small        GEMMs whose C tiles leave SMs idle (plan_gemm_small): A and B staged in one launch,
#                narrower tiles before split-K, split-K only where even those leave half the SMs idle;
#                with M <= 64, a B of unaligned rows larger than L2 read in place (no staging)
# On, each having won where it changed the plan and PASSed the verify suite (docs/performance.md,
# "The pending switches of TileLang, cuTile and Helion measured on 2026-12-06"): split, rows_tma,
# stage (then named pack), persistent; small (run on the H200 as cutile:gemm_epilogue_next, which it replaced:
# docs/performance.md, "cuTile / GEMM + epilogue"). Off: online_flat (hung at 4096 x 50257 bf16 on
# the H200 in a check; probed alone on an H100 it ran there at 0.61x torch.softmax with pass 2 by
# scatter, and hung at 1000 x 32769 bf16 with occupancy 2: docs/performance.md, "cuTile / softmax"),
# online_tma (untimed). The split kernel's resident mode (one launch on a co-resident grid, the
# row's partials polled) hung in a check and was removed (docs/performance.md, "cuTile / softmax").
GPU_VERIFIED = {"split": True, "rows_tma": True, "online_tma": False, "online_flat": False,
                "stage": True, "persistent": True, "small": True}
NEXT = dict.fromkeys(GPU_VERIFIED, True)


def _switches(switches: dict | None) -> dict:
    return GPU_VERIFIED if switches is None else switches


# -- vector add: elements a program's tile moves, by element size ------------------------------
VECTOR_ADD_TILE = {4: 2048, 2: 4096}

# -- softmax -----------------------------------------------------------------------------------
# rows: a (ROWS, TN) tile holds whole rows while TN (N rounded up to a power of two) is at most
# ROW_TILE_MAX columns; ROWS grows until the tile holds ROWS_TILE_ELEMS elements (short rows),
# at most ROWS_MAX rows. Rows of ROW_WIDE columns or more take 8 worker warps (tileiras keeps a
# 32768-column fp32 row in registers that way). Longer rows: online over column tiles of
# ONLINE_TILE.
SOFTMAX = {"ROW_TILE_MAX": 32768, "ROWS_TILE_ELEMS": 4096, "ROWS_MAX": 64, "ONLINE_TILE": 2048,
           "ROW_WIDE": 16384}
# tileiras sizes a kernel's registers to fill the SM at the occupancy hint (1 unless told): the
# most co-resident programs whose live fp32 values (rows: the tile; online: the tile and the two
# running tiles) still fit their registers: (live values at most, occupancy)
SOFTMAX_OCCUPANCY = ((4096, 4), (12288, 2))
# online (the LDG kernel): a program a row, the most co-resident programs (occupancy 4: the
# 2048-column tile and its two running tiles fit 64 registers a thread).
ONLINE_HINTS = {"occupancy": 4}
# online with TMA loads (online_tma, online_flat): pass 2 re-reads the row newest tile first, so
# the programs an SM are the most of OCCUPANCY whose rows in flight (grid x row bytes) stay
# within L2_SHARE of L2 (pass 2 then reads L2, not HBM); where not even one an SM fits, NO_FIT.
# The bytes in flight come from tileiras's TMA pipeline, which the loads' latency hint deepens;
# LATENCY by element size is the deepest that compiles without spills and leaves two programs'
# shared memory within an SM's (SASS, 2048-element tiles, flat kernel at N = 50257: bf16 56 KB a
# program at 8, fp32 92 KB at 6; at 10 the flat kernel spills 200-360 bytes a thread).
ONLINE = {"TILE": 2048, "OCCUPANCY": (4, 2, 1), "L2_SHARE": 0.5, "NO_FIT": 2, "LATENCY": {2: 8, 4: 6}}
# split: few rows (M < ROWS_PER_SM x SMs: a program a row would leave SMs idle) of at least MIN_N
# columns: each row cut into chunks of CHUNK columns (halved down to MIN_CHUNK while the units fill
# fewer than UNITS_PER_SM x SMs programs, doubled while a row has more than MAX_PARTS chunks), the
# chunk's hints by softmax_hints, co-resident programs looping over the units.
SPLIT = {"ROWS_PER_SM": 2, "MIN_N": 8192, "CHUNK": 4096, "MIN_CHUNK": 1024, "MAX_PARTS": 1024,
         "UNITS_PER_SM": 2}
H200_L2 = 50 * 2 ** 20
# rows_tma: the loads' latency hint (0: tileiras's own; the SASS shows no consistent effect on
# the rows kernel's pipeline: python -m harness check cutile times 0 against 10)
ROWS_LATENCY = 0
ROWS_TMA_BYTES = 64 * 1024


def softmax_hints(live: int, tn: int) -> dict:
    if tn >= SOFTMAX["ROW_WIDE"]:
        return {"num_worker_warps": 8}
    for most, occ in SOFTMAX_OCCUPANCY:
        if live <= most:
            return {"occupancy": occ}
    return {}


# -- GEMM --------------------------------------------------------------------------------------
# tile shapes, largest first, chosen by the busy fraction of the SMs over the tiles' waves;
# the 8-worker-warp shapes are warp-specialised by tileiras (two consumer warpgroups), which
# keeps the 128 x 256 fp32 accumulator in registers. "tma": only where both operands' rows are
# 16-byte multiples (TMA loads them into shared memory); otherwise tileiras loads through
# registers, and that tile's accumulator no longer fits beside them (local-memory spills).
GEMM_TILES = (
    {"TM": 128, "TN": 256, "TK": 64, "hints": {"num_worker_warps": 8}, "tma": True},
    {"TM": 128, "TN": 128, "TK": 64, "hints": {"num_worker_warps": 8}, "tma": False},
    {"TM": 64, "TN": 128, "TK": 64, "hints": {}, "tma": False},
)
GEMM_GROUP = 8
GEMM_MIN_BUSY = 0.8
# split-K: for M <= MAX_M, where the C tiles fill at most half the program slots (SMs x PER_SM)
# and K holds at least MIN_KTILES K tiles per slice. PER_SM: the partial kernel takes a whole SM
# (tileiras gives it 255 registers x 256 threads and 128-206 KB of shared memory: the launch's
# own cubin on the H200, and compile-only here; test_splitk_partial_fills_an_sm). The slices:
# as many as keep every program in ONE wave (floor(slots / tiles)): a program an SM streams its
# K slice at a rate of its own, so a second or third wave only adds a wave's fixed cost and
# leaves SMs idle in its tail (the H200 reference run: 288 programs = 2.2 waves at 16 x 6144 x
# 4096 took 33 us, 0.69 x eager; docs/performance.md, ## cuTile / gemm_epilogue).
GEMM_SPLITK = {"MAX_M": 64, "TN": 128, "TK": 128, "MIN_KTILES": 4, "PER_SM": 1, "MAX_SPLIT": 32,
               "RM": 16, "RN": 128}


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _row_tile(M: int) -> int:
    """The row tile of few rows (M <= GEMM_SPLITK["MAX_M"]): M rounded up to a power of two, 16..64."""
    return min(64, max(16, _pow2_at_least(M)))


def reachable(problem: str, switches: dict | None = None) -> tuple[str, ...]:
    """The variants the planner of ``problem`` can choose under ``switches`` (default: GPU_VERIFIED)
    (``plan_*``'s ``variant``): the default's lines of code count these and only these
    (harness.planned_sources)."""
    sw = _switches(switches)
    if problem == "vector_add":
        return ("unmasked",)
    if problem == "softmax":   # the -inf padding kernels stay for rows TMA cannot load
        return ("rows",) + (("rows_tma",) if sw["rows_tma"] else ()) + ("online",) + \
            (("online_tma",) if sw["online_tma"] else ()) + \
            (("online_flat",) if sw["online_flat"] else ()) + (("split",) if sw["split"] else ())
    if problem == "gemm_epilogue":
        return ("tiled", "splitk")   # staging is no word: a plan's config (dispatch.STAGE)
    raise ValueError(f"problem: {problem!r} has no cuTile planner")


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ----------
def _src(file: str, kernels: tuple, host: tuple = ("bind_launch",)):
    from kltools.plan import Source
    return (Source(f"cutile_src/{file}", kernels=kernels, host=host),)


#: the variants the defaults plan among, by algorithm word: kernel files, entry points and the host
#: entries that bind them (the adapter, backends/cutile_layer.py, adds the compiler hints); the
#: words GPU_VERIFIED's switches open are here too
VARIANTS = {
    "vector_add": {"unmasked": _src("vector_add_unmasked.py", ("vector_add_unmasked_kernel",))},
    "softmax": {"rows": _src("softmax_rows.py", ("softmax_rows_kernel",)),
                "online": _src("softmax_online.py", ("softmax_online_kernel",)),
                "online_flat": _src("softmax_online_flat.py", ("softmax_online_flat_kernel",),
                                    ("flat_ok", "flat_args", "bind_launch")),
                "rows_tma": _src("softmax_rows_tma.py", ("softmax_rows_tma_kernel",)),
                "online_tma": _src("softmax_online_tma.py", ("softmax_online_tma_kernel",)),
                "split": _src("softmax_split.py", ("softmax_split_stats_kernel", "softmax_split_norm_kernel"),
                              ("partials", "bind_launch"))},
    "gemm_epilogue": {"tiled": _src("gemm_epilogue_tiled.py", ("gemm_epilogue_tiled_kernel",)),
                      "splitk": _src("gemm_epilogue_splitk.py", ("gemm_splitk_partial_kernel",
                                                                 "gemm_splitk_reduce_kernel"), ("workspace", "bind_launch"))},
    # the fourth problem's words and rules are dispatch_attention.py's
    "attention": _attention.VARIANTS["attention"],
}
#: staging (docs/DESIGN.md): the copies of the A / B rows that are no 16-byte multiples into 16-byte
#: rows, no word of its own; a GEMM plan whose config has ``stage`` launches them first ("rows": an
#: operand a launch, "pair": A and B in one, the plan's ``stage`` key "ab")
STAGE = {"rows": _src("gemm_stage.py", ("stage_rows_kernel",), ("staged_buffer", "bind_stage")),
         "pair": _src("gemm_stage.py", ("stage_pair_kernel",), ("bind_pair_operands", "bind_stage_pair"))}


def _contiguous(op) -> bool:
    """One dense run of elements (torch's ``is_contiguous``: sizes of 1 take any stride)."""
    want = 1
    for n, st in reversed(list(zip(op.shape, op.strides))):
        if n != 1 and st != want:
            return False
        want *= n
    return True


def plan(problem: str, facts):
    """The default's plan (``cutile:<problem>``) for one case given as ``kltools.plan.Facts``: the
    variant and configuration of ``plan_*`` under GPU_VERIFIED (a plan with ``stage`` in its config
    launches the staging kernel, then its tiled or split-K GEMM)."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    es, sms, ops = facts.esize, facts.device.sms, facts.operands
    if problem == "attention":
        return _attention.plan(problem, facts)
    if problem == "vector_add":
        return make_plan(problem, "unmasked", VARIANTS, plan_vector_add(facts.N, es))
    if problem == "softmax":
        contiguous = all(_contiguous(ops[n]) and ops[n].addr16 == 0 for n in ("x", "out"))
        cfg = plan_softmax(facts.M, facts.N, es, sms, contiguous, facts.device.l2_bytes,
                           rows16=facts.rows16("x", "out"))
        return make_plan(problem, cfg["variant"], VARIANTS, cfg)
    cfg = plan_gemm(facts.M, facts.N, facts.K, es, sms, a_rows16=ops["a"].rows16(es), b_rows16=ops["b"].rows16(es),
                    l2=facts.device.l2_bytes)
    if not cfg.get("stage"):
        return make_plan(problem, cfg["variant"], VARIANTS, cfg)
    stager = STAGE["pair"] if "ab" in cfg["stage"] else STAGE["rows"]
    return make_plan(problem, cfg["variant"], VARIANTS, cfg, sources=stager + VARIANTS[problem][cfg["variant"]])


def plan_vector_add(n: int, elem_size: int) -> dict:
    tile = VECTOR_ADD_TILE.get(elem_size, 2048)
    return {"variant": "unmasked", "TILE": tile, "grid": _cdiv(n, tile), "hints": {}}


def plan_softmax(M: int, N: int, elem_size: int, sms: int = H200_SMS, contiguous: bool = False,
                 l2: int = H200_L2, switches: dict | None = None, rows16: bool | None = None) -> dict:
    """split for few long rows; rows while a row rounds up to ROW_TILE_MAX columns; else online.
    Online is flat (aligned 1-d tiles of the rows as one vector, ``softmax_online_flat``) where x
    and out are ``contiguous`` (and 16-byte aligned) and a row's bytes are not a 16-byte multiple
    (the 2-d kernels read such rows in element-wide loads). The kernels masked by index (TMA)
    only where TMA can load the rows: ``rows16`` (every row of x and out starts on a 16-byte
    boundary; default: from N, contiguous rows); elsewhere the loads go through registers anyway
    and the -inf padding kernels need fewer of them. Which kernels: ``switches`` (default
    GPU_VERIFIED; NEXT turns every pending rule on)."""
    sw = _switches(switches)
    tma = (N * elem_size) % 16 == 0 if rows16 is None else rows16
    if sw["split"] and M < SPLIT["ROWS_PER_SM"] * sms and N >= SPLIT["MIN_N"]:
        return split_config(M, N, sms)
    if _pow2_at_least(N) <= SOFTMAX["ROW_TILE_MAX"]:
        return rows_config(M, N, sms, tma=sw["rows_tma"] and tma and rows_tma_fits(N, elem_size))
    if sw["online_flat"] and (N * elem_size) % 16 != 0 and flat_fits(M, N, contiguous):
        return online_config(M, N, elem_size, sms, l2, "online_flat")
    if sw["online_tma"] and tma:
        return online_config(M, N, elem_size, sms, l2, "online_tma")
    return online_plain_config(M, N)


def rows_tma_fits(N: int, elem_size: int) -> bool:
    """Whether the rows kernel masked by index keeps its tile in registers: a tile of at most
    ROWS_TMA_BYTES (the fp32 32768-column row, 128 KB, spills 32 bytes a thread beside its mask
    at 168 registers; the -inf padding kernel does not)."""
    return _pow2_at_least(N) * elem_size <= ROWS_TMA_BYTES


def flat_fits(M: int, N: int, contiguous: bool) -> bool:
    """Whether the flat kernel's view exists (x and out contiguous, 16-byte aligned) and its 32-bit
    element offsets (row x N, plus a tile) cannot overflow."""
    return contiguous and M * N + ONLINE["TILE"] < 2 ** 31


def online_plain_config(M: int, N: int) -> dict:
    """The LDG online kernel: a program a row, ONLINE_HINTS."""
    return {"variant": "online", "TILE": min(SOFTMAX["ONLINE_TILE"], _pow2_at_least(N)), "grid": M,
            "hints": dict(ONLINE_HINTS)}


def rows_config(M: int, N: int, sms: int = H200_SMS, tma: bool = False) -> dict:
    """ROWS whole rows of TN = N rounded up to a power of two a tile (ROWS grows to
    ROWS_TILE_ELEMS elements, at most ROWS_MAX and the rows there are), hints by the tile's live
    values, co-resident programs looping over the row tiles; ``tma``: the kernel masked by index."""
    tn = _pow2_at_least(N)
    rows = 1
    while rows * 2 * tn <= SOFTMAX["ROWS_TILE_ELEMS"] and rows * 2 <= SOFTMAX["ROWS_MAX"]:
        rows *= 2
    rows = min(rows, _pow2_at_least(M))
    hints = softmax_hints(rows * tn, tn)
    grid = min(_cdiv(M, rows), sms * hints.get("occupancy", 1))
    plan = {"variant": "rows", "ROWS": rows, "TN": tn, "grid": grid, "hints": hints}
    return plan | {"variant": "rows_tma", "LATENCY": ROWS_LATENCY} if tma else plan


def online_config(M: int, N: int, elem_size: int, sms: int = H200_SMS, l2: int = H200_L2,
                  variant: str = "online_tma") -> dict:
    """The TMA online kernels' plan (``variant`` online_tma or online_flat): ONLINE's tile, the
    most programs an SM whose rows in flight fit the L2 share, the latency hint."""
    on = ONLINE
    row_bytes = N * elem_size
    occ = next((o for o in on["OCCUPANCY"] if o * sms * row_bytes <= on["L2_SHARE"] * l2), on["NO_FIT"])
    tile = min(on["TILE"], _pow2_at_least(N)) if variant == "online_tma" else on["TILE"]
    return {"variant": variant, "TILE": tile, "LATENCY": on["LATENCY"][elem_size], "grid": min(M, occ * sms),
            "hints": {"occupancy": occ}}


def split_config(M: int, N: int, sms: int = H200_SMS) -> dict:
    """The split plan: CHUNK columns a unit (see SPLIT), C chunks a row, CP >= C (a power of two:
    the partials' tile), co-resident programs (by the chunk's hints) looping over M x C units."""
    sp = SPLIT
    chunk = sp["CHUNK"]
    while chunk > sp["MIN_CHUNK"] and M * _cdiv(N, chunk) < sp["UNITS_PER_SM"] * sms:
        chunk //= 2
    while _cdiv(N, chunk) > sp["MAX_PARTS"]:
        chunk *= 2
    parts = _cdiv(N, chunk)
    hints = softmax_hints(chunk, chunk)
    return {"variant": "split", "CHUNK": chunk, "C": parts, "CP": _pow2_at_least(parts),
            "grid": min(M * parts, sms * hints.get("occupancy", 1)), "hints": hints}


# stage: an operand whose rows do not start on 16-byte boundaries (K or N elements not a 16-byte
# multiple, or a strided / offset view) is copied once a call into a buffer of 16-byte rows;
# tileiras then loads it through TMA (otherwise 2-byte loads through registers: the
# 16 x 50257 x 768 GEMM read B at a fraction of the bandwidth). A (TR, TC) tile a program.
GEMM_STAGE = {"TR": 8, "TC": 512, "WAVES": 8}


def stage_config(rows: int, cols: int, sms: int = H200_SMS, tiles_more: int = 0) -> dict:
    """The staging copy of a rows x cols operand (``tiles_more``: the other operand's tiles, copied
    in the same launch by stage_pair_kernel)."""
    tiles = _cdiv(rows, GEMM_STAGE["TR"]) * _cdiv(cols, GEMM_STAGE["TC"]) + tiles_more
    return {"TR": GEMM_STAGE["TR"], "TC": GEMM_STAGE["TC"], "grid": max(1, min(tiles, GEMM_STAGE["WAVES"] * sms))}


def stage_pair_config(M: int, N: int, K: int, sms: int = H200_SMS) -> dict:
    """A (M x K) and B (K x N) staged in ONE launch (small): A's tiles, then B's, over one grid."""
    return stage_config(M, K, sms, tiles_more=_cdiv(K, GEMM_STAGE["TR"]) * _cdiv(N, GEMM_STAGE["TC"]))


def rows_16b(K: int, N: int, elem_size: int) -> bool:
    """Whether A's and B's rows (K and N elements) are 16-byte multiples (TMA-loadable)."""
    return (K * elem_size) % 16 == 0 and (N * elem_size) % 16 == 0


def wave_efficiency(tiles: int, sms: int) -> float:
    """The busy fraction of the SMs over the waves ``tiles`` programs take (one program an SM)."""
    return tiles / (_cdiv(tiles, sms) * sms)


def gemm_tile_for(M: int, N: int, sms: int = H200_SMS, tma: bool = True) -> dict:
    """The first (largest: most reuse a byte loaded) GEMM_TILES shape whose C tiles keep the SMs
    at least GEMM_MIN_BUSY busy over their waves; else the busiest (the larger on a tie)."""
    tiles = [t for t in GEMM_TILES if tma or not t["tma"]]
    effs = [wave_efficiency(_cdiv(M, t["TM"]) * _cdiv(N, t["TN"]), sms) for t in tiles]
    for t, e in zip(tiles, effs):
        if e >= GEMM_MIN_BUSY:
            return t
    return tiles[max(range(len(tiles)), key=lambda i: (effs[i], -i))]


def splitk_config(M: int, N: int, K: int, sms: int = H200_SMS, min_split: int = 1, tm: int | None = None,
                  tn: int | None = None) -> dict:
    """The split-K plan: the row tile fitted to M (16..64) and GEMM_SPLITK's TN (or ``tm`` x ``tn``),
    as many slices as one wave of programs holds (SMs x PER_SM over the C tiles) but each at least
    MIN_KTILES K tiles, at least ``min_split`` where K allows, none empty."""
    sk = GEMM_SPLITK
    tm, tn = tm or _row_tile(M), tn or sk["TN"]
    tiles = _cdiv(M, tm) * _cdiv(N, tn)
    k_tiles = _cdiv(K, sk["TK"])
    split = min(sk["MAX_SPLIT"], (sk["PER_SM"] * sms) // tiles, k_tiles // sk["MIN_KTILES"])
    split = max(1, min(k_tiles, max(split, min_split)))
    kper = _cdiv(k_tiles, split)
    split = _cdiv(k_tiles, kper)  # no empty slice
    return {"variant": "splitk", "TM": tm, "TN": tn, "TK": sk["TK"], "KPER": kper, "SPLIT": split,
            "RM": sk["RM"], "RN": sk["RN"], "grid": tiles * split, "hints": {}}


def tiled_config(M: int, N: int, K: int, elem_size: int = 2, sms: int = H200_SMS,
                 tma: bool | None = None, persistent: bool = False) -> dict:
    """The tiled plan: few rows take a row tile fitted to M (16..64) and 128 x 128 K x N tiles;
    otherwise the first GEMM_TILES shape that fills a wave. ``persistent``: one program an SM
    (every tile shape compiles to one program an SM: 168-255 registers x 256-384 threads, 108-231
    KB of shared memory) looping over the tiles in grouped order, so that a program's TMA
    producer loads the next tile's operands while its consumers finish the last one's epilogue."""
    if M <= GEMM_SPLITK["MAX_M"]:
        t = {"TM": _row_tile(M), "TN": 128, "TK": 128, "hints": {}}
    else:
        t = gemm_tile_for(M, N, sms, rows_16b(K, N, elem_size) if tma is None else tma)
    tiles = _cdiv(M, t["TM"]) * _cdiv(N, t["TN"])
    return {"variant": "tiled", "TM": t["TM"], "TN": t["TN"], "TK": t["TK"], "GROUP": GEMM_GROUP,
            "grid": min(tiles, sms) if persistent else tiles, "hints": dict(t["hints"])}


def plan_gemm(M: int, N: int, K: int, elem_size: int = 2, sms: int = H200_SMS,
              a_rows16: bool | None = None, b_rows16: bool | None = None, switches: dict | None = None,
              l2: int = H200_L2) -> dict:
    """split-K for few rows where the C tiles fill less than a wave, else tiled. ``a_rows16`` /
    ``b_rows16``: whether every row of A / B starts on a 16-byte boundary (default: from K and
    N, contiguous operands); with the ``stage`` switch an operand that does not is staged first
    (the tiled or split-K plan on the staged operands, with ``stage``: {operand: its copy's config});
    ``persistent``: the tiled plan's grid (see tiled_config); ``small``: plan_gemm_small's rules
    (``l2``: the L2 bytes its in-place rule reads). ``switches``: default GPU_VERIFIED."""
    sw = _switches(switches)
    a16 = (K * elem_size) % 16 == 0 if a_rows16 is None else a_rows16
    b16 = (N * elem_size) % 16 == 0 if b_rows16 is None else b_rows16
    if sw["small"]:
        return plan_gemm_small(M, N, K, elem_size, sms, a16, b16, l2, stage=sw["stage"], persistent=sw["persistent"])
    stages = {}
    if sw["stage"]:
        if not a16:
            stages["a"] = stage_config(M, K, sms)
        if not b16:
            stages["b"] = stage_config(K, N, sms)
    plan = None
    if M <= GEMM_SPLITK["MAX_M"]:
        sk = splitk_config(M, N, K, sms)
        if sk["SPLIT"] >= 2:  # tiles <= half the slots and K long enough: one wave of slices
            plan = sk
    if plan is None:
        # staged operands load through TMA like aligned ones: the TMA tile shapes are open
        plan = tiled_config(M, N, K, elem_size, sms, tma=True if stages else a16 and b16,
                            persistent=sw["persistent"])
    return {**plan, "stage": stages} if stages else plan


# -- small (on in the default): GEMMs whose C tiles leave SMs idle ----------------------------------
# Rules of the case's facts (docs/performance.md, "cuTile / GEMM + epilogue"):
# 1. A and B both unaligned: one staging launch for the two (stage_pair_kernel), not two.
# 2. tiles: the default's tile (M <= 64: TM = M rounded up to a power of two, 16..64, TK 128;
#    else GEMM_TILES' first that keeps the SMs busy, else the busiest: 64 x 128 x 64 where they
#    are few); where its C tiles fill at most FILL of the SMs, TN is halved (down to MIN_TN)
#    while they do and N has columns for the new tiles: each halving doubles the programs
#    streaming K, each with the same K tiles and half the bytes a K step. Only where TMA loads both
#    operands: the 16 x 64 x 128 tile with element loads spills at one program an SM (sm_90 cubin,
#    1 x 1024 x 33 fp16: 96 bytes a thread).
# 3. M <= 64 (one row tile: the GEMM reads each byte of B once) and B's rows unaligned and B larger
#    than L2: staging B reads and writes B and the GEMM re-reads the copy from HBM (3 |B| bytes
#    against |B|), so B is read in place by INPLACE's skinny tiles (TN 64, TK 64: a 64 x 64 tile of
#    element loads a step; several programs an SM keep loads in flight, as the copy's programs
#    do), where their column tiles fill at least a wave of SMs.
# 4. split-K only where the narrowed tiles of rule 2 still fill at most FILL of the SMs and each
#    slice keeps MIN_KTILES K tiles (GEMM_SPLITK): the slices then fill SMs that would idle;
#    elsewhere a second launch and an fp32 workspace buy nothing narrower tiles do not.
SMALL = {"FILL": 0.5, "MIN_TN": 64}
# the in-place skinny tile; OCCUPANCY: (accumulator elements TM x TN at most, the programs an SM):
# the most whose registers hold the tile without spills (sm_90 cubins: TM 16-32 at 4, 64
# registers a thread; TM 64 spills 88 bytes a thread at 4, none at 2; tests/test_cutile_layer.py
# test_small_plans_compile_without_spills)
INPLACE = {"TN": 64, "TK": 64, "OCCUPANCY": ((32 * 64, 4), (64 * 64, 2))}


def plan_gemm_small(M: int, N: int, K: int, elem_size: int = 2, sms: int = H200_SMS, a16: bool = True,
                    b16: bool = True, l2: int = H200_L2, stage: bool = True, persistent: bool = True) -> dict:
    """The ``small`` switch's plan (the rules above): the GEMM plan, with ``stage`` where operands
    are staged (its keys are the launches: "a", "b", or "ab" for both in one)."""
    inplace = (not b16 and M <= GEMM_SPLITK["MAX_M"] and K * N * elem_size > l2
               and _cdiv(N, INPLACE["TN"]) >= sms)
    tma = _tma_loads(M, K, elem_size, a16, stage) and _tma_loads(K, N, elem_size, b16, stage)
    plan = inplace_config(M, N, K, sms) if inplace else small_tile_config(M, N, K, elem_size, sms, tma, persistent)
    staged = [n for n, ok in (("a", a16), ("b", b16 or inplace)) if stage and not ok]
    if not staged:
        return plan
    if len(staged) == 2:
        return {**plan, "stage": {"ab": stage_pair_config(M, N, K, sms)}}
    return {**plan, "stage": {"a": stage_config(M, K, sms)} if staged == ["a"] else {"b": stage_config(K, N, sms)}}


def _tma_loads(rows: int, cols: int, elem_size: int, rows16: bool, stage: bool) -> bool:
    """Whether the GEMM loads a rows x cols operand through TMA: staged, or rows on 16-byte
    boundaries whose stride tileiras can prove a 16-byte multiple (a single row's stride is its
    length: 1 x 33 fp16 loads element-wise)."""
    if not rows16:
        return stage
    return rows > 1 or (cols * elem_size) % 16 == 0


def small_tile_config(M: int, N: int, K: int, elem_size: int = 2, sms: int = H200_SMS, tma: bool = True,
                      persistent: bool = True) -> dict:
    """Rules 2 and 4: the default's tile, narrowed (``tma``: both operands load through TMA) while
    its C tiles fill at most FILL of the SMs; split-K on that tile only where it still does and
    K holds MIN_KTILES K tiles a slice."""
    sk = GEMM_SPLITK
    if M <= sk["MAX_M"]:
        tm, tn, tk, hints = _row_tile(M), sk["TN"], sk["TK"], {}
    else:
        t = gemm_tile_for(M, N, sms, tma)
        tm, tn, tk, hints = t["TM"], t["TN"], t["TK"], dict(t["hints"])
    tiles = lambda n: _cdiv(M, tm) * _cdiv(N, n)  # noqa: E731
    few = lambda n: tiles(n) <= SMALL["FILL"] * sms  # noqa: E731
    while tma and few(tn) and tn > SMALL["MIN_TN"] and tiles(tn // 2) > tiles(tn):
        tn //= 2
    if few(tn):
        split = splitk_config(M, N, K, sms, tm=tm, tn=tn)
        if split["SPLIT"] >= 2:   # K holds MIN_KTILES K tiles for at least two slices
            return split
    return {"variant": "tiled", "TM": tm, "TN": tn, "TK": tk, "GROUP": GEMM_GROUP,
            "grid": min(tiles(tn), sms) if persistent else tiles(tn), "hints": hints}


def inplace_config(M: int, N: int, K: int, sms: int = H200_SMS) -> dict:
    """Rule 3: the tiled kernel on B in place: TM = M rounded up to a power of two (16..64), INPLACE's
    TN x TK, the occupancy by the accumulator's size, co-resident programs looping over the tiles."""
    tm = _row_tile(M)
    tiles = _cdiv(M, tm) * _cdiv(N, INPLACE["TN"])
    hints = {"occupancy": next(occ for most, occ in INPLACE["OCCUPANCY"] if tm * INPLACE["TN"] <= most)}
    return {"variant": "tiled", "TM": tm, "TN": INPLACE["TN"], "TK": INPLACE["TK"], "GROUP": GEMM_GROUP,
            "grid": min(tiles, hints["occupancy"] * sms), "hints": hints}
