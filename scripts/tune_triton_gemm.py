"""One GPU call: does the persistent TMA-descriptor GEMM (triton:gemm_tma) beat the plain one?

For bf16 C = act(A @ B + bias), relu at 4096^3 and 8192^3 and gelu at 8192^3, it times torch.mm,
the unfused torch epilogue (act(addmm)), triton:gemm and triton:gemm_tma (both autotuned, autotune
seconds and per-config autotune timings kept) and every gemm_tma config pinned, after recording
each gemm_tma config's sm_90 registers / spills / shared memory. Each candidate is
first checked against a float32 torch reference (a failing one is not timed). Timing is
scripts/tune_triton.py's ``bench``: CUDA events, L2 flushed before every sample, median of at
least 20 samples. About 2-3 minutes on an H200 (most of it compiling ~30 kernel variants).

    PYTHONPATH=$PWD python3 scripts/tune_triton_gemm.py --out $OUT/tune_triton_gemm.json
    python3 scripts/tune_triton_gemm.py --dry-run        # the plan, no GPU needed
    python3 scripts/tune_triton_gemm.py --compile-only   # sm_90 compile facts per config, no GPU

Writes the JSON after every problem, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import tune_triton as T  # noqa: E402  (bench, attempt, save, log)

from triton_src import gemm_epilogue as G  # noqa: E402

PROBLEMS = [(4096, "relu"), (8192, "relu"), (8192, "gelu")]
MIN_SAMPLES = 20


def config_label(cfg) -> str:
    kw = cfg.kwargs
    flags = [f for f, on in (("subtile", kw["EPILOGUE_SUBTILE"]), ("unflattened", not kw["FLATTEN"]),
                             ("ws", kw["WARP_SPECIALIZE"])) if on]
    return (f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} s{cfg.num_stages} w{cfg.num_warps}"
            + (" " + ",".join(flags) if flags else ""))


def candidates(a, b, bias, act, out):
    """(name, launch, checked against the reference) for one problem, in timing order."""
    import torch.nn.functional as F
    unfused = {"relu": lambda y: torch.relu_(y), "gelu": lambda y: F.gelu(y, approximate="tanh")}[act]
    rows = [("torch.mm", lambda: torch.mm(a, b), False),
            (f"{act}(addmm)", lambda: unfused(torch.addmm(bias, a, b)), True),
            ("triton:gemm", lambda: G.gemm_epilogue(a, b, bias, act, out), True),
            ("triton:gemm_tma", lambda: G.gemm_epilogue_tma(a, b, bias, act, out), True)]
    for cfg in G.TMA_CONFIGS:
        rows.append((f"gemm_tma pinned {config_label(cfg)}",
                     lambda cfg=cfg: G.gemm_epilogue_tma(a, b, bias, act, out, config=cfg), True))
    return rows


def plan() -> list[dict]:
    names = [n for n, _, _ in candidates(None, None, None, "relu", None)]
    return [{"size": s, "act": act, "candidates": [n.replace("relu", act) if n == "relu(addmm)" else n
                                                   for n in names]} for s, act in PROBLEMS]


def autotune_record(tuner) -> dict:
    """The autotuner's per-config timings (ms) of its last tuning, keyed by config label."""
    out = {}
    for cfg, ms in (getattr(tuner, "configs_timings", None) or {}).items():
        out[config_label(cfg) if "EPILOGUE_SUBTILE" in cfg.kwargs else str(cfg)] = ms
    return out


def run_problem(s: int, act: str, device: str = "cuda", timer=None) -> dict:
    """Check and time every candidate on one problem. ``device`` and ``timer`` (default
    ``T.bench``) let the CPU tests run this under the interpreter with a stand-in timer."""
    from harness import problems
    from harness.verify import check_output
    prob = problems.get("gemm_epilogue")
    case = prob.case(M=s, N=s, K=s, dtype="bfloat16", act=act, bias=1)
    a, b, bias = prob.make_inputs(case, device, 0)
    out = torch.empty(s, s, device=device, dtype=torch.bfloat16)
    timer = timer or (lambda fn: T.bench(fn, max_s=0.3, min_n=MIN_SAMPLES))
    # float32 reference (float64 at 8192^3 is slow on a GPU); its error is far below bf16's
    y = torch.addmm(bias.float(), a.float(), b.float())
    ref = torch.relu(y) if act == "relu" else torch.nn.functional.gelu(y, approximate="tanh")
    del y
    flops = 2 * s ** 3
    res = {"size": s, "act": act, "dtype": "bfloat16", "bias": True, "rows": {}}
    for name, fn, checked in candidates(a, b, bias, act, out):
        row = {}
        out.fill_(float("nan"))
        t0 = time.perf_counter()
        got = T.attempt(f"{s} {act} {name} first call", fn)
        if device == "cuda":
            torch.cuda.synchronize()
        row["first_call_s"] = round(time.perf_counter() - t0, 3)
        if got is None:
            res["rows"][name] = row | {"ok": False, "reason": "crashed (see errors)"}
            continue
        if checked:
            c = check_output(prob, case, got if isinstance(got, torch.Tensor) else out, ref)
            row |= {"ok": c.ok, "reason": c.reason, "rel_err": c.rel_err}
            if not c.ok:
                T.log(f"  FAIL {name}: {c.reason}")
                res["rows"][name] = row
                continue
        r = T.attempt(f"{s} {act} {name} timing", lambda: timer(fn))
        if r:
            row |= r | {"TFLOPs": flops / r["ms"] / 1e9}
        res["rows"][name] = row
    for name, tuner in (("triton:gemm", G.gemm_epilogue_tuned), ("triton:gemm_tma", G.gemm_epilogue_tma_tuned)):
        cfg = G.tuned_config(a, b, act, True, tuner)
        res["rows"][name] |= {"config": config_label(cfg) if cfg and "EPILOGUE_SUBTILE" in cfg.kwargs
                              else str(cfg), "autotune_ms": autotune_record(tuner)}
    summarize(res)
    return res


def summarize(res: dict) -> None:
    rows = res["rows"]
    mm = rows.get("torch.mm", {}).get("TFLOPs")
    for row in rows.values():
        if mm and row.get("TFLOPs"):
            row["pct_mm"] = round(100 * row["TFLOPs"] / mm, 1)
    pinned = {k: v for k, v in rows.items() if k.startswith("gemm_tma pinned") and v.get("TFLOPs")}
    best = max(pinned, key=lambda k: pinned[k]["TFLOPs"]) if pinned else None
    plain = rows.get("triton:gemm", {}).get("TFLOPs")
    tma = rows.get("triton:gemm_tma", {}).get("TFLOPs")
    res["verdict"] = {
        "gemm_TFLOPs": plain, "gemm_tma_TFLOPs": tma, "best_pinned_tma": best,
        "best_pinned_tma_TFLOPs": pinned[best]["TFLOPs"] if best else None,
        "tma_over_gemm": round(tma / plain, 3) if tma and plain else None,
        "tma_beats_gemm": bool(tma and plain and tma > plain)}
    T.log(f"bf16 {res['act']}+bias {res['size']}^3: " + "  ".join(
        f"{k} {v['TFLOPs']:.0f}" + (f" ({v['pct_mm']}%)" if "pct_mm" in v else "")
        for k, v in rows.items() if v.get("TFLOPs") and not k.startswith("gemm_tma pinned")))
    T.log("   pinned gemm_tma: " + "  ".join(f"{k[len('gemm_tma pinned '):]}={v['TFLOPs']:.0f}"
                                              for k, v in pinned.items()))
    T.log(f"   verdict: tma/plain = {res['verdict']['tma_over_gemm']}  (tuned tma config "
          f"{rows.get('triton:gemm_tma', {}).get('config')})")


def compile_facts(size: int = 4096) -> list[dict]:
    """Registers, spills and shared memory of every gemm_tma config for sm_90 (bf16 relu+bias
    size^3) through the adapter's compile_only path: no GPU needed, and on the GPU machine it
    records that Triton version's facts beside the timings."""
    from backends import triton_layer as TL
    from harness import problems
    case = problems.get("gemm_epilogue").case(M=size, N=size, K=size, dtype="bfloat16", act="relu", bias=1)
    rows = []
    for cfg in G.TMA_CONFIGS:
        f = T.attempt(f"compile {config_label(cfg)}", lambda: TL._gemm_tma_compile(case, cfg))
        keep = ("registers", "spills", "smem", "compile_s", "triton")
        rows.append({"config": config_label(cfg), **({k: f[k] for k in keep} if f else {"ok": False})})
        T.log(f"  {rows[-1]['config']:<40} " + (f"{f['registers']} regs, {f['spills']} B spills, "
                                                 f"{f['smem']} B smem" if f else "FAILED"))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "tune_triton_gemm.json"),
                    help="JSON file to write (default $OUT/tune_triton_gemm.json)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")
    ap.add_argument("--compile-only", action="store_true",
                    help="only the sm_90 compile facts of every gemm_tma config (no GPU needed)")
    args = ap.parse_args(argv)
    if args.compile_only:
        T.log(f"gemm_tma configs, bf16 relu+bias 4096^3, sm_90, triton {triton.__version__}:")
        compile_facts()
        return 0
    if args.dry_run:
        for p in plan():
            T.log(f"{p['size']}^3 bf16 {p['act']}+bias: " + ", ".join(p["candidates"]))
        return 0
    if not torch.cuda.is_available():
        sys.exit("tune_triton_gemm: needs a CUDA GPU (try --dry-run or --compile-only)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    T.OUT_PATH = args.out
    T.RESULTS = results = {"problems": []}
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference must be float32
    p = torch.cuda.get_device_properties(0)
    results["env"] = {"gpu": p.name, "sms": p.multi_processor_count, "torch": torch.__version__,
                      "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M"),
                      "min_samples": MIN_SAMPLES, "timing": "CUDA events, L2 flushed per sample, median"}
    T.log(f"{p.name}  SMs {p.multi_processor_count}  torch {torch.__version__}  triton {triton.__version__}")
    t0 = time.time()
    results["compile_facts"] = compile_facts()
    T.save()
    for s, act in PROBLEMS:
        t = time.time()
        r = T.attempt(f"problem {s} {act}", lambda: run_problem(s, act))
        if r:
            r["seconds"] = round(time.time() - t, 1)
            results["problems"].append(r)
        T.save()
        T.log(f"[{s}^3 {act} done in {time.time() - t:.0f}s, total {time.time() - t0:.0f}s]")
        torch.cuda.empty_cache()
    results["total_s"] = round(time.time() - t0, 1)
    T.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
