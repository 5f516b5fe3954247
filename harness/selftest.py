"""``python -m harness selftest``: does the verifier catch the bugs it is meant to catch?

Planted-bug implementations (``harness/planted/``: Triton kernels under the Triton interpreter on
CPU tensors, and torch ones) each run through ``harness.verify.verify_case`` on the cases that
expose their bug and must FAIL there; their correct twins must PASS on the same cases; and where a
bug hides on some shapes (a power-of-two row, contiguous rows, a whole number of blocks) a control
case shows it passing, which is why the verify suite carries ragged and strided shapes. Exit
status 0 when every outcome is the expected one, 1 otherwise.

The planted implementations are built here as ``Implementation`` objects and registered nowhere,
so ``list`` and ``compare`` never see them. ``TRITON_INTERPRET=1`` must be set before the Triton
kernels are defined: when it is not set, the command re-runs itself in a subprocess with it set.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# (what, problem, planted (module, function, layer), twin, exposing cases, control cases)
# cases are (dtype, {sizes and params}), controls (dtype, {...}, why the bug hides there);
# small shapes keep the interpreter fast.
CHECKS = [
    ("softmax padded with 0.0 instead of -inf", "softmax",
     ("triton_bugs", "prepare_softmax_pad_zero", "triton"), ("triton_bugs", "prepare_softmax", "triton"),
     [("float32", dict(M=5, N=781)), ("float16", dict(M=3, N=100, kind="negative"))],
     [("float32", dict(M=4, N=256), "N is a power of two: no padding lanes")]),
    ("missing tail mask (grid = N // BLOCK, unmasked kernel)", "vector_add",
     ("triton_bugs", "prepare_add_missing_tail", "triton"), ("triton_bugs", "prepare_add", "triton"),
     [("float32", dict(N=127)), ("float16", dict(N=4099))],
     [("float32", dict(N=2048), "N is a whole number of blocks: no tail")]),
    ("wrong row stride (row * N, rows strided)", "softmax",
     ("triton_bugs", "prepare_softmax_wrong_stride", "triton"), ("triton_bugs", "prepare_softmax", "triton"),
     [("float32", dict(M=37, N=100, layout="strided")), ("float32", dict(M=9, N=77, layout="strided_odd"))],
     [("float32", dict(M=37, N=100), "contiguous rows: the stride is N")]),
    ("unwritten last element (mask < N - 1)", "vector_add",
     ("triton_bugs", "prepare_add_last_unwritten", "triton"), ("triton_bugs", "prepare_add", "triton"),
     [("float32", dict(N=1)), ("float32", dict(N=4099))], []),
    ("input-mutating kernel (x used as scratch)", "vector_add",
     ("triton_bugs", "prepare_add_mutates_input", "triton"), ("triton_bugs", "prepare_add", "triton"),
     [("float32", dict(N=127))], []),
    ("input-mutating softmax (exp in place on x)", "softmax",
     ("torch_bugs", "prepare_softmax_in_place", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=4, N=33))], []),
    ("stale binding (the first seed's inputs read on every seed), verified seed by seed as the "
     "main job verifies a heavy case (every implementation on a seed before the next)", "softmax",
     ("torch_bugs", "prepare_softmax_first_inputs", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=4, N=33, _stage="seed_major")), ("bfloat16", dict(M=5, N=100, _stage="seed_major"))], []),
    ("input-mutating on a repeat (the first launch clean, the second's output the same bits)", "softmax",
     ("torch_bugs", "prepare_softmax_mutates_on_repeat", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=4, N=33)), ("bfloat16", dict(M=5, N=100, _stage="seed_major"))], []),
    ("kernel that writes zeros", "softmax",
     ("torch_bugs", "prepare_softmax_zeros", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=4, N=33)), ("float32", dict(M=1, N=1))], []),
    # the verifier's and the timer's own blind spots
    ("timing no-op (stops working after the verified launches)", "vector_add",
     ("torch_bugs", "prepare_add_noop_after_verify", "torch"), ("torch_bugs", "prepare_add", "torch"),
     [("float32", dict(N=1000, _stage="timed"))],
     [("float32", dict(N=1000), "the verify suite alone: its launches are the ones that work")]),
    ("scribbles past its input's view when timed (its timed outputs have the verified bits, which the "
     "timing's checks pass on their bits: their check of the inputs must see it)", "vector_add",
     ("torch_bugs", "prepare_add_scribbles_when_timed", "torch"), ("torch_bugs", "prepare_add", "torch"),
     [("float32", dict(N=1000, misalign=1, _stage="timed"))],
     [("float32", dict(N=1000, misalign=1), "the verify suite alone: its launches write nothing outside")]),
    ("cached return (computes once, returns the same tensor forever)", "softmax",
     ("torch_bugs", "prepare_softmax_cached", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=4, N=33)), ("bfloat16", dict(M=5, N=100, _stage="timed"))], []),
    ("reference tamper (walks the stack, overwrites the reference)", "softmax",
     ("torch_bugs", "prepare_softmax_frame_tamper", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=4, N=33))], []),
    ("monkeypatch of a harness function (check_output always passes)", "softmax",
     ("torch_bugs", "prepare_softmax_patch_verifier", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=4, N=33))], []),
    ("write past the end of out (one element)", "vector_add",
     ("torch_bugs", "prepare_add_overrun", "torch"), ("torch_bugs", "prepare_add", "torch"),
     [("float32", dict(N=127)), ("float16", dict(N=4099))], []),
    ("late decline (Unsupported from launch after prepare accepted)", "vector_add",
     ("torch_bugs", "prepare_add_late_decline", "torch"), ("torch_bugs", "prepare_add", "torch"),
     [("float32", dict(N=127))], []),
    ("row cap (the grid stops at 2048 rows)", "softmax",
     ("torch_bugs", "prepare_softmax_row_cap", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=2053, N=96))],
     [("float32", dict(M=2048, N=96), "M <= 2048: the cap is never reached")]),
    ("rounding toward zero into fp16, on rows whose values are fp16 subnormals (the twin, rounded "
     "to nearest, is itself 1.3e-3 off there: the norm bound starts from the rounded reference)", "softmax",
     ("torch_bugs", "prepare_softmax_toward_zero", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float16", dict(M=16, N=128_256))], []),
    ("low-precision exp (exp evaluated in float16)", "softmax",
     ("torch_bugs", "prepare_softmax_fp16_exp", "torch"), ("torch_bugs", "prepare_softmax", "torch"),
     [("float32", dict(M=64, N=1000)), ("float32", dict(M=37, N=1000, layout="strided"))], []),
    ("activation substitution: exact-erf GELU where tanh GELU is specified", "gemm_epilogue",
     ("torch_bugs", "prepare_gemm_erf_gelu", "torch"), ("torch_bugs", "prepare_gemm", "torch"),
     [("bfloat16", dict(M=127, N=65, K=129, act="gelu")), ("float16", dict(M=257, N=392, K=200, act="gelu"))],
     [("bfloat16", dict(M=127, N=65, K=129, act="relu"), "act=relu: no GELU to substitute")]),
    ("activation substitution: ReLU where GELU is specified", "gemm_epilogue",
     ("torch_bugs", "prepare_gemm_relu_for_gelu", "torch"), ("torch_bugs", "prepare_gemm", "torch"),
     [("bfloat16", dict(M=512, N=512, K=4096, act="gelu")), ("float16", dict(M=127, N=65, K=129, act="gelu"))], []),
    ("precision: a 16-bit accumulator across K tiles", "gemm_epilogue",
     ("torch_bugs", "prepare_gemm_bf16_acc", "torch"), ("torch_bugs", "prepare_gemm", "torch"),
     [("bfloat16", dict(M=127, N=65, K=129, act="none")), ("float16", dict(M=1025, N=769, K=513, act="relu"))],
     [("bfloat16", dict(M=127, N=65, K=64, act="none", bias=0),
       "K fits one tile and no bias: one rounding, as specified")]),
    # attention: the flash loop's own slips (Triton, 64-key blocks)
    ("attention: running sum not rescaled when a key block raises the max", "attention",
     ("attention_bugs", "prepare_attention_no_rescale", "triton"), ("attention_bugs", "prepare_attention", "triton"),
     [("bfloat16", dict(B=1, Hq=2, Hkv=1, Sq=40, Sk=200, D=64)),
      ("float16", dict(B=1, Hq=2, Hkv=2, Sq=70, Sk=130, D=128, causal=1))],
     [("bfloat16", dict(B=1, Hq=2, Hkv=1, Sq=40, Sk=60, D=64), "Sk fits one key block: nothing to rescale")]),
    ("attention: causal mask off by one (a query also sees the next key)", "attention",
     ("attention_bugs", "prepare_attention_causal_off_by_one", "triton"), ("attention_bugs", "prepare_attention", "triton"),
     [("bfloat16", dict(B=1, Hq=2, Hkv=1, Sq=70, Sk=70, D=64, causal=1)),
      ("float16", dict(B=2, Hq=2, Hkv=1, Sq=9, Sk=100, D=128, causal=1, layout="bshd"))],
     [("bfloat16", dict(B=1, Hq=2, Hkv=1, Sq=70, Sk=70, D=64), "causal=0: no mask")]),
    ("attention: wrong scale (exp2 without log2(e): softmax at the wrong temperature)", "attention",
     ("attention_bugs", "prepare_attention_wrong_scale", "triton"), ("attention_bugs", "prepare_attention", "triton"),
     [("bfloat16", dict(B=1, Hq=2, Hkv=1, Sq=33, Sk=47, D=64)),
      ("float16", dict(B=1, Hq=2, Hkv=2, Sq=17, Sk=17, D=128, causal=1))],
     [("bfloat16", dict(B=2, Hq=2, Hkv=1, Sq=9, Sk=1, D=64), "one key: its weight is 1 at any scale")]),
]


@dataclass
class Outcome:
    bug: str
    impl: str
    role: str        # "planted" | "twin" | "control"
    case: str
    expect: str      # PASS | FAIL
    got: str         # PASS | FAIL | ERROR
    reason: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.expect == self.got

    def to_json(self) -> dict:
        return {"bug": self.bug, "impl": self.impl, "role": self.role, "case": self.case,
                "expect": self.expect, "got": self.got, "ok": self.ok, "reason": self.reason,
                "seconds": round(self.seconds, 3)}


def _impl(problem: str, spec) -> "Implementation":
    import importlib

    from .registry import Implementation

    module, fn, layer = spec
    mod = importlib.import_module(f"harness.planted.{module}")
    prepare = getattr(mod, fn)
    name = fn.removeprefix("prepare_")
    return Implementation(problem=problem, layer=layer, name=f"planted_{name}", prepare=prepare,
                          description=(prepare.__doc__ or "").strip().split("\n")[0],
                          devices=("cpu",), origin=f"harness.planted.{module}")


def timed_check(impl, problem, case, device="cpu", bits: str | None = None):
    """The timing path on one case: prepare on seed 0's inputs, time a few interleaved samples
    (``harness.timing``; on the CPU with a wall clock), verify the first and last timed launch -
    as the main job does, with ``bits`` (the fingerprint of the output the verification passed on
    seed 0): an output with those bits passes on them and the inputs' check. Returns a ``verify.Check``."""
    from . import timing, verify

    inputs = verify.share_inputs(problem.make_inputs(case, device, 0), device)
    L = verify.Launcher(impl, problem, case, inputs, device)

    def check(k, out):
        g = L.guard()
        return verify.Check(False, g) if g else verify.judge(impl, problem, case, 0, inputs, out, device,
                                                             expect=bits)

    errors: dict = {}
    cfg = timing.TimingConfig(min_samples=3, max_samples=5, time_cap_s=0.05, warmup_ms=1.0)
    stats = timing.time_launches({impl.id: L}, cfg, device, check=check, errors=errors)
    if impl.id in errors:
        return verify.Check(False, errors[impl.id])
    return verify.Check(bool(stats.get(impl.id)), "" if stats.get(impl.id) else "no timing samples")


# GPU-only blind spots: (what, problem, planted, twin, case, timing mode)
GPU_CHECKS = [
    ("launch on a side stream: a CUDA-graph replay does nothing", "vector_add",
     ("gpu_bugs", "prepare_add_side_stream", "torch"), ("gpu_bugs", "prepare_add", "torch"),
     ("float32", dict(N=1 << 24)), "graph"),
    ("launch on a side stream: CUDA events bracket nothing", "vector_add",
     ("gpu_bugs", "prepare_add_side_stream", "torch"), ("gpu_bugs", "prepare_add", "torch"),
     ("float32", dict(N=1 << 24)), "cold"),
    ("timing no-op on the GPU", "vector_add",
     ("torch_bugs", "prepare_add_noop_after_verify", "torch"), ("gpu_bugs", "prepare_add", "torch"),
     ("bfloat16", dict(N=1 << 24)), "cold"),
    ("ReLU for GELU at 4096^3", "gemm_epilogue",
     ("torch_bugs", "prepare_gemm_relu_for_gelu", "torch"), ("torch_bugs", "prepare_gemm", "torch"),
     ("bfloat16", dict(M=4096, N=4096, K=4096, act="gelu")), None),
    ("16-bit accumulator across K tiles at 4096^3", "gemm_epilogue",
     ("torch_bugs", "prepare_gemm_bf16_acc", "torch"), ("torch_bugs", "prepare_gemm", "torch"),
     ("bfloat16", dict(M=4096, N=4096, K=4096, act="none")), None),
    ("exact-erf GELU at 4096^3", "gemm_epilogue",
     ("torch_bugs", "prepare_gemm_erf_gelu", "torch"), ("torch_bugs", "prepare_gemm", "torch"),
     ("bfloat16", dict(M=4096, N=4096, K=4096, act="gelu")), None),
]


def run_gpu_checks(progress=None) -> list[Outcome]:
    """The GPU-only planted bugs: each through the verifier and, where given, the timer in that
    mode (graph replays or cold launches), with the correct twin beside it."""
    from . import problems, timing, verify

    outcomes = []
    for bug, pname, planted_spec, twin_spec, (dt, kw), mode in GPU_CHECKS:
        prob = problems.get(pname)
        case = prob.case(dtype=dt, **kw)
        for role, spec, expect in (("planted", planted_spec, "FAIL"), ("twin", twin_spec, "PASS")):
            impl = _impl(pname, spec)
            impl.devices = ("cuda",)
            if progress:
                progress(f"{role:8s} {impl.id:38s} {case.label} {mode or 'verify'}")
            t0 = time.perf_counter()
            try:
                c = verify.verify_case(impl, prob, case, "cuda", seeds=(0,))
                if c.ok and mode:
                    inputs = prob.make_inputs(case, "cuda", 0)
                    L = verify.Launcher(impl, prob, case, inputs, "cuda")

                    def check(k, out, L=L, inputs=inputs, impl=impl, bits=c.details.get("bits")):
                        g = L.guard()   # (as the main job: the verified bits pass on them)
                        return verify.Check(False, g) if g else verify.judge(impl, prob, case, 0, inputs, out, "cuda",
                                                                             expect=bits)
                    errors: dict = {}
                    cfg = timing.TimingConfig(mode=mode, min_samples=5, max_samples=20, time_cap_s=0.3)
                    st = timing.time_launches({impl.id: L}, cfg, "cuda", check=check, errors=errors)
                    if impl.id in errors:
                        c = verify.Check(False, errors[impl.id])
                    elif impl.id in st:
                        # the plausibility check of the report, on this one row
                        from . import report
                        from .machine import machine_info, measure_ceilings
                        row = {"problem": pname, "impl": impl.id, "layer": "torch", "case": case.to_json(),
                               "status": "PASS", "time": st[impl.id].to_json(False), "timing_mode": mode,
                               "traffic_bytes": prob.traffic(case), "flops": prob.flops(case)}
                        m = machine_info()
                        report.mark_implausible([row], measure_ceilings(), m.get("gpu"), m.get("l2_bytes") or 0)
                        if row["status"] == "FAIL":
                            c = verify.Check(False, row["reason"])
                got, reason = ("PASS" if c.ok else "FAIL"), c.reason
            except Exception as e:
                got, reason = "ERROR", f"{type(e).__name__}: {str(e).strip()[:200]}"
            outcomes.append(Outcome(bug, impl.id, role, case.label + (f" ({mode} timing)" if mode else ""),
                                    expect, got, reason, time.perf_counter() - t0))
    return outcomes


def _verify_seed_major(impl, problem, case) -> tuple[str, str]:
    """The main job's path for a heavy case (``worker._verify_seed_major``): one call a seed, each
    continuing the verdict of the seeds before it."""
    from . import verify, worker

    rows = {impl.id: {}}
    task = {"id": "selftest", "phase": "timed", "seeds": verify.SEEDS}
    passed = worker._verify_seed_major(task, [impl], problem, case, "cpu", rows, lambda **event: None)
    return ("PASS" if passed else "FAIL"), rows[impl.id].get("reason", "")


def _verify(impl, problem, case, stage: str = "verify") -> tuple[str, str]:
    from .verify import verify_case

    if stage == "seed_major":
        return _verify_seed_major(impl, problem, case)
    try:
        c = verify_case(impl, problem, case, "cpu")
        if c.ok and stage == "timed":
            c = timed_check(impl, problem, case, "cpu", bits=c.details.get("bits"))
    except Exception as e:  # a planted kernel must fail verification, not crash the self-test
        return "ERROR", f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return ("PASS" if c.ok else "FAIL"), c.reason


def run_checks(progress=None) -> list[Outcome]:
    """Run every planted bug, twin and control (TRITON_INTERPRET=1 must already be set)."""
    from . import problems

    if os.environ.get("TRITON_INTERPRET") != "1" and any(
            spec[2] == "triton" for c in CHECKS for spec in (c[2], c[3])):
        raise RuntimeError("selftest: TRITON_INTERPRET=1 must be set before triton is imported")

    outcomes: list[Outcome] = []
    twin_cache: dict[tuple, tuple[str, str, float]] = {}
    for bug, pname, planted_spec, twin_spec, exposing, controls in CHECKS:
        prob = problems.get(pname)
        planted, twin = _impl(pname, planted_spec), _impl(pname, twin_spec)
        plan = [("planted", planted, dt, kw, "FAIL", "") for dt, kw in exposing]
        plan += [("twin", twin, dt, kw, "PASS", "") for dt, kw in exposing]
        plan += [("control", planted, dt, kw, "PASS", note) for dt, kw, note in controls]
        for role, impl, dt, kw, expect, note in plan:
            kw = dict(kw)
            stage = kw.pop("_stage", "verify")
            case = prob.case(dtype=dt, **kw)
            key = (impl.key, case.id, stage)
            if progress:
                progress(f"{role:8s} {impl.id:38s} {case.label}")
            if role == "twin" and key in twin_cache:
                got, reason, secs = twin_cache[key]
            else:
                t0 = time.perf_counter()
                got, reason = _verify(impl, prob, case, stage)
                secs = time.perf_counter() - t0
                if role == "twin":
                    twin_cache[key] = (got, reason, secs)
            if note and got == expect:
                reason = f"bug hidden here: {note}"
            label = case.label + {"timed": " (verified, then timed)", "seed_major": " (seed by seed)"}.get(stage, "")
            outcomes.append(Outcome(bug, impl.id, role, label, expect, got, reason, secs))
    return outcomes


def render(outcomes: list[Outcome]) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=160, highlight=False, color_system=None)
    t = Table(title="verifier self-test: planted bugs must FAIL, correct twins and controls PASS")
    for col in ("planted bug", "role", "implementation", "case", "expect", "got", "", "why"):
        t.add_column(col, overflow="fold")
    last = None
    for o in outcomes:
        t.add_row(o.bug if o.bug != last else "", o.role, o.impl, o.case, o.expect, o.got,
                  "ok" if o.ok else "WRONG", o.reason or "")
        last = o.bug
    con.print(t)
    bad = [o for o in outcomes if not o.ok]
    total = sum(o.seconds for o in outcomes)
    if bad:
        con.print(f"SELFTEST FAILED: {len(bad)} of {len(outcomes)} outcomes are not the expected ones "
                  f"({total:.1f} s)")
    else:
        con.print(f"selftest passed: all {len(outcomes)} outcomes as expected ({total:.1f} s)")
    return buf.getvalue()


def _run_here(fmt: str, quiet: bool = False, gpu: bool = False) -> int:
    prog = None if quiet or fmt == "json" or not sys.stderr.isatty() else (lambda s: print(f"  {s}", file=sys.stderr, flush=True))
    outcomes = run_gpu_checks(prog) if gpu else run_checks(prog)
    if fmt == "json":
        print(json.dumps([o.to_json() for o in outcomes], indent=2))
    else:
        print(render(outcomes), end="")
    return 0 if all(o.ok for o in outcomes) else 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "selftest", help="planted bugs must FAIL verification and their twins PASS (CPU, Triton interpreter)",
        description="Run planted-bug implementations (Triton under TRITON_INTERPRET=1 on CPU tensors, "
                    "and torch) through the verifier; exit 1 unless every bug FAILs and every correct "
                    "twin PASSes.")
    p.add_argument("--format", default="table", choices=("table", "json"))
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--gpu", action="store_true", help="the GPU-only planted bugs (graph capture, CUDA "
                   "events, large GEMMs) instead; needs a GPU")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    fmt = getattr(args, "format", "table")
    quiet = getattr(args, "quiet", False)
    if getattr(args, "gpu", False):
        import torch
        if not torch.cuda.is_available():
            raise ValueError("selftest --gpu: needs a CUDA GPU")
        return _run_here(fmt, quiet, gpu=True)
    if os.environ.get("TRITON_INTERPRET") == "1":
        return _run_here(fmt, quiet)
    # Triton reads TRITON_INTERPRET when a kernel is defined (older versions: when triton is
    # imported), so run in a fresh interpreter with it set rather than flipping this process.
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "harness.selftest", "--format", fmt] + (["--quiet"] if quiet else [])
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    _p = argparse.ArgumentParser(prog="python -m harness.selftest")
    _p.add_argument("--format", default="table", choices=("table", "json"))
    _p.add_argument("--quiet", action="store_true")
    _a = _p.parse_args()
    os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.exit(_run_here(_a.format, _a.quiet))
