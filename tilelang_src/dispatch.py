"""The TileLang layer's planner: rules over facts (bytes per row, alignment, tiles against SMs),
and the plain-data table they read. Planning is one way: this module imports the variants' builders
through the adapter; the variants never import it.
"""
from __future__ import annotations

SMS = 132                      # H200 streaming multiprocessors (the grid rules' unit)
L2_BYTES = 50 * 1024 * 1024    # H200 / H100 L2 (plan_gemm_mixed: whether a staged B stays there)

# Switches: kernels and rules built and checked on the CPU (compile-only for sm_90a, the generated
# CUDA read), then verified and timed on a GPU. ``tilelang:<problem>_next`` is the default with a
# pending switch on; the lead flips a switch where _next beats the default.
SWITCHES = {
    # softmax: the rows kernel in 16-byte groups by alignment class, warp rows; rows past
    # registers in shared-memory slices over a cluster; few long rows split over 16-byte chunks.
    # On: it won where timed and PASSed the verify suite (docs/performance.md, section
    # "The pending switches of TileLang, cuTile and Helion measured on 2026-12-06")
    "softmax_next": True,
    # GEMM: bias and C staged in shared memory (TMA store), operands staged to 16-byte rows where
    # they are not (TMA instead of element loads), tiles chosen by waves. On as plan_gemm_mixed:
    # the staged plans where they won, today's split-K and single-row-tile plans where those did
    # (the same section); re-planned for small and odd shapes by plan_gemm_small (A and B staged
    # in one launch, the tile by waves over 64 / 128 rows, a split only where it models faster,
    # no more stages than K tiles): run on a GPU, faster on the small and odd cases, the others
    # unchanged, the verify suite PASS (docs/performance.md, "TileLang / GEMM + epilogue")
    "gemm_next": True,
}

TABLE = {
    "vector_add": {"threads": 256, "bytes_per_access": 16, "unroll": 4},
    # whole rows in registers up to max_cols fp32 values per CTA, elems_per_thread a thread; rows
    # of <= warp_cols columns take one warp per CTA (a row spread over more threads than a warp
    # costs a shared-memory reduction each) and up to warp_rows rows per CTA (<= 1024 columns)
    "softmax": {"max_cols": 16384, "elems_per_thread": 16, "max_threads": 1024,
                "warp_cols": 1024, "warp_rows": 4, "warp_cta_cols": 1024,
                # online: (tile, threads) per element size
                "online": {2: (2048, 256), 4: (4096, 512)},
                # rows staged in shared memory up to this many bytes a CTA (H200: 227 KB a block)
                "smem_max_bytes": 220 * 1024, "smem_tile": 4096, "smem_threads": 512,
                # few long rows: C CTAs per row, about split_ctas_per_sm CTAs per SM in all
                "split_tile": 2048, "split_threads": 256, "split_ctas_per_sm": 2},
    # the softmax_next plans: rows in registers up to max_cols (rows_elems fp32 values a thread,
    # rows of <= 32 groups of 16 bytes in a warp, 128-thread CTAs for those); smem slices of at
    # most slice_bytes (two CTAs an SM), a cluster of up to max_cluster CTAs a row, while the
    # rows' CTAs cover half the SMs; split otherwise (split_ctas_per_sm CTAs an SM in all)
    "softmax_next": {"max_cols": 16384, "rows_elems": 32, "rows_threads": 128,
                     "slice_bytes": 100 * 1024, "smem_threads": 512, "max_cluster": 8,
                     "split_threads": 256, "split_units": 4, "split_ctas_per_sm": 2},
    # (bm, bn, bk, stages, threads): "wide" (bn = 256) while its tiles fill wide_fill of a wave,
    # else the 128-column tile; 64-row tiles for M <= 64; "tiled" = the element-load pipeline
    "gemm": {"wide": (128, 256, 64, 3, 256), "large": (128, 128, 128, 3, 256),
             "narrow_wide": (64, 256, 64, 3, 128), "narrow": (64, 128, 64, 4, 128),
             "tiled": (128, 256, 32, 2, 256), "tiled_narrow": (64, 128, 32, 2, 128),
             "wide_fill": 0.75, "splitk_tile": (128, 128, 64, 4, 256),
             # split K when at least two splits of every tile fit one wave; each split keeps
             # at least min_k_tiles K tiles (the pipeline's prologue is paid per split)
             "max_splits": 16, "min_k_tiles": 4},
    # the gemm_next plans: 128 (64 for M <= 64) x 256 or x 128 tiles, whichever needs fewer
    # tile-waves weighted by the tile's cost (wide_cost: a 128 x 256 tile costs 2 x 0.9 of a
    # 128 x 128 one, its MMAs and loads amortised over more output); split K as in "gemm"
    "gemm_next": {"tiles": {(128, 256): (128, 256, 64, 3, 256), (128, 128): (128, 128, 64, 4, 256),
                            (64, 256): (64, 256, 64, 4, 128), (64, 128): (64, 128, 64, 4, 128)},
                  "wide_cost": 0.9, "splitk_tile": (128, 128, 64, 4, 256)},
    # plan_gemm_small's rules (a model, not a measurement): a 64-row tile (one consumer warpgroup
    # issues its MMAs, no second chain to hide one's waits) does its half of a 128-row tile's
    # work a K step at 1 / narrow_cost of the rate; a split pays when the K steps it takes off
    # each CTA (k_step_us each) outweigh one more launch (launch_us) and the fp32 planes written
    # and read back (at hbm_bytes_per_us)
    "gemm_small": {"narrow_cost": 1.5, "k_step_us": 0.5, "launch_us": 4.0, "hbm_bytes_per_us": 3.0e6},
}


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ----------
def _src(file: str, *kernels: str):
    from kltools.plan import Source
    return (Source(f"tilelang_src/{file}", kernels=kernels),)


#: the variants the defaults plan among today, by algorithm word: the kernel builders' files and
#: names (the adapter, backends/tilelang_layer.py, compiles and binds every plan). "simple": the
#: twin's element kernel, which the vector add takes for misaligned views; "tiled": the TMA
#: kernel's pipeline fed by guarded element loads
TODAY_VARIANTS = {
    "vector_add": {"unmasked": _src("vector_add_unmasked.py", "vector_add_unmasked_kernel"),
                   "simple": _src("vector_add.py", "vector_add_kernel")},
    "softmax": {"rows": _src("softmax_rows.py", "softmax_rows_element_kernel"),
                "split": _src("softmax_split.py", "softmax_split_element_stats_kernel",
                              "softmax_split_element_write_kernel"),
                "smem": _src("softmax_smem.py", "softmax_smem_element_kernel"),
                "online": _src("softmax_online.py", "softmax_online_kernel")},
    "gemm_epilogue": {"tma": _src("gemm_epilogue_tma.py", "gemm_tma_kernel"),
                      "tiled": _src("gemm_epilogue_tma.py", "gemm_tma_kernel")
                      + _src("gemm_epilogue_tiled.py", "load_tiles_guarded"),
                      "splitk": _src("gemm_epilogue_splitk.py", "gemm_splitk_partial_kernel",
                                     "gemm_splitk_epilogue_kernel")},
    # the fourth problem's rule is dispatch_attention.py's
    "attention": {"ws": _src("attention_ws.py", "attention_ws_kernel")},
}
_GROUPS = _src("row_groups.py", "bounds", "edge_index", "edge_max", "edge_sum", "edge_write", "vector_layout")
#: ... and the pending plans' (SWITCHES on)
NEXT_VARIANTS = {
    "vector_add": TODAY_VARIANTS["vector_add"],
    "softmax": {"rows": _src("softmax_rows.py", "softmax_rows_kernel", "row_layout"),
                "smem": _src("softmax_smem.py", "softmax_smem_kernel") + _GROUPS,
                "split": _src("softmax_split.py", "softmax_split_stats_kernel", "softmax_split_write_kernel",
                              "thread_rows", "tile_offset", "chunk") + _GROUPS,
                "simple": _src("softmax.py", "softmax_kernel")},
    "gemm_epilogue": {"tma": _src("gemm_epilogue_tma.py", "gemm_tma_staged_kernel"),
                      "splitk": _src("gemm_epilogue_splitk.py", "gemm_splitk_partial_kernel", "gemm_splitk_sum_kernel")},
    "attention": TODAY_VARIANTS["attention"],
}
#: staging (docs/DESIGN.md): the copies of operands whose rows are not 16-byte multiples into 16-byte
#: rows, no word of its own; a pending plan whose ``stage`` names operands launches them first ("rows":
#: a launch an operand, "pair": A and B in one launch, the plan's ``stage_pair``)
STAGE = {"rows": _src("gemm_epilogue_tma.py", "stage_rows_kernel"),
         "pair": _src("gemm_epilogue_tma.py", "stage_pair_kernel", "stage_tile")}


def _default_variants() -> dict:
    """What the default plans among under SWITCHES, by word (the layer contract's VARIANTS): the
    pending plans' softmax where its switch is on; GEMM mixes today's and the pending kernels
    (``plan_gemm_mixed``, re-planned by ``plan_gemm_small``), so each word holds both (staging,
    STAGE, is no word: ``plan`` adds it to the plans that stage)."""
    out = dict(TODAY_VARIANTS)
    if SWITCHES["softmax_next"]:
        out["softmax"] = NEXT_VARIANTS["softmax"]
    if SWITCHES["gemm_next"]:
        words = dict(TODAY_VARIANTS["gemm_epilogue"])
        for w, srcs in NEXT_VARIANTS["gemm_epilogue"].items():
            words[w] = words.get(w, ()) + srcs
        out["gemm_epilogue"] = words
    return out


def softmax_next_facts(facts) -> dict:
    """The alignment facts ``plan_softmax_next`` reads, from a case's facts: ``aligned`` (both start
    on 16 bytes; N and both row strides 16-byte multiples), ``flat`` (one 16-byte group map serves x
    and out: same row stride and 16-byte phase), ``edges`` (the rows' partial groups need guards)."""
    x, out, es = facts.operands["x"], facts.operands["out"], facts.esize
    m, n, vec = facts.M, facts.N, 16 // es
    sx = x.strides[0] if m > 1 else n
    so = out.strides[0] if m > 1 else n
    flat = so == sx and sx >= n and x.addr16 % es == 0 and x.addr16 == out.addr16 and \
        x.addr16 // es + (m + 8) * sx + n + 16 * 1024 < 2 ** 31
    flat_aligned = flat and x.addr16 == 0 and sx % vec == 0
    aligned = n % vec == 0 and (m == 1 or (sx % vec == 0 and so % vec == 0)) and x.addr16 == out.addr16 == 0
    return {"aligned": aligned, "flat": flat, "edges": not (flat_aligned and n % vec == 0)}


def plan(problem: str, facts):
    """The default's plan (``tilelang:<problem>``) for one case given as ``kltools.plan.Facts``:
    ``plan_*``'s kernel and configuration on the case's sizes and its operands' alignment (the
    pending plans where SWITCHES turns them on)."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    ops, es, table = facts.operands, facts.esize, TODAY_VARIANTS
    if problem == "vector_add":
        cfg = plan_vector_add(facts.N, es, all(ops[n].addr16 == 0 for n in ("x", "y", "out")))
    elif problem == "attention":
        from .dispatch_attention import plan_attention
        cfg = plan_attention(facts.B, facts.Hq, facts.Sq, facts.D, es, sms=facts.device.sms)
    elif problem == "softmax" and SWITCHES["softmax_next"]:
        cfg, table = plan_softmax_next(facts.M, facts.N, es, **softmax_next_facts(facts)), NEXT_VARIANTS
    elif problem == "softmax":
        cfg = plan_softmax(facts.M, facts.N, es)
    else:
        vec, bases = 16 // es, [ops[n].addr16 == 0 for n in ("a", "b", "out")]
        tma_ok = facts.N % vec == 0 and facts.K % vec == 0 and all(bases)
        if SWITCHES["gemm_next"]:
            cfg = plan_gemm_small(facts.M, facts.N, facts.K, es, tma_ok, facts.N % vec == 0 and bases[2],
                                  misaligned=tuple(p for p, ok in zip("ab", bases) if not ok))
            table = NEXT_VARIANTS if "stage" in cfg else TODAY_VARIANTS
        else:
            cfg = plan_gemm(facts.M, facts.N, facts.K, es, tma_ok)
    if cfg.get("stage"):   # operands copied to 16-byte rows first
        stager = STAGE["pair"] if cfg.get("stage_pair") else STAGE["rows"]
        return make_plan(problem, cfg["kernel"], table, cfg, sources=stager + table[problem][cfg["kernel"]])
    return make_plan(problem, cfg["kernel"], table, cfg)


def plan_vector_add(n: int, esize: int, aligned: bool) -> dict:
    """16-byte vectors in full tiles where every pointer is 16-byte aligned; element accesses
    (the twin's kernel) otherwise."""
    t = TABLE["vector_add"]
    if not aligned:
        return {"kernel": "simple"}
    return {"kernel": "unmasked", "threads": t["threads"], "vec": t["bytes_per_access"] // esize, "unroll": t["unroll"]}


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def reachable(problem: str, nxt: bool | None = None) -> tuple[str, ...]:
    """The kernels the planner of ``problem`` can choose unforced (``plan_*``'s ``kernel``), today's
    or, with ``nxt`` (default: the switch), the pending plan's: the default's lines of code count
    these and only these (harness.planned_sources)."""
    if problem == "vector_add":
        return ("unmasked", "simple")
    if problem == "softmax":
        on = SWITCHES["softmax_next"] if nxt is None else nxt
        return ("rows", "smem", "split", "simple") if on else ("rows", "split", "smem", "online")
    if problem == "gemm_epilogue":
        on = SWITCHES["gemm_next"] if nxt is None else nxt
        return ("tma", "splitk") if on else ("tma", "tiled", "splitk")   # (the default mixes both)
    raise ValueError(f"problem: {problem!r} has no TileLang planner")


def plan_softmax(m: int, n: int, esize: int, kernel: str | None = None, vector: bool = False) -> dict:
    """Today's plans (element accesses). rows: whole rows in registers (cols = the power of two
    >= N, ``elems_per_thread`` fp32 values a thread; short rows several to a CTA so a CTA holds
    ``rows_cta_cols`` columns); smem: longer rows staged raw in a CTA's shared memory (the row
    rounded up to ``smem_tile`` columns, at most ``smem_max_bytes``), a CTA per row, while the rows
    cover half the SMs; online: rows longer than that streamed twice in tiles, a CTA per row, as
    long; split: fewer long rows, C CTAs per row (C = the CTAs that fill the SMs twice over, at
    most a chunk per tile).

    ``vector``: the ``softmax_online`` variant's 16-byte form (``vec`` elements a group)."""
    t = TABLE["softmax"]
    cols = max(_pow2_at_least(n), 32)
    if kernel is None:
        if cols <= t["max_cols"]:
            kernel = "rows"
        elif m < SMS // 2:
            kernel = "split"
        elif -(-n // t["smem_tile"]) * t["smem_tile"] * esize <= t["smem_max_bytes"]:
            kernel = "smem"
        else:
            kernel = "online"
    if kernel == "rows":
        if cols > t["max_cols"]:
            raise ValueError(f"N: softmax_rows holds rows of at most {t['max_cols']} columns, not {n}")
        if cols <= t["warp_cols"]:
            threads, rows = 32, max(1, min(t["warp_rows"], t["warp_cta_cols"] // cols))
        else:
            threads, rows = min(t["max_threads"], cols // t["elems_per_thread"]), 1
        return {"kernel": "rows", "cols": cols, "rows": rows, "threads": threads}
    if kernel == "online":
        tile, threads = t["online"][4 if esize >= 4 else 2]
        return {"kernel": "online", "tile": tile, "threads": threads, **({"vec": 16 // esize} if vector else {})}
    if kernel == "smem":
        scols = -(-n // t["smem_tile"]) * t["smem_tile"]
        if scols * esize > t["smem_max_bytes"]:
            raise ValueError(f"N: softmax_smem stages rows of at most {t['smem_max_bytes']} bytes, not {n} x {esize}")
        return {"kernel": "smem", "cols": scols, "tile": t["smem_tile"], "threads": t["smem_threads"]}
    if kernel == "split":
        tiles = -(-n // t["split_tile"])
        chunks = max(1, min(tiles, -(-t["split_ctas_per_sm"] * SMS // m)))
        return {"kernel": "split", "tile": t["split_tile"], "threads": t["split_threads"], "chunks": chunks}
    if kernel == "simple":
        return {"kernel": "simple"}
    raise ValueError(f"kernel: rows, smem, online, split or simple, not {kernel!r}")


def plan_softmax_next(m: int, n: int, esize: int, kernel: str | None = None, aligned: bool = False,
                      flat: bool = False, edges: bool = True) -> dict:
    """The pending plans (``SWITCHES["softmax_next"]``), from the tensors' facts: ``aligned`` (both
    start on 16 bytes; N and both row strides are multiples of 16 bytes), ``flat`` (x and out
    share their row stride and 16-byte phase: one flat view serves both), ``edges`` (some row
    starts or ends inside a 16-byte group).

    rows while a power-of-two row fits registers (``_plan_rows``); longer rows, where the views
    are flat: smem slices over a cluster while the rows' CTAs cover half the SMs
    (``_plan_smem``), else split; elsewhere the twin (element accesses, any layout)."""
    t = TABLE["softmax_next"]
    vec = 16 // esize
    cols = max(_pow2_at_least(n), vec)
    if kernel is None:
        if cols <= t["max_cols"]:
            kernel = "rows"
        elif not flat:
            kernel = "simple"
        else:
            kernel = "smem" if _plan_smem(m, n, esize) else "split"
    if kernel == "rows":
        if cols > t["max_cols"]:
            raise ValueError(f"N: softmax_rows holds rows of at most {t['max_cols']} columns, not {n}")
        return _plan_rows(m, cols, vec, aligned)
    if kernel in ("smem", "split") and not flat:
        raise ValueError("strides: x and out must share their row stride and 16-byte phase (flat views)")
    if kernel == "smem":
        plan = _plan_smem(m, n, esize)
        if plan is None:
            raise ValueError(f"N: softmax_smem holds rows of at most {t['max_cluster']} x "
                             f"{t['slice_bytes']} bytes over {t['max_cluster']} CTAs, not {n} x {esize}")
        return {**plan, "edges": edges}
    if kernel == "split":
        tile = t["split_threads"] * t["split_units"] * vec
        chunks = max(1, min(-(-n // tile), -(-t["split_ctas_per_sm"] * SMS // m)))
        return {"kernel": "split", "threads": t["split_threads"], "units": t["split_units"], "chunks": chunks,
                "edges": edges}
    if kernel == "simple":
        return {"kernel": "simple"}
    raise ValueError(f"kernel: rows, smem, split or simple, not {kernel!r}")


def _plan_rows(m: int, cols: int, vec: int, aligned: bool) -> dict:
    """tpr threads a row: a warp (or the row's groups, if fewer) while each then holds at most
    ``rows_elems`` values, else rows_elems a thread across the CTA. Rows of a warp or less share
    128-thread CTAs, rows_elems values a thread in all; fewer rows a CTA while the CTAs would not
    fill the SMs twice."""
    t = TABLE["softmax_next"]
    tpr = max(min(32, cols // vec), cols // t["rows_elems"])
    if tpr > 32:
        return {"kernel": "rows", "cols": cols, "rows": 1, "threads": tpr, "tpr": tpr, "aligned": aligned}
    rows = max(t["rows_threads"] // tpr, t["rows_threads"] * t["rows_elems"] // cols)
    while rows > max(1, 32 // tpr) and -(-m // rows) < 2 * SMS:
        rows //= 2
    threads = min(t["rows_threads"], rows * tpr)
    return {"kernel": "rows", "cols": cols, "rows": rows, "threads": threads, "tpr": tpr, "aligned": aligned}


def _plan_smem(m: int, n: int, esize: int) -> dict | None:
    """A cluster of C CTAs a row (C a power of two), each holding a slice of at most ``cols``
    elements: ``slice_bytes`` rounded down to the CTA's width (threads x 16 bytes), the same for
    every row length, so the class is (dtype, C) and a slice's length is a run-time value; more
    CTAs a row while the grid would cover fewer than all SMs; None where C would pass
    ``max_cluster`` or the grid would still cover fewer than half the SMs (``split``'s rows)."""
    t = TABLE["softmax_next"]
    vec = 16 // esize
    width = t["smem_threads"] * vec
    cols = t["slice_bytes"] // esize // width * width
    cluster = 1
    while cluster <= t["max_cluster"] and (-(-n // (cluster * vec)) * vec > cols or
                                           (m * cluster < SMS and cluster < t["max_cluster"])):
        cluster *= 2
    if cluster > t["max_cluster"] or m * cluster < SMS // 2:
        return None
    return {"kernel": "smem", "cols": cols, "threads": t["smem_threads"], "cluster": cluster}


def plan_gemm(m: int, n: int, k: int, esize: int, tma_ok: bool, kernel: str | None = None) -> dict:
    """TMA + wgmma pipeline where A's and B's rows are 16-byte multiples (TMA's stride rule) and
    the pointers are aligned; guarded element loads into the same pipeline otherwise. 64-row tiles
    for M <= 64; 256-column tiles where they still fill ``wide_fill`` of a wave (fewer, larger
    tiles: more reuse of each A and B slice), 128 columns otherwise; split K over S CTAs per tile
    where the tiles leave more than half the SMs idle (S = SMs // tiles, so the splits still fit
    one wave)."""
    g = TABLE["gemm"]
    if kernel in ("tma", "splitk") and not tma_ok:
        raise ValueError("strides: TMA needs 16-byte aligned rows (N and K multiples of 8 in 16-bit types)")
    use_tma = tma_ok if kernel is None else kernel in ("tma", "splitk")
    narrow = m <= 64
    if use_tma:
        wide = g["narrow_wide" if narrow else "wide"]
        fills = -(-m // wide[0]) * -(-n // wide[1]) >= g["wide_fill"] * SMS
        bm, bn, bk, stages, threads = wide if fills else g["narrow" if narrow else "large"]
    else:
        bm, bn, bk, stages, threads = g["tiled_narrow" if narrow else "tiled"]
    plan = {"kernel": "tma" if use_tma else "tiled", "bm": bm, "bn": bn, "bk": bk, "stages": stages,
            "threads": threads}
    if use_tma and kernel != "tma":
        tiles = -(-m // bm) * -(-n // bn)
        k_tiles = -(-k // bk)
        splits = min(g["max_splits"], SMS // tiles, k_tiles // g["min_k_tiles"])
        if kernel == "splitk":
            splits = max(2, min(splits, k_tiles))
        if splits >= 2:
            if not narrow:
                bm, bn, bk, stages, threads = g["splitk_tile"]
                plan.update(bm=bm, bn=bn, bk=bk, stages=stages, threads=threads)
            plan.update(kernel="splitk", splits=splits)
    return plan


def plan_gemm_next(m: int, n: int, k: int, esize: int, aligned_n: bool, kernel: str | None = None,
                   misaligned: tuple = ()) -> dict:
    """The pending plans (``SWITCHES["gemm_next"]``): the staged TMA pipeline for every case.

    ``stage``: the operands whose rows are not 16-byte multiples (A where K is not a multiple of
    8 elements, B where K or N is not) are first copied into padded ones (zeros past the edges:
    they add nothing), so every operand load is TMA; so are those in ``misaligned`` (a base
    pointer off 16 bytes). ``aligned_n``: C's rows and base are 16-byte aligned (the finished
    tile leaves by TMA). The tile: 64 rows for M <= 64, else 128; 256
    or 128 columns, whichever costs fewer tile-waves (``_tile_by_waves``). Split K over S CTAs
    a tile where the tiles cover fewer than half the SMs (S = SMs // tiles, each split keeping
    ``min_k_tiles`` K tiles): the narrow tile with the larger grid."""
    g, x = TABLE["gemm"], TABLE["gemm_next"]
    vec = 16 // esize
    stage = tuple(p for p, bad in (("a", k % vec != 0 or "a" in misaligned),
                                   ("b", k % vec != 0 or n % vec != 0 or "b" in misaligned)) if bad)
    bm, bn, bk, stages, threads = x["tiles"][_tile_by_waves(m, n, (64,) if m <= 64 else (128,))]
    plan = {"kernel": "tma", "bm": bm, "bn": bn, "bk": bk, "stages": stages, "threads": threads,
            "aligned_n": aligned_n, "stage": stage}
    if kernel == "tma":
        return plan
    best = None
    for cbn in ((256, 128) if bm == 64 else (x["splitk_tile"][1],)):
        tiles = -(-m // bm) * -(-n // cbn)
        splits = min(g["max_splits"], SMS // tiles, -(-k // 64) // g["min_k_tiles"])
        if kernel == "splitk":
            splits = max(2, min(splits, -(-k // 64)))
        if splits >= 2 and tiles < SMS // 2 and (best is None or tiles * splits > best[0]):
            best = (tiles * splits, cbn, splits)
        elif kernel == "splitk" and best is None:
            best = (tiles * splits, cbn, splits)
    if best is None:
        return plan
    cfg = x["tiles"][(bm, best[1])] if bm == 64 else x["splitk_tile"]
    bm, bn, bk, stages, threads = cfg
    return {**plan, "kernel": "splitk", "bm": bm, "bn": bn, "bk": bk, "stages": stages, "threads": threads,
            "splits": best[2]}


def plan_gemm_mixed(m: int, n: int, k: int, esize: int, tma_ok: bool, aligned_n: bool,
                    misaligned: tuple = ()) -> dict:
    """The default's first answer (``plan_gemm_small`` re-plans it): the staged plans
    (``plan_gemm_next``) except where they lost on the H100 (docs/performance.md,
    "TileLang / GEMM + epilogue"): where either plan splits K and today's loads by TMA, today's
    plan (its split-K kernel beat the staged one at the same tile and split, its tile rule the
    larger grid of 256-column tiles; element loads lose to a staged split-K); and where B would be
    staged for a single row tile while B is larger than L2 (one row tile reads B once: writing and
    re-reading a copy from HBM costs more than element loads save; a copy that stays in L2 is
    re-read from there). A pending plan carries ``stage`` (the operands it copies, maybe none);
    today's does not."""
    today = plan_gemm(m, n, k, esize, tma_ok)
    nxt = plan_gemm_next(m, n, k, esize, aligned_n, misaligned=misaligned)
    if today["kernel"] == "splitk" or (nxt["kernel"] == "splitk" and today["kernel"] == "tma"):
        return today
    if "b" in nxt["stage"] and m <= nxt["bm"] and k * n * esize > L2_BYTES:
        return today
    return nxt


def plan_gemm_small(m: int, n: int, k: int, esize: int, tma_ok: bool, aligned_n: bool,
                    misaligned: tuple = ()) -> dict:
    """The default under ``SWITCHES["gemm_next"]`` (run on a GPU: docs/performance.md,
    "TileLang / GEMM + epilogue"): ``plan_gemm_mixed``'s plan, re-planned for small and odd
    GEMMs by four rules.

    1. Staging in one launch: where A and B both need a 16-byte-row copy, one kernel copies both
       (``stage_pair_kernel``; the plan carries ``stage_pair``).
    2. The tile by waves over 64- and 128-row tiles (``_tile_by_waves``): below a wave a smaller
       tile gives more CTAs, each with less work a K step.
    3. A split (the mixed plan's, today's or the staged one) only where it models faster than the
       unsplit staged plan on rule 2's tile (``_small_us``): the split takes K steps off each
       CTA but costs one more launch and S fp32 planes written and read back.
    4. Small K (K <= 2 BK, below the tables' 3 or 4 stages): no more stages than K tiles (the
       ring's other buffers are never filled). The tile stays rule 2's: the warp-specialised
       kernels take 168-240 registers a thread over 256-384 threads, one CTA an SM whatever the
       shared footprint, so a smaller tile adds waves, not overlap (docs/performance.md,
       "TileLang / GEMM + epilogue").

    Today's unsplit plans that the mixed rule keeps (element loads where B past L2 would be
    staged for one row tile; TMA where only the staged plan split) are kept."""
    base = plan_gemm_mixed(m, n, k, esize, tma_ok, aligned_n, misaligned=misaligned)
    if "stage" not in base and base["kernel"] != "splitk":
        return base
    x = TABLE["gemm_next"]
    unsplit = plan_gemm_next(m, n, k, esize, aligned_n, kernel="tma", misaligned=misaligned)
    bm, bn = _tile_by_waves(m, n, (128, 64) if m > 64 else (64,))
    cfg = x["tiles"][(bm, bn)]
    stages = max(1, min(cfg[3], -(-k // cfg[2])))
    unsplit.update(bm=bm, bn=bn, bk=cfg[2], stages=stages, threads=cfg[4])
    plan = unsplit
    if base["kernel"] == "splitk":
        copies = 1 if "stage" in base and base["stage"] else 0
        if _small_us(base, m, n, k, copies) < _small_us(unsplit, m, n, k, 1 if unsplit["stage"] else 0):
            plan = dict(base)
    if len(plan.get("stage", ())) == 2:
        plan["stage_pair"] = True
    return plan


def _small_us(plan: dict, m: int, n: int, k: int, copies: int) -> float:
    """plan_gemm_small's model of a plan's time (µs): the CTAs' waves times the K steps each CTA runs
    (``k_step_us`` a step of a 128 x 128 tile, scaled by the tile's relative cost ``_tile_cost``),
    plus ``launch_us`` a launch (the copies, the GEMM, a split's sum) and a split's fp32 planes
    written and read once (``hbm_bytes_per_us``)."""
    t = TABLE["gemm_small"]
    splits = plan.get("splits", 1) if plan["kernel"] == "splitk" else 1
    tiles = -(-m // plan["bm"]) * -(-n // plan["bn"])
    waves = -(-tiles * splits // SMS)
    steps = -(-(-(-k // plan["bk"])) // splits)
    launches = copies + (2 if splits > 1 else 1)
    planes = 2 * splits * m * n * 4 if splits > 1 else 0
    return (waves * _tile_cost(plan["bm"], plan["bn"], m) * steps * t["k_step_us"] + launches * t["launch_us"]
            + planes / t["hbm_bytes_per_us"])


def _tile_cost(bm: int, bn: int, m: int) -> float:
    """A tile's time a K step relative to a 128 x 128 tile's: its share of the MMAs, 256-column
    tiles at ``wide_cost`` (more reuse of each slice), 64-row tiles at ``narrow_cost`` where M
    could fill 128 rows (one warpgroup issues its MMAs: a lower rate per SM)."""
    cost = bm / 128 * bn / 128
    if bn == 256:
        cost *= TABLE["gemm_next"]["wide_cost"]
    if bm == 64 and m > 64:
        cost *= TABLE["gemm_small"]["narrow_cost"]
    return cost


def _tile_by_waves(m: int, n: int, rows: tuple) -> tuple[int, int]:
    """(bm, bn): of the tiles of ``rows`` rows (in order of preference) by 256 and 128 columns, the
    one whose grid costs least: its waves (tiles / SMs, rounded up) times a tile's time a K step
    (``_tile_cost``); ties: the earlier, larger tile (fewer CTAs)."""
    best = None
    for bm in rows:
        for bn in (256, 128):
            cost = -(-(-(-m // bm) * -(-n // bn)) // SMS) * _tile_cost(bm, bn, m)
            if best is None or cost < best[0]:
                best = (cost, bm, bn)
    return best[1], best[2]


#: the layer contract's table (kltools.plan): the words the default plans among under SWITCHES
VARIANTS = _default_variants()
