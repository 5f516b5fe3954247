"""One GPU call (under 3 minutes) that verifies and times the Triton softmax ``split`` variant.

Run: PYTHONPATH=$PWD python scripts/tune_triton_softmax_split.py --out $OUT

1. environment and the copy ceiling (device-to-device copy of 2^28 fp32, as tune_triton.py);
2. verification: harness.verify on the verify-suite cases split accepts (seeds 0 and 1), and
   every timed config checked against torch.softmax in fp32 (|err| <= 1e-9 + rtol |ref|, rtol
   1e-4 fp32 / 1.6e-2 bf16; no NaN: a NaN would also be the bounded spin giving up, i.e. a grid
   that was not co-resident);
3. timings, CUDA events, L2 flushed before every sample, median (tune_triton.bench): fp32
   8192 x 131072 and 8192 x 262144 (the long rows online reads twice), 4096 x 65536 and
   8192 x 32768 (the crossover against fused_row / online), over (CHUNK, num_warps,
   programs per SM, prefetch) configs and the cooperative launch on/off, against online's best
   H200 config and torch.softmax (fused_row too where it applies); bf16 8192 x 131072 and
   8192 x 262144 over their own configs.
   Each config row records registers, spills, the programs per SM the compiled kernel allows,
   and the grid.
Writes $OUT/tune_triton_softmax_split.json (or --out) after every shape; stops adding configs
once --budget seconds have passed so that the call ends in time (the whole run took 40 s of a
warm H200 on 2026-11-29, about a minute with start-up and compiles).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "scripts")):
    if p not in sys.path:
        sys.path.insert(0, p)

import triton  # noqa: E402

from triton_src import device_facts  # noqa: E402
from triton_src import softmax as S  # noqa: E402

import tune_triton as T  # noqa: E402  save, log, attempt, bench: one implementation for the tune scripts
from tune_triton import attempt, log, save  # noqa: E402

RESULTS: dict = {"sections": {}, "errors": []}
T.RESULTS = RESULTS  # what T.save writes and T.attempt appends errors to
T0 = time.time()

#: (CHUNK, num_warps, programs per SM, prefetch); the first is the default (split_config's);
#: programs per SM 0 = as many as the compiled kernel's registers allow (the wrapper's default
#: grid). Registers on triton 3.6, fp32 at N = 262144 (programs an SM): 16384/8 120 (2); 8192/8
#: 76 (3); 8192/4 105 (4); 16384/16 82 (1); 32768/16 126 (1); with prefetch 8192/8 101 (2),
#: 4096/8 75 (3), 8192/16 63 (2). bf16: 8192/4 96 (5), 8192/8 61 (4), 16384/8 128 (2),
#: 16384/16 64 (2).
SPLIT_CONFIGS = [(16384, 8, 0, False), (8192, 8, 0, False), (8192, 8, 2, False), (8192, 4, 0, False),
                 (16384, 16, 0, False), (32768, 16, 0, False), (8192, 8, 0, True), (4096, 8, 0, True),
                 (8192, 16, 0, True)]
BF16_CONFIGS = [(8192, 4, 0, False), (8192, 8, 0, False), (16384, 8, 0, False), (16384, 16, 0, False),
                (32768, 16, 0, False), (8192, 8, 0, True)]
SHAPES = [(8192, 131072), (8192, 262144), (4096, 65536), (8192, 32768)]


def bench(fn, max_s=0.25):
    return T.bench(fn, max_s=max_s)


def env_and_ceiling():
    p = torch.cuda.get_device_properties(0)
    env = {"gpu": p.name, "sms": p.multi_processor_count, "l2_bytes": getattr(p, "L2_cache_size", None),
           "torch": torch.__version__, "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M"),
           "device_facts": device_facts(torch.device("cuda", 0))}
    x = torch.randn(1 << 28, device="cuda")
    y = torch.empty_like(x)
    r = bench(lambda: y.copy_(x), max_s=0.4)
    env["copy_TBps"] = 2 * x.numel() * 4 / r["ms"] / 1e9
    del x, y
    RESULTS["env"] = env
    log(f"{env['gpu']}  SMs {env['sms']}  torch {env['torch']}  triton {env['triton']}  "
        f"copy ceiling {env['copy_TBps']:.3f} TB/s")
    save()


def verify_suite():
    from harness import problems, registry
    from harness.verify import verify_case
    prob = problems.get("softmax")
    impl = registry.get("softmax", "triton:split")
    rows = []
    for case in prob.cases("verify"):
        why = impl.supports(case)
        if why:
            continue
        c = attempt(f"verify split {case.label}", lambda: verify_case(impl, prob, case, "cuda", seeds=(0, 1)))
        rows.append({"case": case.label, "ok": bool(c and c.ok), "reason": c.reason if c else "crashed",
                     "rel_err": c and c.rel_err})
    log("verify split: " + ", ".join(f"{r['case']}={'PASS' if r['ok'] else 'FAIL ' + str(r['reason'])}"
                                     for r in rows))
    RESULTS["sections"]["verify"] = rows
    save()


def _kernel_facts(x, out, cfg: dict) -> dict:
    """Registers / spills of the compiled split kernel and the programs per SM they allow."""
    M, N = x.shape
    slots = S._split_slots(x.device, M * cfg["C"])
    k = S.softmax_split_kernel.warmup(x, out, slots, N, x.stride(0), out.stride(0), cfg["C"],
                                      M * cfg["C"], S.SPLIT_MAX_SPIN, CHUNK=cfg["CHUNK"],
                                      C_PAD=cfg["C_PAD"], PREFETCH=cfg["PREFETCH"],
                                      num_warps=cfg["num_warps"], grid=(1,),
                                      launch_cooperative_grid=S.SPLIT_COOPERATIVE)
    k._init_handles()
    cap = S.split_capacity(x, out, slots, M, N, cfg)
    return {"registers": k.n_regs, "spills": k.n_spills, "smem": k.metadata.shared,
            "per_sm_max": cap // device_facts(x.device)["sms"], "capacity": cap}


#: |out - ref| <= atol + rtol * |ref| against torch.softmax in fp32 (the harness's float32 and
#: bfloat16 tolerances; rows of 2^17 columns hold values near 1e-5, so an absolute bound alone
#: would accept a 10 % error)
TOL = {torch.float32: (1e-4, 1e-9), torch.bfloat16: (1.6e-2, 1e-8)}


def _checked(fn, out, ref):
    rtol, atol = TOL[out.dtype]

    def one():
        fn()
        torch.cuda.synchronize()
        if out.isnan().any().item():
            raise AssertionError("NaN in the output (a waiter gave up: grid not co-resident?)")
        err = ((out.float() - ref).abs_() - rtol * ref.abs()).max().item()
        if not err <= atol:
            raise AssertionError(f"error exceeds atol + rtol*|ref| by {err:.3g}")
        return bench(fn)
    return one


def tune_shape(M, N, dtype=torch.float32, configs=None, budget=150.0):
    ceil = RESULTS["env"]["copy_TBps"]
    sms = RESULTS["env"]["sms"]
    x = torch.randn(M, N, device="cuda").to(dtype)
    out = torch.empty_like(x)
    ref = torch.softmax(x.float(), dim=-1)
    rows = [{"impl": "torch.softmax", **bench(lambda: torch.softmax(x, dim=-1))}]
    if not S.fused_row_supports(N):
        r = attempt(f"fused_row {M}x{N}", _checked(lambda: S.softmax_fused_row(x, out), out, ref))
        if r:
            rows.append({"impl": "fused_row", **r})
    for kw in ({"block": 8192, "num_stages": 1}, {"block": 4096, "num_stages": 2}):
        r = attempt(f"online {M}x{N} {kw}", _checked(lambda: S.softmax_online(x, out, **kw), out, ref))
        if r:
            rows.append({"impl": "online", "cfg": kw, **r})
    configs = configs or SPLIT_CONFIGS
    for chunk, warps, per_sm, pf in configs:
        for coop in ((True, False) if (chunk, warps, per_sm, pf) == configs[0] else (True,)):
            if time.time() - T0 > budget:
                log(f"  (budget: skipping split {chunk}/{warps}/{per_sm}/pf={pf} coop={coop})")
                continue
            cfg = S.split_config(N, x.element_size(), chunk, warps, pf)
            C = cfg["C"]
            programs = min(M * C, sms * per_sm // C * C) if per_sm else None
            label = (f"split {M}x{N} {dtype} chunk={chunk} warps={warps} per_sm={per_sm} "
                     f"prefetch={pf} coop={coop}")

            def run(chunk=chunk, warps=warps, programs=programs, pf=pf):
                S.softmax_split(x, out, chunk=chunk, num_warps=warps, programs=programs, prefetch=pf)
            S.SPLIT_COOPERATIVE = coop
            try:
                facts = attempt(f"facts {label}", lambda: _kernel_facts(x, out, cfg)) or {}
                r = attempt(label, _checked(run, out, ref))
            finally:
                S.SPLIT_COOPERATIVE = True
            if r:
                if programs is None and facts.get("capacity"):
                    programs = min(M * C, facts["capacity"] // C * C)
                rows.append({"impl": "split", "cfg": {"chunk": chunk, "num_warps": warps, "per_sm": per_sm,
                                                      "prefetch": pf, "cooperative": coop, "C": C,
                                                      "programs": programs},
                             "facts": facts, **r})
    from tune_triton import rate_rows
    best = rate_rows(rows, 2 * M * N * x.element_size(), ceil)
    log(f"softmax {M}x{N} {str(dtype)[6:]}: " + "  ".join(
        f"{k} {v['TBps']:.2f} ({v['pct_copy']:.0f}%)" for k, v in best.items()))
    for r in rows:
        if r["impl"] == "split":
            c, f = r["cfg"], r.get("facts", {})
            log(f"   split chunk={c['chunk']:>5} warps={c['num_warps']:>2} per_sm={c['per_sm']} "
                f"pf={int(c['prefetch'])} coop={int(c['cooperative'])} C={c['C']:>2} "
                f"grid={c['programs']} "
                f"regs={f.get('registers')} spills={f.get('spills')} max/SM={f.get('per_sm_max')}: "
                f"{r['ms']:.3f} ms {r['TBps']:.2f} TB/s {r['pct_copy']:.0f}%")
    RESULTS["sections"].setdefault("softmax", []).append(
        {"M": M, "N": N, "dtype": str(dtype), "rows": rows, "best": best})
    del x, out, ref
    torch.cuda.empty_cache()
    save()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."),
                    help="folder for tune_triton_softmax_split.json")
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds after which no further split configs are started (default 150)")
    ap.add_argument("--no-verify", action="store_true", help="skip the harness verify cases")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("tune_triton_softmax_split: needs a CUDA GPU")
    os.makedirs(args.out, exist_ok=True)
    T.OUT_PATH = os.path.join(args.out, "tune_triton_softmax_split.json")
    RESULTS["command"] = "python " + " ".join(sys.argv)
    env_and_ceiling()
    if not args.no_verify:
        attempt("verify", verify_suite)
    for M, N in SHAPES:
        attempt(f"shape {M}x{N}", lambda: tune_shape(M, N, budget=args.budget))
        log(f"[{M}x{N} done, total {time.time() - T0:.0f}s]")
    for N in (131072, 262144):
        attempt(f"bf16 {N}", lambda: tune_shape(8192, N, torch.bfloat16, configs=BF16_CONFIGS,
                                                budget=args.budget))
    RESULTS["total_s"] = round(time.time() - T0, 1)
    save()
    log(f"[done in {time.time() - T0:.0f}s] -> {T.OUT_PATH}")


if __name__ == "__main__":
    main()
