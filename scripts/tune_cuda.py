#!/usr/bin/env python3
"""compute-sanitizer runs of the CUDA C++ layer (kl_cuda) on the GPU machine.

    python3 scripts/tune_cuda.py [--out DIR] [--budget SECONDS]
        runs memcheck, racecheck and synccheck, each over `--sanitize`, then memcheck over
        `--sanitize-split`; JSON in DIR/tune_cuda.json (default results/tune_cuda).
    python3 scripts/tune_cuda.py --sanitize [--only ID,ID]
        (what the tool runs) small verify cases of every cuda:* row but the split path (or of the
        rows named), one seed.
    python3 scripts/tune_cuda.py --sanitize-split
        the split path alone, 2^30 polls of spin budget (its blocks wait for each other; a slowed
        tool must not turn that wait into a timeout), against torch.softmax in float64.

Timing and the verify/models suites are in python -m harness check cuda.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from harness import problems, registry  # noqa: E402
from harness.verify import verify_case  # noqa: E402


def impl_of(impl_id):
    name = impl_id.split(":", 1)[1]
    problem = "vector_add" if name.startswith("vector_add") else "gemm_epilogue" if name.startswith("gemm") else \
        "softmax"
    return registry.get(problem, impl_id), problems.get(problem)


def sanitize_cases(prob):
    c = prob.case
    if prob.name == "gemm_epilogue":
        # partial M/N tiles, K % 64 != 0, an odd count of M tiles (cluster pairs), several tiles per
        # persistent CTA, split-K (M = 16, long K), N odd (B repack / predicated gathers)
        return [c(M=129, N=264, K=72, act="relu"), c(M=640, N=136, K=4104, dtype="float16", act="gelu"),
                c(M=256, N=256, K=256, act="none", bias=0), c(M=17, N=33, K=40, act="relu"),
                c(M=16, N=520, K=8192, act="none"), c(M=300, N=1001, K=136, act="gelu"),
                c(M=33, N=1001, K=3000, act="gelu"), c(M=7, N=4000, K=2048, act="relu", bias=0)]
    if prob.name == "vector_add":
        return [c(N=98_432, misalign=1), c(N=4099, dtype="float16", misalign=3), c(N=127), c(N=1_000_003)]
    return [c(M=3, N=1000), c(M=37, N=1000, dtype="float16", layout="strided"), c(M=3, N=4097),
            c(M=600, N=1024), c(M=2, N=262_144), c(M=3, N=262_147, layout="strided_odd"),
            c(M=30, N=777, layout="strided_odd"), c(M=2, N=131_072, dtype="bfloat16"),
            c(M=4, N=32_768, kind="neginf"), c(M=1, N=98_432), c(M=5, N=70_000, layout="strided_odd"),
            c(M=7, N=50_257, dtype="bfloat16"), c(M=9, N=32_000, dtype="float16")]


def sanitize_main(only=None) -> int:
    """Under compute-sanitizer: small verify cases of every cuda:* row (the split path apart: its
    blocks wait for each other, and a tool that serialises blocks would turn that into a timeout)."""
    registry.load_backends()
    ids = [i.id for i in registry.select(layer="cuda") if i.name != "softmax_split"]
    if only:
        unknown = sorted(set(only) - set(ids))
        if unknown:
            raise SystemExit(f"--only: not a cuda:* row of the sanitizer run: {unknown}")
        ids = [i for i in ids if i in only]
    bad = n = 0
    for impl_id in ids:
        impl, prob = impl_of(impl_id)
        if impl.available():
            print(f"{impl_id}: SKIP {impl.available()}")
            continue
        for case in sanitize_cases(prob):
            if impl.supports(case):
                continue
            n += 1
            try:
                c = verify_case(impl, prob, case, "cuda", seeds=(0,), repeat=False)
                ok, why = c.ok, c.reason
            except Exception as e:
                ok, why = False, f"{type(e).__name__}: {e}"
            bad += not ok
            print(f"{impl_id} {case.id}: {'PASS' if ok else 'FAIL ' + why[:200]}", flush=True)
    print(f"sanitize: {n - bad} cases passed, {bad} not")
    return 1 if bad else 0


def sanitize_split_main() -> int:
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
        print(f"sanitize-split {M}x{N} {dt} pad={pad}: {'PASS' if ok else 'FAIL'}", flush=True)
    print(f"sanitize-split: {len(cases) - bad} cases passed, {bad} not")
    return 1 if bad else 0


def run_tools(out_dir: Path, budget: float) -> dict:
    deadline = time.time() + budget
    result = {}
    runs = [(t, "--sanitize") for t in ("memcheck", "racecheck", "synccheck")] + [("memcheck", "--sanitize-split")]
    for tool, mode in runs:
        left = deadline - time.time()
        key = f"{tool} {mode}"
        if left < 30:
            result[key] = {"status": "skipped: out of time"}
            continue
        cmd = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "1", sys.executable,
               str(Path(__file__).resolve()), mode]
        t0 = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=min(left, 240))
            tail = (r.stdout + r.stderr).strip().splitlines()
            result[key] = {"command": " ".join(cmd[:5]) + f" python3 scripts/tune_cuda.py {mode}", "rc": r.returncode,
                           "seconds": round(time.time() - t0, 1),
                           "summary": [ln for ln in tail if "SUMMARY" in ln or "sanitize" in ln][-6:],
                           "tail": tail[-25:]}
        except FileNotFoundError:
            result[key] = {"status": "compute-sanitizer not found"}
        except subprocess.TimeoutExpired:
            result[key] = {"status": f"timed out after {min(left, 240):.0f} s"}
        print(f"[{key}]", json.dumps(result[key].get("summary") or result[key].get("status")), flush=True)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "tune_cuda.json").write_text(json.dumps({"sanitizer": result}, indent=1))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--sanitize-split", action="store_true")
    ap.add_argument("--only", default="", help="with --sanitize: these cuda:* rows alone (comma-separated ids)")
    ap.add_argument("--out", default=str(ROOT / "results" / "tune_cuda"))
    ap.add_argument("--budget", type=float, default=600.0, help="seconds for all tool runs together")
    a = ap.parse_args()
    if a.sanitize:
        return sanitize_main(a.only.split(",") if a.only else None)
    if a.sanitize_split:
        return sanitize_split_main()
    res = run_tools(Path(a.out), a.budget)
    return 0 if all(r.get("rc") == 0 for r in res.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
