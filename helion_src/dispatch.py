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

Switches (below, each with its reason): VECTOR_ADD_PIECES, SOFTMAX_NEXT and GEMM_NEXT (on; the
last two since 2026-12-06, each rule kept where it won when timed against the default and the
verify suite PASSed: docs/performance.md, "Helion / softmax", "Helion / GEMM + epilogue").
``plan_softmax_next`` is ``plan_softmax`` with few long rows split and long rows in the aligned
frame; ``plan_gemm_next`` is ``plan_gemm`` plus one row tile of pow2(M) rows for 16 < M <= SMALL_M.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import frame   # torch only

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
    # online kernels up to the longest row it holds (ROW_ELEMENTS), python -m harness check helion
    "softmax/rows": dict(num_stages=1, reduction_loops=[None]),
    # longer rows: the online kernel, one row a program, 4096-column tiles (16 a thread at 8
    # warps); it read the row twice and beat the looped kernel's three passes on the H200
    "softmax/online": dict(block_sizes=[1, 4096, 4096], num_warps=8, num_stages=1),
}
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
# split-K (the variant helion:gemm_epilogue_splitk, no planner of the default picks it): the
# partial-sum kernel's (M, N) tile and its K step (the chunk, a power of two, comes from the rule
# in splitk_chunk), and the epilogue's tile (it adds the chunks'
# partial sums in a fixed order: the result does not depend on which program ends first)
SPLITK: dict[str, dict] = {
    "gemm/splitk": dict(block_sizes=[128, 128, None, 64], num_warps=8, num_stages=3),
    "gemm/splitk_epilogue": dict(block_sizes=[32, 128], reduction_loops=[None], num_warps=4, num_stages=1),
}
SPLITK_MAX_CHUNKS = 8    # the workspace (chunks x M x N fp32) stays a few times the output
SPLITK_MIN_K = 1024      # K of a split at least this (the partial sum's store amortised over it)
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

# -- the rules of plan_softmax_next, plan_gemm_next: on since the GPU run of 2026-12-06 ---------
SOFTMAX_NEXT = True
GEMM_NEXT = True
SOFTMAX_FRAME: dict[str, dict] = {
    # the frame kernels (helion_src/frame.py: 16-byte accesses on any row; packed short rows in
    # the frame lost to plan_softmax's rows kernel and left: docs/performance.md, "Helion / softmax")
    # longer rows, one a program: the online kernel over 4096-position tiles, 8 warps
    "softmax/online_frame": dict(block_sizes=[1, 4096, 4096], num_warps=8, num_stages=1),
    # few long rows: the split kernels, each program a chunk of 4096-position tiles
    "softmax/split": dict(block_sizes=[4096], num_warps=8, num_stages=1),
}
SPLIT_WAVES = 4          # split rows when one program a row gives fewer than this many per SM ...
SPLIT_MIN_BYTES = 32768  # ... into chunks of at least this many bytes of the row
# few rows (plan_gemm_next): one row tile of the next power of two (16..64) rows, so that B is
# streamed once (16-row tiles at M = 64 re-stream each B strip 4 times)
SMALL_M_TILE = dict(block_sizes=[None, 64, 128], num_warps=4, num_stages=4, l2_groupings=[1])


@dataclass(frozen=True)
class KernelRef:
    """A Helion kernel named by its module (under helion_src) and attribute, imported on first use:
    the kernel modules import helion (seconds), planning must not. ``runs``: for tuned.py's kernels,
    the twin module whose same-named function the kernel runs; else the kernel's own function."""
    module: str
    name: str
    runs: str | None = None

    def source(self) -> tuple[str, str]:
        """(file, function) of the code the kernel runs, known without the import."""
        return (f"{self.runs}.py", self.runs) if self.runs else (f"{self.module}.py", self.name)

    def get(self):
        from importlib import import_module
        return getattr(import_module(f"{__package__}.{self.module}"), self.name)


# the default's kernels: tuned.py's runtime-size kernels of the twins' functions, the attention kernel
TUNED_VECTOR_ADD = KernelRef("tuned", "vector_add", runs="vector_add")
TUNED_SOFTMAX_ROWS = KernelRef("tuned", "softmax_rows", runs="softmax")
TUNED_SOFTMAX_ONLINE = KernelRef("tuned", "softmax_online", runs="softmax_online")
TUNED_GEMM = KernelRef("tuned", "gemm_epilogue", runs="gemm_epilogue")
ATTENTION_TMA = KernelRef("attention_tma", "attention_tma")
# the variants' kernels (their modules import helion as well)
SOFTMAX_FRAME_ONLINE = KernelRef("softmax_online_frame", "softmax_online_frame")
SOFTMAX_SPLIT_STATS = KernelRef("softmax_split", "softmax_split_stats")
SOFTMAX_SPLIT_NORM = KernelRef("softmax_split", "softmax_split_norm")
GEMM_PARTIAL_SUMS = KernelRef("gemm_epilogue_splitk", "gemm_partial_sums")
GEMM_SPLITK_EPILOGUE = KernelRef("gemm_epilogue_splitk", "splitk_epilogue")


@dataclass(frozen=True)
class Plan:
    variant: str      # the algorithm word (rows, online, split, block, tiled, splitk)
    ref: object       # the Helion kernel (runtime sizes), or a KernelRef to it
    config: dict      # the Helion configuration
    rule: str         # the class: a key of VECTOR_ADD, SOFTMAX, GEMM or the pending tables
    epilogue: tuple | None = None  # split-K / split: (kernel, config) of the second kernel
    # vector add: the index ranges launched one after the other (None: one launch over all)
    pieces: tuple[tuple[int, int], ...] | None = None
    frame: dict | None = None      # the aligned frame's kernels (frame.py): their other arguments

    @property
    def kernel(self):
        """The Helion kernel itself (imports its module, and helion, on first use)."""
        return _resolve(self.ref)

    @property
    def epilogue_kernel(self):
        """The second kernel of a split / split-K plan, itself."""
        return _resolve(self.epilogue[0])


def _resolve(kernel):
    return kernel.get() if isinstance(kernel, KernelRef) else kernel


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ----------
def _src(file: str, *kernels: str):
    from kltools.plan import Source
    return tuple(Source(f"helion_src/{file}", kernels=(k,)) for k in kernels)


#: the variants the defaults plan among, by algorithm word: the kernel files and functions (the
#: adapter, backends/helion_layer.py, binds every plan: Helion compiles and launches the kernel);
#: the pending rules (SOFTMAX_NEXT) launch the frame kernels under the same words, and split
VARIANTS = {
    "vector_add": {"block": _src("vector_add.py", "vector_add")},
    "softmax": {"rows": _src("softmax.py", "softmax"), "online": _src("softmax_online.py", "softmax_online"),
                "split": _src("softmax_split.py", "softmax_split_stats", "softmax_split_norm")},
    "gemm_epilogue": {"tiled": _src("gemm_epilogue.py", "gemm_epilogue"),
                      "splitk": _src("gemm_epilogue_splitk.py", "gemm_partial_sums", "splitk_epilogue")},
    # the fourth problem's rules are dispatch_attention.py's
    "attention": {"tma": _src("attention_tma.py", "attention_tma")},
}


def _kernel_source(kernel):
    """The file and function of a Helion kernel (its ``fn``), as a ``Source``."""
    import inspect
    from pathlib import Path

    from kltools.plan import Source
    if isinstance(kernel, KernelRef):
        file, fn = kernel.source()
        return Source(f"helion_src/{file}", kernels=(fn,))
    fn = getattr(kernel, "fn", kernel)
    path = Path(inspect.getsourcefile(fn)).resolve().relative_to(Path(__file__).resolve().parent.parent)
    return Source(path.as_posix(), kernels=(fn.__name__,))


def plan(problem: str, facts):
    """The default's plan (``helion:<problem>``) for one case given as ``kltools.plan.Facts``: the
    planner the switches select now (``softmax_planner``, ``gemm_planner``), its class, Helion
    configuration and the kernels it launches."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    if problem == "vector_add":
        p = plan_vector_add(facts.N, facts.esize)
    elif problem == "softmax":
        planner = softmax_planner()
        extra = ({"framed": frame.frame_args(facts.meta("x"), facts.meta("out")) is not None, "sms": facts.device.sms}
                 if planner is plan_softmax_next else {})
        p = planner(facts.M, facts.N, facts.esize, **extra)
    elif problem == "gemm_epilogue":
        # rows of A and B on 16-byte boundaries: each row stride and start (one row included)
        aligned = all(o.strides[0] * facts.esize % 16 == 0 and o.addr16 == 0
                      for o in (facts.operands["a"], facts.operands["b"]))
        p = gemm_planner()(facts.M, facts.N, facts.K, facts.esize, aligned=aligned, sms=facts.device.sms)
    else:
        aligned = all(o.addr16 % 16 == 0 for o in facts.operands.values())   # q, k, v, out start on 16 bytes
        p = plan_attention(facts.B, facts.Hq, facts.Sq, facts.D, facts.esize, facts.device.sms,
                           facts.device.smem_per_sm, aligned=aligned)
    cfg = {"rule": p.rule, "config": dict(p.config)}
    if p.pieces:
        cfg["pieces"] = [list(r) for r in p.pieces]
    kernels = (p.ref,) + ((p.epilogue[0],) if p.epilogue else ())
    return make_plan(problem, p.variant, VARIANTS, cfg, why=p.rule, sources=tuple(_kernel_source(k) for k in kernels))


def plan_attention(B: int, Hq: int, Sq: int, D: int, elem: int, sms: int = 132, smem_per_sm: int = 233472,
                   aligned: bool = True, A=None) -> Plan:
    """The attention default's plan: the ``tma`` kernel with dispatch_attention.py's configuration."""
    from . import dispatch_attention
    cfg = dispatch_attention.attention_config(B, Hq, Sq, D, elem, sms, smem_per_sm, aligned, A)
    return Plan("tma", ATTENTION_TMA, cfg, f"attention/tma_{cfg['block_sizes'][0]}")


def softmax_planner(pending: bool = False):
    """The softmax planner the default calls (the switch read at each call; ``pending``: the
    candidate ``helion:softmax_next`` a new pending rule registers, the switch taken as on)."""
    return plan_softmax_next if SOFTMAX_NEXT or pending else plan_softmax


def gemm_planner(pending: bool = False):
    """The GEMM planner the default calls (as ``softmax_planner``)."""
    return plan_gemm_next if GEMM_NEXT or pending else plan_gemm


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
    return Plan("block", TUNED_VECTOR_ADD, cfg, key, pieces=vector_add_pieces(n, cfg["block_sizes"][0]))


def plan_softmax(m: int, n: int, elem: int) -> Plan:
    """Whole rows in registers up to ROW_ELEMENTS columns, else the online kernel."""
    width = _pow2(n)
    if width <= ROW_ELEMENTS:
        cfg = dict(SOFTMAX["softmax/rows"])
        # about 1024 elements a program: short rows are packed several to a program
        cfg["block_sizes"] = [max(1, min(_pow2(m), 1024 // width))]
        cfg.setdefault("num_warps", min(32, max(4, width // 512)))
        return Plan("rows", TUNED_SOFTMAX_ROWS, cfg, "softmax/rows")
    return Plan("online", TUNED_SOFTMAX_ONLINE, dict(SOFTMAX["softmax/online"]), "softmax/online")


def split_chunks(m: int, n: int, elem: int, sms: int = 132) -> int:
    """Chunks a row is split into: 1 where one program a row already gives SPLIT_WAVES programs
    an SM, else as many as bring the programs to that count, each at least SPLIT_MIN_BYTES."""
    want = -(-SPLIT_WAVES * sms // m)
    return max(1, min(want, n * elem // SPLIT_MIN_BYTES))


def plan_softmax_next(m: int, n: int, elem: int, framed: bool = True, sms: int = 132) -> Plan:
    """``framed``: x and out admit the aligned frame (``frame.frame_args``), else plan_softmax.
    Few long rows: ``split``; rows of up to ROW_ELEMENTS positions: plan_softmax's ``rows``;
    longer: ``online`` in the frame, one row a program."""
    if not framed:
        return plan_softmax(m, n, elem)
    v = 16 // elem
    span = frame.frame_width(n, v)
    chunks = split_chunks(m, n, elem, sms)
    if chunks > 1:
        cfg = dict(SOFTMAX_FRAME["softmax/split"])
        tile = min(cfg["block_sizes"][0], _pow2(span))
        per = -(-span // chunks)
        cols = -(-per // tile) * tile   # positions a chunk: whole column tiles
        cfg["block_sizes"] = [tile]
        chunking = {"chunk_groups": cols // v, "chunks": -(-span // cols)}
        return Plan("split", SOFTMAX_SPLIT_STATS, cfg, "softmax/split",
                    epilogue=(SOFTMAX_SPLIT_NORM, dict(cfg)), frame=chunking)
    if _pow2(span) <= ROW_ELEMENTS:
        return plan_softmax(m, n, elem)
    return Plan("online", SOFTMAX_FRAME_ONLINE, dict(SOFTMAX_FRAME["softmax/online_frame"]),
                "softmax/online_frame", frame={})


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


def plan_gemm(m: int, n: int, k: int, elem: int, aligned: bool = True, sms: int = 132) -> Plan:
    """``aligned``: the rows of A and B (and their starts) are 16-byte multiples."""
    key = gemm_class(m, n, aligned, sms)
    return Plan("tiled", TUNED_GEMM, dict(GEMM[key]), key)


def _tiles(m: int, n: int, cfg: dict) -> int:
    bm, bn = cfg["block_sizes"][:2]
    return -(-m // bm) * -(-n // bn)


def splitk_chunk(m: int, n: int, k: int, cfg: dict, sms: int = 132) -> int | None:
    """The K chunk of split-K for the tile ``cfg``, or None (no split). Split only where the
    tiles are fewer than FILL of the SMs: into as many splits as the idle SMs allow
    (SMs // tiles, at most SPLITK_MAX_CHUNKS), the chunk the power of two that K / splits rounds
    up to, at least SPLITK_MIN_K and a multiple of the K step; None where that leaves one chunk."""
    tiles = _tiles(m, n, cfg)
    if tiles >= FILL * sms:
        return None
    splits = min(SPLITK_MAX_CHUNKS, sms // tiles)
    chunk = max(SPLITK_MIN_K, _pow2(-(-k // max(1, splits))), cfg["block_sizes"][-1])
    return chunk if -(-k // chunk) >= 2 else None


def plan_gemm_next(m: int, n: int, k: int, elem: int, aligned: bool = True, sms: int = 132) -> Plan:
    """``plan_gemm``'s plan, except for more rows than the small-M tile's and up to SMALL_M: one
    row tile (SMALL_M_TILE, the next power of two rows), so that B, the large operand, is
    streamed once (at 16 rows the small-M tile, whose deeper pipeline won: docs/performance.md,
    "Helion / GEMM + epilogue")."""
    if m > SMALL_M or _pow2(m) <= GEMM["gemm/small_m"]["block_sizes"][0]:
        return plan_gemm(m, n, k, elem, aligned, sms)
    cfg = dict(SMALL_M_TILE)
    cfg["block_sizes"] = [max(16, _pow2(m)), *cfg["block_sizes"][1:]]
    return Plan("tiled", TUNED_GEMM, cfg, "gemm/small_m_next")


def plan_gemm_splitk(m: int, n: int, k: int, elem: int, sms: int = 132) -> Plan:
    """The variant ``helion:gemm_epilogue_splitk``: split-K with SPLITK's tiles, the K chunk
    ``splitk_chunk``'s, or where it finds none, the shortest chunk it allows that still splits K
    (the variant's own id takes every case)."""
    cfg = dict(SPLITK["gemm/splitk"])
    bm, bn, _, bk = cfg["block_sizes"]
    plain = {"block_sizes": [bm, bn, bk]}
    chunk = splitk_chunk(m, n, k, plain, sms) or max(SPLITK_MIN_K, min(_pow2(k), _pow2(-(-k // 2))))
    cfg["block_sizes"] = [bm, bn, chunk, bk]
    return Plan("splitk", GEMM_PARTIAL_SUMS, cfg, "gemm/splitk",
                epilogue=(GEMM_SPLITK_EPILOGUE, dict(SPLITK["gemm/splitk_epilogue"])))
