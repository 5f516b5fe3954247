#!/usr/bin/env python3
"""Issue 42's GEMM classes on one GPU: off the tile grid (waves), skinny M, large aligned (CuTe
against cuBLAS); the defaults, their ``*_next`` candidates where a layer has one, and pinned plans
of each layer, beside torch eager and torch.compile, each output checked against float64.

Run from the repository root after the offline build::

    python3 scripts/gpu_gemm_waves.py [--budget 540] [--cases waves,skinny,large] [--layers cuda,triton,gluon,cute]

Cases (``CASES``): per class, the issue's shapes plus controls that separate causes:
- waves: 3000^3 fp16 GELU (the issue's case), the same without epilogue (what GELU + bias cost),
  3072^3 (the same 24 x 24 grid of 128-tiles with 128-byte rows and no ragged edge: waves alone),
  3000^3 on rows of 3072 elements (ragged edges, 128-byte aligned rows: row alignment alone),
  1000 x 4000 x 3000 GELU (one wave of 128 x 256 at K = 3000, timed 2026-11-30);
- skinny: 200 x 13824 x 5120 ReLU, 64 x 32000 x 4096, 16 x 6144 x 4096 fp16, 1 x 11008 x 4096,
  16 x 28672 x 4096, 256 x 6144 x 4096;
- large: 4096 x 28672 x 4096 GELU and 8192^3 GELU (bf16), the CuTe plans beside cuBLAS.
Each case runs in this process; a failing candidate costs its row only. JSON: $OUT/gemm_waves/
gpu_gemm_waves.json (default ./gpu_out), written after every case; a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
OUT = Path(os.environ.get("OUT") or "gpu_out") / "gemm_waves"
RESULT: dict = {"facts": {}, "cases": []}

#: class -> [(dims, ld)]: ld = the row stride of A, B and C (None: contiguous)
CASES = {
    "waves": [(dict(M=3000, N=3000, K=3000, dtype="float16", act="gelu"), None),
              (dict(M=3000, N=3000, K=3000, dtype="float16", act="none", bias=0), None),
              (dict(M=3072, N=3072, K=3072, dtype="float16", act="gelu"), None),
              (dict(M=3000, N=3000, K=3000, dtype="float16", act="gelu"), 3072),
              (dict(M=1000, N=4000, K=3000, act="gelu"), None)],
    "skinny": [(dict(M=200, N=13824, K=5120, act="relu"), None),
               (dict(M=64, N=32000, K=4096, act="none", bias=0), None),
               (dict(M=16, N=6144, K=4096, dtype="float16", act="none", bias=0), None),
               (dict(M=1, N=11008, K=4096, act="none"), None),
               (dict(M=16, N=28672, K=4096, act="none"), None),
               (dict(M=256, N=6144, K=4096, act="none"), None)],
    "large": [(dict(M=4096, N=28672, K=4096, act="gelu"), None),
              (dict(M=8192, N=8192, K=8192, act="gelu"), None)],
}


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "gpu_gemm_waves.json").write_text(json.dumps(RESULT, indent=1, default=str))


def inputs_for(prob, case, ld):
    """The case's inputs and a NaN-poisoned output, on rows of ``ld`` elements when given."""
    import torch
    a, b, bias = prob.make_inputs(case, "cuda", 0)
    out = prob.alloc_out(case, "cuda")
    if ld:
        def pad(t):
            return torch.empty((t.shape[0], ld), dtype=t.dtype, device=t.device)[:, :t.shape[1]].copy_(t)
        a, b, out = pad(a), pad(b), pad(out)
    return (a, b, bias), out


def registry_cands(layers, case):
    """name -> prepare(inputs, out): torch eager / compile, and each layer's default and its ``_next``
    candidate where the layer still has one."""
    from harness import registry
    ids = ["torch:gemm_epilogue", "torch:gemm_epilogue_compile"]
    known = {i.id for i in registry.all_impls() + registry.candidates()}
    for layer in layers:
        ids += [i for i in (f"{layer}:gemm_epilogue", f"{layer}:gemm_epilogue_next") if i in known]
    out = {}
    for i in ids:
        impl = registry.get("gemm_epilogue", i, candidates=True)
        if impl.available() or impl.supports(case):
            continue
        out[i] = (lambda impl: lambda inputs, o: impl.prepare(case, inputs, o))(impl)
    return out


def _cuda_pinned(path, case, **opts):
    """A launch of a pinned CUDA C++ GEMM plan through the pybind11 module (configs no id pins)."""
    def prep(inputs, out):
        from backends import cuda_gemm, cuda_layer as cl

        a, b, bias = inputs
        dev = cl.dev_index(a)
        plan = cuda_gemm.gemm_launches(path, case, a, b, bias, out, case.params.get("act", "relu"),
                                       cl.device(dev), **opts)
        ptrs = {"a": a.data_ptr(), "b": b.data_ptr(), "bias": bias.data_ptr() if bias is not None else 0,
                "c": out.data_ptr()}
        return cl.make_launcher(cl.module(), plan, ptrs, dev, cl.DTYPE_CODE[a.dtype])
    return prep


def pinned_cands(layers, case, sms):
    """name -> prepare: the plans the new rules choose between, pinned (``sms``: the persistent grid)."""
    out = {}
    act = case.params.get("act", "relu")
    if "cuda" in layers:
        for name, path, opts in (("pingpong", "pingpong", {}), ("ws bn=256", "ws", {"bn": 256}),
                                 ("ws bn=192", "ws", {"bn": 192}), ("splitk S=2", "splitk", {"splits": 2})):
            out[f"cuda {name}"] = _cuda_pinned(path, case, **opts)
    if "triton" in layers:
        from triton_src import dispatch as TD
        from triton_src import gemm_epilogue_tma as TT
        for cfg in TD.GEMM["tma"][:2]:
            tag = f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}"
            out[f"triton tma {tag}"] = (lambda c: lambda i, o: TT.bind_launch(*i[:3], act, o, c, sms))(cfg)
    if "gluon" in layers:
        from gluon_src import dispatch as GD
        from gluon_src.runtime import bind_all
        for cfg in GD.GEMM["tma"][:2]:
            tag = f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}"
            for name, v, c in ((f"gluon tma {tag}", "tma", cfg),):
                out[name] = (lambda v, c: lambda i, o: bind_all(GD.gemm_specs(v, *i[:3], act, o, c, sms),
                                                                i[0].device))(v, c)
    if "cute" in layers:
        from cutlass_src import dispatch as CD
        from cutlass_src import gemm_launch as CL
        for sched, tile, cm in (("pingpong", (128, 128), 1), ("ws", (128, 256), 1), ("ws", (128, 256), 2),
                                ("ws", (128, 192), 1), ("ws", (128, 192), 2)):
            plan = {"schedule": sched, "tile": list(tile), "cluster_m": cm, "splits": 1,
                    "loads": ["tma", "tma", "tma"], "max_clusters": CD.max_clusters(cm)}
            out[f"cute {sched} {tile[0]}x{tile[1]} c{cm}"] = (
                lambda p: lambda i, o: CL.prepare_gemm(*i[:3], o, act, dict(p))[0])(plan)
    return out


def time_case(prob, case, ld, layers, pins: bool) -> dict:
    import torch

    from harness.output_check import check_output
    from harness.timing import TimingConfig, time_cold
    inputs, _ = inputs_for(prob, case, ld)
    ref = prob.reference(inputs, case)
    cands = registry_cands(layers, case)
    if pins and ld is None:
        cands.update(pinned_cands(layers, case, torch.cuda.get_device_properties(0).multi_processor_count))
    launches, outs, res = {}, {}, {}
    for name, prep in cands.items():
        try:
            _, out = inputs_for(prob, case, ld)
            t0 = time.perf_counter()
            launches[name] = prep(inputs, out)
            launches[name]()
            torch.cuda.synchronize()
            outs[name] = out
            res[name] = {"prepare_s": round(time.perf_counter() - t0, 2)}
        except Exception as e:
            res[name] = {"error": f"{type(e).__name__}: {str(e).strip()[:240]}"}
            launches.pop(name, None)
    errors: dict = {}
    cfg = TimingConfig(min_samples=5, max_samples=40, rel_spread=0.01, time_cap_s=0.25, warmup_ms=5)
    stats = time_cold(launches, cfg, "cuda", errors=errors) if launches else {}
    torch.cuda.synchronize()
    for name, st in stats.items():
        q1, med, q3 = st.quartiles()
        ok = check_output(prob, case, outs[name], ref)
        res[name].update(median_us=round(med * 1e6, 2), iqr_us=round((q3 - q1) * 1e6, 2),
                         tflops=round(2.0 * case.M * case.N * case.K / med / 1e12, 1),
                         check="PASS" if ok.ok else "FAIL " + ok.reason[:200])
    for name, why in errors.items():
        res[name]["error"] = why[:240]
    best = min((r["median_us"] for n, r in res.items() if n.startswith("torch:") and "median_us" in r), default=None)
    for r in res.values():
        if best and "median_us" in r:
            r["x_best_torch"] = round(best / r["median_us"], 3)
    return res


def table() -> None:
    for c in RESULT["cases"]:
        print(f"\n{c['case']} ld={c['ld']} ({c['class']}, {c.get('seconds', 0):.0f} s)")
        for name, r in sorted(c.get("results", {}).items(), key=lambda kv: kv[1].get("median_us", 1e9)):
            if "median_us" in r:
                print(f"  {name:42s} {r['median_us']:9.1f} us {r['tflops']:6.1f} TF/s  x{r.get('x_best_torch', 0):.3f}  "
                      f"{r['check']}")
            else:
                print(f"  {name:42s} {r.get('error', '?')[:100]}")
        if c.get("error"):
            print("  ERROR", c["error"][:300])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run")
    ap.add_argument("--cases", default="waves,skinny,large", help="classes of CASES to run")
    ap.add_argument("--layers", default="cuda,triton,gluon,cute")
    ap.add_argument("--no-pins", action="store_true", help="only the registry's ids")
    args = ap.parse_args()
    import torch

    from harness import problems, registry
    registry.load_backends()
    prob = problems.get("gemm_epilogue")
    layers = [x for x in args.layers.split(",") if x]
    RESULT["facts"] = {"gpu": torch.cuda.get_device_name(), "sms": torch.cuda.get_device_properties(0).multi_processor_count,
                       "torch": torch.__version__}
    t_start = time.perf_counter()
    for cls in args.cases.split(","):
        for dims, ld in CASES[cls]:
            case = prob.case(**dims)
            row = {"class": cls, "case": case.id, "ld": ld}
            RESULT["cases"].append(row)
            if time.perf_counter() - t_start > args.budget:
                row["error"] = "not run: budget spent"
                continue
            t0 = time.perf_counter()
            try:
                row["results"] = time_case(prob, case, ld, layers, not args.no_pins)
            except Exception:
                row["error"] = traceback.format_exc()[-1500:]
            row["seconds"] = round(time.perf_counter() - t0, 1)
            save()
    save()
    table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
