"""One GPU session for the CuTe DSL layer: verify every kernel, then time it against torch.

    PYTHONPATH=$PWD python3 scripts/tune_cute.py            # all sections, each in a subprocess
    python3 scripts/tune_cute.py --section softmax           # one section in this process

Sections (each in its own process, so an illegal address in one leaves the others standing):
  vector_add, softmax, gemm  - verify_case on the verify suite (+ aligned ragged GEMM shapes),
                               then CUDA-event timings with an L2 flush before every sample;
  overhead                   - host microseconds per call through tvm-ffi and through from_dlpack;
  softmax_variants, gemm_ws  - the variants (cute:softmax_rows, cute:softmax_long, cute:gemm_ws,
                               cute:gemm_ws_c2, cute:gemm_pp): verify, then time beside the main
                               kernels and torch.
KL_TUNE_SECTIONS=softmax_variants,gemm_ws runs only the named sections.
JSON per section under $OUT (or ./tune_out); a compact table is printed last.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT", ROOT / "tune_out"))


_SAVE: list = []


def save():
    """Write the section's JSON so far (a later timeout still leaves what was measured)."""
    if _SAVE:
        res, path = _SAVE[0]
        Path(path).write_text(json.dumps(res, indent=1, default=str))


# -- timing ------------------------------------------------------------------------------------
def bench(fn, flush, samples=30, cap_s=4.0):
    """Median/IQR milliseconds of fn() with CUDA events, L2 flushed before each sample."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times, t_end = [], time.perf_counter() + cap_s
    for _ in range(samples):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
        if time.perf_counter() > t_end and len(times) >= 5:
            break
    times.sort()
    q = statistics.quantiles(times, n=4) if len(times) >= 4 else [times[0], times[0], times[-1]]
    return {"ms": statistics.median(times), "iqr_ms": q[2] - q[0], "n": len(times)}


def flush_buf():
    import torch

    return torch.empty(512 * 2 ** 20 // 4, dtype=torch.float32, device="cuda")


def copy_ceiling(flush):
    import torch

    x = torch.randn(2 ** 28, device="cuda")
    y = torch.empty_like(x)
    r = bench(lambda: y.copy_(x), flush, samples=20)
    return 2 * x.numel() * 4 / (r["ms"] * 1e-3) / 1e9


# -- verification ------------------------------------------------------------------------------
def verify_all(problem_name, impl_id, extra_cases=(), seeds=(0, 1), rows=None):
    from harness import problems, registry
    from harness.verify import verify_case

    prob = problems.get(problem_name)
    impl = registry.get(problem_name, impl_id)
    rows = [] if rows is None else rows
    for case in list(prob.cases("verify")) + list(extra_cases):
        why = impl.supports(case)
        if why:
            rows.append({"case": case.label, "status": "SKIP", "reason": why})
            continue
        t0 = time.perf_counter()
        try:
            c = verify_case(impl, prob, case, "cuda", seeds=seeds)
            rows.append({"case": case.label, "status": "PASS" if c.ok else "FAIL", "reason": c.reason,
                         "rel_err": c.rel_err, "max_abs_err": c.max_abs_err,
                         "s": round(time.perf_counter() - t0, 2)})
        except Exception as e:
            rows.append({"case": case.label, "status": "ERROR", "reason": f"{type(e).__name__}: {e}"[:400]})
        r = rows[-1]
        save()
        print(f"  verify {impl_id:18s} {r['case']:40s} {r['status']} {r.get('reason', '')[:150]}", flush=True)
    return rows


def prepared(problem_name, impl_id, case, seed=0):
    """(launch, out, inputs) of an implementation on a case (harness inputs, not timed)."""
    from harness import problems, registry

    prob = problems.get(problem_name)
    impl = registry.get(problem_name, impl_id)
    inputs = prob.make_inputs(case, "cuda", seed)
    out = prob.alloc_out(case, "cuda")
    return impl.prepare(case, inputs, out), out, inputs


# -- sections ----------------------------------------------------------------------------------
def section_vector_add(res):
    import torch
    from harness import problems

    res["verify"] = []
    verify_all("vector_add", "cute:vector_add", rows=res["verify"])
    flush = flush_buf()
    res["copy_ceiling_GBs"] = copy_ceiling(flush)
    prob = problems.get("vector_add")
    rows = []
    for n in (2 ** 20, 2 ** 24, 2 ** 28):
        case = prob.case(N=n)
        launch, out, (x, y) = prepared("vector_add", "cute:vector_add", case)
        q = prob.traffic(case)
        for name, fn in (("cute", launch), ("torch.add", lambda: torch.add(x, y, out=out))):
            r = bench(fn, flush)
            r.update(impl=name, shape=f"N={n}", GBs=q / (r["ms"] * 1e-3) / 1e9)
            rows.append(r)
        rows[-2]["info"] = {k: v for k, v in launch.info.items() if k != "kernels"}
        res["timing"] = rows
        save()
        print(f"  time vector_add N={n}: cute {rows[-2]['GBs']:.0f} GB/s, torch {rows[-1]['GBs']:.0f} GB/s", flush=True)
    res["timing"] = rows


def section_softmax(res):
    import torch
    from harness import problems

    res["verify"] = []
    verify_all("softmax", "cute:softmax", rows=res["verify"])
    flush = flush_buf()
    res["copy_ceiling_GBs"] = copy_ceiling(flush)
    prob = problems.get("softmax")
    shapes = [(4096, n) for n in (1024, 2048, 4096, 8192, 16384)] + [(8192, n) for n in (32768, 131072, 262144)]
    rows = []
    for m, n in shapes:
        case = prob.case(M=m, N=n)
        try:
            launch, out, (x,) = prepared("softmax", "cute:softmax", case)
        except Exception as e:
            rows.append({"impl": "cute", "shape": f"{m}x{n}", "error": f"{type(e).__name__}: {e}"[:300]})
            continue
        q = prob.traffic(case)
        for name, fn in (("cute", launch), ("torch.softmax", lambda: torch.softmax(x, dim=-1))):
            r = bench(fn, flush)
            r.update(impl=name, shape=f"{m}x{n}", GBs=q / (r["ms"] * 1e-3) / 1e9)
            rows.append(r)
        rows[-2]["info"] = {k: v for k, v in launch.info.items() if k != "kernels"}
        res["timing"] = rows
        save()
        print(f"  time softmax {m}x{n}: cute {rows[-2]['GBs']:.0f} GB/s ({launch.info.get('config')}), "
              f"torch {rows[-1]['GBs']:.0f} GB/s", flush=True)
        del x, out
        torch.cuda.empty_cache()
    res["timing"] = rows


def section_gemm(res):
    import torch
    from harness import problems

    prob = problems.get("gemm_epilogue")
    extra = []
    for dt in ("bfloat16", "float16"):
        for act in ("none", "relu", "gelu"):
            extra += [prob.case(M=1, N=24, K=40, dtype=dt, act=act),
                      prob.case(M=127, N=72, K=136, dtype=dt, act=act),
                      prob.case(M=1025, N=776, K=520, dtype=dt, act=act)]
        extra += [prob.case(M=1025, N=776, K=520, dtype=dt, act="relu", bias=0),
                  prob.case(M=300, N=1000, K=4104, dtype=dt, act="gelu")]
    res["verify"] = []
    verify_all("gemm_epilogue", "cute:gemm", extra, seeds=(0,), rows=res["verify"])
    flush = flush_buf()
    rows = []
    configs = [("256", None), ("128", None)]
    for s in (4096, 8192):
        case = prob.case(M=s, N=s, K=s, act="relu", bias=1)
        a, b, bias = prob.make_inputs(case, "cuda", 0)
        out = prob.alloc_out(case, "cuda")
        f = prob.flops(case)
        base = [("torch.mm", lambda: torch.mm(a, b)),
                ("relu(addmm)", lambda: torch.relu_(torch.addmm(bias, a, b)))]
        for name, fn in base:
            r = bench(fn, flush, samples=20)
            r.update(impl=name, shape=f"{s}^3", TFLOPs=f / (r["ms"] * 1e-3) / 1e12)
            rows.append(r)
        for tn, st in configs:
            os.environ["KL_CUTE_GEMM_TILE_N"] = tn
            try:
                from harness import registry
                launch = registry.get("gemm_epilogue", "cute:gemm").prepare(case, (a, b, bias), out)
                launch()
                torch.cuda.synchronize()
                ref = torch.relu(torch.addmm(bias.float(), a.float(), b.float()))
                rel = float((out.float() - ref).norm() / ref.norm())
                r = bench(launch, flush, samples=20)
                r.update(impl=f"cute tile 128x{tn}", shape=f"{s}^3", TFLOPs=f / (r["ms"] * 1e-3) / 1e12,
                         rel_err_vs_fp32=rel, info={k: v for k, v in launch.info.items() if k != "kernels"})
            except Exception as e:
                r = {"impl": f"cute tile 128x{tn}", "shape": f"{s}^3", "error": f"{type(e).__name__}: {e}"[:400]}
            rows.append(r)
            res["timing"] = rows
            save()
            print(f"  time gemm {s}^3 {r['impl']}: {r.get('TFLOPs', float('nan')):.0f} TFLOP/s "
                  f"{r.get('error', '')}", flush=True)
        print(f"  time gemm {s}^3 torch.mm {rows[-4]['TFLOPs']:.0f}, relu(addmm) {rows[-3]['TFLOPs']:.0f}", flush=True)
        del a, b, bias, out
        torch.cuda.empty_cache()
    os.environ.pop("KL_CUTE_GEMM_TILE_N", None)
    res["timing"] = rows


def _time_impl(rows, flush, problem, impl_id, case, label, metric, env=None):
    """Prepare + time one registered implementation on one case (env overrides set around the
    prepare, when the compile happens); appends a row, never raises."""
    import torch
    from harness import problems

    prob = problems.get(problem)
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        launch, out, inputs = prepared(problem, impl_id, case)
        r = bench(launch, flush, samples=20)
        q = prob.flops(case) if metric == "TFLOPs" else prob.traffic(case)
        r.update(impl=label, shape=case.label, **{metric: q / (r["ms"] * 1e-3) / (1e12 if metric == "TFLOPs" else 1e9)},
                 info={k: v for k, v in launch.info.items() if k != "kernels"})
        if problem == "gemm_epilogue":
            a, b, bias = inputs
            ref = torch.relu(torch.addmm(bias.float(), a.float(), b.float()))
            r["rel_err_vs_fp32"] = float((out.float() - ref).norm() / ref.norm())
        del launch, out, inputs
    except Exception as e:
        r = {"impl": label, "shape": case.label, "error": f"{type(e).__name__}: {e}"[:400]}
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    rows.append(r)
    save()
    val = r.get(metric, float("nan"))
    print(f"  time {case.label:28s} {label:34s} {val:8.1f} {metric} {r.get('error', '')}", flush=True)
    torch.cuda.empty_cache()
    return r


def section_softmax_variants(res):
    """cute:softmax_rows and cute:softmax_long: verify, then time beside cute:softmax and torch
    (rows: 16 vs 32 values per thread; long: clusters of up to 16 vs up to 8)."""
    import torch
    from harness import problems

    res["verify"] = []
    for impl_id in ("cute:softmax_rows", "cute:softmax_long"):
        verify_all("softmax", impl_id, rows=res["verify"])
    flush = flush_buf()
    res["copy_ceiling_GBs"] = copy_ceiling(flush)
    prob = problems.get("softmax")
    rows = res["timing"] = []
    for m, n in [(4096, 1024), (4096, 2048), (4096, 4096), (4096, 8192)]:
        case = prob.case(M=m, N=n)
        _time_impl(rows, flush, "softmax", "cute:softmax", case, "cute:softmax", "GBs")
        for v in ("16", "32"):
            _time_impl(rows, flush, "softmax", "cute:softmax_rows", case, f"cute:softmax_rows values={v}",
                       "GBs", {"KL_CUTE_SOFTMAX_ROWS_VALUES": v})
        x = prob.make_inputs(case, "cuda", 0)[0]
        r = bench(lambda: torch.softmax(x, dim=-1), flush)
        rows.append({**r, "impl": "torch.softmax", "shape": case.label,
                     "GBs": prob.traffic(case) / (r["ms"] * 1e-3) / 1e9})
        del x
    for m, n in [(8192, 131072), (8192, 262144)]:
        case = prob.case(M=m, N=n)
        _time_impl(rows, flush, "softmax", "cute:softmax", case, "cute:softmax", "GBs")
        for c in ("16", "8"):
            _time_impl(rows, flush, "softmax", "cute:softmax_long", case, f"cute:softmax_long max_cluster={c}",
                       "GBs", {"KL_CUTE_SOFTMAX_LONG_MAX_CLUSTER": c})
    save()


def section_gemm_ws(res):
    """cute:gemm_ws / cute:gemm_ws_c2 / cute:gemm_pp: verify (verify suite + aligned ragged shapes), then time
    beside cute:gemm, torch.mm and relu(addmm)."""
    import torch
    from harness import problems

    prob = problems.get("gemm_epilogue")
    extra = []
    for dt in ("bfloat16", "float16"):
        for act in ("none", "relu", "gelu"):
            extra += [prob.case(M=1, N=24, K=40, dtype=dt, act=act),
                      prob.case(M=300, N=264, K=136, dtype=dt, act=act),
                      prob.case(M=1025, N=776, K=520, dtype=dt, act=act, bias=0)]
        extra += [prob.case(M=2177, N=1032, K=4104, dtype=dt, act="gelu")]   # 18 tile rows, several tiles per CTA
    res["verify"] = []
    for impl_id in ("cute:gemm_ws", "cute:gemm_ws_c2", "cute:gemm_pp"):
        verify_all("gemm_epilogue", impl_id, extra, seeds=(0,), rows=res["verify"])
    flush = flush_buf()
    rows = res["timing"] = []
    for s in (4096, 8192):
        case = prob.case(M=s, N=s, K=s, act="relu", bias=1)
        a, b, bias = prob.make_inputs(case, "cuda", 0)
        for name, fn in (("torch.mm", lambda: torch.mm(a, b)),
                         ("relu(addmm)", lambda: torch.relu_(torch.addmm(bias, a, b)))):
            r = bench(fn, flush, samples=20)
            rows.append({**r, "impl": name, "shape": case.label,
                         "TFLOPs": prob.flops(case) / (r["ms"] * 1e-3) / 1e12})
            print(f"  time {case.label:28s} {name:34s} {rows[-1]['TFLOPs']:8.1f} TFLOPs", flush=True)
        del a, b, bias
        for impl_id in ("cute:gemm", "cute:gemm_ws", "cute:gemm_ws_c2", "cute:gemm_pp"):
            _time_impl(rows, flush, "gemm_epilogue", impl_id, case, impl_id, "TFLOPs")
    save()


def section_overhead(res):
    """Host us per call of the compiled vector add (N=1024) through this process's call path."""
    import torch
    from harness import problems

    prob = problems.get("vector_add")
    case = prob.case(N=1024)
    launch, out, _ = prepared("vector_add", "cute:vector_add", case)
    launch()
    torch.cuda.synchronize()
    reps = 2000
    t0 = time.perf_counter()
    for _ in range(reps):
        launch()
    us = (time.perf_counter() - t0) / reps * 1e6
    torch.cuda.synchronize()
    res["call_us"] = us
    res["path"] = launch.info.get("call")
    res["compile_s"] = launch.info.get("compile_s")
    print(f"  overhead via {res['path']}: {us:.2f} us/call", flush=True)


SECTIONS = {"vector_add": section_vector_add, "softmax": section_softmax, "gemm": section_gemm,
            "overhead": section_overhead, "softmax_variants": section_softmax_variants,
            "gemm_ws": section_gemm_ws}


def run_section(name, out_path):
    import torch

    res = {"section": name, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        import cutlass
        res["cutlass_dsl"] = cutlass.__version__
    except Exception as e:
        res["cutlass_dsl"] = f"missing: {e}"
    _SAVE.append((res, out_path))
    try:
        SECTIONS[name](res)
    except Exception as e:
        import traceback
        res["error"] = f"{type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc()[-3000:]
        print(res["traceback"], flush=True)
    Path(out_path).write_text(json.dumps(res, indent=1, default=str))


def table(results):
    lines = ["", "==== CuTe DSL on " + next((r.get("gpu", "?") for r in results.values()), "?") + " ===="]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"{name}: ERROR {r['error'][:300]}")
        v = r.get("verify", [])
        if v:
            cnt = {s: sum(1 for x in v if x["status"] == s) for s in ("PASS", "FAIL", "ERROR", "SKIP")}
            lines.append(f"{name} verify: " + " ".join(f"{k}={c}" for k, c in cnt.items()))
            for x in v:
                if x["status"] in ("FAIL", "ERROR"):
                    lines.append(f"   {x['status']} {x['case']}: {x['reason'][:200]}")
        if "copy_ceiling_GBs" in r:
            lines.append(f"{name} copy ceiling: {r['copy_ceiling_GBs']:.0f} GB/s")
        for t in r.get("timing", []):
            if "error" in t:
                lines.append(f"  {t['shape']:>14s} {t['impl']:18s} ERROR {t['error'][:200]}")
                continue
            metric = f"{t['GBs']:7.0f} GB/s" if "GBs" in t else f"{t['TFLOPs']:7.1f} TFLOP/s"
            cfg = t.get("info", {}).get("config", "")
            lines.append(f"  {t['shape']:>14s} {t['impl']:18s} {t['ms']*1e3:10.1f} us  {metric}  {cfg}")
        if "call_us" in r:
            lines.append(f"{name}: {r['path']} {r['call_us']:.2f} us/call (compile {r['compile_s']} s)")
    print("\n".join(lines), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--section", choices=list(SECTIONS))
    ap.add_argument("--json")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.section:
        run_section(args.section, args.json or OUT / f"cute_{args.section}.json")
        return
    plan = [("vector_add", {}, 45), ("softmax", {}, 80), ("gemm", {}, 100),
            ("overhead", {}, 20), ("overhead", {"KL_CUTE_TVM_FFI": "0"}, 20),
            ("softmax_variants", {}, 240), ("gemm_ws", {}, 420)]
    if os.environ.get("KL_TUNE_SECTIONS"):              # e.g. softmax_variants,gemm_ws
        keep = set(os.environ["KL_TUNE_SECTIONS"].split(","))
        plan = [p for p in plan if p[0] in keep]
    results = {}
    for name, env, limit in plan:
        tag = name + ("_dlpack" if env else "")
        path = OUT / f"cute_{tag}.json"
        print(f"== {tag}", flush=True)
        t0 = time.perf_counter()
        try:
            subprocess.run([sys.executable, __file__, "--section", name, "--json", str(path)],
                           env={**os.environ, **env}, timeout=limit, check=False)
        except subprocess.TimeoutExpired:
            print(f"  {tag}: timed out after {limit} s", flush=True)
        try:
            results[tag] = json.loads(path.read_text())
        except Exception:
            results[tag] = {"error": "no result (crashed or timed out)"}
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    (OUT / "cute_summary.json").write_text(json.dumps(results, indent=1, default=str))
    table(results)


if __name__ == "__main__":
    main()
