"""Helion layer: ids and roles, the planner's rules, the twins' settings (Helion's default
configuration, never autotuning), compile-only of the generated Triton for sm_90 (no GPU needed),
the generated code for inspect, input validation, and on a GPU the verify suite."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from harness import problems, registry

HAVE_HELION = importlib.util.find_spec("helion") is not None
needs_helion = pytest.mark.skipif(not HAVE_HELION, reason="helion not installed")
IDS = {"helion:vector_add": "default", "helion:vector_add_simple": "simple",
       "helion:softmax": "default", "helion:softmax_simple": "simple", "helion:softmax_online": "variant",
       "helion:gemm_epilogue": "default", "helion:gemm_epilogue_simple": "simple",
       "helion:gemm_epilogue_splitk": "variant"}


def _impl(iid, problem=None):
    registry.load_backends()
    for i in registry.select(layer="helion"):
        if i.id == iid and (problem is None or i.problem == problem):
            return i
    raise KeyError(iid)


def test_registered_ids_and_roles():
    registry.load_backends()
    got = {i.id: i.role for i in registry.select(layer="helion")}
    assert got == IDS


@needs_helion
def test_twins_take_helions_default_configuration_without_autotuning():
    from helion_src import gemm_epilogue, softmax, softmax_online, tuned, vector_add
    for k in (vector_add.vector_add, softmax.softmax, softmax_online.softmax_online,
              gemm_epilogue.gemm_epilogue, tuned.vector_add, tuned.softmax_rows,
              tuned.softmax_online, tuned.gemm_epilogue):
        assert k.settings.autotune_effort == "none"
        assert not k.configs
    assert tuned.gemm_epilogue.settings.static_shapes is False
    assert tuned.gemm_epilogue.fn is gemm_epilogue.gemm_epilogue.fn


@needs_helion
def test_dispatch_rules():
    from helion_src import dispatch
    assert dispatch.plan_vector_add(1000, 2).rule == "vector_add/16bit"
    assert dispatch.plan_vector_add(1000, 4).rule == "vector_add/32bit"
    short = dispatch.plan_softmax(32768, 512, 2)
    assert short.variant == "rows" and short.config["reduction_loops"] == [None]
    assert short.config["block_sizes"][0] * 512 <= 1024
    assert dispatch.plan_softmax(1, 1, 4).config["block_sizes"] == [1]
    assert dispatch.plan_softmax(4096, 32768, 4).variant == "rows"
    assert dispatch.plan_softmax(4096, 32768, 4).config["num_warps"] == 32
    assert dispatch.plan_softmax(4096, 2048, 2).config["num_warps"] == 4
    assert dispatch.plan_softmax(4096, 32769, 4).variant == "online"
    assert dispatch.plan_softmax(4096, 128256, 2).variant == "online"
    assert dispatch.gemm_class(1) == dispatch.gemm_class(64) == "gemm/small_m"
    assert dispatch.gemm_class(4096, 4096) == "gemm/128x256"
    assert dispatch.gemm_class(256, 16384) == "gemm/128x256"      # 128 tiles fill the SMs
    assert dispatch.gemm_class(512, 4096) == "gemm/128x128"
    assert dispatch.gemm_class(256, 4096) == "gemm/64x128"
    assert dispatch.gemm_class(100, 256) == "gemm/64x128"         # nothing fills: the narrowest
    assert dispatch.gemm_class(2050, 1001, aligned=False) == "gemm/128x128_unaligned"
    assert dispatch.gemm_class(16, aligned=False) == "gemm/small_m"
    assert dispatch.gemm_class(1024, 4096) == "gemm/128x256"
    assert dispatch.gemm_class(1024, 4096, sms=264) == "gemm/128x128"  # more SMs, narrower tiles
    sk = dispatch.plan_gemm_splitk(16, 6144, 4096, 2, sms=132)
    bm, bn, chunk, bk = sk.config["block_sizes"]
    splits = -(-4096 // chunk)
    assert chunk % bk == 0 and splits >= 2
    assert -(-16 // bm) * -(-6144 // bn) * splits >= 132  # at least one program per SM
    assert dispatch.plan_gemm_splitk(4096, 4096, 512, 2).config["block_sizes"][2] >= 512  # no split
    assert dispatch.plan_gemm(16, 6144, 4096, 2).variant == "tiled"
    assert dispatch.reachable("gemm_epilogue") == ("tiled",)
    for key, cfg in dispatch.CONFIGS.items():
        if key.startswith("gemm/"):
            assert len(cfg["block_sizes"]) == 3
        if key == "softmax/online":
            assert len(cfg["block_sizes"]) == 3


def _case(problem, **kw):
    return problems.get(problem).case(**kw)


@needs_helion
@pytest.mark.parametrize("iid,problem,kw", [
    ("helion:vector_add", "vector_add", dict(N=4099, dtype="bfloat16", misalign=1)),
    ("helion:vector_add_simple", "vector_add", dict(N=127, dtype="float32")),
    ("helion:softmax", "softmax", dict(M=37, N=1000, dtype="float32", layout="strided")),
    ("helion:softmax", "softmax", dict(M=3, N=262_147, dtype="float32")),
    ("helion:softmax_simple", "softmax", dict(M=33, N=3001, dtype="bfloat16", layout="strided_odd")),
    ("helion:gemm_epilogue", "gemm_epilogue", dict(M=1, N=17, K=33, dtype="bfloat16", act="gelu")),
    ("helion:gemm_epilogue", "gemm_epilogue", dict(M=16, N=520, K=8192, dtype="float16", act="none")),
    ("helion:gemm_epilogue", "gemm_epilogue", dict(M=4096, N=1001, K=136, dtype="float16", act="relu", bias=0)),
    ("helion:gemm_epilogue_simple", "gemm_epilogue", dict(M=127, N=65, K=129, dtype="float16", act="gelu")),
    ("helion:gemm_epilogue_splitk", "gemm_epilogue", dict(M=7, N=4000, K=2048, dtype="bfloat16", act="gelu")),
])
def test_compile_only_sm90(iid, problem, kw):
    impl = _impl(iid, problem)
    facts = impl.compile_only_fn(_case(problem, **kw))
    assert facts["target"].startswith("sm_90")
    assert facts["kernel"].startswith("_helion_")
    assert isinstance(facts["registers"], int) and 0 < facts["registers"] <= 255
    assert facts["spills"] == 0
    assert facts["config"]["num_warps"] in (1, 2, 4, 8, 16, 32)


@needs_helion
def test_generated_code_has_the_epilogue_and_runtime_sizes():
    from backends import helion_layer as hl
    case = _case("gemm_epilogue", M=129, N=264, K=72, dtype="bfloat16", act="gelu")
    kernel, args, cfg = _impl("helion:gemm_epilogue").extra["helion_code"](case)
    _, config, code = hl.generated(kernel, args, cfg)
    assert "tl.dot" in code and "tanh" in code and "bias" in code
    assert "< 264" not in code  # sizes are runtime arguments in the tuned kernel
    no_bias = _case("gemm_epilogue", M=129, N=264, K=72, dtype="bfloat16", act="none", bias=0)
    kernel, args, cfg = _impl("helion:gemm_epilogue").extra["helion_code"](no_bias)
    code = hl.generated(kernel, args, cfg)[2]
    assert "bias" not in code.split("@triton.jit")[1].split("def ")[1].split(")")[0]
    assert "tanh" not in code


@needs_helion
def test_online_softmax_code_loops_over_columns():
    from backends import helion_layer as hl
    case = _case("softmax", M=4, N=40_000, dtype="float16", layout="strided_odd")
    kernel, args, cfg = _impl("helion:softmax").extra["helion_code"](case)
    code = hl.generated(kernel, args, cfg)[2]
    assert code.count("tl.range(") == 2  # the (max, sum) pass and the write pass


@needs_helion
def test_input_validation():
    from backends import helion_layer as hl
    x = torch.randn(8)
    with pytest.raises(ValueError, match="y"):
        hl.check_vector_add(x, torch.randn(8).view(2, 4), x)
    with pytest.raises(TypeError, match="x"):
        hl.check_vector_add(torch.arange(8), torch.arange(8), torch.arange(8))
    with pytest.raises(ValueError, match="out"):
        hl.check_softmax(torch.randn(3, 4), torch.randn(3, 5))
    a, b = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8, 6, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="act"):
        hl.check_gemm(a, b, None, torch.empty(4, 6, dtype=torch.bfloat16), "silu")
    with pytest.raises(ValueError, match="bias"):
        hl.check_gemm(a, b, torch.randn(5, dtype=torch.bfloat16), torch.empty(4, 6, dtype=torch.bfloat16), "relu")
    with pytest.raises(TypeError, match="a"):
        hl.check_gemm(a.float(), b, None, torch.empty(4, 6), "relu")


@pytest.mark.gpu
@needs_helion
@pytest.mark.parametrize("iid,problem", [
    ("helion:vector_add", "vector_add"), ("helion:softmax", "softmax"), ("helion:gemm_epilogue", "gemm_epilogue"),
    ("helion:vector_add_simple", "vector_add"), ("helion:softmax_simple", "softmax"),
    ("helion:gemm_epilogue_simple", "gemm_epilogue")])
def test_gpu_verify_suite(iid, problem):
    from harness.verify import verify_case
    prob, impl = problems.get(problem), registry.get(problem, iid)
    bad = []
    for case in prob.cases("verify"):
        assert not impl.supports(case), f"{iid} declined {case.id}"
        c = verify_case(impl, prob, case, "cuda", seeds=(0, 1))
        if not c.ok:
            bad.append(f"{case.id}: {c.reason}")
    assert not bad, "\n".join(bad)
