"""GPU sweep for the TileLang layer's planner rules (no arguments; writes $OUT/tilelang/sweep.json).

Compiles a few tile configurations per kernel in parallel worker processes (they fill TileLang's
disk cache), then, in this process, loads each from the cache, checks it against torch and times it
(CUDA events, median of 20) on shapes of the models suite's classes, beside torch's own time. The
rules in tilelang_src/dispatch.py are derived from what this prints; nothing here is used by them.
"""
from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BUDGET_S = 105
T0 = time.time()

GEMM_TMA = [(128, 256, 64, 3, 256), (128, 256, 64, 4, 256), (128, 256, 32, 4, 256), (128, 128, 128, 3, 256),
            (64, 128, 64, 4, 128), (64, 256, 64, 3, 128)]
GEMM_TILED = [(128, 256, 32, 2, 256), (128, 256, 64, 2, 256)]
GEMM_SHAPES = [(4096, 6144, 4096), (4096, 4096, 14336), (256, 28672, 4096), (16, 28672, 4096)]
GEMM_TILED_SHAPES = [(4096, 50257, 768)]
SPLITK = []
SM_ROWS = [(cols, rows, threads) for cols, rows, threads in
           ((512, 2, 32), (512, 1, 32), (512, 4, 32), (1024, 1, 32), (1024, 1, 64), (1024, 2, 128),
            (4096, 1, 256), (4096, 1, 128))]
SM_SMEM = [(32768, 4096, 512), (32768, 2048, 256), (32768, 4096, 1024)]
SM_ONLINE = [(2048, 256), (4096, 512), (8192, 1024), (4096, 256)]
VA = [(256, 8, 4), (256, 8, 2), (256, 8, 1), (512, 8, 2)]


def _jobs():
    j = []
    for cfg in GEMM_TMA:
        j.append(("gemm_tma", "bfloat16", cfg))
    for cfg in GEMM_TILED:
        j.append(("gemm_tiled", "bfloat16", cfg))
    for cfg in SPLITK:
        j.append(("splitk", "bfloat16", cfg))
    for cfg in SM_ROWS:
        j.append(("sm_rows", "bfloat16", cfg))
    j.append(("sm_rows", "float16", (2048, 1, 128)))
    j.append(("sm_rows", "float16", (2048, 1, 256)))
    j.append(("sm_rows", "float16", (2048, 2, 256)))
    for cfg in SM_SMEM:
        j.append(("sm_smem", "bfloat16", cfg))
        j.append(("sm_smem", "float32", cfg))
    for cfg in SM_ONLINE:
        j.append(("sm_online", "bfloat16", cfg))
        if cfg[0] >= 4096:
            j.append(("sm_online", "float32", cfg))
    for cfg in VA:
        j.append(("va", "bfloat16", cfg))
        j.append(("va", "float32", (cfg[0], 4, cfg[2])))
    return j


def build(kind, dtype, cfg):
    from tilelang_src import (gemm_epilogue_splitk, gemm_epilogue_tma, softmax_online, softmax_rows,
                              softmax_smem, vector_add_tiled)
    if kind == "gemm_tma":
        return gemm_epilogue_tma.gemm_tma_kernel(dtype, True, *cfg, tma=True)
    if kind == "gemm_tiled":
        return gemm_epilogue_tma.gemm_tma_kernel(dtype, True, *cfg, tma=False)
    if kind == "splitk":
        return gemm_epilogue_splitk.gemm_splitk_partial_kernel(dtype, *cfg)
    if kind == "splitk_epi":
        return gemm_epilogue_splitk.gemm_splitk_epilogue_kernel(dtype, True)
    if kind == "sm_rows":
        return softmax_rows.softmax_rows_kernel(dtype, *cfg)
    if kind == "sm_smem":
        return softmax_smem.softmax_smem_kernel(dtype, *cfg)
    if kind == "sm_online":
        return softmax_online.softmax_online_kernel(dtype, *cfg)
    return vector_add_tiled.vector_add_tiled_kernel(dtype, *cfg)


def compile_job(job):
    import tilelang_src
    t = time.time()
    try:
        tilelang_src.compile_kernel(job, lambda: build(*job))
        return job, round(time.time() - t, 2), None
    except Exception as e:
        return job, round(time.time() - t, 2), f"{type(e).__name__}: {str(e).splitlines()[-1][:300]}"


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


def main():
    import torch
    import tilelang_src
    out = Path(os.environ.get("OUT", "/tmp")) / "tilelang"
    out.mkdir(parents=True, exist_ok=True)
    res = {"compile": [], "gemm": [], "softmax": [], "vector_add": [], "errors": []}

    def save():
        (out / "sweep.json").write_text(json.dumps(res, indent=1))

    jobs = _jobs()
    ok = set()
    import multiprocessing

    pool = ProcessPoolExecutor(max_workers=min(14, os.cpu_count() or 4),
                               mp_context=multiprocessing.get_context("spawn"))
    futs = [pool.submit(compile_job, j) for j in jobs]
    try:
        for f in as_completed(futs, timeout=max(10, BUDGET_S - 45 - (time.time() - T0))):
            job, s, err = f.result()
            res["compile"].append({"job": repr(job), "s": s, "error": err})
            if err is None:
                ok.add(job)
    except Exception as e:
        res["errors"].append(f"compile pool: {type(e).__name__} {e}")
    for proc in list(getattr(pool, "_processes", {}).values()):   # compiles still running: stop them
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    save()
    get = lambda job: tilelang_src.compile_kernel(job, lambda: build(*job)).kernel  # noqa: E731
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def left():
        return BUDGET_S - (time.time() - T0)

    # GEMM: relu(addmm) reference
    for (m, n, k) in GEMM_SHAPES + GEMM_TILED_SHAPES:
        if left() < 20:
            break
        a = torch.randn(m, k, device=dev, generator=g, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, generator=g, dtype=torch.bfloat16)
        bias = torch.randn(n, device=dev, generator=g, dtype=torch.bfloat16)
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        ref = torch.relu(torch.addmm(bias, a, b))
        row = {"shape": [m, n, k], "torch_us": bench(lambda: torch.relu(torch.addmm(bias, a, b))), "configs": {}}
        kinds = ["gemm_tiled"] if n % 8 else ["gemm_tma", "splitk"]
        for kind in kinds:
            for cfg in (GEMM_TILED if kind == "gemm_tiled" else GEMM_TMA if kind == "gemm_tma" else SPLITK):
                job = (kind, "bfloat16", cfg)
                if job not in ok or left() < 15:
                    continue
                try:
                    if kind == "splitk":
                        tiles = -(-m // cfg[0]) * -(-n // cfg[1])
                        for s in (2, 4, 8):
                            if tiles * s > 2 * 132:
                                continue
                            w = torch.empty(s, m, n, device=dev, dtype=torch.float32)
                            k1, k2 = get(job), get(("splitk_epi", "bfloat16", ()))
                            fn = lambda: (k1(a, b, w), k2(w, bias, c, 1))  # noqa: E731
                            fn()
                            err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
                            row["configs"][f"splitk{cfg}x{s}"] = {"us": bench(fn), "rel_err": err}
                        continue
                    kern = get(job)
                    fn = lambda: kern(a, b, bias, c, 1)  # noqa: E731
                    fn()
                    err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
                    row["configs"][f"{kind}{cfg}"] = {"us": bench(fn), "rel_err": err}
                except Exception as e:
                    row["configs"][f"{kind}{cfg}"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        res["gemm"].append(row)
        save()
    # softmax
    for (m, n, dt) in ((32768, 512, torch.bfloat16), (32768, 1024, torch.bfloat16), (32768, 4096, torch.bfloat16),
                       (8192, 2048, torch.float16), (4096, 32000, torch.bfloat16), (4096, 151936, torch.bfloat16),
                       (4096, 32000, torch.float32), (4096, 151936, torch.float32)):
        if left() < 8:
            break
        x = torch.randn(m, n, device=dev, generator=g, dtype=dt)
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1)
        row = {"shape": [m, n, str(dt)], "torch_us": bench(lambda: torch.softmax(x, -1)),
               "copy_us": bench(lambda: y.copy_(x)), "configs": {}}
        name = str(dt).replace("torch.", "")
        cands = [("sm_rows", c) for c in SM_ROWS + [(2048, 1, 128), (2048, 1, 256), (2048, 2, 256)]
                 if n <= c[0] < 2 * n] \
            + [("sm_online", c) for c in SM_ONLINE] + [("sm_smem", c) for c in SM_SMEM if n <= c[0]]
        for kind, cfg in cands:
            job = (kind, name, cfg)
            if job not in ok:
                continue
            try:
                kern = get(job)
                kern(x, y)
                err = (y.float() - ref).abs().max().item()
                row["configs"][f"{kind}{cfg}"] = {"us": bench(lambda: kern(x, y)), "max_err": err}
            except Exception as e:
                row["configs"][f"{kind}{cfg}"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        res["softmax"].append(row)
        save()
    # vector add
    for (n, dt) in ((4096 * 4096, torch.bfloat16), (8192 * 8192, torch.bfloat16), (2 ** 27 + 1, torch.float32),
                    (16 * 4096, torch.bfloat16)):
        if left() < 4:
            break
        x = torch.randn(n, device=dev, generator=g, dtype=dt)
        yv = torch.randn(n, device=dev, generator=g, dtype=dt)
        z = torch.empty_like(x)
        row = {"n": n, "dtype": str(dt), "torch_us": bench(lambda: torch.add(x, yv, out=z)), "configs": {}}
        name = str(dt).replace("torch.", "")
        for cfg in VA:
            cfg = cfg if name != "float32" else (cfg[0], 4, cfg[2])
            job = ("va", name, cfg)
            if job not in ok:
                continue
            kern = get(job)
            kern(x, yv, z)
            ok_ = torch.equal(z, x + yv)
            row["configs"][str(cfg)] = {"us": bench(lambda: kern(x, yv, z)), "exact": ok_}
        res["vector_add"].append(row)
        save()
    res["elapsed_s"] = round(time.time() - T0, 1)
    save()
    print(json.dumps(res, indent=1)[:6000])


if __name__ == "__main__":
    main()
