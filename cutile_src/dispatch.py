"""cuTile planner: one rule per problem over facts of the case (bytes per row, tiles against the
SMs, K per tile), choosing a variant and its configuration; the tables are plain data.

Planning is one-way: this module imports the variants and reads facts; no variant imports it.
Every plan is a dict: ``variant``, the kernel's constants, ``hints`` (cuTile kernel hints:
``occupancy``, ``num_worker_warps``) and, where the kernel has one, ``grid``.
"""
from __future__ import annotations

from dataclasses import dataclass

H200_SMS = 132

# Variants the default may route to only once they PASSed the verify suite on the H200 (and beat
# what they replace there). They are written, compile for sm_90 here (tests/test_cutile_layer.py
# checks their SASS) and are registered as their own ids (cutile:gemm_epilogue_pack,
# cutile:softmax_online_flat, cutile:softmax_rows_tma, cutile:softmax_online_tma), but have not
# yet run on a GPU: scripts/gpu_cutile.py verifies and times them; flip an entry to True when it
# has passed there (the default's plan, and so its lines of code, follow).
GPU_VERIFIED = {"pack": False, "online_flat": False, "rows_tma": False, "online_tma": False}

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
# online: a program a row, the most co-resident programs (occupancy 4: the 2048-column tile and
# its two running tiles fit 64 registers a thread). A grid capped so that the rows in flight fit
# L2 (pass 2 re-reads them) was slower on the H200 than more programs in flight.
ONLINE_HINTS = {"occupancy": 4}


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


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ----------
def _src(file: str, kernels: tuple, host: tuple = ("bind_launch",)):
    from kltools.plan import Source
    return (Source(f"cutile_src/{file}", kernels=kernels, host=host),)


#: the variants the defaults plan among, by algorithm word: kernel files, entry points and the host
#: entries that bind them (the adapter, backends/cutile_layer.py, adds the compiler hints)
VARIANTS = {
    "vector_add": {"unmasked": _src("vector_add_unmasked.py", ("vector_add_unmasked_kernel",))},
    "softmax": {"rows": _src("softmax_rows.py", ("softmax_rows_kernel",)),
                "online": _src("softmax_online.py", ("softmax_online_kernel",)),
                "online_flat": _src("softmax_online_flat.py", ("softmax_online_flat_kernel",),
                                    ("flat_ok", "flat_args", "bind_launch")),
                "rows_tma": _src("softmax_rows_tma.py", ("softmax_rows_tma_kernel",)),
                "online_tma": _src("softmax_online_tma.py", ("softmax_online_tma_kernel",))},
    "gemm_epilogue": {"tiled": _src("gemm_epilogue_tiled.py", ("gemm_epilogue_tiled_kernel",)),
                      "splitk": _src("gemm_epilogue_splitk.py", ("gemm_splitk_partial_kernel",
                                                                 "gemm_splitk_reduce_kernel"), ("workspace", "bind_launch")),
                      "pack": _src("gemm_epilogue_pack.py", ("pack_rows_kernel",), ("packed_buffer", "bind_pack"))},
}


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
    variant and configuration of ``plan_*`` (a packing plan launches the pack kernel, then the
    tiled or split-K GEMM it wraps)."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    es, sms, ops = facts.esize, facts.device.sms, facts.operands
    if problem == "vector_add":
        return make_plan(problem, "unmasked", VARIANTS, plan_vector_add(facts.N, es))
    if problem == "softmax":
        contiguous = all(_contiguous(ops[n]) and ops[n].addr16 == 0 for n in ("x", "out"))
        cfg = plan_softmax(facts.M, facts.N, es, sms, contiguous=contiguous)
        return make_plan(problem, cfg["variant"], VARIANTS, cfg)
    cfg = plan_gemm(facts.M, facts.N, facts.K, es, sms, a_rows16=ops["a"].rows16(es), b_rows16=ops["b"].rows16(es))
    if cfg["variant"] != "pack":
        return make_plan(problem, cfg["variant"], VARIANTS, cfg)
    words = VARIANTS[problem]
    return make_plan(problem, "pack", VARIANTS, cfg, sources=words["pack"] + words[cfg["GEMM"]["variant"]])


def plan_vector_add(n: int, elem_size: int) -> dict:
    tile = VECTOR_ADD_TILE.get(elem_size, 2048)
    return {"variant": "unmasked", "TILE": tile, "grid": _cdiv(n, tile), "hints": {}}


def plan_softmax(M: int, N: int, elem_size: int, sms: int = H200_SMS, contiguous: bool = False,
                 flat: bool | None = None, tma: bool | None = None) -> dict:
    """rows while a row rounds up to ROW_TILE_MAX columns, else online. Online is flat (aligned
    tiles of the contiguous rows as one vector, ``softmax_online_flat``) where x and out are
    contiguous (and 16-byte aligned) and a row's bytes are not a 16-byte multiple (the 2-d
    kernels read such rows in element-wide loads); ``flat`` allows it. ``tma``: the rows and
    online kernels that mask the columns past N by index (TMA loads) instead of by the load's
    -inf padding (register loads). Both default to what GPU_VERIFIED says."""
    tn = _pow2_at_least(N)
    if tn <= SOFTMAX["ROW_TILE_MAX"]:
        rows = 1
        while rows * 2 * tn <= SOFTMAX["ROWS_TILE_ELEMS"] and rows * 2 <= SOFTMAX["ROWS_MAX"]:
            rows *= 2
        rows = min(rows, _pow2_at_least(M))
        hints = softmax_hints(rows * tn, tn)
        grid = min(_cdiv(M, rows), sms * hints.get("occupancy", 1))  # co-resident programs, looping
        use_tma = GPU_VERIFIED["rows_tma"] if tma is None else tma
        return {"variant": "rows_tma" if use_tma else "rows", "ROWS": rows, "TN": tn, "grid": grid, "hints": hints}
    allow = GPU_VERIFIED["online_flat"] if flat is None else flat
    if allow and contiguous and (N * elem_size) % 16 != 0:
        return online_flat_config(M)
    tile = min(SOFTMAX["ONLINE_TILE"], tn)
    use_tma = GPU_VERIFIED["online_tma"] if tma is None else tma
    return {"variant": "online_tma" if use_tma else "online", "TILE": tile, "grid": M, "hints": dict(ONLINE_HINTS)}


def online_flat_config(M: int) -> dict:
    """The flat kernel: ONLINE_TILE-element tiles whatever N (a tile may hold the ends of two
    rows; masks split it), a program a row, the online kernel's hints."""
    return {"variant": "online_flat", "TILE": SOFTMAX["ONLINE_TILE"], "grid": M, "hints": dict(ONLINE_HINTS)}


# pack: an operand whose rows do not start on 16-byte boundaries (K or N elements not a 16-byte
# multiple, or a strided / offset view) is copied once a call into a buffer of 16-byte rows;
# tileiras then loads it through TMA (otherwise 2-byte loads through registers: the
# 16 x 50257 x 768 GEMM read B at a fraction of the bandwidth). A (TR, TC) tile a program.
GEMM_PACK = {"TR": 8, "TC": 512, "WAVES": 8}


def pack_config(rows: int, cols: int, sms: int = H200_SMS) -> dict:
    tiles = _cdiv(rows, GEMM_PACK["TR"]) * _cdiv(cols, GEMM_PACK["TC"])
    return {"TR": GEMM_PACK["TR"], "TC": GEMM_PACK["TC"], "grid": max(1, min(tiles, GEMM_PACK["WAVES"] * sms))}


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


def splitk_config(M: int, N: int, K: int, sms: int = H200_SMS, min_split: int = 1) -> dict:
    """The split-K plan: the row tile fitted to M (16..64), as many slices as one wave of
    programs holds (SMs x PER_SM over the C tiles) but each at least MIN_KTILES K tiles, at least
    ``min_split`` where K allows, none empty."""
    sk = GEMM_SPLITK
    tm = min(64, max(16, _pow2_at_least(M)))
    tiles = _cdiv(M, tm) * _cdiv(N, sk["TN"])
    k_tiles = _cdiv(K, sk["TK"])
    split = min(sk["MAX_SPLIT"], (sk["PER_SM"] * sms) // tiles, k_tiles // sk["MIN_KTILES"])
    split = max(1, min(k_tiles, max(split, min_split)))
    kper = _cdiv(k_tiles, split)
    split = _cdiv(k_tiles, kper)  # no empty slice
    return {"variant": "splitk", "TM": tm, "TN": sk["TN"], "TK": sk["TK"], "KPER": kper, "SPLIT": split,
            "RM": sk["RM"], "RN": sk["RN"], "grid": tiles * split, "hints": {}}


def tiled_config(M: int, N: int, K: int, elem_size: int = 2, sms: int = H200_SMS,
                 tma: bool | None = None) -> dict:
    """The tiled plan: few rows take a row tile fitted to M (16..64) and 128 x 128 K x N tiles;
    otherwise the first GEMM_TILES shape that fills a wave."""
    if M <= GEMM_SPLITK["MAX_M"]:
        t = {"TM": min(64, max(16, _pow2_at_least(M))), "TN": 128, "TK": 128, "hints": {}}
    else:
        t = gemm_tile_for(M, N, sms, rows_16b(K, N, elem_size) if tma is None else tma)
    tiles = _cdiv(M, t["TM"]) * _cdiv(N, t["TN"])
    return {"variant": "tiled", "TM": t["TM"], "TN": t["TN"], "TK": t["TK"], "GROUP": GEMM_GROUP,
            "grid": tiles, "hints": dict(t["hints"])}


def plan_gemm(M: int, N: int, K: int, elem_size: int = 2, sms: int = H200_SMS,
              a_rows16: bool | None = None, b_rows16: bool | None = None, pack: bool | None = None) -> dict:
    """split-K for few rows where the C tiles fill less than a wave, else tiled. ``a_rows16`` /
    ``b_rows16``: whether every row of A / B starts on a 16-byte boundary (default: from K and
    N, contiguous operands); an operand that does not is packed first (``pack``: the variant
    "pack", whose ``GEMM`` is the tiled or split-K plan on the packed operands) where ``pack``
    allows it (default: once GPU_VERIFIED says so)."""
    a16 = (K * elem_size) % 16 == 0 if a_rows16 is None else a_rows16
    b16 = (N * elem_size) % 16 == 0 if b_rows16 is None else b_rows16
    packs = {}
    if GPU_VERIFIED["pack"] if pack is None else pack:
        if not a16:
            packs["a"] = pack_config(M, K, sms)
        if not b16:
            packs["b"] = pack_config(K, N, sms)
    plan = None
    if M <= GEMM_SPLITK["MAX_M"]:
        sk = splitk_config(M, N, K, sms)
        if sk["SPLIT"] >= 2:  # tiles <= half the slots and K long enough: one wave of slices
            plan = sk
    if plan is None:
        # packed operands load through TMA like aligned ones: the TMA tile shapes are open
        plan = tiled_config(M, N, K, elem_size, sms, tma=True if packs else None)
    if packs:
        return {"variant": "pack", "PACK": packs, "GEMM": plan}
    return plan
