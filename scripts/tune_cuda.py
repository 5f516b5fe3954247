#!/usr/bin/env python3
"""One GPU call for the CUDA C++ layer (kl_cuda) and the cupy layer (NVRTC of the same .cu):

1. verify every cuda:* implementation on the verify suite (harness.verify.verify_case);
2. time, cold L2 (harness.timing.time_cold, interleaved): a 1 GiB device copy (the ceiling),
   vector add fp32 N = 2^28 (torch.add, the kernel at several grid sizes, cupy), softmax fp32
   M = 4096 x N in {1024 .. 16384} and M = 8192 x N in {32768, 131072, 262144} (torch.softmax,
   a copy of the same byte count, the dispatcher, every path with its tuning knobs: block ept,
   online C, rows blocks_per_sm, smem C / threads; cupy);
3. verify every cupy:* implementation on the verify suite;
4. compute-sanitizer --tool memcheck and --tool racecheck on a small verify run (``--sanitize``);
5. (stage ``profile``) kernel durations from CUPTI (torch.profiler) for the long-row paths, so
   the launch path (pybind11 vs CuPy) can be told apart from the kernel itself;
writing JSON under $OUT (default results/tune_cuda/) after each stage and a table at the end.
KL_DEADLINE (epoch seconds) bounds the whole run; later stages are skipped with a note when short.
Environment: KL_TUNE_STAGES (comma list of verify_cuda, bench, verify_cupy, profile, sanitize;
default all but profile), KL_TUNE_SHAPES (softmax shapes to time, e.g. "8192x131072,8192x262144"),
KL_TUNE_IDS (the cuda:* ids to verify; their cupy:* twins in verify_cupy).
``--sanitize-split``: run under compute-sanitizer, the split path alone with a spin budget of 2^30
polls (its blocks wait for each other; a slowed tool must not turn that wait into a timeout).

    python3 -m pip install -q --no-build-isolation --no-deps --no-index -e . && \
        KL_DEADLINE=$(( $(date +%s) + 280 )) PYTHONUNBUFFERED=1 python3 scripts/tune_cuda.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from harness import problems, registry  # noqa: E402
from harness.timing import TimingConfig, time_cold  # noqa: E402
from harness.verify import verify_case  # noqa: E402

OUT = Path(os.environ.get("OUT") or ROOT / "results" / "tune_cuda")
DEADLINE = float(os.environ.get("KL_DEADLINE", time.time() + 280))
CUDA_IDS = ["cuda:vector_add", "cuda:softmax", "cuda:softmax_warp", "cuda:softmax_block", "cuda:softmax_online",
            "cuda:softmax_rows", "cuda:softmax_smem", "cuda:softmax_split"]
if os.environ.get("KL_TUNE_IDS"):
    CUDA_IDS = os.environ["KL_TUNE_IDS"].replace(",", " ").split()
CUPY_IDS = [i.replace("cuda:", "cupy:") for i in CUDA_IDS]
SOFTMAX_SHAPES = [(4096, n_) for n_ in (1024, 2048, 4096, 8192, 16384)] + [(8192, n_) for n_ in (32768, 131072, 262144)]
if os.environ.get("KL_TUNE_SHAPES"):
    SOFTMAX_SHAPES = [tuple(int(v) for v in s_.split("x")) for s_ in os.environ["KL_TUNE_SHAPES"].split(",")]
# the GEMM kernels join the sanitizer run only (their tuning is scripts/tune_cuda_gemm.py)
GEMM_IDS = ["cuda:gemm", "cuda:gemm_wgmma", "cuda:gemm_pingpong", "cuda:gemm_pingpong_c2", "cuda:gemm_mma"]
RESULT: dict = {}


def left() -> float:
    return DEADLINE - time.time()


def save():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tune_cuda.json").write_text(json.dumps(RESULT, indent=1, default=str))


def impl_of(impl_id):
    name = impl_id.split(":", 1)[1]
    problem = "vector_add" if name == "vector_add" else "gemm_epilogue" if name.startswith("gemm") else "softmax"
    return registry.get(problem, impl_id), problems.get(problem)


def verify_all(ids, key, seeds=(0, 1, 2), repeat=True, cases=None):
    rows = []
    for impl_id in ids:
        impl, prob = impl_of(impl_id)
        why = impl.available()
        if why:
            rows.append({"impl": impl_id, "status": "SKIP", "reason": why})
            continue
        for case in cases(prob) if cases else prob.cases("verify"):
            if impl.supports(case):
                continue
            if left() < 20:
                rows.append({"impl": impl_id, "case": case.id, "status": "SKIP", "reason": "out of time"})
                continue
            try:
                c = verify_case(impl, prob, case, "cuda", seeds=seeds, repeat=repeat)
                rows.append({"impl": impl_id, "case": case.id, "status": "PASS" if c.ok else "FAIL",
                             "reason": c.reason, "max_abs_err": c.max_abs_err, "rel_err": c.rel_err})
            except Exception as e:
                rows.append({"impl": impl_id, "case": case.id, "status": "ERROR",
                             "reason": f"{type(e).__name__}: {e}"})
    RESULT[key] = rows
    save()
    bad = [r for r in rows if r["status"] in ("FAIL", "ERROR")]
    npass = sum(r["status"] == "PASS" for r in rows)
    print(f"[{key}] {npass} PASS, {len(bad)} FAIL/ERROR, {sum(r['status'] == 'SKIP' for r in rows)} SKIP")
    for r in bad[:20]:
        print("   ", r["impl"], r.get("case"), r["status"], r["reason"][:300])
    return rows


CFG = TimingConfig(min_samples=10, max_samples=200, rel_spread=0.01, time_cap_s=0.4, warmup_ms=5)


def timed(launches: dict, bytes_moved: int) -> dict:
    st = time_cold(launches, CFG, "cuda")
    return {k: {"median_s": s.quartiles()[1], "iqr_s": s.quartiles()[2] - s.quartiles()[0], "n": s.n,
                "tbps": bytes_moved / s.quartiles()[1] / 1e12} for k, s in st.items()}


def bench():
    import backends.cuda_layer as cl
    import backends.cupy_layer as cp

    kl = cl.module()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    res = {}
    # copy ceiling: 1 GiB fp32 device-to-device, bytes read + written
    n = 2 ** 28
    a = torch.randn(n, device=dev, generator=g)
    b = torch.empty_like(a)
    res["copy"] = timed({"copy": lambda: b.copy_(a)}, 2 * n * 4)["copy"]
    ceiling = res["copy"]["tbps"]
    print(f"copy ceiling {ceiling:.3f} TB/s")
    # vector add fp32 2^28
    c = torch.empty_like(a)
    out = torch.empty_like(a)
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    args = (a.data_ptr(), c.data_ptr(), out.data_ptr(), n, 0)
    c.copy_(torch.randn(n, device=dev, generator=g))
    plan = kl.vector_add_plan(*args, 0)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    full = -(-n // (4 * 256 * 4))
    L = {"torch.add": lambda: torch.add(a, c, out=out),
         f"cuda default grid={plan['grid']}": lambda: kl.vector_add(*args, stream(), 0)}
    for gsz in sorted({plan["grid"] * 2, plan["grid"] * 4, sms * 16, full}):
        L[f"cuda grid={gsz}"] = (lambda gg: lambda: kl.vector_add(*args, stream(), 0, gg))(gsz)
    if cp.available() is None:
        L["cupy"] = lambda: cp.vector_add(a, c, out)
    res["vector_add"] = {"N": n, "plan": plan, "rows": timed(L, 3 * n * 4)}
    ok = torch.equal(out, a + c)
    res["vector_add"]["last_output_correct"] = ok
    del a, b, c, out
    torch.cuda.empty_cache()
    RESULT["bench"] = res
    save()
    # softmax fp32
    res["softmax"] = {}
    for M, N in SOFTMAX_SHAPES:
        if left() < 60:
            res["softmax"][f"{M}x{N}"] = "skipped: out of time"
            continue
        x = torch.randn(M, N, device=dev, generator=g)
        y = torch.empty_like(x)
        a_ = (x.data_ptr(), y.data_ptr(), M, N, N, N, 0)
        L = {"torch.softmax": lambda: torch.softmax(x, -1),
             "copy same bytes": lambda: y.copy_(x),  # the ceiling at this size (launch + ramp included)
             "cuda:softmax (auto)": (lambda: kl.softmax("auto", *a_, stream(), 0))}
        plans = {"auto": kl.softmax_plan("auto", *a_, 0)}
        if N <= 1024:
            for th in (128, 256):
                L[f"warp threads={th}"] = (lambda t: lambda: kl.softmax("warp", *a_, stream(), 0, t))(th)
        if N <= 32768:
            for e in (8, 16, 32):
                try:
                    plans[f"block ept={e}"] = kl.softmax_plan("block", *a_, 0, 0, e)
                except ValueError:
                    continue
                L[f"block ept={e}"] = (lambda ee: lambda: kl.softmax("block", *a_, stream(), 0, 0, ee))(e)
        if N <= 8192:  # persistent multi-row kernel, CTAs per SM (default 3 or 2 = all resident; more = waves)
            for bps in (1, 2, 3, 4):
                plans[f"rows bps={bps}"] = kl.softmax_plan("rows", *a_, 0, 0, 0, 0, bps)
                L[f"rows bps={bps}"] = (lambda b_: lambda: kl.softmax("rows", *a_, stream(), 0, 0, 0, 0, b_))(bps)
        if N >= 16384:  # slice in shared memory: one read + one write; default C (64 KiB slices), 8, 16
            for cl_, th in ((0, 512), (0, 256), (8, 512), (16, 512), (4, 512)):
                try:
                    plans[f"smem C={cl_ or 'auto'} threads={th}"] = kl.softmax_plan("smem", *a_, 0, th, 0, cl_)
                except ValueError:
                    continue
                L[f"smem C={cl_ or 'auto'} threads={th}"] = (lambda cc, t: lambda: kl.softmax(
                    "smem", *a_, stream(), 0, t, 0, cc))(cl_, th)
        if N >= 8192:
            for cl_ in (1, 2, 4, 8):
                for th in ((256, 512) if cl_ in (1, 8) else (512,)):
                    L[f"online C={cl_} threads={th}"] = (lambda cc, t: lambda: kl.softmax(
                        "online", *a_, stream(), 0, t, 0, cc))(cl_, th)
        if N > 32768:  # persistent cooperative grid, chunks in registers, 64-bit slot exchange
            # threads 512 x 32 values or 256 x 64 (both 2 blocks an SM); 1 block per SM for contrast
            for th, bps in ((512, 0), (256, 0), (512, 1)):
                name = f"split threads={th} bps={bps or 'auto'}"
                try:
                    plans[name] = kl.softmax_plan("split", *a_, 0, th, 0, 0, bps)
                    L[name] = (lambda t, b_: lambda: kl.softmax("split", *a_, stream(), 0, t, 0, 0, b_))(th, bps)
                except ValueError as e:
                    plans[name] = f"declined: {e}"
        if cp.available() is None and left() > 90:
            L["cupy:softmax (auto)"] = lambda: cp.softmax(x, y)
            if N <= 8192:
                L["cupy:softmax_rows"] = lambda: cp.softmax(x, y, path="rows")
            if N >= 32768:
                L["cupy:softmax_smem"] = lambda: cp.softmax(x, y, path="smem")
            if N > 32768:
                L["cupy:softmax_split"] = lambda: cp.softmax(x, y, path="split")
                L["cupy:softmax_split threads=256"] = lambda: cp.softmax(x, y, path="split", threads=256)
        rows = timed(L, 2 * M * N * 4)
        torch_t = rows["torch.softmax"]["median_s"]
        for k, r in rows.items():
            r["pct_copy"] = 100 * r["tbps"] / ceiling
            r["vs_torch"] = torch_t / r["median_s"]
        ref = torch.softmax(x, -1)
        kl.softmax("auto", *a_, stream(), 0)
        err = (y - ref).abs().max().item()
        res["softmax"][f"{M}x{N}"] = {"plans": plans, "rows": rows, "auto_max_abs_err_vs_torch": err}
        best = max((r for k, r in rows.items() if not k.startswith(("torch", "copy"))), key=lambda r: r["tbps"])
        print(f"softmax {M}x{N}: auto {rows['cuda:softmax (auto)']['tbps']:.3f} TB/s "
              f"({rows['cuda:softmax (auto)']['pct_copy']:.0f}% copy, x{rows['cuda:softmax (auto)']['vs_torch']:.2f} torch), "
              f"best {best['tbps']:.3f}, torch {rows['torch.softmax']['tbps']:.3f}")
        del x, y, ref
        torch.cuda.empty_cache()
        save()
    RESULT["bench"] = res
    save()
    return res


def sanitize_cases(prob):
    c = prob.case
    if prob.name == "gemm_epilogue":
        # partial M/N tiles, K % 64 != 0, an odd count of M tiles (cluster pairs), several tiles per
        # persistent CTA with K long enough to wrap the stage ring; the 17 x 33 x 40 case takes
        # only the portable path (TMA needs N, K multiples of 8)
        return [c(M=129, N=264, K=72, act="relu"), c(M=640, N=136, K=4104, dtype="float16", act="gelu"),
                c(M=256, N=256, K=256, act="none", bias=0), c(M=17, N=33, K=40, act="relu"),
                c(M=1025, N=768, K=512, act="gelu")]
    if prob.name == "vector_add":
        return [c(N=98_432, misalign=1), c(N=4099, dtype="float16", misalign=3), c(N=127), c(N=1_000_003)]
    return [c(M=3, N=1000), c(M=37, N=1000, dtype="float16", layout="strided"), c(M=3, N=4097),
            c(M=600, N=1024), c(M=2, N=262_144), c(M=3, N=262_147, layout="strided_odd"),
            c(M=30, N=777, layout="strided_odd"), c(M=2, N=131_072, dtype="bfloat16"),
            c(M=4, N=32_768, kind="neginf"), c(M=1, N=98_432), c(M=5, N=70_000, layout="strided_odd")]


def run_sanitizer():
    out = {}
    exe = "compute-sanitizer"
    for tool in ("memcheck", "racecheck", "synccheck"):
        budget = min(left() - 15, 150)
        if budget < 30:
            out[tool] = {"status": "skipped: out of time"}
            continue
        cmd = [exe, "--tool", tool, "--error-exitcode", "1", sys.executable, str(Path(__file__).resolve()),
               "--sanitize"]
        t0 = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=budget)
            tail = (r.stdout + r.stderr).strip().splitlines()
            out[tool] = {"command": " ".join(cmd[:5]) + " python3 scripts/tune_cuda.py --sanitize",
                         "rc": r.returncode, "seconds": time.time() - t0,
                         "summary": [line for line in tail if "ERROR SUMMARY" in line or "RACECHECK SUMMARY" in line
                                     or "sanitize:" in line][-6:], "tail": tail[-25:]}
        except FileNotFoundError:
            out[tool] = {"status": "compute-sanitizer not found"}
        except subprocess.TimeoutExpired:
            out[tool] = {"status": f"timed out after {budget:.0f} s"}
        print(f"[sanitizer {tool}]", json.dumps(out[tool].get("summary") or out[tool].get("status")))
        RESULT["sanitizer"] = out
        save()
    return out


def sanitize_main():
    """Run under compute-sanitizer: small verify cases of every cuda:* row (vector add, softmax,
    GEMM), one seed, no repeat."""
    # cuda:softmax_split is left out: its blocks wait for each other (bounded spin), and a tool that
    # slows or serialises blocks (racecheck) would turn that wait into a timeout (NaN rows) or a
    # run of many minutes; check it under memcheck on its own, with a large max_spin, once it has
    # passed verification on the GPU
    ids = [i for i in CUDA_IDS if i != "cuda:softmax_split"] + GEMM_IDS
    rows = verify_all(ids, "sanitize", seeds=(0,), repeat=False, cases=sanitize_cases)
    bad = [r for r in rows if r["status"] != "PASS"]
    print(f"sanitize: {len(rows) - len(bad)} cases passed, {len(bad)} not")
    return 1 if bad else 0


def sanitize_split_main():
    """Run under compute-sanitizer: the split path on ragged, strided, low-precision and multi-round
    cases, with 2^30 polls of spin budget, checked against torch.softmax in float64."""
    import backends.cuda_layer as cl

    cases = [(2, 262_144, torch.float32, 0), (3, 262_147, torch.float32, 5), (2, 131_072, torch.bfloat16, 0),
             (5, 70_000, torch.float32, 3), (40, 100_000, torch.float16, 0), (300, 40_000, torch.float32, 0)]
    bad = 0
    for M, N, dt, pad in cases:
        x = torch.randn(M, N + pad, device="cuda").to(dt)[:, :N]
        y = cl.softmax(x, path="split", max_spin=1 << 30)
        ref = torch.softmax(x.double(), -1)
        tol = dict(rtol=1e-4, atol=1e-9) if dt == torch.float32 else dict(rtol=2e-2, atol=1e-5)
        ok = torch.allclose(y.double(), ref, **tol)
        bad += not ok
        print(f"sanitize-split {M}x{N} {dt} pad={pad}: {'PASS' if ok else 'FAIL'}")
    print(f"sanitize-split: {len(cases) - bad} cases passed, {bad} not")
    return 1 if bad else 0


def profile():
    """Kernel durations from CUPTI (torch.profiler), warm, for the long-row paths through both launch
    paths: if the pybind11 and CuPy launches of one kernel differ here, the kernel differs (flags,
    arch); if they agree here but not under the cold-launch timer, the launch path differs."""
    import backends.cuda_layer as cl
    import backends.cupy_layer as cp
    from torch.profiler import ProfilerActivity, profile as tprof

    kl = cl.module()
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    out = {}
    for M, N in [s_ for s_ in SOFTMAX_SHAPES if s_[1] > 32768]:
        x = torch.randn(M, N, device="cuda")
        y = torch.empty_like(x)
        a_ = (x.data_ptr(), y.data_ptr(), M, N, N, N, 0)
        # name -> (launch, the substring naming its kernel event): only that kernel's durations count,
        # not the slot zeroing before a split launch (a memset from C++, a torch fill from CuPy)
        L = {f"cuda {p}": ((lambda pp: lambda: kl.softmax(pp, *a_, stream(), 0))(p), f"softmax_{p}_kernel")
             for p in ("smem", "online", "split")}
        if cp.available() is None:
            L.update({f"cupy {p}": ((lambda pp: lambda: cp.softmax(x, y, path=pp))(p), f"softmax_{p}_kernel")
                      for p in ("smem", "online", "split")})
        L["copy same bytes"] = (lambda: y.copy_(x), "Memcpy")
        res = {}
        for k, (f, kernel) in L.items():
            try:
                f()
                torch.cuda.synchronize()
            except Exception as e:
                res[k] = f"{type(e).__name__}: {e}"
                continue
            with tprof(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    f()
                torch.cuda.synchronize()
            ks = [e_ for e_ in prof.events() if e_.device_type.name == "CUDA" and kernel in e_.name]
            durs = sorted(e_.time_range.elapsed_us() for e_ in ks)  # microseconds
            if not durs:
                res[k] = "no kernel events"
                continue
            med = durs[len(durs) // 2]
            names = sorted({e_.name[:80] for e_ in ks})
            res[k] = {"kernel_us_median": med, "kernel_us_min": durs[0], "n": len(durs), "kernels": names,
                      "tbps": 2 * M * N * 4 / (med * 1e-6) / 1e12}
            print(f"profile {M}x{N} {k:18s} {med:9.1f} us  {res[k]['tbps']:.3f} TB/s  {names}")
        out[f"{M}x{N}"] = res
        del x, y
        torch.cuda.empty_cache()
        RESULT["profile"] = out
        save()
    return out


def main():
    if "--sanitize" in sys.argv:
        sys.exit(sanitize_main())
    if "--sanitize-split" in sys.argv:
        sys.exit(sanitize_split_main())
    import kl_cuda_build

    props = torch.cuda.get_device_properties(0)
    RESULT["machine"] = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                         "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                         "kl_cuda_build": {k: getattr(kl_cuda_build, k) for k in ("BUILT", "REASON", "NVCC_VERSION",
                                                                                   "ARCH_FLAGS", "HAS_GEMM")}}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        RESULT["machine"]["nvidia_smi"] = smi
    except Exception:
        pass
    print(RESULT["machine"])
    save()
    stages = {"verify_cuda": lambda: verify_all(CUDA_IDS, "verify_cuda"), "bench": bench,
              "verify_cupy": lambda: verify_all(CUPY_IDS, "verify_cupy"), "profile": profile, "sanitize": run_sanitizer}
    chosen = os.environ.get("KL_TUNE_STAGES", "verify_cuda,bench,verify_cupy,sanitize").split(",")
    unknown = [c for c in chosen if c not in stages]
    if unknown:
        sys.exit(f"KL_TUNE_STAGES: unknown stage(s) {unknown}; known: {', '.join(stages)}")
    for stage in (stages[c] for c in chosen):
        if left() < 25:
            print("out of time; stopping")
            break
        try:
            stage()
        except Exception:
            traceback.print_exc()
            RESULT.setdefault("errors", []).append(traceback.format_exc()[-2000:])
            save()
    summary()


def summary():
    b = RESULT.get("bench", {})
    print("\n=== summary (fp32, cold L2) ===")
    if "copy" in b:
        print(f"copy ceiling: {b['copy']['tbps']:.3f} TB/s")
    if "vector_add" in b:
        for k, r in b["vector_add"]["rows"].items():
            print(f"vector_add 2^28  {k:34s} {r['tbps']:.3f} TB/s  {100 * r['tbps'] / b['copy']['tbps']:.1f}% copy")
    for shape, d in b.get("softmax", {}).items():
        if isinstance(d, str):
            print(f"softmax {shape}: {d}")
            continue
        for k, r in sorted(d["rows"].items(), key=lambda kv: -kv[1]["tbps"]):
            print(f"softmax {shape:12s} {k:28s} {r['tbps']:.3f} TB/s {r['pct_copy']:5.1f}% copy  x{r['vs_torch']:.2f} torch")
    for key in ("verify_cuda", "verify_cupy"):
        rows = RESULT.get(key, [])
        print(f"{key}: {sum(r['status'] == 'PASS' for r in rows)} PASS, "
              f"{sum(r['status'] in ('FAIL', 'ERROR') for r in rows)} FAIL/ERROR")
    for tool, d in RESULT.get("sanitizer", {}).items():
        print(f"sanitizer {tool}: rc={d.get('rc')} {d.get('summary') or d.get('status')}")


if __name__ == "__main__":
    main()
