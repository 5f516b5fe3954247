"""CuTe DSL attention: the candidates' registration, the planner's rule and invariants, input
validation, the sm_90a compile of both kernels (no GPU needed) and the instructions their PTX
holds; on a GPU the verify suite."""
from __future__ import annotations

import importlib.util
import os
import re
import pytest
import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from harness import problems, registry  # noqa: E402

HAVE_CUTE = importlib.util.find_spec("cutlass") is not None
needs_cute = pytest.mark.skipif(not HAVE_CUTE, reason="nvidia-cutlass-dsl not installed")
P = problems.get("attention")
IDS = ("cute:attention", "cute:attention_simple", "cute:attention_ws")


def _impl(impl_id):
    return registry.get("attention", impl_id, candidates=True)


def test_default_and_twin_are_rows_the_variant_a_candidate():
    rows = {i.id: i for i in registry.select(problem="attention") if i.layer == "cute"}
    cands = {i.id: i for i in registry.candidates() if i.problem == "attention" and i.layer == "cute"}
    assert set(rows) | set(cands) == set(IDS), registry.BACKEND_ERRORS
    assert set(cands) == {"cute:attention_ws"}
    assert rows["cute:attention"].role == "default" and rows["cute:attention_simple"].role == "simple"
    assert cands["cute:attention_ws"].role not in ("default", "simple")
    assert cands["cute:attention_ws"].description.startswith("candidate")


def test_plan_by_waves_shared_memory_and_tma():
    from cutlass_src.dispatch_attention import ATTENTION, plan_attention, smem_bytes

    # a 128-row grid of at least one wave over 132 SMs: 128 rows (two warpgroups); D 128 leaves
    # exactly 3 stages of 128-key tiles beside the Q tile (P stays in registers)
    big = plan_attention(4, 32, 4096, 128, 2, sms=132)
    assert big == {"kernel": "tma", "bm": 128, "bn": 128, "stages": 3, "threads": 256,
                   "smem_bytes": (128 * 128 + 3 * 2 * 128 * 128) * 2}
    # D 64: room for more stages (capped at 4); a smaller table of shared memory: 64-key tiles
    assert plan_attention(8, 32, 2048, 64, 2, sms=132)["stages"] == ATTENTION["max_stages"]
    small_smem = dict(ATTENTION, smem_per_cta=160 * 1024)
    assert plan_attention(4, 32, 4096, 128, 2, sms=132, A=small_smem)["bn"] == 64
    # few query blocks (a chunk of 64 queries, a decode token, a short grid): 64 rows
    assert plan_attention(4, 32, 64, 128, 2, sms=132)["bm"] == 64
    assert plan_attention(8, 32, 1, 128, 2, sms=132)["bm"] == 64
    assert -(-1000 // 128) * 2 < 132 and plan_attention(1, 2, 1000, 64, 2, sms=132)["bm"] == 64
    # ... and 128 rows once the same grid covers the SMs of a smaller GPU
    assert plan_attention(1, 2, 1000, 64, 2, sms=16)["bm"] == 128
    # TMA cannot take a tensor, or no Hopper: the twin's kernel
    assert plan_attention(1, 2, 1000, 64, 2, tma=False)["kernel"] == "simple"
    assert plan_attention(1, 2, 1000, 64, 2, hopper=False)["kernel"] == "simple"
    for B, Hq, Sq, D in ((4, 32, 4096, 128), (8, 32, 2048, 64), (1, 1, 1, 64), (3, 8, 300, 128), (256, 12, 197, 64)):
        p = plan_attention(B, Hq, Sq, D, 2)
        assert p["smem_bytes"] == smem_bytes(p["bm"], p["bn"], D, p["stages"], 2)
        assert p["smem_bytes"] + ATTENTION["smem_reserve"] <= ATTENTION["smem_per_cta"], p
        assert 2 <= p["stages"] <= ATTENTION["max_stages"] and p["threads"] == p["bm"] // 64 * 128, p
    with pytest.raises(ValueError, match="D"):
        plan_attention(1, 1, 1, 96, 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU raises before any launch")
def test_validation_names_the_argument():
    from cutlass_src.attention import validate

    q = torch.randn(1, 4, 8, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^q: must be a CUDA tensor"):
        validate(q, k, k, q, 0)
    with pytest.raises(TypeError, match=r"^v: dtype"):
        validate(q, k, k.float(), q, 0)
    with pytest.raises(ValueError, match=r"^k: must be 4-D"):
        validate(q, k[0], k, q, 0)


@needs_cute
@pytest.mark.timeout(900)
def test_both_kernels_compile_for_sm90a_with_their_instructions():
    """The default (TMA + wgmma) and the twin (mma.sync) compile for sm_90a without spills for D 64
    and 128, fp16 and bf16, causal or not; the default's PTX has TMA loads and store on mbarriers
    and wgmma for both products (P V's with P in registers), the twin's mma.sync and no TMA; a second case of a class (other
    lengths, heads, layout) reuses the compile."""
    import cutlass_src

    tma, twin = _impl("cute:attention"), _impl("cute:attention_simple")
    cases = [P.case(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1),
             P.case(B=8, Hq=32, Hkv=8, Sq=2048, Sk=2048, D=64, dtype="float16"),
             P.case(B=1, Hq=2, Hkv=2, Sq=17, Sk=17, D=128, dtype="float16"),
             P.case(B=2, Hq=2, Hkv=1, Sq=5, Sk=40, D=64, causal=1, layout="bshd")]
    tma_wants = ("wgmma.mma_async", "cp.async.bulk.tensor.4d.shared::cta.global",
                 "cp.async.bulk.tensor.4d.global.shared::cta", "mbarrier.try_wait", "fence.proxy.async", "ex2.approx")
    for case in cases:
        for impl, want, never in ((tma, tma_wants, "mma.sync"),
                                  (twin, ("mma.sync.aligned.m16n8k16", "ex2.approx", "shfl.sync.bfly"), "cp.async")):
            facts = impl.compile_only_fn(case)
            assert facts.get("spills", 0) == 0 and facts["registers"] <= 255, (impl.id, case.id, facts)
            assert facts["config"]["kernel"] == ("tma" if impl is tma else "simple"), facts["config"]
            ptx = _compiled(case, facts["config"]).ptx
            for feature in want:
                assert feature in ptx, (impl.id, case.id, feature)
            assert never not in ptx, (impl.id, case.id, never)
            # P V's wgmma takes P from four registers (its A operand), not from shared memory
            rs = re.search(r"wgmma\.mma_async\S*\s*\{[^}]*\},\s*\{%r\d+(, %r\d+){3}\}", ptx)
            assert (rs is not None) == (impl is tma), (impl.id, case.id)
    # the warp-specialised variant: the default's tiles, a producer warpgroup (setmaxnreg), slots
    # released by mbarrier arrivals, the consumers' own named barrier, P V from registers
    ws = _impl("cute:attention_ws")
    for case in cases[:2]:
        facts = ws.compile_only_fn(case)
        plan = _impl("cute:attention").compile_only_fn(case)["config"]
        assert facts["config"] == dict(plan, kernel="ws", threads=plan["threads"] + 128), facts["config"]
        assert facts.get("spills", 0) == 0, (case.id, facts)
        ptx = cutlass_src._CACHE[("attention_ws",) + _class(case) + (plan["bm"], plan["bn"], plan["stages"])].ptx
        for feature in tma_wants + ("setmaxnreg.dec", "setmaxnreg.inc", "mbarrier.arrive.shared", "bar.sync \t1, "):
            assert feature in ptx, (case.id, feature)
        assert re.search(r"wgmma\.mma_async\S*\s*\{[^}]*\},\s*\{%r\d+(, %r\d+){3}\}", ptx), case.id
    # the same classes, other lengths / heads / layout: no new compile
    before = len(cutlass_src._CACHE)
    tma.compile_only_fn(P.case(B=1, Hq=64, Hkv=8, Sq=8191, Sk=9000, D=128, causal=1, layout="bshd"))
    twin.compile_only_fn(P.case(B=3, Hq=8, Hkv=2, Sq=1, Sk=300, D=128, causal=1))
    assert len(cutlass_src._CACHE) == before


def _compiled(case, plan: dict):
    """The compile of a case's class (dtype, D, causal and the plan's tile) in the layer's cache."""
    import cutlass_src

    cls = _class(case)
    if plan["kernel"] == "simple":
        return cutlass_src._CACHE[("attention_simple", *cls)]
    return cutlass_src._CACHE[("attention_tma", *cls, plan["bm"], plan["bn"], plan["stages"])]


def _class(case) -> tuple:
    return (str(case.torch_dtype), case.D, bool(case.params["causal"]))


@pytest.mark.gpu
@needs_cute
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("impl_id", IDS)
def test_verify_suite_gpu(impl_id):
    from harness.verify import verify_case

    for case in P.cases("verify"):
        chk = verify_case(_impl(impl_id), P, case, "cuda")
        assert chk.ok, (impl_id, case, chk.reason)
