"""The Triton layer's tuning tables and its one planner.

The default implementations (``triton:vector_add``, ``triton:softmax``, ``triton:gemm_epilogue``)
plan once per problem, in ``prepare``: choose the kernel and its configuration by rules on the
shape, the dtype, the alignment and the device (SMs, registers, L2), then bind the grid and the
constexprs (``runtime.bind``), so that a launch is one call of the compiled kernel's launcher.
The rules read bytes per row, waves (tiles / SMs) and alignment, never a list of known shapes;
the numbers they read are the tables below (plain data: a test or a tuning script may replace
an entry; nothing reads an environment variable). ``python -m harness check triton`` times the
alternatives each rule chooses between; the measurements behind each rule are in
docs/performance.md, "Triton / vector add", "Triton / softmax" and "Triton / GEMM + epilogue".

Planning functions come in two layers: ``*_choice(shape facts) -> (variant, config)`` needs no
tensor (``compile_only`` and the grid descriptions use it without a GPU), ``plan_*(tensors) ->
Plan`` adds the tensors' own facts (alignment) and binds the launch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import triton

from . import aligned_frame, device_facts, interpreting, next_pow2

# -- tables ------------------------------------------------------------------------------------
#: vector add: each thread moves ``bytes_per_thread`` bytes of each operand (two 16-byte vectors),
#: ``num_warps`` warps a program; BLOCK follows (1024 fp32, 2048 fp16 / bf16)
VECTOR_ADD = {"bytes_per_thread": 32, "num_warps": 4}

SOFTMAX = {
    # rows kernel (several short rows a program, persistent): rows of at most this many columns
    # (32 lanes x 32 values); from 2048 16-bit columns one program a row in registers (block, 4
    # warps) streams faster than several rows a program (docs/performance.md, "Triton / softmax")
    "rows_max_cols": 1024,
    # a block of about ``rows_tile`` elements (rows x next_pow2(N)), ``rows_values_per_thread``
    # values a thread (so 2 warps), one block a program: the hardware's block scheduler fills
    # the SMs as programs end. A persistent grid (programs looping over blocks, the next block's
    # loads software-pipelined over ``rows_stages`` stages) and larger blocks measured slower
    # over the short-row shapes timed (docs/performance.md, "Triton / softmax")
    "rows_tile": 1024,
    "rows_values_per_thread": 16,
    "rows_persistent": False,
    "rows_stages": 2,
    # rows Triton cannot prove 16-byte aligned (N not a multiple of 16) are addressed from their
    # 16-byte boundary (``triton_src.aligned_frame``) by the rows kernel only up to this many
    # padded columns: it gained where a block holds many short rows and lost where it holds a
    # few long ones, which then stay on 2-byte accesses (docs/performance.md, "Triton / softmax")
    "rows_frame_max_cols": 256,
    # block kernel (one row a program, in registers): up to this many (padded) columns by element
    # size. The registers hold fp32 either way, so a 16-bit row brings half the bytes in flight
    # for the same registers: 16-bit rows above 16384 columns go to split, whose 1-warp chunks
    # keep more rows in flight. A row longer than split's minimum whose padding would leave less
    # than ``block_min_fill`` of the lanes holding data goes to split too: the block kernel's
    # padded lanes cost registers and issue slots, split's chunks waste little
    # (docs/performance.md, "Triton / softmax"). Plain Triton cannot place a row in shared memory: longer rows go to split or
    # online.
    "block_max_cols": {4: 32768, 2: 16384},
    "block_min_fill": 0.9,
    # warps by padded row length: (up to this many columns, warps)
    "block_warps": ((4096, 4), (8192, 8), (32768, 16)),
    # rows longer than the block kernel takes: ``split`` (one read, one write) whenever a row's
    # chunks fit the co-resident grid with room to spare (at most ``split_max_chunks_per_sm`` x
    # SMs chunks a row), else ``online`` (any length; one to two reads), which measured well below
    # split on long rows of every dtype (docs/performance.md, "Triton / softmax")
    "split_max_chunks_per_sm": 2,
    "online_l2_fraction": 0.5,
    "online_block": 8192,
    "online_warps": 16,
    "online_stages": 2,
    "online_max_programs_per_sm": 4,
    # split: fp32 values a thread holds (so chunk / warps is fixed), the chunk range by dtype
    # size, and the smallest fraction of a row's padded lanes that must hold data. (32 values a
    # thread in 16-bit with chunks aligned on 16-byte addresses measured slower and was reverted:
    # docs/performance.md, "Triton / softmax")
    "split_values_per_thread": 64,
    # ... and with the aligned frame: its 128-bit loads and lane-validity masks take more
    # registers a value (fp32 chunk of 2048 at 64 values a thread: 168 registers against 96,
    # so fewer programs - rows in flight - an SM): half as many values a thread
    "split_values_per_thread_framed": 32,
    "split_max_chunk": {4: 16384, 2: 8192},
    "split_min_chunk": 2048,
    "split_min_fill": 0.9,
    # A row of at most this many chunks of split_min_chunk takes that smallest chunk (one warp a
    # program, the most programs - rows in flight - an SM), the best or near it on the long rows
    # timed, most of all in 16-bit (docs/performance.md, "Triton / softmax"). Beyond it each program polls
    # more slots than its warp's lanes cover twice, and the fill rule below chooses.
    "split_small_max_chunks": 64,
    # Few rows: M x C programs (one chunk each) spread unevenly over the SMs (the busiest SM holds
    # ceil(units / SMs) chunks, the mean is units / SMs) take as long as the busiest SM. While the
    # mean is below ``split_balance`` of the busiest, the chunk is halved (more, smaller programs),
    # as long as a row keeps at most ``split_small_max_chunks`` chunks; the GEMM's narrow_balance
    # rule on waves (docs/performance.md, "Triton / softmax")
    "split_balance": 0.9,
    # split's register cap (``maxnreg``): a chunk held in registers limits how many programs -
    # rows in flight - an SM holds. The launch compiles the planned kernel again under the
    # largest cap (a multiple of 8, at least ``split_cap_min_regs``) at which one SM would hold
    # more of its programs, and keeps the capped kernel only if it does hold more and ptxas
    # spills at most ``split_cap_max_spills`` values a thread to local memory (L1-cached; a few
    # more measured slower). A cap is also a hint: ptxas raised a 61-register kernel to 80 under
    # a cap of 80, so it is only ever tried below the uncapped count (docs/performance.md,
    # "Triton / softmax"). False: no cap.
    "split_register_cap": True,
    "split_cap_min_regs": 48,
    "split_cap_max_spills": 2,
}


def _tma(bm, bn, bk, stages, warps, subtile=False, flatten=True, eff=1.0, group=8):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "num_stages": stages,
            "num_warps": warps, "EPILOGUE_SUBTILE": subtile, "FLATTEN": flatten,
            "WARP_SPECIALIZE": False, "eff": eff}


def _tiled(bm, bn, bk, stages, warps, eff=1.0, group=8):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "num_stages": stages,
            "num_warps": warps, "eff": eff}


GEMM = {
    # A tile config's ``eff`` is its throughput per SM relative to the best (the planner's cost of
    # a tile is its FLOPs / eff); the first entry of each list is the large-problem choice.
    # Shared memory a stage: (BM + BN) x BK x 2 bytes; the TMA epilogue's staging buffer BM x BN x 2
    # (halved by EPILOGUE_SUBTILE). No warp-specialised config: with triton 3.6 and 3.9,
    # ``warp_specialize=True`` on sm_90 either leaves the loop unspecialised or fails to compile.
    "tma": [_tma(128, 256, 64, 3, 8, subtile=True), _tma(128, 128, 64, 4, 8, eff=0.88),
            _tma(64, 256, 64, 4, 4, subtile=True, eff=0.8), _tma(64, 128, 64, 4, 4, eff=0.7)],
    "tiled": [_tiled(128, 256, 64, 3, 8), _tiled(128, 128, 64, 4, 4, eff=0.85),
              _tiled(64, 128, 64, 4, 4, eff=0.7)],
    # operands whose rows are not 4-byte aligned (an odd N or K in 16-bit) cannot be copied to
    # shared memory asynchronously (cp.async moves 4, 8 or 16 bytes): their tiles pass through
    # registers in 2-byte loads that the same program waits for before its MMA (load, store to
    # shared memory, barrier, wgmma; the 64-deep K steps spill there). Only another program on
    # the SM overlaps that wait, so the first choice is a one-warpgroup 128 x 128 tile
    "tiled_unaligned": [_tiled(128, 128, 32, 3, 4), _tiled(128, 256, 32, 3, 8, eff=0.45),
                        _tiled(64, 128, 32, 3, 4, eff=0.4)],
    # more than ``narrow_max_m`` rows and such operands: the plain kernel of gemm_epilogue.py
    # (masked pointer loads, 2-d grid, about half the registers) instead: the tiled kernel above,
    # same tile, keeps its unmasked pointer tiles live across the pipeline (255 registers, one
    # program an SM) and measured well below it (docs/performance.md, "Triton / GEMM + epilogue")
    "plain_unaligned": True,
    "plain": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3},
    # ... with fewer 128 x 128 tiles than SMs (one wave, one program an SM), the smallest of these
    # tiles whose grid is still one wave: each SM then runs one program, and the kernel takes one
    # program's time, which shrinks with the tile (its K loop is the same length, each step moves
    # and multiplies BLOCK_M x BLOCK_N less). Same kernel, same one-warpgroup wgmma; no split of K
    # (docs/performance.md, "Triton / GEMM + epilogue")
    "plain_small": ({"BLOCK_M": 64, "BLOCK_N": 128}, {"BLOCK_M": 64, "BLOCK_N": 64}),
    # M at most ``narrow_max_m``: BLOCK_M = M rounded up to a power of two (at least 16), narrow
    # tiles streaming B, K split by the smallest factor that gives every SM a program; unsplit
    # when the tiles alone load the SMs evenly (the busiest SM at most 1 / ``narrow_balance`` of
    # the mean; a single wave that full included). About one program an SM measured best; more
    # splits pay for their partials and an uneven last wave costs more than a split in two
    # (docs/performance.md, "Triton / GEMM + epilogue")
    "narrow_max_m": 64,
    "narrow": {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_stages": 4, "num_warps": 4},
    "narrow_unaligned": {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_stages": 3, "num_warps": 4},
    "narrow_balance": 0.9,
    # split-K: every slice at least this many K tiles, at most this many slices
    "splitk_min_k_steps": 4,
    "splitk_max": 32,
    # the roofline the planner compares tile configs and split factors with (H200, bf16)
    "peak_flops": 700e12,
    "hbm_bytes_per_s": 4.0e12,
    # Operands TMA cannot address (rows not 16-byte multiples: N = 2047, K = 777), more than
    # narrow_max_m rows: staging (a tma plan with "stage" in its config) copies each A or B TMA
    # cannot read into a workspace of 16-byte rows (one launch each, launch_s), then runs the
    # persistent TMA kernel, C stored from registers where TMA cannot write it; taken where that
    # models faster than the pointer kernels. The plain kernel waits for each K step's 2-byte loads before its MMA: its time is
    # rounds of plain_resident programs an SM x K steps x plain_step_s (fits 2048 x 2047 x 2048:
    # 1 round x 64 steps, 105 us; 555 x 1234 x 777: 1 x 25, 37.6 us; 4096 x 50257 x 768: 48 x 24,
    # 1741 us; docs/performance.md, "Triton / GEMM + epilogue"; on the H100 staging took
    # 4096 x 50257 x 768 from 1739 to 780 us, 411 x 733 x 957 from 44.8 to 19.3 us).
    "plain_step_s": 1.6e-6,
    "plain_resident": 2,
    "launch_s": 3e-6,
}

#: programs of the persistent TMA grid under the interpreter (so that its tile loop runs)
INTERPRETER_SMS = 4


@dataclass
class Plan:
    """What a default implementation runs: the variant, its configuration, the bound launch."""
    variant: str
    config: dict
    launch: Callable[[], None]
    facts: dict = field(default_factory=dict)


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ---------
def _src(file: str, kernels: tuple, host: tuple = ("bind_launch",)):
    from kltools.plan import Source
    return (Source(f"triton_src/{file}", kernels=kernels, host=host),)


#: the variants the defaults plan among, by algorithm word: kernel files, entry points and the host
#: entries that bind them ("plain": the twin's kernel, which the GEMM planner launches with a config
#: of its own through ``plain_spec``)
VARIANTS = {
    "vector_add": {"unmasked": _src("vector_add_unmasked.py", ("vector_add_unmasked_kernel",),
                                    ("launch_spec", "bind_launch", "config"))},
    "softmax": {v: _src(f"softmax_{v}.py", (f"softmax_{v}_kernel",)) for v in ("rows", "block", "split", "online")},
    "gemm_epilogue": {"tiled": _src("gemm_epilogue_tiled.py", ("gemm_epilogue_tiled_kernel",)),
                      "tma": _src("gemm_epilogue_tma.py", ("gemm_epilogue_tma_kernel",)),
                      "splitk": _src("gemm_epilogue_splitk.py", ("gemm_splitk_partial_kernel",
                                                                 "gemm_splitk_reduce_kernel")),
                      "plain": _src("gemm_epilogue.py", ("gemm_epilogue_kernel",), ())},
    # the fourth problem's rules are dispatch_attention.py's; "split" only under ATTENTION["split"]
    "attention": {"tma": _src("attention_tma.py", ("attention_tma_kernel",)),
                  "split": _src("attention_split.py", ("attention_split_kernel", "attention_combine_kernel"))},
}

#: staging (docs/DESIGN.md): the copy of the A / B rows TMA cannot read into 16-byte rows, no word of
#: its own; a ``tma`` plan whose config names operands under ``stage`` launches it before the kernel
STAGE = _src("gemm_epilogue_tma.py", ("stage_rows_kernel",), ("bind_staged_launch",))
#: ... and its host alone, for a staged launch that copies nothing (C stored from registers only)
STAGE_HOST = _src("gemm_epilogue_tma.py", (), ("bind_staged_launch",))
#: ... and the TMA kernel it launches (bound by bind_staged_launch, not the unstaged bind_launch)
STAGED_TMA = _src("gemm_epilogue_tma.py", ("gemm_epilogue_tma_kernel",), ())


def facts_of_device(device) -> dict:
    """The device facts the rules read (``device_facts``'s keys) of a ``kltools.plan.Device``."""
    return {"sms": device.sms, "regs_per_sm": device.regs_per_sm, "smem_per_sm": device.smem_per_sm,
            "max_warps_per_sm": device.threads_per_sm // 32, "l2_bytes": device.l2_bytes, "cc": tuple(device.cc)}


def plan(problem: str, facts):
    """The default's plan (``triton:<problem>``) for one case given as ``kltools.plan.Facts``: the
    variant and configuration ``*_choice`` gives (the GPU launch may refine split's: its frame and
    register cap read the tensors and the compiled kernel)."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    dev = facts_of_device(facts.device)
    if problem == "vector_add":
        variant, cfg = vector_add_choice(facts.N, facts.esize)
    elif problem == "softmax":
        variant, cfg = softmax_choice(facts.M, facts.N, facts.esize, dev)
    elif problem == "attention":
        from .dispatch_attention import attention_choice
        variant, cfg = attention_choice(facts.B, facts.Hq, facts.Sq, facts.Sk, facts.D, facts.esize, dev)
    else:
        from . import gemm_epilogue_tiled, gemm_epilogue_tma
        a, b, out = facts.meta("a"), facts.meta("b"), facts.meta("out")
        bias = facts.meta("bias") if "bias" in facts.operands else None
        vec = gemm_epilogue_tiled.vec_facts(a, b, bias, out)
        copies = gemm_copies(a, b)
        variant, cfg = gemm_choice(facts.M, facts.N, facts.K, gemm_epilogue_tma.check(a, b, out) is None, dev,
                                   gemm_aligned(facts.esize, vec["K_VEC"], vec["N_VEC"]), copies)
        if "stage" in cfg:   # the staged launch; its copy kernel where it copies an operand
            return make_plan(problem, variant, VARIANTS, cfg,
                             sources=(STAGE if cfg["stage"] else STAGE_HOST) + STAGED_TMA)
    return make_plan(problem, variant, VARIANTS, cfg)


# -- vector add --------------------------------------------------------------------------------
def vector_add_choice(n: int, elem_size: int) -> tuple[str, dict]:
    from . import vector_add_unmasked as V
    return "unmasked", V.config(n, elem_size, VECTOR_ADD["bytes_per_thread"], VECTOR_ADD["num_warps"])


def plan_vector_add(x, y, out) -> Plan:
    from . import vector_add_unmasked as V
    variant, cfg = vector_add_choice(x.numel(), x.element_size())
    return Plan(variant, cfg, V.bind_launch(x, y, out, cfg))


# -- softmax -----------------------------------------------------------------------------------
def softmax_block_config(N: int, elem_size: int) -> dict:
    from . import softmax_block as B
    cols = max(16, next_pow2(N))
    table = SOFTMAX["block_warps"]
    return B.config(N, next((w for c, w in table if cols <= c), table[-1][1]))


def softmax_rows_config(N: int, elem_size: int) -> dict:
    from . import softmax_rows as R
    cfg = R.config(N, SOFTMAX["rows_tile"], SOFTMAX["rows_values_per_thread"], SOFTMAX["rows_stages"],
                   SOFTMAX["rows_persistent"])
    cfg["FRAME"] = cfg["BLOCK_N"] <= SOFTMAX["rows_frame_max_cols"]
    return cfg


def softmax_online_config(M: int, N: int, elem_size: int, facts: dict) -> dict:
    """Programs: one an SM, more while L2 still holds every row in flight (``online_l2_fraction``)."""
    from . import softmax_online as O
    row_bytes = N * elem_size
    per_sm = int(SOFTMAX["online_l2_fraction"] * facts["l2_bytes"] // (facts["sms"] * row_bytes))
    per_sm = max(1, min(SOFTMAX["online_max_programs_per_sm"], per_sm))
    return O.config(N, SOFTMAX["online_block"], SOFTMAX["online_warps"], SOFTMAX["online_stages"],
                    facts["sms"] * per_sm)


def split_warps(chunk: int, elem_size: int = 4, framed: bool = False) -> int:
    per_thread = SOFTMAX["split_values_per_thread_framed" if framed else "split_values_per_thread"]
    return max(1, min(32, chunk // (32 * per_thread)))


def split_register_cap(uncapped: dict, num_warps: int, facts: dict, capped: dict | None = None) -> int | None:
    """The register cap (``maxnreg``) the split kernel launches with, from the facts of its
    compiled kernel (``regs``, ``spills`` in values a thread, ``per_sm`` programs an SM, ``smem``
    bytes): with ``uncapped`` alone, the cap worth compiling and trying (the largest multiple of 8
    below the uncapped registers at which an SM holds more programs of ``num_warps`` warps), or
    None; with ``capped`` too (that kernel's facts), the cap if it holds more programs an SM with
    at most ``split_cap_max_spills`` spills, else None."""
    from types import SimpleNamespace

    from .runtime import programs_per_sm
    if not SOFTMAX["split_register_cap"]:
        return None
    if capped is not None:
        ok = capped["spills"] <= SOFTMAX["split_cap_max_spills"] and capped["per_sm"] > uncapped["per_sm"]
        return capped["regs_cap"] if ok else None
    cap = (uncapped["regs"] - 1) // 8 * 8
    while cap >= SOFTMAX["split_cap_min_regs"]:
        kernel = SimpleNamespace(n_regs=cap, metadata=SimpleNamespace(shared=uncapped.get("smem", 0)),
                                 function=None)
        if programs_per_sm(kernel, num_warps, facts) > uncapped["per_sm"]:
            return cap
        cap -= 8
    return None


def split_register_cap_of(compiled_facts: Callable[[int | None], dict], num_warps: int,
                          facts: dict) -> int | None:
    """``split_register_cap`` run end to end: ``compiled_facts(cap)`` gives the facts of the
    kernel compiled under ``cap`` (None: uncapped); the capped kernel is compiled only where the
    rule proposes a cap. The GPU launch (compiled kernels) and compile-only (ptxas) both call it."""
    uncapped = compiled_facts(None)
    cap = split_register_cap(uncapped, num_warps, facts)
    if cap is None:
        return None
    return split_register_cap(uncapped, num_warps, facts, compiled_facts(cap))


def softmax_split_config(M: int, N: int, elem_size: int, facts: dict, framed: bool = False) -> dict:
    """CHUNK: ``split_min_chunk`` for rows of at most ``split_small_max_chunks`` such chunks; else
    the largest power of two (dtype's range) whose padded lanes are at least ``split_min_fill``
    data (else the fullest), halved while M rows x C chunks leave SMs idle. ``framed``: the rows
    will be addressed from their 16-byte boundary (``aligned_frame``), which sets the warps."""
    from . import softmax_split as S
    lo, hi = SOFTMAX["split_min_chunk"], SOFTMAX["split_max_chunk"][elem_size]
    if triton.cdiv(N, lo) <= SOFTMAX["split_small_max_chunks"]:
        return S.config(N, lo, split_warps(lo, elem_size, framed))
    sizes = [hi >> i for i in range(hi.bit_length()) if hi >> i >= lo]
    fill = {c: N / (triton.cdiv(N, c) * c) for c in sizes}
    chunk = next((c for c in sizes if fill[c] >= SOFTMAX["split_min_fill"]), max(sizes, key=fill.get))
    sms = facts["sms"]
    while chunk > lo and M * triton.cdiv(N, chunk) < sms:
        chunk //= 2
    while (chunk > lo and not _even(M * triton.cdiv(N, chunk), sms, SOFTMAX["split_balance"])
           and triton.cdiv(N, chunk // 2) <= SOFTMAX["split_small_max_chunks"]):
        chunk //= 2
    return S.config(N, chunk, split_warps(chunk, elem_size, framed))


def _even(units: int, sms: int, balance: float) -> bool:
    """Whether ``units`` equal programs load ``sms`` SMs evenly: the mean share at least
    ``balance`` of the busiest SM's (ceil(units / sms)); one full wave or more of them counts."""
    return units / sms >= balance * -(-units // sms)


def with_split_register_cap(x, out, cfg: dict, facts: dict) -> dict:
    """``cfg`` for these tensors with its frame (``softmax_split.with_frame``) and ``MAXNREG``: as
    given when the key is there (0 or None: no cap), else what ``split_register_cap_of`` decides
    from the kernel compiled without and with the cap (``softmax_split.compiled_facts``; on the
    GPU only: the decision reads the compiled kernels' registers and spills)."""
    from . import softmax_split as S
    cfg = S.with_frame(cfg, x, out)
    if "MAXNREG" in cfg or interpreting() or x.device.type != "cuda":
        return cfg
    cap = split_register_cap_of(lambda c: S.compiled_facts(x, out, dict(cfg, MAXNREG=c)), cfg["num_warps"], facts)
    return dict(cfg, MAXNREG=cap)


def softmax_split_config_for(x, out, facts: dict) -> dict:
    """``softmax_split_config`` for these tensors, the frame included (``VEC``) when
    ``aligned_frame`` addresses their rows, and on the GPU the register cap
    (``with_split_register_cap``): the default's plan, the variant and the compile-only specs all
    take it from here, and the config they report is the one the launch binds."""
    M, N = x.shape
    cfg = softmax_split_config(M, N, x.element_size(), facts, framed=bool(aligned_frame(x, out)))
    return with_split_register_cap(x, out, cfg, facts)


def softmax_choice(M: int, N: int, elem_size: int, facts: dict | None = None) -> tuple[str, dict]:
    """The variant (rows, block, split or online) and its configuration for M rows of N columns:
    rows of at most ``rows_max_cols`` several a program; ``block`` (the row in one program's
    registers) where the row fits its registers (unless its padding wastes lanes and split can
    take it), ``split`` over co-resident programs, and ``online`` for rows too long for the
    co-resident grid to hold all their chunks."""
    from .softmax_split import MIN_N
    facts = facts or device_facts()
    cols = max(16, next_pow2(N))
    if N <= SOFTMAX["rows_max_cols"]:
        return "rows", softmax_rows_config(N, elem_size)
    fill = N / cols
    if cols <= SOFTMAX["block_max_cols"][elem_size] and (N < MIN_N or fill >= SOFTMAX["block_min_fill"]):
        return "block", softmax_block_config(N, elem_size)
    split = softmax_split_config(M, N, elem_size, facts)
    if split["C"] > SOFTMAX["split_max_chunks_per_sm"] * facts["sms"]:
        return "online", softmax_online_config(M, N, elem_size, facts)
    return "split", split


def plan_softmax(x, out) -> Plan:
    from . import softmax_block, softmax_online, softmax_rows, softmax_split
    M, N = x.shape
    facts = device_facts(x.device)
    variant, cfg = softmax_choice(M, N, x.element_size(), facts)
    if variant == "split":
        cfg = softmax_split_config_for(x, out, facts)
        try:
            launch = softmax_split.bind_launch(x, out, cfg)
            return Plan(variant, launch.config, launch)
        except softmax_split.TooFewPrograms:   # the device holds fewer programs than a row has chunks
            variant, cfg = "online", softmax_online_config(M, N, x.element_size(), facts)
    binder = {"rows": softmax_rows, "block": softmax_block, "online": softmax_online,
              "split": softmax_split}[variant].bind_launch
    launch = binder(x, out, cfg)
    return Plan(variant, getattr(launch, "config", None) or cfg, launch)   # what the launch binds


# -- GEMM + epilogue ---------------------------------------------------------------------------
def _waves(units: int, sms: int) -> int:
    return -(-units // sms)


def _gemm_time(M, N, K, cfg: dict, split: int, sms: int) -> float:
    """Seconds the roofline model gives ``cfg`` with K cut in ``split``: whole waves of tiles at
    the tile's share of peak (the last wave costs as much as a full one), or the HBM floor of A, B
    and C, whichever is longer; plus the fp32 workspace written and read when split > 1."""
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    units = triton.cdiv(M, bm) * triton.cdiv(N, bn) * split
    per_sm = GEMM["peak_flops"] / sms * cfg["eff"]
    t_tiles = _waves(units, sms) * 2.0 * bm * bn * triton.cdiv(K, split) / per_sm
    t_mem = 2.0 * (M * K + K * N + M * N) / GEMM["hbm_bytes_per_s"]
    t_ws = (2 * 4.0 * split * M * N / GEMM["hbm_bytes_per_s"]) if split > 1 else 0.0
    return max(t_tiles, t_mem) + t_ws


def _split_choices(K: int, block_k: int) -> list[int]:
    steps = triton.cdiv(K, block_k)
    top = max(1, min(GEMM["splitk_max"], steps // GEMM["splitk_min_k_steps"]))
    return list(range(1, top + 1))


def gemm_smem(cfg: dict) -> int:
    """Shared memory a GEMM config's pipelined loop holds at most: ``num_stages`` A and B tiles of
    16-bit values, plus the TMA epilogue's staging tile (halved by EPILOGUE_SUBTILE)."""
    s = cfg["num_stages"] * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2
    if "EPILOGUE_SUBTILE" in cfg:
        s += cfg["BLOCK_M"] * cfg["BLOCK_N"] * 2 // (2 if cfg["EPILOGUE_SUBTILE"] else 1)
    return s


def fitted(cfg: dict, facts: dict) -> dict | None:
    """``cfg`` as the device's shared memory holds it (an SM's less the 1 KB the system keeps a
    program): its stages lowered down to 2 where needed, None when even 2 do not fit. Every table
    entry fits an H100 / H200 as it is; 100 KB GPUs (RTX 4090, RTX 5090) take fewer stages or
    smaller tiles."""
    limit = facts.get("smem_per_sm", 233472) - 1024
    c = dict(cfg)
    while gemm_smem(c) > limit and c["num_stages"] > 2:
        c["num_stages"] -= 1
    return c if gemm_smem(c) <= limit else None


def gemm_table(name: str, facts: dict) -> list[dict]:
    """The entries of ``GEMM[name]`` the device holds (``fitted``), in table order."""
    return [c for c in (fitted(cfg, facts) for cfg in GEMM[name]) if c is not None]


def tma_available(facts: dict) -> bool:
    """TMA descriptors (sm_90 and newer) and a TMA tile config that fits the device."""
    return tuple(facts.get("cc", (9, 0))) >= (9, 0) and bool(gemm_table("tma", facts))


def gemm_narrow_config(M: int, N: int, K: int, facts: dict, aligned: bool = True) -> dict:
    """Few rows: BLOCK_M = M rounded up (>= 16), narrow tiles over N; K unsplit (the tiled kernel
    writes C directly) when the tiles load the SMs evenly (tiles / SMs at least ``narrow_balance``
    of its rounding up: one wave at least that full counts), else split by the smallest factor S
    with tiles x S >= SMs."""
    cfg = {**GEMM["narrow" if aligned else "narrow_unaligned"], "BLOCK_M": max(16, next_pow2(M)), "eff": 1.0}
    cfg = fitted(cfg, facts) or cfg
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    sms = facts["sms"]
    even = _even(tiles, sms, GEMM["narrow_balance"])
    splits = _split_choices(K, cfg["BLOCK_K"])
    cfg["SPLIT"] = 1 if even else next((s for s in splits if s > 1 and tiles * s >= sms), splits[-1])
    return cfg


def gemm_plain_config(M: int, N: int, facts: dict) -> dict:
    """The plain kernel's config: ``GEMM["plain"]``; where its grid is under one wave (fewer tiles
    than SMs), the smallest ``plain_small`` tile whose grid still is (one program an SM: the
    kernel takes one program's time, and a smaller tile's program does less work)."""
    cfg = fitted(GEMM["plain"], facts) or dict(GEMM["plain"])
    sms = facts["sms"]

    def tiles(c):
        return triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"])
    if tiles(cfg) < sms:
        for small in GEMM["plain_small"]:
            c = {**cfg, **small}
            if tiles(c) <= sms:
                cfg = c
    return cfg


def gemm_tma_config(M: int, N: int, K: int, facts: dict) -> dict:
    return min(gemm_table("tma", facts) or GEMM["tma"], key=lambda c: _gemm_time(M, N, K, c, 1, facts["sms"]))


def gemm_tiled_config(M: int, N: int, K: int, facts: dict, aligned: bool = True) -> dict:
    table = gemm_table("tiled" if aligned else "tiled_unaligned", facts)
    return min(table, key=lambda c: _gemm_time(M, N, K, c, 1, facts["sms"]))


def gemm_aligned(elem_size: int, k_vec: int, n_vec: int) -> bool:
    """Whether the A and B rows allow asynchronous copies (4-byte aligned at least)."""
    return min(k_vec, n_vec) * elem_size >= 4


def gemm_splitk_config(M: int, N: int, K: int, facts: dict, aligned: bool = True) -> dict:
    """The split-K config the model prefers (narrow tiles for few rows)."""
    if M <= GEMM["narrow_max_m"]:
        cfg = gemm_narrow_config(M, N, K, facts, aligned)
        return cfg if cfg["SPLIT"] > 1 else {**cfg, "SPLIT": min(2, _split_choices(K, cfg["BLOCK_K"])[-1])}
    table = gemm_table("tiled" if aligned else "tiled_unaligned", facts)
    best = min(((c, s) for c in table for s in _split_choices(K, c["BLOCK_K"])[1:] or [1]),
               key=lambda cs: _gemm_time(M, N, K, cs[0], cs[1], facts["sms"]))
    return {**best[0], "SPLIT": best[1]}


def gemm_copies(a, b) -> dict:
    """{operand: element count} of the A / B a staged TMA launch copies (rows TMA cannot read)."""
    from .gemm_epilogue_tma import tma_readable
    return {n: t.numel() for n, t in (("a", a), ("b", b)) if not tma_readable(t)}


def gemm_choice(M: int, N: int, K: int, tma_ok: bool, facts: dict | None = None,
                aligned: bool = True, copies: dict | None = None) -> tuple[str, dict]:
    """tiled, tma, splitk or plain, and the config. Few rows: narrow tiles, split-K when the
    tiles alone leave SMs idle. Otherwise the roofline model picks among the tile configs (TMA ones
    when the operands allow TMA, else the pointer kernel's: shorter K steps when rows are not
    4-byte aligned, see GEMM) and split factors; with ``copies`` ({operand: element count} of the
    operands a staged TMA launch copies, ``gemm_copies``; None: no TMA here) the TMA kernel on
    staged operands where it models faster: "tma" with ``stage`` (the copied operands' names) in
    its config."""
    G = GEMM
    facts = facts or device_facts()
    tma_ok = tma_ok and tma_available(facts)
    if M <= GEMM["narrow_max_m"]:
        cfg = gemm_narrow_config(M, N, K, facts, aligned)
        return ("splitk" if cfg["SPLIT"] > 1 else "tiled"), cfg
    variant, cfg = _gemm_unstaged(M, N, K, tma_ok, facts, aligned)
    if tma_ok or copies is None or not tma_available(facts):
        return variant, cfg
    sms = facts["sms"]
    if variant == "plain":
        programs = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
        t_now = _waves(programs, sms * G["plain_resident"]) * triton.cdiv(K, cfg["BLOCK_K"]) * G["plain_step_s"]
    else:
        t_now = _gemm_time(M, N, K, cfg, cfg.get("SPLIT", 1), sms)
    tma = gemm_tma_config(M, N, K, facts)
    t_stage = _gemm_time(M, N, K, tma, 1, sms) + sum(4.0 * n / G["hbm_bytes_per_s"] + G["launch_s"]
                                                      for n in copies.values())
    return ("tma", dict(tma, stage=list(copies))) if t_stage < t_now else (variant, cfg)


def _gemm_unstaged(M: int, N: int, K: int, tma_ok: bool, facts: dict, aligned: bool) -> tuple[str, dict]:
    """gemm_choice above narrow_max_m rows, no staging: plain, tma, tiled or splitk."""
    sms = facts["sms"]
    if not tma_ok and not aligned and GEMM["plain_unaligned"]:
        # rows no async copy can take: the plain kernel (masked pointer loads every K step, a 2-d
        # grid whose consecutive programs share a B column panel), the fastest measured there
        return "plain", gemm_plain_config(M, N, facts)
    kind = "tma" if tma_ok else "tiled"
    table = gemm_table(kind if tma_ok or aligned else "tiled_unaligned", facts)
    options = [(kind, c, 1) for c in table]
    pointer = gemm_table("tiled" if aligned else "tiled_unaligned", facts)
    options += [("splitk", c, s) for c in pointer for s in _split_choices(K, c["BLOCK_K"])[1:]]
    variant, cfg, split = min(options, key=lambda o: _gemm_time(M, N, K, o[1], o[2], sms))
    return variant, ({**cfg, "SPLIT": split} if variant == "splitk" else dict(cfg))


def plain_spec(a, b, bias, act: str, out, cfg: dict | None = None):
    """The launch of the plain kernel (the teaching twin's, gemm_epilogue.py) with ``cfg``."""
    from .gemm_epilogue import gemm_epilogue_kernel
    from .gemm_epilogue_tiled import pointer_args
    from .runtime import Spec
    cfg = cfg or GEMM["plain"]
    grid = (triton.cdiv(a.shape[0], cfg["BLOCK_M"]), triton.cdiv(b.shape[1], cfg["BLOCK_N"]))
    args = pointer_args(a, b, bias, act, out, cfg)
    return Spec(gemm_epilogue_kernel, grid, args,
                {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})


def plan_gemm(a, b, bias, act: str, out) -> Plan:
    """The default's plan."""
    from . import gemm_epilogue_splitk, gemm_epilogue_tiled, gemm_epilogue_tma
    M, K = a.shape
    N = b.shape[1]
    facts = device_facts(a.device)
    tma_ok = gemm_epilogue_tma.check(a, b, out) is None
    vec = gemm_epilogue_tiled.vec_facts(a, b, bias, out)
    variant, cfg = gemm_choice(M, N, K, tma_ok, facts, gemm_aligned(a.element_size(), vec["K_VEC"], vec["N_VEC"]),
                               gemm_copies(a, b))
    sms = INTERPRETER_SMS if interpreting() else facts["sms"]
    if variant == "plain":
        from .runtime import bind_spec
        return Plan(variant, cfg, bind_spec(plain_spec(a, b, bias, act, out, cfg), a.device))
    if variant == "tma" and "stage" in cfg:   # operands TMA cannot address: staged, C from registers
        return Plan(variant, cfg, gemm_epilogue_tma.bind_staged_launch(a, b, bias, act, out, cfg, sms))
    if variant == "tma":
        launch = gemm_epilogue_tma.bind_launch(a, b, bias, act, out, cfg, sms)
    elif variant == "splitk":
        launch = gemm_epilogue_splitk.bind_launch(a, b, bias, act, out, cfg)
    else:
        launch = gemm_epilogue_tiled.bind_launch(a, b, bias, act, out, cfg)
    return Plan(variant, cfg, launch)
