"""Shared pieces of the softmax experiment scripts (``exp_triton_*.py``): the output file, the
timing configuration, the baselines every shape is timed beside (torch.softmax and a copy of the
same bytes) and the per-candidate summary (median, IQR, % of the copy, error against float64)."""
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
