"""The Helion planner: which kernel and which configuration for a case, by rules over facts
(row length, element size, the number of rows, output tiles against the SMs, 16-byte rows), never
by a table of shapes.

Every configuration here is a Helion ``Config`` (block sizes, warps, stages, reduction loops, L2
grouping). STATUS: reasoned configurations (register and wave arithmetic, comments by each),
checked on the H200: ``scripts/tune_helion.py`` runs Helion's own autotuner offline on one
representative shape per class (seeded with the entry here) and writes the configuration it chose
and its time beside this one's; an entry is replaced where the autotuner's choice is faster. In
the first bounded run (seconds per class) its choices were slower than these, so these stay.
The main job never autotunes.

Switches (below, each with its reason): VECTOR_ADD_PIECES (on), SPLITK_FEW_TILES and
ONLINE_PERSISTENT (off until ``scripts/gpu_helion.py`` has verified and timed them on a GPU; the
CPU tests verify them under the Triton interpreter).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import gemm_epilogue_splitk, tuned

# Plain data: the configuration of each shape class (the rules below name the class).
VECTOR_ADD: dict[str, dict] = {
    # 8 KiB of each operand per program (16 elements a thread over 8 warps: two 16-byte
    # vectors for 16-bit types), few enough programs that launch and tail cost little
    "vector_add/16bit": dict(block_sizes=[4096], num_warps=8, num_stages=1),
    "vector_add/32bit": dict(block_sizes=[2048], num_warps=8, num_stages=1),
}
SOFTMAX: dict[str, dict] = {
    # a whole row in registers, read once: rows of up to 1024 elements share a program, warps grow
    # with the row (one warp per 512 columns, 4 to 32); on the H200 this beat the looped and the
    # online kernels up to the longest row it holds (ROW_ELEMENTS), scripts/gpu_helion.py
    "softmax/rows": dict(num_stages=1, reduction_loops=[None]),
    # longer rows: the online kernel, one row a program, 4096-column tiles (16 a thread at 8
    # warps); it read the row twice and beat the looped kernel's three passes on the H200
    "softmax/online": dict(block_sizes=[1, 4096, 4096], num_warps=8, num_stages=1),
}
SOFTMAX_PERSISTENT: dict[str, dict] = {
    # the online kernel on a persistent grid (Helion's pid_type): programs loop over rows, so the
    # rows in flight (programs x row bytes) are bounded and the write pass re-reads its row from
    # L2, not HBM; the first pass's loads are kept in L2 (evict_last), the second's not
    "softmax/online_persistent": dict(block_sizes=[1, 8192, 8192], num_warps=16, num_stages=1,
                                      pid_type="persistent_interleaved",
                                      load_eviction_policies=["last", "first"]),
}
# long rows take softmax/online_persistent: off until it has run on a GPU (scripts/gpu_helion.py
# verifies it and times it against softmax/online); verified under the Triton interpreter only
ONLINE_PERSISTENT = False
L2_BYTES = 50 * 2 ** 20    # the H200's L2: rows in flight are kept within L2_FRACTION of it
L2_FRACTION = 0.5
GEMM: dict[str, dict] = {
    # decode-like M (one row tile): a 16-row tile, narrow N tiles so that the B matrix is
    # streamed by more programs than SMs, long K tiles deep in the pipeline (split-K, the variant,
    # was faster on some few-row shapes only and gave wrong sums at some chunk sizes on the H200,
    # cause not found: few rows stay on this tile)
    "gemm/small_m": dict(block_sizes=[16, 64, 128], num_warps=4, num_stages=5, l2_groupings=[1]),
    # more rows: the widest tile whose tiles still fill the SMs (plan_gemm); the classic Hopper
    # Triton tile first (128 x 256 x 64, 8 warps, 3 stages: level with torch on a large square
    # GEMM on the H200, where Helion's autotuner under a bounded budget picked slower tiles),
    # then 128 x 128 and 64 x 128 for fewer output tiles; grouped launch order for L2 reuse
    "gemm/128x256": dict(block_sizes=[128, 256, 64], num_warps=8, num_stages=3, l2_groupings=[8]),
    "gemm/128x128": dict(block_sizes=[128, 128, 64], num_warps=8, num_stages=4, l2_groupings=[8]),
    "gemm/64x128": dict(block_sizes=[64, 128, 64], num_warps=4, num_stages=4, l2_groupings=[8]),
    # rows of A or B not 16-byte multiples: loads go element by element, their addresses and
    # masks take registers, so the tiles shrink to 128 x 128 (64 x 128) with 32-deep K steps,
    # which ptxas fits without spilling where 128 x 256 x 64 spills
    "gemm/128x128_unaligned": dict(block_sizes=[128, 128, 32], num_warps=8, num_stages=3, l2_groupings=[8]),
    "gemm/64x128_unaligned": dict(block_sizes=[64, 128, 32], num_warps=4, num_stages=3, l2_groupings=[8]),
}
# the tiles plan_gemm tries for more than SMALL_M rows, widest first
WIDE_TILES = ("gemm/128x256", "gemm/128x128", "gemm/64x128")
WIDE_TILES_UNALIGNED = ("gemm/128x128_unaligned", "gemm/64x128_unaligned")
FILL = 0.9  # a tile is taken when its output tiles number at least this many waves of SMs
# split-K for few output tiles: the partial-sum kernel's (M, N) tile and its K step (the chunk, a
# power of two, comes from the rule in splitk_chunk), and the epilogue's tile (it adds the chunks'
# partial sums in a fixed order: the result does not depend on which program ends first)
SPLITK: dict[str, dict] = {
    "gemm/splitk": dict(block_sizes=[128, 128, None, 64], num_warps=8, num_stages=3),
    "gemm/splitk_epilogue": dict(block_sizes=[32, 128], reduction_loops=[None], num_warps=4, num_stages=1),
}
SPLITK_MIN_CHUNK = 1024  # K of a chunk at least this: each program amortises its tile's epilogue
# the planner takes split-K for few output tiles: off until the deterministic split-K has run on a
# GPU (scripts/gpu_helion.py verifies and times it against the tiled kernel); the interpreter
# verifies it on the CPU (tests/test_helion_layer.py)
SPLITK_FEW_TILES = False
SPLITK_MAX_CHUNKS = 8    # the workspace (chunks x M x N fp32) stays a few times the output
CONFIGS = {**VECTOR_ADD, **SOFTMAX, **GEMM}  # every class (for scripts/tune_helion.py)

DIVISIBILITY = 16  # Triton specialises an integer argument as a multiple of 16 (or of nothing)
# vector add of a length not a multiple of 16 as body + tail (vector_add_pieces): on, because both
# launches are the kernel and configuration that PASSed on the H200, each in a specialisation it
# ran there (a length that is a multiple of 16; a short odd one), and the sm_90 PTX shows the body
# with 16-byte accesses where the one launch had 2-byte ones (not yet timed on a GPU)
VECTOR_ADD_PIECES = True
# the longest row held in registers (power of two): 32 fp32 values a thread over 32 warps
ROW_ELEMENTS = 32768
SMALL_M = 64      # up to one 16..64-row tile: weight-streaming (GEMV-like) GEMMs


@dataclass(frozen=True)
class Plan:
    variant: str      # the algorithm word (rows, online, block, tiled)
    kernel: object    # the Helion kernel (runtime sizes)
    config: dict      # the Helion configuration
    rule: str         # the class: a key of VECTOR_ADD, SOFTMAX or GEMM
    epilogue: tuple | None = None  # split-K: (kernel, config) of the epilogue kernel
    # vector add: the index ranges launched one after the other (None: one launch over all)
    pieces: tuple[tuple[int, int], ...] | None = None


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ----------
def _src(file: str, *kernels: str):
    from kltools.plan import Source
    return tuple(Source(f"helion_src/{file}", kernels=(k,)) for k in kernels)


#: the variants the defaults plan among, by algorithm word: the kernel files and functions (the
#: adapter, backends/helion_layer.py, binds every plan: Helion compiles and launches the kernel)
VARIANTS = {
    "vector_add": {"block": _src("vector_add.py", "vector_add")},
    "softmax": {"rows": _src("softmax.py", "softmax"), "online": _src("softmax_online.py", "softmax_online")},
    "gemm_epilogue": {"tiled": _src("gemm_epilogue.py", "gemm_epilogue"),
                      "splitk": _src("gemm_epilogue_splitk.py", "gemm_partial_sums", "splitk_epilogue")},
}


def plan(problem: str, facts):
    """The default's plan (``helion:<problem>``) for one case given as ``kltools.plan.Facts``: the
    planner the switches select now (``softmax_planner``, ``gemm_planner``), its class and Helion
    configuration."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    if problem == "vector_add":
        p = plan_vector_add(facts.N, facts.esize)
    elif problem == "softmax":
        p = softmax_planner()(facts.M, facts.N, facts.esize)
    else:
        # rows of A and B on 16-byte boundaries: each row stride and start (one row included)
        aligned = all(o.strides[0] * facts.esize % 16 == 0 and o.addr16 == 0
                      for o in (facts.operands["a"], facts.operands["b"]))
        p = gemm_planner()(facts.M, facts.N, facts.K, facts.esize, aligned=aligned, sms=facts.device.sms)
    cfg = {"rule": p.rule, "config": dict(p.config)}
    if p.pieces:
        cfg["pieces"] = [list(r) for r in p.pieces]
    return make_plan(problem, p.variant, VARIANTS, cfg, why=p.rule)


def vector_add_pieces(n: int, block: int) -> tuple[tuple[int, int], ...] | None:
    """A load is only as wide as its mask is provably constant: Triton knows ``i < n`` constant
    over 16 lanes only when the length ``n`` is specialised as a multiple of 16. Any other length
    (an odd N) makes every access of every program one element wide. So such a length is launched
    as a body of whole blocks (a multiple of 16: full-width accesses where the pointers are 16-byte
    aligned, and the body's end keeps the tail's start as aligned as the tensor's) and a tail of
    less than one block (one masked program). Lengths that are multiples of 16, or shorter than a
    block, stay one launch."""
    if not VECTOR_ADD_PIECES or n % DIVISIBILITY == 0 or n < block:
        return None
    body = n - n % block
    return ((0, body), (body, n))


def plan_vector_add(n: int, elem: int) -> Plan:
    key = "vector_add/16bit" if elem <= 2 else "vector_add/32bit"
    cfg = dict(VECTOR_ADD[key])
    return Plan("block", tuned.vector_add, cfg, key, pieces=vector_add_pieces(n, cfg["block_sizes"][0]))


def plan_softmax(m: int, n: int, elem: int) -> Plan:
    width = _pow2(n)
    if width <= ROW_ELEMENTS:
        cfg = dict(SOFTMAX["softmax/rows"])
        # about 1024 elements a program: short rows are packed several to a program
        cfg["block_sizes"] = [max(1, min(_pow2(m), 1024 // width))]
        cfg.setdefault("num_warps", min(32, max(4, width // 512)))
        return Plan("rows", tuned.softmax_rows, cfg, "softmax/rows")
    return Plan("online", tuned.softmax_online, dict(SOFTMAX["softmax/online"]), "softmax/online")


def plan_softmax_persistent(m: int, n: int, elem: int) -> Plan:
    """plan_softmax with the long rows on the persistent grid (the planner when ONLINE_PERSISTENT
    is on: ``softmax_planner``)."""
    plan = plan_softmax(m, n, elem)
    if plan.variant != "online":
        return plan
    return Plan("online", tuned.softmax_online, online_persistent_config(n, elem), "softmax/online_persistent")


def online_persistent_config(n: int, elem: int, sms: int = 132) -> dict:
    """Programs per SM (Helion's num_sm_multiplier: 1, 2, 4) as many as keep every row in flight
    within L2_FRACTION of L2; column tiles no longer than the padded row."""
    cfg = dict(SOFTMAX_PERSISTENT["softmax/online_persistent"])
    per_sm = int(L2_FRACTION * L2_BYTES // (sms * n * elem))
    cfg["num_sm_multiplier"] = 4 if per_sm >= 4 else 2 if per_sm >= 2 else 1
    tile = min(cfg["block_sizes"][1], _pow2(n))
    cfg["block_sizes"] = [1, tile, tile]
    return cfg


def gemm_class(m: int, n: int = 1 << 16, aligned: bool = True, sms: int = 132) -> str:
    """Few rows: the small-M tile. Otherwise the widest tile (of the aligned or unaligned set)
    whose output tiles fill FILL of the SMs, else the narrowest of the set."""
    if m <= SMALL_M:
        return "gemm/small_m"
    keys = WIDE_TILES if aligned else WIDE_TILES_UNALIGNED
    for key in keys:
        bm, bn = GEMM[key]["block_sizes"][:2]
        if -(-m // bm) * -(-n // bn) >= FILL * sms:
            return key
    return keys[-1]


def splitk_chunk(m: int, n: int, k: int, sms: int = 132) -> int | None:
    """The K chunk of split-K, or None (no split): when the split-K tile's output tiles are fewer
    than FILL of the SMs, the longest power-of-two chunk whose programs (tiles x chunks) fill them,
    at least SPLITK_MIN_CHUNK long and at most SPLITK_MAX_CHUNKS chunks; None where no such chunk
    splits K or the tiles already fill the SMs."""
    bm, bn = SPLITK["gemm/splitk"]["block_sizes"][:2]
    tiles = -(-m // bm) * -(-n // bn)
    if tiles >= FILL * sms:
        return None
    chunk = _pow2(k) // 2
    while chunk >= SPLITK_MIN_CHUNK:
        chunks = -(-k // chunk)
        if chunks > SPLITK_MAX_CHUNKS:
            return None
        if tiles * chunks >= FILL * sms:
            return chunk
        chunk //= 2
    return None


def plan_gemm_or_splitk(m: int, n: int, k: int, elem: int, aligned: bool = True, sms: int = 132) -> Plan:
    """plan_gemm, but split-K for more than SMALL_M rows of aligned operands whose split-K tiles
    leave SMs idle, where a chunk exists (the planner when SPLITK_FEW_TILES is on: ``gemm_planner``)."""
    if aligned and m > SMALL_M and splitk_chunk(m, n, k, sms) is not None:
        return plan_gemm_splitk(m, n, k, elem, sms)
    return plan_gemm(m, n, k, elem, aligned, sms)


def softmax_planner():
    """The softmax planner the default calls (the switch read at each call)."""
    return plan_softmax_persistent if ONLINE_PERSISTENT else plan_softmax


def gemm_planner():
    """The GEMM planner the default calls (the switch read at each call)."""
    return plan_gemm_or_splitk if SPLITK_FEW_TILES else plan_gemm


def plan_gemm(m: int, n: int, k: int, elem: int, aligned: bool = True, sms: int = 132) -> Plan:
    """``aligned``: the rows of A and B (and their starts) are 16-byte multiples."""
    key = gemm_class(m, n, aligned, sms)
    return Plan("tiled", tuned.gemm_epilogue, dict(GEMM[key]), key)


def plan_gemm_splitk(m: int, n: int, k: int, elem: int, sms: int = 132) -> Plan:
    """Split-K at the chunk of ``splitk_chunk`` (or, where it finds none, the shortest chunk it
    allows: the variant's own id takes every case)."""
    cfg = dict(SPLITK["gemm/splitk"])
    chunk = splitk_chunk(m, n, k, sms) or max(SPLITK_MIN_CHUNK, min(_pow2(k), _pow2(-(-k // 2))))
    bm, bn, _, bk = cfg["block_sizes"]
    cfg["block_sizes"] = [bm, bn, chunk, bk]
    return Plan("splitk", gemm_epilogue_splitk.gemm_partial_sums, cfg, "gemm/splitk",
                epilogue=(gemm_epilogue_splitk.splitk_epilogue, dict(SPLITK["gemm/splitk_epilogue"])))
