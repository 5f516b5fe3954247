"""Gluon layer: registration, the planner's rules, compile-only for sm_90a (Gluon has no CPU
interpreter: in CI every implementation's launch is compiled, and its PTX checked for the
instructions the variant is about), and on a GPU (``-m gpu``) the verify suite. Also that the
Triton layer uses ``triton.language`` only (its Gluon kernel moved here)."""
import re
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon")

from conftest import GPU_SEEDS  # noqa: E402
from harness import problems, registry  # noqa: E402
from harness.verify import verify_case  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9

IDS = {"vector_add": {"vector_add", "vector_add_simple"},
       "softmax": {"softmax", "softmax_simple", "softmax_rows", "softmax_block", "softmax_smem",
                   "softmax_split", "softmax_online"},
       "gemm_epilogue": {"gemm_epilogue", "gemm_epilogue_simple", "gemm_epilogue_tma", "gemm_epilogue_tiled",
                         "gemm_epilogue_splitk"}}


def _impl(problem, name):
    return registry.get(problem, f"gluon:{name}", candidates=True)


def _case(problem, **kw):
    return problems.get(problem).case(**kw)


def test_registered_ids_and_roles():
    for problem, names in IDS.items():
        impls = {i.name: i for i in registry.select(problem=problem, layer="gluon")}
        assert set(impls) == names, (problem, set(impls))
        assert impls[problem].role == "default" and impls[f"{problem}_simple"].role == "simple"
        for i in impls.values():
            assert set(i.devices) == {"cuda"} and i.sources and i.compile_only_fn
            for s in i.sources:
                assert (ROOT / s.path).is_file(), s.path
                assert s.path.startswith("gluon_src/")


def test_no_environment_variables_in_the_layer():
    for p in list((ROOT / "gluon_src").glob("*.py")) + [ROOT / "backends" / "gluon_layer.py"]:
        assert not re.search(r"os\.environ|getenv", p.read_text()), p


def test_triton_layer_is_plain_triton():
    """No Gluon in the Triton layer: its kernels and its adapter use triton.language only."""
    for p in list((ROOT / "triton_src").glob("*.py")) + [ROOT / "backends" / "triton_layer.py"]:
        text = p.read_text()
        assert "experimental.gluon" not in text and "gluon.jit" not in text, p
    assert not (ROOT / "triton_src" / "softmax_smem.py").exists()
    assert "softmax_smem" not in {i.name for i in registry.select(problem="softmax", layer="triton")}


# -- planner -------------------------------------------------------------------------------------
def test_vector_add_vectors_follow_alignment():
    from gluon_src import dispatch
    assert dispatch.vector_add_choice(1 << 20, 2)["VEC"] == 8 and dispatch.vector_add_choice(1 << 20, 4)["VEC"] == 4
    assert dispatch.vector_add_choice(99, 4, 1)["VEC"] == 1     # 4 bytes past a boundary: no wider access
    cfg = dispatch.vector_add_choice(99, 2, 2)
    assert cfg["VEC"] == 2 and cfg["VEC"] * cfg["REPS"] * 2 == dispatch.VECTOR_ADD["bytes_per_thread"]
    base = torch.empty(64, dtype=torch.float32, device="meta")
    assert dispatch.vector_alignment(base, base[1:], base) == 1 and dispatch.vector_alignment(base, base[4:]) == 4


def test_softmax_rules():
    from gluon_src import H200, dispatch
    c = lambda M, N, es: dispatch.softmax_choice(M, N, es, H200)[0]  # noqa: E731
    assert c(32_768, 512, 2) == c(32_768, 1024, 2) == c(129, 1, 4) == "rows"
    assert c(32_768, 4096, 2) == c(8192, 2048, 2) == c(4096, 32_000, 4) == "block"
    assert c(4096, 32_000, 2) == c(4096, 50_257, 2) == c(4096, 50_257, 4) == "smem"   # fits shared memory
    assert c(4096, 128_256, 2) == c(4096, 151_936, 4) == "online"                      # does not
    assert c(1, 98_432, 4) == c(3, 262_147, 4) == c(2, 131_072, 2) == "split"          # too few rows
    assert dispatch.softmax_choice(4096, 50_257, 2, H200, smem_ok=False)[0] == "online"
    assert dispatch.softmax_choice(4096, 9000, 2, H200, smem_ok=False)[0] == "block"
    # split gives every SM programs; online's grid keeps its rows in flight within L2's share
    cfg = dispatch.softmax_split_config(1, 262_147, 4, H200)
    assert cfg["C"] >= dispatch.SOFTMAX["split_programs_per_sm"] * H200["sms"] or cfg["CHUNK"] == dispatch.SOFTMAX["split_min_chunk"]
    assert cfg["C_PAD"] >= cfg["C"]
    on = dispatch.softmax_online_config(4096, 128_256, 2, H200)
    assert on["PROGRAMS"] % H200["sms"] == 0 and on["VEC"] == 8


def test_softmax_table_is_what_the_rules_read(monkeypatch):
    from gluon_src import H200, dispatch
    monkeypatch.setitem(dispatch.SOFTMAX, "smem", False)
    assert dispatch.softmax_choice(4096, 50_257, 2, H200)[0] == "online"
    monkeypatch.setitem(dispatch.SOFTMAX, "rows_max_cols", 0)
    assert dispatch.softmax_choice(32_768, 512, 2, H200)[0] == "block"


def test_gemm_rules():
    from gluon_src import H200, dispatch
    assert dispatch.gemm_choice(4096, 6144, 4096, True, H200) == ("tma", dispatch.GEMM["tma"][0])
    assert dispatch.gemm_choice(4096, 50_257, 768, False, H200)[0] == "tiled"
    for M in (1, 16):      # few rows: the 64-row tiles, enough of them to stream B on most SMs
        for N, K in ((6144, 4096), (4096, 14_336), (28_672, 4096)):
            v, cfg = dispatch.gemm_choice(M, N, K, True, H200)
            assert cfg["BLOCK_M"] == 64, (M, N, K, cfg)
            tiles = triton.cdiv(M, 64) * triton.cdiv(N, cfg["BLOCK_N"]) * cfg.get("SPLIT", 1)
            assert tiles >= dispatch.GEMM["splitk_min_fill"] * H200["sms"], (M, N, K, v, cfg)
    assert dispatch.gemm_choice(16, 6144, 4096, True, H200)[0] == "splitk"
    assert dispatch.gemm_choice(16, 6144, 4096, False, H200)[0] == "tiled"


def test_smem_config_and_rules():
    """softmax_smem: the chunks a row needs fit its three power-of-two buffers with little waste;
    shared memory sets the programs an SM holds; rows beyond one program's shared memory and
    tensors whose rows cannot be read in 16-byte groups are declined with a reason."""
    from gluon_src import H200, dispatch
    from gluon_src import softmax_smem as S
    for count in range(1, 200):
        parts = S.split_pow2(count)
        assert sum(parts) >= count and all(p == 0 or p & (p - 1) == 0 for p in parts)
        assert sum(parts) - count <= count // 4, (count, parts)
        if bin(count).count("1") <= 3:
            assert sum(parts) == count
    cfg = S.config(50_257, 2, 8)
    assert cfg["CHUNK"] == 2048 and cfg["C"] == 25 and (cfg["N0"], cfg["N1"], cfg["N2"]) == (16, 8, 1)
    assert S.programs_per_sm(cfg, H200) == 2
    assert S.supports(50_257, 2, 8, H200) is None
    assert "shared memory" in S.supports(128_256, 2, 8, H200)
    x = torch.empty(8, 50_257, dtype=torch.bfloat16, device="meta")
    assert S.supports_tensors(x, torch.empty_like(x)) is None and S.frame_of(x, torch.empty_like(x))
    wide = torch.empty(8, 50_264, dtype=torch.bfloat16, device="meta")
    assert S.supports_tensors(wide[:, :50_256], torch.empty(8, 50_256, dtype=torch.bfloat16, device="meta")) is None
    shifted = wide[:, 1:50_258]    # rows 2 bytes past a boundary, the output's on one
    assert "16-byte" in S.supports_tensors(shifted, torch.empty(8, 50_257, dtype=torch.bfloat16, device="meta"))
    w = lambda N, es=2: dispatch.softmax_smem_warps(N, es, H200)  # noqa: E731
    assert w(50_257) == 8 and w(65_536) == 16 and w(50_257, 4) == 16 and w(3000) == 4 and w(6000) == 8
    assert dispatch.softmax_choice(99, 50_257, 2, H200)[0] == "smem"
    assert dispatch.softmax_choice(98, 50_257, 2, H200)[0] == "split"      # 0.75 x 132 SMs rows


def test_split_smem_rules(monkeypatch):
    """split_smem's chunk rule on rows of several classes (16-bit and fp32, past one program's
    shared memory, odd lengths): the most bytes of rows in flight an SM (programs an SM by shared
    memory x a chunk's bytes of the row), ties to the longer chunk, at least the table's programs
    an SM; too-short rows get none; the default takes it only where the table enables it and the
    rows start on 16-byte boundaries."""
    from gluon_src import H200, dispatch
    from gluon_src import softmax_split_smem as SS
    lo, hi = dispatch.SOFTMAX["split_smem_pieces"]

    def flight(cfg, N, es):
        return SS.programs_per_sm(cfg["smem"], 0, cfg["num_warps"], H200) * N * es / cfg["C"]
    for N, es in ((128_256, 2), (151_936, 2), (128_256, 4), (151_936, 4), (262_147, 4), (99_999, 2), (40_001, 2)):
        cfg = dispatch.softmax_split_smem_config(4096, N, es, H200)
        assert cfg is not None and lo <= cfg["P"] <= hi and cfg["C"] >= 2, (N, es, cfg)
        assert cfg["C"] * cfg["P"] * cfg["PIECE"] >= N > (cfg["C"] - 1) * cfg["P"] * cfg["PIECE"]
        assert cfg["PIECE"] * es == 16 * 32 * cfg["num_warps"]
        assert SS.programs_per_sm(cfg["smem"], 0, cfg["num_warps"], H200) >= dispatch.SOFTMAX["split_smem_min_per_sm"]
        for p in range(lo, hi + 1):     # no other chunk keeps more in flight; as much only if shorter
            other = SS.config(N, es, cfg["num_warps"], p)
            assert flight(other, N, es) < flight(cfg, N, es) or (
                flight(other, N, es) == flight(cfg, N, es) and p <= cfg["P"]), (N, es, p, cfg)
    cfg = dispatch.softmax_split_smem_config(4096, 128_256, 2, H200)
    # 128256 bf16: 5 pieces of 2048 columns (13 chunks, 42 KB a program with the scratch: 5 an SM)
    assert (cfg["P"], cfg["C"], cfg["PIECE"]) == (5, 13, 2048)
    assert SS.programs_per_sm(cfg["smem"], 0, 8, H200) == 5
    # the scratch is counted: 7 pieces (57344 bytes of halves) would fit 4 an SM without it, 3 with
    assert SS.programs_per_sm(SS.config(128_256, 2, 8, 7)["smem"], 0, 8, H200) == 3
    assert dispatch.softmax_split_smem_config(4096, 3000, 2, H200) is None      # one chunk: no split
    # the resident grid: a multiple of C, within what the SMs hold, refused below one row
    assert SS.grid_for(4096, cfg, 4, 132) == 528 // 13 * 13 and SS.grid_for(2, cfg, 4, 132) == 26
    with pytest.raises(ValueError, match="programs"):
        SS.grid_for(4096, cfg, 0, 132)
    assert SS.programs_per_sm(cfg["smem"], 40, 8, H200) == 233_472 // (cfg["smem"] + SS.RESERVED_SMEM)
    assert SS.programs_per_sm(1024, 128, 8, H200) == 2       # 128 registers x 256 threads: half the file
    with pytest.raises(ValueError, match="pieces"):
        SS.config(1000, 2, 8, 0)
    # off in the table, the rows past a program's shared memory stay online
    c = lambda M, N, es, ok=True: dispatch.softmax_choice(M, N, es, H200, split_smem_ok=ok)[0]  # noqa: E731
    monkeypatch.setitem(dispatch.SOFTMAX, "split_smem", False)
    assert c(4096, 128_256, 2) == c(4096, 151_936, 4) == "online"
    monkeypatch.setitem(dispatch.SOFTMAX, "split_smem", True)
    assert c(4096, 128_256, 2) == c(4096, 151_936, 4) == c(4096, 262_144, 4) == "split_smem"
    assert c(4096, 128_256, 2, ok=False) == "online"
    assert c(4096, 50_257, 2) == "smem" and c(4096, 32_000, 4) == "block" and c(3, 262_147, 4) == "split"
    x = torch.empty(8, 128_256, dtype=torch.bfloat16, device="meta")
    assert SS.supports_tensors(x, torch.empty_like(x)) is None
    odd = torch.empty(8, 128_257, dtype=torch.bfloat16, device="meta")
    assert "16-byte" in SS.supports_tensors(odd, torch.empty_like(odd))


def test_gemm_split_model_rules(monkeypatch):
    """The modelled split-K rule (off in the table until the GPU times it): few C tiles over a long
    K at a few hundred rows split with large tiles; large M, short K, few rows (their own rule) and
    unaligned operands keep today's choice; the model's pieces behave."""
    from gluon_src import H200, dispatch
    G = dispatch.GEMM
    before = {k: dispatch.gemm_choice(*k, True, H200) for k in
              ((256, 4096, 14_336), (4096, 6144, 4096), (16, 6144, 4096), (256, 6144, 4096), (1000, 3000, 20_000))}
    assert before[(256, 4096, 14_336)][0] == "tma"
    monkeypatch.setitem(G, "splitk_by_model", True)
    v, cfg = dispatch.gemm_choice(256, 4096, 14_336, True, H200)
    assert v == "splitk" and cfg["BLOCK_M"] * cfg["BLOCK_N"] >= 128 * 128 and cfg["SPLIT"] >= 2
    programs = triton.cdiv(256, cfg["BLOCK_M"]) * triton.cdiv(4096, cfg["BLOCK_N"]) * cfg["SPLIT"]
    assert 0.5 * H200["sms"] <= programs <= H200["sms"]          # one wave, most SMs busy
    assert triton.cdiv(14_336, cfg["BLOCK_K"]) // cfg["SPLIT"] >= G["splitk_min_k_steps"]
    for k in ((4096, 6144, 4096), (16, 6144, 4096), (256, 6144, 4096)):   # enough tiles / own rule / short K
        assert dispatch.gemm_choice(*k, True, H200) == before[k], k
    assert dispatch.gemm_choice(256, 4096, 14_336, False, H200)[0] == "tiled"
    # the model: splitting a one-wave grid of few tiles cuts the MMA time; the partials cost
    big = G["tma"][0]
    t1 = dispatch.gemm_model_time(256, 4096, 14_336, big, 1, 132)
    t4 = dispatch.gemm_model_time(256, 4096, 14_336, big, 4, 132)
    assert t4 < 0.5 * t1
    t_many = dispatch.gemm_model_time(4096, 6144, 4096, big, 2, 132)
    assert t_many > dispatch.gemm_model_time(4096, 6144, 4096, big, 1, 132)
    monkeypatch.setitem(G, "splitk_min_gain", 1.0)                # no split can gain 100 %
    assert dispatch.gemm_choice(256, 4096, 14_336, True, H200) == before[(256, 4096, 14_336)]


# -- compile-only for sm_90a -----------------------------------------------------------------------
def _ptx(problem, name, case):
    from backends import gluon_layer as G
    impl = _impl(problem, name)
    if name == problem:
        _, specs = {"softmax": G._sm_specs, "gemm_epilogue": G._gemm_specs}.get(problem, lambda v, c: (v, [G._va_spec(c)]))("default", case)
    elif problem == "softmax":
        _, specs = G._sm_specs(name.split("_", 1)[1], case)
    elif problem == "gemm_epilogue":
        _, specs = G._gemm_specs(name.split("_", 2)[2], case)
    else:
        specs = [G._va_simple_spec(case)]
    facts = [G.compile_spec(s) for s in specs]
    assert impl.compile_only_fn(case)["target"] == "sm_90a"
    for f in facts:
        assert f["registers"] and f["spills"] == 0, (name, case.label, f)
    return "\n".join(f["ptx"] for f in facts)


def test_vector_add_ptx():
    ptx = _ptx("vector_add", "vector_add", _case("vector_add", N=1_000_003, dtype="bfloat16"))
    assert "ld.global.v4.b32" in ptx or "ld.global.v4.u32" in ptx
    ptx = _ptx("vector_add", "vector_add", _case("vector_add", N=4099, dtype="float16", misalign=3))
    assert ".v4" not in ptx
    _ptx("vector_add", "vector_add_simple", _case("vector_add", N=127))


@pytest.mark.parametrize("name, kw, must", [
    ("softmax", dict(M=4096, N=50_257, dtype="bfloat16"), "cp.async.cg.shared.global"),       # smem
    ("softmax", dict(M=32_768, N=512, dtype="bfloat16"), "ld.global"),                        # rows
    ("softmax", dict(M=4096, N=128_256, dtype="bfloat16"), "atom.global.gpu.relaxed.exch.b64"),  # split_smem
    ("softmax", dict(M=4096, N=151_936), "cp.async.cg.shared.global"),                        # split_smem
    ("softmax", dict(M=3, N=262_147), "st.global"),                                           # split
    ("softmax", dict(M=33, N=3001, dtype="bfloat16", layout="strided_odd"), "ld.global"),
    ("softmax_simple", dict(M=37, N=1000, layout="strided"), "ld.global"),
    ("softmax_block", dict(M=64, N=2048), "ld.global.v4"),
])
def test_softmax_compiles(name, kw, must):
    assert must in _ptx("softmax", name, _case("softmax", **kw))


@pytest.mark.parametrize("name, kw, must", [
    ("gemm_epilogue", dict(M=4096, N=6144, K=4096, act="none"), ("cp.async.bulk.tensor", "wgmma.mma_async", "mbarrier")),
    ("gemm_epilogue", dict(M=256, N=50_257, K=768, act="none"), ("cp.async.bulk.tensor", "wgmma.mma_async")),  # stage
    ("gemm_epilogue", dict(M=1, N=17, K=33, act="gelu"), ("wgmma.mma_async",)),
    ("gemm_epilogue_tiled", dict(M=129, N=264, K=72, act="relu", bias=0), ("wgmma.mma_async",)),
    ("gemm_epilogue_simple", dict(M=17, N=33, K=40, dtype="float16", act="gelu"), ("mma.sync",)),
    ("gemm_epilogue", dict(M=16, N=6144, K=4096, act="none"), ("cp.async.bulk.tensor", "wgmma.mma_async")),  # splitk
    ("gemm_epilogue_splitk", dict(M=1, N=1024, K=512, act="gelu"), ("wgmma.mma_async",)),
])
def test_gemm_compiles(name, kw, must):
    ptx = _ptx("gemm_epilogue", name, _case("gemm_epilogue", **kw))
    for m in must:
        assert m in ptx, m
    if name == "gemm_epilogue" and kw["N"] % 8 and kw["M"] <= 64:   # few rows: tiled, never staged
        assert "cp.async.bulk.tensor" not in ptx


def test_split_smem_ptx():
    """The exchange and the staging as the docstring says: 16-byte cp.async into shared memory,
    16-byte shared loads and global stores, a relaxed 64-bit exchange, volatile polls, and no
    fence (the payload is its own flag)."""
    from backends import gluon_layer as G
    case = _case("softmax", M=4096, N=128_256, dtype="bfloat16")
    assert G._sm_specs("default", case)[0] == "split_smem"   # the default's path for long vocabulary rows
    ptx = _ptx("softmax", "softmax", case)
    for m in ("cp.async.cg.shared.global", "cp.async.wait_group", "ld.shared.v4", "st.global.v4",
              "atom.global.gpu.relaxed.exch.b64", "ld.volatile.global"):
        assert m in ptx, m
    assert "membar" not in ptx and "fence.acq_rel" not in ptx
    # each exponent is (x - m) * log2(e), never x * log2(e) - m * log2(e): the latter rounds
    # m * log2(e) once a chunk, an error that differs between a row's chunks (5e-4 at |x| ~ 1e4)
    defs = {reg: (op, args) for op, reg, args in re.findall(r"^\s*([a-z][\w.]*)\s+(%r\d+), ([^;]*);", ptx, re.M)}
    for src in re.findall(r"ex2\.approx\.ftz\.f32\s+%r\d+, (%r\d+);", ptx):
        op, args = defs[src]
        assert op == "mul.f32" and args.endswith("0f3FB8AA3B"), (src, op, args)
        assert not defs[args.split(",")[0]][0].startswith(("mul", "fma")), (src, args)


def test_units_ptx():
    """Rows of whole 16-byte groups the compiler cannot prove so (200 fp16 columns: rows kernel;
    3960 fp16 columns: block) move in 128-bit accesses and no narrower ones with SOFTMAX["units"]
    on (the default), 2 bytes an access with it off; rows that are not whole 16-byte groups
    (1000 x 781 fp32) are the same either way; long rows past shared memory go to split_smem."""
    from backends import gluon_layer as G
    from gluon_src import dispatch

    def ptx(**kw):
        case = _case("softmax", **kw)
        return "\n".join(G.compile_spec(s)["ptx"] for s in G._sm_specs("default", case)[1])

    narrow = re.compile(r"(ld|st)\.global\.(b16|b32|u16|f32)\b")
    with dispatch.switched(dispatch.SOFTMAX, {"units": False}):
        off = ptx(M=50_000, N=200, dtype="float16")
        odd_off = ptx(M=1000, N=781)
    assert narrow.search(off) and ".v4" not in off
    for kw in (dict(M=50_000, N=200, dtype="float16"), dict(M=100, N=3960, dtype="float16")):
        assert dispatch.softmax_choice(kw["M"], kw["N"], 2)[0] in ("rows", "block"), kw
        text = ptx(**kw)
        assert "ld.global.v4" in text and "st.global.v4" in text and not narrow.search(text), kw
    assert ptx(M=1000, N=781) == odd_off
    assert _impl("softmax", "softmax").compile_only_fn(_case("softmax", M=4096, N=128_256, dtype="bfloat16"))["variant"] == "split_smem"


def test_splitk_large_tile_compiles():
    """The tiles the modelled split-K rule picks at a few hundred rows (128 x 256 over 8 warps,
    128 x 128) compile for sm_90a without spills."""
    from backends import gluon_layer as G
    from gluon_src import H200, dispatch
    case = _case("gemm_epilogue", M=256, N=4096, K=14_336, act="gelu")
    a, b, bias, act, out = G._meta_gemm(case)
    for cfg in dispatch.GEMM["tma"][:2]:
        cfg = dict(cfg, SPLIT=4)
        from gluon_src.gemm_epilogue_splitk import slices
        ws = torch.empty(slices(case.K, cfg["BLOCK_K"], 4)[1] * case.M * case.N, dtype=torch.float32, device="meta")
        for spec in dispatch.gemm_specs("splitk", a, b, bias, act, out, cfg, H200["sms"], ws):
            f = G.compile_spec(spec)
            assert f["registers"] and f["spills"] == 0, (cfg, f["kernel"], f["registers"], f["spills"])
            if f["kernel"] == "gemm_splitk_partial_kernel":
                assert "wgmma.mma_async" in f["ptx"] and "cp.async.bulk.tensor" in f["ptx"]


def test_default_stages_unaligned_n():
    """An unaligned N (2047 bf16: rows of 4094 bytes TMA cannot address) above few_rows_max_m rows:
    the default plans tma on staged operands (``"stage": ["b"]``: B copied to 16-byte rows, then the
    tma kernel, C stored from registers) exactly when that models faster than the tiled kernel; at
    2048 x 2047 x 2048 it does, in the adapter and in the layer contract's ``plan`` alike, whose
    sources then name the copy kernel (an aligned tma plan's do not); few rows keep the tiled rule."""
    from backends import gluon_layer as GL
    from gluon_src import H200, dispatch
    from harness.meta_inputs import case_facts
    case = _case("gemm_epilogue", M=2048, N=2047, K=2048, act="gelu", dtype="bfloat16")
    v, specs = GL._gemm_specs("default", case)
    p = dispatch.plan("gemm_epilogue", case_facts(case))
    assert v == "tma" and p.variant == "tma" and p.config["stage"] == ["b"]
    assert "stage_rows_kernel" in {k for s in p.sources for k in s.kernels}
    aligned = dispatch.plan("gemm_epilogue", case_facts(_case("gemm_epilogue", M=4096, N=4096, K=4096)))
    assert aligned.variant == "tma" and "stage" not in aligned.config
    assert "stage_rows_kernel" not in {k for s in aligned.sources for k in s.kernels}
    names = [getattr(s.kernel, "__name__", None) or s.kernel.fn.__name__ for s in specs]
    assert "stage_rows_kernel" in names and "gemm_epilogue_tma_kernel" in names, names
    G, sms = dispatch.GEMM, H200["sms"]
    for M, N, K in ((2048, 2047, 2048), (411, 733, 957), (97, 211, 389), (4096, 50_257, 768), (300, 4096, 4095)):
        copies = {op: n for op, n, ok in (("a", M * K, K % 8 == 0), ("b", K * N, N % 8 == 0)) if not ok}
        v0, c0 = dispatch.gemm_choice(M, N, K, False, H200)          # no copies given: unstaged
        v, cfg = dispatch.gemm_choice(M, N, K, False, H200, copies)
        assert v0 == "tiled"
        t_tiled = -(-(triton.cdiv(M, c0["BLOCK_M"]) * triton.cdiv(N, c0["BLOCK_N"])) // (sms * G["tiled_resident"])) \
            * triton.cdiv(K, c0["BLOCK_K"]) * G["tiled_step_s"]
        tma = min(G["tma"], key=lambda c: (dispatch._gemm_time(M, N, K, c, sms), c["BLOCK_M"] * c["BLOCK_N"]))
        t = dispatch._gemm_time(M, N, K, tma, sms) + sum(4.0 * n / G["hbm_bytes_per_s"] + G["splitk_launch_s"]
                                                         for n in copies.values())
        assert (v, cfg) == (("tma", dict(tma, stage=list(copies))) if t < t_tiled else (v0, c0)), (M, N, K)
    assert dispatch.gemm_choice(16, 2047, 2048, False, H200, {"b": 2048 * 2047})[0] == "tiled"


def test_stream_k_and_next_prologue_are_gone():
    """Stream-K and NEXT_PROLOGUE lost where they changed the plan (docs/performance.md,
    "The pending switches of CUDA C++, CuPy, Triton and Gluon measured on 2026-12-06 (H100)"): both left HEAD with their kernel code and the candidates."""
    from gluon_src import H200, dispatch
    for name in ("gemm_epilogue_streamk", "gemm_epilogue_next"):
        with pytest.raises(ValueError, match="not registered"):
            registry.get("gemm_epilogue", f"gluon:{name}", candidates=True)
    assert not (ROOT / "gluon_src" / "gemm_epilogue_streamk.py").exists()
    assert "NEXT_PROLOGUE" not in (ROOT / "gluon_src" / "gemm_epilogue_tma.py").read_text()
    assert not any(k.startswith("streamk") or k == "next_prologue" for k in dispatch.GEMM)
    for M, N, K in ((3000, 3000, 3000), (16, 6144, 4096), (64, 18432, 5120), (256, 28672, 4096)):
        v, cfg = dispatch.gemm_choice(M, N, K, True, H200)
        assert v in ("tma", "splitk") and "NEXT_PROLOGUE" not in cfg, (M, N, K)


def test_wgmma_gemms_decline_other_than_sm90(monkeypatch):
    """On a device that is not sm_90 (a B200 faked here) the wgmma GEMMs say why not in one line;
    the mma_v2 twin and the softmax kernels do not decline for it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (10, 0))
    case = _case("gemm_epilogue", M=256, N=4096, K=4096)
    for name in ("gemm_epilogue", "gemm_epilogue_tma", "gemm_epilogue_tiled", "gemm_epilogue_splitk"):
        why = _impl("gemm_epilogue", name).supports(case)
        assert why and "sm_90" in why and "sm_100" in why and "\n" not in why, (name, why)
    assert not _impl("gemm_epilogue", "gemm_epilogue_simple").supports(case)
    assert not _impl("softmax", "softmax").supports(_case("softmax", M=64, N=50_257, dtype="bfloat16"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
    assert not _impl("gemm_epilogue", "gemm_epilogue").supports(case)


def test_tma_declines_unaligned_strides():
    why = _impl("gemm_epilogue", "gemm_epilogue_tma").supports_fn(_case("gemm_epilogue", M=64, N=1001, K=136))
    assert why and "TMA" in why


# -- GPU -------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a Hopper GPU")
@pytest.mark.parametrize("problem", list(IDS))
def test_defaults_and_twins_on_the_verify_suite(problem):
    prob = problems.get(problem)
    bad = []
    for name in (problem, f"{problem}_simple"):
        impl = _impl(problem, name)
        for case in prob.cases("verify"):
            c = verify_case(impl, prob, case, "cuda", seeds=GPU_SEEDS)
            if not c.ok:
                bad.append(f"{name} {case.label}: {c.reason}")
    assert not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a Hopper GPU")
def test_smem_softmax_on_the_gpu():
    """The smem kernel on rows of every alignment class it takes (aligned, framed odd lengths,
    strided views with a lead, fp32 / fp16 / bf16), with -inf lanes, an all -inf row and large
    magnitudes, against float64; a tensor it cannot read in 16-byte groups is refused by name."""
    from gluon_src import softmax_smem as S
    for M, N, dt, pad in ((300, 32_000, torch.bfloat16, 0), (300, 50_257, torch.bfloat16, 0),
                          (200, 50_257, torch.float32, 0), (300, 20_011, torch.float16, 13),
                          (300, 20_011, torch.float16, 2), (264, 40_000, torch.bfloat16, 8),
                          (9, 16_401, torch.float16, 0)):
        x = (torch.randn(M, N + pad, device="cuda", dtype=dt) * 4)[:, :N]
        x[1, 7:5000] = float("-inf")
        x[2] = float("-inf")
        x[3] *= 3000
        out = torch.empty(M, N + pad, device="cuda", dtype=dt)[:, :N]
        assert S.supports_tensors(x, out) is None
        for warps in (4, 8, 16):
            out.fill_(float("nan"))
            S.bind_launch(x, out, S.config(N, x.element_size(), warps))()
            ref = torch.softmax(x.double(), dim=1)
            assert torch.isnan(out[2]).all()
            keep = torch.ones(M, dtype=torch.bool, device="cuda")
            keep[2] = False
            err = (out[keep].double() - ref[keep]).abs().max().item()
            assert err < (1e-5 if dt == torch.float32 else 2e-2), (M, N, dt, pad, warps, err)
    wide = torch.randn(16, 50_264, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="16-byte"):
        S.bind_launch(wide[:, 1:50_258], torch.empty(16, 50_257, device="cuda", dtype=torch.bfloat16),
                      S.config(50_257, 2, 8))
