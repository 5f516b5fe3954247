"""The Gluon layer's tables and its one planner.

The defaults (``gluon:vector_add``, ``gluon:softmax``, ``gluon:gemm_epilogue``) plan once per case
in ``prepare``: the variant and its configuration by rules over bytes per row, the rows against
the SMs, waves of tiles, alignment and the device's shared memory, never a list of shapes. The
numbers the rules read are the tables below (plain data). ``*_choice`` needs no tensor (the
compile-only mode uses it); ``plan_*`` adds the tensors' own facts (alignment) and binds.
"""
from __future__ import annotations

from contextlib import contextmanager

import triton

from . import device_facts, next_pow2, pow2_divisor
from . import gemm_epilogue_splitk as gemm_splitk
from . import gemm_epilogue_tiled as gemm_tiled
from . import gemm_epilogue_tma as gemm_tma
from . import softmax_block, softmax_online, softmax_rows, softmax_smem, softmax_split, softmax_split_smem
from . import vector_add_unmasked
from .runtime import Plan, bind, bind_all


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ---------
def _src(file: str, kernels: tuple, host: tuple = ("launch_spec",)):
    from kltools.plan import Source
    return (Source(f"gluon_src/{file}", kernels=kernels, host=host),)


#: the variants the defaults plan among, by algorithm word: kernel files, entry points and the host
#: entries that bind them (``plan_*`` below bind every plan: the runtime's ``bind``/``bind_all``)
VARIANTS = {
    "vector_add": {"unmasked": _src("vector_add_unmasked.py", ("vector_add_unmasked_kernel",), ("launch_spec", "config"))},
    "softmax": {"rows": _src("softmax_rows.py", ("softmax_rows_kernel",)),
                "block": _src("softmax_block.py", ("softmax_block_kernel",)),
                "smem": _src("softmax_smem.py", ("softmax_smem_kernel",), ("bind_launch", "launch_spec")),
                "split": _src("softmax_split.py", ("softmax_split_partial_kernel", "softmax_split_write_kernel"),
                              ("launch_specs", "workspace")),
                "online": _src("softmax_online.py", ("softmax_online_kernel",)),
                "split_smem": _src("softmax_split_smem.py", ("softmax_split_smem_kernel", "_issue"),
                                   ("bind_launch", "launch_spec", "grid_for", "programs_per_sm"))},
    "gemm_epilogue": {"tma": _src("gemm_epilogue_tma.py", ("gemm_epilogue_tma_kernel", "tile_coords"),
                                  ("launch_spec", "check")),
                      "tiled": _src("gemm_epilogue_tiled.py", ("gemm_epilogue_tiled_kernel",), ("launch_spec", "vec_facts")),
                      "splitk": _src("gemm_epilogue_splitk.py", ("gemm_splitk_partial_kernel", "gemm_splitk_reduce_kernel"),
                                     ("launch_specs", "workspace", "slices"))},
    # the fourth problem's rules are dispatch_attention.py's
    "attention": {"tma": _src("attention_tma.py", ("attention_tma_kernel",), ("launch_spec", "check"))},
}

#: staging (docs/DESIGN.md): the copy of the A / B rows TMA cannot read into 16-byte rows, no word of
#: its own; a ``tma`` plan whose config names operands under ``stage`` launches it before the kernel
STAGE = _src("gemm_epilogue_tma.py", ("stage_rows_kernel",), ("staged_specs", "stage_spec", "staged"))
#: ... and its host alone, for a staged launch that copies nothing (C stored from registers only)
STAGE_HOST = _src("gemm_epilogue_tma.py", (), ("staged_specs", "stage_spec", "staged"))


def facts_of_device(device) -> dict:
    """The device facts the rules read (``device_facts``'s keys) of a ``kltools.plan.Device``."""
    return {"sms": device.sms, "regs_per_sm": device.regs_per_sm, "smem_per_sm": device.smem_per_sm,
            "smem_per_block": device.smem_per_cta, "max_warps_per_sm": device.threads_per_sm // 32,
            "l2_bytes": device.l2_bytes}


def plan(problem: str, facts):
    """The default's plan (``gluon:<problem>``) for one case given as ``kltools.plan.Facts``: the
    variant and configuration of ``*_choice`` on the case's sizes and its operands' alignment."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    dev = facts_of_device(facts.device)
    if problem == "vector_add":
        x, y, out = (facts.meta(n) for n in ("x", "y", "out"))
        variant, cfg = "unmasked", vector_add_choice(facts.N, facts.esize, vector_alignment(x, y, out))
    elif problem == "softmax":
        x, out = facts.meta("x"), facts.meta("out")
        variant, cfg = softmax_choice(facts.M, facts.N, facts.esize, dev, softmax_smem.supports_tensors(x, out) is None,
                                      softmax_split_smem.supports_tensors(x, out) is None)
    elif problem == "attention":
        from .dispatch_attention import attention_choice
        variant, cfg = attention_choice(facts.B, facts.Hq, facts.Sq, facts.D, facts.esize, dev)
    else:
        a, b, out = facts.meta("a"), facts.meta("b"), facts.meta("out")
        variant, cfg = gemm_choice(facts.M, facts.N, facts.K, gemm_tma.check(a, b, out) is None, dev,
                                   gemm_copies(a, b))
        if "stage" in cfg:   # the staged launch; its copy kernel where it copies an operand
            return make_plan(problem, variant, VARIANTS, cfg,
                             sources=(STAGE if cfg["stage"] else STAGE_HOST) + VARIANTS[problem][variant])
    return make_plan(problem, variant, VARIANTS, cfg)


# -- vector add --------------------------------------------------------------------------------
#: each thread moves ``bytes_per_thread`` of each operand a program (two 16-byte vectors)
VECTOR_ADD = {"bytes_per_thread": 32, "num_warps": 4}


def vector_add_choice(n: int, elem_size: int, align_elems: int = 16) -> dict:
    """VEC: 16 bytes of elements, or fewer where the pointers' common alignment (in elements) is
    less; REPS vectors a thread make up ``bytes_per_thread``."""
    vec = max(1, min(16 // elem_size, align_elems))
    reps = max(1, VECTOR_ADD["bytes_per_thread"] // (vec * elem_size))
    return vector_add_unmasked.config(vec, reps, VECTOR_ADD["num_warps"])


def vector_alignment(*tensors) -> int:
    es = tensors[0].element_size()
    return pow2_divisor(*(t.data_ptr() // es if t.data_ptr() % es == 0 else 1 for t in tensors), limit=16)


def plan_vector_add(x, y, out) -> Plan:
    cfg = vector_add_choice(out.numel(), out.element_size(), vector_alignment(x, y, out))
    return Plan("unmasked", cfg, bind(vector_add_unmasked.launch_spec(x, y, out, cfg), out.device))


# -- softmax -----------------------------------------------------------------------------------
SOFTMAX = {
    # rows: rows of at most this many columns, several a program (a row a warp or less)
    "rows_max_cols": 1024,
    "rows_warps": 4,
    "rows_values_per_thread": 16,
    # block (a row in one program's registers) is preferred up to these padded columns when the
    # row fills at least block_min_fill of them; longer 16-bit rows and padded rows are staged in
    # shared memory (smem) where it takes them, else block up to block_max_cols
    "block_pref_max_cols": {4: 32768, 2: 4096},
    "block_min_fill": 0.9,
    "block_max_cols": {4: 32768, 2: 16384},
    # smem: rows that fit one program's shared memory, when there are at least smem_min_rows_per_sm
    # x SMs rows. Warps: smem_warps; smem_warps_alone where an SM holds one program;
    # smem_warps_short where programs of smem_warps would keep less than smem_min_flight bytes of
    # rows in flight an SM (the rule moved with the kernel from the Triton layer)
    "smem": True,
    "smem_warps": 8,
    "smem_warps_alone": 16,
    "smem_warps_short": 4,
    "smem_min_flight": 65536,
    "smem_min_rows_per_sm": 0.75,
    # split: fewer rows than split_max_rows_per_sm x SMs of at least split_min_cols columns; chunks
    # of split_min_chunk .. split_max_chunk columns, the largest that still gives every SM
    # split_programs_per_sm programs
    "split_max_rows_per_sm": 0.75,
    "split_min_cols": 4096,
    "split_min_chunk": 1024,
    "split_max_chunk": 8192,
    "split_programs_per_sm": 2,
    "split_warps": 4,
    # online: column tiles of online_block; a persistent grid of online_programs_per_sm programs
    # an SM. Gluon does not pipeline plain loads, so what an SM has in flight is its programs'
    # tiles: more programs of shorter tiles measured faster than a grid sized for L2 reuse
    # (docs/performance.md, "Gluon / softmax")
    "online_block": 4096,
    "online_warps": 8,
    "online_programs_per_sm": 4,
    # split_smem (one read: a row's chunks staged raw in the shared memory of co-resident programs,
    # partials through global memory) for the rows that go to online; measured against online on
    # a GPU (docs/performance.md, "Gluon / softmax"). Chunks of split_smem_pieces pieces (a piece:
    # one 16-byte vector a thread of split_smem_warps warps): the most bytes of rows in flight an
    # SM, ties to the longer chunk (fewer partners), at least split_smem_min_per_sm programs an SM
    "split_smem": True,
    "split_smem_warps": 8,
    "split_smem_pieces": (4, 8),
    "split_smem_min_per_sm": 2,
    # rows and block: rows of whole 16-byte groups the compiler cannot prove so (N and the strides
    # multiples of 16 bytes, not of 16 elements: 200 fp16 columns) take N and the strides in 16-byte
    # units (``softmax_block.units``), so their accesses are 128-bit instead of 2-byte
    "units": True,
}


@contextmanager
def switched(table: dict, changes: dict):
    """``table`` with ``changes`` applied while the block runs (a candidate's planning), restored after."""
    saved = {k: table[k] for k in changes}
    table.update(changes)
    try:
        yield table
    finally:
        table.update(saved)


def softmax_smem_warps(N: int, elem_size: int, facts: dict) -> int:
    S = softmax_smem
    warps = SOFTMAX["smem_warps"]
    per_sm = S.programs_per_sm(S.config(N, elem_size, warps), facts)
    if per_sm == 1 and not S.supports(N, elem_size, SOFTMAX["smem_warps_alone"], facts):
        return SOFTMAX["smem_warps_alone"]
    if per_sm * N * elem_size < SOFTMAX["smem_min_flight"]:
        return SOFTMAX["smem_warps_short"]
    return warps


def softmax_smem_config(M: int, N: int, elem_size: int, facts: dict) -> dict | None:
    """smem's configuration, or None where its rule leaves the rows to another kernel."""
    if not SOFTMAX["smem"] or M < SOFTMAX["smem_min_rows_per_sm"] * facts["sms"]:
        return None
    warps = softmax_smem_warps(N, elem_size, facts)
    if softmax_smem.supports(N, elem_size, warps, facts):
        return None
    return softmax_smem.config(N, elem_size, warps)


def softmax_split_config(M: int, N: int, elem_size: int, facts: dict) -> dict:
    want = SOFTMAX["split_programs_per_sm"] * facts["sms"]
    chunk = SOFTMAX["split_max_chunk"]
    while chunk > SOFTMAX["split_min_chunk"] and M * triton.cdiv(N, chunk) < want:
        chunk //= 2
    return softmax_split.config(N, elem_size, chunk, SOFTMAX["split_warps"])


def softmax_online_config(M: int, N: int, elem_size: int, facts: dict) -> dict:
    block = min(SOFTMAX["online_block"], max(32 * SOFTMAX["online_warps"], next_pow2(N)))
    return softmax_online.config(elem_size, block, SOFTMAX["online_warps"],
                                 facts["sms"] * SOFTMAX["online_programs_per_sm"])


def softmax_split_smem_config(M: int, N: int, elem_size: int, facts: dict) -> dict | None:
    """split_smem's chunk: of split_smem_pieces pieces, the one that keeps the most bytes of rows in
    flight an SM (programs an SM by shared memory x the row's bytes a chunk: each program has one
    chunk's copies in flight while it works on the other half; padded lanes are not read), ties to
    the longer chunk (fewer partners); at least split_smem_min_per_sm programs an SM and a row's
    chunks at most what the SMs hold (registers are checked at bind, from the compiled kernel).
    None where no chunk qualifies (a row of one chunk needs no split)."""
    S, best = SOFTMAX, None
    lo, hi = S["split_smem_pieces"]
    for p in range(hi, lo - 1, -1):
        cfg = softmax_split_smem.config(N, elem_size, S["split_smem_warps"], p)
        per_sm = softmax_split_smem.programs_per_sm(cfg["smem"], 0, cfg["num_warps"], facts)
        if per_sm < S["split_smem_min_per_sm"] or cfg["C"] > per_sm * facts["sms"] or cfg["C"] < 2:
            continue
        flight = per_sm * N * elem_size / cfg["C"]
        if best is None or flight > best[0]:
            best = (flight, cfg)
    return None if best is None else best[1]


def softmax_choice(M: int, N: int, elem_size: int, facts: dict | None = None,
                   smem_ok: bool = True, split_smem_ok: bool = False) -> tuple[str, dict]:
    """rows (short rows, several a program); block where a full row fits the registers; split
    for long rows when the rows are too few to fill the SMs; smem where the row fits a program's
    shared memory (``smem_ok``: the tensors' rows can be read in 16-byte groups); else block up to
    its limit; else split_smem where the table enables it (``split_smem_ok``: rows on 16-byte
    boundaries); else online."""
    facts = facts or device_facts()
    cols = max(16, next_pow2(N))
    fill = N / cols
    units = {"UNITS": SOFTMAX["units"]}
    if N <= SOFTMAX["rows_max_cols"]:
        return "rows", {**softmax_rows.config(N, elem_size, SOFTMAX["rows_warps"], SOFTMAX["rows_values_per_thread"]),
                        **units}
    if cols <= SOFTMAX["block_pref_max_cols"][elem_size] and fill >= SOFTMAX["block_min_fill"]:
        return "block", {**softmax_block.config(N, elem_size), **units}
    if M < SOFTMAX["split_max_rows_per_sm"] * facts["sms"] and N >= SOFTMAX["split_min_cols"]:
        return "split", softmax_split_config(M, N, elem_size, facts)
    staged = softmax_smem_config(M, N, elem_size, facts) if smem_ok else None
    if staged is not None:
        return "smem", staged
    if cols <= SOFTMAX["block_max_cols"][elem_size]:
        return "block", {**softmax_block.config(N, elem_size), **units}
    if SOFTMAX["split_smem"] and split_smem_ok:
        cfg = softmax_split_smem_config(M, N, elem_size, facts)
        if cfg is not None:
            return "split_smem", cfg
    return "online", softmax_online_config(M, N, elem_size, facts)


def softmax_specs(variant: str, x, out, cfg: dict, ws=None) -> list:
    """The launch specs of a softmax variant (``ws``: split's workspace, made here if not given)."""
    if variant == "rows":
        return [softmax_rows.launch_spec(x, out, cfg)]
    if variant == "block":
        return [softmax_block.launch_spec(x, out, cfg)]
    if variant == "online":
        return [softmax_online.launch_spec(x, out, cfg)]
    if variant == "smem":
        return [softmax_smem.launch_spec(x, out, cfg)]
    return softmax_split.launch_specs(x, out, softmax_split.workspace(x, cfg) if ws is None else ws, cfg)


def plan_softmax(x, out) -> Plan:
    M, N = x.shape
    facts = device_facts(x.device)
    ok = softmax_smem.supports_tensors(x, out) is None
    variant, cfg = softmax_choice(M, N, x.element_size(), facts, smem_ok=ok,
                                  split_smem_ok=softmax_split_smem.supports_tensors(x, out) is None)
    if variant == "smem":
        launch = softmax_smem.bind_launch(x, out, cfg)
        return Plan(variant, launch.config, launch)
    if variant == "split_smem":
        launch = softmax_split_smem.bind_launch(x, out, cfg, facts)
        return Plan(variant, launch.config, launch)
    ws = softmax_split.workspace(x, cfg) if variant == "split" else None
    launch = bind_all(softmax_specs(variant, x, out, cfg, ws), x.device)
    launch.workspace = ws
    return Plan(variant, cfg, launch)


# -- GEMM + epilogue ---------------------------------------------------------------------------
def _cfg(bm, bn, bk, stages, warps, eff, group=8):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "STAGES": stages, "num_warps": warps,
            "GROUP_M": group, "eff": eff}


GEMM = {
    # tile configurations and the share of an SM's peak each is assumed to reach (larger tiles
    # reuse each loaded byte more); the roofline model below picks the fastest for the shape.
    # Few rows are HBM-bound on B: narrow tiles (64 x 32) put more SMs to streaming it
    "tma": [_cfg(128, 256, 64, 3, 8, 1.0), _cfg(128, 128, 64, 4, 4, 0.85), _cfg(64, 128, 64, 4, 4, 0.6),
            _cfg(64, 64, 64, 6, 4, 0.4), _cfg(64, 32, 64, 8, 4, 0.25)],
    # tiled: the prefetched tiles are held in registers (with a pointer an element where the
    # rows are not 16-byte aligned), so shorter K steps and 8 warps for the large tile
    "tiled": [_cfg(128, 128, 32, 2, 8, 0.6), _cfg(64, 128, 32, 2, 4, 0.45), _cfg(64, 64, 32, 2, 4, 0.3)],
    "peak_flops": 800e12,        # dense 16-bit tensor-core peak, H100/H200 SXM
    "hbm_bytes_per_s": 4.0e12,
    "mem_min_tiles_per_sm": 1.0,
    # few rows (at most few_rows_max_m) with TMA: the few_rows tile, whatever the model says (its
    # MMA shares assume full tiles; 64 x 128 measured best or level with the best there), and
    # splitk with that tile where its tiles fill fewer than splitk_min_fill x SMs: K cut in the
    # fewest slices (at least splitk_min_k_steps K steps each, at most splitk_max) that give every
    # SM a program (docs/performance.md, "Gluon / GEMM + epilogue")
    "few_rows_max_m": 64,
    "few_rows": _cfg(64, 128, 64, 4, 4, 0.6),
    "splitk_min_fill": 0.5,
    "splitk_min_k_steps": 4,
    "splitk_max": 8,
    # More rows (M > few_rows_max_m) with TMA: tile and split-K factor by the model below, which
    # adds to the tiles' MMA time and the HBM floor the operand traffic from L2 (every program
    # loads (BLOCK_M + BLOCK_N) x K of A and B): small tiles that fill the SMs at a few hundred
    # rows move more bytes than L2 delivers, split-K lets large tiles fill them. Off: the splitk
    # kernel has run on the GPU only with the few-rows tile (python -m harness check gluon times the
    # model's choices against the current rule; docs/performance.md, "Gluon / GEMM + epilogue").
    # A split is taken only when modelled splitk_min_gain faster than the best unsplit tile (else
    # the rule above stands). l2_bytes_per_s: what the layer's tma kernel moved from L2 in the
    # reference run (128 x 256 tiles: 5.6 GB in 606 us at 4096 x 4096 x 14336, 2.4 GB in 275 us at
    # 4096 x 6144 x 4096; 64 x 128 tiles: 0.70 GB in 80 us at 256 x 4096 x 14336; 8.8-9.3e12)
    "splitk_by_model": False,
    "splitk_min_gain": 0.15,
    "l2_bytes_per_s": 9.0e12,
    "splitk_launch_s": 3e-6,
    # Rows TMA cannot address (N = 2047, K = 777), more than few_rows_max_m rows: staging (a tma
    # plan with "stage" in its config) copies each A or B TMA cannot read into a workspace of
    # 16-byte rows (a launch each, its bytes read and written at HBM speed), then the tma kernel,
    # C stored from registers where TMA cannot write it; taken where that models faster than the tiled kernel, whose K steps wait on their loads:
    # rounds of tiled_resident programs an SM x K steps x tiled_step_s (2048 x 2047 x 2048: 1 x 64
    # steps, 131 us; 555 x 1234 x 777: 1 x 25, 32 us;
    # docs/performance.md, "Gluon / GEMM + epilogue"; on the H100 staging took 4096 x 50257 x 768
    # from 1906 to 729 us, 411 x 733 x 957 from 32.0 to 17.0 us).
    "tiled_step_s": 1.6e-6,
    "tiled_resident": 2,
}

def _gemm_time(M, N, K, cfg: dict, sms: int) -> float:
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    waves = -(-tiles // sms)
    t_tiles = waves * 2.0 * bm * bn * K / (GEMM["peak_flops"] / sms * cfg["eff"])
    # the HBM floor, reached only when enough programs stream at once (mem_min_tiles_per_sm x SMs)
    t_mem = 2.0 * (M * K + K * N + M * N) / GEMM["hbm_bytes_per_s"]
    t_mem /= min(1.0, tiles / (GEMM["mem_min_tiles_per_sm"] * sms))
    return max(t_tiles, t_mem)


def gemm_model_time(M: int, N: int, K: int, cfg: dict, split: int, sms: int, elem_size: int = 2) -> float:
    """Modelled seconds of ``cfg`` with K cut in ``split`` slices: the longest of the MMA waves,
    the HBM floor and the operand traffic from L2, plus for split > 1 the fp32 partials written
    and read back and the reducing launch."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    steps = triton.cdiv(K, bk)
    per = triton.cdiv(steps, split)
    programs = triton.cdiv(M, bm) * triton.cdiv(N, bn) * triton.cdiv(steps, per)
    waves = -(-programs // sms)
    t_mma = waves * 2.0 * bm * bn * per * bk / (GEMM["peak_flops"] / sms * cfg["eff"])
    t_mem = elem_size * (M * K + K * N + M * N) / GEMM["hbm_bytes_per_s"]
    t_mem /= min(1.0, programs / (GEMM["mem_min_tiles_per_sm"] * sms))
    t_l2 = programs * per * bk * (bm + bn) * elem_size / GEMM["l2_bytes_per_s"]
    t = max(t_mma, t_mem, t_l2)
    if split > 1:
        t += 2.0 * 4 * split * M * N / GEMM["hbm_bytes_per_s"] + GEMM["splitk_launch_s"]
    return t


def gemm_model_split(M: int, N: int, K: int, facts: dict, elem_size: int = 2) -> dict | None:
    """The splitk config (a tma tile, SPLIT >= 2) of least modelled time when it beats the best
    unsplit tma tile by at least splitk_min_gain of that tile's modelled time, else None. A split
    keeps at least splitk_min_k_steps K steps a slice and at most splitk_max slices; ties go to
    fewer slices, then the smaller tile."""
    sms = facts["sms"]
    unsplit = min(gemm_model_time(M, N, K, c, 1, sms, elem_size) for c in GEMM["tma"])
    best = None
    for cfg in GEMM["tma"]:
        top = min(GEMM["splitk_max"], triton.cdiv(K, cfg["BLOCK_K"]) // GEMM["splitk_min_k_steps"])
        for split in range(2, top + 1):
            key = (gemm_model_time(M, N, K, cfg, split, sms, elem_size), split, cfg["BLOCK_M"] * cfg["BLOCK_N"])
            if best is None or key < best[0]:
                best = (key, cfg, split)
    if best is None or best[0][0] > (1.0 - GEMM["splitk_min_gain"]) * unsplit:
        return None
    return dict(best[1], SPLIT=best[2])


def gemm_splitk_config(M: int, N: int, K: int, facts: dict) -> dict:
    cfg = dict(GEMM["few_rows"])
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    top = max(1, min(GEMM["splitk_max"], triton.cdiv(K, cfg["BLOCK_K"]) // GEMM["splitk_min_k_steps"]))
    cfg["SPLIT"] = next((s for s in range(2, top + 1) if tiles * s >= facts["sms"]), top)
    return cfg


def gemm_copies(a, b) -> dict:
    """{operand: element count} of the A / B a staged TMA launch copies (rows TMA cannot read)."""
    return {n: t.numel() for n, t in (("a", a), ("b", b)) if not gemm_tma.tma_readable(t)}


def gemm_choice(M: int, N: int, K: int, tma_ok: bool, facts: dict | None = None,
                copies: dict | None = None) -> tuple[str, dict]:
    """tma when TMA can address A, B and C, else tiled; the tile config by the roofline model
    (whole waves of tiles at the config's share of an SM's peak, or the HBM floor, whichever is
    longer: few tiles leave SMs idle, so smaller tiles win there; ties go to the smaller tile).
    With ``copies`` ({operand: element count} of the operands a staged launch copies,
    ``gemm_copies``; None: no TMA here), above few_rows_max_m rows the tma kernel on staged
    operands where it models faster: "tma" with ``stage`` (the copied operands' names) in its
    config."""
    G = GEMM
    facts = facts or device_facts()
    variant, cfg = _gemm_choice_unstaged(M, N, K, tma_ok, facts)
    if variant != "tiled" or copies is None or M <= GEMM["few_rows_max_m"]:
        return variant, cfg
    programs = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    t_tiled = -(-programs // (facts["sms"] * G["tiled_resident"])) * triton.cdiv(K, cfg["BLOCK_K"]) * G["tiled_step_s"]
    tma = min(GEMM["tma"], key=lambda c: (_gemm_time(M, N, K, c, facts["sms"]), c["BLOCK_M"] * c["BLOCK_N"]))
    t_stage = _gemm_time(M, N, K, tma, facts["sms"]) + sum(4.0 * n / G["hbm_bytes_per_s"] + G["splitk_launch_s"]
                                                            for n in copies.values())
    return ("tma", dict(tma, stage=list(copies))) if t_stage < t_tiled else (variant, cfg)


def _gemm_choice_unstaged(M: int, N: int, K: int, tma_ok: bool, facts: dict) -> tuple[str, dict]:
    kind = "tma" if tma_ok else "tiled"
    # equal times (the HBM floor): the smaller tile, which wastes less of the MMA on few rows
    cfg = min(GEMM[kind], key=lambda c: (_gemm_time(M, N, K, c, facts["sms"]), c["BLOCK_M"] * c["BLOCK_N"]))
    if tma_ok and M > GEMM["few_rows_max_m"] and GEMM["splitk_by_model"]:
        split = gemm_model_split(M, N, K, facts)
        if split is not None:
            return "splitk", split
    if tma_ok and M <= GEMM["few_rows_max_m"]:
        cfg = GEMM["few_rows"]
        tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
        if tiles < GEMM["splitk_min_fill"] * facts["sms"]:
            split = gemm_splitk_config(M, N, K, facts)
            if split["SPLIT"] > 1:
                return "splitk", split
    return kind, dict(cfg)


def gemm_specs(variant: str, a, b, bias, act, out, cfg: dict, sms: int, ws=None) -> list:
    if variant == "tma" and "stage" in cfg:   # operands TMA cannot address: staged, C from registers
        return gemm_tma.staged_specs(a, b, bias, act, out, cfg, sms)
    if variant == "splitk":
        return gemm_splitk.launch_specs(a, b, bias, act, out, gemm_splitk.workspace(a, b, cfg) if ws is None else ws, cfg)
    if variant == "tma":
        return [gemm_tma.launch_spec(a, b, bias, act, out, cfg, sms)]
    return [gemm_tiled.launch_spec(a, b, bias, act, out, cfg)]


def plan_gemm(a, b, bias, act: str, out) -> Plan:
    """The default's plan."""
    M, K = a.shape
    N = b.shape[1]
    facts = device_facts(a.device)
    variant, cfg = gemm_choice(M, N, K, gemm_tma.check(a, b, out) is None, facts, gemm_copies(a, b))
    ws = gemm_splitk.workspace(a, b, cfg) if variant == "splitk" else None
    launch = bind_all(gemm_specs(variant, a, b, bias, act, out, cfg, facts["sms"], ws), a.device)
    launch.workspace = ws
    return Plan(variant, cfg, launch)
