"""The TileLang layer's planner: rules over facts (bytes per row, alignment, tiles against SMs),
and the plain-data table they read. Planning is one way: this module imports the variants' builders
through the adapter; the variants never import it.
"""
from __future__ import annotations

SMS = 132                      # H200 streaming multiprocessors (the grid rules' unit)

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
    # (bm, bn, bk, stages, threads): "wide" (bn = 256) while its tiles fill wide_fill of a wave,
    # else the 128-column tile; 64-row tiles for M <= 64; "tiled" = the element-load pipeline
    "gemm": {"wide": (128, 256, 64, 3, 256), "large": (128, 128, 128, 3, 256),
             "narrow_wide": (64, 256, 64, 3, 128), "narrow": (64, 128, 64, 4, 128),
             "tiled": (128, 256, 32, 2, 256), "tiled_narrow": (64, 128, 32, 2, 128),
             "wide_fill": 0.75, "splitk_tile": (128, 128, 64, 4, 256),
             # split K when at least two splits of every tile fit one wave; each split keeps
             # at least min_k_tiles K tiles (the pipeline's prologue is paid per split)
             "max_splits": 16, "min_k_tiles": 4},
}


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ----------
def _src(file: str, *kernels: str):
    from kltools.plan import Source
    return (Source(f"tilelang_src/{file}", kernels=kernels),)


#: the variants the defaults plan among, by algorithm word: the kernel builders' files and names
#: (the adapter, backends/tilelang_layer.py, compiles and binds every plan). "simple": the twin's
#: element kernel, which the vector add takes for misaligned views; "tiled": the TMA kernel's
#: pipeline fed by guarded element loads
VARIANTS = {
    "vector_add": {"unmasked": _src("vector_add_unmasked.py", "vector_add_unmasked_kernel"),
                   "simple": _src("vector_add.py", "vector_add_kernel")},
    "softmax": {"rows": _src("softmax_rows.py", "softmax_rows_kernel"),
                "split": _src("softmax_split.py", "softmax_split_stats_kernel", "softmax_split_write_kernel"),
                "smem": _src("softmax_smem.py", "softmax_smem_kernel"),
                "online": _src("softmax_online.py", "softmax_online_kernel")},
    "gemm_epilogue": {"tma": _src("gemm_epilogue_tma.py", "gemm_tma_kernel"),
                      "tiled": _src("gemm_epilogue_tma.py", "gemm_tma_kernel")
                      + _src("gemm_epilogue_tiled.py", "load_tiles_guarded"),
                      "splitk": _src("gemm_epilogue_splitk.py", "gemm_splitk_partial_kernel",
                                     "gemm_splitk_epilogue_kernel")},
}


def plan(problem: str, facts):
    """The default's plan (``tilelang:<problem>``) for one case given as ``kltools.plan.Facts``:
    ``plan_*``'s kernel and configuration on the case's sizes and its operands' alignment."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    ops, es = facts.operands, facts.esize
    if problem == "vector_add":
        cfg = plan_vector_add(facts.N, es, all(ops[n].addr16 == 0 for n in ("x", "y", "out")))
    elif problem == "softmax":
        cfg = plan_softmax(facts.M, facts.N, es)
    else:
        tma_ok = facts.N * es % 16 == 0 and facts.K * es % 16 == 0 and \
            all(ops[n].addr16 == 0 for n in ("a", "b", "out"))
        cfg = plan_gemm(facts.M, facts.N, facts.K, es, tma_ok)
    return make_plan(problem, cfg["kernel"], VARIANTS, cfg)


def plan_vector_add(n: int, esize: int, aligned: bool) -> dict:
    """16-byte vectors in full tiles where every pointer is 16-byte aligned; element accesses
    (the twin's kernel) otherwise."""
    t = TABLE["vector_add"]
    if not aligned:
        return {"kernel": "simple"}
    return {"kernel": "unmasked", "threads": t["threads"], "vec": t["bytes_per_access"] // esize, "unroll": t["unroll"]}


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def plan_softmax(m: int, n: int, esize: int, kernel: str | None = None, vector: bool = False,
                 aligned: bool = False) -> dict:
    """rows: whole rows in registers (cols = the power of two >= N, ``elems_per_thread`` fp32
    values a thread; short rows several to a CTA so a CTA holds ``rows_cta_cols`` columns);
    smem: longer rows staged raw in a CTA's shared memory (the row rounded up to ``smem_tile``
    columns, at most ``smem_max_bytes``), a CTA per row, while the rows cover half the SMs;
    online: rows longer than that streamed twice in tiles, a CTA per row, as long;
    split: fewer long rows, C CTAs per row (C = the CTAs that fill the SMs twice over, at most a
    chunk per tile).

    ``vector``: the 16-byte-vector forms of rows, smem and online (``vec`` elements a group; the
    variants' kernels, not yet run on a GPU, so the default does not ask for them yet). Their
    rows are flat spans from the 16-byte group at or below each row's start: ``cols`` then covers
    the row plus one group of slack unless every row starts on 16 bytes (``aligned``), rounded up
    to the CTA's width (threads x vec; smem: to the tile)."""
    t = TABLE["softmax"]
    vec = 16 // esize
    span = n + (0 if aligned or not vector else vec - 1)
    cols = max(_pow2_at_least(span), 32)
    if kernel is None:
        if cols <= t["max_cols"]:
            kernel = "rows"
        elif m < SMS // 2:
            kernel = "split"
        elif -(-n // t["smem_tile"]) * t["smem_tile"] * esize <= t["smem_max_bytes"]:
            kernel = "smem"
        else:
            kernel = "online"
    choice = kernel
    if choice == "rows":
        if cols > t["max_cols"]:
            raise ValueError(f"N: softmax_rows holds rows of at most {t['max_cols']} columns, not {n}")
        if cols <= t["warp_cols"]:
            threads, rows = 32, max(1, min(t["warp_rows"], t["warp_cta_cols"] // cols))
        else:
            threads, rows = min(t["max_threads"], cols // t["elems_per_thread"]), 1
        if vector:
            width = threads * vec
            return {"kernel": "rows", "cols": -(-span // width) * width, "rows": rows, "threads": threads, "vec": vec}
        return {"kernel": "rows", "cols": cols, "rows": rows, "threads": threads}
    if choice == "online":
        tile, threads = t["online"][4 if esize >= 4 else 2]
        if vector:
            return {"kernel": "online", "tile": tile, "threads": threads, "vec": vec}
        return {"kernel": "online", "tile": tile, "threads": threads}
    if choice == "smem":
        scols = -(-span // t["smem_tile"]) * t["smem_tile"]
        if scols * esize > t["smem_max_bytes"]:
            raise ValueError(f"N: softmax_smem stages rows of at most {t['smem_max_bytes']} bytes, not {n} x {esize}")
        if vector:
            return {"kernel": "smem", "cols": scols, "tile": t["smem_tile"], "threads": t["smem_threads"], "vec": vec}
        return {"kernel": "smem", "cols": scols, "tile": t["smem_tile"], "threads": t["smem_threads"]}
    if choice == "split":
        tiles = -(-n // t["split_tile"])
        chunks = max(1, min(tiles, -(-t["split_ctas_per_sm"] * SMS // m)))
        return {"kernel": "split", "tile": t["split_tile"], "threads": t["split_threads"], "chunks": chunks}
    if choice == "simple":
        return {"kernel": "simple"}
    raise ValueError(f"kernel: rows, smem, online, split or simple, not {kernel!r}")


def plan_gemm(m: int, n: int, k: int, esize: int, tma_ok: bool, kernel: str | None = None,
              stage_bias: bool = False) -> dict:
    """TMA + wgmma pipeline where A's and B's rows are 16-byte multiples (TMA's stride rule) and
    the pointers are aligned; guarded element loads into the same pipeline otherwise. 64-row tiles
    for M <= 64; 256-column tiles where they still fill ``wide_fill`` of a wave (fewer, larger
    tiles: more reuse of each A and B slice), 128 columns otherwise; split K over S CTAs per tile
    where the tiles leave more than half the SMs idle (S = SMs // tiles, so the splits still fit
    one wave).

    ``stage_bias``: the TMA pipeline reads the tile's bias slice from shared memory (staged once)
    instead of a guarded global load per accumulator element, which spills the wide tile (the
    ``tilelang:gemm_epilogue_tma`` variant; not yet run on a GPU, so the default does not ask
    for it yet)."""
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
    if stage_bias and use_tma:
        plan["stage_bias"] = True
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
