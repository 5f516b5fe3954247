"""A newcomer with another GPU (issue 28, item 6): A100 (sm_80), RTX 4090 (sm_89), H100 (sm_90),
B200 (sm_100), RTX 5090 (sm_120).

On each of them every default and teaching twin of every kernel layer either runs a path that
exists for that architecture or its rows say in one line why not. Tested on the CPU by faking the
device (``torch.cuda`` answers as that GPU would: its compute capability and
``get_device_properties``, from ``harness.model.GPUS``) in a fresh interpreter per GPU, so that no
layer's cached answer of another device leaks in:

- ``test_rows_answer_on_other_gpus``: ``available()`` and ``supports(case)`` on every verify and
  models case: None or one line, never an exception;
- ``test_default_compiles_where_it_accepts``: where a layer accepts a case on that GPU, its
  default's ``compile_only(case)`` compiled for that GPU's architecture (the layer's compiler
  retargeted: Triton, Gluon and Helion through ``triton.compile``'s ``GPUTarget``, TileLang through
  its target string, which follows the device, cuTile through ``tileiras``'s ``gpu_code``, the CuTe
  DSL through ``CUTE_DSL_ARCH``, which follows the device at import) succeeds. A compile that
  fails - or aborts the interpreter - on a case the layer accepts is what a user of that GPU would
  get as a FAIL or a crashed worker instead of a reason.

The CUDA C++ and CuPy layers' plans on those devices are tested in tests/test_cuda_layer.py
(``test_defaults_plan_a_runnable_path_on_other_gpus``: no cluster, wgmma or TMA kernel where the
running code has none, shared memory within the device's; ``test_module_compiled_every_instance_for_sm80``);
Triton's planner in tests/test_triton_layer.py (``test_defaults_plan_within_other_gpus``,
``test_compile_only_defaults_for_sm80``) and here for sm_100 (``test_triton_defaults_compile_for_sm100``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import model

ROOT = Path(__file__).resolve().parent.parent
OTHER = ("a100", "rtx4090", "h100", "b200", "rtx5090")
#: the layers whose implementations are kernels written in the layer (not torch, not libraries)
KERNEL_LAYERS = ("cuda", "cupy", "triton", "gluon", "cute", "helion", "tilelang", "cutile")

# Run in a fresh interpreter: torch.cuda answers as GPU ``sys.argv[1]`` of harness.model.GPUS
# would; Triton's compiler (Triton, Gluon, Helion) targets its architecture; cupy sees one device.
FAKE = r'''
import json, sys, types
gpu = sys.argv[1]
from harness import model
g = model.GPUS[gpu]; a = g.arch
import torch
props = types.SimpleNamespace(name=g.name, major=a.cc[0], minor=a.cc[1], multi_processor_count=a.sms,
    shared_memory_per_block_optin=a.smem_optin, shared_memory_per_multiprocessor=a.smem_per_sm,
    shared_memory_per_block=49152, L2_cache_size=a.l2_bytes, max_threads_per_multi_processor=a.threads_per_sm,
    regs_per_multiprocessor=65536, total_memory=80 * 2 ** 30, warp_size=32, is_integrated=False)
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_capability = lambda *_: tuple(a.cc)
torch.cuda.get_device_properties = lambda *_: props
torch.cuda.get_device_name = lambda *_: g.name
try:
    import cupy
    cupy.cuda.runtime.getDeviceCount = lambda: 1
except ImportError:   # no cupy: its layer reports itself off
    pass
try:
    import triton
    import triton.compiler.compiler as _tc
    from triton.backends.compiler import GPUTarget
    _orig = triton.compile
    def _compile(src, target=None, options=None):
        return _orig(src, target=GPUTarget("cuda", a.cc[0] * 10 + a.cc[1], 32), options=options)
    triton.compile = _tc.compile = _compile
except ImportError:   # no triton: its layers report themselves off
    pass
from harness import registry, problems
'''

ANSWERS = FAKE + r'''
out = {}
for impl in registry.all_impls():
    if impl.layer not in sys.argv[2].split(",") or impl.role not in ("default", "simple"):
        continue
    av = impl.available()
    cases = {}
    if av is None:
        for suite in ("verify", "models"):
            for c in problems.get(impl.problem).cases(suite):
                try:
                    cases[c.id] = impl.supports(c)
                except Exception as e:
                    cases[c.id] = {"raised": f"{type(e).__name__}: {e}"}
    out[impl.id] = {"available": av, "cases": cases}
print("ANSWERS " + json.dumps(out))
'''

# one case of each problem per path a planner takes (few rows / long rows / split; large,
# few-row and ragged GEMMs)
COMPILE = FAKE + r'''
import time
P = problems.get
cases = [P("vector_add").case(N=100_003, dtype="bfloat16"),
         P("softmax").case(M=4096, N=768, dtype="float16"),
         P("softmax").case(M=64, N=50_257, dtype="bfloat16"),
         P("softmax").case(M=4, N=262_147, dtype="float32"),
         P("gemm_epilogue").case(M=4096, N=4096, K=4096, dtype="bfloat16"),
         P("gemm_epilogue").case(M=16, N=4096, K=4096, dtype="float16"),
         P("gemm_epilogue").case(M=1823, N=781, K=509, dtype="float16")]
cases = [cases[int(i)] for i in sys.argv[3].split(",")] if len(sys.argv) > 3 else cases
if sys.argv[2] == "cutile":
    import backends.cutile_layer as _ct
    _ct.ARCH = g.sm          # tileiras's gpu_code
for impl in registry.all_impls():
    if impl.layer != sys.argv[2] or impl.role != "default":
        continue
    for c in cases:
        if c.problem != impl.problem:
            continue
        why = impl.available() or impl.supports(c)
        if why:
            print("RESULT " + json.dumps([impl.id, c.id, "declines", why]), flush=True)
            continue
        # what the next line's compile aborts on (an LLVM error ends the process) is named by this one
        print("TRYING " + json.dumps([impl.id, c.id]), flush=True)
        try:
            facts = impl.compile_only_fn(c) or {}
            print("RESULT " + json.dumps([impl.id, c.id, "compiled", str(facts.get("arch") or facts.get("target"))]), flush=True)
        except Exception as e:
            print("RESULT " + json.dumps([impl.id, c.id, "failed", f"{type(e).__name__}: {str(e)[:300]}"]), flush=True)
'''


def _run(code: str, *argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "CUTE_DSL_ARCH")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _one_line(why) -> bool:
    return isinstance(why, str) and why.strip() != "" and "\n" not in why and len(why) <= 400


# -- the model knows the GPUs -----------------------------------------------------------------------
@pytest.mark.parametrize("device_name,key,sm", [
    ("NVIDIA A100-SXM4-80GB", "a100", "sm_80"), ("NVIDIA GeForce RTX 4090", "rtx4090", "sm_89"),
    ("NVIDIA H100 80GB HBM3", "h100", "sm_90"), ("NVIDIA H200", "h200", "sm_90"),
    ("NVIDIA B200", "b200", "sm_100"), ("NVIDIA GeForce RTX 5090", "rtx5090", "sm_120")])
def test_model_knows_the_datasheets_of_other_gpus(device_name, key, sm):
    """The name CUDA reports maps to the datasheet entry (bandwidth, fp32 and dense 16-bit tensor
    peaks) with its architecture facts; the roofline model of each dtype comes from it."""
    g = model.gpu_from_device_name(device_name)
    assert g is not None and g.key == key and g.sm == sm
    a = g.arch
    assert a.sms > 100 and a.smem_optin < a.smem_per_sm and a.l2_bytes >= 40 * 2 ** 20
    assert g.bw > 1e12 and g.tensor16 > g.fp32 > 1e13
    hw16, hw32 = model.datasheet_hardware(g, "bfloat16"), model.datasheet_hardware(g, "float32")
    assert hw16.peak == g.tensor16 and hw32.peak == g.fp32 and hw16.bw == g.bw
    # PCIe / NVL parts have other figures: not mapped to the SXM entry
    assert model.gpu_from_device_name("NVIDIA H100 PCIe") is None


# -- every row answers --------------------------------------------------------------------------------
def _answers(gpu: str) -> dict:
    r = _run(ANSWERS, gpu, ",".join(KERNEL_LAYERS))
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("ANSWERS ")), None)
    assert r.returncode == 0 and line, r.stderr[-3000:]
    return json.loads(line[len("ANSWERS "):])


@pytest.mark.slow
@pytest.mark.parametrize("gpu", OTHER)
def test_rows_answer_on_other_gpus(gpu):
    """Every default and twin of every kernel layer, on every verify and models case: available()
    and supports() are None or one line (never an exception, never a traceback)."""
    ans = _answers(gpu)
    layers = {i.split(":")[0] for i in ans}
    assert layers >= {"cuda", "triton", "cute"}, sorted(layers)   # what CI installs at least
    bad = []
    for impl, a in ans.items():
        if a["available"] is not None and not _one_line(a["available"]):
            bad.append(f"{impl}: available() -> {a['available']!r}")
        for case, why in a["cases"].items():
            if why is not None and not _one_line(why):
                bad.append(f"{impl} {case}: supports() -> {why!r}")
    assert not bad, f"on {gpu}: " + "; ".join(bad[:10])
    sm = model.GPUS[gpu].sm
    if gpu != "h100":
        # the Hopper-only CuTe GEMM says so, naming this GPU
        g = ans["cute:gemm_epilogue"]
        reasons = {g["available"]} if g["available"] else set(g["cases"].values())
        assert all(r and "sm_90a" in r and sm in r for r in reasons), reasons
    else:
        assert ans["cute:gemm_epilogue"]["available"] is None
        assert all(w is None for w in ans["cute:gemm_epilogue"]["cases"].values())
    # a twin declines nothing the device can run: CUDA's and Triton's twins take every case
    for twin in ("cuda:softmax_simple", "triton:softmax_simple", "cuda:gemm_epilogue_simple"):
        assert all(w is None for w in ans[twin]["cases"].values()), twin


# -- where a layer accepts, its default compiles for that GPU -------------------------------------------
#: which of COMPILE's cases a layer compiles (TileLang's compiles take tens of CPU seconds each:
#: the long-row softmax and the large GEMM, where its TMA / wgmma choices are)
CASES = {"tilelang": "2,4"}


def _compile_results(gpu: str, layer: str) -> tuple[list, str]:
    r = _run(COMPILE, gpu, layer, *([CASES[layer]] if layer in CASES else []))
    res = [json.loads(ln[len("RESULT "):]) for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    tried = [json.loads(ln[len("TRYING "):]) for ln in r.stdout.splitlines() if ln.startswith("TRYING ")]
    if r.returncode != 0:   # a compiler that aborted the process (an LLVM error): the case it was on
        last = tried[-1] if tried else ["?", "?"]
        err = next((ln for ln in reversed(r.stderr.splitlines()) if ln.strip()), "")
        res.append([last[0], last[1], "failed", f"the compile aborted the process (exit {r.returncode}): {err[:300]}"])
    return res, r.stderr


def _layer_missing(layer: str) -> str | None:
    mods = {"gluon": "triton.experimental.gluon", "helion": "helion", "tilelang": "tilelang",
            "cutile": "cuda.tile", "cute": "cutlass"}
    import importlib.util
    try:
        return None if importlib.util.find_spec(mods[layer]) else f"{mods[layer]} is not installed"
    except (ImportError, ValueError):
        return f"{mods[layer]} is not installed"


# (layer, GPU): the architectures a user is most likely to bring - Ampere (sm_80), Hopper (sm_90)
# and datacenter Blackwell (sm_100); the consumer parts share the first and the last's rules
@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["a100", "h100", "b200"])
@pytest.mark.parametrize("layer", ["gluon", "helion", "tilelang", "cutile", "cute"])
def test_default_compiles_where_it_accepts(layer, gpu):
    why = _layer_missing(layer)
    if why:
        pytest.skip(why)
    res, err = _compile_results(gpu, layer)
    assert res, err[-3000:]
    failed = [f"{i} {c}: {w}" for i, c, verdict, w in res if verdict == "failed"]
    assert not failed, (f"on {gpu} ({model.GPUS[gpu].sm}) {layer}'s default accepts cases its kernels do "
                        f"not compile for (the rows would FAIL or crash instead of saying why not): "
                        + "; ".join(failed))
    for i, c, verdict, w in res:
        assert verdict == "compiled" or _one_line(w), (i, c, verdict, w)


@pytest.mark.slow
def test_triton_defaults_compile_for_sm100():
    """Triton's defaults as a B200 plans them (its device facts: no TMA below sm_90, TMA from there
    on) compile for sm_100 (GPUTarget("cuda", 100, 32)); the PTX targets it."""
    from backends import triton_layer as T
    from harness import problems
    from triton_src import dispatch
    a = model.GPUS["b200"].arch
    facts = {"sms": a.sms, "regs_per_sm": 65536, "smem_per_sm": a.smem_per_sm,
             "max_warps_per_sm": a.threads_per_sm // 32, "l2_bytes": a.l2_bytes, "cc": a.cc}
    P = problems.get
    for case in (P("vector_add").case(N=100_003, dtype="bfloat16"), P("softmax").case(M=64, N=50_257, dtype="bfloat16"),
                 P("softmax").case(M=4096, N=768, dtype="float16")):
        for s in T.specs_for(case.problem, "default", case):
            f = T.compile_spec(s, ptxas=False, cc=100)
            assert ".target sm_100" in f["ptx"], (case.id, f["target"])
    gemm = P("gemm_epilogue")
    for case in (gemm.case(M=4096, N=4096, K=4096, dtype="bfloat16"), gemm.case(M=16, N=4096, K=4096, dtype="float16")):
        a_, b_, bias, act, out = T._meta_gemm(case)
        variant, cfg = dispatch.gemm_choice(case.M, case.N, case.K, T.gemm_tma.check(a_, b_, out) is None, facts,
                                            T._gemm_aligned(a_, b_, bias, out))
        for s in T._gemm_specs(variant, case, cfg):
            f = T.compile_spec(s, ptxas=False, cc=100)
            assert ".target sm_100" in f["ptx"], (case.id, variant)
