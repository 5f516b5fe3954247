"""Problems: suites, seeded inputs, float64 references, traffic/FLOP definitions, case parsing."""
import pytest
import torch

from harness import problems
from harness.case import Case, dtype_name
from harness.problems import SUITES


@pytest.mark.parametrize("name", ["vector_add", "softmax", "gemm_epilogue", "attention"])
@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_has_cases(name, suite):
    cases = problems.get(name).cases(suite)
    assert cases and all(isinstance(c, Case) and c.problem == name for c in cases)
    assert len({c.id for c in cases}) == len(cases), "duplicate cases"


@pytest.mark.parametrize("name", ["vector_add", "softmax", "gemm_epilogue", "attention"])
def test_awkward_suite_is_fixed_new_and_varied(name):
    """The awkward suite is the same on every call (a fixed seed), holds no case of another suite,
    and varies every size and dtype (sizes of 1 and sizes off every power of two among them)."""
    p = problems.get(name)
    cases = p.cases("awkward")
    assert [c.id for c in cases] == [c.id for c in p.cases("awkward")]
    others = {c.id for s in SUITES if s != "awkward" for c in p.cases(s)}
    assert len(cases) == problems.AWKWARD_CASES and not {c.id for c in cases} & others
    assert {c.dtype for c in cases} == set(p.dtypes)
    for dim in set(p.dim_names) - {"D", "Hkv"}:   # head dims and KV heads: the few a model has
        sizes = {c.dims[dim] for c in cases}
        assert len(sizes) > 2 and any(s % 2 for s in sizes), (dim, sorted(sizes))
    if name == "softmax":   # a few very long rows, and odd strides
        assert any(c.M <= 5 and c.N > 200_000 for c in cases)
        assert {c.params["layout"] for c in cases} == {"contiguous", "strided", "strided_odd"}
    if name == "attention":  # grouped-query heads, causal with Sq < Sk, both layouts
        assert any(c.Hq > c.Hkv for c in cases) and any(c.params["causal"] and c.Sq < c.Sk for c in cases)
        assert {c.params["layout"] for c in cases} == {"bhsd", "bshd"}


def test_verify_suite_has_the_policy_shapes():
    ids = {c.id for c in problems.get("vector_add").cases("verify")}
    assert "vector_add[N=98432,float32]" in ids and "vector_add[N=1,float32]" in ids
    sm = problems.get("softmax").cases("verify")
    assert any(c.dims == {"M": 1823, "N": 781} for c in sm)
    assert {c.params.get("kind") for c in sm} >= {"large", "negative", "neginf"}
    assert {c.params.get("layout") for c in sm} >= {"strided", "strided_odd"}
    assert {c.dtype for c in sm} == {"float32", "float16", "bfloat16"}
    gm = {(c.M, c.N, c.K) for c in problems.get("gemm_epilogue").cases("verify")}
    assert {(1, 17, 33), (127, 65, 129), (1025, 769, 513)} <= gm


@pytest.mark.parametrize("name", ["vector_add", "softmax", "gemm_epilogue", "attention"])
def test_inputs_seeded_and_never_zero(name):
    p = problems.get(name)
    case = p.cases("smoke")[0]
    a = p.make_inputs(case, "cpu", 0)
    b = p.make_inputs(case, "cpu", 0)
    c = p.make_inputs(case, "cpu", 1)
    for x, y, z in zip(a, b, c):
        if x is None:
            continue
        assert torch.equal(x, y), "same seed must give the same inputs"
        assert not torch.equal(x, z) or x.numel() == 1, "different seeds must differ"
        assert x.abs().sum() > 0
        assert x.dtype == case.torch_dtype


def test_softmax_layouts_and_kinds():
    p = problems.get("softmax")
    (x,) = p.make_inputs(p.case(M=5, N=70, layout="strided"), "cpu", 0)
    assert x.shape == (5, 70) and x.stride() == (134, 1)
    (x,) = p.make_inputs(p.case(M=5, N=70, layout="strided_odd"), "cpu", 0)
    assert x.stride(0) == 73 and (x.stride(0) * 4) % 16 != 0
    (x,) = p.make_inputs(p.case(M=64, N=1000, kind="neginf"), "cpu", 0)
    ninf = torch.isneginf(x)
    assert ninf.any() and not ninf.all(dim=1).any(), "-inf present, never a whole row"
    (x,) = p.make_inputs(p.case(M=4, N=100, kind="negative"), "cpu", 0)
    assert (x <= -100).all()
    (x,) = p.make_inputs(p.case(M=4, N=100, kind="large"), "cpu", 0)
    assert x.min() > 1000
    (x,) = p.make_inputs(p.case(M=3, N=10, kind="large", dtype="float16"), "cpu", 0)
    assert torch.isfinite(x).all()


def test_vector_add_misalign():
    p = problems.get("vector_add")
    x, y = p.make_inputs(p.case(N=100, misalign=1), "cpu", 0)
    assert x.storage_offset() == 1 and y.storage_offset() == 1 and x.shape == (100,)


def test_references_are_float64_and_right():
    p = problems.get("softmax")
    case = p.case(M=3, N=5)
    (x,) = p.make_inputs(case, "cpu", 0)
    ref = p.reference((x,), case)
    assert ref.dtype == torch.float64
    assert torch.allclose(ref.sum(-1), torch.ones(3, dtype=torch.float64))
    g = problems.get("gemm_epilogue")
    case = g.case(M=4, N=3, K=2, act="relu")
    a, b, bias = g.make_inputs(case, "cpu", 0)
    want = torch.relu(a.double() @ b.double() + bias.double())
    assert torch.equal(g.reference((a, b, bias), case), want)
    case = g.case(M=4, N=3, K=2, act="none", bias=0)
    a, b, bias = g.make_inputs(case, "cpu", 0)
    assert bias is None


def test_traffic_and_flops_follow_design():
    va = problems.get("vector_add")
    assert va.traffic(va.case(N=1000)) == 3 * 1000 * 4
    assert va.traffic(va.case(N=1000, dtype="bf16")) == 3 * 1000 * 2
    sm = problems.get("softmax")
    assert sm.traffic(sm.case(M=4096, N=1024)) == 2 * 4096 * 1024 * 4
    g = problems.get("gemm_epilogue")
    c = g.case(M=64, N=32, K=16)
    assert g.traffic(c) == (64 * 16 + 16 * 32) * 2 + 32 * 2 + 64 * 32 * 2
    assert g.traffic(g.case(M=64, N=32, K=16, bias=0)) == (64 * 16 + 16 * 32) * 2 + 64 * 32 * 2
    assert g.flops(c) == 2 * 64 * 32 * 16
    naive = sm.variants(sm.case(M=10, N=20))["naive"]
    elems = sum(k.bytes_read + k.bytes_written for k in naive) // 4
    assert elems == 8 * 10 * 20 + 4 * 10  # DESIGN.md: 8MN + 4M elements


@pytest.mark.parametrize("kw,msg", [
    ({"M": "12x", "N": 4}, "M: size must be a positive integer"),
    ({"M": 0, "N": 4}, "M: size must be a positive integer"),
    ({"M": -3, "N": 4}, "M: size must be a positive integer"),
    ({"M": 3}, "missing size(s) N"),
    ({"M": 3, "N": 4, "Q": 1}, "unknown key 'Q'"),
    ({"M": 3, "N": 4, "layout": "diagonal"}, "layout: 'diagonal' is not one of"),
    ({"M": 3, "N": 4, "dtype": "int8"}, "dtype: unknown dtype 'int8'"),
])
def test_case_validation(kw, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        problems.get("softmax").case(**kw)


def test_dtype_names():
    assert dtype_name("bf16") == "bfloat16" and dtype_name(torch.float16) == "float16"
    with pytest.raises(ValueError, match="gemm_epilogue takes float16, bfloat16"):
        problems.get("gemm_epilogue").case(M=1, N=1, K=1, dtype="float32")
    with pytest.raises(ValueError, match="unknown problem 'matmul'"):
        problems.get("matmul")


def _tc_accumulate(a, b, step=16, toward_zero=True):
    """A float64 model of tensor-core fp32 accumulation: each ``step``-deep product exact, the
    accumulator rounded to fp32 after each step (toward zero, or to nearest)."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    for k in range(0, a.shape[1], step):
        s = acc + a[:, k:k + step] @ b[k:k + step]
        f = s.float().double()
        if toward_zero:
            f = torch.where(f.abs() > s.abs(), torch.nextafter(s.float(), torch.zeros((), dtype=torch.float32)).double(), f)
        acc = f
    return acc


def test_gemm_bias_test_allows_tensor_core_drift_not_a_truncated_output():
    """Issue 29: an fp32 accumulator rounded toward zero every 16 products (Hopper's MMA) drifts
    toward zero by a bias the check allows; four times that drift still fails."""
    from harness.verify import check_output
    p = problems.get("gemm_epilogue")
    case = p.case(M=48, N=4096, K=4096, dtype="float16", act="relu", bias=1)
    a, b, bias = p.make_inputs(case, "cpu", 0)
    ref, bound, systematic = p.reference_and_bound((a, b, bias), case)
    acc = _tc_accumulate(a.double(), b.double())
    y = torch.relu((acc + bias.double()).float())
    ok = check_output(p, case, y.half(), ref, bound=bound, systematic=systematic)
    assert ok.ok, ok.reason
    # rounded toward zero every 4 products: four times the drift, more than the hardware's
    y4 = torch.relu((_tc_accumulate(a.double(), b.double(), step=4) + bias.double()).float())
    bad = check_output(p, case, y4.half(), ref, bound=bound, systematic=systematic)
    assert not bad.ok and "systematic" in bad.reason, bad.reason
