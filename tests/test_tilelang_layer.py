"""TileLang layer: ids and roles, the planner's rules, compile-only for sm_90a (no GPU needed: TileLang
compiles with nvcc) with ptxas facts, the shared apache-tvm-ffi pin with the CuTe DSL, input
validation, and on a GPU the verify suite."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
from pathlib import Path

import pytest
import torch

from harness import problems, registry

ROOT = Path(__file__).resolve().parent.parent
HAVE_TL = importlib.util.find_spec("tilelang") is not None
HAVE_NVCC = shutil.which("nvcc") is not None
HAVE_GPU = torch.cuda.is_available()
needs_tl = pytest.mark.skipif(not (HAVE_TL and HAVE_NVCC), reason="tilelang or nvcc not installed")
PROBLEMS = ("vector_add", "softmax", "gemm_epilogue")
IDS = {
    "vector_add": ["vector_add", "vector_add_simple", "vector_add_tiled"],
    "softmax": ["softmax", "softmax_simple", "softmax_rows", "softmax_online", "softmax_split",
                "softmax_smem"],
    "gemm_epilogue": ["gemm_epilogue", "gemm_epilogue_simple", "gemm_epilogue_tma", "gemm_epilogue_tiled",
                      "gemm_epilogue_splitk"],
}


def _impls():
    registry.load_backends()
    return {i.id: i for i in registry.select(layer="tilelang")}


def test_registered_ids_and_roles():
    registry.load_backends()
    got = {i.key: i.role for i in registry.select(layer="tilelang")}
    want = {f"{p}/tilelang:{n}" for p, names in IDS.items() for n in names}
    assert want == set(got), (registry.BACKEND_ERRORS, set(got) ^ want)
    for p in PROBLEMS:
        assert got[f"{p}/tilelang:{p}"] == "default"
        assert got[f"{p}/tilelang:{p}_simple"] == "simple"


def test_unavailable_reason_when_package_missing(monkeypatch):
    import tilelang_src

    monkeypatch.setattr(tilelang_src, "_REASON", [])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tilelang" else real(name, *a))
    why = tilelang_src.unavailable()
    assert why and "tilelang is not installed" in why
    monkeypatch.setattr(tilelang_src, "_REASON", [])


def test_tvm_ffi_pin_shared_with_cute():
    """pyproject pins one apache-tvm-ffi for both extras; where both packages are installed, both
    import with the installed tvm-ffi, which is the pinned one."""
    text = (ROOT / "pyproject.toml").read_text()
    pins = {m.group(1): m.group(2) for m in re.finditer(r'^(cute|tilelang) = \[(.*)\]$', text, re.M)}
    vers = {re.search(r'apache-tvm-ffi==([\w.]+)', pins[k]).group(1) for k in ("cute", "tilelang")}
    assert len(vers) == 1, pins
    if not HAVE_TL or importlib.util.find_spec("cutlass") is None:
        pytest.skip("tilelang or nvidia-cutlass-dsl not installed")
    assert importlib.metadata.version("apache-tvm-ffi") == vers.pop()
    import cutlass.cute  # noqa: F401
    import tilelang
    import tilelang.language  # noqa: F401
    assert tilelang.__version__.startswith("0.1.")


def test_plans():
    from tilelang_src import dispatch

    assert dispatch.plan_vector_add(1000, 2, aligned=False)["kernel"] == "simple"
    assert dispatch.plan_vector_add(1000, 2, aligned=True)["vec"] == 8
    assert dispatch.plan_vector_add(1000, 4, aligned=True)["vec"] == 4
    p = dispatch.plan_softmax(32768, 512, 2)           # short rows: a warp per CTA, 2 rows
    assert p["kernel"] == "rows" and p["cols"] == 512 and p["threads"] == 32 and p["rows"] == 2
    p = dispatch.plan_softmax(8192, 2048, 2)
    assert p["rows"] == 1 and p["threads"] == 2048 // 16
    assert dispatch.plan_softmax(4096, 16384, 4)["kernel"] == "rows"
    assert dispatch.plan_softmax(4096, 16385, 4)["kernel"] == "smem"
    p = dispatch.plan_softmax(4096, 50257, 4)            # 201 KB of fp32 fits a CTA's shared memory
    assert p["kernel"] == "smem" and p["cols"] >= 50257 and p["cols"] * 4 <= 227 * 1024
    assert dispatch.plan_softmax(4096, 128256, 2)["kernel"] == "online"   # 256 KB does not
    p = dispatch.plan_softmax(3, 262_147, 4)          # few long rows: split, the GPU still filled
    assert p["kernel"] == "split" and 3 * p["chunks"] >= dispatch.SMS
    assert dispatch.plan_softmax(1, 98_432, 4)["chunks"] == -(-98_432 // p["tile"])  # a chunk per tile at most
    with pytest.raises(ValueError, match="N:"):
        dispatch.plan_softmax(4, 100_000, 2, kernel="rows")
    assert dispatch.plan_gemm(4096, 4096, 4096, 2, True)["kernel"] == "tma"
    assert dispatch.plan_gemm(4096, 4096, 4096, 2, True)["bn"] == 256          # wide tiles fill the GPU
    assert dispatch.plan_gemm(256, 6144, 4096, 2, True)["bn"] == 128           # 48 wide tiles would not
    assert dispatch.plan_gemm(16, 28672, 4096, 2, True)["bn"] == 256
    assert dispatch.plan_gemm(2050, 1001, 136, 2, False)["kernel"] == "tiled"
    assert dispatch.plan_gemm(16, 4096, 4096, 2, True)["bm"] == 64
    # few tiles: split K while the splits fit one wave and each keeps >= min_k_tiles K tiles
    p = dispatch.plan_gemm(16, 4096, 14336, 2, True)
    tiles = (4096 // p["bn"])
    assert p["kernel"] == "splitk" and 2 <= p["splits"] and tiles * p["splits"] <= dispatch.SMS
    assert dispatch.plan_gemm(4096, 4096, 4096, 2, True)["kernel"] == "tma"
    assert dispatch.plan_gemm(4096, 4096, 4096, 2, True)["bn"] == 256          # wide tiles fill the GPU
    assert dispatch.plan_gemm(256, 6144, 4096, 2, True)["bn"] == 128           # 48 wide tiles would not
    assert dispatch.plan_gemm(16, 28672, 4096, 2, True)["bn"] == 256
    assert dispatch.plan_gemm(16, 4096, 128, 2, True)["kernel"] == "tma"      # K too short to split
    assert dispatch.plan_gemm(16, 4096, 4096, 2, True, kernel="tma")["kernel"] == "tma"
    with pytest.raises(ValueError, match="strides"):
        dispatch.plan_gemm(16, 4001, 4096, 2, False, kernel="tma")


def test_supports_declines_only_in_variants():
    impls = _impls()
    for p in PROBLEMS:
        for c in problems.get(p).cases("verify") + problems.get(p).cases("models"):
            for name in (p, f"{p}_simple"):
                assert impls[f"tilelang:{name}"].supports(c) is None, (name, c)
    va = problems.get("vector_add")
    assert impls["tilelang:vector_add_tiled"].supports(va.case(N=4099, dtype="float16", misalign=3))


@needs_tl
@pytest.mark.timeout(900)
@pytest.mark.parametrize("impl_id,problem,dims", [
    ("tilelang:vector_add", "vector_add", dict(N=98_432)),
    ("tilelang:vector_add_simple", "vector_add", dict(N=4099, dtype="float16", misalign=3)),
    ("tilelang:softmax", "softmax", dict(M=32768, N=512, dtype="bfloat16")),
    ("tilelang:softmax", "softmax", dict(M=4096, N=50257, dtype="bfloat16")),
    ("tilelang:softmax", "softmax", dict(M=4096, N=50257, dtype="float32")),
    ("tilelang:softmax", "softmax", dict(M=4096, N=151936, dtype="float32")),
    ("tilelang:softmax_simple", "softmax", dict(M=300, N=777, layout="strided_odd")),
    ("tilelang:softmax", "softmax", dict(M=3, N=262_147)),
    ("tilelang:gemm_epilogue", "gemm_epilogue", dict(M=4096, N=4096, K=4096, act="gelu", dtype="bfloat16")),
    ("tilelang:gemm_epilogue", "gemm_epilogue", dict(M=2050, N=1001, K=136, act="gelu", dtype="float16")),
    ("tilelang:gemm_epilogue", "gemm_epilogue", dict(M=16, N=4096, K=14336, act="none", dtype="bfloat16")),
])
def test_compile_only_sm90a(impl_id, problem, dims):
    impl = _impls()[impl_id]
    facts = impl.compile_only_fn(problems.get(problem).case(**dims))
    assert facts["registers"] and 0 < facts["registers"] <= 255
    assert facts["compile_s"] >= 0 and "config" in facts
    assert set(facts["kernels"])


@needs_tl
@pytest.mark.timeout(600)
def test_generated_source_uses_hopper_features():
    """The pipelined GEMM's generated CUDA uses TMA loads and wgmma; the element path does not
    use TMA; the vector add's full tiles use 16-byte vectors."""
    import tilelang_src
    from tilelang_src import dispatch, gemm_epilogue_tma, vector_add_tiled

    p = dispatch.plan_gemm(4096, 4096, 4096, 2, True)
    cfg = (p["bm"], p["bn"], p["bk"], p["stages"], p["threads"])
    src = tilelang_src.compile_kernel(("t", cfg), lambda: gemm_epilogue_tma.gemm_tma_kernel(
        "bfloat16", True, *cfg)).source()
    assert "tma_load" in src and "wgmma" in src
    v = dispatch.plan_vector_add(1 << 20, 2, True)
    vsrc = tilelang_src.compile_kernel(("v", v["vec"]), lambda: vector_add_tiled.vector_add_tiled_kernel(
        "float16", v["threads"], v["vec"], v["unroll"])).source()
    assert "uint4" in vsrc


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_verify_suite_gpu(problem):
    from harness.verify import verify_case

    impls = _impls()
    prob = problems.get(problem)
    for name in (problem, f"{problem}_simple"):
        for case in prob.cases("verify"):
            chk = verify_case(impls[f"tilelang:{name}"], prob, case, "cuda")
            assert chk.ok, (name, case, chk.reason)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_variants_gpu(problem):
    """Every variant on the verify cases it takes, plus cases that reach the long-row kernels with
    many rows (the verify suite's long rows are few)."""
    from harness.verify import verify_case

    impls = _impls()
    prob = problems.get(problem)
    extra = {"softmax": [prob.case(M=256, N=20_000, layout="strided_odd"),
                         prob.case(M=200, N=50_257, dtype="bfloat16", kind="neginf"),
                         prob.case(M=96, N=70_001, dtype="float16", layout="strided")],
             "gemm_epilogue": [prob.case(M=64, N=4096, K=4096, act="gelu", dtype="bfloat16")],
             "vector_add": []}[problem]
    for name in IDS[problem][2:]:
        impl = impls[f"tilelang:{name}"]
        for case in prob.cases("verify") + extra:
            if impl.supports(case):
                continue
            chk = verify_case(impl, prob, case, "cuda")
            assert chk.ok, (name, case, chk.reason)
