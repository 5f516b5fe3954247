"""GPU check of the TileLang layer's softmax vector kernels and GEMM candidates (no arguments;
writes $OUT/tilelang/check.json, prints a summary; finishes within ~150 s).

1. Compiles, in parallel worker processes (they fill TileLang's disk cache), the kernels that the
   default (``tilelang:softmax``, element kernels) and the vector variants (``tilelang:softmax_rows``,
   ``_smem``, ``_online``: 16-byte groups, guarded row edges; not yet run on a GPU) plan for
   the models suite's softmax classes and the check shapes, plus GEMM tile candidates beside the
   current default's 128x256x64 / 3 stages.
2. Verifies the vector variants and the default (each through the adapter's own ``prepare``, so
   the planner and the flat-view path are what runs) against a float64 reference on shapes
   reaching every path: rows starting on and off 16 bytes, odd N, an offset view, x and out rows
   of one wider buffer (same stride), x strided with out contiguous (the element fallback), one
   row, rows of 16377 columns (the vector rows kernel's longest class).
3. Times (CUDA events, median of 20) the default and the vector variants of its algorithm (rows for
   rows, smem and online for smem, online for online) beside torch.softmax and a same-size copy, and the GEMM
   candidates beside torch relu(addmm).
Nothing here is read by the rules.
"""
from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BUDGET_S = 140
T0 = time.time()
SM_TIMED = [(32768, 512, "bfloat16"), (32768, 1024, "bfloat16"), (8192, 2048, "float16"),
            (32768, 4096, "bfloat16"), (4096, 32000, "bfloat16"), (4096, 32000, "float32"),
            (4096, 50257, "bfloat16"), (4096, 50257, "float32"), (4096, 151936, "bfloat16")]
# (m, n, dtype, layout): layout "contig", "offset" (a view 3 elements into its storage),
# "strided" (rows of a wider buffer, out contiguous: the element fallback), "pad" (x and out
# both rows of a wider buffer, same stride)
SM_VERIFY = [(1823, 781, "float32", "contig"), (1823, 781, "bfloat16", "contig"), (37, 1000, "float16", "offset"),
             (5, 3, "bfloat16", "contig"), (300, 777, "bfloat16", "strided"), (300, 777, "float16", "pad"),
             (130, 20000, "bfloat16", "contig"), (130, 20001, "float32", "offset"), (3, 262147, "float32", "contig"),
             (1, 8, "bfloat16", "contig"), (64, 16377, "bfloat16", "contig"), (64, 16380, "float32", "pad")]
# (config, stage_bias): the default's wide tile as it is and with the bias staged in shared memory
# (the tilelang:gemm_epilogue_tma variant), and the staged form at 4 stages / a 128-column tile
GEMM_CFGS = [((128, 256, 64, 3, 256), False), ((128, 256, 64, 3, 256), True), ((128, 256, 64, 4, 256), True),
             ((128, 128, 64, 4, 256), True)]
GEMM_SHAPES = [(4096, 28672, 4096), (4096, 6144, 4096), (256, 28672, 4096)]
# (M, N, K, act, bias): the tma variant against torch; N = 4104 leaves a partial last tile (bias guard)
GEMM_VERIFY = [(1000, 4104, 520, "gelu", 1), (64, 2056, 4096, "relu", 1), (4096, 4096, 4096, "none", 0),
               (130, 264, 72, "gelu", 1)]


def _case(m, n, dtype, layout="contig"):
    from harness import problems
    return problems.get("softmax").case(M=m, N=n, dtype=dtype)


def _variants(plan_kernel):
    """The vector variant ids timed beside a default plan's kernel."""
    return {"rows": ["softmax_rows"], "smem": ["softmax_smem", "softmax_online"],
            "online": ["softmax_online"]}.get(plan_kernel, [])


def _sm_plans():
    from tilelang_src import dispatch
    es = {"float32": 4, "float16": 2, "bfloat16": 2}
    jobs = set()
    for m, n, dt, *_layout in SM_TIMED + SM_VERIFY:
        d = dispatch.plan_softmax(m, n, es[dt])
        jobs.add((dt, json.dumps(d, sort_keys=True)))
        for kern in ("rows", "smem", "online"):
            if kern == "smem" and n <= 16384:    # the smem variant is checked on its own class only
                continue
            try:
                jobs.add((dt, json.dumps(dispatch.plan_softmax(m, n, es[dt], kernel=kern), sort_keys=True)))
                for aligned in (False, True):
                    p = dispatch.plan_softmax(m, n, es[dt], kernel=kern, vector=True, aligned=aligned)
                    jobs.add((dt, json.dumps(p, sort_keys=True)))
            except ValueError:
                pass
    return sorted(jobs)


def compile_job(job):
    t = time.time()
    try:
        if job[0] == "gemm":
            _gemm_kernel(*job[1])
        elif job[0] == "gemm_v":
            _gemm_kernel(job[1], True, job[2])
        else:
            from backends import tilelang_layer as A
            A._sm_compile(job[1], json.loads(job[2]))
        return job, round(time.time() - t, 2), None
    except Exception as e:
        return job, round(time.time() - t, 2), f"{type(e).__name__}: {str(e).splitlines()[-1][:300]}"


def _gemm_kernel(cfg, stage_bias, has_bias=True):
    import tilelang_src
    from tilelang_src import gemm_epilogue_tma
    key = ("gemm_epilogue_tma", "bfloat16", has_bias, cfg, True) + (("stage_bias",) if stage_bias else ())
    return tilelang_src.compile_kernel(key, lambda: gemm_epilogue_tma.gemm_tma_kernel(
        "bfloat16", has_bias, *cfg, tma=True, stage_bias=stage_bias))


def _gemm_variant_jobs():
    """The kernels the tma variant plans for GEMM_VERIFY (compiled ahead in the pool)."""
    from tilelang_src import dispatch
    jobs = set()
    for m, n, k, _act, bias in GEMM_VERIFY:
        p = dispatch.plan_gemm(m, n, k, 2, True, kernel="tma", stage_bias=True)
        cfg = (p["bm"], p["bn"], p["bk"], p["stages"], p["threads"])
        jobs.add(("gemm", (cfg, True)) if bias else ("gemm_v", cfg, False))
    return sorted(jobs, key=repr)


def bench(fn, reps=20):
    import torch
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    ts.sort()
    return round(ts[len(ts) // 2], 2)


def _tensors(m, n, dtype, layout, g):
    import torch
    dt = getattr(torch, dtype)
    if layout == "offset":
        base = torch.randn(m * n + 3, device="cuda", generator=g).to(dt)
        x = base[3:].view(m, n)
        out = torch.empty(m * n + 3, device="cuda", dtype=dt)[3:].view(m, n)
    elif layout == "strided":
        x = torch.randn(m, n + 5, device="cuda", generator=g).to(dt)[:, :n]
        out = torch.empty(m, n, device="cuda", dtype=dt)
    elif layout == "pad":
        x = torch.randn(m, n + 9, device="cuda", generator=g).to(dt)[:, 1:n + 1]
        out = torch.empty(m, n + 9, device="cuda", dtype=dt)[:, 1:n + 1]
    else:
        x = torch.randn(m, n, device="cuda", generator=g).to(dt)
        out = torch.empty(m, n, device="cuda", dtype=dt)
    return x * 4, out


def main():
    import multiprocessing

    import torch
    out_dir = Path(os.environ.get("OUT", "/tmp")) / "tilelang"
    out_dir.mkdir(parents=True, exist_ok=True)
    res = {"compile": [], "softmax_verify": [], "softmax_time": [], "gemm_verify": [], "gemm": [], "errors": []}

    def save():
        (out_dir / "check.json").write_text(json.dumps(res, indent=1))

    gemm_jobs = [("gemm", c) for c in GEMM_CFGS]
    gemm_jobs += [j for j in _gemm_variant_jobs() if j not in gemm_jobs]
    jobs = gemm_jobs + [("sm",) + j for j in _sm_plans()]
    pool = ProcessPoolExecutor(max_workers=min(15, os.cpu_count() or 4), mp_context=multiprocessing.get_context("spawn"))
    futs = [pool.submit(compile_job, j) for j in jobs]
    try:
        for f in as_completed(futs, timeout=max(10, 75 - (time.time() - T0))):
            job, s, err = f.result()
            res["compile"].append({"job": repr(job), "s": s, "error": err})
    except Exception as e:
        res["errors"].append(f"compile pool: {type(e).__name__} {e}")
    for proc in list(getattr(pool, "_processes", {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    save()
    from harness import registry
    from harness.problems import get as problems_get
    registry.load_backends()
    impls = {name: registry.get("softmax", f"tilelang:{name}")
             for name in ("softmax", "softmax_rows", "softmax_smem", "softmax_online")}
    g = torch.Generator(device="cuda").manual_seed(0)
    left = lambda: BUDGET_S - (time.time() - T0)  # noqa: E731

    def prepared(name, m, n, dtype, layout):
        x, out = _tensors(m, n, dtype, layout, g)
        launch = impls[name].prepare(_case(m, n, dtype), (x,), out)
        return x, out, launch

    for m, n, dt, layout in SM_VERIFY:
        for name in ("softmax_rows", "softmax_smem", "softmax_online", "softmax"):
            if left() < 45:
                break
            es = 4 if dt == "float32" else 2
            if (name == "softmax_rows" and n > 16377) or (name == "softmax_smem" and not 16384 < n <= 220 * 1024 // es - 4096):
                continue
            try:
                x, out, launch = prepared(name, m, n, dt, layout)
                out.fill_(float("nan"))
                launch()
                torch.cuda.synchronize()
                ref = torch.softmax(x.double(), -1)
                err = (out.double() - ref).abs().max().item()
                tol = 2e-5 if dt == "float32" else 8e-3
                res["softmax_verify"].append({"id": name, "case": [m, n, dt, layout], "plan": launch.info.get("config"),
                                              "max_err": err, "ok": bool(err <= tol)})
            except Exception as e:
                res["softmax_verify"].append({"id": name, "case": [m, n, dt, layout],
                                              "error": f"{type(e).__name__}: {str(e)[:300]}"})
        save()
    for m, n, dt in SM_TIMED:
        if left() < 25:
            break
        try:
            x, out, launch = prepared("softmax", m, n, dt, "contig")
            y = torch.empty_like(x)
            row = {"case": [m, n, dt], "plan": launch.info.get("config"), "us": bench(launch),
                   "torch_us": bench(lambda: torch.softmax(x, -1)), "copy_us": bench(lambda: y.copy_(x))}
            row["vs_torch"] = round(row["torch_us"] / row["us"], 3)
            row["pct_copy"] = round(100 * row["copy_us"] / row["us"], 1)
            row["vector"] = []
            for var in _variants(row["plan"]["kernel"]):
                launch_v = impls[var].prepare(_case(m, n, dt), (x,), out)
                us = bench(launch_v)
                row["vector"].append({"id": var, "plan": launch_v.info.get("config"), "us": us,
                                      "vs_torch": round(row["torch_us"] / us, 3),
                                      "pct_copy": round(100 * row["copy_us"] / us, 1)})
            res["softmax_time"].append(row)
        except Exception as e:
            res["softmax_time"].append({"case": [m, n, dt], "error": f"{type(e).__name__}: {str(e)[:300]}"})
        save()
    tma_impl = registry.get("gemm_epilogue", "tilelang:gemm_epilogue_tma")
    gprob = problems_get("gemm_epilogue")
    for m, n, k, act, has_bias in GEMM_VERIFY:
        if left() < 30:
            break
        try:
            a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
            b = torch.randn(k, n, device="cuda", generator=g).to(torch.bfloat16)
            bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if has_bias else None
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            launch = tma_impl.prepare(gprob.case(M=m, N=n, K=k, act=act, bias=has_bias, dtype="bfloat16"), (a, b, bias), c)
            launch()
            ref = a.float() @ b.float() + (bias.float() if has_bias else 0)
            ref = {"none": ref, "relu": torch.relu(ref), "gelu": torch.nn.functional.gelu(ref, approximate="tanh")}[act]
            err = ((c.float() - ref).norm() / ref.norm()).item()
            res["gemm_verify"].append({"case": [m, n, k, act, has_bias], "plan": launch.info.get("config"),
                                       "rel_err": err, "ok": bool(err < 1e-2)})
        except Exception as e:
            res["gemm_verify"].append({"case": [m, n, k, act, has_bias], "error": f"{type(e).__name__}: {str(e)[:300]}"})
        save()
    for m, n, k in GEMM_SHAPES:
        if left() < 10:
            break
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda", generator=g).to(torch.bfloat16)
        bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = torch.relu(torch.addmm(bias, a, b)).float()
        row = {"shape": [m, n, k], "torch_us": bench(lambda: torch.relu(torch.addmm(bias, a, b))), "configs": {}}
        for cfg, staged in GEMM_CFGS:
            if left() < 6:
                break
            name = f"{cfg}{' stage_bias' if staged else ''}"
            try:
                kern = _gemm_kernel(cfg, staged)
                fn = lambda: kern.kernel(a, b, bias, c, 1)  # noqa: E731
                fn()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                row["configs"][name] = {"us": bench(fn), "rel_err": err,
                                        **{k2: v for k2, v in kern.facts().items() if k2 in ("registers", "spills")}}
            except Exception as e:
                row["configs"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        res["gemm"].append(row)
        save()
    res["elapsed_s"] = round(time.time() - T0, 1)
    save()
    bad = [v for v in res["softmax_verify"] if not v.get("ok")]
    print(f"softmax verify: {len(res['softmax_verify']) - len(bad)}/{len(res['softmax_verify'])} ok; bad: {bad}")
    for r in res["softmax_time"]:
        vs = " ".join(f"| {v['id']} {v['us']} x{v['vs_torch']} {v['pct_copy']}%" for v in r.get("vector", []))
        print("softmax", r.get("case"), "default", (r.get("plan") or {}).get("kernel"), r.get("us"), "x", r.get("vs_torch"),
              "pct_copy", r.get("pct_copy"), vs, "| torch", r.get("torch_us"), "copy", r.get("copy_us"), r.get("error", ""))
    gbad = [v for v in res["gemm_verify"] if not v.get("ok")]
    print(f"gemm tma variant verify: {len(res['gemm_verify']) - len(gbad)}/{len(res['gemm_verify'])} ok; bad: {gbad}")
    for r in res["gemm"]:
        print("gemm", r["shape"], "torch", r["torch_us"], {k2: v.get("us", v.get("error")) for k2, v in r["configs"].items()})
    print("compile errors:", [c for c in res["compile"] if c["error"]], "errors:", res["errors"], "elapsed", res["elapsed_s"])


if __name__ == "__main__":
    main()
