"""The verification policy: wrong implementations of every targeted kind FAIL, right ones PASS."""
import math

import pytest
import torch

from harness import problems, registry
from harness.verify import check_output, verify_case

PLUGINS = "tests/plugins"


@pytest.fixture(scope="module", autouse=True)
def plugins():
    registry.load_plugin(f"{PLUGINS}/good.py")
    registry.load_plugin(f"{PLUGINS}/bad.py")


def run(problem, impl, **case_kw):
    p = problems.get(problem)
    case = p.case(**case_kw)
    return verify_case(registry.get(problem, impl), p, case, "cpu")


@pytest.mark.parametrize("problem,case", [
    ("softmax", dict(M=1823, N=781)), ("softmax", dict(M=37, N=1000, layout="strided", dtype="bf16")),
    ("softmax", dict(M=64, N=1000, kind="neginf")), ("softmax", dict(M=64, N=1000, kind="large")),
    ("vector_add", dict(N=98_432)), ("vector_add", dict(N=4099, dtype="float16", misalign=3)),
    ("gemm_epilogue", dict(M=127, N=65, K=129, act="gelu")),
    ("gemm_epilogue", dict(M=1, N=17, K=33, act="relu", bias=0, dtype="float16")),
])
def test_good_passes(problem, case):
    c = run(problem, "plugin:good", **case)
    assert c.ok, c.reason


@pytest.mark.parametrize("problem,impl,case,expect", [
    ("softmax", "bad:zero_pad", dict(M=1823, N=781), "outside atol"),
    ("softmax", "bad:no_max", dict(M=64, N=1000, kind="large"), "NaN where the reference is finite"),
    ("softmax", "bad:row_stride", dict(M=37, N=1000, layout="strided"), "outside atol"),
    ("softmax", "bad:writes_padding", dict(M=37, N=1000, layout="strided"), "outside its view"),
    ("softmax", "bad:half_math", dict(M=1823, N=781), "outside atol"),
    ("vector_add", "bad:no_tail", dict(N=98_432 + 5), "NaN where the reference is finite"),
    ("vector_add", "bad:last_unwritten", dict(N=127), "NaN where the reference is finite; first at [126]"),
    ("vector_add", "bad:mutates", dict(N=127), "input 'x' was modified"),
    ("vector_add", "bad:zeros", dict(N=127), "output is all zero"),
    ("vector_add", "bad:fp32_out", dict(N=127, dtype="bf16"), "output dtype torch.float32"),
    ("gemm_epilogue", "bad:no_bias", dict(M=127, N=65, K=129), "outside their bound"),
    ("gemm_epilogue", "bad:k_tail", dict(M=127, N=65, K=129), "outside their bound"),
])
def test_bad_fails(problem, impl, case, expect):
    c = run(problem, impl, **case)
    assert not c.ok
    assert expect.split(";")[0] in c.reason, c.reason
    if ";" in expect:
        assert expect.split(";")[1].strip() in c.reason, c.reason


def test_zero_guard_and_constant_guard():
    p = problems.get("softmax")
    case = p.case(M=4, N=8)
    (x,) = p.make_inputs(case, "cpu", 0)
    ref = p.reference((x,), case)
    c = check_output(p, case, torch.full((4, 8), 0.125), ref)
    assert not c.ok and "constant" in c.reason
    c = check_output(p, case, torch.zeros(4, 8), ref)
    assert not c.ok and "all zero" in c.reason


def test_nan_and_inf_positions_must_match():
    p = problems.get("vector_add")
    case = p.case(N=4)
    ref = torch.tensor([1.0, float("inf"), float("nan"), -2.0], dtype=torch.float64)
    ok = torch.tensor([1.0, float("inf"), float("nan"), -2.0])
    assert check_output(p, case, ok, ref).ok
    c = check_output(p, case, torch.tensor([1.0, float("-inf"), float("nan"), -2.0]), ref)
    assert not c.ok and "inf" in c.reason
    c = check_output(p, case, torch.tensor([1.0, float("inf"), 0.0, -2.0]), ref)
    assert not c.ok and "finite where the reference is NaN" in c.reason


def test_shape_mismatch_and_error_fields():
    p = problems.get("vector_add")
    case = p.case(N=4)
    ref = torch.arange(1, 5, dtype=torch.float64)
    assert "shape" in check_output(p, case, torch.zeros(5), ref).reason
    c = check_output(p, case, torch.tensor([1.0, 2.0, 3.5, 4.0]), ref)
    assert not c.ok and c.first_bad == [2] and math.isclose(c.max_abs_err, 0.5)
    assert "got 3.5, expected 3" in c.reason


def test_tolerance_is_tight_for_fp32_softmax():
    """an fp32 softmax computed in bf16 precision must not pass; fp32 math must."""
    p = problems.get("softmax")
    case = p.case(M=16, N=300)
    (x,) = p.make_inputs(case, "cpu", 3)
    ref = p.reference((x,), case)
    assert check_output(p, case, torch.softmax(x, -1), ref).ok
    assert not check_output(p, case, torch.softmax(x.bfloat16().float(), -1), ref).ok


def test_chunked_check_matches_whole(monkeypatch):
    """the streaming check (small chunks) finds the same first bad element and counts"""
    import harness.output_check as v

    p = problems.get("softmax")
    case = p.case(M=5, N=9)
    (x,) = p.make_inputs(case, "cpu", 0)
    ref = p.reference((x,), case)
    out = torch.softmax(x, -1)
    out[1, 2] = float("nan")
    out[3, 3] = float("nan")
    whole = v.check_output(p, case, out, ref)
    monkeypatch.setattr(v, "CHUNK", 4)
    chunked = v.check_output(p, case, out, ref)
    assert whole.reason == chunked.reason and "2 element(s)" in chunked.reason and "[1, 2]" in chunked.reason
    out = torch.softmax(x, -1)
    out[4, 8] += 0.01
    assert "first at [4, 8]" in v.check_output(p, case, out, ref).reason


def test_sampled_bias_test_still_catches_a_consistent_bias(monkeypatch):
    """an output of many chunks reads at most BIAS_MAX_CHUNKS of them for the bias test: a bias
    that every element carries (inside its own bound) still fails; the unbiased output passes; the
    bound check still covers every chunk (a bad element in an unsampled chunk is found)"""
    import harness.output_check as v

    p = problems.get("softmax")
    case = p.case(M=512, N=64)
    (x,) = p.make_inputs(case, "cpu", 1)
    ref = p.reference((x,), case)
    monkeypatch.setattr(v, "CHUNK", 1024)          # 32 chunks, 4 sampled
    assert -(-ref.numel() // v.CHUNK) > 4 * v.BIAS_MAX_CHUNKS
    good = torch.softmax(x, -1)
    assert v.check_output(p, case, good, ref).ok
    biased = (ref * (1 + 7e-6)).float()             # inside rtol and the error norm; above the
    #                                                 fp32 row sum's allowed systematic part
    c = v.check_output(p, case, biased, ref)
    assert not c.ok and "systematic error" in c.reason
    bad = good.clone()
    bad[511, 40] += 0.01                            # the last chunk, one the bias test does not read
    c = v.check_output(p, case, bad, ref)
    assert not c.ok and "first at [511, 40]" in c.reason


def test_norm_bound_and_bias_test_start_from_the_correctly_rounded_output():
    """fp16 softmax rows of 128256 columns: the values sit among fp16's subnormals, so the float64
    reference rounded to fp16 is itself 1.3e-3 off in norm (past rel_norm 1e-3) and its rounding
    errors do not average out per binade. That output must PASS; an output rounded toward zero or
    1 % off must still FAIL."""
    import torch
    from harness import problems
    from harness.output_check import check_output

    P = problems.get("softmax")
    c = P.case(M=16, N=128_256, dtype="float16")
    (x,) = P.make_inputs(c, "cpu", 0)
    ref = torch.softmax(x.double(), -1)
    best = ref.to(torch.float16)
    assert ((best.double() - ref).norm() / ref.norm()).item() > P.tolerance("float16").rel_norm
    assert check_output(P, c, best, ref).ok
    assert check_output(P, c, torch.softmax(x.float(), -1).to(torch.float16), ref).ok
    toward_zero = torch.where(best.double() > ref, torch.nextafter(best, torch.zeros_like(best)), best)
    assert not check_output(P, c, toward_zero, ref).ok
    assert not check_output(P, c, (ref * 1.01).to(torch.float16), ref).ok


def test_verification_parts_count_one_reference_a_seed_and_no_compare_for_an_identical_repeat():
    """Where a verification's seconds go (details["parts"], the main job's wall report): each seed's
    float64 reference is computed once (the first seed's repeat is checked against the one in
    hand), a repeat whose bits equal the checked first launch is not compared again (only its
    inputs are), and the checker's own seconds lie inside the worker's round trips."""
    impl = registry.get("softmax", "torch:softmax")
    p = problems.get("softmax")
    case = p.case(M=3, N=41, dtype="float32", layout="strided")
    c = verify_case(impl, p, case, "cpu", seeds=(7, 8))
    assert c.ok, c.reason
    parts = c.details["parts"]
    assert parts["references"] == 2 and parts["compares"] == 2
    assert all(parts[k] >= 0 for k in ("inputs_s", "launch_s", "guard_s", "check_s", "reference_s",
                                       "inputs_check_s", "compare_s"))
    inside = parts["reference_s"] + parts["inputs_check_s"] + parts["compare_s"]
    assert parts["check_s"] + 1e-3 >= inside > 0
    # a later call on the same case continues the sums (the main job's seed-by-seed order)
    c2 = verify_case(impl, p, case, "cpu", seeds=(9,), so_far=c)
    assert c2.details["parts"]["references"] == 3 and c2.details["parts"]["compares"] == 3


def test_the_reference_figures_are_the_same_given_or_computed(monkeypatch):
    """the checker keeps a reference's own figures (reference_stats) beside it: a check given them
    says exactly what a check computing them says, over chunks too, on a passing output, one past
    its bound, a NaN where the reference is finite, and a constant output"""
    import harness.output_check as v

    p = problems.get("softmax")
    case = p.case(M=64, N=1000, kind="neginf")
    (x,) = p.make_inputs(case, "cpu", 0)
    ref = p.reference((x,), case)
    monkeypatch.setattr(v, "CHUNK", 4096)
    stats = v.reference_stats(case, ref)
    assert stats["n_fin"] == int(torch.isfinite(ref).sum()) and stats["rmax"] == float(ref[torch.isfinite(ref)].max())
    good = torch.softmax(x, -1)
    over = good.clone()
    over[17, 3] += 0.01
    nan = good.clone()
    nan[40, 999] = float("nan")
    for out in (good, over, nan, torch.full_like(good, 1e-3)):
        a, b = v.check_output(p, case, out, ref), v.check_output(p, case, out, ref, stats=stats)
        assert repr(a.to_dict()) == repr(b.to_dict())   # (repr: a NaN error equals itself)
    assert v.check_output(p, case, good, ref, stats=stats).ok
    assert "first at [17, 3]" in v.check_output(p, case, over, ref, stats=stats).reason
    assert "first at [40, 999]" in v.check_output(p, case, nan, ref, stats=stats).reason
    assert "constant" in v.check_output(p, case, torch.full_like(good, 1e-3), ref, stats=stats).reason
