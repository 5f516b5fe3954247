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
IDS = ("cuda:gemm_wgmma", "cuda:gemm_pingpong", "cuda:gemm_pingpong_c2", "cuda:gemm_mma", "cuda:gemm")


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


@pytest.mark.parametrize("hopper", ("cuda:gemm_wgmma", "cuda:gemm_pingpong", "cuda:gemm_pingpong_c2"))
def test_supports_reasons(hopper):
    w = _impl(hopper)
    assert w.supports(P.case(M=4096, N=4096, K=4096)) is None
    assert w.supports(P.case(M=512, N=384, K=1024)) is None
    assert w.supports(P.case(M=129, N=264, K=72)) is None  # ragged M and N tiles, K % 64 != 0
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


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc for the sm_90a PTX")
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ("bfloat16", "float16"))
@pytest.mark.parametrize("cm", (1, 2))
def test_compile_only_pingpong_sm90a_facts(dtype, cm):
    from backends.cuda_gemm import SMEM_PINGPONG
    impl = "cuda:gemm_pingpong" + ("_c2" if cm == 2 else "")
    f = _impl(impl).compile_only_fn(P.case(M=4096, N=4096, K=4096, dtype=dtype))
    assert f["path"] == impl.split(":gemm_")[1] and f["spills"] == 0
    assert f["registers"] and f["registers"] <= 168  # the cap __launch_bounds__(384, 1) sets at entry
    assert f["smem"] >= SMEM_PINGPONG > 220_000  # 5-stage ring + two 32 KB C staging buffers
    bf = "Lb1E" if dtype == "bfloat16" else "Lb0E"
    assert list(f["kernels"]) == [k for k in f["kernels"] if f"gemm_pingpong_kernelI{bf}Li{cm}E" in k]
    assert len(f["kernels"]) == 1


def test_pingpong_smem_fits_and_matches_source():
    """The adapter's shared-memory figure is the .cu's PP_SMEM, and it fits an H100/H200 (227 KB)."""
    import re

    from backends.cuda_gemm import SMEM_PINGPONG
    src = (ROOT / "cuda_src" / "gemm_epilogue.cu").read_text()
    consts = dict(re.findall(r"\b(PP_[A-Z]+) = (\d+)[,;]", src))
    st, bm, bn, bk = (int(consts[k]) for k in ("PP_STAGES", "PP_BM", "PP_BN", "PP_BK"))
    want = st * (bm * bk * 2 + bk * bn * 2) + 2 * (bm * bn * 2) + (2 * st + 2) * 8 + 1024
    assert SMEM_PINGPONG == want
    assert SMEM_PINGPONG <= 232_448


def test_dispatch_switch():
    """`cuda:gemm` picks its Hopper kernel from DISPATCH_HOPPER (env KL_CUDA_GEMM_HOPPER overrides)."""
    import os
    import subprocess
    import sys
    import backends.cuda_gemm as g
    assert g.DISPATCH_HOPPER in g.HOPPER_KERNELS == ("wgmma", "pingpong", "pingpong_c2")
    code = "import backends.cuda_gemm as g; print(g.DISPATCH_HOPPER)"
    env = dict(os.environ, KL_CUDA_GEMM_HOPPER="pingpong")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("pingpong"), r.stderr
    env["KL_CUDA_GEMM_HOPPER"] = "bogus"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "KL_CUDA_GEMM_HOPPER" in r.stderr


def test_pingpong_source_has_tma_store_epilogue():
    """The ping-pong kernel stages C with stmatrix and stores it with TMA (no narrow global stores)."""
    src = "".join((ROOT / "cuda_src" / f).read_text() for f in ("gemm_common.cuh", "gemm_epilogue.cu"))
    for needle in ("stmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.bulk.tensor.2d.global.shared::cta",
                   "cp.async.bulk.wait_group.read", "fence.proxy.async.shared::cta", "setmaxnreg.dec",
                   "gemm_pingpong_kernel", ".multicast::cluster", "mapa.shared::cluster", "barrier.cluster.arrive",
                   "cudaLaunchAttributeClusterDimension"):
        assert needle in src, needle


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


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@pytest.mark.parametrize("cm", (1, 2))
def test_pingpong_ragged_and_epilogue_variants(dtype, cm):
    """Ping-pong kernel: ragged M/N tiles (TMA-store clipping), K % 64 != 0 (TMA zero fill), bias
    on/off, every activation, a small persistent grid (many alternating tiles per CTA, ring wrap)."""
    from backends.cuda_gemm import _load
    from harness.verify import check_output
    if _impl("cuda:gemm_pingpong").available():
        pytest.skip(_impl("cuda:gemm_pingpong").available())
    mod, _ = _load()
    g = torch.Generator(device="cuda")
    # M-tiles: 1, 1, 2, 1, 5 (odd: the last cluster pair has a row-less CTA), 2, 8, 16
    shapes = ((1, 8, 8), (8, 8, 8), (129, 264, 72), (1, 520, 8), (640, 136, 4104), (256, 256, 256),
              (1000, 1000, 1000), (2048, 1536, 800))
    for i, (M, N, K) in enumerate(shapes):
        for act in ("none", "relu", "gelu"):
            for has_bias in (True, False):
                for max_ctas in (0, 4):
                    g.manual_seed(i)
                    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
                    b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
                    bias = torch.randn(N, device="cuda", generator=g).to(dtype) if has_bias else None
                    c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                    case = P.case(M=M, N=N, K=K, dtype=str(dtype).split(".")[-1], act=act, bias=int(has_bias))
                    mod.gemm_epilogue_pingpong(a.data_ptr(), b.data_ptr(), bias.data_ptr() if has_bias else 0,
                                               c.data_ptr(), M, N, K, K, N, N, 2 if dtype == torch.bfloat16 else 1,
                                               {"none": 0, "relu": 1, "gelu": 2}[act], has_bias,
                                               torch.cuda.current_stream().cuda_stream, a.device.index,
                                               max_ctas=max_ctas, cluster_m=cm)
                    torch.cuda.synchronize()
                    chk = check_output(P, case, c, P.reference((a, b, bias), case))
                    assert chk.ok, f"{M}x{N}x{K} {act} bias={has_bias} ctas={max_ctas} cluster={cm}: {chk.reason}"


@pytest.mark.gpu
@gpu
def test_pingpong_declines_unaligned_output():
    impl = _impl("cuda:gemm_pingpong")
    if impl.available():
        pytest.skip(impl.available())
    from harness.errors import Unsupported
    case = P.case(M=64, N=64, K=64)
    a, b, bias = P.make_inputs(case, "cuda", 0)
    wide = torch.empty(64, 68, device="cuda", dtype=case.torch_dtype)
    with pytest.raises(Unsupported, match="ldc"):
        impl.prepare(case, (a, b, bias), wide[:, :64])
