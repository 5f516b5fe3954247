#!/usr/bin/env python3
"""The Triton layer on one GPU, in at most ~2.5 minutes: verify, then time the dispatch's choices.

Run from the repository root after the offline build (``python3 -m pip install -q
--no-build-isolation --no-deps --no-index -e .``)::

    python3 scripts/gpu_triton.py [--suite edge|models] [--budget 140] [--only softmax,gemm_epilogue] [--jobs 14]

``--suite edge`` (the default) works on the edge suite's classes (issue 35: few rows of long rows,
tiny totals, very short rows, GEMMs with odd dimensions under 1024, skinny M, small K) and on
off-suite shapes of the same classes (``EDGE_EXTRA``); the candidates are ``edge_candidates``
(what the rules for those classes choose between), timed beside torch eager and, for the
off-suite shapes while the budget allows, torch.compile. ``--suite models``: the models suite and
``EXTRA``, with ``candidates``.

Phases, each bounded by a share of the budget (what does not fit is listed as not run):
0. Facts: GPU, versions, copy ceiling (1 GiB device copy).
1. Compile ahead: every launch spec that phases 2-3 will bind, compiled for sm_90 in a pool of
   processes (``backends.triton_layer.specs_for`` on meta tensors, the same specialisation as the
   launch), so that the Triton cache is warm and the later binds load instead of compiling.
2. Verify every ``triton:*`` id against the float64 reference on the verify suite and on the
   models suite (one seed; GEMMs of more than 256 rows checked on 256 sampled rows). FAIL rows are
   printed with their reasons. Defaults first, then the twins, then the variants.
3. Time candidates (the alternatives each dispatch rule chooses between) on the models shapes and
   off-suite shapes of the same classes, interleaved with the torch eager op of the same case
   (``harness.timing.time_cold``, 0.3 s cap): GB/s and % of the copy ceiling (vector add,
   softmax), TFLOP/s and speed-up over torch (GEMM), host us per call.
Writes ``$OUT/gpu_triton.json`` (default ./gpu_out) after every step, prints a table last.
One failing kernel costs its row only (try/except per row); the split kernel's spin is bounded.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULT: dict = {"facts": {}, "compile": {}, "verify": [], "timing": [], "not_run": []}
OUT = Path(os.environ.get("OUT") or "gpu_out") / "triton"
T0 = time.perf_counter()


def now() -> float:
    return time.perf_counter() - T0


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "gpu_triton.json").write_text(json.dumps(RESULT, indent=1, default=str))


def short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"


# -- what to run -------------------------------------------------------------------------------
IDS = {"vector_add": ["vector_add", "vector_add_simple"],
       "softmax": ["softmax", "softmax_simple", "softmax_block", "softmax_rows", "softmax_online",
                   "softmax_split"],
       "gemm_epilogue": ["gemm_epilogue", "gemm_epilogue_simple", "gemm_epilogue_tiled",
                         "gemm_epilogue_tma", "gemm_epilogue_splitk"]}

#: off-suite shapes of the models suite's classes (results are checked on shapes nobody shows)
EXTRA = {
    "vector_add": [dict(N=100_000_001, dtype="bfloat16"), dict(N=2 ** 28), dict(N=3 * 2 ** 20 + 7, dtype="float16")],
    "softmax": [dict(M=2000, N=50_000, dtype="float16"), dict(M=1, N=262_147), dict(M=65_536, N=128, dtype="bfloat16"),
                dict(M=8192, N=50_257, dtype="bfloat16"), dict(M=8192, N=32_000, dtype="float16"),
                dict(M=16_384, N=4096, dtype="bfloat16"), dict(M=4096, N=65_536, dtype="bfloat16"),
                dict(M=4096, N=20_000),
                # rows Triton cannot prove 16-byte aligned (N not a multiple of 16): the frame
                dict(M=4096, N=1000, dtype="bfloat16"), dict(M=8192, N=3000, dtype="float16"),
                dict(M=2048, N=5000, dtype="bfloat16"), dict(M=16_384, N=781, dtype="bfloat16"),
                dict(M=4096, N=30_001, dtype="bfloat16"), dict(M=65_536, N=100, dtype="bfloat16"),
                dict(M=4096, N=50_257, dtype="float32"), dict(M=1823, N=781)],
    "gemm_epilogue": [dict(M=32, N=5000, K=3000, act="gelu"), dict(M=300, N=2000, K=1000),
                      dict(M=2048, N=50_257, K=1024, act="none"), dict(M=1000, N=4000, K=3000, act="gelu"),
                      dict(M=128, N=8192, K=8192, dtype="float16"), dict(M=1, N=4096, K=4096, act="none")],
}


@contextlib.contextmanager
def frame_as(cfg):
    """A ``_noframe`` candidate: the dispatch's own plan (config None) with ``triton_src.FRAME``
    off while it is specialised or bound; any other: unchanged."""
    import triton_src
    if not (cfg and cfg.get("_noframe")):
        yield cfg
        return
    triton_src.FRAME = False
    try:
        yield None
    finally:
        triton_src.FRAME = True


def specs(problem, variant, case, cfg):
    """``triton_layer.specs_for``, the ``_noframe`` candidates without the frame."""
    from backends import triton_layer as T
    if variant == "plain" and cfg is not None:   # the plain kernel with this config
        from triton_src import dispatch
        a, b, bias, act, out = T._meta_gemm(case)
        return [dispatch.plain_spec(a, b, bias, act, out, cfg)]
    with frame_as(cfg) as c:
        return T.specs_for(problem, variant, case, c)


def candidates(problem: str, case) -> list[tuple[str, str, dict | None]]:
    """(label, variant, config or None for dispatch's) to time for ``case``: the default, the twin,
    and the alternatives the rule for this case's class chooses between."""
    from triton_src import H200, dispatch, next_pow2
    out = [("default", "default", None), ("simple", "simple", None)]
    if problem == "vector_add":
        from triton_src import vector_add_unmasked as V
        es = case.torch_dtype.itemsize
        for bpt, w in ((16, 4), (32, 4), (64, 4), (32, 8), (64, 8), (16, 8)):
            out.append((f"unmasked {bpt}B/thread w{w}", "default", V.config(case.N, es, bpt, w)))
        return out
    if problem == "softmax":
        from triton_src import softmax_block as B
        from triton_src import softmax_online as O
        from triton_src import softmax_rows as R
        from triton_src import softmax_split as S
        M, N, es = case.M, case.N, case.torch_dtype.itemsize
        cols = max(16, next_pow2(N))
        if N % 16:
            out.append(("default, no frame", "default", {"_noframe": True}))
        if N * es <= 8192:
            for tile in (1024, 2048, 4096):
                out.append((f"rows tile {tile}", "rows", R.config(N, tile, 16, 1)))
            out.append(("rows tile 1024 persistent 2 stages", "rows", R.config(N, 1024, 16, 2, True)))
        if cols <= 32768:
            for w in (4, 8, 16):
                if cols // (32 * w) <= 64:
                    out.append((f"block w{w}", "block", B.config(N, w)))
        if N * es > 4096:
            for blk, w, st in ((8192, 16, 2), (8192, 16, 1), (4096, 8, 2), (16384, 16, 2)):
                for k in (1, 2, 4):
                    if blk <= max(16, next_pow2(N)) or blk == 4096:
                        out.append((f"online {blk}/w{w}/s{st} x{k}/SM", "online",
                                    O.config(N, blk, w, st, H200["sms"] * k)))
        if N >= S.MIN_N:
            base = dispatch.softmax_split_config(M, N, es, H200)
            for chunk in sorted({base["CHUNK"], 2048, 4096, 8192, 16384}):
                if chunk <= 32768 and chunk * 2 <= max(32768, 2 * N):
                    out.append((f"split {chunk}" + (" (rule)" if chunk == base["CHUNK"] else ""), "split",
                                S.config(N, chunk, dispatch.split_warps(chunk, es))))
            w = base["num_warps"]
            out.append((f"split {base['CHUNK']} w x2", "split", S.config(N, base["CHUNK"], min(16, 2 * w))))
            if w > 1:
                out.append((f"split {base['CHUNK']} w /2", "split", S.config(N, base["CHUNK"], w // 2)))
        return out
    # GEMM
    M, N, K = case.M, case.N, case.K
    aligned = N % 8 == 0 and K % 8 == 0
    out += [("tiled (rule)", "tiled", None)]
    if N % 8 == 0 and K % 8 == 0:
        for c in dispatch.GEMM["tma"]:
            out.append((f"tma {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']}", "tma", c))
    for c in dispatch.GEMM["tiled" if aligned else "tiled_unaligned"]:
        out.append((f"tiled {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']}", "tiled", c))
    if M <= 256:
        bm = max(16, next_pow2(min(M, 64)))
        shapes = ((64, 128, 4), (128, 64, 3)) if aligned else ((64, 64, 3), (128, 32, 3))
        for bn, bk, st in shapes:
            rule = dispatch.gemm_narrow_config(M, N, K, H200, aligned)["SPLIT"] if M <= 64 else 1
            for split in sorted({1, 2, 3, 4, 8, rule}):
                cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 1, "num_stages": st,
                       "num_warps": 4, "eff": 1.0, "SPLIT": split}
                out.append((f"splitk {bm}x{bn}x{bk} s{st} S{split}", "splitk", cfg))
    return out


#: off-suite shapes of the edge suite's classes (issue 35's measured gaps among them), in the order
#: they are timed (the budget may stop the list)
EDGE_EXTRA = {
    "gemm_epilogue": [dict(M=333, N=777, K=999, dtype="float16", act="gelu"),       # every dim odd
                      dict(M=77, N=18_944, K=3_584, act="gelu"),                     # skinny M
                      dict(M=512, N=1000, K=4000, dtype="float16", act="relu"),      # a fraction of a wave
                      dict(M=200, N=3001, K=517, dtype="bfloat16", act="gelu"),      # odd, over 128 rows
                      dict(M=128, N=11_008, K=4_096, dtype="float16", act="none", bias=0),
                      dict(M=1000, N=4000, K=3000, act="gelu")],
    "softmax": [dict(M=100_000, N=64, dtype="bfloat16"), dict(M=128, N=50_257, dtype="bfloat16"),
                dict(M=64, N=65_536, dtype="float16"), dict(M=1, N=1_000_000),
                dict(M=16, N=131_072, dtype="bfloat16"), dict(M=200_000, N=32, dtype="float16"),
                dict(M=32, N=32_000)],
    "vector_add": [dict(N=1_000_003, dtype="bfloat16")],
}


def edge_candidates(problem: str, case) -> list[tuple[str, str, dict | None]]:
    """(label, variant, config or None for dispatch's) to time on an edge-class case: the default,
    the twin, and the configurations a rule on waves (tiles / 132 SMs), bytes per row and
    alignment could pick for that class."""
    from triton_src import H200, dispatch, next_pow2
    out = [("default", "default", None), ("simple", "simple", None)]
    if problem == "vector_add":
        from triton_src import vector_add_unmasked as V
        es = case.torch_dtype.itemsize
        return out + [(f"unmasked {bpt}B/thread w{w}", "default", V.config(case.N, es, bpt, w))
                      for bpt, w in ((16, 4), (32, 4), (16, 8))]
    if problem == "softmax":
        from triton_src import softmax_block as B
        from triton_src import softmax_online as O
        from triton_src import softmax_rows as R
        from triton_src import softmax_split as S
        M, N, es = case.M, case.N, case.torch_dtype.itemsize
        cols = max(16, next_pow2(N))
        if N % 16 and N <= 32768:
            out.append(("default, no frame", "default", {"_noframe": True}))
        if N <= 1024:   # short rows: block size and values a thread (warps) of the rows kernel
            for tile in (1024, 2048, 4096):
                for vpt in (16, 8):
                    if tile // (32 * vpt) <= 16:   # at most 16 warps
                        out.append((f"rows tile {tile} vpt {vpt}", "rows", R.config(N, tile, vpt, 1)))
            out.append(("rows tile 2048 vpt 16 persistent s2", "rows", R.config(N, 2048, 16, 2, True)))
        elif cols <= 32768:
            for w in (2, 4, 8, 16):
                if 4 <= cols // (32 * w) <= 64:
                    out.append((f"block w{w}", "block", B.config(N, w)))
            if cols <= 8192:
                for tile in (4096, 8192):
                    out.append((f"rows tile {tile} vpt 16", "rows", R.config(N, tile, 16, 1)))
        if N >= S.MIN_N:
            base = dispatch.softmax_split_config(M, N, es, H200)
            for chunk in sorted({base["CHUNK"], 1024, 2048, 4096, 8192, 16384}):
                if chunk <= dispatch.SOFTMAX["split_max_chunk"][es] and S.config(N, chunk, 1)["C"] <= 1024:
                    w = dispatch.split_warps(chunk, es)
                    out.append((f"split {chunk} w{w}" + (" (rule)" if chunk == base["CHUNK"] else ""), "split",
                                S.config(N, chunk, w)))
                    if chunk <= 2048:
                        out.append((f"split {chunk} w{2 * w}", "split", S.config(N, chunk, 2 * w)))
            for blk, w, k in ((8192, 16, 1), (8192, 16, 4), (4096, 8, 2)):
                out.append((f"online {blk}/w{w}/s2 x{k}/SM", "online", O.config(N, blk, w, 2, H200["sms"] * k)))
        return out
    # GEMM
    M, N, K = case.M, case.N, case.K
    es = case.torch_dtype.itemsize
    aligned = dispatch.gemm_aligned(es, 8 if K % 8 == 0 else (2 if K % 2 == 0 else 1),
                                    8 if N % 8 == 0 else (2 if N % 2 == 0 else 1))
    tma = N % 8 == 0 and K % 8 == 0

    def plain(bm, bn, bk, w, st):
        return (f"plain {bm}x{bn}x{bk} s{st} w{w}", "plain",
                {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": st})

    def splitk(bm, bn, bk, st, w, split, group=1):
        return (f"splitk {bm}x{bn}x{bk} s{st} w{w} S{split}", "splitk",
                {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "num_stages": st,
                 "num_warps": w, "eff": 1.0, "SPLIT": split})

    if not aligned:
        out += [plain(128, 128, 32, 4, 3), plain(64, 128, 32, 4, 3), plain(64, 64, 32, 4, 3),
                plain(64, 64, 64, 4, 3), plain(32, 64, 32, 4, 3)]
        for split in (2, 4):
            out.append(splitk(64, 128, 32, 3, 4, split, 8))
            out.append(splitk(64, 64, 64, 3, 4, split, 8))
        if M <= 128:
            bm = max(16, next_pow2(M))
            out += [splitk(bm, 64, 64, 3, 4, s) for s in (1, 2)]
        return out
    if tma:
        for c in dispatch.GEMM["tma"]:
            out.append((f"tma {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']}", "tma", c))
    if M > 128:
        for c in dispatch.GEMM["tiled"]:
            out.append((f"tiled {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']}", "tiled", c))
    if K <= 256:
        return out
    if M <= 128:   # skinny: narrow tiles streaming B, split by waves
        for bm in sorted({max(16, next_pow2(min(M, 64))), max(16, next_pow2(M))}):
            for bn, bk, st, splits in ((64, 128, 4, (1, 2, 3, 4)), (128, 64, 4, (1, 2))):
                if (bm + bn) * bk * 2 * st > 220 * 1024:
                    st = 3
                for split in splits:
                    out.append(splitk(bm, bn, bk, st, 4, split))
    else:   # a fraction of a wave or a few waves: smaller tiles or split-K
        for split in (2, 3, 4):
            out.append(splitk(64, 128, 64, 4, 4, split, 8))
        out.append(splitk(128, 128, 64, 4, 4, 2, 8))
        out += [("tiled 64x64x64 s4 w4", "tiled", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8,
                                                    "num_stages": 4, "num_warps": 4, "eff": 1.0})]
        out += [splitk(64, 64, 64, 4, 4, s, 8) for s in (2, 4)]
    return out


# -- phase 1: compile ahead ----------------------------------------------------------------------
def _precompile(job, index=None):
    """In a pool process (no CUDA): compile the specs of one (problem, variant, case, cfg), or
    only its spec number ``index``."""
    problem, variant, case_json, cfg = job
    try:
        from backends import triton_layer as T
        from harness.case import Case
        case = Case.from_json(case_json)
        t = time.perf_counter()
        for i, spec in enumerate(specs(problem, variant, case, cfg)):
            if index is None or i == index:
                T.compile_spec(spec, ptxas=False)
        return None, time.perf_counter() - t
    except Exception as e:
        return short(e), 0.0


def spec_key(spec) -> str:
    """What Triton's cache tells apart, roughly: the kernel, the constexprs, each tensor's dtype,
    each integer's specialisation (1, a multiple of 16, 64-bit) and the options; two jobs with the
    same key compile once."""
    import torch
    parts = [getattr(spec.kernel, "__name__", str(spec.kernel)), sorted(spec.options.items())]
    for k in sorted(spec.args):
        v = spec.args[k]
        if isinstance(v, torch.Tensor):
            parts.append((k, str(v.dtype)))
        elif isinstance(v, bool) or v is None or not isinstance(v, int):
            parts.append((k, repr(v)))
        else:
            parts.append((k, "i", v == 1, v % 16 == 0, abs(v) >= 2 ** 31))
    return json.dumps(parts, default=str)


def compile_ahead(jobs, deadline: float, workers: int) -> None:
    t = now()
    done = errors = 0
    seen, unique = set(), []
    for j in jobs:
        try:
            keys = [spec_key(s) for s in specs(*j[:2], __import__("harness.case", fromlist=["Case"]).Case.from_json(j[2]), j[3])]
        except Exception:
            keys = [json.dumps(j, sort_keys=True, default=str)]
        for i, key in enumerate(keys):
            if key not in seen:
                seen.add(key)
                unique.append((j, i))
    try:
        import multiprocessing as mp
        ex = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
        futs = [ex.submit(_precompile, j, i) for j, i in unique]
        finished, pending = wait(futs, timeout=max(1.0, deadline - now()))
        for f in finished:
            err, _ = f.result()
            done += 1
            errors += bool(err)
        # specs not compiled by now are compiled when they are bound
        ex.shutdown(wait=not pending, cancel_futures=True)
    except Exception as e:
        RESULT["compile"]["error"] = short(e)
    RESULT["compile"].update(jobs=len(unique), done=done, errors=errors, seconds=round(now() - t, 1))
    print(f"compile ahead: {done}/{len(unique)} specs in {now() - t:.0f} s ({errors} errors)", flush=True)
    save()


# -- phase 2: verify -----------------------------------------------------------------------------
def verify_case_all(problem, case, ids, suite, deadline) -> None:
    import torch

    from harness import registry
    from harness.verify import Launcher, check_output
    prob = RESULT["_problems"][problem]
    inputs = prob.make_inputs(case, "cuda", 0)
    sample = None
    if problem == "gemm_epilogue" and case.M > 256:
        sample = torch.linspace(0, case.M - 1, 256, device="cuda").round().long().unique()
        a, b, bias = inputs
        ref = prob.reference((a[sample], b, bias), case)
    else:
        ref = prob.reference(inputs, case)
    for iid in ids:
        row = {"suite": suite, "problem": problem, "case": case.label, "impl": f"triton:{iid}"}
        if now() > deadline:
            RESULT["not_run"].append(f"verify {row['impl']} {case.label}: budget")
            continue
        impl = registry.get(problem, f"triton:{iid}")
        why = impl.supports(case)
        if why:
            row.update(status="SKIP", reason=why)
        else:
            try:
                t = time.perf_counter()
                L = Launcher(impl, prob, case, inputs, "cuda")
                got, launch = L.run(), L.launch
                c = check_output(prob, case, got[sample] if sample is not None else got, ref)
                row.update(status="PASS" if c.ok else "FAIL", reason=c.reason, rel_err=c.rel_err,
                           seconds=round(time.perf_counter() - t, 2),
                           info={k: v for k, v in (getattr(launch, "info", {}) or {}).items()
                                 if isinstance(v, (int, float, str, dict, list))})
            except Exception as e:
                row.update(status="SKIP" if type(e).__name__ == "Unsupported" else "FAIL", reason=short(e))
                if row["status"] == "FAIL":
                    row["trace"] = traceback.format_exc()[-1500:]
        RESULT["verify"].append(row)
        if row["status"] == "FAIL":
            print(f"FAIL {row['impl']} {suite} {case.label}: {row['reason']}", flush=True)
    del inputs, ref
    torch.cuda.empty_cache()


# -- phase 3: timing -----------------------------------------------------------------------------
def bound_launch(problem, variant, cfg, case, inputs, out):
    """A zero-argument launch of (variant, cfg) on these tensors: the registered id's prepare when
    cfg is None, else the variant module's bind_launch with that config."""
    from harness import registry
    from triton_src import dispatch
    if cfg is not None and cfg.get("_noframe"):
        with frame_as(cfg) as c:
            return bound_launch(problem, variant, c, case, inputs, out)
    if cfg is None:
        name = problem if variant == "default" else f"{problem}_{variant}"
        return registry.get(problem, f"triton:{name}").prepare(case, inputs, out)
    if problem == "vector_add":
        from triton_src import vector_add_unmasked as V
        return V.bind_launch(*inputs, out, cfg)
    if problem == "softmax":
        from triton_src import softmax_block, softmax_online, softmax_rows, softmax_split
        mod = {"block": softmax_block, "rows": softmax_rows, "online": softmax_online,
               "split": softmax_split}[variant]
        if variant == "split":   # compiled under the register cap the planner's rule decides
            cfg = dispatch.with_split_register_cap(inputs[0], out, cfg, dispatch.device_facts(inputs[0].device))
        return mod.bind_launch(inputs[0], out, cfg)
    from triton_src import gemm_epilogue_splitk, gemm_epilogue_tiled, gemm_epilogue_tma
    a, b, bias = inputs
    act = case.params.get("act", "relu")
    if variant == "plain":
        from triton_src.runtime import bind_spec
        return bind_spec(dispatch.plain_spec(a, b, bias, act, out, cfg), a.device)
    if variant == "tma":
        return gemm_epilogue_tma.bind_launch(a, b, bias, act, out, cfg, dispatch.device_facts(a.device)["sms"])
    if variant == "splitk":
        return gemm_epilogue_splitk.bind_launch(a, b, bias, act, out, cfg)
    return gemm_epilogue_tiled.bind_launch(a, b, bias, act, out, cfg)


def time_case(problem, case, cands, deadline, copy_bps, yardsticks=()) -> None:
    import torch

    from harness import registry
    from harness.timing import TimingConfig, time_cold
    prob = RESULT["_problems"][problem]
    row = {"problem": problem, "case": case.label, "dims": case.to_json(), "rows": {}}
    try:
        inputs = prob.make_inputs(case, "cuda", 0)
        base_out = prob.alloc_out(case, "cuda")
        torch_launch = registry.get(problem, f"torch:{problem}").prepare(case, inputs, base_out)
        expect = torch_launch()
        expect = (expect if isinstance(expect, torch.Tensor) else base_out).float().clone()
    except Exception as e:
        RESULT["timing"].append(row | {"error": short(e)})
        return
    launches = {"torch": torch_launch}
    for iid in yardsticks:   # e.g. torch.compile (its compile is paid here, in prepare)
        try:
            t = time.perf_counter()
            y_out = prob.alloc_out(case, "cuda")
            launches[iid] = registry.get(problem, iid).prepare(case, inputs, y_out)
            launches[iid]()
            row.setdefault("yardstick_prepare_s", {})[iid] = round(time.perf_counter() - t, 1)
        except Exception as e:
            row["rows"][iid] = {"error": short(e)}
    for label, variant, cfg in cands:
        if now() > deadline:
            RESULT["not_run"].append(f"time {case.label} {label}: budget")
            continue
        try:
            out = prob.alloc_out(case, "cuda")
            fn = bound_launch(problem, variant, cfg, case, inputs, out)
            res = fn()
            got = (res if isinstance(res, torch.Tensor) else out).float()
            err = ((got - expect).norm() / max(expect.norm(), 1e-30)).item()
            ok = math.isfinite(err) and err < (2e-2 if problem == "gemm_epilogue" else 1e-2)
            row["rows"][label] = {"variant": variant, "config": {k: v for k, v in (cfg or {}).items()},
                                  "rel_err_vs_torch": err, "ok": ok,
                                  "info": {k: v for k, v in (getattr(fn, "info", {}) or {}).items()
                                           if isinstance(v, (int, float, str, dict, list))}}
            if ok:
                launches[label] = fn
        except Exception as e:
            row["rows"][label] = {"variant": variant, "error": short(e)}
    try:
        stats = time_cold(launches, TimingConfig(time_cap_s=0.3, min_samples=10, warmup_ms=10), "cuda")
    except Exception as e:
        RESULT["timing"].append(row | {"error": short(e)})
        return
    traffic, flops = prob.traffic(case), prob.flops(case)
    t_torch = stats["torch"].quartiles()[1]
    for label, st in stats.items():
        _, med, _ = st.quartiles()
        r = row["rows"].setdefault(label, {})
        r.update(median_us=round(med * 1e6, 2), host_us=None if st.host_s is None else round(st.host_s * 1e6, 2),
                 samples=st.n, speedup_vs_torch=round(t_torch / med, 3))
        if problem == "gemm_epilogue":
            r["tflops"] = round(flops / med / 1e12, 1)
        else:
            r["gbps"] = round(traffic / med / 1e9, 1)
            r["pct_copy"] = round(100 * traffic / med / copy_bps, 1) if copy_bps else None
    RESULT["timing"].append(row)
    best = min((k for k in stats if k != "torch"), key=lambda k: stats[k].quartiles()[1], default=None)
    d = row["rows"].get("default", {})
    print(f"time {problem} {case.label}: default {d.get('pct_copy', d.get('tflops'))} "
          f"({d.get('speedup_vs_torch')}x torch), best {best}", flush=True)
    del inputs, launches
    torch.cuda.empty_cache()


def copy_ceiling() -> float:
    import torch
    x = torch.empty(2 ** 28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        y.copy_(x)
        e.record()
        torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) * 1e-3)
    return 2 * x.numel() * 4 / best


# -- main --------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=140.0, help="seconds for everything")
    ap.add_argument("--suite", default="edge", choices=("edge", "models"))
    ap.add_argument("--only", default="vector_add,softmax,gemm_epilogue")
    ap.add_argument("--jobs", type=int, default=max(1, min(14, (os.cpu_count() or 4) - 2)))
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: build every spec, compile none")
    args = ap.parse_args(argv)
    if args.dry_run:
        return dry_run(args.only.split(","), args.suite)
    import torch
    import triton

    from harness import problems
    problems_ = [p for p in args.only.split(",") if p]
    RESULT["_problems"] = {p: problems.get(p) for p in problems_}
    B = args.budget
    if not torch.cuda.is_available():
        print("no CUDA device: this script needs the GPU", file=sys.stderr)
        return 2
    p = torch.cuda.get_device_properties(0)
    RESULT["facts"] = {"gpu": p.name, "sms": p.multi_processor_count, "l2": getattr(p, "L2_cache_size", None),
                       "torch": torch.__version__, "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M")}
    try:
        RESULT["facts"]["copy_bytes_per_s"] = copy_bps = copy_ceiling()
    except Exception as e:
        copy_bps = None
        RESULT["facts"]["copy_error"] = short(e)
    print(f"{p.name}, triton {triton.__version__}, copy {copy_bps and copy_bps / 1e12:.2f} TB/s", flush=True)
    import backends.triton_layer  # noqa: F401  (registers the ids)

    verify_work, time_work, jobs = plan_work(args.suite, problems_, RESULT["_problems"])
    verify_work.sort(key=lambda w: w[0])
    save()
    compile_ahead(jobs, (0.25 if args.suite == "edge" else 0.30) * B, args.jobs)
    if not args.no_verify:
        deadline = (0.62 if not args.no_time else 0.97) * B
        if args.suite == "edge":
            deadline = (0.45 if not args.no_time else 0.97) * B
        for _, prob_name, case, ids, suite in verify_work:
            if now() > deadline:
                RESULT["not_run"].append(f"verify {prob_name} {case.label} {ids}: budget")
                continue
            try:
                verify_case_all(prob_name, case, ids, suite, deadline)
            except Exception as e:
                RESULT["verify"].append({"problem": prob_name, "case": case.label, "status": "ERROR", "reason": short(e)})
            save()
    if not args.no_time:
        per_case = (0.97 * B - now()) / max(1, len(time_work))
        for prob_name, case, cands, yard in time_work:
            if now() > 0.97 * B:
                RESULT["not_run"].append(f"time {prob_name} {case.label}: budget")
                continue
            yard = yard if now() < 0.6 * B else ()   # torch.compile's compile costs seconds a case
            time_case(prob_name, case, cands, now() + max(per_case, 2.0), copy_bps, yard)
            save()
    RESULT.pop("_problems", None)
    save()
    summary()
    return 0


def verify_jobs(problem: str, case) -> list:
    """Compile jobs of every id that takes ``case`` (the verify phase binds them)."""
    from harness import registry
    out = []
    for iid in IDS[problem]:
        if not registry.get(problem, f"triton:{iid}").supports(case):
            out.append((problem, "default" if iid == problem else iid[len(problem) + 1:], case.to_json(), None))
    return out


def plan_work(suite: str, names, probs):
    """(verify work, time work, compile jobs), highest priority first. verify work: (priority,
    problem, case, ids, suite); time work: (problem, case, candidates, yardstick ids)."""
    verify_work, time_work, jobs = [], [], []
    if suite == "models":
        for prob_name in names:
            prob, ids = probs[prob_name], IDS[prob_name]
            for s in ("models", "verify"):
                for case in prob.cases(s):
                    verify_work.append((0 if s == "models" else 1, prob_name, case, [ids[0]], s))
                    verify_work.append((2, prob_name, case, ids[1:], s))
                    jobs += verify_jobs(prob_name, case)
            for case in prob.cases("models") + [prob.case(**kw) for kw in EXTRA[prob_name]]:
                cands = candidates(prob_name, case)
                time_work.append((prob_name, case, cands, ()))
                jobs += [(prob_name, v, case.to_json(), cfg) for _, v, cfg in cands]
        verify_work.sort(key=lambda w: w[0])
        return verify_work, time_work, jobs
    # edge: the measured gaps (the first three off-suite shapes of a problem) first, then
    # the edge suite, then the other off-suite shapes; vector add last
    order = [p for p in ("gemm_epilogue", "softmax", "vector_add") if p in names]
    extra = {p: [probs[p].case(**kw) for kw in EDGE_EXTRA[p]] for p in order}
    timed = ([(p, c, True) for p in order for c in extra[p][:3]]
             + [(p, c, False) for p in order for c in probs[p].cases("edge")]
             + [(p, c, True) for p in order for c in extra[p][3:]])
    timed = [w for w in timed if w[0] != "vector_add"] + [w for w in timed if w[0] == "vector_add"]
    # torch.compile beside eager on the first off-suite shape of each problem (its compile costs
    # seconds; the edge compare has it on every edge case)
    firsts = {id(extra[p][0]) for p in order if p != "vector_add" and extra[p]}
    for p, case, off_suite in timed:
        cands = edge_candidates(p, case)
        yard = (f"torch:{p}_compile",) if id(case) in firsts else ()
        time_work.append((p, case, cands, yard))
        jobs += [(p, v, case.to_json(), cfg) for _, v, cfg in cands]
    for p in order:
        ids = IDS[p]
        for case in probs[p].cases("edge"):
            verify_work.append((0, p, case, [ids[0]], "edge"))
            verify_work.append((2, p, case, ids[1:], "edge"))
            jobs += verify_jobs(p, case)
        for case in extra[p]:
            verify_work.append((1, p, case, [ids[0]], "edge-extra"))
    verify_work.sort(key=lambda w: w[0])
    return verify_work, time_work, jobs


def dry_run(names, suite: str = "edge") -> int:
    """Without a GPU: every candidate and every id the run would verify builds its launch specs."""
    from backends import triton_layer as T
    from harness import problems, registry
    import backends.triton_layer  # noqa: F401  (registers the ids)
    probs = {p: problems.get(p) for p in names}
    verify_work, time_work, jobs = plan_work(suite, names, probs)
    n = bad = 0
    for name, v, case_json, cfg in jobs:
        from harness.case import Case
        case = Case.from_json(case_json)
        n += 1
        try:
            specs(name, v, case, cfg)
        except Exception as e:
            bad += 1
            print(f"{name} {case.label} {v} {cfg}: {short(e)}")
    for _, name, case, ids, _s in verify_work:
        for iid in ids:
            v = "default" if iid == name else iid[len(name) + 1:]
            try:
                if not registry.get(name, f"triton:{iid}").supports(case):
                    T.specs_for(name, v, case)
                    n += 1
            except Exception as e:
                bad += 1
                print(f"{name} {case.label} {iid}: {short(e)}")
    print(f"dry run ({suite}): {n} specs, {len(set(json.dumps(j, sort_keys=True, default=str) for j in jobs))} "
          f"compile jobs, {len(time_work)} timed cases, {bad} failed")
    return 1 if bad else 0


def summary() -> None:
    v = RESULT["verify"]
    counts = {s: sum(r.get("status") == s for r in v) for s in ("PASS", "FAIL", "SKIP", "ERROR")}
    print(f"\nverify: {counts}; not run: {len(RESULT['not_run'])}")
    for r in v:
        if r.get("status") in ("FAIL", "ERROR"):
            print(f"  FAIL {r.get('impl')} {r.get('suite')} {r['case']}: {r.get('reason', '')[:200]}")
    print(f"\n{'case':44s} {'default us':>10s} {'torch':>7s} {'compile':>7s} {'x torch':>7s}  best candidate (us)")
    for t in RESULT["timing"]:
        rows = t.get("rows", {})
        us = {k: r["median_us"] for k, r in rows.items() if "median_us" in r}
        comp = next((u for k, u in us.items() if k.endswith("_compile")), None)
        mine = {k: u for k, u in us.items() if k != "torch" and not k.endswith("_compile")}
        best = min(mine, key=mine.get, default="-")
        print(f"{t['case'][:44]:44s} {str(us.get('default')):>10s} {str(us.get('torch')):>7s} {str(comp):>7s} "
              f"{str(rows.get('default', {}).get('speedup_vs_torch')):>7s}  {best} ({mine.get(best)})")
    print(f"\nwrote {OUT / 'gpu_triton.json'} in {now():.0f} s")


if __name__ == "__main__":
    sys.exit(main())
