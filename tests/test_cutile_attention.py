"""cuTile attention: the three ids are candidates with their roles; the planner's rules (rows by
waves, tile and hints by the rows; split ranges, switched off) on cases with known answers, and
its contract over every suite (a word of VARIANTS, what the adapter plans); input checks naming
the argument; the sm_90 compile without a GPU (tileiras) of the kernels for D 64 / 128, fp16 /
bf16, causal or not, both layouts, and what their SASS holds (wgmma, TMA loads and stores, no
spills); on a GPU the verify suite of every id."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from conftest import GPU_SEEDS  # noqa: E402
from harness import problems, registry

HAVE_CUTILE = importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.tile") is not None
P = problems.get("attention")
IDS = ("cutile:attention", "cutile:attention_simple", "cutile:attention_split")


def _tileiras_works() -> bool:
    if not HAVE_CUTILE:
        return False
    from cuda.tile._compile import _find_compiler_bin
    try:
        _find_compiler_bin()
    except FileNotFoundError:
        return False
    return True


needs_tileiras = pytest.mark.skipif(not _tileiras_works(), reason="cuda-tile or tileiras not installed")


def _impl(iid):
    registry.load_backends()
    return registry.get("attention", iid, candidates=True)


def test_default_and_twin_are_rows_the_split_a_candidate():
    registry.load_backends()
    rows = {c.id for c in registry.select(problem="attention") if c.layer == "cutile"}
    cands = {c.id for c in registry.candidates() if c.problem == "attention" and c.layer == "cutile"}
    assert rows == {"cutile:attention", "cutile:attention_simple"} and cands == {"cutile:attention_split"}
    got = {iid: _impl(iid) for iid in IDS}
    assert got["cutile:attention"].role == "default" and got["cutile:attention_simple"].role == "simple"
    assert got["cutile:attention_split"].role == "variant"
    assert got["cutile:attention_split"].description.startswith("candidate")
    srcs = {c.id: {s.path for s in c.sources} for c in got.values()}
    assert "cutile_src/attention_tma.py" in srcs["cutile:attention"]
    assert "cutile_src/attention_split.py" in srcs["cutile:attention_split"]
    assert srcs["cutile:attention_simple"] == {"cutile_src/attention.py"}


# -- the planner ---------------------------------------------------------------------------------
def test_plan_known_answers():
    from cutile_src.dispatch_attention import plan_attention, reachable, tma_config

    big = tma_config(4, 32, 4096, 128)                # 32 x 32 x 4 = 4096 tiles of 128 rows
    assert (big["TM"], big["TN"], big["grid"], big["hints"]) == (128, 128, [32, 32, 4], {"num_worker_warps": 8})
    assert big["variant"] == "tma" and big["LATENCY"] == 2
    small = tma_config(8, 32, 1, 128)                 # decode: one row a head, 64-row tiles
    assert (small["TM"], small["TN"], small["grid"], small["hints"]) == (64, 64, [1, 32, 8], {"occupancy": 2})
    assert tma_config(4, 32, 64, 128)["TM"] == 64          # a tile of 64 rows holds every query
    assert tma_config(1, 2, 1000, 64)["TM"] == 64          # 8 x 2 = 16 tiles of 128 rows < 132 SMs
    assert tma_config(1, 2, 1000, 64, sms=16)["TM"] == 128  # ... which fill 16 SMs
    assert tma_config(1, 32, 512, 128)["TM"] == 64         # 128 tiles of 128 rows: short of a wave
    assert tma_config(1, 33, 512, 128)["TM"] == 128        # 132: one wave
    # the split switch is off: the default plans tma even where split's rule would fire
    assert plan_attention(4, 32, 64, 8192, 128) == tma_config(4, 32, 64, 128)
    assert reachable("attention") == ("tma",)
    with pytest.raises(ValueError, match="problem"):
        reachable("softmax")
    with pytest.raises(ValueError, match="D"):
        tma_config(1, 1, 16, 96)
    with pytest.raises(ValueError, match="B, Hq"):
        tma_config(65536, 1, 16, 64)


def test_split_rule():
    """Key ranges of at least 4 tiles, as many as bring the programs to two waves, only below one
    wave; no empty range; the combine grid is the tma grid."""
    from cutile_src.dispatch_attention import ATTENTION, plan_attention, reachable, split_config, tma_config

    on = dict(ATTENTION, split=True)
    # 64 queries x 8192 keys, 4 x 32 heads: 128 programs < 132; 128 key tiles; 264 / 128 -> 3 ranges
    p = split_config(4, 32, 64, 8192, 128)
    assert (p["variant"], p["SPLITS"], p["PER"]) == ("split", 3, 43)
    assert (p["grid"], p["combine_grid"]) == ([3, 32, 4], [1, 32, 4])
    assert plan_attention(4, 32, 64, 8192, 128, A=on) == p and reachable("attention", on) == ("tma", "split")
    # 8 programs, 65 key tiles: 33 wanted, 16 allowed (4 tiles each) -> 13 ranges of 5
    assert (split_config(1, 8, 16, 4099, 128)["SPLITS"], split_config(1, 8, 16, 4099, 128)["PER"]) == (13, 5)
    assert split_config(4, 32, 4096, 4096, 128) is None     # the grid fills the SMs
    g = split_config(1, 1, 64, 1281, 64)     # the GPU test's guard case: 21 tiles, 5 ranges of 5
    assert (g["SPLITS"], g["PER"]) == (5, 5) and 4 * 5 * 64 > 1281 - 64   # range 4 starts past row 0's keys
    assert split_config(1, 1, 1, 7 * 64, 64) is None        # 7 key tiles: no two ranges of 4
    assert plan_attention(4, 32, 4096, 4096, 128, A=on) == tma_config(4, 32, 4096, 128)
    for suite in ("verify", "edge"):
        for c in P.cases(suite):
            q = split_config(c.B, c.Hq, c.Sq, c.Sk, c.D)
            if q is not None:
                tiles = -(-c.Sk // q["TN"])
                assert q["SPLITS"] >= 2 and q["PER"] >= 4
                assert (q["SPLITS"] - 1) * q["PER"] < tiles <= q["SPLITS"] * q["PER"]   # no empty range


def test_plan_contract_over_every_suite():
    """``plan(problem, facts)`` answers a word of VARIANTS for every case, the same plan the
    adapter makes from the case's (meta) tensors, with the table's tile and hints."""
    from backends import cutile_attention as A
    from cutile_src.dispatch_attention import ATTENTION, VARIANTS, plan
    from harness.meta_inputs import case_facts, meta_attention

    if A.L.ct is None:
        pytest.skip("cuda-tile not installed")
    for suite in ("smoke", "verify", "models", "edge", "bench", "full"):
        for c in P.cases(suite):
            p = plan("attention", case_facts(c))
            assert p.variant in VARIANTS["attention"] and p.sources == VARIANTS["attention"][p.variant]
            q, k = meta_attention(c)[:2]
            assert p.config == A._plan("default", q, k), c
            tm = p.config["TM"]
            assert tm in ATTENTION["block_m"] and p.config["TN"] == ATTENTION["block_n"][tm], (c, p)
            assert p.config["grid"] == [-(-c.Sq // tm), c.Hq, c.B] and p.config["hints"] == ATTENTION["hints"][tm]
            assert tm == 64 or (c.Sq > 64 and c.B * c.Hq * p.config["grid"][0] >= 132), (c, p)
    with pytest.raises(ValueError, match="problem"):
        plan("softmax", case_facts(problems.get("softmax").case(M=4, N=8)))


def test_split_id_declines_what_it_cannot_split():
    impl = _impl("cutile:attention_split")
    assert impl.role == "variant"
    assert "nothing to split" in impl.supports(P.case(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1))
    assert impl.supports(P.case(B=4, Hq=32, Hkv=8, Sq=64, Sk=8192, D=128, causal=1)) is None


# -- input checks --------------------------------------------------------------------------------
def test_input_checks_name_the_argument():
    from backends.cutile_attention import attention_args

    def m(*shape, dt=torch.bfloat16):
        return torch.empty(*shape, dtype=dt, device="meta")
    q, k, o = m(2, 4, 16, 64), m(2, 2, 32, 64), m(2, 4, 16, 64)
    attention_args(q, k, k, o, True)
    for args, name in (((m(2, 4, 16, 64, dt=torch.float32), k, k, o, 0), "q"),
                       ((m(2, 4, 16, 96), m(2, 2, 32, 96), m(2, 2, 32, 96), m(2, 4, 16, 96), 0), "q"),
                       ((q, m(2, 2, 32, 128), k, o, 0), "k"),
                       ((q, k, m(2, 2, 31, 64), o, 0), "v"),
                       ((q, k, k, m(2, 4, 17, 64), 0), "out"),
                       ((q, m(2, 3, 32, 64), m(2, 3, 32, 64), o, 0), "k"),
                       ((m(2, 4, 40, 64), k, k, m(2, 4, 40, 64), 1), "q"),
                       ((q, k.transpose(2, 3).contiguous().transpose(2, 3), k, o, 0), "k")):
        with pytest.raises((ValueError, TypeError), match=f"^{name}:") as e:
            attention_args(*args)
        assert "\n" not in str(e.value)


# -- the sm_90 compile without a GPU ----------------------------------------------------------------
_COMPILE = [
    ("cutile:attention", dict(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1)),
    ("cutile:attention", dict(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, dtype="float16")),
    ("cutile:attention", dict(B=2, Hq=4, Hkv=2, Sq=65, Sk=190, D=64, dtype="float16", causal=1, layout="bshd")),
    ("cutile:attention_split", dict(B=4, Hq=32, Hkv=8, Sq=64, Sk=8192, D=128, causal=1)),
    ("cutile:attention_simple", dict(B=2, Hq=4, Hkv=2, Sq=77, Sk=131, D=64)),
    ("cutile:attention_simple", dict(B=1, Hq=4, Hkv=1, Sq=100, Sk=257, D=128, dtype="float16", causal=1)),
]


@needs_tileiras
@pytest.mark.timeout(300)
@pytest.mark.parametrize("iid,kw", _COMPILE, ids=[f"{i}-{'-'.join(map(str, kw.values()))}" for i, kw in _COMPILE])
def test_compiles_for_sm90_with_wgmma_and_tma(iid, kw):
    """Compiled by tileiras for sm_90 without spills; the plan is the planner's; where cuobjdump is
    found, the SASS has wgmma (HGMMA) and TMA loads and stores, and no load through registers."""
    from backends import cutile_layer as L
    from cutile_src.dispatch_attention import plan_attention, split_config

    case = P.case(**kw)
    f = _impl(iid).compile_only_fn(case)
    assert f["arch"] == "sm_90" and f["spills"] == 0 and 0 < f["registers"] <= 255, f
    if iid == "cutile:attention":
        assert f["config"] == plan_attention(case.B, case.Hq, case.Sq, case.Sk, case.D), f["config"]
        assert f["kernel"] == "attention_tma_kernel"
        if f["config"]["TM"] == 128:   # 8 worker warps: two consumer warpgroups and the producer
            assert f["threads"] == 384, f
    elif iid == "cutile:attention_split":
        assert f["config"] == split_config(case.B, case.Hq, case.Sq, case.Sk, case.D), f["config"]
        assert list(f["kernels"]) == ["attention_split_kernel", "attention_combine_kernel"]
    else:
        assert f["config"]["variant"] == "simple" and f["kernel"] == "attention_kernel"
    if L._cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip nvidia-cuda-cuobjdump): no SASS to read")
    ops = f["kernels"][f["kernel"]]["sass_ops"]
    assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0 and ops["UTMASTG"] > 0, ops
    assert ops["LDG"] == 0 and ops["STL"] == 0, ops


# -- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_CUTILE), reason="needs a CUDA GPU and cuda-tile")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("iid", IDS)
def test_verify_suite_gpu(iid):
    from harness.verify import verify_case

    impl, ran = _impl(iid), 0
    # the split id also on a case whose last key range starts past the first rows' diagonal (rows
    # 0..62 see no key of range 4: the zero-shift guard in key_tiles), which the suite lacks
    extra = [P.case(B=1, Hq=1, Hkv=1, Sq=64, Sk=1281, D=64, causal=1)] if iid == "cutile:attention_split" else []
    for case in P.cases("verify") + extra:
        if impl.supports(case) is not None:   # the split id: nothing to split
            continue
        chk = verify_case(impl, P, case, "cuda", seeds=GPU_SEEDS)
        assert chk.ok, (iid, case, chk.reason)
        ran += 1
    assert ran >= (4 if iid == "cutile:attention_split" else len(P.cases("verify")))
