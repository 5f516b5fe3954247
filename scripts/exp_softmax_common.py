"""Shared pieces of the softmax experiment scripts (``exp_triton_*.py``): the output file, the
timing configuration, the baselines every shape is timed beside (torch.softmax and a copy of the
same bytes), the per-candidate summary (median, IQR, % of the copy, error against float64) and
the loop over shapes (``run`` / ``main``): a script gives its shapes and its candidates."""
from __future__ import annotations

import os
from pathlib import Path


def sink(name: str) -> Path:
    """$OUT/<name>.jsonl (gpu_out/ without $OUT), its folder created."""
    out_dir = Path(os.environ.get("OUT", "gpu_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / f"{name}.jsonl"


def timing_config():
    from harness.timing import TimingConfig
    return TimingConfig(min_samples=5, max_samples=40, rel_spread=0.02, time_cap_s=0.25, warmup_ms=3)


def baselines(x):
    """(outs, launches) holding torch.softmax and a copy of x into its own buffer."""
    import torch
    outs = {"copy": torch.empty_like(x)}
    launches = {"torch": lambda: torch.softmax(x, dim=1), "copy": lambda: outs["copy"].copy_(x)}
    return outs, launches


def summarise(stats, outs: dict, ref, dtype: str, info: dict | None = None) -> dict:
    """Per launch: median and IQR (us), samples, % of the copy's median, ``info``'s entry, and for
    every launch with an output buffer (the copy aside) its largest error against ``ref`` and
    whether it passes (2e-2 for 16-bit outputs, 1e-5 for fp32, and every value finite)."""
    import torch
    copy_s = stats["copy"].quartiles()[1] if "copy" in stats else None
    res = {}
    for k, st in stats.items():
        q1, med, q3 = st.quartiles()
        r = {"us": round(med * 1e6, 2), "iqr_us": round((q3 - q1) * 1e6, 2), "n": st.n,
             "pct_copy": round(100 * copy_s / med, 1) if copy_s else None, **(info or {}).get(k, {})}
        if k in outs and k != "copy":
            err = (outs[k].double() - ref).abs().max().item()
            r["max_abs_err"] = err
            r["ok"] = bool(err < (2e-2 if dtype != "float32" else 1e-5) and torch.isfinite(outs[k]).all())
        res[k] = r
    return res


def run(name: str, shapes, candidates, budget: float) -> int:
    """The experiment loop every ``exp_triton_*`` script shares. For each (M, N, dtype) of
    ``shapes`` (while ``budget`` seconds last): a random input, its float64 softmax, the
    baselines, the layer's default as planned, then each ``(key, build)`` that
    ``candidates(x)`` yields, where ``build(out)`` binds a launch writing ``out`` and returns
    (launch, info dict); a build that raises is recorded under ``errors``. All of them timed
    together (cold L2, interleaved: harness.timing.time_cold), every output checked; one JSON
    line per shape in $OUT/<name>.jsonl as it goes, and a line of % of copy on stdout."""
    import json
    import time

    import torch

    from harness.timing import time_cold
    from triton_src import dispatch

    deadline = time.time() + budget
    out_file = sink(name)
    tcfg = timing_config()
    for M, N, dt in shapes:
        if time.time() > deadline - 20:
            break
        x = torch.randn(M, N, device="cuda", dtype=getattr(torch, dt))
        ref = torch.softmax(x.double(), dim=1)
        (outs, launches), errors, info = baselines(x), {}, {}
        o = torch.empty_like(x)
        plan = dispatch.plan_softmax(x, o)
        outs["default"], launches["default"] = o, plan.launch
        info["default"] = {"variant": plan.variant, "config": dict(plan.config), **launch_facts(plan.launch)}
        for key, build in candidates(x):
            if time.time() > deadline - 20:
                break
            try:
                o = torch.empty_like(x)
                launches[key], info[key] = build(o)
                outs[key] = o
            except Exception as e:
                errors[key] = f"{type(e).__name__}: {e}"[:300]
        stats = time_cold(launches, tcfg, "cuda", errors=errors)
        torch.cuda.synchronize()
        res = summarise(stats, outs, ref, dt, info)
        with out_file.open("a") as f:
            f.write(json.dumps({"shape": [M, N, dt], "results": res, "errors": errors}, default=str) + "\n")
        print(f"{M}x{N} {dt}: " + " | ".join(
            f"{k} {v['pct_copy']}%" + "".join(f" {t}{v[f]}" for t, f in (("r", "regs"), ("s", "spills"),
                                                                       ("cap", "cap")) if v.get(f) is not None)
            + ("" if v.get("ok", True) else " BAD") for k, v in res.items())
            + (f" | errors {errors}" if errors else ""), flush=True)
        del x, ref, outs, launches
        torch.cuda.empty_cache()
    return 0


def launch_facts(launch) -> dict:
    """Registers, spills, grid and register cap of a bound Triton launch (what it has of them)."""
    c = getattr(launch, "compiled", None)
    cfg = getattr(launch, "config", None) or {}
    facts = {"regs": getattr(c, "n_regs", None), "spills": getattr(c, "n_spills", None),
             "grid": getattr(launch, "grid", None), "cap": cfg.get("MAXNREG")}
    return {k: v for k, v in facts.items() if v is not None}


def main(name: str, shapes, candidates, default_budget: float = 150.0) -> int:
    """``run`` with ``--budget S`` from the command line."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=default_budget)
    return run(name, shapes, candidates, ap.parse_args().budget)
