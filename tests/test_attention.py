"""Attention: the problem's reference, conventions, bound, counts and validation; the torch rows;
the Triton twin and default under the interpreter (CPU) or on the GPU."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from harness import problems, registry
from harness.output_check import check_output
from harness.problems.attention import torch_sdpa, unmasked_pairs
from harness.verify import verify_case

P = problems.get("attention")
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _case(**kw):
    return P.case(**kw)


def _lower_right(Sq, Sk):
    return torch.ones(Sq, Sk, dtype=torch.bool).tril(Sk - Sq)


@pytest.mark.parametrize("kw", [dict(B=2, Hq=4, Hkv=2, Sq=7, Sk=19, D=64),
                                dict(B=1, Hq=3, Hkv=1, Sq=5, Sk=9, D=128, causal=1),
                                dict(B=1, Hq=2, Hkv=2, Sq=11, Sk=11, D=64, causal=1, layout="bshd")])
def test_reference_is_torch_sdpa_in_float64(kw):
    """The float64 reference equals torch's math SDPA in float64 with the bottom-right mask
    (materialised), grouped heads by repeating K / V."""
    case = _case(dtype="bfloat16", **kw)
    q, k, v = P.make_inputs(case, "cpu", 3)
    g = case.Hq // case.Hkv
    kk, vv = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    mask = _lower_right(case.Sq, case.Sk) if case.params["causal"] else None
    want = F.scaled_dot_product_attention(q.double(), kk, vv, attn_mask=mask)
    got = P.reference((q, k, v), case)
    assert got.dtype == torch.float64 and got.shape == (case.B, case.Hq, case.Sq, case.D)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_causal_is_bottom_right_not_torchs_top_left():
    """With Sq < Sk the last query sees every key (bottom-right), so its row equals the unmasked
    attention's; torch's is_causal (top-left) would let it see only Sq keys."""
    case = _case(B=1, Hq=1, Hkv=1, Sq=4, Sk=10, D=64, causal=1)
    q, k, v = P.make_inputs(case, "cpu", 0)
    ref = P.reference((q, k, v), case)
    full = P.reference((q, k, v), _case(B=1, Hq=1, Hkv=1, Sq=4, Sk=10, D=64))
    torch.testing.assert_close(ref[..., -1, :], full[..., -1, :])
    top_left = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert not torch.allclose(ref[..., -1, :], top_left[..., -1, :])
    # the first query sees keys 0 .. Sk - Sq: 7 of them
    w = torch.softmax((q.double() @ k.double().transpose(-1, -2))[..., 0, :7] / 8.0, dim=-1)
    torch.testing.assert_close(ref[..., 0, :], (w[..., None, :] @ v.double()[..., :7, :])[..., 0, :])


def test_the_fp32_reference_and_the_chunking(monkeypatch):
    """Above the float64 limit the reference runs in float32 in chunks: it stays within its own
    bound of the float64 one."""
    import harness.problems.attention as A
    case = _case(B=2, Hq=4, Hkv=2, Sq=70, Sk=300, D=64, causal=1, dtype="float16")
    inputs = P.make_inputs(case, "cpu", 1)
    ref64, bound64, _ = P.reference_and_bound(inputs, case)
    monkeypatch.setattr(A, "REF64_MAX_SCORES", 1)
    monkeypatch.setattr(A, "CHUNK", 1000)   # several query chunks a head
    ref32, bound32, _ = P.reference_and_bound(inputs, case)
    assert ((ref32 - ref64).abs() <= bound64).all()
    assert (bound32 >= bound64).all()


def _flash_emulation(q, k, v, causal, bug=None, block=32):
    """A flash loop in torch (fp32 scores, P rounded to the input dtype), with a planted bug."""
    B, Hq, Sq, D = q.shape
    g, Sk = Hq // k.shape[1], k.shape[2]
    scale = (1 / math.sqrt(D)) * (1 / math.log(2) if bug == "scale" else 1)
    out = torch.empty_like(q)
    rows = torch.arange(Sq)[:, None]
    for h in range(Hq):
        qf, kf, vf = q[:, h].float(), k[:, h // g].float(), v[:, h // g]
        m = torch.full((B, Sq, 1), -math.inf)
        l, acc = torch.zeros(B, Sq, 1), torch.zeros(B, Sq, D)
        for j0 in range(0, Sk, block):
            s = qf @ kf[:, j0:j0 + block].transpose(1, 2) * scale
            if causal:
                keys = torch.arange(j0, min(Sk, j0 + block))[None]
                s = s.masked_fill(keys > rows + Sk - Sq + (bug == "causal"), -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p, alpha = torch.exp(s - m_new), torch.exp(m - m_new)
            l = (l if bug == "rescale" else l * alpha) + p.sum(-1, keepdim=True)
            acc = acc * alpha + p.to(q.dtype).float() @ vf[:, j0:j0 + block].float()
            m = m_new
        out[:, h] = (acc / l).to(q.dtype)
    return out


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_bound_passes_a_flash_loop_and_catches_its_slips(dtype):
    case = _case(B=1, Hq=2, Hkv=1, Sq=40, Sk=150, D=64, causal=1, dtype=dtype)
    inputs = P.make_inputs(case, "cpu", 0)
    ref, bound, sys_ = P.reference_and_bound(inputs, case)
    good = check_output(P, case, _flash_emulation(*inputs, 1), ref, bound, sys_)
    assert good.ok, good.reason
    assert 0.05 < good.details["worst_ratio"] < 1.0   # the bound is neither crossed nor vacuous
    for bug in ("rescale", "causal", "scale"):
        c = check_output(P, case, _flash_emulation(*inputs, 1, bug), ref, bound, sys_)
        assert not c.ok and "outside their bound" in c.reason, bug


def test_declared_roundings_widen_the_bound():
    case = _case(B=1, Hq=2, Hkv=1, Sq=9, Sk=33, D=64)
    inputs = P.make_inputs(case, "cpu", 0)
    _, b0, s0 = P.reference_and_bound(inputs, case, 0)
    _, b2, s2 = P.reference_and_bound(inputs, case, 2)
    assert (b2 > b0).all() and (s2 >= s0).all()


def test_counts_on_a_known_case():
    case = _case(B=1, Hq=2, Hkv=1, Sq=3, Sk=5, D=64, dtype="float16")
    assert P.traffic(case) == (2 * 2 * 3 + 2 * 1 * 5) * 64 * 2
    assert P.flops(case) == 4 * 2 * 64 * 15
    causal = _case(B=1, Hq=2, Hkv=1, Sq=3, Sk=5, D=64, causal=1)
    assert unmasked_pairs(3, 5, 1) == 3 + 4 + 5 and P.flops(causal) == 4 * 2 * 64 * 12
    assert unmasked_pairs(4, 4, 1) == 10 and unmasked_pairs(1, 7, 1) == 7
    v = P.variants(causal)
    assert list(v) == ["fused", "unfused"]
    fused = v["fused"][0]
    assert fused.bytes_read + fused.bytes_written == P.traffic(causal)
    # the unfused chain writes and reads every score (masked or not) twice more
    assert sum(k.bytes_written for k in v["unfused"]) == 2 * 2 * 3 * 5 * 2 + 2 * 3 * 64 * 2


@pytest.mark.parametrize("kw,name", [(dict(D=96), "D"), (dict(Hq=3, Hkv=2), "Hq"),
                                     (dict(Sq=9, Sk=5, causal=1), "Sq"), (dict(layout="sbhd"), "layout"),
                                     (dict(causal=2), "causal")])
def test_bad_cases_name_the_argument(kw, name):
    base = dict(B=1, Hq=2, Hkv=1, Sq=4, Sk=8, D=64)
    with pytest.raises(ValueError, match=rf"^{name}:"):
        P.case(**{**base, **kw})
    with pytest.raises(ValueError, match="^dtype:"):
        P.case(dtype="float32", **base)


def test_inputs_layouts():
    q, k, v = P.make_inputs(_case(B=2, Hq=4, Hkv=2, Sq=5, Sk=7, D=64, layout="bshd"), "cpu", 0)
    assert q.shape == (2, 4, 5, 64) and q.stride() == (5 * 4 * 64, 64, 4 * 64, 1)
    assert k.shape == (2, 2, 7, 64) and k.stride() == (7 * 2 * 64, 64, 2 * 64, 1)
    q2, _, _ = P.make_inputs(_case(B=2, Hq=4, Hkv=2, Sq=5, Sk=7, D=64), "cpu", 0)
    assert q2.is_contiguous() and not torch.equal(q2, torch.zeros_like(q2))


def test_suites_hold_the_classes():
    verify = P.cases("verify")
    assert {c.dtype for c in verify} == {"float16", "bfloat16"} and {c.D for c in verify} == {64, 128}
    assert any(c.Sq == 1 for c in verify) and any(c.Sk == 1 for c in verify)
    assert any(c.params["causal"] and c.Sq < c.Sk for c in verify)
    assert any(c.Hq > c.Hkv for c in verify) and any(c.params["layout"] == "bshd" for c in verify)
    assert any(c.Sq >= 2048 for c in verify)
    assert any(c.Sq % 64 and c.Sk % 64 for c in verify)
    models = P.cases("models")
    assert 4 <= len(models) <= 8 and all(c.B * c.Sq >= 8192 for c in models)
    assert {c.D for c in models} == {64, 128} and any(c.Hq == 64 for c in models)


def test_torch_rows_pass_the_smoke_suite():
    for iid in ("torch:attention",):
        impl = registry.get("attention", iid)
        for case in P.cases("smoke"):
            c = verify_case(impl, P, case, DEV)
            assert c.ok, (iid, case.id, c.reason)


def test_torch_sdpa_follows_the_conventions():
    case = _case(B=1, Hq=4, Hkv=2, Sq=6, Sk=13, D=64, causal=1)
    q, k, v = P.make_inputs(case, "cpu", 2)
    got = torch_sdpa(q.double(), k.double(), v.double(), 1)
    torch.testing.assert_close(got, P.reference((q, k, v), case))


# -- Triton: the twin and the default under the interpreter (or on the GPU) --------------------------
triton_cases = [("smoke", None), ("verify", dict(B=2, Hq=4, Hkv=2, Sq=65, Sk=190, D=64, causal=1, layout="bshd")),
                ("verify", dict(B=1, Hq=4, Hkv=1, Sq=100, Sk=257, D=128, causal=1, dtype="float16")),
                ("verify", dict(B=2, Hq=2, Hkv=1, Sq=9, Sk=1, D=64))]


@pytest.mark.parametrize("iid", ["triton:attention", "triton:attention_simple"])
def test_triton_rows_pass(iid):
    pytest.importorskip("triton")
    impl = registry.get("attention", iid)
    assert impl.available() is None
    cases = P.cases("smoke") + [_case(**kw) for s, kw in triton_cases if kw]
    for case in cases:
        c = verify_case(impl, P, case, DEV)
        assert c.ok, (iid, case.id, c.reason)


def test_triton_default_plans_by_the_case_facts():
    pytest.importorskip("triton")
    from triton_src import H200
    from triton_src.dispatch_attention import ATTENTION, attention_choice
    # many query blocks: 128 rows, 8 warps, one program an SM, stages by shared memory
    v, cfg = attention_choice(4, 32, 4096, 4096, 128, 2, H200)
    assert v == "tma" and cfg["BLOCK_M"] == 128 and cfg["num_warps"] == 8
    smem = 128 * 128 * 2 + cfg["num_stages"] * 2 * cfg["BLOCK_N"] * 128 * 2
    assert smem <= H200["smem_per_sm"] - ATTENTION["smem_reserve"]
    assert attention_choice(4, 32, 4096, 4096, 64, 2, H200)[1]["num_stages"] > cfg["num_stages"]
    # few query blocks (a decode-like chunk): 64 rows, twice the programs
    assert attention_choice(1, 8, 128, 8192, 128, 2, H200)[1]["BLOCK_M"] == 64
    assert attention_choice(4, 32, 1, 4096, 128, 2, H200)[1]["BLOCK_M"] == 64


def test_triton_wrappers_reject_bad_inputs():
    pytest.importorskip("triton")
    from triton_src.attention import attention
    dev = DEV
    q = torch.randn(1, 2, 8, 64, device=dev).half()
    k = torch.randn(1, 1, 8, 64, device=dev).half()
    with pytest.raises(TypeError, match="^q:"):
        attention(q.float(), k, k)
    with pytest.raises(ValueError, match="^q: head dim"):
        attention(q[..., :32], k[..., :32], k[..., :32])
    with pytest.raises(ValueError, match="^k:"):
        attention(q, torch.randn(1, 3, 8, 64, device=dev).half(), torch.randn(1, 3, 8, 64, device=dev).half())
    with pytest.raises(ValueError, match="^q: causal"):
        attention(torch.randn(1, 2, 9, 64, device=dev).half(), k, k, causal=True)


def test_triton_compile_only_for_sm90():
    pytest.importorskip("triton")
    case = P.cases("models")[1]
    facts = registry.get("attention", "triton:attention").compile_only_fn(case)
    assert facts["target"] == "sm_90a" and facts["spills"] == 0 and facts["variant"] == "tma"
    assert facts["smem"] <= 232448


# -- Gluon: compiled for sm_90a on the CPU, run on a Hopper GPU ----------------------------------------
def _gluon_or_skip():
    pytest.importorskip("triton.experimental.gluon")   # only a missing Gluon skips; any other error fails


@pytest.mark.parametrize("iid", ["gluon:attention", "gluon:attention_simple"])
def test_gluon_rows_compile_for_sm90(iid):
    _gluon_or_skip()
    impl = registry.get("attention", iid)
    for case in (P.cases("smoke")[1], P.cases("models")[4]):
        facts = impl.compile_only_fn(case)
        assert facts["target"] == "sm_90a" and facts["spills"] == 0, (case.id, facts)


@pytest.mark.gpu
@pytest.mark.parametrize("iid", ["gluon:attention", "gluon:attention_simple"])
def test_gluon_rows_on_the_gpu(iid):
    _gluon_or_skip()
    impl = registry.get("attention", iid)
    if impl.available():
        pytest.skip(impl.available())
    for case in P.cases("smoke") + P.cases("verify"):
        c = verify_case(impl, P, case, "cuda")
        assert c.ok, (iid, case.id, c.reason)


# -- Triton candidates (not yet run on a GPU): the key axis split, and the default with it on ------
def test_split_rule_is_a_switch_and_reads_the_grid():
    pytest.importorskip("triton")
    from triton_src import H200
    from triton_src.dispatch_attention import ATTENTION, ATTENTION_NEXT, attention_choice
    assert not ATTENTION["split"]
    # the default counts the kernels its planner chooses (no split); the candidate with the switch, split's too
    files = {s.path for s in registry.get("attention", "triton:attention").sources}
    assert "triton_src/attention_split.py" not in files and "triton_src/attention_tma.py" in files
    assert "triton_src/attention_split.py" in {s.path for s in registry.get("attention", "triton:attention_next",
                                                                               candidates=True).sources}
    nxt = {**ATTENTION, **ATTENTION_NEXT}
    # a 64-query chunk of 4 x 32 heads against 8k keys: 128 programs < 132 SMs -> split
    v, cfg = attention_choice(4, 32, 64, 8192, 128, 2, H200, nxt)
    assert v == "split" and cfg["SPLITS"] >= 2
    assert cfg["SPLITS"] * cfg["BLOCKS_PER_SPLIT"] * cfg["BLOCK_N"] >= 8192
    assert (cfg["SPLITS"] - 1) * cfg["BLOCKS_PER_SPLIT"] * cfg["BLOCK_N"] < 8192   # no empty range
    # ... never with the switch off, on a full grid, or with too few key blocks
    assert attention_choice(4, 32, 64, 8192, 128, 2, H200)[0] == "tma"
    assert attention_choice(4, 32, 4096, 4096, 128, 2, H200, nxt)[0] == "tma"
    assert attention_choice(1, 4, 16, 200, 128, 2, H200, nxt)[0] == "tma"


@pytest.mark.parametrize("iid", ["triton:attention_split", "triton:attention_next"])
def test_triton_candidates_pass(iid):
    pytest.importorskip("triton")
    impl = registry.get("attention", iid, candidates=True)
    assert impl.description.startswith("candidate, not yet run on a GPU")
    for kw in (dict(B=1, Hq=4, Hkv=1, Sq=16, Sk=1100, D=64, causal=1),
               dict(B=2, Hq=2, Hkv=1, Sq=3, Sk=600, D=64, causal=1, layout="bshd"),
               dict(B=1, Hq=2, Hkv=2, Sq=70, Sk=900, D=128, dtype="float16")):
        c = verify_case(impl, P, _case(**kw), DEV, seeds=(0,))
        assert c.ok, (iid, kw, c.reason)
