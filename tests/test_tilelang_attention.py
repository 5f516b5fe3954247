"""TileLang attention: the candidates' registration, the planner's rule, the sm_90a compile (no GPU
needed: TileLang compiles with nvcc) and what the generated CUDA uses, one compile per class; on a
GPU the verify suite."""
from __future__ import annotations

import importlib
import importlib.util
import shutil

import pytest
import torch

from harness import problems, registry

HAVE_TL = importlib.util.find_spec("tilelang") is not None and shutil.which("nvcc") is not None
needs_tl = pytest.mark.skipif(not HAVE_TL, reason="tilelang or nvcc not installed")
P = problems.get("attention")
IDS = ("tilelang:attention", "tilelang:attention_simple")


def _impl(impl_id):
    return registry.get("attention", impl_id, candidates=True)


def test_both_ids_are_rows_with_their_roles():
    # verified on the H200 (2026-12-06): rows of the main job, no longer candidates
    rows = {i.id: i for i in registry.select(problem="attention") if i.layer == "tilelang"}
    assert set(rows) == set(IDS)
    assert rows["tilelang:attention"].role == "default" and rows["tilelang:attention_simple"].role == "simple"
    assert not any(i.layer == "tilelang" for i in registry.candidates() if i.problem == "attention")


def test_plan_by_waves_and_shared_memory():
    from tilelang_src.dispatch import SMS
    from tilelang_src.dispatch_attention import ATTENTION, plan_attention

    # a 128-row grid of at least one wave takes 128 rows (two consumer warpgroups)
    big = plan_attention(4, 32, 4096, 128, 2)
    assert (big["bm"], big["threads"]) == (128, 256)
    # few query blocks (a chunk of 64 queries, a decode token): 64 rows, one warpgroup
    assert plan_attention(4, 32, 64, 128, 2)["bm"] == 64
    assert plan_attention(8, 32, 1, 128, 2)["bm"] == 64
    few = plan_attention(1, 2, 1000, 64, 2)          # 16 CTAs of 128 rows < SMS
    assert -(-1000 // 128) * 2 < SMS and few["bm"] == 64
    for B, Hq, Sq, D in ((4, 32, 4096, 128), (8, 32, 2048, 64), (1, 1, 1, 64), (3, 8, 300, 128)):
        p = plan_attention(B, Hq, Sq, D, 2)
        used = 2 * p["bm"] * D * 2 + p["stages"] * 2 * p["bn"] * D * 2 + ATTENTION["smem_reserve"]
        assert used <= ATTENTION["smem_per_cta"] and 2 <= p["stages"] <= 4, p
    # a smaller head dim leaves room for more stages
    assert plan_attention(4, 32, 4096, 64, 2)["stages"] > big["stages"]


@needs_tl
@pytest.mark.timeout(600)
def test_compiles_for_sm90a_with_hopper_features_one_compile_a_class():
    """The default compiles for sm_90a without spills and its CUDA has the Hopper pipeline: TMA
    loads and store, wgmma for both products (P from registers), a producer warpgroup (setmaxnreg).
    Lengths, batch, heads and the [B, S, H, D] layout are run-time values: a second case of the
    same class reuses the compile; the twin compiles too, without TMA."""
    backend = importlib.import_module("backends.tilelang_layer")
    impl = _impl("tilelang:attention")
    backend._SEEN.clear()
    facts = impl.compile_only_fn(P.case(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1))
    assert facts["config"]["bm"] == 128 and facts.get("spills", 0) == 0 and facts["registers"] <= 255, facts
    entry = backend._SEEN[-1]
    src = entry.source()
    for feature in ("tma_load", "tma_store", "wgmma_ss", "wgmma_rs", "warpgroup_reg_alloc", "exp2f"):
        assert feature in src, feature
    backend._SEEN.clear()
    impl.compile_only_fn(P.case(B=1, Hq=64, Hkv=8, Sq=8191, Sk=9000, D=128, causal=1, layout="bshd"))
    assert backend._SEEN[-1] is entry
    twin = _impl("tilelang:attention_simple")
    backend._SEEN.clear()
    facts = twin.compile_only_fn(P.case(B=2, Hq=4, Hkv=2, Sq=77, Sk=131, D=64))
    assert facts.get("spills", 0) == 0, facts
    assert "tma_load" not in backend._SEEN[-1].source()


@pytest.mark.gpu
@needs_tl
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("impl_id", IDS)
def test_verify_suite_gpu(impl_id):
    from harness.verify import verify_case

    for case in P.cases("verify"):
        chk = verify_case(_impl(impl_id), P, case, "cuda")
        assert chk.ok, (impl_id, case, chk.reason)
