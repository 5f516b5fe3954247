"""The Helion planner: which kernel and which configuration for a case, by rules over facts
(bytes per row, element size, the M class, 16-byte rows), never by a table of shapes.

Every configuration here is a Helion ``Config`` (block sizes, warps, stages, reduction loops, L2
grouping). STATUS: these are reasoned configurations (register and wave arithmetic below), not
yet the autotuner's: ``scripts/tune_helion.py`` runs Helion's autotuner offline on one
representative shape per class below and writes the configurations it chose; they replace the
entries of the tables class by class. The main job never autotunes.
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
    # a whole row in registers: rows of up to 1024 elements share a program (rows_per_program
    # below), warps grow with the row so a thread holds at most 16 fp32 values
    "softmax/rows": dict(num_stages=1, reduction_loops=[None]),
    # long rows: the online kernel, one row a program, 4096-column tiles (16 a thread at 8 warps)
    "softmax/online": dict(block_sizes=[1, 4096, 4096], num_warps=8, num_stages=1),
}
GEMM: dict[str, dict] = {
    # decode-like M (one row tile): a 16-row tile, narrow N tiles so that the B matrix is
    # streamed by more programs than SMs, long K tiles deep in the pipeline
    "gemm/small_m": dict(block_sizes=[16, 64, 128], num_warps=4, num_stages=5, l2_groupings=[1]),
    # M of a few hundred: 64 x 128 tiles, grouped launch order for L2 reuse of B
    "gemm/mid_m": dict(block_sizes=[64, 128, 64], num_warps=4, num_stages=4, l2_groupings=[8]),
    # large M: the classic Hopper Triton tile (128 x 256 x 64, 8 warps, 3 stages)
    "gemm/large_m": dict(block_sizes=[128, 256, 64], num_warps=8, num_stages=3, l2_groupings=[8]),
    # rows of A or B not 16-byte multiples: loads go element by element, their addresses and
    # masks take registers, so the tiles shrink to 128 x 128 (64 x 128) with 32-deep K steps,
    # which ptxas fits without spilling where 128 x 256 x 64 spills
    "gemm/mid_m_unaligned": dict(block_sizes=[64, 128, 32], num_warps=4, num_stages=3, l2_groupings=[8]),
    "gemm/large_m_unaligned": dict(block_sizes=[128, 128, 32], num_warps=8, num_stages=3, l2_groupings=[8]),
}
# split-K for few rows: the partial-sum kernel's (M, N) tile, its K step, and the epilogue's tile;
# the K chunk of a program comes from the rule in plan_gemm_splitk
SPLITK: dict[str, dict] = {
    "gemm/splitk": dict(block_sizes=[16, 64, None, 128], num_warps=4, num_stages=4),
    "gemm/splitk_epilogue": dict(block_sizes=[16, 128], num_warps=4, num_stages=1),
}
SPLITK_WAVES = 2  # programs of the partial-sum kernel: about this many per SM
SPLITK_MIN_K = 1024  # below, a K chunk would be a step or two: the tiled kernel
CONFIGS = {**VECTOR_ADD, **SOFTMAX, **GEMM}  # every class (for scripts/tune_helion.py)

# the longest row (bytes of fp32 work: elements x 4) held in registers at once
ROW_REGISTER_BYTES = 32 * 1024
SMALL_M = 64      # up to one 16..64-row tile: weight-streaming (GEMV-like) GEMMs
LARGE_M = 512     # above: enough row tiles for 128 x 256 tiles to fill the GPU


@dataclass(frozen=True)
class Plan:
    variant: str      # the algorithm word (rows, online, block, tiled)
    kernel: object    # the Helion kernel (runtime sizes)
    config: dict      # the Helion configuration
    rule: str         # the class: a key of VECTOR_ADD, SOFTMAX or GEMM
    epilogue: tuple | None = None  # split-K: (kernel, config) of the epilogue kernel


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def reachable(problem: str) -> tuple[str, ...]:
    """The variants the planner of ``problem`` can choose (``Plan.variant`` of ``plan_*``): the
    default's lines of code count these and only these (harness.planned_sources)."""
    if problem == "vector_add":
        return ("block",)
    if problem == "softmax":
        return ("rows", "online")
    if problem == "gemm_epilogue":
        return ("tiled", "splitk")
    raise ValueError(f"problem: {problem!r} has no Helion planner")


def plan_vector_add(n: int, elem: int) -> Plan:
    key = "vector_add/16bit" if elem <= 2 else "vector_add/32bit"
    return Plan("block", tuned.vector_add, dict(VECTOR_ADD[key]), key)


def plan_softmax(m: int, n: int, elem: int) -> Plan:
    if _pow2(n) * 4 <= ROW_REGISTER_BYTES:
        cfg = dict(SOFTMAX["softmax/rows"])
        width = _pow2(n)
        # about 1024 elements a program: short rows are packed several to a program
        cfg["block_sizes"] = [max(1, min(_pow2(m), 1024 // width))]
        cfg.setdefault("num_warps", 4 if width <= 2048 else 8 if width <= 4096 else 16)
        return Plan("rows", tuned.softmax_rows, cfg, "softmax/rows")
    return Plan("online", tuned.softmax_online, dict(SOFTMAX["softmax/online"]), "softmax/online")


def gemm_class(m: int, aligned: bool = True) -> str:
    """The M class; above SMALL_M, operands whose rows are not 16-byte multiples have their own."""
    if m <= SMALL_M:
        return "gemm/small_m"
    key = "gemm/mid_m" if m <= LARGE_M else "gemm/large_m"
    return key if aligned else key + "_unaligned"


def plan_gemm(m: int, n: int, k: int, elem: int, aligned: bool = True, sms: int = 132) -> Plan:
    """``aligned``: the rows of A and B (and their starts) are 16-byte multiples. Few rows whose
    output tiles leave SMs idle, over a K long enough to cut: split-K."""
    bm, bn = GEMM["gemm/small_m"]["block_sizes"][:2]
    if m <= SMALL_M and k >= SPLITK_MIN_K and -(-m // bm) * -(-n // bn) < sms:
        return plan_gemm_splitk(m, n, k, elem, sms)
    key = gemm_class(m, aligned)
    return Plan("tiled", tuned.gemm_epilogue, dict(GEMM[key]), key)


def plan_gemm_splitk(m: int, n: int, k: int, elem: int, sms: int = 132) -> Plan:
    """K cut into power-of-two chunks so that the partial-sum programs number about
    SPLITK_WAVES per SM; a chunk is at least two K steps."""
    cfg = dict(SPLITK["gemm/splitk"])
    bm, bn, _, bk = cfg["block_sizes"]
    tiles = -(-m // bm) * -(-n // bn)
    splits = max(1, -(-SPLITK_WAVES * sms // tiles))
    chunk = max(2 * bk, _pow2(-(-k // splits)))
    cfg["block_sizes"] = [bm, bn, chunk, bk]
    return Plan("splitk", gemm_epilogue_splitk.gemm_partial_sums, cfg, "gemm/splitk",
                epilogue=(gemm_epilogue_splitk.splitk_epilogue, dict(SPLITK["gemm/splitk_epilogue"])))
