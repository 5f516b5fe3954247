"""GPU check of the Gluon layer (no arguments, about two minutes at most): writes
$OUT/gluon/gpu_gluon.json and prints a summary.

1. every Gluon variant on a few cases that reach its paths (verify_case against float64);
2. the smem kernel's own test cases (alignment classes, -inf rows, 4 / 8 / 16 warps);
3. timings (CUDA events, median) of the default plan and of the alternatives its rules choose
   between on the models suite's shape classes, against torch eager, so the tables' rules can be
   checked: softmax online grids / tiles against split and block on long rows; GEMM tile configs.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
T0 = time.time()
BUDGET = 110.0
OUT = Path(os.environ.get("OUT", "/tmp")) / "gluon"
RESULT: dict = {"checks": [], "timings": [], "errors": []}


def left() -> float:
    return BUDGET - (time.time() - T0)


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    RESULT["elapsed_s"] = round(time.time() - T0, 1)
    (OUT / "gpu_gluon.json").write_text(json.dumps(RESULT, indent=1, default=str))


def short(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[-1][:400] if lines else ''}"


def bench(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return sorted(times)[len(times) // 2]


def checks() -> None:
    from harness import problems, registry
    from harness.verify import verify_case
    P = problems.get
    todo = [
        ("vector_add", "vector_add", [dict(N=1_000_003, dtype="bfloat16"), dict(N=98_432, misalign=1), dict(N=1)]),
        ("vector_add", "vector_add_simple", [dict(N=4099, dtype="float16", misalign=3)]),
        ("softmax", "softmax_rows", [dict(M=4099, N=33, dtype="bfloat16", layout="strided_odd"), dict(M=129, N=1),
                                     dict(M=1823, N=781, layout="strided")]),
        ("softmax", "softmax_block", [dict(M=2048, N=2050, dtype="float16"), dict(M=33, N=3001, dtype="bfloat16", layout="strided_odd")]),
        ("softmax", "softmax_split", [dict(M=3, N=262_147), dict(M=4, N=32_768, kind="neginf"), dict(M=2, N=131_072, dtype="bfloat16")]),
        ("softmax", "softmax_online", [dict(M=17, N=40_000, dtype="float16", layout="strided_odd"), dict(M=64, N=1000, kind="neginf")]),
        ("softmax", "softmax_smem", [dict(M=300, N=50_257, dtype="bfloat16"), dict(M=17, N=40_000, dtype="float16", layout="strided")]),
        ("softmax", "softmax", [dict(M=1, N=98_432), dict(M=1823, N=781), dict(M=300, N=777, layout="strided_odd")]),
        ("softmax", "softmax_simple", [dict(M=64, N=1000, kind="large", dtype="float16")]),
        ("gemm_epilogue", "gemm_epilogue_tma", [dict(M=512, N=384, K=1024, act="relu"), dict(M=1, N=1024, K=512, act="gelu"),
                                                dict(M=256, N=256, K=256, act="gelu", bias=0, dtype="float16")]),
        ("gemm_epilogue", "gemm_epilogue_tiled", [dict(M=2050, N=1001, K=136, act="gelu"), dict(M=1, N=17, K=33, act="relu"),
                                                  dict(M=127, N=65, K=129, act="none", dtype="float16")]),
        ("gemm_epilogue", "gemm_epilogue", [dict(M=640, N=136, K=4104, act="gelu", bias=0), dict(M=7, N=4000, K=2048, act="relu", bias=0)]),
        ("gemm_epilogue", "gemm_epilogue_simple", [dict(M=33, N=1001, K=3000, act="gelu")]),
        ("gemm_epilogue", "gemm_epilogue_splitk", [dict(M=16, N=520, K=8192, act="none"), dict(M=1, N=1024, K=512, act="gelu")]),
    ]
    for problem, name, cases in todo:
        impl = registry.get(problem, f"gluon:{name}")
        for kw in cases:
            if left() < 60:
                RESULT["errors"].append("checks: out of time")
                return
            case = P(problem).case(**kw)
            t = time.time()
            try:
                c = verify_case(impl, P(problem), case, "cuda", seeds=(0,), repeat=True)
                RESULT["checks"].append({"id": impl.id, "case": case.label, "ok": c.ok, "reason": c.reason,
                                         "s": round(time.time() - t, 1)})
            except Exception as e:
                RESULT["checks"].append({"id": impl.id, "case": case.label, "ok": False, "reason": short(e),
                                         "trace": traceback.format_exc()[-1500:]})
        save()


def timings() -> None:
    from gluon_src import dispatch, softmax_online, softmax_smem
    from gluon_src.runtime import bind_all
    dev = torch.device("cuda")
    facts = dispatch.device_facts(dev)
    for M, N, dt in ((4096, 128_256, torch.bfloat16), (4096, 151_936, torch.float32), (4096, 50_257, torch.bfloat16),
                     (4096, 32_000, torch.float32)):
        if left() < 25:
            return
        x = torch.randn(M, N, device=dev, dtype=dt)
        out = torch.empty_like(x)
        copy_us = bench(lambda: out.copy_(x))
        row = {"problem": "softmax", "shape": [M, N, str(dt)], "copy_us": copy_us,
               "torch_us": bench(lambda: torch.softmax(x, dim=-1)), "alts": {}}
        plan = dispatch.plan_softmax(x, out)
        row["default"] = [plan.variant, bench(plan.launch)]
        es = x.element_size()
        alts = []
        for blk in (4096, 8192, 16384):
            for per_sm in (0.5, 1, 2, 4):
                alts.append((f"online {blk} x{per_sm}", "online",
                             softmax_online.config(es, blk, 8 if blk == 4096 else 16, int(facts["sms"] * per_sm))))
        if dispatch.softmax_smem_config(M, N, es, facts):
            for w in (4, 8, 16):
                if softmax_smem.supports(N, es, w, facts) is None:
                    alts.append((f"smem w{w}", "smem", softmax_smem.config(N, es, w)))
        for name, v, cfg in alts:
            try:
                if v == "smem":
                    launch = softmax_smem.bind_launch(x, out, cfg)
                else:
                    launch = bind_all(dispatch.softmax_specs(v, x, out, cfg), dev)
                row["alts"][name] = bench(launch)
            except Exception as e:
                row["alts"][name] = short(e)
        RESULT["timings"].append(row)
        save()
    for M, N, K in ((4096, 6144, 4096), (16, 6144, 4096), (256, 4096, 14336), (4096, 50257, 768), (16, 28672, 4096)):
        if left() < 10:
            return
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
        out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        row = {"problem": "gemm_epilogue", "shape": [M, N, K], "torch_us": bench(lambda: torch.addmm(bias, a, b)),
               "alts": {}}
        plan = dispatch.plan_gemm(a, b, bias, "none", out)
        row["default"] = [plan.variant, {k: plan.config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps")},
                          bench(plan.launch)]
        kind = "tiled" if plan.variant == "tiled" else "tma"
        alts = [(kind, cfg) for cfg in dispatch.GEMM[kind]]
        if kind == "tma" and M <= 64:
            alts += [("splitk", dict(dispatch.GEMM["few_rows"], SPLIT=s)) for s in (2, 3, 4)]
        for v, cfg in alts:
            key = f"{v} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['STAGES']} w{cfg['num_warps']}"
            key += f" S{cfg['SPLIT']}" if v == "splitk" else ""
            if left() < 5:
                break
            try:
                row["alts"][key] = bench(bind_all(dispatch.gemm_specs(v, a, b, bias, "none", out, cfg, facts["sms"]), dev))
            except Exception as e:
                row["alts"][key] = short(e)
        RESULT["timings"].append(row)
        save()


def main() -> None:
    RESULT["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    try:
        import triton
        RESULT["triton"] = triton.__version__
    except Exception as e:
        RESULT["errors"].append(short(e))
    for step in (checks, timings):
        try:
            step()
        except Exception as e:
            RESULT["errors"].append(f"{step.__name__}: {short(e)}\n{traceback.format_exc()[-2000:]}")
        save()
    bad = [c for c in RESULT["checks"] if not c["ok"]]
    print(f"gluon GPU check: {len(RESULT['checks']) - len(bad)}/{len(RESULT['checks'])} checks pass; "
          f"{len(RESULT['timings'])} timing rows; {RESULT['elapsed_s']} s")
    for c in bad:
        print("FAIL", c["id"], c["case"], c["reason"])
    for r in RESULT["timings"]:
        print(r["problem"], r["shape"], "default", r["default"], "torch", round(r["torch_us"], 1),
              "copy" if "copy_us" in r else "", round(r.get("copy_us", 0), 1))
        for k, v in r["alts"].items():
            print("   ", k, v if isinstance(v, str) else round(v, 1))


if __name__ == "__main__":
    main()
