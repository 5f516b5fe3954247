#!/usr/bin/env python3
"""One GPU call for the CuTe DSL long-row softmax kernels (needs the DSL: source .device/bin/env.sh).

1. verification: harness.verify on the verify-suite cases of cute:softmax_split (seeds 0, 1, run
   twice), and every timed kernel's output against torch.softmax in float64 (rtol 1e-4 fp32,
   2e-2 bf16; a NaN would be the bounded spin giving up, i.e. a grid that was not co-resident);
2. timings, cold L2 (harness.timing.time_cold, interleaved), medians: fp32 8192 x {65536,
   131072, 262144} and bf16 8192 x 262144: softmax_split at 256 and 512 threads a CTA, with and
   without the shared-memory prefetch of the next chunk, the cluster
   kernel (cute:softmax's base path: 1024-thread CTAs, clusters of up to 8), softmax_long
   (512-thread CTAs, clusters of up to 16), triton:softmax, cuda:softmax, torch.softmax and a copy
   of the same bytes; a 1 GiB copy gives the run's ceiling.
Writes $OUT/tune_cute_softmax.json after every shape and prints a table.

    source .device/bin/env.sh && python3 scripts/tune_cute_softmax.py
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

import torch  # noqa: E402

from harness import problems, registry  # noqa: E402
from harness.timing import TimingConfig, time_cold  # noqa: E402
from harness.verify import verify_case  # noqa: E402

OUT = Path(os.environ.get("OUT") or ROOT / "results" / "tune_cute_softmax")
CFG = TimingConfig(min_samples=10, max_samples=200, rel_spread=0.01, time_cap_s=0.4, warmup_ms=5)
SHAPES = [(8192, 65536, torch.float32), (8192, 131072, torch.float32), (8192, 262144, torch.float32),
          (8192, 262144, torch.bfloat16)]
RESULT: dict = {"command": "python3 scripts/tune_cute_softmax.py", "errors": []}


def save():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tune_cute_softmax.json").write_text(json.dumps(RESULT, indent=1, default=str))


def verify():
    prob = problems.get("softmax")
    im = registry.get("softmax", "cute:softmax_split")
    rows = []
    for case in prob.cases("verify"):
        if im.supports(case):
            continue
        c = verify_case(im, prob, case, "cuda", seeds=(0, 1), repeat=True)
        rows.append({"case": case.id, "ok": c.ok, "reason": c.reason, "rel_err": c.rel_err})
        print(f"verify cute:softmax_split {case.id}: {'PASS' if c.ok else 'FAIL ' + c.reason[:200]}")
    RESULT["verify"] = rows
    save()


def launches(x, y):
    """name -> zero-argument launch writing y (each one is checked once before timing)."""
    import backends.cuda_layer as cl
    from cutlass_src import softmax as sm
    from cutlass_src import softmax_split as ss
    from triton_src import softmax as ts

    L = {}
    for t, pf in ((256, 1), (256, 0), (512, 1), (512, 0)):
        os.environ["KL_CUTE_SOFTMAX_SPLIT_THREADS"] = str(t)
        os.environ["KL_CUTE_SOFTMAX_SPLIT_PREFETCH"] = str(pf)
        name = f"cute split threads={t} prefetch={pf}"
        try:
            L[name] = ss.prepare_softmax_split(x, y)[0]
        except ValueError as e:
            L[name] = str(e)
    os.environ.pop("KL_CUTE_SOFTMAX_SPLIT_THREADS", None)
    os.environ.pop("KL_CUTE_SOFTMAX_SPLIT_PREFETCH", None)
    for name, long_ in (("cute cluster (base)", False), ("cute softmax_long", True)):
        try:
            L[name] = sm.prepare_softmax(x, y, long=long_)[0]
        except ValueError as e:
            L[name] = str(e)
    L["triton:softmax"] = lambda: ts.softmax(x, y)
    L["cuda:softmax"] = lambda: cl.softmax(x, y)
    return L


def bench():
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    n = 2 ** 28
    a = torch.randn(n, device=dev, generator=g)
    b = torch.empty_like(a)
    st = time_cold({"copy": lambda: b.copy_(a)}, CFG, "cuda")["copy"]
    ceiling = 2 * n * 4 / st.quartiles()[1]
    RESULT["copy_ceiling_tbps"] = ceiling / 1e12
    print(f"copy ceiling {ceiling / 1e12:.3f} TB/s")
    del a, b
    RESULT["softmax"] = {}
    for M, N, dt in SHAPES:
        key = f"{M}x{N} {str(dt).split('.')[-1]}"
        try:
            x = torch.randn(M, N, device=dev, generator=g).to(dt)
            y = torch.empty_like(x)
            ref = torch.softmax(x.double(), -1)
            tol = 1e-4 if dt == torch.float32 else 2e-2
            L, rows, checks = {}, {}, {}
            for k, f in launches(x, y).items():
                if isinstance(f, str):
                    rows[k] = {"declined": f}
                    continue
                y.fill_(float("nan"))
                f()
                torch.cuda.synchronize()
                ok = bool(torch.allclose(y.double(), ref, rtol=tol, atol=1e-9))
                checks[k] = ok
                if ok:
                    L[k] = f
                else:
                    rows[k] = {"FAIL": f"max abs err {(y.double() - ref).abs().nan_to_num(1e9).max().item():.3g}, "
                                       f"NaN {torch.isnan(y).sum().item()}"}
                    print(f"{key} {k}: FAIL {rows[k]['FAIL']}")
            L["torch.softmax"] = lambda: torch.softmax(x, -1)
            L["copy same bytes"] = lambda: y.copy_(x)
            nbytes = 2 * M * N * x.element_size()
            for k, s in time_cold(L, CFG, "cuda").items():
                med = s.quartiles()[1]
                rows[k] = {"median_ms": med * 1e3, "tbps": nbytes / med / 1e12, "pct_copy": 100 * nbytes / med / ceiling,
                           "n": s.n}
            RESULT["softmax"][key] = {"rows": rows, "checks": checks}
            for k, r in sorted(rows.items(), key=lambda kv: -kv[1].get("tbps", 0)):
                if "tbps" in r:
                    print(f"{key:22s} {k:24s} {r['tbps']:.3f} TB/s {r['pct_copy']:5.1f} % copy")
                else:
                    print(f"{key:22s} {k:24s} {r}")
            del x, y, ref
            torch.cuda.empty_cache()
        except Exception:
            traceback.print_exc()
            RESULT["errors"].append(traceback.format_exc()[-2000:])
        save()


def main():
    props = torch.cuda.get_device_properties(0)
    RESULT["machine"] = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                         "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    for stage in (verify, bench):
        try:
            stage()
        except Exception:
            traceback.print_exc()
            RESULT["errors"].append(traceback.format_exc()[-2000:])
            save()


if __name__ == "__main__":
    main()
