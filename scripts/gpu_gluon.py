"""GPU check of the Gluon layer (no arguments, about two minutes at most): writes
$OUT/gluon/gpu_gluon.json and prints a summary.

1. every Gluon variant on a few cases that reach its paths (verify_case against float64);
2. the smem kernel's own test cases (alignment classes, -inf rows, 4 / 8 / 16 warps);
3. the candidates that are off in the tables (not yet run on a GPU before this script):
   ``softmax_split_smem`` (verify, -inf rows, the bounded spin on a grid too small to hold a row,
   the default with ``SOFTMAX["split_smem"]`` on) and the modelled split-K rule
   (``GEMM["splitk_by_model"]``: the default with it on, and splitk with the large tiles it picks);
4. timings (CUDA events, median) of the candidates against the current default and torch eager:
   long softmax rows (online today) against split_smem at every chunk length of the rule's range;
   GEMMs of a few hundred rows (today's tile against the model's split and its neighbours).
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
BUDGET = 135.0
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
        ("softmax", "softmax_split_smem", [dict(M=300, N=128_256, dtype="bfloat16"), dict(M=64, N=151_936),
                                           dict(M=33, N=40_000, dtype="float16", kind="neginf"), dict(M=3, N=262_144),
                                           dict(M=200, N=100_000, dtype="bfloat16", kind="large")]),
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
        impl = registry.get(problem, f"gluon:{name}", candidates=True)
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


def candidates() -> None:
    """The tables' candidates that are off today: split_smem's protocol and edge rows, the default
    with each flag on, and splitk with the large tiles the modelled rule picks."""
    from harness import problems, registry
    from harness.verify import verify_case
    from gluon_src import dispatch
    from gluon_src import softmax_split_smem as SS
    from gluon_src.gemm_epilogue_splitk import workspace
    from gluon_src.runtime import bind, bind_all
    dev = torch.device("cuda")
    facts = dispatch.device_facts(dev)

    def record(name, label, fn):
        t = time.time()
        try:
            ok, reason = fn()
        except Exception as e:
            ok, reason = False, short(e)
        RESULT["checks"].append({"id": name, "case": label, "ok": bool(ok), "reason": reason, "s": round(time.time() - t, 1)})

    # an all -inf row, -inf lanes, large magnitudes, odd N (the tail group), every dtype
    for M, N, dt in ((37, 128_256, torch.bfloat16), (37, 100_003, torch.float16), (37, 151_936, torch.float32)):
        if left() < 70:
            return
        def one(M=M, N=N, dt=dt):
            pad = (-N) % 8
            x = (torch.randn(M, N + pad, device=dev, dtype=dt) * 4)[:, :N]
            x[1, 7:50_000] = float("-inf")
            x[2] = float("-inf")
            x[3] *= 1000 if dt == torch.float16 else 3000      # fp16: no overflow to inf
            out = torch.full((M, N + pad), float("nan"), device=dev, dtype=dt)[:, :N]
            cfg = dispatch.softmax_split_smem_config(M, N, x.element_size(), facts)
            launch = SS.bind_launch(x, out, cfg, facts)
            launch()
            launch()                      # twice: the slots are zeroed every call
            torch.cuda.synchronize()
            ref = torch.softmax(x.double(), dim=1)
            keep = torch.ones(M, dtype=torch.bool, device=dev)
            keep[2] = False
            err = (out[keep].double() - ref[keep]).abs().max().item()
            tol = 1e-5 if dt == torch.float32 else 2e-2
            return (err < tol and bool(torch.isnan(out[2]).all())), f"max err {err:.2e}, cfg {launch.config}"
        record("split_smem edges", f"{M}x{N} {dt}", one)

    def spin():                       # a grid of C - 1 programs never completes a row: NaN, no hang
        x = torch.randn(4, 128_256, device=dev, dtype=torch.bfloat16)
        out = torch.zeros_like(x)
        cfg = dispatch.softmax_split_smem_config(4, 128_256, 2, facts)
        slots = torch.zeros(4 * cfg["C"], dtype=torch.int64, device=dev)
        spec = SS.launch_spec(x, out, slots, cfg, cfg["C"] - 1, max_spin=2000)
        t = time.time()
        bind(spec, dev)()
        torch.cuda.synchronize()
        return bool(torch.isnan(out[0]).any()), f"{time.time() - t:.2f} s"
    record("split_smem spin", "grid C - 1", spin)

    flags = ((dispatch.SOFTMAX, "split_smem", "softmax", "softmax",
              [dict(M=300, N=128_256, dtype="bfloat16"), dict(M=200, N=151_936), dict(M=300, N=131_072, dtype="float16")]),
             (dispatch.GEMM, "splitk_by_model", "gemm_epilogue", "gemm_epilogue",
              [dict(M=256, N=4096, K=14_336, act="gelu"), dict(M=200, N=1000, K=8192, act="relu"),
               dict(M=256, N=8192, K=28_672, act="none", bias=0)]))
    for table, key, problem, name, cases in flags:
        impl = registry.get(problem, f"gluon:{name}", candidates=True)
        table[key] = True
        try:
            for kw in cases:
                if left() < 55:
                    return
                case = problems.get(problem).case(**kw)
                def one(case=case):
                    c = verify_case(impl, problems.get(problem), case, "cuda", seeds=(0,), repeat=True)
                    return c.ok, c.reason
                record(f"{impl.id} {key}=on", case.label, one)
        finally:
            table[key] = False
        save()
    # splitk with the large tiles, M not a multiple of the tile, every activation
    for M, N, K, act, cfg in ((200, 1024, 4096, "gelu", dict(dispatch.GEMM["tma"][0], SPLIT=4)),
                              (129, 2048, 8192, "relu", dict(dispatch.GEMM["tma"][1], SPLIT=3))):
        if left() < 50:
            return
        def one(M=M, N=N, K=K, act=act, cfg=cfg):
            a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
            b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
            bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
            out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
            ws = workspace(a, b, cfg)
            bind_all(dispatch.gemm_specs("splitk", a, b, bias, act, out, cfg, facts["sms"], ws), dev)()
            ref = a.double() @ b.double() + bias.double()
            ref = {"none": ref, "relu": ref.clamp_min(0), "gelu": torch.nn.functional.gelu(ref, approximate="tanh")}[act]
            err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
            return err < 1e-2, f"rel max err {err:.2e}"
        record("splitk large tile", f"{M}x{N}x{K} {act} {cfg['BLOCK_M']}x{cfg['BLOCK_N']} S{cfg['SPLIT']}", one)


def timings() -> None:
    from gluon_src import dispatch
    from gluon_src.gemm_epilogue_splitk import workspace
    from gluon_src.runtime import bind_all
    dev = torch.device("cuda")
    facts = dispatch.device_facts(dev)
    from gluon_src import softmax_split_smem as SS
    lo, hi = dispatch.SOFTMAX["split_smem_pieces"]
    for M, N, dt in ((4096, 128_256, torch.bfloat16), (4096, 151_936, torch.float32), (4096, 151_936, torch.bfloat16),
                     (4096, 128_256, torch.float32)):
        if left() < 40:
            return
        x = torch.randn(M, N, device=dev, dtype=dt)
        out = torch.empty_like(x)
        copy_us = bench(lambda: out.copy_(x))
        row = {"problem": "softmax", "shape": [M, N, str(dt)], "copy_us": copy_us,
               "torch_us": bench(lambda: torch.softmax(x, dim=-1)), "alts": {}}
        plan = dispatch.plan_softmax(x, out)
        row["default"] = [plan.variant, bench(plan.launch)]
        es = x.element_size()
        rule = dispatch.softmax_split_smem_config(M, N, es, facts)
        row["rule"] = {k: rule[k] for k in ("P", "C", "PIECE", "num_warps")} if rule else None
        tries = [(8, p) for p in range(hi, lo - 1, -1)] + ([(4, min(32, 2 * rule["P"]))] if rule else [])
        for warps, p in tries:
            if left() < 30:
                break
            cfg = SS.config(N, es, warps, p)
            try:
                launch = SS.bind_launch(x, out, cfg, facts)
                row["alts"][f"split_smem w{warps} P{p} C{cfg['C']} g{launch.config['GRID']}"] = bench(launch)
            except Exception as e:
                row["alts"][f"split_smem w{warps} P{p}"] = short(e)
        RESULT["timings"].append(row)
        save()
    for M, N, K, dt in ((256, 4096, 14_336, torch.bfloat16), (128, 8192, 8192, torch.bfloat16),
                        (256, 8192, 28_672, torch.bfloat16), (256, 6144, 4096, torch.bfloat16),
                        (512, 4096, 14_336, torch.bfloat16)):
        if left() < 10:
            return
        a = torch.randn(M, K, device=dev, dtype=dt)
        b = torch.randn(K, N, device=dev, dtype=dt)
        bias = torch.randn(N, device=dev, dtype=dt)
        out = torch.empty(M, N, device=dev, dtype=dt)
        row = {"problem": "gemm_epilogue", "shape": [M, N, K, str(dt)], "torch_us": bench(lambda: torch.addmm(bias, a, b)),
               "alts": {}}
        keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "SPLIT")
        plan = dispatch.plan_gemm(a, b, bias, "none", out)
        row["default"] = [plan.variant, {k: plan.config[k] for k in keys if k in plan.config}, bench(plan.launch)]
        split = dispatch.gemm_model_split(M, N, K, facts)
        row["model"] = {k: split[k] for k in keys} if split else None
        alts = [("tma", dict(c)) for c in dispatch.GEMM["tma"][:3]]
        alts += [("splitk", dict(dispatch.GEMM["tma"][i], SPLIT=s)) for i in (0, 1) for s in (2, 3, 4, 6)]
        if split and not any(v == "splitk" and c == split for v, c in alts):
            alts.append(("splitk", split))
        for v, cfg in alts:
            key = f"{v} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['STAGES']} w{cfg['num_warps']}"
            key += f" S{cfg['SPLIT']}" if v == "splitk" else ""
            if left() < 5:
                break
            try:
                ws = workspace(a, b, cfg) if v == "splitk" else None
                row["alts"][key] = bench(bind_all(dispatch.gemm_specs(v, a, b, bias, "none", out, cfg, facts["sms"], ws), dev))
            except Exception as e:
                row["alts"][key] = short(e)
        RESULT["timings"].append(row)
        save()
    # few rows (their own rule, HBM-bound on B): how deep the TMA ring should be (STAGES) for the
    # few-rows tile, unsplit and split, when time is left
    for M, N, K in ((16, 6144, 4096), (16, 28_672, 4096)):
        if left() < 10:
            return
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
        out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        row = {"problem": "gemm_epilogue", "shape": [M, N, K, "torch.bfloat16"],
               "torch_us": bench(lambda: torch.addmm(bias, a, b)), "alts": {}}
        plan = dispatch.plan_gemm(a, b, bias, "none", out)
        row["default"] = [plan.variant, {k: plan.config[k] for k in ("BLOCK_M", "BLOCK_N", "STAGES", "SPLIT") if k in plan.config},
                          bench(plan.launch)]
        split = dispatch.gemm_splitk_config(M, N, K, facts)["SPLIT"]
        for stages in (4, 6, 8):
            for v in ("tma", "splitk"):
                if left() < 5:
                    break
                cfg = dict(dispatch.GEMM["few_rows"], STAGES=stages, **({"SPLIT": split} if v == "splitk" else {}))
                try:
                    ws = workspace(a, b, cfg) if v == "splitk" else None
                    row["alts"][f"{v} 64x128 s{stages}" + (f" S{split}" if v == "splitk" else "")] = bench(
                        bind_all(dispatch.gemm_specs(v, a, b, bias, "none", out, cfg, facts["sms"], ws), dev))
                except Exception as e:
                    row["alts"][f"{v} 64x128 s{stages}"] = short(e)
        RESULT["timings"].append(row)
        save()


def main() -> None:
    RESULT["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    try:
        import triton
        RESULT["triton"] = triton.__version__
    except Exception as e:
        RESULT["errors"].append(short(e))
    for step in (checks, candidates, timings):
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
              "copy" if "copy_us" in r else "", round(r.get("copy_us", 0), 1), "rule", r.get("rule") or r.get("model"))
        for k, v in r["alts"].items():
            print("   ", k, v if isinstance(v, str) else round(v, 1))


if __name__ == "__main__":
    main()
