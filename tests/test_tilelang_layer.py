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

from conftest import compile_ahead, GPU_SEEDS  # noqa: E402
from harness import problems, registry

ROOT = Path(__file__).resolve().parent.parent
HAVE_TL = importlib.util.find_spec("tilelang") is not None
HAVE_NVCC = shutil.which("nvcc") is not None
HAVE_GPU = torch.cuda.is_available()
needs_tl = pytest.mark.skipif(not (HAVE_TL and HAVE_NVCC), reason="tilelang or nvcc not installed")
PROBLEMS = ("vector_add", "softmax", "gemm_epilogue")
IDS = {
    "vector_add": ["vector_add", "vector_add_simple", "vector_add_unmasked"],
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


def test_softmax_vector_plans():
    """The vector variants' plans: 16-byte groups (vec = 16 / element size); the row plus one group
    of slack unless every row starts on 16 bytes, rounded up to the CTA's width; the default's
    plans are the element plans (no ``vec``) until the vector kernels have run on a GPU."""
    from tilelang_src import dispatch

    for m, n, es in ((32768, 512, 2), (1823, 781, 4), (8192, 2048, 2), (64, 16377, 2), (4096, 50257, 2),
                     (4096, 151936, 4), (3, 262_147, 4), (4, 33, 2)):
        assert "vec" not in dispatch.plan_softmax(m, n, es)
        for aligned in (False, True):
            try:
                p = dispatch.plan_softmax(m, n, es, kernel="rows", vector=True, aligned=aligned)
            except ValueError:
                assert n + 16 // es - 1 > dispatch.TABLE["softmax"]["max_cols"]
                continue
            width = p["threads"] * p["vec"]
            assert p["vec"] == 16 // es and p["cols"] % width == 0
            assert p["cols"] >= n + (0 if aligned else p["vec"] - 1) and p["cols"] - width < n + p["vec"] - 1
            q = dispatch.plan_softmax(m, n, es, kernel="online", vector=True)
            assert q["vec"] == 16 // es and q["tile"] % (q["threads"] * q["vec"]) == 0
    p = dispatch.plan_softmax(4096, 50257, 2, kernel="smem", vector=True)     # 50257 + 7 columns staged
    assert p["vec"] == 8 and p["cols"] % p["tile"] == 0 and p["cols"] >= 50257 + 7
    assert dispatch.plan_softmax(4096, 32768, 2, kernel="smem", vector=True, aligned=True)["cols"] == 32768
    assert dispatch.plan_softmax(32768, 512, 2, kernel="rows", vector=True, aligned=True)["cols"] == 512
    assert dispatch.plan_softmax(32768, 512, 2, kernel="rows", vector=True)["cols"] == 768
    with pytest.raises(ValueError, match="N:"):
        dispatch.plan_softmax(4, 16_380, 2, kernel="rows", vector=True)   # 16380 + 7 > 16384


def test_softmax_flat_views():
    """The vector kernels' flat views (CPU tensors): element ``start + j`` of the view, start =
    off + r * sx, is x[r, j]; the view begins on 16 bytes; x and out of different strides or
    16-byte phases get None (the element kernel)."""
    from backends.tilelang_layer import _sm_flat

    def check(x, out):
        got = _sm_flat(x, out)
        assert got is not None
        fx, fy, off, sx, aligned = got
        assert fx.data_ptr() % 16 == 0 and fy.data_ptr() % 16 == 0 and 0 <= off < 16 // x.element_size()
        for r in sorted({0, min(1, x.shape[0] - 1), x.shape[0] - 1}):
            assert torch.equal(fx[off + r * sx: off + r * sx + x.shape[1]], x[r])
            assert fy[off + r * sx: off + r * sx + x.shape[1]].data_ptr() == out[r].data_ptr()
        return off, sx, aligned

    x = torch.randn(37, 1000).to(torch.bfloat16)
    assert check(x, torch.empty_like(x)) == (0, 1000, True)
    x = torch.randn(37, 1001).to(torch.bfloat16)
    assert check(x, torch.empty_like(x)) == (0, 1001, False)
    buf, obuf = torch.randn(5 * 781 + 3), torch.empty(5 * 781 + 3)
    x, out = buf[3:].view(5, 781), obuf[3:].view(5, 781)            # 12 bytes into 16-byte storage
    assert check(x, out) == (3, 781, False)
    wide, owide = torch.randn(9, 300, dtype=torch.float16), torch.empty(9, 300, dtype=torch.float16)
    assert check(wide[:, 1:278], owide[:, 1:278]) == (1, 300, False)
    assert _sm_flat(wide[:, 1:278], torch.empty(9, 277, dtype=torch.float16)) is None   # strides differ
    assert _sm_flat(buf[3:].view(5, 781), torch.empty(5, 781)) is None                   # phases differ
    one = torch.randn(1, 8).to(torch.bfloat16)
    assert check(one, torch.empty_like(one)) == (0, 8, True)


@needs_tl
@pytest.mark.timeout(600)
@pytest.mark.parametrize("impl_id,dims", [
    ("tilelang:softmax_rows", dict(M=1823, N=781, dtype="bfloat16")),
    ("tilelang:softmax_online", dict(M=4096, N=50257, dtype="float32")),
    ("tilelang:softmax_smem", dict(M=4096, N=50257, dtype="bfloat16")),
])
def test_softmax_vector_kernels_sm90a(impl_id, dims):
    """The vector variants compile for sm_90a with no spills, and their generated CUDA moves whole
    groups of X and Y as 16-byte vectors (uint4 / float4; ld.global.nc.v4 in the PTX) where the
    element kernels issue only 2- or 4-byte accesses."""
    impl = _impls()[impl_id]
    backend = importlib.import_module("backends.tilelang_layer")
    backend._SEEN.clear()
    facts = impl.compile_only_fn(problems.get("softmax").case(**dims))
    assert "vec" in facts["config"] and facts.get("spills", 0) == 0, facts
    src = backend._SEEN[-1].source()
    vec = "uint4" if dims["dtype"] != "float32" else "float4"
    for buf in ("X", "Y"):
        assert f"*({vec}*)({buf} + " in src, f"no 16-byte accesses of {buf}"


def test_gemm_stage_bias_plans():
    """Only the tma variant asks for the staged bias; the default's plans are as verified."""
    from tilelang_src import dispatch

    for m, n, k in ((4096, 28672, 4096), (256, 6144, 4096), (16, 4096, 14336), (2050, 1001, 136)):
        tma_ok = n % 8 == 0 and k % 8 == 0
        assert "stage_bias" not in dispatch.plan_gemm(m, n, k, 2, tma_ok)
        if tma_ok:
            p = dispatch.plan_gemm(m, n, k, 2, tma_ok, kernel="tma", stage_bias=True)
            assert p["kernel"] == "tma" and p["stage_bias"] is True
    assert "stage_bias" not in dispatch.plan_gemm(2050, 1001, 136, 2, False, stage_bias=True)   # element loads


@needs_tl
@pytest.mark.timeout(600)
def test_gemm_staged_bias_has_no_spills_sm90a():
    """The tma variant's wide tile (128 x 256, two consumer warpgroups at 240 registers) compiles
    for sm_90a without spills, its epilogue reading bias from the staged shared slice."""
    impl = _impls()["tilelang:gemm_epilogue_tma"]
    backend = importlib.import_module("backends.tilelang_layer")
    backend._SEEN.clear()
    facts = impl.compile_only_fn(problems.get("gemm_epilogue").case(M=4096, N=28672, K=4096, act="gelu", bias=1))
    assert facts["config"]["bn"] == 256 and facts["config"].get("stage_bias") is True, facts
    assert facts.get("spills", 0) == 0, facts
    assert "bias_s" in backend._SEEN[-1].source()


def test_supports_declines_only_in_variants():
    impls = _impls()
    for p in PROBLEMS:
        for c in problems.get(p).cases("verify") + problems.get(p).cases("models"):
            for name in (p, f"{p}_simple"):
                assert impls[f"tilelang:{name}"].supports(c) is None, (name, c)
    va = problems.get("vector_add")
    assert impls["tilelang:vector_add_unmasked"].supports(va.case(N=4099, dtype="float16", misalign=3))


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
    from tilelang_src import dispatch, gemm_epilogue_tma, vector_add_unmasked

    p = dispatch.plan_gemm(4096, 4096, 4096, 2, True)
    cfg = (p["bm"], p["bn"], p["bk"], p["stages"], p["threads"])
    src = tilelang_src.compile_kernel(("t", cfg), lambda: gemm_epilogue_tma.gemm_tma_kernel(
        "bfloat16", True, *cfg)).source()
    assert "tma_load" in src and "wgmma" in src
    v = dispatch.plan_vector_add(1 << 20, 2, True)
    vsrc = tilelang_src.compile_kernel(("v", v["vec"]), lambda: vector_add_unmasked.vector_add_unmasked_kernel(
        "float16", v["threads"], v["vec"], v["unroll"])).source()
    assert "uint4" in vsrc


def _extra_cases(problem):
    """Cases that reach the long-row kernels with many rows (the verify suite's long rows are few)."""
    prob = problems.get(problem)
    if problem == "softmax":
        return [prob.case(M=256, N=20_000, layout="strided_odd"),
                prob.case(M=200, N=50_257, dtype="bfloat16", kind="neginf"),
                prob.case(M=96, N=70_001, dtype="float16", layout="strided")]
    if problem == "gemm_epilogue":
        return [prob.case(M=64, N=4096, K=4096, act="gelu", dtype="bfloat16")]
    return []


def _gpu_jobs(problem):
    """(implementation, case) of the GPU tests: the default and the twin on the verify suite, every
    variant on the verify suite and the extra cases it takes."""
    impls, prob = _impls(), problems.get(problem)
    jobs = [(impls[f"tilelang:{n}"], c) for n in IDS[problem][:2] for c in prob.cases("verify")]
    jobs += [(impls[f"tilelang:{n}"], c) for n in IDS[problem][2:]
             for c in prob.cases("verify") + _extra_cases(problem) if not impls[f"tilelang:{n}"].supports(c)]
    return jobs


@pytest.fixture(scope="module")
def compiled_ahead():
    """Every kernel the GPU tests run, compiled in parallel first (TileLang's disk cache keeps them;
    serially, nvcc takes minutes over these suites)."""
    compile_ahead([(i.problem, i.id, c) for p in PROBLEMS for i, c in _gpu_jobs(p)])


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("problem", PROBLEMS)
def test_verify_suite_gpu(problem, compiled_ahead):
    """The default and the twin on every verify case (neither declines one)."""
    from harness.verify import verify_case

    prob = problems.get(problem)
    for impl, case in _gpu_jobs(problem):
        if impl.name in IDS[problem][:2]:
            chk = verify_case(impl, prob, case, "cuda", seeds=GPU_SEEDS)
            assert chk.ok, (impl.id, case, chk.reason)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("problem", PROBLEMS)
def test_variants_gpu(problem, compiled_ahead):
    """Every variant on the verify cases it takes, plus cases that reach the long-row kernels with
    many rows."""
    from harness.verify import verify_case

    prob = problems.get(problem)
    for impl, case in _gpu_jobs(problem):
        if impl.name not in IDS[problem][:2]:
            chk = verify_case(impl, prob, case, "cuda", seeds=GPU_SEEDS)
            assert chk.ok, (impl.id, case, chk.reason)
