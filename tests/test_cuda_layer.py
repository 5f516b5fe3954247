"""CUDA C++ layer (kl_cuda, built by CMake from cuda_src/) and the cupy layer (NVRTC, same .cu).

CPU: the build products (marker, module, ptxas log), ptxas facts per template instance, the
no-CUDA build path, the adapters' available()/supports() reasons, input validation in the
adapters and in the bindings, the Python mirror of the host dispatcher, grid descriptions.
GPU (@pytest.mark.gpu): every implementation on the verify suite through harness.verify.verify_case.
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()
HAS_NVCC = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")

from harness import problems, registry  # noqa: E402
from harness.errors import Unsupported  # noqa: E402

cuda_layer = importlib.import_module("backends.cuda_layer")
cupy_layer = importlib.import_module("backends.cupy_layer")

CUDA_IDS = ["cuda:vector_add", "cuda:softmax", "cuda:softmax_warp", "cuda:softmax_block", "cuda:softmax_online",
            "cuda:softmax_rows", "cuda:softmax_smem", "cuda:softmax_split"]
CUPY_IDS = [i.replace("cuda:", "cupy:") for i in CUDA_IDS]


def _impl(impl_id):
    problem = "vector_add" if impl_id.endswith("vector_add") else "softmax"
    return registry.get(problem, impl_id), problems.get(problem)


needs_build = pytest.mark.skipif(not HAS_NVCC, reason="no nvcc here: the module is not built")


# -- build products ------------------------------------------------------------------------------
@needs_build
def test_build_marker_and_module():
    build = importlib.import_module("kl_cuda_build")
    assert build.BUILT is True, build.REASON
    for flag in ("arch=compute_90a,code=sm_90a", "code=[sm_80,compute_80]"):
        assert flag in build.ARCH_FLAGS
    kl = importlib.import_module("kl_cuda")
    for fn in ("vector_add", "vector_add_plan", "softmax", "softmax_plan"):
        assert callable(getattr(kl, fn))
    assert kl.DTYPES == {"float32": 0, "float16": 1, "bfloat16": 2}
    assert kl.HAS_GEMM == build.HAS_GEMM
    assert cuda_layer.available() is None


@needs_build
def test_ptxas_log_has_every_instance_for_sm90a():
    facts = cuda_layer.ptxas_facts()
    for t in ("float", "__half", "__nv_bfloat16"):
        v = 4 if t == "float" else 8
        for k in (f"vector_add_kernel<{t}, {v}, 4>", f"vector_add_kernel<{t}, 1, 4>",
                  f"softmax_warp_kernel<{t}, {v}, 1>", f"softmax_block_kernel<{t}, {v}, {32 // v}>",
                  f"softmax_online_kernel<{t}, {v}, 8>", f"softmax_online_kernel<{t}, 1, 1>"):
            assert k in facts, k
            assert facts[k]["registers"] and facts[k]["registers"] > 0
            assert facts[k]["spills"] == 0, (k, facts[k])
    assert facts["softmax_block_kernel<float, 4, 8>"]["smem"] >= 256  # the two 32-float reduction arrays


@needs_build
def test_ptxas_new_kernels_every_instance_no_spills():
    """softmax_rows_kernel / softmax_smem_kernel: every instance the plans can pick is in the sm_90a
    facts, with 0 spill bytes; the smem kernel keeps few registers (3 CTAs x 512 threads per SM)."""
    facts = cuda_layer.ptxas_facts()
    want = [k for k in cupy_layer.instances("softmax.cu") if k.startswith(("softmax_rows", "softmax_smem"))]
    assert len(want) == 3 * 2 * (7 + 5)
    for k in want:
        assert k in facts, k
        assert facts[k]["registers"] and facts[k]["spills"] == 0, (k, facts[k])
        if k.startswith("softmax_smem"):
            assert facts[k]["registers"] <= 40, (k, facts[k])  # 65536 / (3 * 512) = 42
        else:  # __launch_bounds__(256, rows_min_blocks): 3 CTAs -> <= 80 registers, 2 -> <= 128
            t, v, _, g = k[len("softmax_rows_kernel<"):-1].split(", ")
            es = 4 if t == "float" else 2
            cap = 80 if cupy_layer.rows_min_blocks(es, int(v), int(g)) == 3 else 128
            assert facts[k]["registers"] <= cap, (k, facts[k])


@needs_build
@pytest.mark.parametrize("impl_id", CUDA_IDS)
def test_compile_only_reports_ptxas_facts(impl_id):
    impl, prob = _impl(impl_id)
    for case in prob.cases("bench")[:3] + prob.cases("bench")[-2:]:
        if impl.supports(case):
            with pytest.raises(Unsupported):
                impl.compile_only_fn(case)
            continue
        f = impl.compile_only_fn(case)
        assert f["registers"] > 0 and f["spills"] == 0 and f["smem"] >= 0
        assert f["arch"] == "sm_90a" and f["kernel"] in f["kernels"]
        assert f["config"]["kernel"] == f["kernel"]


def test_no_cuda_build_still_configures(tmp_path):
    """-DKL_NO_CUDA=ON (and equally a machine without nvcc) installs only the marker with the reason."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not on PATH")
    import pybind11

    r = subprocess.run([cmake, "-S", str(ROOT), "-B", str(tmp_path / "b"), "-DKL_NO_CUDA=ON",
                        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "b" / "kl_cuda_build.py").read_text()
    ns: dict = {}
    exec(text, ns)
    assert ns["BUILT"] is False and ns["REASON"] == "not built: disabled by KL_NO_CUDA"


def test_no_compiler_reason(tmp_path):
    """With no nvcc on PATH and no CUDACXX, CMake's check_language(CUDA) finds none: the build says so."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not on PATH")
    import pybind11

    env = {k: v for k, v in os.environ.items() if k not in ("CUDACXX", "CUDA_HOME", "CUDA_PATH", "CUDAToolkit_ROOT")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not os.path.exists(os.path.join(p, "nvcc")))
    r = subprocess.run([cmake, "-S", str(ROOT), "-B", str(tmp_path / "b"), "-DCMAKE_CUDA_COMPILER=",
                        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    ns: dict = {}
    exec((tmp_path / "b" / "kl_cuda_build.py").read_text(), ns)
    if ns["BUILT"]:
        pytest.skip(f"CMake still found a CUDA compiler outside PATH ({ns['NVCC']})")
    assert ns["REASON"] == "not built: no CUDA compiler"


# -- availability and support reasons -------------------------------------------------------------
def test_cupy_available_gives_a_reason_without_gpu():
    why = cupy_layer.available()
    if HAS_GPU:
        return
    assert isinstance(why, str) and why
    assert any(w in why for w in ("cupy", "NVRTC", "GPU"))


def test_supports_reasons():
    sm = problems.get("softmax")
    big = sm.case(M=2, N=4096)
    huge = sm.case(M=2, N=65536)
    warp = registry.get("softmax", "cuda:softmax_warp")
    block = registry.get("softmax", "cuda:softmax_block")
    assert "1024" in warp.supports(big)
    assert warp.supports(sm.case(M=2, N=1024)) is None
    assert "32768" in block.supports(huge)
    for impl_id in ("cuda:softmax", "cuda:softmax_online", "cupy:softmax", "cupy:softmax_online"):
        assert registry.get("softmax", impl_id).supports(huge) is None
    assert "1024" in registry.get("softmax", "cupy:softmax_warp").supports(big)
    rows = registry.get("softmax", "cuda:softmax_rows")
    assert rows.supports(sm.case(M=2, N=8192)) is None
    assert "8192" in rows.supports(sm.case(M=2, N=8193))
    smem = registry.get("softmax", "cuda:softmax_smem")
    for n in (1, 777, 32768, 262144, 262147, 900_000):
        assert smem.supports(sm.case(M=2, N=n)) is None, n
    assert smem.supports(sm.case(M=2, N=1_800_000, dtype="float16")) is None  # 16 x 225 KB of fp16
    why = smem.supports(sm.case(M=2, N=1_000_000))  # 4 MB of fp32 > 16 CTAs x 226 KiB
    assert why and "shared memory" in why
    assert registry.get("softmax", "cupy:softmax_smem").supports(sm.case(M=2, N=1_000_000)) == why
    split = registry.get("softmax", "cuda:softmax_split")
    for n in (32769, 131072, 262144, 1_000_000):
        assert split.supports(sm.case(M=2, N=n)) is None, n
    for n in (1, 4096, 32768):
        why = split.supports(sm.case(M=2, N=n))
        assert why and "32768" in why and f"N = {n}" in why, (n, why)
    cupy_split = registry.get("softmax", "cupy:softmax_split")
    assert cupy_split.supports(sm.case(M=2, N=262144)) is None
    assert cupy_split.supports(sm.case(M=2, N=4096)) == split.supports(sm.case(M=2, N=4096))


def test_every_row_registered_with_sources_and_cuda_device():
    ids = {i.id for i in registry.select(layer="cuda")} | {i.id for i in registry.select(layer="cupy")}
    for i in CUDA_IDS + CUPY_IDS:
        assert i in ids
    for i in CUDA_IDS + CUPY_IDS:
        impl, _ = _impl(i)
        assert impl.devices == ("cuda",)
        assert any(str(s.path).endswith(".cu") for s in impl.sources)


# -- input validation -----------------------------------------------------------------------------
def test_adapter_validation_names_the_argument():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="x"):
        cuda_layer.softmax([1, 2, 3])
    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        cuda_layer.softmax(x)
    with pytest.raises(ValueError, match="path"):
        cuda_layer.softmax(x, path="fastest")
    with pytest.raises(TypeError, match="x: dtype"):
        cuda_layer.check_vector_add(torch.zeros(3, dtype=torch.int32), torch.zeros(3), None)
    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        cuda_layer.vector_add(torch.zeros(3), torch.zeros(3))


@needs_build
def test_binding_validation_before_any_cuda_call():
    kl = importlib.import_module("kl_cuda")
    with pytest.raises(ValueError, match="n: must be >= 0"):
        kl.vector_add(16, 16, 16, -1, 0, 0, 0)
    with pytest.raises(ValueError, match="dtype"):
        kl.vector_add(16, 16, 16, 8, 7, 0, 0)
    with pytest.raises(ValueError, match="x: address not aligned"):
        kl.vector_add(18, 16, 16, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="out: null"):
        kl.vector_add(16, 16, 0, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="path"):
        kl.softmax("fastest", 16, 16, 2, 8, 8, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="sx: row stride"):
        kl.softmax("auto", 16, 16, 2, 8, 4, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="M: must be >= 1"):
        kl.softmax("auto", 16, 16, 0, 8, 8, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="cluster"):
        kl.softmax("online", 16, 16, 2, 8, 8, 8, 0, 0, 0, 0, 0, 3)
    with pytest.raises(ValueError, match="cluster: must be"):
        kl.softmax("smem", 16, 16, 2, 8, 8, 8, 0, 0, 0, 0, 0, 32)
    with pytest.raises(ValueError, match="path"):
        kl.softmax_plan("rowz", 16, 16, 2, 8, 8, 8, 0, 0)
    if not HAS_GPU:  # valid arguments reach CUDA, whose error comes back as RuntimeError
        with pytest.raises(RuntimeError, match="CUDA error"):
            kl.softmax("auto", 16, 16, 2, 8, 8, 8, 0, 0, 0)


# -- host dispatcher mirror, grid descriptions ---------------------------------------------------
def test_python_plan_mirrors_dispatch_rules():
    sm = problems.get("softmax")
    p = cuda_layer.case_plan("auto", sm.case(M=4096, N=1024))
    assert p["kernel"] == "softmax_warp_kernel<float, 4, 8>" and p["grid"] == 1024
    p = cuda_layer.case_plan("auto", sm.case(M=4096, N=16384))
    assert p["path"] == "block" and p["threads"] * p["chunks"] * p["vec"] >= 16384
    p = cuda_layer.case_plan("auto", sm.case(M=8192, N=32768))
    assert p["kernel"] == "softmax_block_kernel<float, 4, 8>" and p["threads"] == 1024
    p = cuda_layer.case_plan("auto", sm.case(M=8192, N=262144))
    # 16 chunks of 16384 columns a row; 132 SMs x 2 blocks rounded down to a multiple of 16
    assert p["kernel"] == "softmax_split_kernel<float, 4, 512>" and p["parts"] == 16 and p["grid"] == 256
    p = cuda_layer.case_plan("online", sm.case(M=8192, N=262144))
    assert p["kernel"] == "softmax_online_kernel<float, 4, 8>" and p["grid"] == 8192 * 8 and p["seg"] == 32768
    p = cuda_layer.case_plan("auto", sm.case(M=300, N=777, layout="strided_odd"))
    assert p["vec"] == 1  # rows not 16-byte aligned: scalar accesses
    p = cuda_layer.case_plan("online", sm.case(M=8192, N=262144), cc_major=8)
    assert p["cluster"] == 1  # no clusters before sm_90
    # rows: G threads per row (32 elements each), 256 / G rows per CTA step, 3 or 2 CTAs per SM (132 SMs)
    p = cuda_layer.case_plan("rows", sm.case(M=4096, N=1024))
    assert p["kernel"] == "softmax_rows_kernel<float, 4, 8, 32>" and p["rows_per_block"] == 8
    assert p["blocks_per_sm"] == 3 and p["grid"] == 256  # 512 CTA-steps, <= 396 resident: 2 steps each
    p = cuda_layer.case_plan("rows", sm.case(M=4096, N=4096))
    assert p["kernel"] == "softmax_rows_kernel<float, 4, 8, 128>" and p["rows_per_block"] == 2
    assert p["blocks_per_sm"] == 2 and p["grid"] == 256  # 2048 CTA-steps, <= 264 resident: 8 steps each
    p = cuda_layer.case_plan("rows", sm.case(M=4096, N=4096, dtype="float16"))
    assert p["blocks_per_sm"] == 3 and p["grid"] == 342  # 2048 CTA-steps, <= 396 resident: 6 steps each
    p = cuda_layer.case_plan("rows", sm.case(M=4096, N=2048, dtype="bfloat16"), blocks_per_sm=1)
    assert p["kernel"] == "softmax_rows_kernel<__nv_bfloat16, 8, 4, 64>" and p["grid"] == 128
    p = cuda_layer.case_plan("rows", sm.case(M=3, N=17))
    assert p["kernel"] == "softmax_rows_kernel<float, 1, 32, 4>" and p["grid"] == 1
    # smem: the smallest cluster whose slice is <= 64 KiB; 16 (non-portable) at 1 MB rows
    p = cuda_layer.case_plan("smem", sm.case(M=8192, N=262144))
    assert p["kernel"] == "softmax_smem_kernel<float, 4, 16>" and p["smem"] == 65536 and p["grid"] == 8192 * 16
    p = cuda_layer.case_plan("smem", sm.case(M=8192, N=131072))
    assert p["kernel"] == "softmax_smem_kernel<float, 4, 8>" and p["seg"] == 16384
    p = cuda_layer.case_plan("smem", sm.case(M=8192, N=262144), cluster=8)
    assert p["smem"] == 131072 and p["grid"] == 8192 * 8
    p = cuda_layer.case_plan("smem", sm.case(M=5, N=70000, layout="strided_odd"))
    assert p["vec"] == 1 and p["cluster"] == 8 and p["seg"] == 8750 and p["smem"] == 35008
    p = cuda_layer.case_plan("smem", sm.case(M=3, N=262147, layout="strided_odd"))  # just over 64 KiB: C = 16
    assert p["vec"] == 1 and p["cluster"] == 16 and p["smem"] == 65552
    p = cuda_layer.case_plan("smem", sm.case(M=2, N=900_000))  # beyond 16 x 64 KiB: bigger slices
    assert p["cluster"] == 16 and 65536 < p["smem"] <= 232448 - 1024
    p = cuda_layer.case_plan("smem", sm.case(M=2, N=30000), cc_major=8)  # no clusters before sm_90
    assert p["cluster"] == 1 and p["smem"] == 120000
    with pytest.raises(ValueError, match="does not fit"):
        cuda_layer.case_plan("smem", sm.case(M=2, N=100_000), cc_major=8)
    with pytest.raises(ValueError, match="cluster: the online path"):
        cuda_layer.case_plan("online", sm.case(M=2, N=100_000), cluster=16)
    # split: C = ceil(N / 16384) blocks per row, grid = 132 SMs x 2 rounded down to a multiple of C
    p = cuda_layer.case_plan("split", sm.case(M=8192, N=262144))
    assert p["kernel"] == "softmax_split_kernel<float, 4, 512>" and p["parts"] == 16 and p["grid"] == 256
    assert p["threads"] == 512 and p["chunks"] == 8 and p["seg"] == 16384 and p["blocks_per_sm"] == 2
    p = cuda_layer.case_plan("split", sm.case(M=8192, N=131072))
    assert p["parts"] == 8 and p["grid"] == 264 and p["grid"] % 8 == 0
    p = cuda_layer.case_plan("split", sm.case(M=8192, N=131072, dtype="bfloat16"))
    assert p["kernel"] == "softmax_split_kernel<__nv_bfloat16, 8, 512>" and p["chunks"] == 4 and p["parts"] == 8
    p = cuda_layer.case_plan("split", sm.case(M=5, N=70000, layout="strided_odd"))
    assert p["vec"] == 1 and p["chunks"] == 32 and p["parts"] == 5 and p["grid"] == 25  # M * C < capacity
    p = cuda_layer.case_plan("split", sm.case(M=8192, N=100_000))  # C = 7: 264 -> 259 blocks
    assert p["parts"] == 7 and p["grid"] == 259
    p = cuda_layer.case_plan("split", sm.case(M=8192, N=262144), blocks_per_sm=3)
    assert p["grid"] == 384 and p["blocks_per_sm"] == 3
    for n in (1, 1024, 32768):
        with pytest.raises(ValueError, match=f"split path takes rows longer than 32768.*N = {n}"):
            cuda_layer.case_plan("split", sm.case(M=4, N=n))
    with pytest.raises(ValueError, match="co-resident blocks per row"):
        cuda_layer.case_plan("split", sm.case(M=1, N=16384 * 265))  # C = 265 > 264 resident blocks
    p = cuda_layer.case_plan("split", sm.case(M=8192, N=262144), threads=256)  # 256 x 64 values
    assert p["kernel"] == "softmax_split_kernel<float, 4, 256>" and p["chunks"] == 16 and p["grid"] == 256
    with pytest.raises(ValueError, match="threads: the split path"):
        cuda_layer.case_plan("split", sm.case(M=4, N=100_000), threads=128)
    with pytest.raises(ValueError, match="ept: the split path holds 16384 / threads = 64"):
        cuda_layer.case_plan("split", sm.case(M=4, N=100_000), threads=256, ept=32)
    va = problems.get("vector_add")
    assert cuda_layer._va_plan(va.case(N=98432, misalign=1))["vec"] == 1
    assert cuda_layer._va_plan(va.case(N=98432))["vec"] == 4


def test_route_table_is_one_table_in_softmax_cu(monkeypatch):
    """The dispatcher's table lives in softmax.cu (KL_SOFTMAX_ROUTES); Python parses it from there, and
    KL_CUDA_SOFTMAX_ROUTE overrides it without a rebuild."""
    monkeypatch.delenv("KL_CUDA_SOFTMAX_ROUTE", raising=False)
    text = (ROOT / "cuda_src" / "softmax.cu").read_text()
    assert text.count("// KL_SOFTMAX_ROUTES_BEGIN") == 1 and text.count("// KL_SOFTMAX_ROUTES_END") == 1
    routes = cuda_layer.softmax_routes()
    # the H200-measured choices
    assert routes == [(1024, "warp"), (32768, "block"), (0, "split"), (0, "online")]
    assert cuda_layer.auto_kernels() == ("softmax_warp_kernel", "softmax_block_kernel",
                                         "softmax_split_kernel", "softmax_online_kernel")
    sm = problems.get("softmax")
    assert cuda_layer.case_plan("auto", sm.case(M=4096, N=1024))["path"] == "warp"
    assert cuda_layer.case_plan("auto", sm.case(M=8192, N=32768))["path"] == "block"
    assert cuda_layer.case_plan("auto", sm.case(M=8192, N=32769))["path"] == "split"
    assert cuda_layer.case_plan("auto", sm.case(M=8192, N=131072))["path"] == "split"
    assert cuda_layer.case_plan("auto", sm.case(M=8192, N=262144))["kernel"] == "softmax_split_kernel<float, 4, 512>"
    assert cuda_layer.case_plan("auto", sm.case(M=2, N=1_000_000))["path"] == "split"
    # more chunks per row than the 132 x 2 co-resident blocks: split declines, online takes it
    assert cuda_layer.case_plan("auto", sm.case(M=2, N=5_000_000))["path"] == "online"
    monkeypatch.setenv("KL_CUDA_SOFTMAX_ROUTE", "4096:rows,32768:block,0:smem")
    assert cuda_layer.case_plan("auto", sm.case(M=4096, N=1024))["path"] == "rows"
    assert cuda_layer.case_plan("auto", sm.case(M=4096, N=8192))["path"] == "block"
    assert cuda_layer.case_plan("auto", sm.case(M=8192, N=262144))["kernel"] == "softmax_smem_kernel<float, 4, 16>"
    # a path that cannot take the case falls through to the next row that can
    monkeypatch.setenv("KL_CUDA_SOFTMAX_ROUTE", "0:smem,0:online")
    assert cuda_layer.case_plan("auto", sm.case(M=2, N=1_000_000))["path"] == "online"
    monkeypatch.setenv("KL_CUDA_SOFTMAX_ROUTE", "0:rows")
    with pytest.raises(ValueError, match="8192"):
        cuda_layer.case_plan("auto", sm.case(M=2, N=10_000))
    monkeypatch.setenv("KL_CUDA_SOFTMAX_ROUTE", "32768:block,0:split")  # split is a valid route path
    assert cuda_layer.case_plan("auto", sm.case(M=8192, N=262144))["kernel"] == "softmax_split_kernel<float, 4, 512>"
    assert cuda_layer.case_plan("auto", sm.case(M=8192, N=4096))["path"] == "block"
    monkeypatch.setenv("KL_CUDA_SOFTMAX_ROUTE", "0:split,0:online")  # split declines short rows: falls through
    assert cuda_layer.case_plan("auto", sm.case(M=8, N=2048))["path"] == "online"
    monkeypatch.setenv("KL_CUDA_SOFTMAX_ROUTE", "1024:fast")
    with pytest.raises(ValueError, match="KL_CUDA_SOFTMAX_ROUTE"):
        cuda_layer.case_plan("auto", sm.case(M=2, N=100))
    if HAS_NVCC:  # the C++ dispatcher reads the same variable (before any CUDA call)
        kl = importlib.import_module("kl_cuda")
        with pytest.raises(ValueError, match="KL_CUDA_SOFTMAX_ROUTE"):
            kl.softmax_plan("auto", 16, 16, 2, 8, 8, 8, 0, 0)


@pytest.mark.parametrize("impl_id", CUDA_IDS + CUPY_IDS)
def test_grid_descriptions(impl_id):
    from harness.grid import describe, render

    impl, prob = _impl(impl_id)
    for case in prob.cases("verify")[:6]:
        if impl.supports(case):
            continue
        d = describe(impl, case)
        assert d["grid"][0] >= 1 and d["programs"]
        assert d["total"]["programs"] == d["grid"][0]
        assert "program(s)" in render(d)  # what `python -m harness grid` prints


@pytest.mark.slow
@pytest.mark.skipif(cupy_layer._include_dirs_nogpu() == [str(cupy_layer.CUDA_SRC)], reason="no CUDA headers")
def test_cupy_compile_only_through_nvrtc():
    impl, prob = _impl("cupy:softmax_warp")
    try:
        f = impl.compile_only_fn(prob.case(M=4096, N=1024))
    except Unsupported as e:
        pytest.skip(str(e))
    assert f["registers"] > 0 and f["facts_from"].startswith("NVRTC")


@pytest.mark.slow
@pytest.mark.skipif(cupy_layer._include_dirs_nogpu() == [str(cupy_layer.CUDA_SRC)], reason="no CUDA headers")
@pytest.mark.parametrize("impl_id,case", [("cupy:softmax_smem", dict(M=8192, N=262144)),
                                          ("cupy:softmax_smem", dict(M=5, N=70000, layout="strided_odd")),
                                          ("cupy:softmax_rows", dict(M=4096, N=1024)),
                                          ("cupy:softmax_split", dict(M=8192, N=262144)),
                                          ("cupy:softmax_split", dict(M=3, N=262147, layout="strided_odd")),
                                          ("cupy:softmax_rows", dict(M=4096, N=4096, dtype="bfloat16"))])
def test_cupy_new_kernels_compile_under_nvrtc(impl_id, case):
    """The same source through NVRTC (no GPU needed): the instance compiles, 0 spills."""
    impl, prob = _impl(impl_id)
    try:
        f = impl.compile_only_fn(prob.case(**case))
    except Unsupported as e:
        pytest.skip(str(e))
    assert f["registers"] > 0 and f["spills"] == 0 and f["facts_from"].startswith("NVRTC")
    assert f["config"]["kernel"] in f.get("kernels", {f["config"]["kernel"]: 0})


# -- GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("impl_id", CUDA_IDS + CUPY_IDS)
def test_verify_suite_on_gpu(impl_id):
    from harness.verify import verify_case

    impl, prob = _impl(impl_id)
    if impl.available():
        pytest.skip(impl.available())
    failures = []
    for case in prob.cases("verify"):
        if impl.supports(case):
            continue
        c = verify_case(impl, prob, case, "cuda")
        if not c.ok:
            failures.append(f"{case.id}: {c.reason}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_cpp_plan_equals_python_plan_on_gpu():
    kl = importlib.import_module("kl_cuda")
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for M, N, pad in ((4096, 1024, 0), (3, 4097, 0), (37, 1000, 64), (300, 777, 3), (8192, 262144, 0),
                          (4, 32768, 0), (2, 131072, 0), (1, 1, 0)):
            x = torch.empty(M, N + pad, dtype=dt, device="cuda")[:, :N]
            out = torch.empty(M, N, dtype=dt, device="cuda")
            es = x.element_size()
            aligned = (M == 1) or (((N + pad) * es) % 16 == 0 and (N * es) % 16 == 0)
            props = torch.cuda.get_device_properties(0)
            for path in ("auto", "warp", "block", "online", "rows", "smem", "split"):
                if (path == "warp" and N > 1024) or (path == "block" and N > 32768) or (path == "rows" and N > 8192) \
                        or (path == "split" and N <= 32768):
                    continue
                c = kl.softmax_plan(path, x.data_ptr(), out.data_ptr(), M, N, x.stride(0), N, cuda_layer.DTYPE_CODE[dt], 0)
                p = cupy_layer.softmax_plan(path, M, N, aligned, cupy_layer._TYPE_OF[dt], es, props.major,
                                            sm_count=props.multi_processor_count,
                                            smem_optin=getattr(props, "shared_memory_per_block_optin", 0) or 232448)
                for k in ("path", "vec", "chunks", "threads", "cluster", "seg", "grid", "kernel", "groups",
                          "blocks_per_sm", "smem", "parts"):
                    assert c[k] == p[k], (dt, M, N, path, k, c[k], p[k])


@pytest.mark.gpu
def test_route_override_on_gpu(monkeypatch):
    """KL_CUDA_SOFTMAX_ROUTE flips the dispatcher of cuda:softmax / cupy:softmax without a rebuild."""
    kl = importlib.import_module("kl_cuda")
    x = torch.randn(64, 1024, device="cuda")
    y = torch.empty_like(x)
    a = (x.data_ptr(), y.data_ptr(), 64, 1024, 1024, 1024, 0, 0)
    monkeypatch.setenv("KL_CUDA_SOFTMAX_ROUTE", "2048:rows,0:smem")
    assert kl.softmax_plan("auto", *a)["path"] == "rows"
    assert cuda_layer.softmax(x).sub(torch.softmax(x, -1)).abs().max() < 1e-6
    monkeypatch.setenv("KL_CUDA_SOFTMAX_ROUTE", "0:smem")
    assert kl.softmax_plan("auto", *a)["path"] == "smem"
    monkeypatch.delenv("KL_CUDA_SOFTMAX_ROUTE")
    assert kl.softmax_plan("auto", *a)["path"] == "warp"


@pytest.mark.gpu
def test_gpu_validation_and_overrides():
    x = torch.randn(64, 3000, device="cuda")
    ref = torch.softmax(x.double(), -1)
    for ept in (8, 16, 32):
        y = cuda_layer.softmax(x, path="block", ept=ept)
        assert torch.allclose(y.double(), ref, rtol=1e-4, atol=1e-7)
    for c in (1, 2, 4, 8):
        y = cuda_layer.softmax(x, path="online", cluster=c)
        assert torch.allclose(y.double(), ref, rtol=1e-4, atol=1e-7)
    for c in (1, 2, 4, 8, 16):
        for th in (256, 512):
            y = cuda_layer.softmax(x, path="smem", cluster=c, threads=th)
            assert torch.allclose(y.double(), ref, rtol=1e-4, atol=1e-7), (c, th)
    for bps in (1, 2, 4):
        y = cuda_layer.softmax(x, path="rows", blocks_per_sm=bps)
        assert torch.allclose(y.double(), ref, rtol=1e-4, atol=1e-7), bps
    # the long-row shapes of the bench, a few rows, smem path with C = 8 and 16
    for n, c in ((262144, 16), (262144, 8), (131072, 8), (262147, 16)):
        xl = torch.randn(3, n, device="cuda")
        y = cuda_layer.softmax(xl, path="smem", cluster=c)
        assert torch.allclose(y.double(), torch.softmax(xl.double(), -1), rtol=1e-4, atol=1e-9), (n, c)
    with pytest.raises(ValueError, match="out"):
        cuda_layer.softmax(x, out=torch.empty(64, 3000, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="x: columns"):
        cuda_layer.softmax(x.t())
    with pytest.raises(ValueError, match="N: the warp-per-row path"):
        cuda_layer.softmax(x, path="warp")
    with pytest.raises(ValueError, match="N: the rows path"):
        cuda_layer.softmax(torch.randn(2, 9000, device="cuda"), path="rows")
    a = torch.randn(1000, device="cuda")
    for grid in (1, 7, 1000):
        assert torch.equal(cuda_layer.vector_add(a, a, grid=grid), a + a)


@needs_build
def test_split_compile_facts_and_poll_loop():
    """softmax_split_kernel: every instance in the sm_90a facts, 0 spills, registers that let 2 blocks
    of 512 threads reside per SM (65536 / 1024 = 64), and the poll loop survived compilation (the
    slot loads are ld.relaxed.gpu in the PTX, strong GPU-scope LDG in the SASS)."""
    facts = cuda_layer.ptxas_facts()
    for t, v in (("float", 4), ("__half", 8), ("__nv_bfloat16", 8)):
        for vec in (1, v):
            for nt in (256, 512):
                name = f"softmax_split_kernel<{t}, {vec}, {nt}>"
                assert name in facts, name
                assert facts[name]["spills"] == 0 and 0 < facts[name]["registers"] <= 65536 // (2 * nt), (name, facts[name])
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90a", "-ptx", "-o", "-", "-I", str(ROOT / "cuda_src"),
                        str(ROOT / "cuda_src" / "softmax.cu")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    ptx = r.stdout
    start = ptx.index(".entry _ZN2kl20softmax_split_kernelIfLi4ELi512EEE")
    body = ptx[start:ptx.index("\n}", start)]
    assert "ld.relaxed.gpu.global.b64" in body and "st.relaxed.gpu.global.b64" in body
    assert "vote.sync.all.pred" in body  # the warp's all-slots-present test inside the loop


@pytest.mark.gpu
def test_split_path_on_gpu():
    """split: ragged last chunk, strided (scalar) rows, -inf chunks, all--inf rows, fp16/bf16, several
    rounds per block (M * C > grid), and the bounded spin (max_spin = 0: every block gives up at once
    and writes NaN, so a wait that cannot finish shows as NaN, not a hang)."""
    def check(x, **kw):
        y = cuda_layer.softmax(x, path="split", **kw)
        if not kw:  # the cupy row: the same kernel, cooperative launch through the driver API
            yc = cupy_layer.softmax(x, path="split")
            # the same source through NVRTC and through nvcc: not bit-identical code (the PTX of the two
            # builds differs), so up to about one unit in the last place of the output type apart
            ulp = {torch.float32: 1e-5, torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}[x.dtype]
            close = torch.isclose(yc.double(), y.double(), rtol=ulp, atol=1e-12, equal_nan=True)
            bad = (~close).nonzero()[:5].tolist()
            assert close.all(), (f"cupy vs cuda split {tuple(x.shape)} {x.dtype}: {(~close).sum().item()} differ, "
                                 f"first {bad}: cupy {[yc[i, j].item() for i, j in bad]} cuda "
                                 f"{[y[i, j].item() for i, j in bad]}; NaN cupy {torch.isnan(yc).sum().item()} "
                                 f"cuda {torch.isnan(y).sum().item()}")
        ref = torch.softmax(x.double(), -1)
        tol = dict(rtol=1e-4, atol=1e-9) if x.dtype == torch.float32 else dict(rtol=2e-2, atol=1e-5)
        assert torch.allclose(y.double(), ref, equal_nan=True, **tol), (x.shape, x.dtype, kw)
        return y

    for n in (32769, 100_000, 131072, 262144, 262147):
        check(torch.randn(7, n, device="cuda"))
    check(torch.randn(600, 131072, device="cuda"))  # 4800 units > 264 blocks: many rounds
    check(torch.randn(5, 70000 + 3, device="cuda")[:, :70000])  # rows not 16-byte aligned: scalar path
    for dt in (torch.float16, torch.bfloat16):
        check(torch.randn(9, 200_000, device="cuda").to(dt))
    x = torch.randn(6, 100_000, device="cuda") * 30
    x[0, :16384] = float("-inf")  # a whole chunk of -inf: contributes 0
    x[1, 50_000:] = float("-inf")  # the tail chunks all -inf
    x[2] = float("-inf")  # a row of only -inf: NaN, as torch
    x[3, :99_999] = float("-inf")  # one finite value
    x[4] -= 500  # very negative finite values
    y = check(x)
    assert torch.isnan(y[2]).all() and not torch.isnan(y[[0, 1, 3, 4, 5]]).any()
    y = cuda_layer.softmax(torch.randn(8, 100_000, device="cuda"), path="split", max_spin=0)
    assert torch.isnan(y).all()
    y = cupy_layer.softmax(torch.randn(8, 100_000, device="cuda"), path="split", max_spin=0)
    assert torch.isnan(y).all()
    check(torch.randn(8, 100_000, device="cuda"), blocks_per_sm=1)
    with pytest.raises(ValueError, match="cannot be co-resident"):
        cuda_layer.softmax(torch.randn(1000, 100_000, device="cuda"), path="split", blocks_per_sm=32)
    with pytest.raises(ValueError, match="cannot be co-resident"):
        cupy_layer.softmax(torch.randn(1000, 100_000, device="cuda"), path="split", blocks_per_sm=32)
