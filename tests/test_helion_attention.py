"""Helion attention: both ids are rows that run on the CPU (interpreter) and compile for
sm_90; the planner's rules; outputs on small cases (ragged, causal with Sq < Sk, grouped heads,
[B, S, H, D] storage, whole tiles) against the problem's reference under the interpreter; the
tuned kernel's sm_90 code (TMA, wgmma, no spills, no masks on whole tiles); input checks."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from harness import problems, registry

HAVE_HELION = importlib.util.find_spec("helion") is not None
needs_helion = pytest.mark.skipif(not HAVE_HELION, reason="helion not installed")
needs_interpreter = pytest.mark.skipif(
    not HAVE_HELION or os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="runs Helion's generated Triton under Triton's interpreter (TRITON_INTERPRET=1, no GPU)")
IDS = ("helion:attention", "helion:attention_simple")


def _impl(iid):
    registry.load_backends()
    return registry.get("attention", iid)


def _case(**kw):
    return problems.get("attention").case(**kw)


def test_both_ids_are_rows_for_cpu_and_gpu():
    """Verified on a GPU (an H100, 2026-12-07): rows of the main job, no longer candidates."""
    registry.load_backends()
    assert not [c for c in registry.candidates() if c.problem == "attention" and c.layer == "helion"]
    got = {i.id: i for i in registry.all_impls() if i.id in IDS}
    assert set(got) == set(IDS)
    for c in got.values():
        assert "not yet verified on a GPU" not in c.description and set(c.devices) == {"cuda", "cpu"}
    assert got["helion:attention"].role == "default" and got["helion:attention_simple"].role == "simple"


@needs_helion
def test_planner_rules():
    """128 query rows (8 warps, 128-key tiles) where the grid of them fills the SMs, else 64 (4
    warps, 64-key tiles); K / V stages as many as fit beside Q in the program's share of shared
    memory, 2 to 4; TMA only for 16-byte aligned tensors."""
    from helion_src import dispatch as d
    from helion_src import dispatch_attention as da
    smem = 233472

    def cfg(B, Hq, Sq, D, **kw):
        return d.plan_attention(B, Hq, Sq, D, 2, 132, smem, **kw).config
    big = cfg(4, 32, 4096, 128)
    assert big["block_sizes"] == [128, 128] and big["num_warps"] == 8 and big["num_stages"] == 3
    assert big["indexing"] == "tensor_descriptor"
    assert cfg(8, 32, 2048, 64)["num_stages"] == 4
    few = cfg(4, 32, 64, 128)                      # 128 programs of 64 rows: fewer than the SMs
    assert few["block_sizes"] == [64, 64] and few["num_warps"] == 4
    assert cfg(1, 32, 512, 128)["block_sizes"][0] == 64    # 128 tiles of 128 rows < 132 SMs
    assert cfg(1, 33, 512, 128)["block_sizes"][0] == 128   # 132 tiles: one wave
    assert cfg(4, 32, 4096, 128, aligned=False)["indexing"] == "pointer"
    for B, Hq, Sq, D in ((4, 32, 4096, 128), (2, 4, 77, 64), (8, 32, 1, 128), (256, 12, 197, 64)):
        c = cfg(B, Hq, Sq, D)
        bm, bn = c["block_sizes"]
        share = smem // da.ATTENTION["programs_per_sm"][bm] - da.ATTENTION["smem_reserve"]
        assert bm * D * 2 + c["num_stages"] * 2 * bn * D * 2 <= share
        assert 2 <= c["num_stages"] <= 4 and c["num_warps"] == bm // 16
    assert set(d.VARIANTS["attention"]) == {"tma"}     # the one kernel the rules choose


@needs_interpreter
@pytest.mark.parametrize("iid,kw", [
    ("helion:attention", dict(B=2, Hq=4, Hkv=2, Sq=77, Sk=131, D=64)),                   # ragged, GQA
    ("helion:attention", dict(B=1, Hq=4, Hkv=1, Sq=20, Sk=150, D=128, dtype="float16", causal=1)),
    ("helion:attention", dict(B=2, Hq=2, Hkv=1, Sq=65, Sk=90, D=64, causal=1, layout="bshd")),
    ("helion:attention", dict(B=1, Hq=2, Hkv=1, Sq=128, Sk=128, D=64, dtype="float16")),  # whole tiles
    ("helion:attention_simple", dict(B=1, Hq=4, Hkv=2, Sq=45, Sk=70, D=128, causal=1, layout="bshd")),
    ("helion:attention_simple", dict(B=3, Hq=2, Hkv=1, Sq=9, Sk=1, D=64, dtype="float16")),
    ("helion:attention_simple", dict(B=2, Hq=2, Hkv=1, Sq=65, Sk=90, D=64, causal=1, layout="bshd")),
])
def test_outputs_under_interpreter(iid, kw):
    from harness.verify import judge
    prob, impl = problems.get("attention"), _impl(iid)
    case = prob.case(**kw)
    q, k, v = prob.make_inputs(case, "cpu", 0)
    out = torch.full(q.shape, float("nan"), dtype=q.dtype)
    launch = impl.prepare(case, (q, k, v), out)
    c = judge(impl, prob, case, 0, (q, k, v), out, "cpu")
    assert c.ok, f"{iid} {kw}: {c.reason}"
    if iid == "helion:attention":
        assert launch.info["variant"] == "tma" and launch.info["config"]["block_sizes"][0] == 64


@needs_helion
def test_default_compiles_for_sm90_with_tma_and_wgmma():
    """A model shape (D = 128, causal, GQA): Q / K / V by TMA into shared memory, both products on
    wgmma, exp2 on the fast path, no spills, within an SM's shared memory."""
    from backends import helion_layer as hl
    case = _case(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1)
    (kernel, args, cfg), = _impl("helion:attention").extra["helion_code"](case)
    facts = hl._compile_facts(kernel, args, cfg, keep_ptx=True)
    ptx = facts["ptx"]
    assert "cp.async.bulk.tensor.4d" in ptx and "wgmma.mma_async" in ptx and "ex2.approx" in ptx
    assert facts["spills"] == 0 and facts["smem"] <= 232448 and facts["config"]["block_sizes"] == [128, 128]


@needs_helion
def test_whole_tiles_have_no_masks():
    """Static shapes: where Sq and Sk are multiples of the tiles, the non-causal kernel has no
    mask at all; a ragged Sk gets Helion's own masks; causal adds one where on the scores."""
    from backends import helion_layer as hl

    def body(**kw):
        (kernel, args, cfg), = _impl("helion:attention").extra["helion_code"](_case(**kw))
        return hl.generated(kernel, args, cfg)[2].split("@triton.jit")[1].split("\ndef ")[1]
    whole = body(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, dtype="float16")
    assert "tl.where" not in whole and "mask" not in whole and whole.count("_desc.load(") == 3
    assert "mask" in body(B=2, Hq=4, Hkv=2, Sq=77, Sk=131, D=64)
    assert "tl.where" in body(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1)


def test_tile_indices_are_not_sliced():
    """The causal mask broadcasts the tiles' indices with ``unsqueeze``, never a slice
    (``tm.index[:, None]``): Helion 1.4 matches a slice's extent against the head dim's (64 at
    D = 64) and makes the query tile's block size that number (see ``attention_tma.py``)."""
    import ast
    from pathlib import Path
    for name in ("attention.py", "attention_tma.py"):
        tree = ast.parse(Path(__file__).resolve().parents[1].joinpath("helion_src", name).read_text())
        sliced = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                  and isinstance(n.value, ast.Attribute) and n.value.attr == "index"]
        assert not sliced, f"{name}: a tile's index sliced on lines {sliced}"


@needs_helion
@pytest.mark.parametrize("iid,kw", [
    ("helion:attention", dict(B=8, Hq=32, Hkv=8, Sq=2048, Sk=2048, D=64, causal=1)),   # 128 query rows
    ("helion:attention", dict(B=1, Hq=1, Hkv=1, Sq=1, Sk=1, D=64, causal=1)),          # 64 query rows
    ("helion:attention_simple", dict(B=1, Hq=1, Hkv=1, Sq=1, Sk=1, D=64, causal=1)),
])
def test_causal_head_dim_64_keeps_the_query_tile(iid, kw):
    """Causal at D = 64: the generated code's Q / O tiles and the running max and sum have the
    query tile's rows (its block size symbol), not the head dim's extent."""
    import re
    from backends import helion_layer as hl
    code = _impl(iid).extra["helion_code"](_case(**kw))
    kernel, args, cfg = code[0] if isinstance(code, list) else code
    body = hl.generated(kernel, args, cfg)[2]
    tile, = re.findall(r"tl\.full\(\[(\w+), 1\], float\('-inf'\)", body)   # m = hl.full([tm, 1], -inf)
    rows = re.findall(r"tl\.reshape\(.*, \[(\w+), 1\]\), tl\.float32\)", body)   # amax, sum (keepdim)
    assert len(rows) >= 2 and set(rows) == {tile}, (tile, rows)
    blocks = re.findall(r"make_tensor_descriptor\((?:q|out), .*, \[1, 1, (\w+), 64\]\)", body)
    assert set(blocks) <= {tile} and (kw["Sq"] < 64 or len(blocks) == 2), (tile, blocks)


@needs_helion
def test_twin_compiles_for_sm90():
    facts = _impl("helion:attention_simple").compile_only_fn(_case(B=1, Hq=4, Hkv=1, Sq=100, Sk=257, D=128,
                                                                   causal=1))
    assert facts["target"].startswith("sm_90") and facts["spills"] == 0
    assert facts["config"]["block_sizes"] and facts["kernel"].startswith("_helion_")


@needs_helion
def test_input_validation():
    from backends.helion_attention import check_attention
    q = torch.randn(1, 4, 8, 64, dtype=torch.float16)
    kv = torch.randn(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="head dim"):
        check_attention(q[..., :32], kv[..., :32], kv[..., :32], q[..., :32], False)
    with pytest.raises(TypeError, match="k"):
        check_attention(q, kv.float(), kv, q, False)
    with pytest.raises(ValueError, match="heads"):
        check_attention(q, kv[:, :1].expand(1, 3, 8, 64), kv[:, :1].expand(1, 3, 8, 64), q, False)
    with pytest.raises(ValueError, match="causal"):
        check_attention(q, kv[:, :, :4], kv[:, :, :4], q, True)
    with pytest.raises(ValueError, match="out"):
        check_attention(q, kv, kv, q[:, :, :4], False)
