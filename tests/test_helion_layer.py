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
    assert dispatch.plan_gemm(256, 4096, 14336, 2).variant == "tiled"  # split-K is off by default
    for key, cfg in dispatch.CONFIGS.items():
        if key.startswith("gemm/"):
            assert len(cfg["block_sizes"]) == 3
        if key == "softmax/online":
            assert len(cfg["block_sizes"]) == 3


def _case(problem, **kw):
    return problems.get(problem).case(**kw)


@needs_helion
def test_vector_add_pieces_rule():
    """Lengths Triton specialises as multiples of 16, or shorter than a block: one launch. Any
    other length: a body of whole blocks (a multiple of 16) and a tail of less than a block."""
    from helion_src import dispatch
    for n in (16, 4096, 1 << 24, 12345680):
        assert dispatch.plan_vector_add(n, 2).pieces is None
    assert dispatch.plan_vector_add(4095, 2).pieces is None      # less than one 16-bit block
    assert dispatch.plan_vector_add(2047, 4).pieces is None
    for n, elem in ((12345679, 2), (134217729, 4), (4097, 4), (4096 * 3 + 5, 2), (1000003, 2)):
        plan = dispatch.plan_vector_add(n, elem)
        block = plan.config["block_sizes"][0]
        (lo, body), (start, end) = plan.pieces
        assert lo == 0 and start == body and end == n
        assert body % block == 0 and body % 16 == 0 and 0 < n - body < block


@needs_helion
def test_vector_add_body_has_16_byte_accesses():
    """The defect the pieces fix, in the sm_90 PTX: over an odd length every access is one 2-byte
    element (ld.global.b16); the body of whole blocks loads and stores 16-byte vectors."""
    import re

    from backends import helion_layer as hl
    from helion_src import dispatch
    n = 12345679
    args = tuple(torch.empty(n, dtype=torch.float16, device="meta") for _ in range(3))
    plan = dispatch.plan_vector_add(n, 2)

    def accesses(a):
        ptx = hl._compile_facts(plan.kernel, a, plan.config, keep_ptx=True)["ptx"]
        return set(re.findall(r"(?:ld|st)\.global(?:\.[\w:]+)*", ptx))
    single = accesses(args)
    assert "ld.global.b16" in single and not any(".v4" in a for a in single)
    body, tail = hl._piece_args(plan, args)
    got = accesses(body)
    assert "ld.global.v4.b32" in got and "st.global.v4.b32" in got and "ld.global.b16" not in got
    assert tail[0].numel() < plan.config["block_sizes"][0]


needs_interpreter = pytest.mark.skipif(
    not HAVE_HELION or __import__("os").environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="runs Helion's generated Triton under Triton's interpreter (TRITON_INTERPRET=1, no GPU)")


def _interpret(iid, problem, seed=0, **kw):
    """``iid`` on CPU tensors under the interpreter, judged by the harness's checker. (bf16 is left
    out: the interpreter adds bf16 values as raw bits; libdevice's exp and tanh are stubs there,
    so the softmax and the GELU epilogue cannot run under it.)"""
    from harness.verify import judge
    prob, impl = problems.get(problem), _impl(iid, problem)
    case = prob.case(**kw)
    inputs = prob.make_inputs(case, "cpu", seed)
    if problem == "gemm_epilogue":
        out = torch.full((inputs[0].shape[0], inputs[1].shape[1]), float("nan"), dtype=inputs[0].dtype)
    else:
        out = torch.full_like(inputs[0], float("nan"))
    launch = impl.prepare(case, inputs, out)
    c = judge(impl, prob, case, seed, inputs, out, "cpu")
    assert c.ok, f"{iid} {kw}: {c.reason}"
    return launch, out


@needs_interpreter
@pytest.mark.parametrize("kw", [dict(N=4096 * 3 + 5, dtype="float16"), dict(N=4097, dtype="float32"),
                                dict(N=2048 * 2 + 3, dtype="float32", misalign=1)])
def test_vector_add_pieces_verify_under_interpreter(kw):
    launch, _ = _interpret("helion:vector_add", "vector_add", **kw)
    assert len(launch.info["pieces"]) == 2


@needs_helion
def test_splitk_rule():
    """Split-K only where the split-K tile's output tiles leave SMs idle, with the longest power-of-
    two chunk whose programs fill them, never shorter than SPLITK_MIN_CHUNK nor more than
    SPLITK_MAX_CHUNKS chunks."""
    from helion_src import dispatch as d
    bm, bn = d.SPLITK["gemm/splitk"]["block_sizes"][:2]
    for m, n, k in ((256, 4096, 14336), (128, 8192, 8192), (256, 6144, 4096), (16, 4096, 14336),
                    (256, 1536, 8192), (1, 4096, 4096)):
        chunk = d.splitk_chunk(m, n, k, 132)
        assert chunk is not None, (m, n, k)
        tiles, chunks = -(-m // bm) * -(-n // bn), -(-k // chunk)
        assert chunk & (chunk - 1) == 0 and chunk >= d.SPLITK_MIN_CHUNK and chunk < k
        assert 2 <= chunks <= d.SPLITK_MAX_CHUNKS and tiles * chunks >= d.FILL * 132
        if chunk * 2 < k:  # the longest chunk that fills: twice as long would not
            assert tiles * -(-k // (chunk * 2)) < d.FILL * 132
    assert d.splitk_chunk(4096, 4096, 4096) is None      # the tiles alone fill the SMs
    assert d.splitk_chunk(256, 4096, 768) is None        # K too short to cut into 1024-long chunks
    assert d.splitk_chunk(64, 64, 8192) is None          # even 8 chunks of one tile leave SMs idle
    assert d.splitk_chunk(256, 4096, 14336, sms=66) is None        # 64 tiles fill 66 SMs
    assert d.splitk_chunk(256, 4096, 14336, sms=100) == 8192 and d.splitk_chunk(256, 4096, 14336, sms=200) == 4096


@needs_helion
def test_plan_gemm_takes_splitk_only_when_switched_on(monkeypatch):
    from helion_src import dispatch as d
    monkeypatch.setattr(d, "SPLITK_FEW_TILES", True)
    plan = d.gemm_planner()
    assert plan is d.plan_gemm_or_splitk
    p = plan(256, 4096, 14336, 2)
    assert p.variant == "splitk" and p.config["block_sizes"][2] == d.splitk_chunk(256, 4096, 14336)
    assert p.epilogue is not None
    assert plan(4096, 4096, 4096, 2).variant == "tiled"
    assert plan(256, 4096, 14336, 2, aligned=False).variant == "tiled"
    assert plan(16, 4096, 14336, 2).variant == "tiled"      # few rows keep the small-M tile
    assert plan(256, 4096, 768, 2).rule == d.plan_gemm(256, 4096, 768, 2).rule  # K too short to split


@needs_helion
def test_the_defaults_plan_source_is_the_planner_it_calls(monkeypatch):
    """The plan LOC counts the planner the default calls: with the switches off, split-K's and the
    persistent grid's rules are not in it."""
    from backends import helion_layer as hl
    from helion_src import dispatch as d
    assert d.gemm_planner() is d.plan_gemm and d.softmax_planner() is d.plan_softmax
    assert hl._plan_source("gemm_epilogue").host == ("plan_gemm",)
    assert hl._plan_source("softmax").host == ("plan_softmax",)
    monkeypatch.setattr(d, "SPLITK_FEW_TILES", True)
    monkeypatch.setattr(d, "ONLINE_PERSISTENT", True)
    assert hl._plan_source("gemm_epilogue").host == ("plan_gemm_or_splitk",)
    assert hl._plan_source("softmax").host == ("plan_softmax_persistent",)


@needs_interpreter
@pytest.mark.parametrize("kw", [dict(M=20, N=136, K=1100, dtype="float16", act="relu", bias=1),
                                dict(M=130, N=40, K=2100, dtype="float16", act="none", bias=0)])
def test_splitk_verify_under_interpreter(kw):
    """Ragged M, N and a ragged last K chunk; the sum of the chunks is the same on a second run
    (a fixed order, no atomics)."""
    launch, out = _interpret("helion:gemm_epilogue_splitk", "gemm_epilogue", **kw)
    first = out.clone()
    launch()
    assert torch.equal(first, out)
    assert launch.info["config"]["partial"]["block_sizes"][2] < kw["K"]   # K is split


@needs_helion
def test_online_persistent_config_and_code(monkeypatch):
    """The persistent online softmax (off by default): programs per SM by L2 (rows in flight within
    L2_FRACTION of it), a persistent loop over rows in the generated code, 16-byte accesses for
    rows of 16-byte multiples."""
    import re

    from backends import helion_layer as hl
    from helion_src import dispatch as d
    assert d.plan_softmax(4096, 128256, 2).rule == "softmax/online"      # off by default
    assert d.online_persistent_config(128256, 2)["num_sm_multiplier"] == 1
    assert d.online_persistent_config(40000, 2)["num_sm_multiplier"] == 2
    assert d.online_persistent_config(33000, 1)["num_sm_multiplier"] == 4
    assert d.online_persistent_config(40000, 2)["block_sizes"] == [1, 8192, 8192]
    monkeypatch.setattr(d, "ONLINE_PERSISTENT", True)
    assert d.softmax_planner()(4096, 2048, 2).rule == "softmax/rows"
    plan = d.softmax_planner()(4096, 128256, 2)
    assert plan.rule == "softmax/online_persistent" and plan.variant == "online"
    args = tuple(torch.empty(64, 128256, dtype=torch.bfloat16, device="meta") for _ in range(2))
    code = hl.generated(plan.kernel, args, plan.config)[2]
    assert "virtual_pid" in code and "evict_last" in code and "evict_first" in code
    facts = hl._compile_facts(plan.kernel, args, plan.config, keep_ptx=True)
    assert facts["spills"] == 0 and facts["grid"] == [132]
    assert re.search(r"ld\.global[\w:.]*\.v4", facts["ptx"]) and "st.global.v4" in facts["ptx"]


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
    ("helion:gemm_epilogue_splitk", "gemm_epilogue", dict(M=256, N=4096, K=14336, dtype="bfloat16", act="none")),
    ("helion:vector_add", "vector_add", dict(N=12345679, dtype="float16")),
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


@needs_interpreter
def test_online_persistent_verify_under_interpreter(monkeypatch):
    """The persistent online softmax (programs looping over rows, a ragged last column tile, more
    programs than rows and fewer) under the interpreter: narrower tiles and a lower register limit
    than on the GPU keep it fast; libdevice's exp, a stub there, is Triton's exp."""
    import triton.language as tl
    from triton.language.extra import libdevice

    from helion_src import dispatch as d
    monkeypatch.setattr(libdevice, "exp", lambda x, **kw: tl.exp(x))
    monkeypatch.setattr(d, "ONLINE_PERSISTENT", True)
    monkeypatch.setattr(d, "ROW_ELEMENTS", 512)
    monkeypatch.setitem(d.SOFTMAX_PERSISTENT, "softmax/online_persistent",
                        {**d.SOFTMAX_PERSISTENT["softmax/online_persistent"], "block_sizes": [1, 256, 256], "num_warps": 4})
    monkeypatch.setattr(d, "L2_BYTES", 1 << 20)   # one program an SM: 140 rows are more than programs
    assert d.online_persistent_config(601, 4)["num_sm_multiplier"] == 1
    for m in (3, 140):
        launch, _ = _interpret("helion:softmax", "softmax", M=m, N=601, dtype="float32")
        assert launch.info["rule"] == "softmax/online_persistent" and launch.info["grid"] == [132]
