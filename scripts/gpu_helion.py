"""GPU check of the Helion default's pending rules (no arguments, under 500 s): for cases of every
shape class, the default with its pending switch on ("new": what ``helion:<problem>_next`` runs)
and off ("old": today's default), each verified (harness.verify.verify_case, one seed) and timed
(CUDA events, median) beside torch eager:

- softmax (``dispatch.SOFTMAX_NEXT``): the aligned-frame kernels (16-byte accesses on rows of any
  length and stride), short rows packed to 2048 positions, few long rows split across programs;
- GEMM (``dispatch.GEMM_NEXT``): TMA for 16-byte rows, the tile with the least work on the
  busiest SM, one row tile for few rows, split-K by the SMs the tiles leave idle;
- vector add: body + tail launches (``dispatch.vector_add_pieces``, on) against one launch.

Where "new" PASSes everywhere and is faster on the geomean with no class slower, turn its switch
on in dispatch.py (per class otherwise: docs/performance.md, Helion sections).

Writes $OUT/helion/check.json (one row per case) and prints one line a row."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

LIMIT_S = 500

# (problem, dims, dtype, params): the issue shapes of every class, most telling first
CASES = [
    ("gemm_epilogue", dict(M=3000, N=3000, K=3000), "float16", dict(act="gelu", bias=1)),
    ("softmax", dict(M=4096, N=50257), "bfloat16", {}),
    ("softmax", dict(M=2, N=2000000), "float32", {}),
    ("softmax", dict(M=50000, N=200), "float16", {}),
    ("gemm_epilogue", dict(M=64, N=32000, K=4096), "bfloat16", dict(act="none", bias=0)),
    ("gemm_epilogue", dict(M=100, N=3008, K=5000), "bfloat16", dict(act="gelu", bias=1)),
    ("softmax", dict(M=96, N=100000), "bfloat16", {}),
    ("softmax", dict(M=1000, N=32769), "bfloat16", {}),
    ("gemm_epilogue", dict(M=2048, N=2047, K=2048), "bfloat16", dict(act="gelu", bias=1)),
    ("gemm_epilogue", dict(M=200, N=13824, K=5120), "bfloat16", dict(act="relu", bias=1)),
    ("gemm_epilogue", dict(M=256, N=6144, K=4096), "bfloat16", dict(act="none", bias=1)),
    ("gemm_epilogue", dict(M=4096, N=4096, K=4096), "bfloat16", dict(act="gelu", bias=1)),
    ("softmax", dict(M=4096, N=128256), "bfloat16", {}),
    ("softmax", dict(M=1823, N=40001), "float16", {}),
    ("softmax", dict(M=12288, N=768), "float32", {}),
    ("softmax", dict(M=6000, N=6000), "bfloat16", {}),
    ("gemm_epilogue", dict(M=555, N=1234, K=777), "bfloat16", dict(act="gelu", bias=1)),
    ("gemm_epilogue", dict(M=1, N=11008, K=4096), "bfloat16", dict(act="none", bias=1)),
    ("gemm_epilogue", dict(M=16, N=4096, K=14336), "bfloat16", dict(act="none", bias=1)),
    ("gemm_epilogue", dict(M=8192, N=512, K=2048), "float16", dict(act="relu", bias=1)),
    ("softmax", dict(M=2048, N=128000), "float16", {}),
    ("vector_add", dict(N=12345679), "float16", {}),
]


def _switch(problem, new: bool):
    """Set dispatch's switch of ``problem`` to the new rule (True) or the old one."""
    from helion_src import dispatch
    if problem == "vector_add":
        dispatch.vector_add_pieces = _ORIG["pieces"] if new else (lambda n, block: None)
    elif problem == "softmax":
        dispatch.SOFTMAX_NEXT = new
    else:
        dispatch.GEMM_NEXT = new


_ORIG: dict = {}


def _restore():
    from helion_src import dispatch
    dispatch.vector_add_pieces = _ORIG["pieces"]
    dispatch.SOFTMAX_NEXT, dispatch.GEMM_NEXT = _ORIG["switches"]


def _torch_fn(problem, inputs, params):
    import torch
    import torch.nn.functional as F
    if problem == "vector_add":
        x, y = inputs
        return lambda: torch.add(x, y)
    if problem == "softmax":
        (x,) = inputs
        return lambda: torch.softmax(x, -1)
    a, b, bias = inputs
    act = params.get("act", "relu")

    def f():
        r = torch.addmm(bias, a, b) if bias is not None else a @ b
        return torch.relu(r) if act == "relu" else F.gelu(r, approximate="tanh") if act == "gelu" else r
    return f


def main() -> int:
    import torch

    from harness import problems, registry
    from harness.verify import verify_case
    from helion_src import dispatch
    from tune_helion import _bench
    out_dir = Path(os.environ.get("OUT", "out")) / "helion"
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    _ORIG["pieces"] = dispatch.vector_add_pieces
    _ORIG["switches"] = (dispatch.SOFTMAX_NEXT, dispatch.GEMM_NEXT)
    registry.load_backends()
    rows = []

    def save():
        (out_dir / "check.json").write_text(json.dumps(rows, indent=2, default=str))
    for problem, dims, dtype, params in CASES:
        if time.perf_counter() - t0 > LIMIT_S:
            rows.append({"problem": problem, "dims": dims, "skipped": "time"})
            continue
        P = problems.get(problem)
        impl = registry.get(problem, f"helion:{problem}")
        case = P.case(**dims, dtype=dtype, **params)
        inputs = P.make_inputs(case, "cuda", 0)
        row = {"problem": problem, "dims": dims, "dtype": dtype, "params": params}
        try:
            row["torch_ms"] = _bench(_torch_fn(problem, inputs, params))
        except Exception as e:
            row["torch"] = f"{type(e).__name__}: {str(e)[:200]}"
        for label, new in (("new", True), ("old", False)):
            if time.perf_counter() - t0 > LIMIT_S:
                row[f"{label}_skipped"] = "time"
                continue
            _switch(problem, new)
            try:
                chk = verify_case(impl, P, case, "cuda", seeds=(0,), repeat=True)
                row[f"{label}_ok"] = bool(chk.ok)
                if not chk.ok:
                    row[f"{label}_reason"] = str(chk.reason)[:300]
                out = P.make_output(case, inputs) if hasattr(P, "make_output") else None
                if out is None:
                    out = _out_like(problem, case, inputs)
                launch = impl.prepare(case, inputs, out)
                info = getattr(launch, "info", {}) or {}
                row[f"{label}_ms"] = _bench(launch)
                row[f"{label}_plan"] = {k: info.get(k) for k in ("variant", "rule", "config", "pieces", "grid",
                                                                   "registers", "spills", "compile_s", "kernels")}
            except Exception as e:
                row[f"{label}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            finally:
                _restore()
        for label in ("new", "old"):
            if row.get(f"{label}_ms") and row.get("torch_ms"):
                row[f"{label}_vs_eager"] = round(row["torch_ms"] / row[f"{label}_ms"], 3)
        rows.append(row)
        save()
        print(f"{problem} {dims} {dtype} torch={row.get('torch_ms')} "
              f"new={row.get('new_ms')} ({row.get('new_ok')}, {row.get('new_vs_eager')}) "
              f"old={row.get('old_ms')} ({row.get('old_ok')}, {row.get('old_vs_eager')}) "
              f"{row.get('new_error', '')}{row.get('old_error', '')}{row.get('new_reason', '')}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    save()
    print(f"gpu_helion: {time.perf_counter() - t0:.1f} s")
    return 0


def _out_like(problem, case, inputs):
    import torch
    if problem == "gemm_epilogue":
        a, b = inputs[0], inputs[1]
        return torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    return torch.empty_like(inputs[0])


if __name__ == "__main__":
    sys.exit(main())
