"""GPU check of the structure refactor (planner modules split, variants no longer calling the
planner, the split kernel's register cap decided by the planner): writes under $OUT/structure/

- plans.json: every default's plan (cuda, triton, cute) for each case of the verify and models
  suites, planned with this GPU's own facts and with the assumed H200 facts of the CPU mode, and
  the cases where the two differ (the H200 facts the CPU mode assumes should be this GPU's);
- split_cap.json: the Triton split softmax through the default's plan and through
  ``triton_src.direct``: the register cap (MAXNREG) in the bound config and the output checked
  against float64.

No arguments; about a minute.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def jsonable(v):
    import torch
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, torch.Tensor):
        return {"tensor": list(v.shape), "stride": list(v.stride()), "dtype": str(v.dtype)}
    return getattr(v, "__name__", None) or type(v).__name__


def plans(gpu: bool) -> dict:
    from backends import cuda_gemm, cuda_layer
    from backends import cute_layer as cl
    from backends import triton_layer as tl
    from cuda_src import dispatch as cd
    from cutlass_src import dispatch as ctd
    from harness import problems
    from triton_src import H200, device_facts
    from triton_src import dispatch as td

    cdev = cuda_layer.device(0) if gpu else cd.H200
    tfacts = device_facts("cuda") if gpu else H200
    out = {}
    for suite in ("verify", "models"):
        for p in problems.all_problems():
            for case in p.cases(suite):
                row = {}
                try:
                    f = {"softmax": cuda_layer.case_softmax, "vector_add": cuda_layer.case_vector_add,
                         "gemm_epilogue": cuda_gemm.case_gemm}[p.name]
                    L = f("auto", case, cdev)
                    row["cuda"] = {"kernel": L.kernel, "info": jsonable(dict(L.info))}
                except Exception as e:
                    row["cuda"] = f"ERROR {type(e).__name__}: {e}"
                try:
                    es = case.torch_dtype.itemsize
                    if p.name == "softmax":
                        row["triton"] = jsonable(td.softmax_choice(case.M, case.N, es, tfacts))
                    elif p.name == "gemm_epilogue":
                        a, b, bias, act, o = tl._meta_gemm(case)
                        row["triton"] = jsonable(td.gemm_choice(case.M, case.N, case.K,
                                                                tl.gemm_tma.check(a, b, o) is None, tfacts,
                                                                tl._gemm_aligned(a, b, bias, o)))
                    else:
                        row["triton"] = jsonable(td.vector_add_choice(case.N, es))
                except Exception as e:
                    row["triton"] = f"ERROR {type(e).__name__}: {e}"
                try:
                    sms = None if gpu else ctd.DEFAULT_SMS
                    if p.name == "softmax":
                        row["cute"] = jsonable(ctd.plan_softmax(case.M, case.N, cl._esize(case.dtype),
                                                                cl._sm_case_aligned(case), sms=sms))
                    elif p.name == "gemm_epilogue":
                        row["cute"] = jsonable(ctd.plan_gemm(case.M, case.N, case.K, cl._gemm_case_widths(case),
                                                             sms=sms))
                except Exception as e:
                    row["cute"] = f"ERROR {type(e).__name__}: {e}"
                out[f"{suite}/{p.name}/{case.id}"] = row
    return out


def split_cap() -> dict:
    import torch

    from triton_src import direct, dispatch
    res = {}
    for M, N, dt in ((4096, 50257, torch.bfloat16), (64, 262144, torch.float32), (2048, 32000, torch.float16)):
        x = torch.randn(M, N, device="cuda", dtype=torch.float32).to(dt)
        ref = torch.softmax(x.double(), -1)
        out = torch.empty_like(x)
        key = f"{M}x{N} {dt}"
        try:
            plan = dispatch.plan_softmax(x, out)
            plan.launch()
            torch.cuda.synchronize()
            err = (out.double() - ref).abs().max().item()
            res[key] = {"variant": plan.variant, "MAXNREG": plan.config.get("MAXNREG", "absent"),
                        "max_abs_err": err}
            o2 = direct.softmax_split(x)
            torch.cuda.synchronize()
            res[key]["direct_split_max_abs_err"] = (o2.double() - ref).abs().max().item()
        except Exception as e:
            res[key] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
    return res


def main() -> int:
    out = Path(os.environ.get("OUT", "out")) / "structure"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    from harness import registry
    registry.load_backends()
    doc = {"backend_errors": dict(registry.BACKEND_ERRORS)}
    try:
        mine, assumed = plans(True), plans(False)
        doc["differ"] = {k: {"gpu": mine[k], "assumed_h200": assumed[k]} for k in mine if mine[k] != assumed[k]}
        doc["cases"] = len(mine)
        doc["gpu"] = mine
    except Exception:
        doc["plans_error"] = traceback.format_exc()
    (out / "plans.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    try:
        sc = split_cap()
    except Exception:
        sc = {"error": traceback.format_exc()}
    (out / "split_cap.json").write_text(json.dumps(sc, indent=1, sort_keys=True))
    print(f"structure: {doc.get('cases')} cases, {len(doc.get('differ', {}))} differ between this GPU's facts and "
          f"the assumed H200; split cap: {json.dumps(sc)[:600]}; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
