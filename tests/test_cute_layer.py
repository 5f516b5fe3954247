"""CuTe DSL layer: availability, input validation, compile-only for sm_90a (no GPU needed), and on
a GPU the verify suite through harness.verify."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from harness import problems, registry  # noqa: E402

HAVE_CUTE = importlib.util.find_spec("cutlass") is not None
HAVE_GPU = torch.cuda.is_available()
needs_cute = pytest.mark.skipif(not HAVE_CUTE, reason="nvidia-cutlass-dsl not installed")
IDS = {"vector_add": "cute:vector_add", "softmax": "cute:softmax", "gemm_epilogue": "cute:gemm"}


def impl(problem):
    return registry.get(problem, IDS[problem])


def test_registered_ids():
    got = {i.key for i in registry.select(layer="cute")}
    assert {f"{p}/{i}" for p, i in IDS.items()} <= got, registry.BACKEND_ERRORS


def test_unavailable_reason_when_package_missing(monkeypatch):
    import cutlass_src

    monkeypatch.setattr(cutlass_src, "_REASON", [])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cutlass" else real(name, *a))
    why = cutlass_src.unavailable()
    assert why and "nvidia-cutlass-dsl" in why
    monkeypatch.setattr(cutlass_src, "_REASON", [])


@needs_cute
def test_available_here():
    for p in IDS:
        assert impl(p).available() is None


# -- compile-only for sm_90a: every kernel, every path ------------------------------------------
def _compile(problem, **kw):
    prob = problems.get(problem)
    case = prob.case(**kw)
    facts = impl(problem).compile_only_fn(case)
    assert facts["compile_s"] > 0
    assert facts.get("registers"), facts          # ptxas -v on the DSL's PTX
    assert facts["spills"] == 0, facts
    return facts


@needs_cute
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_compile_vector_add(dtype):
    f = _compile("vector_add", N=98_432, dtype=dtype)
    assert f["config"]["vec"] * {"float32": 4}.get(dtype, 2) == 16     # 128-bit accesses


@needs_cute
def test_compile_vector_add_misaligned():
    f = _compile("vector_add", N=4099, dtype="float16", misalign=3)
    assert f["config"]["vec"] == 1


@needs_cute
@pytest.mark.parametrize("kw,cluster", [
    (dict(M=4096, N=1024), 1), (dict(M=8, N=16384, dtype="bfloat16"), 1),
    (dict(M=300, N=777, layout="strided_odd"), 1),
    (dict(M=8, N=131072), 4), (dict(M=8, N=262144), 8)])
def test_compile_softmax(kw, cluster):
    f = _compile("softmax", **kw)
    assert f["config"]["cluster"] == cluster


@needs_cute
def test_softmax_too_long_declined():
    from cutlass_src import softmax as sm

    case = problems.get("softmax").case(M=1, N=sm.MAX_N * 2)
    assert "longer" in impl("softmax").supports(case)


@needs_cute
@pytest.mark.parametrize("dtype,act,bias", [("bfloat16", "relu", 1), ("float16", "gelu", 0)])
def test_compile_gemm(dtype, act, bias):
    f = _compile("gemm_epilogue", M=256, N=256, K=256, dtype=dtype, act=act, bias=bias)
    assert f["config"]["tile"] == [128, 256, 64]


@needs_cute
def test_gemm_ptx_uses_hopper_paths():
    from cutlass_src import gemm_epilogue as ge

    ptx = ge.compile_only(torch.bfloat16, "relu", True).ptx
    for needle in ("wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier", "stmatrix"):
        assert needle in ptx, needle


@needs_cute
def test_gemm_declines_unaligned():
    why = impl("gemm_epilogue").supports(problems.get("gemm_epilogue").case(M=127, N=65, K=129))
    assert why and "16-byte" in why and "K=129" in why


# -- input validation (runs without a GPU: checks fire before any launch) -------------------------
@needs_cute
def test_vector_add_validation():
    from cutlass_src import vector_add as va

    x = torch.zeros(8)
    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        va.validate(x, x, x)
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        va.validate([1.0], x, x)


@needs_cute
def test_softmax_validation():
    from cutlass_src import softmax as sm

    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        sm.validate(torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        sm.validate("x", None)


@needs_cute
def test_gemm_validation():
    from cutlass_src import gemm_epilogue as ge

    a = torch.zeros(4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a: must be a CUDA tensor"):
        ge.validate(a, a, None, a, "relu")
    assert "K=33" in ge.check(8, 8, 33, torch.bfloat16)
    assert "N=17" in ge.check(8, 17, 32, torch.bfloat16)
    assert "float32" in ge.check(8, 8, 8, torch.float32)


# -- on a GPU: the verify suite -----------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE_GPU and HAVE_CUTE), reason="needs a CUDA GPU and the CuTe DSL")
@pytest.mark.parametrize("problem", list(IDS))
def test_verify_suite_gpu(problem):
    from harness.verify import verify_case

    prob, im = problems.get(problem), impl(problem)
    bad = []
    for case in prob.cases("verify"):
        if im.supports(case):
            continue
        c = verify_case(im, prob, case, "cuda", seeds=(0, 1))
        if not c.ok:
            bad.append(f"{case.label}: {c.reason}")
    assert not bad, "\n".join(bad)
