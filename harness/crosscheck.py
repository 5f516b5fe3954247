"""``python -m harness crosscheck``: the harness's timer against an independent one.

For each selected implementation and case, on the GPU: the harness's own cold-L2 median
(``harness.timing.time_cold``: CUDA events around one launch, a spin kernel ahead of it) and, for
the same protocol recorded by CUPTI (``torch.profiler`` reads CUPTI's activity records), the device
time from the end of the spin kernel to the end of the launch's last kernel - what the events are
meant to bracket - and, apart, the kernels' own span (first kernel start to last kernel end; the
difference is the GPU's launch gap, a fixed few microseconds). Medians and differences are printed
and written to JSON.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def _cupti(launcher, reps: int, flush, spin) -> tuple[list[float], list[float]]:
    """The harness's own sample protocol (poison, flush, spin kernel, launch), recorded by CUPTI
    through ``torch.profiler``. Per launch: (occupancy: from the end of the spin kernel to the end
    of the launch's last kernel - the device time the CUDA events measure - and the kernel span:
    from the launch's first kernel start to its last kernel end), in seconds.

    Launch i's kernels are the device records that start after ``kl_launch`` i began on the host
    and before ``kl_prep`` i+1 began (a wait separates them); the spin kernel is the last record
    named like the spin kernel before them. Host and device records share one clock."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            with record_function("kl_prep"):
                launcher.poison()
                flush()
                spin()
            with record_function("kl_launch"):
                launcher.call()
            torch.cuda.synchronize()
    evts = list(prof.events())
    dev = sorted([e for e in evts if e.device_type == torch.autograd.DeviceType.CUDA
                  and not e.name.startswith("kl_")], key=lambda e: e.time_range.start)
    host = sorted([e for e in evts if e.name in ("kl_prep", "kl_launch")
                   and e.device_type != torch.autograd.DeviceType.CUDA], key=lambda e: e.time_range.start)
    occ, spans = [], []
    for k, e in enumerate(host):
        if e.name != "kl_launch" or k == 0:
            continue
        lo = host[k - 1].time_range.start
        hi = next((h.time_range.start for h in host[k + 1:] if h.name == "kl_prep"), float("inf"))
        window = [d for d in dev if lo <= d.time_range.start < hi]
        spins = [i for i, d in enumerate(window) if "spin" in d.name.lower() or "sleep" in d.name.lower()]
        if not spins:
            continue
        ks = window[spins[-1] + 1:]
        if not ks:
            continue
        end = max(d.time_range.end for d in ks)
        occ.append((end - window[spins[-1]].time_range.end) * 1e-6)
        spans.append((end - min(d.time_range.start for d in ks)) * 1e-6)
    return occ, spans


def run(args) -> int:
    import torch

    from . import plan as P, verify
    from .args import setup
    from .jsonsafe import dumps
    from .timing import Flusher, Spinner, TimingConfig, time_cold

    if not torch.cuda.is_available():
        raise ValueError("crosscheck: needs a CUDA GPU (CUPTI reads the device's own timestamps)")
    device, impls, plan = setup(args, default_roles=P.COMPARE_ROLES)
    flush, spin = Flusher("cuda"), Spinner()
    out = []
    for p, cases in plan:
        for case in cases:
            inputs = verify.share_inputs(p.make_inputs(case, "cuda", 0), "cuda")
            for impl in [i for i in impls if i.problem == p.name]:
                try:
                    L = verify.Launcher(impl, p, case, inputs, "cuda")
                    st = time_cold({impl.id: L}, TimingConfig(min_samples=args.reps, max_samples=args.reps,
                                                              time_cap_s=5.0), "cuda")[impl.id]
                    occ, spans = _cupti(L, args.reps, flush, spin)
                except Exception as e:  # one row's failure is reported, the rest goes on
                    out.append({"impl": impl.id, "case": case.id, "error": f"{type(e).__name__}: {e}"})
                    continue
                h = st.quartiles()[1]
                c = statistics.median(occ) if occ else None
                ks = statistics.median(spans) if spans else None
                out.append({"impl": impl.id, "case": case.id, "harness_median_s": h,
                            "cupti_occupancy_median_s": c, "cupti_kernel_span_median_s": ks,
                            "diff_pct": 100 * (h - c) / c if c else None,
                            "launch_gap_s": (c - ks) if c and ks else None, "samples": st.n,
                            "cupti_launches": len(occ)})
                del L
            del inputs
    print(f"{'implementation':30s} {'case':40s} {'harness':>9s} {'CUPTI':>9s} {'diff':>7s} {'kernels':>9s}")
    for r in out:
        if "error" in r:
            print(f"{r['impl']:30s} {r['case'][:40]:40s} error: {r['error'][:60]}")
            continue
        c, ks = r["cupti_occupancy_median_s"] or 0, r["cupti_kernel_span_median_s"] or 0
        print(f"{r['impl']:30s} {r['case'][:40]:40s} {r['harness_median_s'] * 1e6:8.1f}u {c * 1e6:8.1f}u "
              f"{r['diff_pct'] if r['diff_pct'] is not None else float('nan'):6.1f}% {ks * 1e6:8.1f}u")
    if args.out:
        Path(args.out).write_text(dumps({"rows": out, "argv": sys.argv[1:]}, indent=1))
    big = [r for r in out if r.get("cupti_occupancy_median_s") and r["cupti_occupancy_median_s"] > 50e-6]
    off = [r for r in big if abs(r["diff_pct"]) > 3]
    if off:
        print(f"{len(off)} of {len(big)} row(s) above 50 us differ by more than 3 %", file=sys.stderr)
    return 1 if off else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    from .args import _positive, _selectors
    p = subparsers.add_parser("crosscheck", help="the harness timer against CUPTI kernel durations (GPU)")
    _selectors(p, "models", "roles (default: baseline,library,default)")
    p.add_argument("--reps", type=_positive(int, "--reps"), default=30, help="timed launches per row")
    p.add_argument("--out", help="write the rows as JSON here")
    p.set_defaults(func=lambda a: run(a))
    return p
