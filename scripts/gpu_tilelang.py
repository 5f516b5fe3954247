#!/usr/bin/env python3
"""The TileLang layer's pending plans on one GPU, in about 2.5 minutes: compile, verify, time.

Run from the repository root after the offline build::

    python3 scripts/gpu_tilelang.py [--budget 150] [--only softmax,gemm_epilogue] [--jobs 15]

The candidates are ``tilelang:softmax_next`` and ``tilelang:gemm_epilogue_next`` (the defaults with
``dispatch.SWITCHES`` on) and the variants whose kernels they plan (``softmax_rows``, ``_smem``,
``_split``, ``gemm_epilogue_tma``), beside today's defaults.

Phases, each bounded by a share of the budget (what does not fit is listed as not run):
1. Compile ahead, in a pool of processes, every kernel the defaults and the pending plans choose
   for the timed and verified cases (the planner's classes, deduplicated), so that TileLang's disk
   cache (``kltools.cache.cache_dir("tilelang")``) is warm and the later prepares load.
2. Verify with the harness's checker (``harness.verify.verify_case``, one seed, one launch): the
   candidates on the verify suite and on cases that reach every kernel of the pending plans; then
   today's defaults on the same extras. FAIL rows print their reasons.
3. Time (``harness.timing.time_cold``, 0.3 s a case) the default, the candidate and, for the
   long-vocabulary rows, the ``softmax_online`` variant beside torch eager: % of a 1 GiB copy and
   speed-up over eager (softmax), TFLOP/s and speed-up over eager (GEMM).
Writes ``$OUT/tilelang/check.json`` (default ./gpu_out) after every step and prints a table.
The decision it serves: a switch goes on where its candidate PASSes everywhere and its geomean
beats the default's (docs/performance.md, "TileLang / softmax", "TileLang / GEMM + epilogue").
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULT: dict = {"compile": [], "verify": [], "timing": [], "not_run": []}
OUT = Path(os.environ.get("OUT") or "gpu_out") / "tilelang"
T0 = time.perf_counter()

# the models suite's classes plus shapes outside the suites (the issues' figures), per problem
SOFTMAX = [(4096, 32000, "bfloat16"), (4096, 50257, "bfloat16"), (4096, 128256, "bfloat16"),
           (4096, 151936, "bfloat16"), (4096, 50257, "float32"), (4096, 151936, "float32"),
           (4096, 128256, "float16"), (32768, 512, "bfloat16"), (32768, 1024, "bfloat16"),
           (32768, 4096, "bfloat16"), (8192, 2048, "float16"),
           (1000, 32769, "bfloat16"), (12288, 768, "float32"), (2, 2_000_000, "float32"),
           (2048, 128000, "float16"), (50000, 200, "float16"), (6000, 6000, "bfloat16"),
           (96, 100_000, "bfloat16"), (65536, 128, "float32"), (8, 200_003, "bfloat16")]
GEMM = [(2048, 2047, 2048, "bfloat16", "gelu", 1), (3000, 3000, 3000, "float16", "gelu", 1),
        (555, 1234, 777, "bfloat16", "gelu", 1), (200, 13824, 5120, "bfloat16", "relu", 1),
        (8192, 512, 2048, "float16", "relu", 1), (16, 6144, 4096, "bfloat16", "none", 1),
        (4096, 28672, 4096, "bfloat16", "gelu", 1), (1, 11008, 4096, "bfloat16", "none", 1),
        (64, 32000, 4096, "bfloat16", "none", 0), (4096, 4096, 128, "bfloat16", "relu", 1)]
# cases that reach every kernel of the pending plans, for the verify phase
VERIFY_EXTRA = {"softmax": [dict(M=300, N=151_936, dtype="bfloat16"), dict(M=64, N=128_257),
                            dict(M=200, N=50_257, dtype="bfloat16", kind="neginf"), dict(M=2, N=2_000_000),
                            dict(M=1000, N=32_769, dtype="bfloat16"), dict(M=50_000, N=200, dtype="float16"),
                            dict(M=96, N=70_001, dtype="float16", layout="strided"), dict(M=8, N=200_003,
                                                                                         dtype="bfloat16")],
                "gemm_epilogue": [dict(M=2048, N=2047, K=2048, act="gelu"), dict(M=555, N=1234, K=777, act="gelu"),
                                  dict(M=3000, N=3000, K=3000, act="gelu", dtype="float16"),
                                  dict(M=16, N=6144, K=4096, act="none", bias=0),
                                  dict(M=64, N=4096, K=4096, act="gelu")]}
CANDIDATES = {"softmax": ["tilelang:softmax_next", "tilelang:softmax_rows", "tilelang:softmax_smem",
                          "tilelang:softmax_split"],
              "gemm_epilogue": ["tilelang:gemm_epilogue_next", "tilelang:gemm_epilogue_tma"]}


def now() -> float:
    return time.perf_counter() - T0


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "check.json").write_text(json.dumps(RESULT, indent=1, default=str))


def short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}"


def cases(problem: str, which: str) -> list:
    from harness import problems
    prob = problems.get(problem)
    if which == "timed":
        if problem == "softmax":
            return [prob.case(M=m, N=n, dtype=dt) for m, n, dt in SOFTMAX]
        return [prob.case(M=m, N=n, K=k, dtype=dt, act=act, bias=b) for m, n, k, dt, act, b in GEMM]
    return prob.cases("verify") + [prob.case(**d) for d in VERIFY_EXTRA[problem]]


def compile_jobs(problem: str) -> list:
    """(kind, dtype, plan json) of every kernel the defaults and the pending plans choose for the
    timed and verified cases: today's plan and the pending one, deduplicated by class."""
    from backends import tilelang_layer as A
    from tilelang_src import dispatch
    jobs = set()
    timed = cases(problem, "timed")
    for case in timed + cases(problem, "verify"):
        es = A._esize(case.dtype)
        try:
            if problem == "softmax":
                jobs.add(("sm_next", case.dtype, json.dumps(dispatch.plan_softmax_next(
                    case.M, case.N, es, **A._sm_case_facts(case)), sort_keys=True)))
            else:
                jobs.add(("ge_next", case.dtype, json.dumps(dispatch.plan_gemm_next(
                    case.M, case.N, case.K, es, case.N % 8 == 0), sort_keys=True)))
            if case not in timed:       # today's defaults: compiled ahead for the timed cases only
                continue
            if problem == "softmax":
                jobs.add(("sm", case.dtype, json.dumps(dispatch.plan_softmax(case.M, case.N, es), sort_keys=True)))
            else:
                jobs.add(("ge", case.dtype + (":bias" if int(case.params.get("bias", 1)) else ""), json.dumps(
                    dispatch.plan_gemm(case.M, case.N, case.K, es, case.N % 8 == 0 and case.K % 8 == 0),
                    sort_keys=True)))
        except ValueError:
            pass
    return sorted(jobs)


def compile_job(job) -> tuple:
    t = time.perf_counter()
    try:
        from backends import tilelang_layer as A
        kind, dt, plan = job[0], job[1], json.loads(job[2])
        if "pack" in plan:
            plan["pack"] = tuple(plan["pack"])
        if kind == "sm_next":
            A._sm_next_compile(dt, plan)
        elif kind == "sm":
            A._sm_compile(dt, plan)
        elif kind == "ge_next":
            A._gemm_next_compile(dt, plan)
        else:
            A._gemm_compile(dt.split(":")[0], dt.endswith(":bias"), plan)
        return job, round(time.perf_counter() - t, 1), None
    except Exception as e:
        return job, round(time.perf_counter() - t, 1), short(e)


def compile_ahead(problems_: list, jobs_n: int, deadline: float) -> None:
    import multiprocessing
    jobs = [j for p in problems_ for j in compile_jobs(p)]
    print(f"compile: {len(jobs)} kernels in {jobs_n} processes", flush=True)
    pool = ProcessPoolExecutor(max_workers=jobs_n, mp_context=multiprocessing.get_context("spawn"))
    futs = [pool.submit(compile_job, j) for j in jobs]
    done, left = wait(futs, timeout=max(5.0, deadline - now()))
    for f in done:
        job, s, err = f.result()
        RESULT["compile"].append({"job": list(job), "s": s, "error": err})
        if err:
            print(f"compile FAIL {job[0]} {job[1]} {job[2]}: {err}", flush=True)
    RESULT["not_run"] += [f"compile: {len(left)} kernels past the budget"] if left else []
    for proc in list(getattr(pool, "_processes", {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    save()


def impl_of(problem: str, iid: str):
    from harness import registry
    return registry.get(problem, iid, candidates=True)


def verify(problem: str, deadline: float) -> None:
    from harness import problems
    from harness.verify import verify_case
    prob = problems.get(problem)
    extras = [prob.case(**d) for d in VERIFY_EXTRA[problem]]
    work = [(iid, c) for iid in CANDIDATES[problem] for c in cases(problem, "verify")]
    work += [(f"tilelang:{problem}", c) for c in extras]
    for iid, case in work:
        if now() > deadline:
            RESULT["not_run"].append(f"verify {iid} {case.label}: budget")
            continue
        impl = impl_of(problem, iid)
        if impl.supports(case):
            continue
        try:
            chk = verify_case(impl, prob, case, "cuda", seeds=(0,), repeat=False)
            row = {"id": iid, "case": case.label, "ok": chk.ok, "reason": chk.reason,
                   "worst_ratio": chk.details.get("worst_ratio"),
                   "config": (chk.details.get("info") or {}).get("config")}
        except Exception as e:
            row = {"id": iid, "case": case.label, "ok": False, "reason": short(e)}
        RESULT["verify"].append(row)
        if not row["ok"]:
            print(f"verify FAIL {iid} {case.label}: {row['reason']}", flush=True)
    save()


def time_case(problem: str, case, copy_bps: float) -> None:
    import torch

    from harness import problems
    from harness.timing import TimingConfig, time_cold
    prob = problems.get(problem)
    row = {"problem": problem, "case": case.label, "rows": {}}
    ids = [f"tilelang:{problem}", f"tilelang:{problem}_next"]
    if problem == "softmax" and case.N > 100_000 and case.M >= 1024:
        ids.append("tilelang:softmax_online")
    try:
        inputs = prob.make_inputs(case, "cuda", 0)
        launches = {"torch": impl_of(problem, f"torch:{problem}").prepare(case, inputs, prob.alloc_out(case, "cuda"))}
        for iid in ids:
            try:
                fn = impl_of(problem, iid).prepare(case, inputs, prob.alloc_out(case, "cuda"))
                fn()
                launches[iid] = fn
                row["rows"][iid] = {"config": (getattr(fn, "info", {}) or {}).get("config")}
            except Exception as e:
                row["rows"][iid] = {"error": short(e)}
        stats = time_cold(launches, TimingConfig(time_cap_s=0.3, min_samples=10, warmup_ms=10), "cuda")
    except Exception as e:
        RESULT["timing"].append(row | {"error": short(e)})
        return
    t_torch = stats["torch"].quartiles()[1]
    for key, st in stats.items():
        med = st.quartiles()[1]
        r = row["rows"].setdefault(key, {})
        r.update(us=round(med * 1e6, 2), x_eager=round(t_torch / med, 3))
        if problem == "softmax":
            r["pct_copy"] = round(100 * prob.traffic(case) / med / copy_bps, 1)
        else:
            r["tflops"] = round(prob.flops(case) / med / 1e12, 1)
    RESULT["timing"].append(row)
    print(f"time {case.label}: " + "  ".join(f"{k.split(':')[-1]} {v.get('us')} us x{v.get('x_eager')}"
                                              for k, v in row["rows"].items()), flush=True)
    del inputs, launches
    torch.cuda.empty_cache()


def copy_ceiling() -> float:
    import torch
    x = torch.empty(2 ** 28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return 2 * x.numel() * 4 / min(ts)


def geomeans() -> dict:
    out = {}
    for problem in ("softmax", "gemm_epilogue"):
        for iid in (f"tilelang:{problem}", f"tilelang:{problem}_next"):
            xs = [r["rows"][iid]["x_eager"] for r in RESULT["timing"] if r["problem"] == problem
                  and r["rows"].get(iid, {}).get("x_eager")]
            if xs:
                out[iid] = {"geomean_x_eager": round(math.exp(sum(map(math.log, xs)) / len(xs)), 3),
                            "worst": min(xs), "cases": len(xs)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--only", default="softmax,gemm_epilogue")
    ap.add_argument("--jobs", type=int, default=max(1, min(15, (os.cpu_count() or 2) - 1)))
    args = ap.parse_args()
    problems_ = args.only.split(",")
    from harness import registry
    registry.load_backends()
    compile_ahead(problems_, args.jobs, 0.45 * args.budget)
    for p in problems_:
        verify(p, now() + 0.25 * args.budget / len(problems_))
    copy_bps = copy_ceiling()
    RESULT["copy_tbps"] = round(copy_bps / 1e12, 3)
    for p in problems_:
        for case in cases(p, "timed"):
            if now() > 0.95 * args.budget:
                RESULT["not_run"].append(f"time {case.label}: budget")
                continue
            time_case(p, case, copy_bps)
            save()
    RESULT["geomean"] = geomeans()
    RESULT["elapsed_s"] = round(now(), 1)
    save()
    bad = [v for v in RESULT["verify"] if not v["ok"]]
    print(f"verify: {len(RESULT['verify']) - len(bad)}/{len(RESULT['verify'])} PASS")
    print("geomean x eager:", json.dumps(RESULT["geomean"]))
    print("not run:", RESULT["not_run"], "elapsed", RESULT["elapsed_s"])


if __name__ == "__main__":
    main()
