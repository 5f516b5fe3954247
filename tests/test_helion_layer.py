"""Helion layer: ids and roles, the planner's rules, the twins' settings (Helion's default
configuration, never autotuning), compile-only of the generated Triton for sm_90 (no GPU needed),
the generated code for inspect, input validation, and on a GPU the verify suite."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from conftest import GPU_SEEDS  # noqa: E402
from harness import problems, registry

HAVE_HELION = importlib.util.find_spec("helion") is not None
needs_helion = pytest.mark.skipif(not HAVE_HELION, reason="helion not installed")
IDS = {"helion:vector_add": "default", "helion:vector_add_simple": "simple",
       "helion:softmax": "default", "helion:softmax_simple": "simple", "helion:softmax_online": "variant",
       "helion:gemm_epilogue": "default", "helion:gemm_epilogue_simple": "simple",
       "helion:gemm_epilogue_splitk": "variant",
       "helion:attention": "default", "helion:attention_simple": "simple"}


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
    assert chunk % bk == 0 and -(-4096 // chunk) >= 2
    assert dispatch.plan_gemm(16, 6144, 4096, 2).variant == "tiled"
    assert dispatch.plan_gemm(256, 4096, 14336, 2).variant == "tiled"  # split-K is pending
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
    (_, body, _), (_, tail, _) = hl._launches(plan, args)
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
def test_gemm_row_tile_rule():
    """plan_gemm_next is plan_gemm's plan except for 16 < M <= SMALL_M rows: one row tile of
    pow2(M) rows, no TMA indexing; never split-K; up to 16 rows the small-M tile as plan_gemm."""
    from helion_src import dispatch as d
    p = d.plan_gemm_next(64, 18432, 5120, 2)
    assert p.variant == "tiled" and p.rule == "gemm/small_m_next"
    assert p.config["block_sizes"] == [64, 64, 128] and "indexing" not in p.config
    assert d.plan_gemm(64, 18432, 5120, 2).config["block_sizes"][0] == 16    # today's 16-row tile
    for m, bm in ((17, 32), (33, 64), (64, 64)):
        for aligned in (True, False):
            p = d.plan_gemm_next(m, 32000, 4096, 2, aligned=aligned)
            assert p.config["block_sizes"][0] == bm and "indexing" not in p.config
    for m in (1, 16):
        assert d.plan_gemm_next(m, 32000, 4096, 2) == d.plan_gemm(m, 32000, 4096, 2)
    assert d.plan_gemm_next(16, 4096, 14336, 2).variant == "tiled"          # no split-K
    for m, n, k, aligned in ((256, 6144, 4096, True), (96, 12288, 4096, True), (3000, 3000, 3000, True),
                             (8192, 2048, 64, True), (65, 4096, 4096, True), (2048, 2047, 2048, False)):
        assert d.plan_gemm_next(m, n, k, 2, aligned=aligned) == d.plan_gemm(m, n, k, 2, aligned=aligned)


@needs_helion
def test_rules_follow_their_switches(monkeypatch):
    from helion_src import dispatch as d
    assert d.GEMM_NEXT and d.SOFTMAX_NEXT          # on since the GPU run of 2026-12-06
    assert d.gemm_planner() is d.plan_gemm_next and d.softmax_planner() is d.plan_softmax_next
    monkeypatch.setattr(d, "GEMM_NEXT", False)
    monkeypatch.setattr(d, "SOFTMAX_NEXT", False)
    assert d.gemm_planner() is d.plan_gemm and d.gemm_planner(pending=True) is d.plan_gemm_next
    assert d.softmax_planner() is d.plan_softmax and d.softmax_planner(pending=True) is d.plan_softmax_next


@needs_helion
def test_the_defaults_plan_source_is_the_planner_it_calls(monkeypatch):
    """The plan LOC counts the planner the default calls: with a switch off, its rules are not in it."""
    from backends import helion_layer as hl
    from helion_src import dispatch as d
    assert hl._plan_source("gemm_epilogue").host == ("plan_gemm_next",)
    assert hl._plan_source("softmax").host == ("plan_softmax_next",)
    monkeypatch.setattr(d, "GEMM_NEXT", False)
    monkeypatch.setattr(d, "SOFTMAX_NEXT", False)
    assert hl._plan_source("gemm_epilogue").host == ("plan_gemm",)
    assert hl._plan_source("softmax").host == ("plan_softmax",)


@needs_helion
def test_frame_args():
    """The frame pairs input and output lanes where both tensors' rows start equally far past a
    16-byte boundary; the flat views start at that boundary and end at the last element."""
    from helion_src import frame
    x = torch.empty(4, 50257, dtype=torch.bfloat16, device="meta")
    f = frame.frame_args(x, torch.empty_like(x))
    assert (f["sx"], f["so"], f["lx"], f["lo"], f["v"]) == (50257, 50257, 0, 0, 8)
    assert f["xf"].shape == (4 * 50257,)
    buf = torch.empty(1 + 5 * 103, dtype=torch.float32, device="meta")
    xs = buf[1:].view(5, 103)[:, :100]                     # rows start 1 element past a boundary
    assert frame.frame_args(xs, torch.empty(5, 100, device="meta")) is None   # out's rows do not
    f = frame.frame_args(xs, buf[1:].view(5, 103)[:, :100])
    assert (f["lx"], f["lo"], f["v"]) == (1, 1, 4) and f["xf"].shape == (1 + 4 * 103 + 100,)
    assert frame.frame_args(x.t(), x.t()) is None
    assert frame.frame_width(8, 8) == 16 and frame.frame_width(50257, 8) == 50264


@needs_helion
def test_softmax_next_rules():
    """Few long rows: split into chunks of whole column tiles, programs about SPLIT_WAVES an SM;
    rows of up to ROW_ELEMENTS positions: plan_softmax's rows kernel (the packed frame rows lost);
    longer: the online frame kernel; no frame: plan_softmax."""
    from helion_src import dispatch as d
    p = d.plan_softmax_next(2, 2_000_000, 4)
    chunk = p.frame["chunk_groups"] * 4
    assert p.variant == "split" and chunk % p.config["block_sizes"][0] == 0
    assert p.frame["chunks"] == -(-2_000_004 // chunk) and 2 * p.frame["chunks"] >= 132
    assert d.plan_softmax_next(96, 100_000, 2).variant == "split"
    assert d.plan_softmax_next(4096, 50257, 2).variant == "online"
    assert d.plan_softmax_next(1000, 32769, 2).rule == "softmax/online_frame"
    for m, n, es in ((50000, 200, 2), (4096, 32760, 2), (3, 100, 4), (300, 777, 4)):
        assert d.plan_softmax_next(m, n, es) == d.plan_softmax(m, n, es)
    assert d.plan_softmax_next(4096, 50257, 2, framed=False).rule == "softmax/online"
    assert d.split_chunks(4096, 50257, 2) == 1 and d.split_chunks(1, 4096, 2) == 1


@needs_helion
@pytest.mark.parametrize("kw,variant", [(dict(M=4096, N=50257, dtype="bfloat16"), "online"),
                                        (dict(M=96, N=100000, dtype="bfloat16"), "split")])
def test_frame_softmax_ptx_has_16_byte_loads(kw, variant, monkeypatch):
    """Rows of 50257 bf16 (no row aligned): plan_softmax's kernels load 2 bytes an instruction;
    the frame kernels the default runs load 16-byte vectors only and store 16-byte vectors (the
    rows' edge groups element by element)."""
    import re

    from backends import helion_layer as hl
    problem = problems.get("softmax")
    args = hl._meta_args("softmax", problem.case(**kw))
    plan = hl.plan_for("softmax", args, pending=True)
    assert plan.variant == variant
    for kernel, kargs, cfg in hl._launches(plan, args):
        facts = hl._compile_facts(kernel, kargs, cfg, keep_ptx=True)
        ops = set(re.findall(r"(?:ld|st)\.global(?:\.[\w:]+)*", facts["ptx"]))
        assert facts["spills"] == 0 and "ld.global.b16" not in ops, ops    # (b32: split's statistics)
        assert "ld.global.v4.b32" in ops and ("st.global.v4.b32" in ops or kernel.name.endswith("stats")), ops
    from helion_src import dispatch as d
    monkeypatch.setattr(d, "SOFTMAX_NEXT", False)
    old = hl.plan_for("softmax", args)
    ptx = hl._compile_facts(old.kernel, args, old.config, keep_ptx=True)["ptx"]
    if variant != "split":
        assert "ld.global.b16" in ptx and "ld.global.v4" not in ptx


@needs_interpreter
@pytest.mark.parametrize("kw", [dict(M=5, N=37, dtype="float32"), dict(M=300, N=24, dtype="float16"),
                                dict(M=7, N=301, dtype="float32", layout="strided"),
                                dict(M=9, N=133, dtype="float32", kind="neginf"),
                                dict(M=4, N=50, dtype="float32", layout="strided_odd"),
                                dict(M=600, N=150, dtype="float16", layout="strided")])
def test_softmax_next_verify_under_interpreter(monkeypatch, kw):
    """The default's rules on ragged rows: short rows in plan_softmax's rows kernel, the online
    frame kernel on rows longer than ROW_ELEMENTS (set low), split on few rows (its thresholds
    set low), -inf rows and a layout the frame cannot pair (plan_softmax's kernel)."""
    import triton.language as tl
    from triton.language.extra import libdevice

    from helion_src import dispatch as d
    monkeypatch.setattr(libdevice, "exp", lambda x, **k: tl.exp(x))   # a stub in the interpreter
    monkeypatch.setattr(d, "SOFTMAX_NEXT", True)
    monkeypatch.setattr(d, "ROW_ELEMENTS", 128)
    monkeypatch.setattr(d, "SPLIT_MIN_BYTES", 256)
    monkeypatch.setitem(d.SOFTMAX_FRAME, "softmax/online_frame",
                        {**d.SOFTMAX_FRAME["softmax/online_frame"], "block_sizes": [1, 64, 64], "num_warps": 4})
    monkeypatch.setitem(d.SOFTMAX_FRAME, "softmax/split", {**d.SOFTMAX_FRAME["softmax/split"], "block_sizes": [64]})
    launch, _ = _interpret("helion:softmax", "softmax", **kw)
    want = {37: "rows", 24: "rows", 301: "split", 133: "split", 50: "rows", 150: "online"}[kw["N"]]
    assert launch.info["variant"] == want
    assert launch.info["rule"] == {"rows": "softmax/rows", "split": "softmax/split",
                                   "online": "softmax/online_frame"}[want]


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
    assert launch.info["kernels"][0]["config"]["block_sizes"][2] < kw["K"]   # K is split


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
@pytest.mark.parametrize("kw", [dict(M=64, N=18432, K=5120, dtype="bfloat16", act="none"),
                                dict(M=33, N=4000, K=2050, dtype="float16", act="gelu")])
def test_pending_gemm_row_tile_compiles_sm90(kw):
    """The default's row tile (64 rows here) compiles for sm_90 without spills."""
    impl = registry.get("gemm_epilogue", "helion:gemm_epilogue")
    facts = impl.compile_only_fn(_case("gemm_epilogue", **kw))
    assert facts["target"].startswith("sm_90") and facts["spills"] == 0
    assert facts["config"]["block_sizes"][0] == 64 and "indexing" not in facts["config"]


@needs_helion
def test_generated_code_has_the_epilogue_and_runtime_sizes():
    from backends import helion_layer as hl
    case = _case("gemm_epilogue", M=129, N=264, K=72, dtype="bfloat16", act="gelu")
    (kernel, args, cfg), = _impl("helion:gemm_epilogue").extra["helion_code"](case)
    _, config, code = hl.generated(kernel, args, cfg)
    assert "tl.dot" in code and "tanh" in code and "bias" in code
    assert "< 264" not in code  # sizes are runtime arguments in the tuned kernel
    no_bias = _case("gemm_epilogue", M=129, N=264, K=72, dtype="bfloat16", act="none", bias=0)
    (kernel, args, cfg), = _impl("helion:gemm_epilogue").extra["helion_code"](no_bias)
    code = hl.generated(kernel, args, cfg)[2]
    assert "bias" not in code.split("@triton.jit")[1].split("def ")[1].split(")")[0]
    assert "tanh" not in code


@needs_helion
def test_online_softmax_code_loops_over_columns():
    from backends import helion_layer as hl
    case = _case("softmax", M=4, N=40_000, dtype="float16", layout="strided_odd")
    (kernel, args, cfg), = _impl("helion:softmax").extra["helion_code"](case)
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
    prob, impl = problems.get(problem), registry.get(problem, iid, candidates=True)
    bad = []
    for case in prob.cases("verify"):
        assert not impl.supports(case), f"{iid} declined {case.id}"
        c = verify_case(impl, prob, case, "cuda", seeds=GPU_SEEDS)
        if not c.ok:
            bad.append(f"{case.id}: {c.reason}")
    assert not bad, "\n".join(bad)


def test_planning_every_suite_case_imports_no_helion():
    """The default's planner names its kernels (KernelRef), so planning - which the main job's
    parent does for every compile-ahead unit - imports neither helion nor a kernel module."""
    import subprocess
    import sys
    from pathlib import Path
    code = ("import sys; from harness import registry, problems; registry.load_backends(); "
            "from harness.meta_inputs import case_facts; n = 0\n"
            "for p in ('vector_add', 'softmax', 'gemm_epilogue', 'attention'):\n"
            "    impl = registry.get(p, 'helion:' + p)\n"
            "    for s in ('verify', 'models', 'edge'):\n"
            "        for c in problems.get(p).cases(s):\n"
            "            assert impl.sources.plan(p, case_facts(c)).variant; n += 1\n"
            "print(n, sorted(m for m in sys.modules if m == 'helion' or m.startswith('helion_src.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout.split(maxsplit=1)
    assert int(out[0]) > 100
    assert out[1].strip() == "['helion_src.dispatch', 'helion_src.dispatch_attention', 'helion_src.frame']"


@needs_helion
def test_each_kernel_reference_names_the_kernel_it_resolves_to():
    """A KernelRef's file and function (what the line count and compile classes read without
    importing helion) are those of the kernel it resolves to; every plan kind resolves."""
    from helion_src import dispatch as D
    refs = [v for v in vars(D).values() if isinstance(v, D.KernelRef)]
    assert len(refs) >= 9
    for r in refs:
        assert D._kernel_source(r) == D._kernel_source(r.get()), r
    plans = [D.plan_vector_add(1 << 20, 2), D.plan_softmax(4096, 1024, 2), D.plan_softmax_next(4096, 50257, 2),
             D.plan_softmax_next(2, 1 << 21, 4), D.plan_gemm(4096, 4096, 4096, 2), D.plan_gemm_splitk(64, 4096, 8192, 2),
             D.plan_attention(1, 32, 4096, 128, 2)]
    assert {p.variant for p in plans} == {"block", "rows", "online", "split", "tiled", "splitk", "tma"}
    for plan in plans:
        assert plan.kernel is plan.ref.get() and hasattr(plan.kernel, "bind"), plan.rule
        if plan.epilogue:
            assert plan.epilogue_kernel is plan.epilogue[0].get() and hasattr(plan.epilogue_kernel, "bind")
