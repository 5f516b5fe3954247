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
    # attention's default and twin (their tests: tests/test_tilelang_attention.py)
    want = {f"{p}/tilelang:{n}" for p, names in IDS.items() for n in names} | {
        "attention/tilelang:attention", "attention/tilelang:attention_simple"}
    assert want == set(got), (registry.BACKEND_ERRORS, set(got) ^ want)
    for p in (*PROBLEMS, "attention"):
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


def test_softmax_next_plans():
    """The pending plans (tilelang:softmax_next): rows in registers up to 16384 columns (a warp a
    row of <= 32 16-byte groups, 32 values a thread); longer rows with flat views in shared-memory
    slices over a cluster (a slice within its byte cap, the grid over all SMs), split for few rows,
    the twin where x and out differ in layout; sizes of one class share one plan (one compile)."""
    from tilelang_src import dispatch

    nx = dispatch.plan_softmax_next
    p = nx(50_000, 200, 2, aligned=True)
    assert (p["kernel"], p["cols"], p["tpr"], p["threads"]) == ("rows", 256, 32, 128)
    assert p["rows"] * p["cols"] // p["threads"] == 32 and p["aligned"]
    p = nx(131_072, 96, 2)
    assert p["tpr"] == 16 and p["rows"] * p["cols"] // p["threads"] == 32 and not p["aligned"]
    p = nx(4096, 16384, 4)
    assert p["rows"] == 1 and p["threads"] == p["tpr"] == 512
    assert nx(4096, 16385, 4, flat=True)["kernel"] == "smem"
    for m, n, es in ((4096, 50257, 2), (4096, 151936, 2), (4096, 151936, 4), (4096, 128256, 4), (96, 100_000, 2),
                     (48, 65536, 2), (1000, 32769, 2)):
        p = nx(m, n, es, flat=True)
        cap = dispatch.TABLE["softmax_next"]["slice_bytes"]
        assert p["kernel"] == "smem" and p["cols"] * es <= cap and p["cols"] * p["cluster"] >= n, (m, n, p)
        assert m * p["cluster"] >= dispatch.SMS or p["cluster"] == 8, p
        assert p["cols"] % (p["threads"] * 16 // es) == 0
    assert nx(4096, 50257, 2, flat=True) == nx(4096, 50001, 2, flat=True)     # one class, one compile
    assert nx(4096, 700, 2, aligned=True) == nx(4096, 1000, 2, aligned=True)
    for m, n, es in ((2, 2_000_000, 4), (1, 786_433, 4), (8, 200_003, 2), (3, 262_147, 4)):
        p = nx(m, n, es, flat=True)
        assert p["kernel"] == "split" and m * p["chunks"] >= dispatch.SMS, p
    assert nx(4096, 50257, 2, flat=False)["kernel"] == "simple"      # x and out in different layouts
    with pytest.raises(ValueError, match="strides"):
        nx(4096, 50257, 2, kernel="smem", flat=False)
    with pytest.raises(ValueError, match="N:"):
        nx(4, 100_000, 2, kernel="rows")
    assert dispatch.reachable("softmax", True) == ("rows", "smem", "split", "simple")


def test_softmax_tensor_facts():
    """The alignment facts read from the tensors: aligned (16-byte starts, N and both strides
    multiples of 16 bytes), flat (x and out share stride and phase), edges (a row off 16 bytes)."""
    from backends.tilelang_layer import _sm_facts

    x = torch.randn(64, 1024).to(torch.bfloat16)
    assert _sm_facts(x, torch.empty_like(x)) == {"aligned": True, "flat": True, "edges": False}
    x = torch.randn(64, 1001).to(torch.bfloat16)
    assert _sm_facts(x, torch.empty_like(x)) == {"aligned": False, "flat": True, "edges": True}
    wide = torch.randn(64, 1088).to(torch.bfloat16)
    assert _sm_facts(wide[:, :1024], torch.empty(64, 1024, dtype=torch.bfloat16)) == \
        {"aligned": True, "flat": False, "edges": True}


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
@pytest.mark.timeout(900)
@pytest.mark.parametrize("impl_id,dims,vec", [
    ("tilelang:softmax_rows", dict(M=32768, N=512, dtype="bfloat16"), "uint4"),
    ("tilelang:softmax_smem", dict(M=4096, N=151936, dtype="bfloat16"), "uint4"),
    ("tilelang:softmax_split", dict(M=2, N=2_000_000, dtype="float32"), "float4"),
])
def test_softmax_next_kernels_sm90a(impl_id, dims, vec):
    """The pending plans' kernels compile for sm_90a without spills, and their generated CUDA
    reads X and writes Y in 16-byte vectors (the smem kernel copies X by 16-byte ``cp.async``
    and its slices over a cluster meet at the cluster barrier)."""
    impl = _impls()[impl_id]
    backend = importlib.import_module("backends.tilelang_layer")
    backend._SEEN.clear()
    facts = impl.compile_only_fn(problems.get("softmax").case(**dims))
    assert facts.get("spills", 0) == 0, facts
    src = "\n".join(e.source() for e in backend._SEEN)
    for buf in ("Y",) if "smem" in impl_id else ("X", "Y"):
        assert re.search(rf"\*\({vec}\*\)\({buf} \+ ", src), f"no 16-byte accesses of {buf}"
    if "smem" in impl_id:
        assert "cp_async_gs_conditional<16>" in src and "&(X[" in src
    if facts["config"].get("cluster", 1) > 1:
        assert "cluster_sync" in src and "__threadfence" in src


@needs_tl
@pytest.mark.timeout(600)
def test_softmax_rows_unaligned_class_compiles_sm90a():
    """Rows off 16 bytes (odd N) take the same rows kernel without the alignment facts: element
    accesses, no 16-byte vector of X."""
    impl = _impls()["tilelang:softmax_rows"]
    backend = importlib.import_module("backends.tilelang_layer")
    backend._SEEN.clear()
    facts = impl.compile_only_fn(problems.get("softmax").case(M=1823, N=781, dtype="bfloat16"))
    assert facts["config"]["aligned"] is False and facts.get("spills", 0) == 0
    assert "*(uint4*)(X + " not in backend._SEEN[-1].source()


def test_gemm_next_plans():
    """The pending GEMM plans: operands with rows off 16 bytes staged (A for K, B for K or N),
    C's alignment class, 256- or 128-column tiles by waves, split-K for few tiles; today's plans
    are unchanged."""
    from tilelang_src import dispatch

    nx = dispatch.plan_gemm_next
    p = nx(2048, 2047, 2048, 2, False)
    assert p["kernel"] == "tma" and p["stage"] == ("b",) and not p["aligned_n"]
    assert nx(555, 1234, 777, 2, False)["stage"] == ("a", "b")
    assert nx(4096, 4096, 4096, 2, True)["stage"] == ()
    assert nx(4096, 4096, 4096, 2, True, misaligned=("a",))["stage"] == ("a",)
    assert nx(4096, 28672, 4096, 2, True)["bn"] == 256         # 28 waves of wide tiles
    assert nx(3000, 3000, 3000, 2, True)["bn"] == 128           # 5 waves of 128 beat 3 of 256
    p = nx(16, 6144, 4096, 2, True)
    assert p["kernel"] == "splitk" and p["bm"] == 64 and p["splits"] * (6144 // p["bn"]) <= dispatch.SMS
    assert nx(8192, 512, 2048, 2, True)["kernel"] == "tma"
    assert nx(16, 6144, 4096, 2, True, kernel="tma")["kernel"] == "tma"
    assert dispatch.plan_gemm(2050, 1001, 136, 2, False)["kernel"] == "tiled"
    assert dispatch.reachable("gemm_epilogue", True) == ("tma", "splitk")


@needs_tl
@pytest.mark.timeout(900)
def test_gemm_staged_kernel_sm90a():
    """The pending plans' wide tile compiles for sm_90a without spills (bias read from its staged
    shared slice), and stores C by TMA where C's rows are 16-byte multiples; the staging kernel
    compiles."""
    impl = _impls()["tilelang:gemm_epilogue_tma"]
    backend = importlib.import_module("backends.tilelang_layer")
    backend._SEEN.clear()
    facts = impl.compile_only_fn(problems.get("gemm_epilogue").case(M=4096, N=28672, K=4096, act="gelu", bias=1))
    assert facts["config"]["bn"] == 256 and facts.get("spills", 0) == 0, facts
    src = backend._SEEN[-1].source()
    assert "bias_s" in src and "tma_store" in src and "wgmma" in src
    backend._SEEN.clear()
    facts = impl.compile_only_fn(problems.get("gemm_epilogue").case(M=2048, N=2047, K=2048, act="gelu", bias=1))
    assert facts["config"]["stage"] == ("b",) and "tma_store" not in backend._SEEN[0].source()


@needs_tl
@pytest.mark.timeout(600)
def test_compile_cache_in_the_project_folder_and_cubin_facts(tmp_path, monkeypatch):
    """A compile lands in TileLang's kernel cache under the project's cache folder (so emptying
    that folder empties it), and a launch's facts (registers) come from the cubin TileLang built."""
    import tilelang_src
    from tilelang_src import vector_add_unmasked

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    entry = tilelang_src.compile_kernel(("cache-test", 64, 8, 3), lambda: vector_add_unmasked.vector_add_unmasked_kernel(
        "float16", 64, 8, 3))
    assert any((tmp_path / "kernel-layers" / "tilelang" / "kernels").rglob("*.so")), list(tmp_path.rglob("*"))
    facts = entry.launch_facts()
    assert 0 < facts["registers"] <= 255 and facts["stack"] == 0, facts


@needs_tl
def test_compile_only_facts_from_the_ptx_in_tilelangs_cubin(tmp_path, monkeypatch):
    """The compile-only ptxas facts come from the PTX TileLang's own nvcc compile left in its cubin
    (no second nvcc run for the PTX), and are the facts ptxas gives for nvcc's PTX of the source."""
    import tilelang_src
    from kltools.ptxas import ptxas_info, summarize
    from tilelang_src import vector_add_unmasked

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    entry = tilelang_src.compile_kernel(("ptx-test", 64, 8, 3), lambda: vector_add_unmasked.vector_add_unmasked_kernel(
        "float16", 64, 8, 3))
    assert "vector_add_unmasked_kernel" in tilelang_src._ptx(tilelang_src._cubin(entry.kernel))
    via_nvcc = summarize(ptxas_info(entry.kernel._get_ptx(), tilelang_src.arch()))

    def no_nvcc(*a, **k):
        raise AssertionError("compile-only facts ran nvcc for the PTX")
    monkeypatch.setattr(type(entry.kernel), "_get_ptx", no_nvcc)
    facts = entry.facts()
    assert {k: facts[k] for k in via_nvcc} == via_nvcc and facts["registers"] > 0, (facts, via_nvcc)


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
    """Cases that reach the long-row kernels with many rows (the verify suite's long rows are few),
    a cluster of slices, odd rows and staged GEMM operands."""
    prob = problems.get(problem)
    if problem == "softmax":
        return [prob.case(M=256, N=20_000, layout="strided_odd"),
                prob.case(M=200, N=50_257, dtype="bfloat16", kind="neginf"),
                prob.case(M=96, N=70_001, dtype="float16", layout="strided"),
                prob.case(M=300, N=151_936, dtype="bfloat16"), prob.case(M=64, N=128_257),
                prob.case(M=2, N=2_000_000), prob.case(M=1000, N=32_769, dtype="bfloat16"),
                prob.case(M=50_000, N=200, dtype="float16")]
    if problem == "gemm_epilogue":
        return [prob.case(M=64, N=4096, K=4096, act="gelu", dtype="bfloat16"),
                prob.case(M=2048, N=2047, K=2048, act="gelu", dtype="bfloat16"),
                prob.case(M=555, N=1234, K=777, act="gelu", dtype="bfloat16"),
                prob.case(M=3000, N=3000, K=3000, act="gelu", dtype="float16"),
                # small and odd (the default's plan_gemm_small): A and B staged in one launch,
                # 64-row tiles; a single-stage pipeline at K = 64
                prob.case(M=97, N=211, K=389, act="relu", dtype="bfloat16"),
                prob.case(M=411, N=733, K=957, act="gelu", dtype="float16"),
                prob.case(M=8192, N=2048, K=64, act="none", bias=0, dtype="bfloat16")]
    return []


def _gpu_jobs(problem):
    """(implementation, case) of the GPU tests: the default and the twin on the verify suite, the
    default on the extra cases too, every other variant on the verify suite and the extra cases it
    takes."""
    impls, prob = _impls(), problems.get(problem)
    jobs = [(impls[f"tilelang:{n}"], c) for n in IDS[problem][:2] for c in prob.cases("verify")]
    jobs += [(impls[f"tilelang:{problem}"], c) for c in _extra_cases(problem)]
    others = [impls[f"tilelang:{n}"] for n in IDS[problem][2:]]
    jobs += [(i, c) for i in others for c in prob.cases("verify") + _extra_cases(problem) if not i.supports(c)]
    return jobs


@pytest.fixture(scope="module")
def compiled_ahead():
    """Every kernel the GPU tests run, compiled in parallel first (TileLang's disk cache keeps them;
    serially, nvcc takes minutes over these suites)."""
    compile_ahead([(i.problem, i.id, c) for p in PROBLEMS for i, c in _gpu_jobs(p)])


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@needs_tl
@pytest.mark.parametrize("problem", PROBLEMS)
def test_verify_suite_gpu(problem, compiled_ahead):
    """The default and the twin on every verify case (neither declines one), the default on the
    extra cases too."""
    from harness.verify import verify_case

    prob = problems.get(problem)
    for impl, case in _gpu_jobs(problem):
        if impl.name in IDS[problem][:2]:
            chk = verify_case(impl, prob, case, "cuda", seeds=GPU_SEEDS)
            assert chk.ok, (impl.id, case, chk.reason)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@needs_tl
@pytest.mark.parametrize("problem", PROBLEMS)
def test_variants_gpu(problem, compiled_ahead):
    """Every variant on the verify cases it takes, plus cases that reach the long-row kernels with
    many rows (the verify suite's long rows are few), a cluster of slices, odd rows and staged
    GEMM operands."""
    from harness.verify import verify_case

    prob = problems.get(problem)
    for impl, case in _gpu_jobs(problem):
        if impl.name not in IDS[problem][:2]:
            chk = verify_case(impl, prob, case, "cuda", seeds=GPU_SEEDS)
            assert chk.ok, (impl.id, case, chk.reason)


def test_default_gemm_mixes_the_staged_and_todays_plans():
    """plan_gemm_mixed (SWITCHES['gemm_next'] on: the default's first answer, which plan_gemm_small
    re-plans) takes the staged plans where they won and today's where those did: today's split-K
    where the operands load by TMA, today's element loads where staging B for one row tile would
    copy more than L2 holds (docs/performance.md)."""
    from tilelang_src import dispatch as D
    assert D.SWITCHES["gemm_next"]
    mixed = lambda m, n, k: D.plan_gemm_mixed(m, n, k, 2, n % 8 == 0 and k % 8 == 0, n % 8 == 0)  # noqa: E731
    few = mixed(16, 6144, 4096)                         # aligned, 48 tiles: today's split-K
    assert few["kernel"] == "splitk" and "stage" not in few
    big = mixed(4096, 50257, 768)                       # B's rows off 16 bytes, 32 row tiles: staged
    assert big["kernel"] == "tma" and big["stage"] == ("b",)
    once = mixed(16, 50257, 768)                        # one row tile, B (77 MB) past L2: element loads
    assert once["kernel"] == "tiled" and "stage" not in once
    small = mixed(97, 211, 389)                         # one row tile, B in L2: staged, TMA
    assert small["kernel"] == "tma" and set(small["stage"]) == {"a", "b"}
    odd = mixed(411, 733, 957)                          # element loads would split K: the staged split
    assert "stage" in odd and odd["stage"]
    assert mixed(4096, 4096, 14336) == D.plan_gemm_next(4096, 4096, 14336, 2, True)


def _small(m, n, k, **kw):
    from tilelang_src import dispatch as D
    return D.plan_gemm_small(m, n, k, 2, n % 8 == 0 and k % 8 == 0, n % 8 == 0, **kw)


def _default_plan(**case):
    from harness.meta_inputs import case_facts
    from tilelang_src import dispatch as D
    return D.plan("gemm_epilogue", case_facts(problems.get("gemm_epilogue").case(**case)))


def test_the_plan_names_the_staging_kernels_only_where_it_stages():
    """Staging is no word: a plan that copies B is "tma" with ``stage`` ("b",) and names
    stage_rows_kernel; one that copies A and B in one launch names stage_pair_kernel; a pending
    plan that copies nothing (``stage`` empty) and today's plans name neither."""
    from tilelang_src import dispatch as D

    def kernels(p):
        return {k for s in p.sources for k in s.kernels}
    copies = {"stage_rows_kernel", "stage_pair_kernel"}
    b_only = _default_plan(M=4096, N=50257, K=768)
    assert b_only.variant == "tma" and tuple(b_only.config["stage"]) == ("b",)
    assert kernels(b_only) & copies == {"stage_rows_kernel"}
    both = _default_plan(M=97, N=211, K=389)
    assert set(both.config["stage"]) == {"a", "b"} and both.config["stage_pair"]
    assert kernels(both) & copies == {"stage_pair_kernel"}
    for case in (dict(M=4096, N=4096, K=4096), dict(M=16, N=6144, K=4096), dict(M=16, N=50257, K=768)):
        p = _default_plan(**case)
        assert not p.config.get("stage") and not kernels(p) & copies, (case, p.config)
    assert not {"stage", "pack", "pack_pair"} & set(D.VARIANTS["gemm_epilogue"])


def test_default_gemm_plans_small_and_odd_cases():
    """The default's plans (plan_gemm_small over plan_gemm_mixed) on the issue's cases and the
    verify suite's: both operands staged in one launch (stage_pair_kernel) and 64 x 128 tiles where
    the grid is under a wave (97 x 211 x 389: 4 CTAs, not 2 of 128 x 128); 411 x 733 x 957 and
    1025 x 769 x 513 unsplit (the split's extra launch and planes cost more than the K steps it
    takes off each CTA); one K tile: one stage (the same 128 x 256 tile); 1 x 1024 x 512 unsplit
    on the staged kernel (8 K tiles); many waves, or B's rows off 16 bytes over two row tiles: the
    staged plan's 128 x 256 tile; 16 x 6144 x 4096 keeps today's split (64 K tiles: it pays); a B
    past L2 that one row tile reads once: today's element loads."""
    cases = [  # case, then (kernel, bm, bn, stages, threads, stage) and the one-launch copy
        (dict(M=97, N=211, K=389, act="relu", dtype="bfloat16"), ("tma", 64, 128, 4, 128, ("a", "b")), True),
        (dict(M=411, N=733, K=957, act="gelu", dtype="float16"), ("tma", 64, 128, 4, 128, ("a", "b")), True),
        (dict(M=1025, N=769, K=513), ("tma", 64, 128, 4, 128, ("a", "b")), True),
        (dict(M=8192, N=2048, K=64, act="none", bias=0, dtype="bfloat16"), ("tma", 128, 256, 1, 256, ()), False),
        (dict(M=1, N=1024, K=512, act="gelu", dtype="bfloat16"), ("tma", 64, 128, 4, 128, ()), False),
        (dict(M=4096, N=28672, K=4096), ("tma", 128, 256, 3, 256, ()), False),
        (dict(M=256, N=50257, K=768, dtype="bfloat16"), ("tma", 128, 256, 3, 256, ("b",)), False)]
    for case, want, one_launch in cases:
        p = _default_plan(**case)
        c = p.config
        assert (c["kernel"], c["bm"], c["bn"], c["stages"], c["threads"], tuple(c["stage"])) == want, (case, c)
        assert bool(c.get("stage_pair")) == one_launch and "splits" not in c, (case, c)
        kernels = {k for s in p.sources for k in s.kernels}
        assert ("stage_pair_kernel" in kernels) == one_launch, (case, kernels)
    p = _default_plan(M=16, N=6144, K=4096, dtype="bfloat16").config
    assert (p["kernel"], p["bm"], p["bn"], p["splits"]) == ("splitk", 64, 128, 2) and "stage" not in p
    p = _default_plan(M=16, N=50257, K=768, dtype="bfloat16").config
    assert p["kernel"] == "tiled" and "stage" not in p


@pytest.mark.parametrize("m", [1, 16, 64, 65, 97, 411, 2048, 8192])
@pytest.mark.parametrize("n", [8, 211, 733, 2048, 6144])
@pytest.mark.parametrize("k", [8, 64, 100, 128, 389, 4096])
def test_gemm_small_invariants(m, n, k):
    """Over a grid of shapes: a tile of the staged table (64 rows for M <= 64), no more stages than
    K tiles, one staging launch exactly where both operands
    are staged, and a split plan only where the mixed plan split."""
    from tilelang_src import dispatch as D
    p = _small(m, n, k)
    mixed = D.plan_gemm_mixed(m, n, k, 2, n % 8 == 0 and k % 8 == 0, n % 8 == 0)
    if "stage" not in p:
        assert p == mixed
        return
    assert (p["bm"], p["bn"]) in D.TABLE["gemm_next"]["tiles"] or p["kernel"] == "splitk"
    if m <= 64:
        assert p["bm"] == 64
    if p["kernel"] == "tma":
        assert 1 <= p["stages"] <= -(-k // p["bk"])
    else:
        assert mixed["kernel"] == "splitk"
    assert bool(p.get("stage_pair")) == (len(p["stage"]) == 2)


@needs_tl
@pytest.mark.timeout(900)
def test_default_gemm_small_plans_compile_sm90a():
    """The default's small-GEMM kernels compile for sm_90a without spills: the one-launch copy of
    A and B with the 64 x 128 staged tile, and the single-stage 128 x 256 tile at K = 64."""
    impl = _impls()["tilelang:gemm_epilogue"]
    backend = importlib.import_module("backends.tilelang_layer")
    prob = problems.get("gemm_epilogue")
    backend._SEEN.clear()
    facts = impl.compile_only_fn(prob.case(M=97, N=211, K=389, act="relu", dtype="bfloat16"))
    assert facts["config"]["stage_pair"] and facts["config"]["bm"] == 64, facts
    assert all(k.get("spills", 0) == 0 for k in facts["kernels"].values()), facts
    assert any("stage_pair" in e.source() for e in backend._SEEN)
    facts = impl.compile_only_fn(prob.case(M=8192, N=2048, K=64, act="none", bias=0, dtype="bfloat16"))
    assert facts["config"]["stages"] == 1 and facts.get("spills", 0) == 0, facts
