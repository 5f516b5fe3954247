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
# variants registered beside the main ids (the GPU comparison times them side by side)
VARIANTS = [("softmax", "cute:softmax_rows"), ("softmax", "cute:softmax_long"),
            ("softmax", "cute:softmax_split"), ("gemm_epilogue", "cute:gemm_ws"), ("gemm_epilogue", "cute:gemm_ws_c2"),
            ("gemm_epilogue", "cute:gemm_pp")]


def impl(problem):
    return registry.get(problem, IDS[problem])


def test_registered_ids():
    got = {i.key for i in registry.select(layer="cute")}
    assert {f"{p}/{i}" for p, i in IDS.items()} <= got, registry.BACKEND_ERRORS
    assert {f"{p}/{i}" for p, i in VARIANTS} <= got, registry.BACKEND_ERRORS


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
def _compile(problem, impl_id=None, **kw):
    prob = problems.get(problem)
    case = prob.case(**kw)
    im = registry.get(problem, impl_id) if impl_id else impl(problem)
    facts = im.compile_only_fn(case)
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
def test_compile_softmax(kw, cluster, monkeypatch):
    from backends import cute_layer as cl

    monkeypatch.setattr(cl, "SOFTMAX_ROUTE", ("base",))      # the row-in-registers kernel itself
    f = _compile("softmax", **kw)
    assert f["config"]["cluster"] == cluster


@needs_cute
def test_compile_softmax_dispatches_short_rows():
    """cute:softmax compiles the short-row kernel for N <= ROWS_MAX_N (the H200 run's choice)."""
    assert _compile("softmax", M=4096, N=1024)["kernel"] == "softmax_rows"
    assert "kernel" not in _compile("softmax", M=4096, N=2048)


@needs_cute
def test_softmax_too_long_declined():
    from cutlass_src import softmax as sm

    c = problems.get("softmax").case
    # past the cluster kernel's limit the dispatcher hands rows to softmax_split ...
    assert impl("softmax").supports(c(M=1, N=sm.MAX_N * 2)) is None
    # ... until a row needs more chunks than CTAs fit the GPU at once
    assert "longer" in impl("softmax").supports(c(M=1, N=264 * 16384 + 1))


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


# -- variants: softmax_rows, softmax_long, gemm_ws, gemm_ws_c2 ---------------------------------
@needs_cute
@pytest.mark.parametrize("kw,group,rows", [
    (dict(M=4096, N=1024), 64, 4), (dict(M=4096, N=4096, dtype="bfloat16"), 256, 1),
    (dict(M=300, N=777, layout="strided_odd"), 64, 4), (dict(M=1, N=1), 32, 8)])
def test_compile_softmax_rows(kw, group, rows):
    f = _compile("softmax", "cute:softmax_rows", **kw)
    assert (f["config"]["group"], f["config"]["rows_per_cta"]) == (group, rows), f["config"]
    # 4 CTAs x 256 threads per SM (the grid cap) needs <= 64 registers
    assert f["registers"] <= 64, f


@needs_cute
def test_softmax_rows_ptx_prefetches_next_row():
    """The next row's 128-bit loads are issued before this row's first shuffle."""
    from cutlass_src import softmax_rows as sr

    comp, p = sr.compile_only(torch.float32, 1024)
    body = comp.ptx[comp.ptx.find(".entry"):]
    loop = body[body.find("shfl.sync.idx"):]               # past the prologue's loads
    assert loop.count("ld.global.v4") >= p["k"]
    assert loop.find("ld.global.v4") < loop.find("shfl.sync.bfly")


@needs_cute
@pytest.mark.parametrize("kw,cluster", [(dict(M=8, N=131072), 8), (dict(M=8, N=262144), 16),
                                        (dict(M=2, N=131072, dtype="bfloat16"), 8)])
def test_compile_softmax_long(kw, cluster):
    f = _compile("softmax", "cute:softmax_long", **kw)
    assert (f["config"]["threads"], f["config"]["cluster"]) == (512, cluster)
    assert f["registers"] <= 64, f                 # two 512-thread CTAs per SM


@needs_cute
@pytest.mark.parametrize("kw,vec,parts,grid", [
    (dict(M=8192, N=262144), 4, 16, 256), (dict(M=8192, N=131072, dtype="bfloat16"), 8, 8, 264),
    (dict(M=3, N=262_147, layout="strided_odd"), 1, 17, 51), (dict(M=600, N=40000), 4, 3, 264)])
def test_compile_softmax_split(kw, vec, parts, grid):
    f = _compile("softmax", "cute:softmax_split", **kw)
    p = f["config"]
    assert (p["vec"], p["parts"], p["grid"]) == (vec, parts, grid), p
    assert p["grid"] % p["parts"] == 0 or p["grid"] == kw["M"] * p["parts"]  # a row's chunks in one round
    assert f["registers"] * p["threads"] * 2 <= 65536 and f["spills"] == 0, f  # two CTAs per SM


@needs_cute
def test_softmax_split_ptx_exchange():
    """One relaxed 64-bit publish per unit, relaxed 64-bit polls, a warp vote, no fence or membar
    (the payload is its own flag), two CTAs per SM requested, and 128-bit loads/stores."""
    from cutlass_src import softmax_split as ss

    for pf in ("0", "1"):
        os.environ["KL_CUTE_SOFTMAX_SPLIT_PREFETCH"] = pf
        try:
            comp, p = ss.compile_only(torch.float32, 262144)
        finally:
            del os.environ["KL_CUTE_SOFTMAX_SPLIT_PREFETCH"]
        ptx = comp.ptx
        assert p["prefetch"] == (pf == "1")
        assert ".minnctapersm 2" in ptx and ".reqntid 256, 1, 1" in ptx
        assert ptx.count("st.relaxed.gpu.global.b64") == 1
        assert ptx.count("ld.relaxed.gpu.global.b64") >= 2
        assert "vote.sync.all" in ptx
        assert "membar" not in ptx and "fence.sc" not in ptx and "fence.acq_rel" not in ptx
        assert ptx.count("st.global.v4") == p["k"]
        if p["prefetch"]:  # one bulk copy before the loop, one per round; chunk read from smem
            assert ptx.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 2
            assert "ld.global.v4" not in ptx and ptx.count("ld.shared.v4") >= p["k"]
            assert "mbarrier.try_wait.parity" in ptx and "fence.mbarrier_init" in ptx
        else:
            assert ptx.count("ld.global.v4") == p["k"] and "cp.async.bulk" not in ptx
    # rows not 16-byte aligned: no bulk copies (element loads), whatever the setting
    assert ss.plan_for(3, 262_147, 1)["prefetch"] is False


@needs_cute
def test_softmax_split_plan_and_validation():
    from cutlass_src import softmax_split as ss

    with pytest.raises(ValueError, match="fit one CTA"):
        ss.plan_for(8, 32768, 4)
    with pytest.raises(ValueError, match="co-resident"):
        ss.plan_for(2, 264 * 16384 + 1, 4)
    with pytest.raises(ValueError, match="work units"):
        ss.plan_for(2 ** 30, 65536, 4)
    split = registry.get("softmax", "cute:softmax_split")
    c = problems.get("softmax").case
    assert "fit one CTA" in split.supports(c(M=8, N=4096))
    assert split.supports(c(M=3, N=262_147)) is None
    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        ss.prepare_softmax_split(torch.zeros(2, 40000), torch.zeros(2, 40000))
    with pytest.raises(ValueError, match="KL_CUTE_SOFTMAX_SPLIT_THREADS"):
        os.environ["KL_CUTE_SOFTMAX_SPLIT_THREADS"] = "300"
        try:
            ss.threads()
        finally:
            del os.environ["KL_CUTE_SOFTMAX_SPLIT_THREADS"]


@needs_cute
def test_softmax_variants_decline_with_reasons():
    rows, long_ = registry.get("softmax", "cute:softmax_rows"), registry.get("softmax", "cute:softmax_long")
    c = problems.get("softmax").case
    assert "short-row" in rows.supports(c(M=8, N=32768))
    assert rows.supports(c(M=8, N=8192)) is None
    assert "long-row" in long_.supports(c(M=8, N=4096))
    assert long_.supports(c(M=3, N=262_147)) is None


@needs_cute
def test_softmax_route_switch(monkeypatch):
    from backends import cute_layer as cl

    c = problems.get("softmax").case
    assert cl._sm_route(c(M=8, N=1024)) == "rows"              # default: rows for short rows
    assert cl._sm_route(c(M=8, N=2048)) == "base"              # above ROWS_MAX_N
    assert cl._sm_route(c(M=8, N=65536)) == "base"             # up to SPLIT_ABOVE_N
    assert cl._sm_route(c(M=8, N=131072)) == "split"
    assert cl._sm_route(c(M=8, N=262144)) == "split"           # long off by default
    assert cl._sm_route(c(M=8, N=5_000_000)) == "base"         # split declines (> 264 chunks)
    monkeypatch.setattr(cl, "SOFTMAX_ROUTE", ("base",))
    assert cl._sm_route(c(M=8, N=1024)) == "base"
    monkeypatch.setattr(cl, "SOFTMAX_ROUTE", ("rows", "long"))
    assert cl._sm_route(c(M=8, N=1024)) == "rows"
    assert cl._sm_route(c(M=8, N=8192)) == "base"              # above ROWS_MAX_N
    assert cl._sm_route(c(M=8, N=262144)) == "long"


@needs_cute
@pytest.mark.parametrize("impl_id,dtype,act,bias", [
    ("cute:gemm_ws", "bfloat16", "relu", 1), ("cute:gemm_ws_c2", "float16", "gelu", 0)])
def test_compile_gemm_ws(impl_id, dtype, act, bias):
    f = _compile("gemm_epilogue", impl_id, M=300, N=256, K=256, dtype=dtype, act=act, bias=bias)
    assert f["config"]["threads"] == 384
    assert f["registers"] * 384 <= 65536, f        # launch registers fit before setmaxnreg
    assert f["config"]["persistent_clusters"] >= 1


@needs_cute
def test_compile_gemm_pp():
    f = _compile("gemm_epilogue", "cute:gemm_pp", M=300, N=256, K=256, dtype="bfloat16",
                 act="gelu", bias=1)
    assert f["config"]["tile"] == [128, 128, 64] and f["registers"] * 384 <= 65536, f
    from cutlass_src import gemm_pp as gp

    ptx = gp.compile_only(torch.bfloat16, "gelu", True).ptx
    # one warpgroup per tile: m64n128 wgmmas, each warpgroup's own 128-thread epilogue barrier
    assert "wgmma.mma_async.sync.aligned.m64n128k16" in ptx and ", 128;" in ptx


@needs_cute
def test_gemm_route_switch(monkeypatch):
    """KL_CUTE_GEMM_ROUTE (module constant GEMM_ROUTE) hands cute:gemm's cases to a variant."""
    from backends import cute_layer as cl

    monkeypatch.setattr(cl, "GEMM_ROUTE", "pp")
    f = _compile("gemm_epilogue", M=300, N=256, K=256, dtype="bfloat16", act="gelu", bias=1)
    assert f["config"]["tile"] == [128, 128, 64] and "persistent_ctas" in f["config"]


@needs_cute
def test_gemm_ws_ptx_roles():
    from cutlass_src import gemm_ws as gw

    ptx = gw.compile_only(torch.bfloat16, "relu", True, 256, cluster_m=2).ptx
    for needle in ("setmaxnreg.dec.sync.aligned.u32 \t40", "setmaxnreg.inc.sync.aligned.u32 \t232",
                   "multicast::cluster", "mapa.shared::cluster", "wgmma.mma_async", "stmatrix",
                   "bar.sync \t1, 256"):
        assert needle in ptx, needle


@pytest.mark.parametrize("m_tiles,n_tiles,cluster_m", [(32, 16, 1), (32, 16, 2), (3, 5, 1),
                                                       (3, 5, 2), (17, 2, 2), (1, 1, 2), (9, 7, 1)])
def test_gemm_ws_raster_covers_every_tile_once(m_tiles, n_tiles, cluster_m):
    """Every output tile is owned by exactly one (work unit, CTA rank); with an odd number of
    tile rows in 2x1 clusters only rank 1 of the last cluster row gets rows below M."""
    from cutlass_src.gemm_ws import raster

    cm_tiles = -(-m_tiles // cluster_m)
    seen = []
    for u in range(cm_tiles * n_tiles):
        for r in range(cluster_m):
            pm, pn = raster(u, cm_tiles, n_tiles, cluster_m, r)
            assert 0 <= pn < n_tiles
            if pm >= m_tiles:
                assert r == cluster_m - 1 and pm == m_tiles and m_tiles % cluster_m
                continue
            seen.append((pm, pn))
    assert sorted(seen) == [(i, j) for i in range(m_tiles) for j in range(n_tiles)]


@needs_cute
def test_gemm_ws_declines_like_gemm():
    case = problems.get("gemm_epilogue").case(M=127, N=65, K=129)
    for name in ("cute:gemm_ws", "cute:gemm_ws_c2", "cute:gemm_pp"):
        why = registry.get("gemm_epilogue", name).supports(case)
        assert why and "16-byte" in why


@needs_cute
def test_variant_validation():
    from cutlass_src import gemm_ws as gw
    from cutlass_src import softmax_rows as sr

    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        sr.prepare_softmax_rows(torch.zeros(2, 3), torch.zeros(2, 3))
    a = torch.zeros(4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a: must be a CUDA tensor"):
        gw.prepare_gemm_ws(a, a, None, a, "relu")
    with pytest.raises(ValueError, match="cluster_m"):
        gw.GemmWS("relu", True, cluster_m=4)


@needs_cute
@pytest.mark.skipif(not HAVE_GPU, reason="the empty-shape check runs after the device check")
def test_gemm_rejects_empty_k():
    from cutlass_src import gemm_epilogue as ge

    a = torch.zeros(4, 0, dtype=torch.bfloat16, device="cuda")
    b = torch.zeros(0, 8, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="empty GEMM"):
        ge.validate(a, b, None, torch.zeros(4, 8, dtype=torch.bfloat16, device="cuda"), "relu")


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
@pytest.mark.parametrize("problem,impl_id", list(IDS.items()) + VARIANTS)
def test_verify_suite_gpu(problem, impl_id):
    from harness.verify import verify_case

    prob, im = problems.get(problem), registry.get(problem, impl_id)
    bad = []
    for case in prob.cases("verify"):
        if im.supports(case):
            continue
        c = verify_case(im, prob, case, "cuda", seeds=(0, 1))
        if not c.ok:
            bad.append(f"{case.label}: {c.reason}")
    assert not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE_GPU and HAVE_CUTE), reason="needs a CUDA GPU and the CuTe DSL")
def test_softmax_split_gpu():
    """split: ragged last chunk, strided (scalar) rows, -inf chunks, an all -inf row (NaN, as
    torch), fp16/bf16, several rounds per CTA, and the bounded spin (max_spin = 0: every CTA gives
    up at once and writes NaN instead of waiting)."""
    from cutlass_src import softmax_split as ss

    def check(x):
        y = ss.softmax_split(x)
        ref = torch.softmax(x.double(), -1)
        tol = dict(rtol=1e-4, atol=1e-9) if x.dtype == torch.float32 else dict(rtol=2e-2, atol=1e-5)
        assert torch.allclose(y.double(), ref, equal_nan=True, **tol), (x.shape, x.dtype)
        return y

    for n in (32769, 100_000, 262144, 262147):
        check(torch.randn(7, n, device="cuda"))
    check(torch.randn(600, 131072, device="cuda"))           # 4800 units > 264 CTAs: many rounds
    check(torch.randn(5, 70003, device="cuda")[:, :70000])   # rows not 16-byte aligned: scalar path
    for dt in (torch.float16, torch.bfloat16):
        check(torch.randn(9, 200_000, device="cuda").to(dt))
    x = torch.randn(6, 100_000, device="cuda") * 30
    x[0, :16384] = float("-inf")
    x[1, 50_000:] = float("-inf")
    x[2] = float("-inf")
    x[3, :99_999] = float("-inf")
    x[4] -= 500
    y = check(x)
    assert torch.isnan(y[2]).all() and not torch.isnan(y[[0, 1, 3, 4, 5]]).any()
    y = ss.softmax_split(torch.randn(8, 100_000, device="cuda"), max_spin=0)
    assert torch.isnan(y).all()
    with pytest.raises(ValueError, match="max_spin"):
        ss.softmax_split(torch.randn(8, 100_000, device="cuda"), max_spin=-2)
