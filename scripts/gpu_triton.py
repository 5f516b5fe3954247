#!/usr/bin/env python3
"""The Triton layer on one GPU, in at most ~4 minutes: verify, then time the dispatch's choices.

Run from the repository root after the offline build (``python3 -m pip install -q
--no-build-isolation --no-deps --no-index -e .``)::

    python3 scripts/gpu_triton.py [--budget 230] [--only softmax,gemm_epilogue] [--jobs 14]

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
OUT = Path(os.environ.get("OUT") or "gpu_out")
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


# -- phase 1: compile ahead ----------------------------------------------------------------------
def _precompile(job):
    """In a pool process (no CUDA): compile the specs of one (problem, variant, case, cfg)."""
    problem, variant, case_json, cfg = job
    try:
        from backends import triton_layer as T
        from harness.case import Case
        case = Case.from_json(case_json)
        t = time.perf_counter()
        for spec in specs(problem, variant, case, cfg):
            T.compile_spec(spec, ptxas=False)
        return None, time.perf_counter() - t
    except Exception as e:
        return short(e), 0.0


def compile_ahead(jobs, deadline: float, workers: int) -> None:
    t = now()
    done = errors = 0
    seen, unique = set(), []
    for j in jobs:
        key = json.dumps(j, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            unique.append(j)
    try:
        import multiprocessing as mp
        ex = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
        futs = [ex.submit(_precompile, j) for j in unique]
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
    if variant == "tma":
        return gemm_epilogue_tma.bind_launch(a, b, bias, act, out, cfg, dispatch.device_facts(a.device)["sms"])
    if variant == "splitk":
        return gemm_epilogue_splitk.bind_launch(a, b, bias, act, out, cfg)
    return gemm_epilogue_tiled.bind_launch(a, b, bias, act, out, cfg)


def time_case(problem, case, cands, deadline, copy_bps) -> None:
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
    ap.add_argument("--budget", type=float, default=230.0, help="seconds for everything")
    ap.add_argument("--only", default="vector_add,softmax,gemm_epilogue")
    ap.add_argument("--jobs", type=int, default=max(1, min(14, (os.cpu_count() or 4) - 2)))
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: build every spec, compile none")
    args = ap.parse_args(argv)
    if args.dry_run:
        return dry_run(args.only.split(","))
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

    # the work, highest priority first
    verify_work, time_work, jobs = [], [], []
    for prob_name in problems_:
        prob = RESULT["_problems"][prob_name]
        ids = IDS[prob_name]
        for suite in ("models", "verify"):
            for case in prob.cases(suite):
                verify_work.append((0 if suite == "models" else 1, prob_name, case, [ids[0]], suite))
                verify_work.append((2, prob_name, case, ids[1:], suite))
                for iid in ids:
                    v = "default" if iid == prob_name else iid[len(prob_name) + 1:]
                    jobs.append((prob_name, v, case.to_json(), None))
        for case in prob.cases("models") + [prob.case(**kw) for kw in EXTRA[prob_name]]:
            cands = candidates(prob_name, case)
            time_work.append((prob_name, case, cands))
            for _, v, cfg in cands:
                jobs.append((prob_name, v, case.to_json(), cfg))
    verify_work.sort(key=lambda w: w[0])
    save()
    compile_ahead(jobs, 0.30 * B, args.jobs)
    if not args.no_verify:
        deadline = (0.62 if not args.no_time else 0.97) * B
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
        for prob_name, case, cands in time_work:
            if now() > 0.97 * B:
                RESULT["not_run"].append(f"time {prob_name} {case.label}: budget")
                continue
            time_case(prob_name, case, cands, now() + max(per_case, 2.0), copy_bps)
            save()
    RESULT.pop("_problems", None)
    save()
    summary()
    return 0


def dry_run(names) -> int:
    """Without a GPU: every candidate and every id on every case builds its launch specs."""
    from backends import triton_layer as T
    from harness import problems, registry
    n = bad = 0
    for name in names:
        prob = problems.get(name)
        for case in prob.cases("models") + [prob.case(**kw) for kw in EXTRA[name]]:
            for label, v, cfg in candidates(name, case):
                n += 1
                try:
                    specs(name, v, case, cfg)
                except Exception as e:
                    bad += 1
                    print(f"{name} {case.label} {label}: {short(e)}")
        for case in prob.cases("verify"):
            for iid in IDS[name]:
                v = "default" if iid == name else iid[len(name) + 1:]
                try:
                    if not registry.get(name, f"triton:{iid}").supports(case):
                        T.specs_for(name, v, case)
                        n += 1
                except Exception as e:
                    bad += 1
                    print(f"{name} {case.label} {iid}: {short(e)}")
    print(f"dry run: {n} specs, {bad} failed")
    return 1 if bad else 0


def summary() -> None:
    v = RESULT["verify"]
    counts = {s: sum(r.get("status") == s for r in v) for s in ("PASS", "FAIL", "SKIP", "ERROR")}
    print(f"\nverify: {counts}; not run: {len(RESULT['not_run'])}")
    for r in v:
        if r.get("status") in ("FAIL", "ERROR"):
            print(f"  FAIL {r.get('impl')} {r.get('suite')} {r['case']}: {r.get('reason', '')[:200]}")
    print(f"\n{'problem':14s} {'case':40s} {'default':>16s} {'x torch':>8s} {'host us':>8s}  best candidate")
    for t in RESULT["timing"]:
        rows = t.get("rows", {})
        d = rows.get("default", {})
        metric = d.get("pct_copy") if t["problem"] != "gemm_epilogue" else d.get("tflops")
        unit = "% copy" if t["problem"] != "gemm_epilogue" else "TFLOP/s"
        timed = {k: r for k, r in rows.items() if "median_us" in r and k != "torch"}
        best = min(timed, key=lambda k: timed[k]["median_us"], default="-")
        bx = timed.get(best, {}).get("speedup_vs_torch")
        print(f"{t['problem']:14s} {t['case']:40s} {str(metric) + ' ' + unit:>16s} "
              f"{str(d.get('speedup_vs_torch')):>8s} {str(d.get('host_us')):>8s}  {best} ({bx}x)")
    print(f"\nwrote {OUT / 'gpu_triton.json'} in {now():.0f} s")


if __name__ == "__main__":
    sys.exit(main())
