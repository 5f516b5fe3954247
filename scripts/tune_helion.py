"""Offline autotuning of the Helion layer's shape classes (run on the GPU, never in the main job).

For each shape class of ``helion_src/dispatch.py`` (a key of ``dispatch.CONFIGS``) this runs
Helion's own autotuner on one representative shape of the class, under a time budget, and writes
JSON: per class the chosen configuration, the tuning seconds, and the time of the chosen
configuration beside dispatch's current one, Helion's default one and torch's op, each output
checked against torch. A user re-tunes on their GPU with it, then copies the chosen configurations
into ``dispatch.CONFIGS`` (their rules stay as they are)::

    python scripts/tune_helion.py --budget 600 --out helion_tune.json
    python scripts/tune_helion.py --budget 60 --classes gemm/128x256 --effort quick

``--budget`` is the total wall-clock budget in seconds, shared among the classes (each gets its
share as Helion's ``autotune_budget_seconds``; a class is skipped once the budget is spent).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# One representative shape per class: sizes inside the class, away from its edges.
# (class, kernel in helion_src.tuned, builder of args, torch reference, weight in the budget)
MIB = 1 << 20


def _va(n, dt):
    def make():
        x = torch.randn(n, device="cuda", dtype=dt)
        y = torch.randn(n, device="cuda", dtype=dt)
        return (x, y, torch.empty_like(x))
    return make, lambda a: a[0] + a[1]


def _sm(m, n, dt):
    def make():
        x = torch.randn(m, n, device="cuda", dtype=dt)
        return (x, torch.empty_like(x))
    return make, lambda a: torch.softmax(a[0].float(), dim=-1).to(a[0].dtype)


def _gemm(m, n, k, act, dt=torch.bfloat16):
    def make():
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(k, n, device="cuda", dtype=dt) / math.sqrt(k)
        bias = torch.randn(n, device="cuda", dtype=dt)
        return (a, b, bias, torch.empty(m, n, device="cuda", dtype=dt), act)

    def ref(a):
        y = torch.addmm(a[2], a[0], a[1])
        return F.gelu(y, approximate="tanh") if act == "gelu" else torch.relu(y) if act == "relu" else y
    return make, ref


CLASSES = {  # in the order they are tuned (the GEMM first: a spent budget skips the last)
    "gemm/128x256": ("gemm_epilogue", *_gemm(4096, 4096, 4096, "relu"), 2.2, (4096, 4096, 4096)),
    "gemm/small_m": ("gemm_epilogue", *_gemm(32, 8192, 4096, "none"), 2.0, (32, 8192, 4096)),
    "gemm/128x128": ("gemm_epilogue", *_gemm(512, 4096, 4096, "gelu"), 1.5, (512, 4096, 4096)),
    "gemm/64x128": ("gemm_epilogue", *_gemm(256, 4096, 4096, "none"), 1.5, (256, 4096, 4096)),
    "softmax/online": ("softmax_online", *_sm(2048, 65536, torch.bfloat16), 1.5, (2048, 65536)),
    # the same long rows through the whole-row kernel: the autotuner chooses its reduction loop
    # (the choice between this and the online kernel for long rows)
    "softmax/looped": ("softmax_rows", *_sm(2048, 65536, torch.bfloat16), 1.0, (2048, 65536)),
    "softmax/rows": ("softmax_rows", *_sm(16384, 2048, torch.bfloat16), 1.3, (16384, 2048)),
    "vector_add/16bit": ("vector_add", *_va(1 << 26, torch.bfloat16), 1.0, (1 << 26,)),
    "vector_add/32bit": ("vector_add", *_va(1 << 25, torch.float32), 0.7, (1 << 25,)),
}


def _settings(**kw) -> dict:
    """Keep the settings this Helion version knows (1.4 and 1.5 differ a little)."""
    import helion
    known = {f.name for f in dataclasses.fields(helion.Settings)}
    return {k: v for k, v in kw.items() if k in known}


def _bench(fn, reps=30) -> float:
    """Median milliseconds of ``fn`` (CUDA events, after warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def _config_dict(cfg) -> dict:
    try:
        return {k: v for k, v in dict(cfg).items()}
    except Exception:
        return {"repr": repr(cfg)}


def _run_config(kernel, args, cfg, ref):
    """Compile ``kernel`` for ``cfg`` (a helion.Config), check it against ``ref``, time it."""
    out_i = 3 if len(args) == 5 else len(args) - 1
    bound = kernel.bind(tuple(args))
    t0 = time.perf_counter()
    compiled = bound.compile_config(cfg, allow_print=False)
    launch = _bound_launch(compiled, args)
    launch()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    want = ref(args).float()
    got = args[out_i].float()
    err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    ms = _bench(launch)
    return {"ms": round(ms, 5), "rel_err": err, "ok": bool(err < 2e-2), "compile_s": round(compile_s, 2)}


def _bound_launch(compiled, args):
    """The launch the layer's default makes (the compiled Triton kernel's launcher, bound once),
    so that the times compare kernels, not Helion's per-call host path."""
    from backends.helion_layer import _record, _spec
    from triton_src.runtime import bind
    spec = _spec(_record(compiled, args))
    return bind(spec.kernel, spec.grid, spec.args, device=args[0].device, **spec.options)


def tune(classes, budget: float, effort: str, log=print) -> dict:
    import helion
    from helion_src import dispatch, tuned
    t_start = time.perf_counter()
    weights = sum(CLASSES[c][3] for c in classes)
    result = {"helion": _version(), "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
              "effort": effort, "budget_s": budget, "classes": {}}
    for name in classes:
        kname, make, ref, weight, shape = CLASSES[name]
        left = budget - (time.perf_counter() - t_start)
        share = budget * weight / weights
        if left < 0.5 * share:
            result["classes"][name] = {"skipped": f"budget spent ({left:.0f} s left)"}
            log(f"{name}: skipped, budget spent")
            continue
        share = max(5, int(min(share, left)))
        base = getattr(tuned, kname)
        seed = _rows_cfg(shape) if name == "softmax/rows" else dispatch.CONFIGS.get(name)
        kernel = helion.kernel(base.fn, **_settings(
            autotune_seed_configs=[helion.Config(**seed)] if seed else None,
            static_shapes=False, autotune_effort=effort, autotune_budget_seconds=share,
            autotune_progress_bar=False, autotune_compile_timeout=min(30, share),
            autotune_log_level=30))
        args = make()
        entry = {"kernel": kname, "shape": list(shape), "dtype": str(args[0].dtype), "budget_s": share}
        t0 = time.perf_counter()
        try:
            cfg = kernel.autotune(args, force=True)
            entry["tuning_s"] = round(time.perf_counter() - t0, 1)
            entry["chosen"] = _config_dict(cfg)
        except Exception as e:
            entry["tuning_s"] = round(time.perf_counter() - t0, 1)
            entry["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            result["classes"][name] = entry
            log(f"{name}: autotune failed: {entry['error']}")
            continue
        plain = getattr(tuned, kname)
        dispatch_cfg = _rows_cfg(shape) if name == "softmax/rows" else dispatch.CONFIGS.get(name)
        runs = [("chosen", cfg), ("helion_default", None)]
        if dispatch_cfg is not None:
            runs.insert(1, ("dispatch", helion.Config(**dispatch_cfg)))
        with torch.no_grad():
            for label, c in runs:
                try:
                    if c is None:
                        c = plain.bind(tuple(args)).config_spec.default_config()
                    entry[f"{label}_run"] = _run_config(plain, args, c, ref)
                except Exception as e:
                    entry[f"{label}_run"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            try:
                entry["torch_ms"] = round(_bench(lambda: ref(args)), 5)
            except Exception as e:
                entry["torch_ms"] = f"{type(e).__name__}: {e}"
        result["classes"][name] = entry
        log(f"{name}: {entry.get('tuning_s')} s (budget {share}), chosen {entry.get('chosen')}, "
            f"runs {entry.get('chosen_run')} / dispatch {entry.get('dispatch_run')} / "
            f"default {entry.get('helion_default_run')} / torch {entry.get('torch_ms')} ms")
        _WRITE(result)
    result["total_s"] = round(time.perf_counter() - t_start, 1)
    return result


def _rows_cfg(shape) -> dict:
    from helion_src import dispatch
    m, n = shape
    return dispatch.plan_softmax(m, n, 2).config


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("helion")
    except Exception:
        return "?"


_WRITE = lambda r: None  # noqa: E731 - replaced by main to write after each class


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=float, default=600, help="total tuning seconds (all classes)")
    p.add_argument("--classes", nargs="*", default=list(CLASSES), choices=list(CLASSES))
    p.add_argument("--effort", default="quick", choices=("quick", "full"))
    p.add_argument("--out", default="helion_tune.json")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("tune_helion: needs a CUDA GPU (autotuning runs the kernels)", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    global _WRITE
    _WRITE = lambda r: out.write_text(json.dumps(r, indent=2, default=str))  # noqa: E731
    res = tune(a.classes, a.budget, a.effort)
    _WRITE(res)
    print(f"wrote {out} ({res['total_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
