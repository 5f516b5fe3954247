"""``python -m harness crosscheck``: the harness's timer against an independent one.

For each selected implementation and case, on the GPU: the harness's own cold-L2 median
(``harness.timing.time_cold``: CUDA events around one launch, a spin kernel ahead of it) and the
kernel durations CUPTI records for the same launches (``torch.profiler``, which reads CUPTI's
activity records): the span from the first kernel of a launch to the end of its last, per launch,
L2 flushed before each. Both medians and their difference are printed and written to JSON. The
two should agree within a few per cent above ~50 us; below, the event timer carries a fixed
overhead (event resolution, the gap after the spin kernel) that CUPTI does not.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def _cupti_spans(launcher, reps: int, flush) -> tuple[list[float], list[float]]:
    """Per launch: (span from its first kernel's start to its last kernel's end, sum of its kernel
    durations), in seconds, from the device-side records CUPTI gives the profiler.

    Each iteration is: poison + flush (inside a ``kl_prep`` range), wait, the launch (inside a
    ``kl_launch`` range), wait. The kernels of launch i are the device records that start after
    ``kl_launch`` i began on the host and before ``kl_prep`` i+1 began (the waits keep them
    apart); the profiler puts host and device records on one clock."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for i in range(reps):
            with record_function("kl_prep"):
                launcher.poison()
                flush()
            torch.cuda.synchronize()
            with record_function("kl_launch"):
                launcher.call()
            torch.cuda.synchronize()
    evts = list(prof.events())
    dev = [e for e in evts if e.device_type == torch.autograd.DeviceType.CUDA
           and not e.name.startswith("kl_")]
    host = sorted([e for e in evts if e.name in ("kl_prep", "kl_launch")
                   and e.device_type != torch.autograd.DeviceType.CUDA], key=lambda e: e.time_range.start)
    spans, sums = [], []
    for k, e in enumerate(host):
        if e.name != "kl_launch":
            continue
        lo = e.time_range.start
        hi = next((h.time_range.start for h in host[k + 1:] if h.name == "kl_prep"), float("inf"))
        ks = [d for d in dev if lo <= d.time_range.start < hi]
        if not ks:
            continue
        spans.append((max(d.time_range.end for d in ks) - min(d.time_range.start for d in ks)) * 1e-6)
        sums.append(sum(d.time_range.end - d.time_range.start for d in ks) * 1e-6)
    return spans, sums


def run(args) -> int:
    import torch

    from . import plan as P, verify
    from .cli import setup
    from .jsonsafe import dumps
    from .timing import Flusher, TimingConfig, time_cold

    if not torch.cuda.is_available():
        raise ValueError("crosscheck: needs a CUDA GPU (CUPTI reads the device's own timestamps)")
    device, impls, plan = setup(args, default_roles=P.COMPARE_ROLES)
    flush = Flusher("cuda")
    out = []
    for p, cases in plan:
        for case in cases:
            inputs = verify.share_inputs(p.make_inputs(case, "cuda", 0), "cuda")
            for impl in [i for i in impls if i.problem == p.name]:
                try:
                    L = verify.Launcher(impl, p, case, inputs, "cuda")
                    st = time_cold({impl.id: L}, TimingConfig(min_samples=args.reps, max_samples=args.reps,
                                                              time_cap_s=5.0), "cuda")[impl.id]
                    spans, sums = _cupti_spans(L, args.reps, flush)
                except Exception as e:  # one row's failure is reported, the rest goes on
                    out.append({"impl": impl.id, "case": case.id, "error": f"{type(e).__name__}: {e}"})
                    continue
                h = st.quartiles()[1]
                c = statistics.median(spans) if spans else None
                out.append({"impl": impl.id, "case": case.id, "harness_median_s": h,
                            "cupti_span_median_s": c,
                            "cupti_kernel_sum_median_s": statistics.median(sums) if sums else None,
                            "diff_pct": 100 * (h - c) / c if c else None, "samples": st.n,
                            "cupti_launches": len(spans)})
                del L
            del inputs
    print(f"{'implementation':30s} {'case':42s} {'harness':>10s} {'CUPTI span':>11s} {'diff':>7s}")
    for r in out:
        if "error" in r:
            print(f"{r['impl']:30s} {r['case'][:42]:42s} error: {r['error'][:60]}")
            continue
        c = r["cupti_span_median_s"]
        print(f"{r['impl']:30s} {r['case'][:42]:42s} {r['harness_median_s'] * 1e6:9.1f}u "
              f"{(c or 0) * 1e6:10.1f}u {r['diff_pct'] if r['diff_pct'] is not None else float('nan'):6.1f}%")
    if args.out:
        Path(args.out).write_text(dumps({"rows": out, "argv": sys.argv[1:]}, indent=1))
    big = [r for r in out if r.get("cupti_span_median_s") and r["cupti_span_median_s"] > 50e-6]
    off = [r for r in big if abs(r["diff_pct"]) > 3]
    if off:
        print(f"{len(off)} of {len(big)} row(s) above 50 us differ by more than 3 %", file=sys.stderr)
    return 1 if off else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    from .cli import _positive, _selectors
    p = subparsers.add_parser("crosscheck", help="the harness timer against CUPTI kernel durations (GPU)")
    _selectors(p, "models", "roles (default: baseline,default)")
    p.add_argument("--reps", type=_positive(int, "--reps"), default=30, help="timed launches per row")
    p.add_argument("--out", help="write the rows as JSON here")
    p.set_defaults(func=lambda a: run(a))
    return p
