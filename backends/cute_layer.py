"""CuTe DSL adapter (nvidia-cutlass-dsl 4.8): registers cute:vector_add, cute:softmax (+ the
softmax_rows / softmax_long / softmax_split variants), cute:gemm (+ gemm_ws, gemm_ws_c2, gemm_pp).

Glue only: availability, which cases each kernel takes (and why not), compile-only facts for
sm_90a without a GPU, and ``prepare`` -> zero-argument launch. The kernels and their launch
wrappers live in ``cutlass_src/``. Compiles are cached per signature (sizes are symbolic), so a
sweep compiles once per dtype / access width / tile bucket.
"""
from __future__ import annotations

import math
import os
import time

from harness import Source, register
from harness.errors import Unsupported

from . import src


def _available() -> str | None:
    try:
        import cutlass_src
    except Exception as e:  # pragma: no cover
        return f"cutlass_src failed to import: {type(e).__name__}: {e}"
    return cutlass_src.unavailable()


def _need():
    why = _available()
    if why:
        raise Unsupported(why)


def _esize(dtype: str) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]


def _overhead_us(fn_factory) -> float | None:
    """Host microseconds per call of the compiled function, measured on a scratch output (so the
    harness's poisoned ``out`` is untouched before its own launch)."""
    try:
        import torch

        call = fn_factory()
        call()
        torch.cuda.synchronize()
        reps = 20
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        dt = (time.perf_counter() - t0) / reps * 1e6
        torch.cuda.synchronize()
        return round(dt, 2)
    except Exception:
        return None


def _info(comp, extra: dict) -> dict:
    info = comp.facts()
    info.update(extra)
    return info


# -- vector_add --------------------------------------------------------------------------------
def _va_align(case) -> int:
    from cutlass_src import align_of

    return align_of(int(case.params.get("misalign", 0)) * _esize(case.dtype))


def _va_compile_only(case):
    _need()
    from cutlass_src import vector_add as va

    comp = va.compile_only(case.torch_dtype, _va_align(case))
    return _info(comp, {"config": {"threads": va.THREADS, "unroll": va.UNROLL,
                                   "vec": max(1, _va_align(case) // _esize(case.dtype))}})


@register(problem="vector_add", layer="cute", name="vector_add",
          description="tiled copy, 128-bit vectors (narrower when misaligned), predicated tail",
          sources=[Source(src("cutlass_src", "vector_add.py"), kernels=None,
                          host=("prepare_vector_add", "_compile", "validate"))],
          devices=("cuda",), available=_available, compile_only=_va_compile_only)
def vector_add_prepare(case, inputs, out):
    _need()
    from cutlass_src import vector_add as va

    x, y = inputs
    try:
        launch, comp, vec = va.prepare_vector_add(x, y, out)
    except (ValueError, TypeError) as e:
        raise Unsupported(str(e)) from None

    def scratch():
        import torch
        o2 = torch.empty_like(out)
        return va.prepare_vector_add(x, y, o2)[0]

    launch.info = _info(comp, {"config": {"threads": va.THREADS, "unroll": va.UNROLL, "vec": vec},
                               "call_overhead_us": _overhead_us(scratch)})
    return launch


def _softmax_launch(prepare, inputs, out, **extra):
    """The launch of one CuTe softmax kernel: ``prepare(x, out)`` -> (launch, compiled, plan);
    its errors become Unsupported; the facts, the plan and the per-call host overhead (measured on
    a scratch output) go into ``launch.info``."""
    (x,) = inputs
    try:
        launch, comp, p = prepare(x, out)
    except (ValueError, TypeError) as e:
        raise Unsupported(str(e)) from None

    def scratch():
        import torch
        return prepare(x, torch.empty_like(out))[0]

    launch.info = _info(comp, {"config": p, **extra, "call_overhead_us": _overhead_us(scratch)})
    return launch


# -- softmax -----------------------------------------------------------------------------------
def _sm_plan(case) -> dict | None:
    from cutlass_src import align_of
    from cutlass_src import softmax as sm
    from harness.problems.softmax import row_pad, start_offset

    es = _esize(case.dtype)
    pad = row_pad(case.params.get("layout", "contiguous"), case.N)
    n = case.N
    off = start_offset(case.params.get("layout", "contiguous")) * es
    align = align_of((n + pad) * es if case.M > 1 else 16, n * es, *([off] if off else []))
    vec = max(1, align // es)
    cfg = sm.config(n, vec)
    if cfg is None:
        return None
    return {"vec": vec, "threads": cfg[0], "k": cfg[1], "cluster": cfg[2]}


def _sm_vec(case) -> int:
    from cutlass_src import align_of
    from harness.problems.softmax import row_pad, start_offset

    es = _esize(case.dtype)
    pad = row_pad(case.params.get("layout", "contiguous"), case.N)
    off = start_offset(case.params.get("layout", "contiguous")) * es
    return max(1, align_of((case.N + pad) * es if case.M > 1 else 16, case.N * es,
                           *([off] if off else [])) // es)


# cute:softmax's dispatcher: which shapes it hands to the variants registered below. From the
# harness run of 2026-11-29 (fp32, % of copy): softmax_rows 70.0 vs the base kernel 57.1 at
# N = 1024, 83.4 vs 84.5 at 2048, 88.2 vs 91.2 at 4096, so rows take N <= ROWS_MAX_N = 1024;
# softmax_long (81.1) lost to the base kernel (86.4) at 131072, so "long" stays off.
# softmax_split (global-memory exchange on a co-resident grid, next chunk prefetched into shared
# memory) takes rows above SPLIT_ABOVE_N: H200 tuning 2026-11-29 (fp32 8192 rows, % of copy): split
# 88.1 / 88.7 / 86.2 vs the cluster kernel 90.7 / 84.0 / 76.7 at N = 65536 / 131072 / 262144.
# KL_CUTE_SOFTMAX_ROUTE=rows,split,long (any subset, or "base") overrides it without a code change.
SOFTMAX_ROUTE = tuple(r for r in os.environ.get("KL_CUTE_SOFTMAX_ROUTE", "rows,split").split(",") if r)
ROWS_MAX_N = 1024
SPLIT_ABOVE_N = 65536


def _sm_route(case) -> str:
    """"rows" | "split" | "long" | "base": the kernel cute:softmax runs for this case."""
    if "rows" in SOFTMAX_ROUTE and case.N <= ROWS_MAX_N and _rows_plan(case) is not None:
        return "rows"
    if "split" in SOFTMAX_ROUTE and case.N > SPLIT_ABOVE_N and _split_plan(case) is not None:
        return "split"
    if "long" in SOFTMAX_ROUTE and _long_plan(case) is not None:
        return "long"
    return "base"


def _sm_supports(case) -> str | None:
    if _available():
        return None
    from cutlass_src import softmax as sm

    if _sm_plan(case) is None and _sm_route(case) != "split":
        return (f"N={case.N} is longer than this kernel keeps on chip "
                f"(<= {sm.MAX_N} elements per row over a cluster of {sm.MAX_CLUSTER} CTAs)")
    return None


def _sm_compile_only(case):
    _need()
    from cutlass_src import softmax as sm

    route = _sm_route(case)
    if route == "rows":
        return _rows_compile_only(case)
    if route == "split":
        return _split_compile_only(case)
    if route == "long":
        return _long_compile_only(case)
    p = _sm_plan(case)
    if p is None:
        raise Unsupported(_sm_supports(case))
    comp = sm._compile(case.torch_dtype, case.torch_dtype, p)
    return _info(comp, {"config": p})


@register(problem="softmax", layer="cute", name="softmax",
          description="dispatcher: softmax_rows for N <= 1024, softmax_split above 65536, else row "
                      "in registers, warp+block reductions, cluster DSMEM reduction for long rows",
          sources=[Source(src("cutlass_src", "softmax.py"), kernels=None,
                          host=("prepare_softmax", "plan", "config", "_compile", "validate"))]
          + ([Source(src("cutlass_src", "softmax_rows.py"), kernels=None,
                     host=("prepare_softmax_rows", "plan", "plan_for", "config", "compile_fitted",
                           "resident_ctas"))] if "rows" in SOFTMAX_ROUTE else [])
          + ([Source(src("cutlass_src", "softmax_split.py"), kernels=None,
                     host=("prepare_softmax_split", "plan", "plan_for", "_compile", "_slots", "threads"))]
             if "split" in SOFTMAX_ROUTE else []),
          devices=("cuda",), available=_available, supports=_sm_supports,
          compile_only=_sm_compile_only)
def softmax_prepare(case, inputs, out):
    _need()
    from cutlass_src import softmax as sm

    route = _sm_route(case)
    if route == "rows":
        return softmax_rows_prepare(case, inputs, out)
    if route == "split":
        return softmax_split_prepare(case, inputs, out)
    if route == "long":
        return softmax_long_prepare(case, inputs, out)
    return _softmax_launch(sm.prepare_softmax, inputs, out)


# -- softmax_rows: short rows, several rows per CTA, next row prefetched -------------------------
def _rows_plan(case) -> dict | None:
    from cutlass_src import softmax_rows as sr

    try:
        return sr.plan_for(case.N, _sm_vec(case))
    except ValueError:
        return None


def _rows_supports(case) -> str | None:
    if _available():
        return None
    from cutlass_src import softmax_rows as sr

    if _rows_plan(case) is None:
        return (f"N={case.N}: short-row kernel (<= {sr.max_n(_sm_vec(case))} elements at this "
                f"access width); longer rows: cute:softmax")
    return None


def _rows_compile_only(case):
    _need()
    from cutlass_src import softmax_rows as sr

    p = _rows_plan(case)
    if p is None:
        raise Unsupported(_rows_supports(case))
    comp, p = sr.compile_fitted(case.torch_dtype, case.torch_dtype, p)
    return _info(comp, {"config": p, "kernel": "softmax_rows"})


@register(problem="softmax", layer="cute", name="softmax_rows",
          description="short rows: a warp (or a few) per row, several rows per CTA, grid-stride "
                      "row loop with the next row's 128-bit loads in flight",
          sources=[Source(src("cutlass_src", "softmax_rows.py"), kernels=None,
                          host=("prepare_softmax_rows", "plan", "plan_for", "config",
                                "compile_fitted", "resident_ctas"))],
          devices=("cuda",), available=_available, supports=_rows_supports,
          compile_only=_rows_compile_only)
def softmax_rows_prepare(case, inputs, out):
    _need()
    from cutlass_src import softmax_rows as sr

    return _softmax_launch(sr.prepare_softmax_rows, inputs, out, kernel="softmax_rows")


# -- softmax_long: 512-thread CTAs, clusters of up to 16, two CTAs per SM --------------------------
def _long_plan(case) -> dict | None:
    from cutlass_src import softmax as sm

    vec = _sm_vec(case)
    cfg = sm.config_long(case.N, vec)
    if cfg is None:
        return None
    return {"vec": vec, "threads": cfg[0], "k": cfg[1], "cluster": cfg[2]}


def _long_supports(case) -> str | None:
    if _available():
        return None
    from cutlass_src import softmax as sm

    if _long_plan(case) is None:
        return (f"N={case.N}: long-row configuration only ({1024 * sm.MAX_PER_THREAD} < N <= "
                f"{sm.max_n_long()}); shorter rows fit one CTA: cute:softmax")
    return None


def _long_compile_only(case):
    _need()
    from cutlass_src import softmax as sm

    p = _long_plan(case)
    if p is None:
        raise Unsupported(_long_supports(case))
    comp = sm._compile(case.torch_dtype, case.torch_dtype, p)
    return _info(comp, {"config": p, "kernel": "softmax_long"})


@register(problem="softmax", layer="cute", name="softmax_long",
          description="long rows: the cluster/DSMEM kernel with 512-thread CTAs (<= 64 regs, two "
                      "CTAs per SM) and clusters of up to 16 (non-portable)",
          sources=[Source(src("cutlass_src", "softmax.py"), kernels=None,
                          host=("prepare_softmax", "plan", "config_long", "_compile", "validate"))],
          devices=("cuda",), available=_available, supports=_long_supports,
          compile_only=_long_compile_only)
def softmax_long_prepare(case, inputs, out):
    _need()
    from cutlass_src import softmax as sm

    return _softmax_launch(lambda x, o: sm.prepare_softmax(x, o, long=True), inputs, out, kernel="softmax_long")


# -- gemm_epilogue -----------------------------------------------------------------------------
# cute:gemm's dispatcher: "" (the non-persistent kernel), "ws", "ws_c2" or "pp" (the persistent
# warp-specialised kernels registered below as cute:gemm_ws / _ws_c2 / _pp). Default "ws_c2": the
# fastest CuTe kernel at every bench shape but 2048^3 (a tie with ws) of the 2026-11-29 H200 run
# (docs/results/h200-2026-11-29/gemm: 710 vs 677 TFLOP/s for the non-persistent kernel at 4096^3).
GEMM_ROUTE = os.environ.get("KL_CUTE_GEMM_ROUTE", "ws_c2")


def _gemm_supports(case) -> str | None:
    if _available():
        return None
    from cutlass_src import gemm_epilogue as ge

    return ge.check(case.M, case.N, case.K, case.torch_dtype)


def _gemm_cfg() -> dict:
    """Tile config; KL_CUTE_GEMM_TILE_N / KL_CUTE_GEMM_STAGES override (scripts/tune_cute.py)."""
    tn = int(os.environ.get("KL_CUTE_GEMM_TILE_N", "256"))
    st = os.environ.get("KL_CUTE_GEMM_STAGES")
    return {"tile_n": tn, "stages": int(st) if st else None}


def _gemm_compile_only(case):
    _need()
    from cutlass_src import gemm_epilogue as ge

    if GEMM_ROUTE in ("ws", "ws_c2"):
        return _ws_compile_only(2 if GEMM_ROUTE == "ws_c2" else 1)(case)
    if GEMM_ROUTE == "pp":
        return _pp_compile_only(case)
    why = ge.check(case.M, case.N, case.K, case.torch_dtype)
    if why:
        raise Unsupported(why)
    cfg = _gemm_cfg()
    comp = ge._compile(case.torch_dtype, case.params.get("act", "relu"),
                       bool(int(case.params.get("bias", 1))), cfg["tile_n"], cfg["stages"])
    return _info(comp, {"config": {"tile": [128, cfg["tile_n"], 64], "warpgroups": 2, **cfg}})


@register(problem="gemm_epilogue", layer="cute", name="gemm",
          description="sm_90a TMA + wgmma multi-stage mbarrier pipeline, bias+act on fp32 accumulators, TMA store",
          sources=[Source(src("cutlass_src", "gemm_epilogue.py"), kernels=None,
                          host=("prepare_gemm", "_compile", "validate", "check"))],
          devices=("cuda",), available=_available, supports=_gemm_supports,
          compile_only=_gemm_compile_only)
def gemm_prepare(case, inputs, out):
    _need()
    from cutlass_src import gemm_epilogue as ge

    if GEMM_ROUTE in ("ws", "ws_c2"):
        return _ws_prepare(2 if GEMM_ROUTE == "ws_c2" else 1)(case, inputs, out)
    if GEMM_ROUTE == "pp":
        return gemm_pp_prepare(case, inputs, out)
    a, b, bias = inputs
    act = case.params.get("act", "relu")
    cfg = _gemm_cfg()
    try:
        launch, comp = ge.prepare_gemm(a, b, bias, out, act, cfg["tile_n"], cfg["stages"])
    except (ValueError, TypeError) as e:
        raise Unsupported(str(e)) from None

    def scratch():
        import torch
        o2 = torch.empty_like(out)
        return ge.prepare_gemm(a, b, bias, o2, act, cfg["tile_n"], cfg["stages"])[0]

    launch.info = _info(comp, {"config": {"tile": [128, cfg["tile_n"], 64], "warpgroups": 2, **cfg},
                               "call_overhead_us": _overhead_us(scratch)})
    return launch


# -- gemm_ws / gemm_ws_c2: persistent, warp-specialised (producer warp + 2 consumer warpgroups) --
def _ws_cfg(cluster_m: int) -> dict:
    tn = int(os.environ.get("KL_CUTE_GEMM_TILE_N", "256"))
    return {"tile": [128, tn, 64], "tile_n": tn, "cluster": [cluster_m, 1],
            "threads": 384, "roles": "wg0: TMA producer (40 regs); wg1-2: wgmma + epilogue (232 regs)"}


def _ws_compile_only(cluster_m: int):
    def fn(case):
        _need()
        from cutlass_src import gemm_ws as gw

        why = gw.check(case.M, case.N, case.K, case.torch_dtype)
        if why:
            raise Unsupported(why)
        cfg = _ws_cfg(cluster_m)
        comp = gw._compile(case.torch_dtype, case.params.get("act", "relu"),
                           bool(int(case.params.get("bias", 1))), cfg["tile_n"], cluster_m)
        return _info(comp, {"config": {**cfg, "persistent_clusters": comp.key[6]}})
    return fn


def _ws_prepare(cluster_m: int):
    def prepare(case, inputs, out):
        _need()
        from cutlass_src import gemm_ws as gw

        a, b, bias = inputs
        act = case.params.get("act", "relu")
        cfg = _ws_cfg(cluster_m)
        try:
            launch, comp = gw.prepare_gemm_ws(a, b, bias, out, act, cfg["tile_n"], cluster_m)
        except (ValueError, TypeError) as e:
            raise Unsupported(str(e)) from None

        def scratch():
            import torch
            o2 = torch.empty_like(out)
            return gw.prepare_gemm_ws(a, b, bias, o2, act, cfg["tile_n"], cluster_m)[0]

        launch.info = _info(comp, {"config": {**cfg, "persistent_clusters": comp.key[6]},
                                   "call_overhead_us": _overhead_us(scratch)})
        return launch
    return prepare


_WS_SOURCES = [Source(src("cutlass_src", "gemm_ws.py"), kernels=None,
                      host=("prepare_gemm_ws", "_compile", "max_clusters")),
               Source(src("cutlass_src", "gemm_epilogue.py"), kernels=("apply_act",),
                      host=("validate", "check"))]
register(problem="gemm_epilogue", layer="cute", name="gemm_ws",
         description="persistent + warp-specialised sm_90a GEMM: TMA producer warp, two wgmma "
                     "consumer warpgroups, bias+act epilogue overlapping the next tile's loads",
         sources=_WS_SOURCES, devices=("cuda",), available=_available, supports=_gemm_supports,
         compile_only=_ws_compile_only(1))(_ws_prepare(1))
register(problem="gemm_epilogue", layer="cute", name="gemm_ws_c2",
         description="gemm_ws with 2x1 clusters: B tiles multicast by TMA to both CTAs",
         sources=_WS_SOURCES, devices=("cuda",), available=_available, supports=_gemm_supports,
         compile_only=_ws_compile_only(2))(_ws_prepare(2))


# -- gemm_pp: persistent, warp-specialised, ping-pong consumers (one tile per warpgroup) ---------
def _pp_cfg() -> dict:
    """KL_CUTE_GEMM_PP_TILE_N: 128 (default) or 64 - a warpgroup holds the whole 128 x N tile's
    fp32 accumulators, so 256 would not fit its 232 registers."""
    tn = int(os.environ.get("KL_CUTE_GEMM_PP_TILE_N", "128"))
    if tn not in (64, 128):
        raise Unsupported(f"KL_CUTE_GEMM_PP_TILE_N={tn}: gemm_pp takes 64 or 128")
    return {"tile": [128, tn, 64], "tile_n": tn, "per": "warpgroup", "threads": 384,
            "roles": "wg0: TMA producer; wg1, wg2: alternate tiles (mainloop of one over the other's epilogue)"}


def _pp_compile_only(case):
    _need()
    from cutlass_src import gemm_pp as gp

    why = gp.check(case.M, case.N, case.K, case.torch_dtype)
    if why:
        raise Unsupported(why)
    cfg = _pp_cfg()
    comp = gp._compile(case.torch_dtype, case.params.get("act", "relu"),
                       bool(int(case.params.get("bias", 1))), cfg["tile_n"])
    return _info(comp, {"config": {**cfg, "persistent_ctas": comp.key[6]}})


@register(problem="gemm_epilogue", layer="cute", name="gemm_pp",
          description="persistent ping-pong sm_90a GEMM: TMA producer warp, two consumer "
                      "warpgroups on alternate 128x128 tiles, one's epilogue under the other's wgmma",
          sources=[Source(src("cutlass_src", "gemm_pp.py"), kernels=None,
                          host=("prepare_gemm_pp", "_compile")),
                   Source(src("cutlass_src", "gemm_ws.py"), kernels=("raster",), host=("max_clusters",)),
                   Source(src("cutlass_src", "gemm_epilogue.py"), kernels=("apply_act",),
                          host=("validate", "check"))],
          devices=("cuda",), available=_available, supports=_gemm_supports,
          compile_only=_pp_compile_only)
def gemm_pp_prepare(case, inputs, out):
    _need()
    from cutlass_src import gemm_pp as gp

    a, b, bias = inputs
    act = case.params.get("act", "relu")
    cfg = _pp_cfg()
    try:
        launch, comp = gp.prepare_gemm_pp(a, b, bias, out, act, cfg["tile_n"])
    except (ValueError, TypeError) as e:
        raise Unsupported(str(e)) from None

    def scratch():
        import torch
        o2 = torch.empty_like(out)
        return gp.prepare_gemm_pp(a, b, bias, o2, act, cfg["tile_n"])[0]

    launch.info = _info(comp, {"config": {**cfg, "persistent_ctas": comp.key[6]},
                               "call_overhead_us": _overhead_us(scratch)})
    return launch


# -- softmax_split: long rows in registers of a co-resident grid, (max, sum) through global slots -----
def _split_plan(case) -> dict | None:
    from cutlass_src import softmax_split as ss

    try:
        return ss.plan_for(case.M, case.N, _sm_vec(case))
    except ValueError:
        return None


def _split_supports(case) -> str | None:
    if _available():
        return None
    from cutlass_src import softmax_split as ss

    try:
        ss.plan_for(case.M, case.N, _sm_vec(case))
    except ValueError as e:
        return f"split kernel: {e}"
    return None


def _split_compile_only(case):
    _need()
    from cutlass_src import softmax_split as ss

    p = _split_plan(case)
    if p is None:
        raise Unsupported(_split_supports(case))
    comp = ss._compile(case.torch_dtype, case.torch_dtype, p)
    return _info(comp, {"config": p, "kernel": "softmax_split"})


@register(problem="softmax", layer="cute", name="softmax_split",
          description="long rows: 16384-column chunks in the registers of a cooperative persistent "
                      "grid (2 CTAs per SM), (max, sum) exchanged as one 64-bit word per chunk in "
                      "global memory, bounded spin",
          sources=[Source(src("cutlass_src", "softmax_split.py"), kernels=None,
                          host=("prepare_softmax_split", "plan", "plan_for", "_compile", "_slots",
                                "threads"))],
          devices=("cuda",), available=_available, supports=_split_supports,
          compile_only=_split_compile_only)
def softmax_split_prepare(case, inputs, out):
    _need()
    from cutlass_src import softmax_split as ss

    return _softmax_launch(ss.prepare_softmax_split, inputs, out, kernel="softmax_split")
