"""GPU check of the Helion layer (no arguments, about two minutes): a bounded run of Helion's
autotuner (effort "quick", seeded with dispatch's configuration, 60 s shared among the shape
classes in CLASSES below) on one representative shape per class, written to $OUT/helion/tune.json with the chosen configurations,
their times beside dispatch's and Helion's default configuration, and the tuning seconds per
class. Then, for few-row GEMMs, the split-K variant against the tiled default and torch at K
chunks of 512, 1024 and 2048 ($OUT/helion/splitk.json; the first check saw wrong sums at the
longer chunks). rows_vs_online (softmax rows in registers against the looped and online kernels
by row length) is kept for a later run; the first check's figures made the softmax rule."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


# the classes the bounded run tunes (the first check tuned the GEMM's 128x256 and small-M tiles;
# each search starts from dispatch's configuration, seeded)
CLASSES = ["gemm/64x128", "gemm/128x128", "softmax/online", "softmax/rows", "vector_add/16bit"]


def main() -> int:
    out = Path(os.environ.get("OUT", "out")) / "helion"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    import signal

    def stop(*_):
        raise TimeoutError("gpu_helion: 115 s spent; the classes done so far are in tune.json")
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(115)
    import tune_helion
    tune_helion._WRITE = lambda r: (out / "tune.json").write_text(json.dumps(r, indent=2, default=str))
    try:
        res = tune_helion.tune(CLASSES, budget=60, effort="quick",
                               log=lambda m: print(m, flush=True))
        tune_helion._WRITE(res)
    except Exception as e:
        import traceback
        (out / "tune_error.txt").write_text(traceback.format_exc())
        print(f"tune failed: {type(e).__name__}: {e}")
    try:
        splitk(out, t0)
    except Exception as e:
        import traceback
        (out / "splitk_error.txt").write_text(traceback.format_exc())
        print(f"splitk failed: {type(e).__name__}: {e}")
    print(f"gpu_helion: {time.perf_counter() - t0:.1f} s")


def rows_vs_online(out: Path, t0: float) -> None:
    """Where whole rows in registers stop paying: rows, looped and online kernels by row length."""
    import helion
    import torch

    from helion_src import tuned
    from tune_helion import _bench
    rows = []
    for n, dt in ((4096, torch.float32), (8192, torch.float32), (16384, torch.bfloat16), (32768, torch.bfloat16)):
        if time.perf_counter() - t0 > 105:
            break
        x = torch.randn(4096, n, device="cuda", dtype=dt)
        o = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1)
        row = {"shape": [4096, n], "dtype": str(dt), "torch_ms": _bench(lambda: torch.softmax(x, -1))}
        w = 1 << max(0, (n - 1).bit_length())
        for label, kern, cfg in (
                ("rows", tuned.softmax_rows, dict(block_sizes=[1], reduction_loops=[None], num_stages=1,
                                                  num_warps=min(32, max(4, w // 512)))),
                ("looped", tuned.softmax_rows, dict(block_sizes=[1], reduction_loops=[4096], num_warps=8)),
                ("online", tuned.softmax_online, dict(block_sizes=[1, 4096, 4096], num_warps=8))):
            try:
                c = kern.bind((x, o)).compile_config(helion.Config(**cfg), allow_print=False)
                row[f"{label}_ms"] = _bench(lambda: c(x, o))
                row[f"{label}_err"] = ((o.float() - ref).abs().max()).item()
            except Exception as e:
                row[label] = f"{type(e).__name__}: {str(e)[:200]}"
        rows.append(row)
        print(row, flush=True)
        (out / "softmax_rows.json").write_text(json.dumps(rows, indent=2, default=str))


def splitk(out: Path, t0: float) -> None:
    import torch
    import torch.nn.functional as F

    from backends import helion_layer as hl
    from harness import problems, registry
    from helion_src import dispatch
    from tune_helion import _bench
    registry.load_backends()
    P = problems.get("gemm_epilogue")
    tiled = registry.get("gemm_epilogue", "helion:gemm_epilogue")
    sk = registry.get("gemm_epilogue", "helion:gemm_epilogue_splitk")
    rows = []
    base = dict(dispatch.SPLITK["gemm/splitk"])
    for m, n, k, act in ((32, 8192, 4096, "none"), (16, 4096, 12288, "none"), (64, 3072, 8192, "gelu"),
                         (16, 20000, 1536, "none")):
        if time.perf_counter() - t0 > 100:
            rows.append({"shape": [m, n, k], "skipped": "time"})
            break
        case = P.case(M=m, N=n, K=k, act=act, bias=1, dtype="bfloat16")
        inputs = P.make_inputs(case, "cuda", 0)
        a, b, bias = inputs
        ref = torch.addmm(bias, a, b)
        ref = F.gelu(ref, approximate="tanh") if act == "gelu" else ref
        row = {"shape": [m, n, k], "act": act,
               "torch_ms": _bench(lambda: torch.addmm(bias, a, b) if act == "none"
                                  else F.gelu(torch.addmm(bias, a, b), approximate="tanh"))}
        o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        launch = tiled.prepare(case, inputs, o)
        row["tiled_ms"], row["tiled_config"] = _bench(launch), launch.info.get("config")
        row["tiled_err"] = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
        chunk = dispatch.plan_gemm_splitk(m, n, k, 2, torch.cuda.get_device_properties(0).multi_processor_count
                                          ).config["block_sizes"][2]
        row["rule_chunk"] = chunk
        for c in (512, 1024, 2048):
            orig = dispatch.plan_gemm_splitk

            def fixed(*args, _c=c, **kw):
                p = orig(*args, **kw)
                p.config["block_sizes"][2] = _c
                return p
            dispatch.plan_gemm_splitk = fixed
            try:
                o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                launch = sk.prepare(case, inputs, o)
                ms = _bench(launch)
                err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                row[f"splitk_chunk{c}_ms"], row[f"splitk_chunk{c}_err"] = ms, err
            except Exception as e:
                row[f"splitk_chunk{c}"] = f"{type(e).__name__}: {str(e)[:200]}"
            finally:
                dispatch.plan_gemm_splitk = orig
        rows.append(row)
        print(row, flush=True)
        (out / "splitk.json").write_text(json.dumps({"base": base, "rows": rows}, indent=2, default=str))
    (out / "splitk.json").write_text(json.dumps({"base": base, "rows": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
