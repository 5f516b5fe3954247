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

NAMES = {"vector_add": {"add"}, "softmax": {"fused_row", "persistent", "online", "softmax"},
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
    assert _impl("softmax", "softmax").supports(case) is None


COMPILE = [
    ("vector_add", "add", dict(N=2 ** 20)),
    ("softmax", "fused_row", dict(M=4096, N=4096)),
    ("softmax", "persistent", dict(M=4096, N=1024, dtype="bfloat16")),
    ("softmax", "online", dict(M=8, N=262_144, layout="strided_odd")),
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
