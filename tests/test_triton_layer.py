"""Triton layer: every implementation verified (interpreter on the CPU, or the GPU), compiled for
sm_90 without a GPU, its grid described, and its wrappers rejecting bad inputs by name.

CPU budget: the verify cases below are the small / ragged ones that still reach every path
(masked tails, -inf padding, strided and unaligned rows, the persistent row loop, online tiles with
a ragged last tile, ragged M/N/K, bias None, each activation, each dtype)."""
import pytest
import torch

triton = pytest.importorskip("triton")

from harness import problems, registry  # noqa: E402
from harness.errors import Unsupported  # noqa: E402
from harness.verify import verify_case  # noqa: E402
from triton_src import interpreting  # noqa: E402

HAS_GPU = torch.cuda.is_available() and not interpreting()
DEV = "cuda" if HAS_GPU else "cpu"

NAMES = {"vector_add": {"add"}, "softmax": {"fused_row", "persistent", "online", "split", "softmax"},
         "gemm_epilogue": {"gemm", "gemm_tma"}}

#: (problem, impl name, case keywords, repeat the launch)
CASES = [
    ("vector_add", "add", dict(N=98_432, misalign=1), True),
    ("vector_add", "add", dict(N=4099, dtype="float16", misalign=3), True),
    ("vector_add", "add", dict(N=1, dtype="bfloat16"), True),
    ("softmax", "persistent", dict(M=1823, N=781), False),
    ("softmax", "persistent", dict(M=37, N=1000, dtype="bfloat16", layout="strided"), True),
    ("softmax", "persistent", dict(M=64, N=1000, kind="negative"), True),
    ("softmax", "persistent", dict(M=129, N=1), True),
    ("softmax", "fused_row", dict(M=300, N=777, layout="strided_odd"), False),
    ("softmax", "fused_row", dict(M=64, N=1000, dtype="float16", kind="large"), True),
    ("softmax", "fused_row", dict(M=4, N=32_768, kind="neginf"), True),
    ("softmax", "online", dict(M=3, N=262_147), False),
    ("softmax", "online", dict(M=2, N=131_072, dtype="bfloat16"), True),
    ("softmax", "online", dict(M=64, N=1000, dtype="bfloat16", kind="neginf"), True),
    ("softmax", "online", dict(M=37, N=1000, dtype="float16", layout="strided"), True),
    ("softmax", "split", dict(M=1, N=98_432), False),
    ("softmax", "split", dict(M=2, N=131_072, dtype="bfloat16"), True),
    ("softmax", "split", dict(M=3, N=40_000, dtype="float16", layout="strided_odd", kind="neginf"), True),
    ("softmax", "softmax", dict(M=1, N=98_432), True),
    ("softmax", "softmax", dict(M=3, N=4097, dtype="float16"), True),
    ("softmax", "softmax", dict(M=300, N=777, layout="strided_odd"), True),
    ("gemm_epilogue", "gemm", dict(M=127, N=65, K=129, dtype="bfloat16", act="gelu"), True),
    ("gemm_epilogue", "gemm", dict(M=127, N=65, K=129, dtype="float16", act="relu"), True),
    ("gemm_epilogue", "gemm", dict(M=1, N=17, K=33, dtype="bfloat16", act="none", bias=0), True),
    ("gemm_epilogue", "gemm", dict(M=256, N=256, K=256, dtype="float16", act="gelu", bias=0), True),
    # TMA-legal (K, N multiples of 8) but ragged: partial M and N tiles, K not a multiple of BLOCK_K
    ("gemm_epilogue", "gemm_tma", dict(M=77, N=40, K=56, dtype="bfloat16", act="gelu"), True),
    ("gemm_epilogue", "gemm_tma", dict(M=77, N=40, K=56, dtype="float16", act="relu", bias=0), True),
    ("gemm_epilogue", "gemm_tma", dict(M=77, N=40, K=56, dtype="bfloat16", act="none", bias=0), False),
    ("gemm_epilogue", "gemm_tma", dict(M=77, N=40, K=56, dtype="float16", act="gelu"), False),
    ("gemm_epilogue", "gemm_tma", dict(M=129, N=264, K=72, dtype="float16", act="relu"), False),
]


def _impl(problem, name):
    return registry.get(problem, f"triton:{name}")


def test_registered_names():
    for problem, names in NAMES.items():
        got = {i.name for i in registry.select(problem=problem, layer="triton")}
        assert got == names, (problem, got)
    for impl in registry.select(layer="triton"):
        assert impl.available() is None
        assert set(impl.devices) == {"cuda", "cpu"}
        assert impl.sources and impl.compile_only_fn and "grid" in impl.extra


@pytest.mark.parametrize("problem,name,kw,repeat", CASES,
                         ids=[f"{p}-{n}-" + "-".join(f"{k}{v}" for k, v in kw.items()) for p, n, kw, _ in CASES])
def test_verify(problem, name, kw, repeat):
    prob = problems.get(problem)
    case = prob.case(**kw)
    impl = _impl(problem, name)
    assert impl.supports(case) is None
    c = verify_case(impl, prob, case, DEV, seeds=(0,), repeat=repeat)
    assert c.ok, c.reason


def test_declines_long_rows_with_reason():
    case = problems.get("softmax").case(M=2, N=65_536)
    for name in ("fused_row", "persistent"):
        why = _impl("softmax", name).supports(case)
        assert why and "online" in why
        with pytest.raises(Unsupported):
            _impl("softmax", name).compile_only_fn(case)
    assert _impl("softmax", "online").supports(case) is None
    assert _impl("softmax", "split").supports(case) is None
    assert _impl("softmax", "softmax").supports(case) is None


def test_softmax_split_declines_one_chunk_rows_with_reason():
    case = problems.get("softmax").case(M=2, N=16_384)
    why = _impl("softmax", "split").supports(case)
    assert why and "fused_row" in why
    with pytest.raises(Unsupported):
        _impl("softmax", "split").compile_only_fn(case)


COMPILE = [
    ("vector_add", "add", dict(N=2 ** 20)),
    ("softmax", "fused_row", dict(M=4096, N=4096)),
    ("softmax", "persistent", dict(M=4096, N=1024, dtype="bfloat16")),
    ("softmax", "online", dict(M=8, N=262_144, layout="strided_odd")),
    ("softmax", "split", dict(M=8192, N=131_072)),
    ("softmax", "split", dict(M=8192, N=262_144, dtype="bfloat16")),
    ("softmax", "softmax", dict(M=8, N=1000, dtype="float16")),
    ("gemm_epilogue", "gemm", dict(M=4096, N=4096, K=4096, act="gelu")),
    ("gemm_epilogue", "gemm_tma", dict(M=4096, N=4096, K=4096)),
]


@pytest.mark.parametrize("problem,name,kw", COMPILE, ids=[f"{p}-{n}" for p, n, _ in COMPILE])
def test_compile_only_sm90(problem, name, kw):
    """Compiles for sm_90 with no GPU, also in this interpreter process (CPU CI)."""
    case = problems.get(problem).case(**kw)
    facts = _impl(problem, name).compile_only_fn(case)
    assert isinstance(facts["registers"], int) and 0 < facts["registers"] <= 255
    assert facts["spills"] == 0
    assert isinstance(facts["smem"], int) and facts["smem"] >= 0
    assert facts["target"].startswith("sm_90")
    assert facts["compile_s"] >= 0


def test_compile_only_in_interpreter_process_leaves_interpreter_working():
    """A compile in a TRITON_INTERPRET=1 process must not break the interpreter afterwards."""
    if not interpreting():
        pytest.skip("only meaningful under TRITON_INTERPRET=1")
    from triton_src.vector_add import vector_add
    _impl("softmax", "online").compile_only_fn(problems.get("softmax").case(M=2, N=5000))
    x, y = torch.randn(77), torch.randn(77)
    assert torch.equal(vector_add(x, y), x + y)


@pytest.mark.parametrize("problem,name,kw", [
    ("vector_add", "add", dict(N=98_432)),
    ("softmax", "fused_row", dict(M=1823, N=781)),
    ("softmax", "persistent", dict(M=4096, N=1024)),
    ("softmax", "online", dict(M=3, N=262_147)),
    ("softmax", "split", dict(M=8192, N=262_147)),
    ("softmax", "softmax", dict(M=3, N=262_147)),
    ("gemm_epilogue", "gemm", dict(M=1025, N=769, K=513)),
    ("gemm_epilogue", "gemm_tma", dict(M=1025, N=768, K=512)),
])
def test_grid_description(problem, name, kw):
    case = problems.get(problem).case(**kw)
    g = _impl(problem, name).extra["grid"](case)
    assert len(g["grid"]) == 3 and g["grid"][0] >= 1
    assert g["programs"] and g["programs"][0]["pid"] == [0, 0, 0]
    for p in g["programs"]:
        assert p["kept"] >= 0 and p["dropped"] >= 0 and p["covers"]
    if problem == "vector_add":
        assert sum(p["kept"] for p in g["programs"]) <= case.N
        assert g["programs"][-1]["dropped"] == g["grid"][0] * g["block"]["BLOCK"] - case.N


# -- bad inputs: clear errors naming the argument -----------------------------------------------
def test_vector_add_bad_inputs():
    from triton_src.vector_add import vector_add
    x = torch.randn(10)
    with pytest.raises(TypeError, match="x"):
        vector_add([1.0], x)
    with pytest.raises(TypeError, match="y"):
        vector_add(x, torch.randn(10, dtype=torch.float64))
    with pytest.raises(ValueError, match="y"):
        vector_add(x, torch.randn(11))
    with pytest.raises(TypeError, match="x"):
        vector_add(torch.arange(10), torch.arange(10))
    with pytest.raises(ValueError, match="x"):
        vector_add(torch.randn(20)[::2], torch.randn(10))
    with pytest.raises(ValueError, match="out"):
        vector_add(x, x, torch.empty(9))
    with pytest.raises(ValueError, match="block"):
        vector_add(x, x, block=1000)


def test_softmax_bad_inputs():
    from triton_src import softmax as S
    with pytest.raises(ValueError, match="x"):
        S.softmax(torch.randn(10))
    with pytest.raises(TypeError, match="x"):
        S.softmax_online("not a tensor")
    with pytest.raises(ValueError, match="x"):
        S.softmax_fused_row(torch.randn(8, 4).t())
    with pytest.raises(ValueError, match="out"):
        S.softmax_online(torch.randn(4, 8), torch.empty(4, 9))
    with pytest.raises(TypeError, match="out"):
        S.softmax_online(torch.randn(4, 8), torch.empty(4, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match="x"):
        S.softmax_fused_row(torch.randn(1, 65_536))
    with pytest.raises(ValueError, match="rows"):
        S.softmax_persistent(torch.randn(4, 8), rows=3)
    with pytest.raises(ValueError, match="x"):
        S.softmax(torch.randn(0, 8))


def test_softmax_split_bad_inputs():
    from triton_src import softmax as S
    x = torch.randn(4, 1000, device=DEV)
    with pytest.raises(TypeError, match="x"):
        S.softmax_split(x.double())
    with pytest.raises(ValueError, match="out"):
        S.softmax_split(x, torch.empty(4, 999, device=DEV))
    with pytest.raises(ValueError, match="chunk"):
        S.softmax_split(x, chunk=300)
    with pytest.raises(ValueError, match="chunk"):
        S.softmax_split(x, chunk=2 * S.MAX_ON_CHIP)
    with pytest.raises(ValueError, match="programs"):
        S.softmax_split(x, chunk=256, programs=6)  # C = 4: a row's chunks would span two rounds
    with pytest.raises(ValueError, match="programs"):
        S.softmax_split(x, chunk=256, programs=0)
    too_many = 4 * (S.INTERPRETER_SPLIT_TEAMS + 1) if interpreting() else 4 * 10 ** 6
    with pytest.raises(ValueError, match="programs"):  # more than run at once: would deadlock
        S.softmax_split(x, chunk=256, programs=too_many)


# -- split: the cross-program protocol ------------------------------------------------------------
def _softmax_split_check(x, **kw):
    from triton_src import softmax as S
    y = S.softmax_split(x, **kw)
    ref = torch.softmax(x.double(), dim=-1)
    tol = {torch.float32: (1e-5, 1e-7), torch.float16: (2e-3, 1e-6), torch.bfloat16: (1.6e-2, 1e-5)}
    rtol, atol = tol[x.dtype]
    assert y.dtype == x.dtype and y.shape == x.shape
    assert torch.equal(y.isnan(), ref.isnan())
    torch.testing.assert_close(y.double(), ref, rtol=rtol, atol=atol, equal_nan=True)
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_softmax_split_rows_over_chunks(dtype):
    """Ragged N (the last of 5 chunks holds 40 columns), M = 7 rows over two teams of 5
    programs: rows alternate between teams, four rounds, the last one half empty."""
    x = (3 * torch.randn(7, 1064, device=DEV)).to(dtype)
    _softmax_split_check(x, chunk=256)


def test_softmax_split_strided_rows_and_neginf():
    """A column slice of a wider tensor (row stride 1100, not 16-byte aligned at offset 3), -inf
    scattered, a chunk of only -inf (its partial is (-inf, 0)), a row whose finite entries are all
    below -100 (exp of them alone underflows), a row of only -inf (NaN, as torch)."""
    inf = float("inf")
    wide = torch.randn(6, 1100, device=DEV)
    x = wide[:, 3:1003]
    x[0, ::7] = -inf
    x[1, 256:512] = -inf
    x[2] = -200.0 - torch.rand(1000, device=DEV)
    x[2, :700] = -inf
    x[3] = -inf
    x[4, 999] = 1e4
    y = _softmax_split_check(x, chunk=256)
    assert y[3].isnan().all() and not y[[0, 1, 2, 4, 5]].isnan().any()
    from triton_src import softmax as S
    out_wide = torch.full((6, 1003), 7.0, device=DEV)
    S.softmax_split(x, out_wide[:, 3:], chunk=256)  # a strided out too
    torch.testing.assert_close(out_wide[:, 3:], y, rtol=0, atol=0, equal_nan=True)
    assert (out_wide[:, :3] == 7.0).all()


def test_softmax_split_one_team_many_rounds_and_repeat():
    """programs = C: one team does every row in turn (M rounds); a second call reuses the cached
    counters, so it also checks that they are zeroed per call."""
    from triton_src import softmax as S
    x = torch.randn(9, 300, device=DEV)
    a = _softmax_split_check(x, chunk=128, programs=3)
    b = S.softmax_split(x, chunk=128, programs=3)
    assert torch.equal(a, b)


@pytest.mark.parametrize("prefetch", [False, True])
def test_softmax_split_bounded_spin_writes_nan_not_hang(prefetch):
    """A grid that is not a multiple of C (here 2 programs for C = 3 chunks a row; the wrapper
    refuses it) puts a row's chunks in different rounds: program 0 waits in round 0 for a chunk
    that it would itself do in round 1. The waiter gives up after max_spin polls and writes NaN;
    it waits no more in later rounds, so the launch returns quickly."""
    from triton_src import softmax as S
    M, N = 4, 600
    x = torch.randn(M, N, device=DEV)
    out = torch.zeros_like(x)
    cfg = S.split_config(N, 4, chunk=256, prefetch=prefetch)
    assert cfg["C"] == 3
    slots = torch.zeros(M * cfg["C"], dtype=torch.int64, device=DEV)
    S._launch_split(x, out, slots, M, N, cfg, 2, 64)
    assert out[0].isnan().any()
    assert (slots != 0).all()  # every unit still published its partial


@pytest.mark.parametrize("prefetch", [False, True])
def test_softmax_split_prefetch(prefetch):
    """Both builds: the next unit's chunk loaded before the wait, or after it."""
    x = torch.randn(5, 700, device=DEV)
    x[2, 100:] = float("-inf")
    _softmax_split_check(x, chunk=128, prefetch=prefetch)
    _softmax_split_check(x, chunk=128, prefetch=prefetch, programs=6)


def test_softmax_dispatcher_split_switch(monkeypatch):
    """On by default (the H200 sweep: split beat online at every long row); one constant sends
    those rows back to online, and the dispatcher's compile_only / grid follow it."""
    from triton_src import softmax as S
    assert [S.choose_variant(n, 4) for n in (1024, 32_768, 32_769, 262_144)] == \
        ["persistent", "fused_row", "split", "split"]
    monkeypatch.setattr(S, "SPLIT_MIN_ROW_BYTES", None)
    assert S.choose_variant(131_072, 4) == "online"
    monkeypatch.setattr(S, "SPLIT_MIN_ROW_BYTES", 0)
    g = _impl("softmax", "softmax").extra["grid"](problems.get("softmax").case(M=64, N=131_072))
    assert g["variant"] == "split" and g["grid"][0] % 8 == 0


def test_softmax_split_compile_default_fits_two_programs_per_sm():
    """The fp32 default, 16384 columns over 8 warps: 64 values a thread; with at most 128
    registers (triton 3.6: 118-120, 3.9: 110) and no spills two programs share an SM, so that
    while one waits for its partners the other loads (one an SM measured 61-67 % of copy on the
    H200, two 85-87 %)."""
    case = problems.get("softmax").case(M=8192, N=262_144)
    facts = _impl("softmax", "split").compile_only_fn(case)
    assert facts["config"]["CHUNK"] == 16384 and facts["config"]["num_warps"] == 8
    assert facts["spills"] == 0 and facts["registers"] <= 128, facts


def test_gemm_bad_inputs():
    from triton_src.gemm_epilogue import gemm_epilogue
    a = torch.randn(8, 16, dtype=torch.float16)
    b = torch.randn(16, 4, dtype=torch.float16)
    with pytest.raises(TypeError, match="a"):
        gemm_epilogue(a.float(), b)
    with pytest.raises(TypeError, match="b"):
        gemm_epilogue(a, b.bfloat16())
    with pytest.raises(ValueError, match="b"):
        gemm_epilogue(a, torch.randn(15, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match="act"):
        gemm_epilogue(a, b, None, act="tanh")
    with pytest.raises(ValueError, match="bias"):
        gemm_epilogue(a, b, torch.randn(5, dtype=torch.float16))
    with pytest.raises(ValueError, match="out"):
        gemm_epilogue(a, b, None, "relu", torch.empty(8, 5, dtype=torch.float16))


def test_gemm_tma_bad_inputs():
    from triton_src.gemm_epilogue import gemm_epilogue_tma
    a = torch.randn(8, 16, dtype=torch.float16, device=DEV)
    b = torch.randn(16, 8, dtype=torch.float16, device=DEV)
    # the checks shared with gemm_epilogue
    with pytest.raises(TypeError, match="b"):
        gemm_epilogue_tma(a, b.bfloat16())
    with pytest.raises(ValueError, match="act"):
        gemm_epilogue_tma(a, b, None, act="tanh")
    with pytest.raises(ValueError, match="bias"):
        gemm_epilogue_tma(a, b, torch.randn(5, dtype=torch.float16, device=DEV))
    # what TMA descriptors need: 16-byte rows, a unit inner stride, a 16-byte aligned base
    with pytest.raises(ValueError, match=r"^a: row stride 30 .*K a multiple of 8"):
        gemm_epilogue_tma(torch.randn(8, 30, dtype=torch.float16, device=DEV),
                          torch.randn(30, 8, dtype=torch.float16, device=DEV))
    with pytest.raises(ValueError, match=r"^b: row stride 12 .*N a multiple of 8"):
        gemm_epilogue_tma(a, torch.randn(16, 12, dtype=torch.float16, device=DEV))
    with pytest.raises(ValueError, match=r"^out: column stride"):
        gemm_epilogue_tma(a, b, None, "relu", torch.empty(8, 8, dtype=torch.float16, device=DEV).t())
    with pytest.raises(ValueError, match=r"^a: base address"):
        flat = torch.randn(8 * 16 + 1, dtype=torch.float16, device=DEV)
        gemm_epilogue_tma(flat[1:].view(8, 16), b)


def test_gemm_tma_declines_unaligned_k_with_reason():
    case = problems.get("gemm_epilogue").case(M=64, N=64, K=30)
    impl = _impl("gemm_epilogue", "gemm_tma")
    why = impl.supports(case)
    assert why and why.startswith("a: row stride 30") and "triton:gemm" in why
    assert impl.extra["grid"](case) == {"unsupported": why}
    with pytest.raises(Unsupported, match="row stride 30"):
        impl.compile_only_fn(case)
    with pytest.raises(Unsupported, match="row stride 30"):  # prepare declines too
        verify_case(impl, problems.get("gemm_epilogue"), case, DEV, seeds=(0,))
    assert _impl("gemm_epilogue", "gemm").supports(case) is None


@pytest.mark.parametrize("cfg", ["subtile", "whole", "unflattened"])
def test_gemm_tma_pinned_configs(cfg):
    """The epilogue's store paths (two halves or one tile) and the unflattened loop, each pinned."""
    from harness.verify import check_output
    from triton_src import gemm_epilogue as G
    if interpreting():
        config = {"subtile": G._tma_cfg(32, 32, 16, 1, 4, subtile=True),
                  "whole": G._tma_cfg(64, 32, 32, 1, 4),
                  "unflattened": G._tma_cfg(32, 64, 32, 1, 4, subtile=True, flatten=False)}[cfg]
    else:
        config = {"subtile": G.TMA_CONFIGS[0], "whole": G.TMA_CONFIGS[1], "unflattened": G.TMA_CONFIGS[6]}[cfg]
    prob = problems.get("gemm_epilogue")
    for dt, act, bias in (("bfloat16", "gelu", 1), ("float16", "relu", 0)):
        case = prob.case(M=77, N=40, K=56, dtype=dt, act=act, bias=bias)
        a, b, bb = prob.make_inputs(case, DEV, 0)
        c = check_output(prob, case, G.gemm_epilogue_tma(a, b, bb, act, config=config),
                         prob.reference((a, b, bb), case))
        assert c.ok, (dt, act, bias, c.reason)


def test_gemm_tma_grid_covers_every_tile_once():
    """The persistent grid's programs together keep exactly M x N elements (every C tile once)."""
    if not interpreting():
        pytest.skip("the interpreter's 4-program grid lists every program")
    case = problems.get("gemm_epilogue").case(M=77, N=40, K=56)
    g = _impl("gemm_epilogue", "gemm_tma").extra["grid"](case)
    assert g["grid"][0] == len(g["programs"]) == 4
    assert sum(p["kept"] for p in g["programs"]) == case.M * case.N


def test_tune_triton_gemm_script_cpu(capsys):
    """scripts/tune_triton_gemm.py without its GPU: the plan, and one small problem's checks,
    table and verdict with a stand-in timer (the GPU run is the lead's one call)."""
    if HAS_GPU:
        pytest.skip("the CPU stand-in run; on a GPU run the script itself")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import tune_triton as T
    import tune_triton_gemm as TG
    assert TG.main(["--dry-run"]) == 0
    assert "8192^3 bf16 gelu+bias: torch.mm, gelu(addmm), triton:gemm, triton:gemm_tma" in capsys.readouterr().out
    T.RESULTS = {}
    r = TG.run_problem(64, "gelu", device="cpu", timer=lambda fn: {"ms": 1.0, "iqr_ms": 0.0, "n": 20})
    pinned = [k for k in r["rows"] if k.startswith("gemm_tma pinned")]
    assert len(pinned) == len(TG.G.TMA_CONFIGS)
    for name, row in r["rows"].items():
        assert name == "torch.mm" or row["ok"], (name, row)
        assert row["TFLOPs"] > 0
    assert r["verdict"]["tma_over_gemm"] == 1.0 and not T.RESULTS.get("errors")


@pytest.mark.skipif(not interpreting(), reason="checks the CPU-without-interpreter message")
def test_cuda_tensor_rejected_under_interpreter():
    from triton_src import check_tensor
    with pytest.raises(ValueError, match="x"):
        check_tensor("x", torch.empty(1, device="meta"))


# -- GPU: the whole verify suite ------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("problem", sorted(NAMES))
def test_verify_suite_gpu(problem):
    prob = problems.get(problem)
    bad = []
    for impl in registry.select(problem=problem, layer="triton"):
        for case in prob.cases("verify"):
            if impl.supports(case):
                continue
            c = verify_case(impl, prob, case, "cuda")
            if not c.ok:
                bad.append(f"{impl.id} {case.label}: {c.reason}")
    assert not bad, "\n".join(bad)
