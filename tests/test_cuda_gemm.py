"""CUDA C++ gemm_epilogue: registration, supports() reasons, sm_90a compile facts (CPU), and the
verify suite + argument validation on a GPU (marked ``gpu``)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from harness import problems, registry

P = problems.get("gemm_epilogue")
ROOT = Path(__file__).resolve().parent.parent
IDS = ("cuda:gemm_wgmma", "cuda:gemm_mma", "cuda:gemm")


def _impl(i):
    return registry.get("gemm_epilogue", i)


def _has_gpu():
    return torch.cuda.is_available()


def test_registered():
    ids = {i.id for i in registry.select(problem="gemm_epilogue", layer="cuda")}
    assert set(IDS) <= ids
    for i in IDS:
        impl = _impl(i)
        assert impl.devices == ("cuda",)
        assert impl.sources and impl.sources[0].path == "cuda_src/gemm_epilogue.cu"


def test_available_reports_reason_without_gpu_or_module():
    for i in IDS:
        why = _impl(i).available()
        assert why is None or (isinstance(why, str) and why)


def test_supports_reasons():
    w = _impl("cuda:gemm_wgmma")
    assert w.supports(P.case(M=4096, N=4096, K=4096)) is None
    assert w.supports(P.case(M=512, N=384, K=1024)) is None
    for M, N, K in ((1, 17, 33), (127, 65, 129), (1025, 769, 513)):
        why = w.supports(P.case(M=M, N=N, K=K))
        assert why and "16-byte" in why
    for i in ("cuda:gemm_mma", "cuda:gemm"):
        for c in P.cases("verify"):
            assert _impl(i).supports(c) is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc for the sm_90a PTX")
@pytest.mark.slow
def test_compile_only_sm90a_facts():
    w = _impl("cuda:gemm_wgmma").compile_only_fn(P.case(M=4096, N=4096, K=4096))
    assert w["path"] == "wgmma" and w["registers"] and w["spills"] == 0
    assert w["smem"] > 150_000  # the 4-stage TMA ring
    names = list(w["kernels"])
    assert names and all("gemm_wgmma_kernel" in n for n in names)
    m = _impl("cuda:gemm").compile_only_fn(P.case(M=127, N=65, K=129))
    assert m["path"] == "mma" and m["spills"] == 0
    assert all("gemm_mma_kernel" in n for n in m["kernels"])


def test_wgmma_ptx_has_tensor_core_instructions():
    """The Hopper kernel really issues wgmma/TMA/setmaxnreg (checked on the source's asm)."""
    src = "".join((ROOT / "cuda_src" / f).read_text()
                  for f in ("gemm_wgmma_ops.cuh", "gemm_common.cuh", "gemm_epilogue.cu"))
    for needle in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "cp.async.bulk.tensor.2d",
                   "setmaxnreg.inc", "mbarrier.try_wait.parity", "mma.sync.aligned.m16n8k16",
                   "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global"):
        assert needle in src, needle


# -- GPU ---------------------------------------------------------------------------------------
gpu = pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("impl_id", IDS)
def test_verify_suite(impl_id):
    from harness.verify import verify_case
    impl = _impl(impl_id)
    if impl.available():
        pytest.skip(impl.available())
    for case in P.cases("verify"):
        if impl.supports(case):
            continue
        chk = verify_case(impl, P, case, "cuda")
        assert chk.ok, f"{case.label}: {chk.reason}"


@pytest.mark.gpu
@gpu
def test_bad_arguments_raise_named_errors():
    impl = _impl("cuda:gemm")
    if impl.available():
        pytest.skip(impl.available())
    case = P.case(M=64, N=48, K=32)
    a, b, bias = P.make_inputs(case, "cuda", 0)
    out = P.alloc_out(case, "cuda")
    with pytest.raises(TypeError, match="a:"):
        impl.prepare(case, (a.float(), b, bias), out)
    with pytest.raises(ValueError, match="b:"):
        impl.prepare(case, (a, b[:16], bias), out)
    with pytest.raises(ValueError, match="rows must have unit inner stride"):
        impl.prepare(case, (a, b.t().contiguous().t(), bias), out)
    with pytest.raises(ValueError, match="bias"):
        impl.prepare(case, (a, b, bias[:3]), out)
    from backends.cuda_gemm import _load
    mod, _ = _load()
    with pytest.raises(ValueError, match="dtype"):
        mod.gemm_epilogue_mma(a.data_ptr(), b.data_ptr(), bias.data_ptr(), out.data_ptr(), 64, 48, 32, 32, 48, 48,
                              7, 1, True)
    with pytest.raises(ValueError, match="lda"):
        mod.gemm_epilogue_mma(a.data_ptr(), b.data_ptr(), bias.data_ptr(), out.data_ptr(), 64, 48, 32, 16, 48, 48,
                              2, 1, True)
