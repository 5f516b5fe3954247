"""cuTile layer: ids and roles, the planner's rules, the signature compile-only builds, compile-only
for sm_90 without a GPU (tileiras from the nvidia-cuda-tileiras pip package) with the cubin's
facts, input validation, and on a GPU the verify suite of every cuTile implementation."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import GPU_SEEDS  # noqa: E402
from harness import problems, registry

HAVE_CUTILE = importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.tile") is not None
HAVE_GPU = torch.cuda.is_available()
needs_cutile = pytest.mark.skipif(not HAVE_CUTILE, reason="cuda-tile not installed")
IDS = {
    "vector_add": ["cutile:vector_add", "cutile:vector_add_simple"],
    "softmax": ["cutile:softmax", "cutile:softmax_simple", "cutile:softmax_rows", "cutile:softmax_online",
                "cutile:softmax_split"],
    "gemm_epilogue": ["cutile:gemm_epilogue", "cutile:gemm_epilogue_simple", "cutile:gemm_epilogue_tiled",
                      "cutile:gemm_epilogue_splitk"],
}
#: candidates (python -m harness check cutile times them): hung or untimed on a GPU, or verified
#: kernels the default plans whose suffix is no algorithm word (rows_tma)
CANDIDATES = {"softmax": ["cutile:softmax_online_flat", "cutile:softmax_online_tma", "cutile:softmax_next",
                          "cutile:softmax_rows_tma"],
              "gemm_epilogue": []}


def _impl(key):
    registry.load_backends()
    return next(i for i in registry.select(layer="cutile") + registry.candidates() if i.id == key)


def _tileiras_works() -> bool:
    if not HAVE_CUTILE:
        return False
    from cuda.tile._compile import _find_compiler_bin
    try:
        _find_compiler_bin()
    except FileNotFoundError:   # no tileiras: cuTile compiles nothing here
        return False
    return True


needs_tileiras = pytest.mark.skipif(not _tileiras_works(), reason="tileiras (nvidia-cuda-tileiras) not found")


def test_registered_ids_and_roles():
    registry.load_backends()
    got = {i.id: i.role for i in registry.select(layer="cutile")}
    if not HAVE_CUTILE and not got:
        pytest.skip("cuda-tile not installed: the adapter registers its ids only with the package")
    want = {k for ks in IDS.values() for k in ks}
    assert want <= set(got), sorted(want - set(got))
    for p, ks in IDS.items():
        assert got[ks[0]] == "default" and got[ks[1]] == "simple"
        assert all(got[k] == "variant" for k in ks[2:])
    # the candidates stay out of the registry (no id in list / verify / compare) until a GPU has
    # run them, and the GPU script reaches them by name
    for p, ks in CANDIDATES.items():
        for k in ks:
            assert k not in got
            assert registry.get(p, k, candidates=True).description.startswith(("candidate", "verified"))
            with pytest.raises(ValueError):
                registry.get(p, k)


@needs_cutile
def test_available_says_why_without_gpu():
    from backends import cutile_layer as L
    if HAVE_GPU:
        assert L.available() is None
    else:
        assert "no CUDA GPU" in L.available()


# -- planner rules -----------------------------------------------------------------------------
def _with_switches(D, switches):
    """The planner module's plan_softmax / plan_gemm with ``switches`` given (other names as D's)."""
    import types
    ns = types.SimpleNamespace(**{k: getattr(D, k) for k in dir(D) if not k.startswith("__")})
    ns.plan_softmax = lambda *a, **k: D.plan_softmax(*a, **{"switches": switches, **k})
    ns.plan_gemm = lambda *a, **k: D.plan_gemm(*a, **{"switches": switches, **k})
    return ns


@needs_cutile
def test_softmax_plan_rows_then_online():
    """The base rules (every switch off): rows while a row rounds up to ROW_TILE_MAX, then online."""
    from cutile_src import dispatch as D
    off = dict.fromkeys(D.GPU_VERIFIED, False)
    D = _with_switches(D, off)
    # short rows: several a tile, the tile holding ROWS_TILE_ELEMS elements
    p = D.plan_softmax(32768, 512, 2)
    assert p["variant"] == "rows" and p["TN"] == 512 and p["ROWS"] * 512 == D.SOFTMAX["ROWS_TILE_ELEMS"]
    assert p["hints"] == {"occupancy": 4}
    # a row that rounds up to the limit: one row a tile, 8 worker warps
    p = D.plan_softmax(4096, D.SOFTMAX["ROW_TILE_MAX"], 4)
    assert p == {"variant": "rows", "ROWS": 1, "TN": D.SOFTMAX["ROW_TILE_MAX"], "grid": 132,
                 "hints": {"num_worker_warps": 8}}
    # the grid: co-resident programs (occupancy x SMs) looping over the row tiles, never more
    # programs than row tiles
    assert D.plan_softmax(32768, 1024, 2)["grid"] == 4 * 132
    assert D.plan_softmax(5, 1024, 2)["grid"] == 2
    assert D.plan_softmax(4096, 8000, 2)["hints"] == {"occupancy": 2}
    # one column more: online
    p = D.plan_softmax(4096, D.SOFTMAX["ROW_TILE_MAX"] + 1, 4)
    assert p["variant"] == "online" and p["hints"] == D.ONLINE_HINTS and p["grid"] == 4096
    assert D.plan_softmax(3, 262_147, 4)["TILE"] == D.SOFTMAX["ONLINE_TILE"]
    # never more rows a tile than there are rows (rounded up to a power of two)
    assert D.plan_softmax(3, 1, 4)["ROWS"] == 4 and D.plan_softmax(1, 1, 4)["ROWS"] == 1


@needs_cutile
def test_gemm_plan_waves_and_splitk():
    """The base rules (every switch off): tile shape by waves, split-K for few rows."""
    from cutile_src import dispatch as D
    D = _with_switches(D, dict.fromkeys(D.GPU_VERIFIED, False))
    big = D.plan_gemm(4096, 28672, 4096, 2, 132)
    assert big["variant"] == "tiled" and (big["TM"], big["TN"]) == (128, 256)
    assert big["grid"] == 32 * 112 and big["hints"] == {"num_worker_warps": 8}
    # 256 rows: 128 x 256 tiles keep the SMs 36 % busy (48 programs), 128 x 128 and 64 x 128
    # both 73 % (96 programs in one wave, 192 in two): the larger of the two
    mid = D.plan_gemm(256, 6144, 4096, 2, 132)
    assert (mid["TM"], mid["TN"]) == (128, 128)
    # 256 x 4096: only 64 x 128 tiles reach a full wave (128 programs)
    assert (lambda p: (p["TM"], p["TN"]))(D.plan_gemm(256, 4096, 14336, 2, 132)) == (64, 128)
    # 2 x 112 = 224 of 264 slots (85 %) is busy enough for the largest tile
    assert D.plan_gemm(256, 28672, 4096, 2, 132)["TN"] == 256
    # decode: 48 C tiles, K = 4096 -> split-K, no empty slice, one wave of programs (one an SM)
    sk = D.plan_gemm(16, 6144, 4096, 2, 132)
    assert sk["variant"] == "splitk" and sk["TM"] == 16
    k_tiles = -(-4096 // sk["TK"])
    assert (sk["SPLIT"] - 1) * sk["KPER"] < k_tiles <= sk["SPLIT"] * sk["KPER"]
    assert 132 - 48 < sk["grid"] <= 132 and sk["SPLIT"] == 2
    # 32 tiles: 4 slices (128 programs); 64 tiles: 2; 224 tiles (more than a wave): no split
    assert D.plan_gemm(16, 4096, 14336, 2, 132)["SPLIT"] == 4
    assert D.plan_gemm(16, 8192, 28672, 2, 132)["SPLIT"] == 2
    assert D.plan_gemm(16, 28672, 4096, 2, 132)["variant"] == "tiled"
    # 67..132 tiles: a second slice would only add a wave: tiled; the splitk id still splits
    assert D.plan_gemm(16, 128 * 70, 4096, 2, 132)["variant"] == "tiled"
    assert D.splitk_config(16, 128 * 70, 4096, 132, min_split=2)["SPLIT"] == 2
    # few K tiles: at least MIN_KTILES a slice
    assert D.plan_gemm(16, 520, 8192, 2, 132)["KPER"] == D.GEMM_SPLITK["MIN_KTILES"]
    # short K: not worth splitting
    assert D.plan_gemm(16, 4096, 256, 2, 132)["variant"] == "tiled"
    # N = 50257: B's rows are not 16-byte multiples, so no TMA-only 128 x 256 tile (unstaged)
    odd = D.plan_gemm(4096, 50257, 768, 2, 132)
    assert odd["variant"] == "tiled" and (odd["TM"], odd["TN"]) == (128, 128)
    assert odd["hints"] == {"num_worker_warps": 8}


@needs_cutile
def test_default_routes_only_to_gpu_verified_variants(monkeypatch):
    """A kernel is the default's only once GPU_VERIFIED says so: split, rows_tma, stage and
    persistent are (verified and timed, 2026-12-06), small too (run as cutile:gemm_epilogue_next);
    the flat and TMA online kernels are not, so the default's plan and reachable() leave them
    out."""
    from cutile_src import dispatch as D
    assert {k for k, v in D.GPU_VERIFIED.items() if v} == {"split", "rows_tma", "stage", "persistent", "small"}
    assert set(D.reachable("gemm_epilogue")) == {"tiled", "splitk"}   # staging: a config, no word
    assert set(D.reachable("softmax")) == {"rows", "rows_tma", "online", "split"}
    assert D.plan_gemm(16, 50257, 768, 2, a_rows16=True, b_rows16=False)["variant"] == "tiled"  # B in place
    assert set(D.plan_gemm(256, 50257, 768, 2, a_rows16=True, b_rows16=False)["stage"]) == {"b"}
    assert D.plan_softmax(4096, 50257, 2, contiguous=True)["variant"] == "online"      # flat: off
    assert D.plan_softmax(4096, 128256, 2, contiguous=True)["variant"] == "online"     # online_tma: off
    assert D.plan_softmax(4096, 1024, 2, contiguous=True)["variant"] == "rows_tma"
    assert D.plan_softmax(4096, 1000, 2, rows16=False)["variant"] == "rows"           # TMA cannot load it
    assert D.plan_softmax(8, 200_003, 2)["variant"] == "split"
    for k in D.GPU_VERIFIED:
        monkeypatch.setitem(D.GPU_VERIFIED, k, True)
    # the -inf padding kernels stay for rows TMA cannot load
    assert set(D.reachable("softmax")) == {"rows", "rows_tma", "online", "online_tma", "online_flat", "split"}
    assert set(D.plan_gemm(2048, 2047, 2048, 2)["stage"]) == {"b"}
    assert "stage" not in D.plan_gemm(16, 50257, 768, 2)   # small: B past L2 read in place
    monkeypatch.setitem(D.GPU_VERIFIED, "small", False)
    assert set(D.plan_gemm(16, 50257, 768, 2)["stage"]) == {"b"}
    p = D.plan_gemm(16, 4096, 4096, 2)   # aligned: nothing to stage
    assert p["variant"] == "splitk" and "stage" not in p
    assert D.plan_softmax(4096, 50257, 2, contiguous=True)["variant"] == "online_flat"
    assert D.plan_softmax(4096, 50257, 2)["variant"] == "online"  # strided odd rows: no TMA, no flat view
    assert D.plan_softmax(4096, 128256, 2, contiguous=True)["variant"] == "online_tma"
    rows = D.plan_softmax(4096, 1024, 2, contiguous=True)
    assert rows["variant"] == "rows_tma" and rows["LATENCY"] == D.ROWS_LATENCY
    assert {k: v for k, v in rows.items() if k != "LATENCY"} | {"variant": "rows"} == D.rows_config(4096, 1024)
    assert D.plan_softmax(8, 200_003, 2)["variant"] == "split"


@needs_cutile
def test_gemm_plan_stages_operands_whose_rows_are_not_16_bytes():
    from cutile_src import dispatch as D
    # the staging rules without the small switch (an operand a launch)
    P = lambda *a, **k: D.plan_gemm(*a, switches=dict(D.GPU_VERIFIED, stage=True, small=False), **k)  # noqa: E731
    # the facts default to contiguous operands: A's rows are K elements, B's N
    assert set(P(100, 333, 781, 2)["stage"]) == {"a", "b"}
    assert set(P(100, 336, 781, 2)["stage"]) == {"a"}
    assert set(P(100, 333, 784, 2)["stage"]) == {"b"}
    assert P(100, 336, 784, 2) == D.plan_gemm(100, 336, 784, 2, switches=dict(D.GPU_VERIFIED, stage=False, small=False))
    assert "stage" not in P(100, 336, 784, 2)
    # a strided / offset operand: the adapter's facts, whatever K and N are
    assert set(P(256, 4096, 4096, 2, a_rows16=False)["stage"]) == {"a"}
    assert P(256, 4095, 4096, 2, b_rows16=True)["variant"] == "tiled"
    # split-K keeps its plan on staged operands: the plan's variant is the GEMM's
    sk = P(32, 1001, 4097, 2)
    assert sk["variant"] == "splitk" and set(sk["stage"]) == {"a", "b"}
    # staged, the 128 x 256 TMA tile is chosen as for aligned operands; unstaged it is not
    big = P(4096, 50257, 768, 2, 132)
    assert (big["TM"], big["TN"]) == (128, 256) and big["hints"] == {"num_worker_warps": 8}
    assert D.tiled_config(4096, 50257, 768, 2, 132)["TN"] == 128
    # the few-row tile for 16 rows on staged B (393 C tiles: three waves, no split)
    few = P(16, 50257, 768, 2, 132)
    assert few["variant"] == "tiled" and few["TM"] == 16
    # the copy's grid: its tiles, at most WAVES waves of programs, at least one
    assert D.stage_config(768, 50257, 132)["grid"] == D.GEMM_STAGE["WAVES"] * 132
    assert D.stage_config(3, 5, 132)["grid"] == 1


def test_the_layer_contract_plan_names_the_staging_kernel_only_where_it_stages():
    """Staging is no word: the contract's plan for a case whose B rows are off 16 bytes is the
    GEMM's word with ``stage`` in its config and the copy kernel in its sources; A and B both off
    16 bytes: the one-launch pair kernel; aligned operands: no ``stage``, no copy kernel."""
    from cutile_src import dispatch as D
    from harness.meta_inputs import case_facts
    G = problems.get("gemm_epilogue")

    def kernels(p):
        return {k for s in p.sources for k in s.kernels}
    b_off = D.plan("gemm_epilogue", case_facts(G.case(M=2048, N=2047, K=2048, act="gelu")))
    assert b_off.variant == "tiled" and set(b_off.config["stage"]) == {"b"}
    assert {"stage_rows_kernel", "gemm_epilogue_tiled_kernel"} <= kernels(b_off)
    assert "stage_pair_kernel" not in kernels(b_off)
    both = D.plan("gemm_epilogue", case_facts(G.case(M=97, N=211, K=389, act="relu")))
    assert set(both.config["stage"]) == {"ab"} and "stage_pair_kernel" in kernels(both)
    aligned = D.plan("gemm_epilogue", case_facts(G.case(M=4096, N=4096, K=4096)))
    assert "stage" not in aligned.config and not kernels(aligned) & {"stage_rows_kernel", "stage_pair_kernel"}
    assert set(D.VARIANTS["gemm_epilogue"]) == {"tiled", "splitk"}


@needs_cutile
def test_gemm_persistent_grid_switch():
    """persistent (on in the default): one program an SM where the tiles outnumber the SMs, the
    same tiles; one program a tile with the switch off."""
    from cutile_src import dispatch as D
    for M, N, K in ((3000, 3000, 3000), (4096, 50257, 768), (555, 1234, 777), (256, 6144, 4096), (64, 32000, 4096)):
        off = D.plan_gemm(M, N, K, 2, 132, switches=dict(D.GPU_VERIFIED, persistent=False))
        on = D.plan_gemm(M, N, K, 2, 132)            # the default: persistent is on
        no_grid = lambda p: {k: (no_grid(v) if isinstance(v, dict) else v) for k, v in p.items() if k != "grid"}  # noqa: E731
        assert no_grid(on) == no_grid(off)
        if off["variant"] == "tiled":
            tiles = -(-M // off["TM"]) * -(-N // off["TN"])
            assert off["grid"] == tiles and on["grid"] == min(tiles, 132)
    p = D.plan_gemm(3000, 3000, 3000, 2, 132)
    assert p["grid"] == 132 and (p["TM"], p["TN"]) == (128, 128)  # 576 tiles: 87 % of 5 waves
    p = D.plan_gemm(2048, 2047, 2048, 2, 132)        # B staged: the TMA tile
    assert p["variant"] == "tiled" and set(p["stage"]) == {"b"} and p["TN"] == 256


@needs_cutile
def test_small_switch_is_on_and_without_it_the_plans_it_replaced():
    """small is on in GPU_VERIFIED (it replaced its candidate cutile:gemm_epilogue_next: no such id
    remains, nor the one-operand staging candidate gemm_epilogue_pack); with it off the planner
    gives the plans it replaced (two staging launches, 64 x 128 tiles, split-K at 16 x 6144)."""
    from cutile_src import dispatch as D
    assert D.GPU_VERIFIED["small"] is True and D.GPU_VERIFIED["stage"] is True and "pack" not in D.GPU_VERIFIED
    registry.load_backends()
    for gone in ("cutile:gemm_epilogue_next", "cutile:gemm_epilogue_pack"):
        with pytest.raises(ValueError):
            registry.get("gemm_epilogue", gone, candidates=True)
    P = lambda M, N, K: D.plan_gemm(M, N, K, 2, 132, switches=dict(D.GPU_VERIFIED, small=False))  # noqa: E731
    p = P(97, 211, 389)
    assert p["stage"] == {"a": {"TR": 8, "TC": 512, "grid": 13}, "b": {"TR": 8, "TC": 512, "grid": 49}}
    assert {k: v for k, v in p.items() if k != "stage"} == {"variant": "tiled", "TM": 64, "TN": 128, "TK": 64,
                                                            "GROUP": 8, "grid": 4, "hints": {}}
    p = P(411, 733, 957)
    assert set(p["stage"]) == {"a", "b"} and (p["TN"], p["grid"]) == (128, 42)
    p = P(16, 50257, 768)
    assert set(p["stage"]) == {"b"} and (p["TM"], p["TN"], p["TK"]) == (16, 128, 128)
    p = P(16, 6144, 4096)
    assert p["variant"] == "splitk" and (p["TN"], p["SPLIT"], p["grid"]) == (128, 2, 96)


@needs_cutile
def test_small_plans_of_the_small_and_odd_gemms():
    """The default's plans (small on) on the cases of issue 42's class, known answers: one staging
    launch for A and B, narrower tiles where the C tiles leave SMs idle, split-K only where even
    those do, a B of unaligned rows larger than L2 read in place where M <= 64."""
    from cutile_src import dispatch as D
    P = lambda M, N, K, **k: D.plan_gemm(M, N, K, 2, 132, **k)  # noqa: E731
    no_small = dict(D.GPU_VERIFIED, small=False)
    off = lambda M, N, K, **k: D.plan_gemm(M, N, K, 2, 132, switches=no_small, **k)  # noqa: E731
    # 97 x 211 x 389: A and B in one launch (the two launches' programs, 13 + 49), 64 x 64 tiles
    p = P(97, 211, 389)
    assert p == {"variant": "tiled", "TM": 64, "TN": 64, "TK": 64, "GROUP": 8, "grid": 8, "hints": {},
                 "stage": {"ab": {"TR": 8, "TC": 512, "grid": 62}}}
    # 411 x 733 x 957: 42 tiles of 64 x 128 -> 84 of 64 x 64, no split (over half the SMs)
    p = P(411, 733, 957)
    assert set(p["stage"]) == {"ab"} and p["stage"]["ab"]["grid"] == 104 + 240
    assert (p["variant"], p["TM"], p["TN"], p["grid"]) == ("tiled", 64, 64, 84)
    # 16 x 50257 x 768: B (77 MB) past L2, one row tile: read in place, skinny co-resident tiles
    p = P(16, 50257, 768)
    assert p == {"variant": "tiled", "TM": 16, "TN": 64, "TK": 64, "GROUP": 8, "grid": 4 * 132,
                 "hints": {"occupancy": 4}}
    assert P(16, 50257, 768, l2=200 * 2 ** 20)["stage"].keys() == {"b"}       # B within L2: staged
    assert P(16, 4097, 8192)["stage"].keys() == {"b"}   # 65 column tiles: under a wave, staged
    assert P(256, 50257, 768) == off(256, 50257, 768)      # several row tiles: as without the switch
    # A unaligned too: A alone staged, B in place
    p = P(16, 50257, 777)
    assert p["stage"].keys() == {"a"} and p["hints"] == {"occupancy": 4}
    # 16 x 6144 x 4096: 48 tiles of 128 columns -> 96 of 64: no split-K, one launch
    assert P(16, 6144, 4096) == {"variant": "tiled", "TM": 16, "TN": 64, "TK": 128, "GROUP": 8, "grid": 96,
                                 "hints": {}}
    assert P(16, 8192, 28672)["variant"] == "tiled"
    # one row of 33 fp16 elements (the adapter's fact: a single row starts on 16 bytes, so it is not
    # staged): A loads element by element (its stride is no 16-byte multiple), where the 64-column
    # tile spills: the default's tile
    one = P(1, 1024, 33, a_rows16=True)
    assert one == off(1, 1024, 33, a_rows16=True) and one["TN"] == 128
    assert P(1, 17, 33)["TN"] == 128     # one column tile either way: not narrowed
    # 16 x 4096 x 14336: 64 tiles of 64 columns, still under half the SMs: split in 2 (not 4)
    p = P(16, 4096, 14336)
    assert (p["variant"], p["TN"], p["SPLIT"], p["grid"]) == ("splitk", 64, 2, 128)
    # a wave of tiles or more: the plan without the switch
    for M, N, K in ((4096, 28672, 4096), (256, 6144, 4096), (3000, 3000, 3000), (16, 28672, 4096),
                    (64, 18432, 5120), (4096, 50257, 768), (2048, 2047, 2048)):
        assert P(M, N, K) == off(M, N, K), (M, N, K)


@needs_cutile
def test_small_plan_invariants():
    """Over a grid of shapes, the default's plans (small on): one staging launch at most (stage {"a"}, {"b"}
    or {"ab"}, "ab" exactly where both operands need it and B is not read in place); split-K only
    where its C tiles fill under half the SMs, slices non-empty; never more programs than tiles
    (or co-resident programs for the hinted in-place tile); every tile at least 64 columns wide."""
    from cutile_src import dispatch as D
    for M in (1, 7, 16, 33, 64, 97, 127, 256, 411, 1025, 4096):
        for N in (17, 211, 520, 733, 1001, 4096, 6144, 50257):
            for K in (33, 389, 768, 957, 4096, 14336):
                p = D.plan_gemm(M, N, K, 2, 132)
                a16, b16 = K % 8 == 0, N % 8 == 0
                g = p
                if "stage" in p:
                    assert set(p["stage"]) in ({"a"}, {"b"}, {"ab"}), p
                    assert ("ab" in p["stage"]) == (not a16 and not b16 and "occupancy" not in g["hints"])
                else:
                    assert (a16 and b16) or ("occupancy" in g["hints"] and a16), (M, N, K, p)
                assert g["TN"] >= 64
                tiles = -(-M // g["TM"]) * -(-N // g["TN"])
                if g["variant"] == "splitk":
                    assert tiles <= 132 / 2 and g["SPLIT"] >= 2 and g["grid"] == tiles * g["SPLIT"]
                    k_tiles = -(-K // g["TK"])
                    assert (g["SPLIT"] - 1) * g["KPER"] < k_tiles <= g["SPLIT"] * g["KPER"]
                else:
                    assert g["grid"] <= min(tiles, 132 * g["hints"].get("occupancy", 1))


@needs_cutile
def test_gemm_adapter_facts_and_staged_buffers():
    from backends import cutile_layer as L
    from cutile_src import gemm_epilogue_splitk as sk, gemm_stage as stage
    m = lambda *s: torch.empty(*s, dtype=torch.bfloat16, device="meta")  # noqa: E731
    assert L._rows16(m(16, 768)) and not L._rows16(m(768, 50257))
    assert not L._rows16(m(1 + 64 * 64)[1:].view(64, 64))  # offset base
    assert L._rows16(m(1, 7))  # one row: only the base counts
    buf, view = stage.staged_buffer(m(768, 50257))
    assert buf.shape == (768, 50272) and view.shape == (768, 50257) and view.stride() == (50272, 1)
    assert L._rows16(view)
    assert sk.workspace({"SPLIT": 3}, 16, 50257, "meta", pad=True).shape == (3, 16, 50272)
    assert sk.workspace({"SPLIT": 3}, 16, 50257, "meta").shape == (3, 16, 50257)


@needs_cutile
def test_softmax_next_plan_by_class():
    """The rules behind softmax_next, each a rule of the case's facts (NEXT: every switch on)."""
    from cutile_src import dispatch as D
    P = lambda M, N, es, **k: D.plan_softmax(M, N, es, 132, switches=D.NEXT, **k)  # noqa: E731
    # few long rows (fewer than two rows an SM): split, whatever the alignment
    for M, N, es in ((1, 786_433, 4), (8, 200_003, 2), (48, 65_536, 2), (96, 100_000, 2), (2, 2_000_000, 4),
                     (263, 10_000, 4)):
        p = P(M, N, es)
        assert p["variant"] == "split", (M, N)
        assert (p["C"] - 1) * p["CHUNK"] < N <= p["C"] * p["CHUNK"] and p["CP"] >= p["C"] > 0
        assert p["CP"] & (p["CP"] - 1) == 0 and p["C"] <= D.SPLIT["MAX_PARTS"]
        # the units fill two programs an SM, unless the chunk is already at its floor
        assert M * p["C"] >= 2 * 132 or p["CHUNK"] == D.SPLIT["MIN_CHUNK"]
        assert p["grid"] <= M * p["C"]
    assert P(264, 10_000, 4)["variant"] == "rows_tma"     # two rows an SM: a row a program is enough
    assert P(100, 8184, 4)["variant"] == "rows_tma"       # too short to cut
    # rows with TMA only where the rows are 16-byte multiples and the tile fits beside its mask
    assert P(4096, 1000, 2, rows16=False)["variant"] == "rows"
    assert P(4096, 32_000, 2)["variant"] == "rows_tma" and P(4096, 32_000, 4)["variant"] == "rows"
    assert P(4096, 16_384, 4)["variant"] == "rows_tma"
    # long rows: flat for contiguous rows that are no 16-byte multiple, else online_tma (aligned),
    # else the -inf padding kernel
    assert P(4096, 50_257, 2, contiguous=True)["variant"] == "online_flat"
    assert P(4096, 50_257, 2)["variant"] == "online"
    assert P(4096, 128_256, 2, contiguous=True)["variant"] == "online_tma"
    assert P(4096, 128_256, 2, rows16=False)["variant"] == "online"
    assert P(2 ** 31 // 50_000, 50_001, 2, contiguous=True)["variant"] == "online"  # 32-bit offsets


@needs_cutile
def test_online_programs_keep_rows_in_l2():
    """online_tma / online_flat: the most programs an SM whose rows in flight fit half of L2."""
    from cutile_src import dispatch as D
    l2 = 50 * 2 ** 20
    for N, es in ((32_768 + 8, 2), (50_257, 2), (50_257, 4), (128_256, 2), (151_936, 4), (40_000, 2)):
        p = D.online_config(4096, N, es, 132, l2, "online_tma")
        occ = p["hints"]["occupancy"]
        in_flight = occ * 132 * N * es
        assert p["grid"] == occ * 132
        if in_flight <= l2 / 2:
            bigger = [o for o in D.ONLINE["OCCUPANCY"] if o > occ]
            assert all(o * 132 * N * es > l2 / 2 for o in bigger), (N, es)
        else:   # not even one a SM fits: the fallback
            assert occ == D.ONLINE["NO_FIT"] and 132 * N * es > l2 / 2
        assert p["LATENCY"] == D.ONLINE["LATENCY"][es] and 1 <= p["LATENCY"] <= 10
    assert D.online_config(3, 100_000, 2)["grid"] == 3   # never more programs than rows


# -- signatures and compile-only -------------------------------------------------------------------
@needs_cutile
def test_array_constraint_alignment_facts():
    from backends import cutile_layer as L
    x = torch.empty(100, dtype=torch.float16, device="meta")
    c = L.array_constraint(x[3:])
    assert c.base_addr_divisible_by == 1 and c.stride_constant == (1,)  # a launch: 16 bytes or 1
    assert L.array_constraint(x[8:]).base_addr_divisible_by == 16
    m = torch.empty(300, 780, dtype=torch.float32, device="meta")[:, :777]
    c = L.array_constraint(m)
    assert c.stride_divisible_by[0] == 4 and c.stride_constant == (None, 1)  # 780 * 4 bytes = 16 * 195
    odd = torch.empty(1 + 4 * 1003, dtype=torch.bfloat16, device="meta")[1:].view(4, 1003)
    c = L.array_constraint(odd)
    assert c.stride_divisible_by[0] == 1 and c.base_addr_divisible_by == 1
    assert L.array_constraint(torch.empty(300, 64, device="meta")).shape_divisible_by == (1, 16)


_COMPILE_CASES = [
    ("cutile:vector_add", problems.get("vector_add").case(N=4099, dtype="float16", misalign=3)),
    ("cutile:vector_add_simple", problems.get("vector_add").case(N=1_000_003)),
    ("cutile:softmax", problems.get("softmax").case(M=300, N=777, layout="strided_odd")),
    ("cutile:softmax", problems.get("softmax").case(M=4096, N=50_257, dtype="bfloat16")),
    ("cutile:softmax_simple", problems.get("softmax").case(M=17, N=40_000, dtype="float16", layout="strided_odd")),
    ("cutile:gemm_epilogue", problems.get("gemm_epilogue").case(M=16, N=6144, K=4096, act="gelu")),
    ("cutile:gemm_epilogue_simple", problems.get("gemm_epilogue").case(M=127, N=65, K=129, act="gelu", bias=0)),
    ("cutile:softmax_online_flat", problems.get("softmax").case(M=37, N=781, dtype="float32")),
    ("cutile:softmax_rows_tma", problems.get("softmax").case(M=1823, N=781, dtype="bfloat16", layout="strided")),
    ("cutile:softmax_online_tma", problems.get("softmax").case(M=17, N=40_000, dtype="float16", layout="strided_odd")),
    ("cutile:softmax_split", problems.get("softmax").case(M=96, N=100_000, dtype="bfloat16")),
    ("cutile:softmax_next", problems.get("softmax").case(M=4096, N=151_936, dtype="float32")),
    ("cutile:softmax_next", problems.get("softmax").case(M=1, N=786_433, dtype="float32")),
    ("cutile:gemm_epilogue", problems.get("gemm_epilogue").case(M=2048, N=2047, K=2048, act="gelu")),
    ("cutile:gemm_epilogue", problems.get("gemm_epilogue").case(M=97, N=211, K=389, act="relu", dtype="bfloat16")),
    ("cutile:gemm_epilogue", problems.get("gemm_epilogue").case(M=16, N=50257, K=768, act="none", dtype="bfloat16")),
    ("cutile:gemm_epilogue", problems.get("gemm_epilogue").case(M=1, N=1024, K=33, act="gelu")),
]


@needs_tileiras
@pytest.mark.parametrize("key,case", _COMPILE_CASES,
                         ids=[f"{k}-{'x'.join(map(str, c.dims.values()))}-{c.dtype}" for k, c in _COMPILE_CASES])
def test_compile_only_sm90(key, case):
    f = _impl(key).compile_only_fn(case)
    assert f["arch"] == "sm_90" and f["cubin_bytes"] > 1000
    assert 0 < f["registers"] <= 255 and f["threads"] >= 32 and f["compile_s"] > 0
    assert f["kernels"] and "config" in f
    if key == "cutile:gemm_epilogue":   # the default's plans (small on) compile without spills
        assert f["spills"] == 0
        if case.M == 97:        # A and B staged in one launch, then the GEMM
            assert list(f["kernels"]) == ["stage_pair_kernel", "gemm_epilogue_tiled_kernel"]
        elif case.M == 2048:    # B's rows off 16 bytes: B staged first
            assert f["config"]["variant"] == "tiled" and set(f["config"]["stage"]) == {"b"}
            assert list(f["kernels"]) == ["stage_rows_kernel", "gemm_epilogue_tiled_kernel"]
        else:   # few rows: narrower tiles (16 x 6144) or B read in place (16 x 50257): one launch, no split-K
            assert list(f["kernels"]) == ["gemm_epilogue_tiled_kernel"]
    if key == "cutile:softmax_online_flat":
        assert f["config"]["variant"] == "online_flat" and f["spills"] == 0
    if key in ("cutile:softmax_split", "cutile:softmax_next"):
        assert f["spills"] == 0
        if f["config"]["variant"] == "split":   # two launches: the partials, then the rows
            assert list(f["kernels"]) == ["softmax_split_stats_kernel", "softmax_split_norm_kernel"]


@needs_tileiras
def test_gemm_sass_on_hopper():
    """The aligned large GEMM: wgmma (HGMMA) and TMA loads (UTMALDG) in the SASS, no spills."""
    from backends import cutile_layer as L
    if L._cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip nvidia-cuda-cuobjdump)")
    f = _impl("cutile:gemm_epilogue").compile_only_fn(
        problems.get("gemm_epilogue").case(M=4096, N=28672, K=4096, act="gelu"))
    ops = f["kernels"]["gemm_epilogue_tiled_kernel"]["sass_ops"]
    assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0
    assert f["spills"] == 0 and f["threads"] == 384


@needs_tileiras
def test_unaligned_rows_load_wide_after_staging_and_flat():
    """N = 50257 bf16: the default's GEMM on staged B loads both operands through TMA (no LDG left
    in it) and the copy stores 16 bytes a thread-instruction; the flat softmax loads through TMA."""
    from backends import cutile_layer as L
    if L._cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip nvidia-cuda-cuobjdump)")
    f = _impl("cutile:gemm_epilogue").compile_only_fn(
        problems.get("gemm_epilogue").case(M=256, N=50257, K=768, dtype="bfloat16", act="none"))
    g, p = f["kernels"]["gemm_epilogue_tiled_kernel"]["sass_ops"], f["kernels"]["stage_rows_kernel"]["sass_ops"]
    assert g["HGMMA"] > 0 and g["UTMALDG"] > 0 and g["LDG"] == 0 and f["spills"] == 0
    assert p["STG"] > 0 and p["STG"] * 8 <= p["LDG"]  # 2-byte loads, 16-byte stores
    s = _impl("cutile:softmax_online_flat").compile_only_fn(
        problems.get("softmax").case(M=64, N=50257, dtype="bfloat16"))
    ops = s["kernels"]["softmax_online_flat_kernel"]["sass_ops"]
    assert ops["UTMALDG"] > 0 and ops["LDG"] == 0 and s["spills"] == 0


@needs_tileiras
def test_small_plans_compile_without_spills():
    """The fact behind INPLACE's occupancy hint: the in-place skinny tile (B's rows unaligned,
    element loads) compiles for every row tile it is planned with (16..64) without spills."""
    from backends import cutile_layer as L
    from cutile_src import dispatch as D, gemm_epilogue_tiled as T
    for M in (16, 33, 64):
        p = D.plan_gemm(M, 50257, 768, 2, 132)
        assert p["variant"] == "tiled" and "occupancy" in p["hints"]
        m = lambda *s: torch.empty(*s, dtype=torch.bfloat16, device="meta")  # noqa: E731
        a, b, c = m(M, 768), m(768, 50257), m(M, 50257)
        f = L.compile_kernel(T.gemm_epilogue_tiled_kernel,
                             (a, b, m(50257), c, 1, 2, p["TM"], p["TN"], p["TK"], p["GROUP"], False), p["hints"],
                             sass=False)
        assert f["local_bytes"] == 0 and f["registers"] * p["hints"]["occupancy"] * f["threads"] <= 65536, (M, f)


@needs_tileiras
def test_splitk_partial_fills_an_sm():
    """The fact behind GEMM_SPLITK["PER_SM"] = 1: the split-K partial kernel, as compiled for
    the decode shapes' row tiles, needs more registers or shared memory than half an SM has
    (65536 registers, 228 KB), so one program runs an SM and the slices fill one wave."""
    from backends import cutile_layer as L
    from cutile_src import dispatch as D, gemm_epilogue_splitk as S
    assert D.GEMM_SPLITK["PER_SM"] == 1
    for M in (16, 64):
        p = D.splitk_config(M, 6144, 4096, 132)
        a = torch.empty(M, 4096, dtype=torch.bfloat16, device="meta")
        b = torch.empty(4096, 6144, dtype=torch.bfloat16, device="meta")
        ws = torch.empty(p["SPLIT"], M, 6144, dtype=torch.float32, device="meta")
        f = L.compile_kernel(S.gemm_splitk_partial_kernel, (a, b, ws, p["KPER"], p["TM"], p["TN"], p["TK"], True),
                             p["hints"], sass=False)
        assert f["registers"] * f["threads"] > 65536 // 2 or f["smem"] > 228 * 1024 // 2, f


@needs_tileiras
def test_neg_inf_padding_rules_out_tma_loads():
    """The evidence for the *_tma softmax variants: the same tile loaded with -inf padding
    (rows, online) goes through registers (LDG, no UTMALDG); masked by index instead (rows_tma,
    online_tma) tileiras loads it through TMA (UTMALDG, no LDG)."""
    from backends import cutile_layer as L
    if L._cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip nvidia-cuda-cuobjdump)")
    sm = problems.get("softmax")
    for plain, tma, case in (("rows", "rows_tma", sm.case(M=32768, N=1024, dtype="bfloat16")),
                             ("online", "online_tma", sm.case(M=4096, N=128256, dtype="bfloat16"))):
        a = _impl(f"cutile:softmax_{plain}").compile_only_fn(case)["kernels"][f"softmax_{plain}_kernel"]["sass_ops"]
        b = _impl(f"cutile:softmax_{tma}").compile_only_fn(case)
        assert b["config"]["variant"] == tma and b["spills"] == 0
        b = b["kernels"][f"softmax_{tma}_kernel"]["sass_ops"]
        assert a["LDG"] > 0 and a["UTMALDG"] == 0, a
        assert b["UTMALDG"] > 0 and b["LDG"] == 0, b


@needs_tileiras
def test_cubin_facts_match_cuobjdump():
    from backends import cutile_layer as L
    exe = L._cuobjdump()
    if exe is None:
        pytest.skip("cuobjdump not found")
    from cutile_src import softmax_rows
    x = torch.empty(64, 1000, dtype=torch.bfloat16, device="meta")
    f = L.compile_kernel(softmax_rows.softmax_rows_kernel, (x, x, 4, 1024, True), sass=False)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.cubin"
        p.write_bytes(f["_cubin"])
        r = subprocess.run([exe, "--dump-resource-usage", str(p)], capture_output=True, text=True)
    assert f"REG:{f['registers']} " in r.stdout and f"STACK:{f['local_bytes']} " in r.stdout


# -- input validation --------------------------------------------------------------------------
@needs_cutile
def test_input_validation_names_the_argument():
    from backends import cutile_layer as L
    m = lambda *s, dt=torch.float16: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    with pytest.raises(TypeError, match="x"):
        L.vector_add_args(m(8, dt=torch.int32), m(8), m(8))
    with pytest.raises(ValueError, match="y"):
        L.vector_add_args(m(8), m(9), m(8))
    with pytest.raises(ValueError, match="x"):
        L.softmax_args(m(2, 3, 4), m(2, 3, 4))
    with pytest.raises(ValueError, match="x"):
        L.softmax_args(m(8, 8).t(), m(8, 8))
    with pytest.raises(TypeError, match="a"):
        L.gemm_args(m(4, 4, dt=torch.float32), m(4, 4), None, "relu", m(4, 4))
    with pytest.raises(ValueError, match="bias"):
        L.gemm_args(m(4, 4), m(4, 5), m(4), "relu", m(4, 5))
    with pytest.raises(ValueError, match="act"):
        L.gemm_args(m(4, 4), m(4, 5), None, "silu", m(4, 5))


# -- GPU ---------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE_GPU and HAVE_CUTILE), reason="needs a CUDA GPU and cuda-tile")
@pytest.mark.parametrize("key", [k for ks in IDS.values() for k in ks])
def test_gpu_verify_suite(key):
    from harness.verify import verify_case
    impl = _impl(key)
    prob = problems.get(impl.problem)
    bad = []
    for case in prob.cases("verify"):
        why = impl.supports(case) if hasattr(impl, "supports") else None
        if why:
            continue
        chk = verify_case(impl, prob, case, "cuda", seeds=GPU_SEEDS)
        if not chk.ok:
            bad.append((case, chk.reason))
    assert not bad, bad[:5]


@needs_tileiras
def test_inspect_writes_cubin_and_tile_ir(tmp_path):
    from backends import cutile_layer as L
    from harness.inspect_cmd import Artifacts
    art = Artifacts(tmp_path)
    L.cutile_artifacts(_impl("cutile:vector_add_simple"), problems.get("vector_add").case(N=1000), art)
    names = [p.name for p in art.files]
    assert any(n.endswith(".cubin") for n in names) and any(n.endswith(".tileir.mlir") for n in names)
    mlir = next(p for p in art.files if p.name.endswith(".tileir.mlir")).read_text()
    assert "vector_add_kernel" in mlir and "load_view" in mlir


@needs_tileiras
def test_no_tma_store_past_a_short_row():
    """A TMA store writes on to the next 16-byte boundary where a row's bytes are not a multiple
    of 16 (seen on the H200: 13 bytes past C at M=1, N=17). With one row the row stride stops
    ruling TMA out: compiled for a one-row C whose stride is taken as 16-byte divisible, the
    tiled kernel TMA-stores when allowed, and does not with the host's TMA_STORE for N = 17."""
    import io

    import cuda.tile as ct
    from cuda.tile.compilation import (ArrayConstraint, CallingConvention, KernelSignature,
                                       ScalarConstraint, export_kernel)
    from backends import cutile_layer as L
    from cutile_src import gemm_epilogue_tiled as T
    if L._cuobjdump() is None:
        pytest.skip("cuobjdump not found")

    def arr(nd, sdiv):
        const = (None, 1) if nd == 2 else (1,)
        return ArrayConstraint(ct.float16, nd, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                               may_alias_internally=False, stride_constant=const, stride_divisible_by=sdiv,
                               base_addr_divisible_by=16)
    s32 = ScalarConstraint(ct.int32)
    c = torch.empty(1, 17, dtype=torch.float16, device="meta")
    counts = {}
    for tma in (True, T.tma_store_ok(c)):
        sig = KernelSignature([arr(2, (1, 1)), arr(2, (1, 1)), arr(1, (1,)), arr(2, (8, 1)), s32, s32,
                               16, 128, 128, 8, tma], CallingConvention.cutile_python_v1())
        buf = io.BytesIO()
        export_kernel(T.gemm_epilogue_tiled_kernel, [sig], buf, gpu_code="sm_90", output_format="cubin")
        counts[tma] = L.sass_ops(L.sass_text(buf.getvalue()))["UTMASTG"]
    assert T.tma_store_ok(c) is False
    assert counts[True] > 0 and counts[False] == 0, counts
