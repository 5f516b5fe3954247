"""One GPU call's worth of Triton checks and tuning (run with PYTHONPATH=$PWD, no install needed).

1. environment + ceilings (device-to-device copy, bf16 torch.mm 8192^3), measured in this run;
2. every Triton implementation verified with harness.verify on a few verify-suite cases, and
   compile_only (sm_90, the no-GPU path) exercised once per implementation on this Triton;
3. timings with CUDA events and an L2 flush before every sample, median of the samples:
   vector add fp32 2^28 over (BLOCK, num_warps); softmax fp32 M=4096 N=1K..16K and M=8192
   N=32K/128K/256K over the variants and their configs, against torch.softmax; GEMM bf16
   relu+bias 4096^3 and 8192^3 (autotuned, every config's autotune time kept) against torch.mm
   and relu(addmm).
Prints compact tables; writes $OUT/tune_triton.json (or --out) after every section.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import triton  # noqa: E402

from triton_src import gemm_epilogue as G  # noqa: E402
from triton_src import softmax as S  # noqa: E402
from triton_src import vector_add as V  # noqa: E402

RESULTS: dict = {"sections": {}}
OUT_PATH = ""


def save():
    with open(OUT_PATH, "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


def log(*a):
    print(*a, flush=True)


# -- timing ------------------------------------------------------------------------------------
_FLUSH = None


def rate_rows(rows: list, bytes_moved: int, ceil: float) -> dict:
    """Add TB/s and % of the copy ceiling (TB/s) to each timed row; return the fastest row per impl."""
    best = {}
    for r in rows:
        r["TBps"] = bytes_moved / r["ms"] / 1e9
        r["pct_copy"] = 100 * r["TBps"] / ceil
        if r["impl"] not in best or r["TBps"] > best[r["impl"]]["TBps"]:
            best[r["impl"]] = r
    return best


def bench(fn, max_s=0.4, min_n=8, max_n=200) -> dict:
    """Median of CUDA-event times of ``fn``, L2 flushed (a 2 x L2 write) before every sample; the
    flush is queued before the start event, so host launch overhead hides behind it."""
    global _FLUSH
    if _FLUSH is None:
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 << 20)
        _FLUSH = torch.empty(max(2 * l2, 256 << 20) // 4, dtype=torch.int32, device="cuda")
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _FLUSH.zero_()
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    est = max(s.elapsed_time(e), 1e-3) / 1e3
    n = int(min(max_n, max(min_n, max_s / (est + 60e-6))))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        _FLUSH.zero_()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    q = statistics.quantiles(t, n=4) if len(t) >= 4 else [t[0], t[len(t) // 2], t[-1]]
    return {"ms": statistics.median(t), "iqr_ms": q[2] - q[0], "n": n}


def attempt(label, fn):
    try:
        return fn()
    except Exception as e:
        log(f"  !! {label}: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        RESULTS.setdefault("errors", []).append({"what": label, "error": f"{type(e).__name__}: {e}",
                                                 "tb": traceback.format_exc()[-2000:]})
        return None


# -- sections ----------------------------------------------------------------------------------
def env_and_ceilings():
    p = torch.cuda.get_device_properties(0)
    env = {"gpu": p.name, "sms": p.multi_processor_count, "l2_bytes": getattr(p, "L2_cache_size", None),
           "torch": torch.__version__, "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M")}
    x = torch.randn(1 << 28, device="cuda")
    y = torch.empty_like(x)
    r = bench(lambda: y.copy_(x))
    env["copy_TBps"] = 2 * x.numel() * 4 / r["ms"] / 1e9
    del x, y
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    r = bench(lambda: a @ b)
    env["mm_bf16_8192_TFLOPs"] = 2 * 8192 ** 3 / r["ms"] / 1e9
    RESULTS["env"] = env
    log(f"{env['gpu']}  SMs {env['sms']}  torch {env['torch']}  triton {env['triton']}")
    log(f"copy ceiling {env['copy_TBps']:.3f} TB/s   bf16 mm 8192^3 {env['mm_bf16_8192_TFLOPs']:.0f} TFLOP/s")
    save()


def verify_all():
    from harness import problems, registry
    from harness.verify import verify_case
    picks = {
        "vector_add": lambda c: True,
        "softmax": lambda c: (c.M, c.N) in {(1823, 781), (300, 777), (3, 262147), (2, 131072), (4, 32768),
                                            (1, 98432), (129, 1), (64, 1000), (3, 4097), (37, 1000)},
        "gemm_epilogue": lambda c: ((c.M, c.N, c.K), c.dtype, c.params["act"]) in {
            ((127, 65, 129), "bfloat16", "gelu"), ((1, 17, 33), "float16", "relu")},
    }
    rows = []
    for impl in registry.select(layer="triton"):
        prob = problems.get(impl.problem)
        for case in prob.cases("verify"):
            if not picks[impl.problem](case):
                continue
            why = impl.supports(case)
            if why:
                rows.append({"impl": impl.key, "case": case.label, "ok": None, "reason": why})
                continue
            c = attempt(f"verify {impl.key} {case.label}",
                        lambda: verify_case(impl, prob, case, "cuda", seeds=(0, 1)))
            rows.append({"impl": impl.key, "case": case.label, "ok": bool(c and c.ok),
                         "reason": (c.reason if c else "crashed"), "rel_err": c and c.rel_err})
    # the large-problem GEMM config, pinned, on ragged shapes (the autotuner may never pick it there)
    gemm = problems.get("gemm_epilogue")
    for dt, act, bias in (("bfloat16", "gelu", 1), ("float16", "relu", 0)):
        case = gemm.case(M=1025, N=769, K=513, dtype=dt, act=act, bias=bias)
        a, b, bb = gemm.make_inputs(case, "cuda", 0)
        ref = gemm.reference((a, b, bb), case)
        from harness.verify import check_output
        c = attempt(f"gemm pinned {case.label}", lambda: check_output(
            gemm, case, G.gemm_epilogue(a, b, bb, act, config=G.CONFIGS[0]), ref))
        rows.append({"impl": "gemm_epilogue/triton:gemm pinned CONFIGS[0]", "case": case.label,
                     "ok": bool(c and c.ok), "reason": c.reason if c else "crashed"})
    bad = [r for r in rows if r["ok"] is False]
    log(f"verify: {sum(r['ok'] is True for r in rows)} pass, {len(bad)} fail, "
        f"{sum(r['ok'] is None for r in rows)} declined")
    for r in bad:
        log(f"  FAIL {r['impl']} {r['case']}: {r['reason']}")
    RESULTS["sections"]["verify"] = rows
    # compile_only (the no-GPU path) on this Triton version
    comp = []
    for impl in registry.select(layer="triton"):
        case = prob_case = problems.get(impl.problem).cases("smoke")[0]
        f = attempt(f"compile_only {impl.key}", lambda: impl.compile_only_fn(prob_case))
        comp.append({"impl": impl.key, "case": case.label, "ok": f is not None,
                     "facts": {k: f.get(k) for k in ("registers", "spills", "smem", "compile_s")} if f else None})
    log("compile_only: " + ", ".join(f"{c['impl']}={'ok' if c['ok'] else 'FAIL'}" for c in comp))
    RESULTS["sections"]["compile_only"] = comp
    save()


def tune_vector_add():
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    ceil = RESULTS["env"]["copy_TBps"]
    rows = []
    r = bench(lambda: torch.add(x, y, out=out))
    rows.append({"impl": "torch.add", **r})
    for block in (1024, 2048, 4096, 8192, 16384):
        for warps in (4, 8, 16):
            if block // (32 * warps) < 1:
                continue
            r = attempt(f"vadd {block}/{warps}",
                        lambda: bench(lambda: V.vector_add(x, y, out, block=block, num_warps=warps)))
            if r:
                rows.append({"impl": "triton", "BLOCK": block, "num_warps": warps, **r})
    ok = torch.equal(V.vector_add(x, y, out), x + y)
    for row in rows:
        row["TBps"] = 3 * n * 4 / row["ms"] / 1e9
        row["pct_copy"] = 100 * row["TBps"] / ceil
    best = max((r for r in rows if r["impl"] == "triton"), key=lambda r: r["TBps"])
    log(f"vector_add fp32 2^28: torch.add {rows[0]['TBps']:.3f} TB/s; best Triton BLOCK={best['BLOCK']} "
        f"warps={best['num_warps']} {best['TBps']:.3f} TB/s = {best['pct_copy']:.1f}% of copy (exact={ok})")
    log("   " + "  ".join(f"{r['BLOCK']}/{r['num_warps']}:{r['TBps']:.2f}" for r in rows[1:]))
    RESULTS["sections"]["vector_add"] = {"rows": rows, "best": best}
    save()


def softmax_configs(N, es):
    cfgs = []
    if not S.fused_row_supports(N):
        for w in (4, 8, 16):
            cfgs.append(("fused_row", {"num_warps": w}))
        base = S.persistent_config(N)
        for w in (4, 8, 16):
            for st in (1, 2, 3):
                cfgs.append(("persistent", {"num_warps": w, "num_stages": st}))
        if base["ROWS"] > 1:
            for rows in (max(1, base["ROWS"] // 2), base["ROWS"] * 2):
                cfgs.append(("persistent", {"rows": rows}))
    if N >= 16384:
        for block in (2048, 4096, 8192):
            for st in (1, 2, 3):
                cfgs.append(("online", {"block": block, "num_stages": st}))
        cfgs.append(("online", {"block": 4096, "num_warps": 16, "num_stages": 2}))
        cfgs.append(("online", {"block": 8192, "num_warps": 8, "num_stages": 2}))
    else:
        cfgs.append(("online", {}))
    return cfgs


def tune_softmax():
    ceil = RESULTS["env"]["copy_TBps"]
    shapes = [(4096, n) for n in (1024, 2048, 4096, 8192, 16384)] + [(8192, n) for n in (32768, 131072, 262144)]
    summary = []
    allrows = []
    for M, N in shapes:
        x = torch.randn(M, N, device="cuda")
        out = torch.empty_like(x)
        by = 2 * M * N * 4
        ref = torch.softmax(x, dim=-1)
        rt = bench(lambda: torch.softmax(x, dim=-1))
        rows = [{"M": M, "N": N, "impl": "torch.softmax", **rt}]
        for variant, kw in softmax_configs(N, 4):
            fn = S.VARIANTS[variant]

            def run():
                return fn(x, out, **kw)

            def one():
                run()
                err = (out - ref).abs().max().item()
                if not err < 1e-5:
                    raise AssertionError(f"max abs err {err}")
                return bench(run, max_s=0.25)
            r = attempt(f"softmax {M}x{N} {variant} {kw}", one)
            if r:
                row = {"M": M, "N": N, "impl": variant, "cfg": kw, **r}
                if variant == "persistent":
                    row["programs"] = S.persistent_programs(x, out, M, N, S.persistent_config(N, **{
                        k: v for k, v in kw.items() if k in ("rows", "num_warps", "num_stages")},
                        elem_size=x.element_size()))
                rows.append(row)
        best = rate_rows(rows, by, ceil)
        line = f"softmax {M}x{N}: " + "  ".join(
            f"{k} {v['TBps']:.2f} ({v['pct_copy']:.0f}%){' ' + json.dumps(v.get('cfg')) if v.get('cfg') else ''}"
            for k, v in best.items())
        log(line)
        summary.append({"M": M, "N": N, "best": best})
        allrows += rows
        del x, out, ref
        torch.cuda.empty_cache()
        RESULTS["sections"]["softmax"] = {"rows": allrows, "summary": summary}
        save()


def tune_gemm():
    rows = []
    for s in (4096, 8192):
        a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(s, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
        fl = 2 * s ** 3
        t0 = time.perf_counter()
        attempt("gemm autotune", lambda: G.gemm_epilogue(a, b, bias, "relu", out))
        torch.cuda.synchronize()
        tune_s = time.perf_counter() - t0
        ref = torch.relu(torch.addmm(bias.float(), a.float(), b.float()))
        err = ((out.float() - ref).norm() / ref.norm()).item()
        cfg = G.tuned_config(a, b, "relu", True)
        timings = {}
        try:
            for c, tms in getattr(G.gemm_epilogue_tuned, "configs_timings", {}).items():
                timings[str(c)] = tms
        except Exception:
            pass
        res = {"size": s, "rel_err": err, "autotune_s": tune_s, "config": str(cfg), "autotune_ms": timings}
        for name, fn in (("torch.mm", lambda: a @ b),
                         ("relu(addmm)", lambda: torch.relu_(torch.addmm(bias, a, b))),
                         ("triton", lambda: G.gemm_epilogue(a, b, bias, "relu", out))):
            r = attempt(f"gemm {s} {name}", lambda: bench(fn, max_s=0.6))
            if r:
                res[name] = {**r, "TFLOPs": fl / r["ms"] / 1e9}
        if "triton" in res and "torch.mm" in res:
            res["pct_mm"] = 100 * res["triton"]["TFLOPs"] / res["torch.mm"]["TFLOPs"]
        # every config, pinned, for the record
        pinned = {}
        for c in G.CONFIGS:
            r = attempt(f"gemm {s} {c}", lambda: bench(lambda: G.gemm_epilogue(a, b, bias, "relu", out, config=c),
                                                      max_s=0.25))
            if r:
                pinned[str(c)] = fl / r["ms"] / 1e9
        res["pinned_TFLOPs"] = pinned
        log(f"gemm bf16 relu+bias {s}^3: torch.mm {res.get('torch.mm', {}).get('TFLOPs', 0):.0f}  "
            f"relu(addmm) {res.get('relu(addmm)', {}).get('TFLOPs', 0):.0f}  triton "
            f"{res.get('triton', {}).get('TFLOPs', 0):.0f} TFLOP/s ({res.get('pct_mm', 0):.1f}% of mm), "
            f"rel err {err:.2e}, cfg {cfg}, autotune {tune_s:.1f}s")
        log("   pinned: " + "  ".join(f"{k.split(',')[0:3]}:{v:.0f}" for k, v in pinned.items()))
        rows.append(res)
        del a, b, out
        torch.cuda.empty_cache()
        RESULTS["sections"]["gemm"] = rows
        save()


def main():
    global OUT_PATH
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for tune_triton.json")
    ap.add_argument("--only", default="", help="comma list of sections: verify,vadd,softmax,gemm")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("tune_triton: needs a CUDA GPU")
    os.makedirs(args.out, exist_ok=True)
    OUT_PATH = os.path.join(args.out, "tune_triton.json")
    only = set(filter(None, args.only.split(",")))
    t0 = time.time()
    env_and_ceilings()
    for key, fn in (("verify", verify_all), ("vadd", tune_vector_add), ("softmax", tune_softmax),
                    ("gemm", tune_gemm)):
        if only and key not in only:
            continue
        t = time.time()
        attempt(key, fn)
        RESULTS.setdefault("section_s", {})[key] = round(time.time() - t, 1)
        save()
        log(f"[{key} done in {time.time() - t:.0f}s, total {time.time() - t0:.0f}s]")


if __name__ == "__main__":
    main()
