"""CuTe DSL layer: ids and roles, the planners' rules, compile-only for sm_90a (no GPU needed) of
every default on every verify + models case, the PTX of each path, input validation, and on a GPU
the verify suite."""
from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest
import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from conftest import compile_ahead, GPU_SEEDS  # noqa: E402
from harness import problems, registry  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAVE_CUTE = importlib.util.find_spec("cutlass") is not None
HAVE_GPU = torch.cuda.is_available()
needs_cute = pytest.mark.skipif(not HAVE_CUTE, reason="nvidia-cutlass-dsl not installed")
PROBLEMS = ("vector_add", "softmax", "gemm_epilogue")
IDS = {
    "vector_add": ["cute:vector_add", "cute:vector_add_simple"],
    "softmax": ["cute:softmax", "cute:softmax_simple", "cute:softmax_rows", "cute:softmax_block",
                "cute:softmax_split", "cute:softmax_smem"],
    "gemm_epilogue": ["cute:gemm_epilogue", "cute:gemm_epilogue_simple", "cute:gemm_epilogue_ws",
                      "cute:gemm_epilogue_pingpong", "cute:gemm_epilogue_splitk", "cute:gemm_epilogue_tiled"],
}
#: register(candidate=True): built and compiled here, no id of the tool until a GPU verifies them
#: (the ``_next`` ids: the default with dispatch's pending switches on)
CANDIDATES = {"softmax": ["cute:softmax_cluster", "cute:softmax_next"],
              "gemm_epilogue": ["cute:gemm_epilogue_next"]}
SMS = 132


def _cases(problem, suites=("verify", "models")):
    return [c for s in suites for c in problems.get(problem).cases(s)]


def test_registered_ids_and_roles():
    registry.load_backends()
    got = {i.key: i.role for i in registry.select(layer="cute")}
    # attention's default and twin (their tests: tests/test_cute_attention.py)
    want = {f"{p}/{i}" for p, ids in IDS.items() for i in ids} | {"attention/cute:attention",
                                                                  "attention/cute:attention_simple"}
    assert want == set(got), (registry.BACKEND_ERRORS, set(got) ^ want)
    for p in (*PROBLEMS, "attention"):
        assert got[f"{p}/cute:{p}"] == "default"
        assert got[f"{p}/cute:{p}_simple"] == "simple"
    cands = {i.key for i in registry.candidates() if i.layer == "cute" and i.problem != "attention"}
    assert cands == {f"{p}/{i}" for p, ids in CANDIDATES.items() for i in ids}


def test_unavailable_reason_when_package_missing(monkeypatch):
    import cutlass_src

    monkeypatch.setattr(cutlass_src, "_REASON", [])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cutlass" else real(name, *a))
    why = cutlass_src.unavailable()
    assert why and "nvidia-cutlass-dsl" in why
    monkeypatch.setattr(cutlass_src, "_REASON", [])


def test_no_environment_variables():
    """Tables in source, not KL_* variables (they would change registered sources and plans)."""
    files = list((ROOT / "cutlass_src").glob("*.py")) + [ROOT / "backends" / "cute_layer.py"]
    for f in files:
        text = f.read_text()
        assert "KL_" not in text, f
        for m in re.finditer(r"os\.environ(?:\.get)?[\[(]\s*['\"](\w+)", text):
            # the DSL's own target; the standard cache location (where compiled kernels are kept)
            assert m.group(1) in ("CUTE_DSL_ARCH", "XDG_CACHE_HOME"), (f, m.group(1))


@needs_cute
def test_ptx_dump_folder_removed_at_exit(tmp_path):
    """The folder the DSL keeps PTX in while a process compiles is gone once the process exits."""
    import subprocess
    import sys

    code = ("import os, cutlass_src\n"
            "d = cutlass_src._dump_dir()\n"
            "assert d == cutlass_src._dump_dir() and os.path.isdir(d)\n"
            "open(os.path.join(d, 'k.sm_90a.ptx'), 'w').write('.version 8.0')\n"
            "print(d)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    d = r.stdout.strip().splitlines()[-1]
    assert os.path.basename(d).startswith("kl-cute-ptx-") and not os.path.exists(d)


def test_available_here():
    for p in PROBLEMS:
        assert registry.get(p, f"cute:{p}").available() is None


# -- the GEMM planner: waves and K, alignment -> load kinds -------------------------------------
def _plan_gemm(M, N, K, **kw):
    from cutlass_src import dispatch
    from cutlass_src.gemm_launch import access_elems

    return dispatch.plan_gemm(M, N, K, (access_elems(2 * K), access_elems(2 * N), access_elems(2 * N)),
                              sms=SMS, **kw)


def test_plan_gemm_stage_rule_of_next():
    """cute:gemm_epilogue_next (GEMM_NEXT: stage): above GEMM_STAGE_MIN_M rows, the A / B rows TMA
    cannot read are staged (plan["stage"], their loads "tma", C unchanged) exactly when the TMA
    plan's modelled time plus the copies (4 bytes an element at GEMM_HBM_GBPS, a launch each)
    beats the ragged plan's modelled time x GEMM_RAGGED_SLOWDOWN; never without the switch, for
    aligned operands, or at few rows."""
    from cutlass_src import dispatch
    seen = set()
    for M, N, K in ((2048, 2047, 2048), (555, 1234, 777), (411, 733, 957), (97, 211, 389), (65, 20_000, 515),
                    (4096, 50_257, 768), (1025, 769, 512), (300, 4096, 4095), (33, 1001, 3000), (512, 1024, 1024)):
        base = _plan_gemm(M, N, K)
        p = _plan_gemm(M, N, K, **dispatch.GEMM_NEXT)
        assert "stage" not in base
        ragged = [op for op, kind in zip("ab", base["loads"]) if kind != "tma"]
        if not ragged or M <= dispatch.GEMM_STAGE_MIN_M:
            assert p == base, (M, N, K)
            continue
        from cutlass_src.gemm_launch import access_elems
        w = (access_elems(2 * K), access_elems(2 * N), access_elems(2 * N))
        staged = dispatch.plan_search(M, N, K, tuple(8 if op in ragged else x for op, x in zip("abc", w)), sms=SMS)
        t_stage = dispatch._plan_us(M, N, K, staged, SMS) + sum(4 * (M * K if op == "a" else K * N) for op in ragged) \
            / (dispatch.GEMM_HBM_GBPS * 1e3) + dispatch.GEMM_STAGE_LAUNCH_US * len(ragged)
        want = t_stage < dispatch._plan_us(M, N, K, base, SMS) * dispatch.GEMM_RAGGED_SLOWDOWN
        assert (p.get("stage") == ragged) == want, (M, N, K, p)
        if want:
            assert p["loads"][:2] == ["tma", "tma"] and p["loads"][2] == base["loads"][2]
        seen.add(want)
    assert True in seen


def test_plan_gemm_wide_rule_of_next():
    """GEMM_NEXT's wide: ws 128 x 192 joins the tiles only where the search with it models GEMM_TIE
    faster than the table's best; never without the switch. 3000^3 (128 x 192: 384 tiles, 2.91
    waves) takes it; 8192^3 (128 x 256: 2048 tiles, full waves) keeps 128 x 256."""
    from cutlass_src import dispatch
    for M, N, K in ((3000, 3000, 3000), (8192, 8192, 8192), (4096, 28672, 4096), (1000, 3000, 4000),
                    (5000, 5000, 5000), (16, 6144, 4096), (256, 28672, 4096)):
        base = _plan_gemm(M, N, K)
        p = _plan_gemm(M, N, K, wide=True)
        assert base["tile"] != [128, 192]
        if p["tile"] == [128, 192]:
            assert dispatch._plan_us(M, N, K, p, SMS) < (1 - dispatch.GEMM_TIE) * dispatch._plan_us(M, N, K, base, SMS)
        else:
            assert p == base, (M, N, K, p)
    assert _plan_gemm(3000, 3000, 3000, **dispatch.GEMM_NEXT)["tile"] == [128, 192]
    assert _plan_gemm(8192, 8192, 8192, **dispatch.GEMM_NEXT)["tile"] == [128, 256]


def test_vector_add_unroll_fills_the_sms(monkeypatch):
    """Four 128-bit accesses a thread while that still gives every SM a CTA; one for a short
    vector (65536 bf16: 32 CTAs instead of 8), whatever its alignment."""
    from cutlass_src import dispatch
    assert dispatch.vector_add_unroll(65536, 8, 256, SMS) == 1
    assert dispatch.vector_add_unroll(256 * 4 * 8 * SMS, 8, 256, SMS) == 4
    assert dispatch.vector_add_unroll(256 * 4 * 8 * (SMS - 1), 8, 256, SMS) == 1   # 131 CTAs
    assert dispatch.vector_add_unroll(12_345_679, 1, 256, SMS) == 4      # 2-byte accesses
    monkeypatch.setattr(dispatch, "VECTOR_ADD_UNROLL", (8, 2))
    assert dispatch.vector_add_unroll(65536, 8, 256, SMS) == 2


def test_plan_gemm_waves_and_k():
    from cutlass_src import dispatch

    # small M: a 128 x 8192 x 8192 GEMM has 64 128x128 tiles for 132 SMs: split K to fill a wave
    p = _plan_gemm(128, 8192, 8192)
    assert p["splits"] >= 2 and p["tiles"] * p["splits"] >= 0.9 * SMS, p
    # decode (M = 16): 64-row tiles, ping-pong, split-K where the tiles are too few and K is long;
    # a split CTA runs one unit (a second unit and a second fix-up cost more than the wave gains)
    for n, k in ((6144, 4096), (4096, 14336), (8192, 28672)):
        p = _plan_gemm(16, n, k)
        assert p["schedule"] == "pingpong" and p["tile"][0] == 64, p
        assert p["splits"] >= 2 and p["tiles"] * p["splits"] <= SMS, p
    # the fix-up is not free (measured on the H200): short K or half a wave of 128x128 tiles stays
    # unsplit rather than 2x-split or cooperative 128x256 split 5 ways
    p = _plan_gemm(256, 6144, 4096)
    assert (p["schedule"], p["tile"], p["splits"]) == ("pingpong", [128, 128], 1), p
    assert _plan_gemm(300, 2000, 1000)["splits"] == 1
    assert _plan_gemm(16, 28672, 4096)["splits"] == 1
    # the cost model: more splits shorten the mainloop, lengthen the fix-up
    t = [dispatch.gemm_time_us(256, 4096, 14336, 128, 128, 0.94, s, SMS) for s in (1, 2, 4)]
    assert t[1] < t[0] and t[1] < t[2], t
    # enough tiles: the big cooperative tile, one split, B multicast over 2x1 clusters
    p = _plan_gemm(4096, 6144, 4096)
    assert (p["schedule"], p["tile"], p["splits"], p["cluster_m"]) == ("ws", [128, 256], 1, 2), p
    # every split keeps at least GEMM_MIN_KTILES_PER_SPLIT k-tiles
    for M, N, K in ((16, 520, 8192), (640, 136, 4104), (1, 1024, 512), (256, 6144, 4096)):
        p = _plan_gemm(M, N, K)
        assert p["splits"] == 1 or -(-K // 64) // p["splits"] >= dispatch.GEMM_MIN_KTILES_PER_SPLIT, p


def test_plan_gemm_alignment_picks_loads():
    p = _plan_gemm(4096, 50257, 768)
    assert p["loads"] == ["tma", "realign", "v1"]                     # B and C rows odd
    assert p["cluster_m"] == 1                                        # multicast needs TMA B
    assert _plan_gemm(127, 65, 129)["loads"] == ["realign", "realign", "v1"]
    assert _plan_gemm(1025, 770, 516)["loads"] == ["realign", "realign", "v2"]
    assert _plan_gemm(512, 384, 1024)["loads"] == ["tma", "tma", "tma"]
    assert _plan_gemm(512, 384, 1024, tma=False)["loads"] == ["v8", "v8", "v8"]


def test_plan_gemm_options_and_table(monkeypatch):
    from cutlass_src import dispatch

    assert _plan_gemm(4096, 4096, 4096, schedule="pingpong")["schedule"] == "pingpong"
    with pytest.raises(ValueError, match="cooperative"):
        _plan_gemm(16, 4096, 4096, schedule="ws")                     # 64-row tiles are ping-pong
    assert _plan_gemm(4096, 4096, 4096, min_splits=2)["splits"] >= 2
    with pytest.raises(ValueError, match="k-tiles"):
        _plan_gemm(64, 64, 200, min_splits=2)
    monkeypatch.setattr(dispatch, "GEMM_TILES", (("pingpong", 128, 128, 1.0), ("pingpong", 64, 128, 1.0)))
    assert _plan_gemm(4096, 4096, 4096)["tile"] == [128, 128]         # a fixture may swap the table
    monkeypatch.setattr(dispatch, "GEMM_RAGGED_LOAD", "vector")
    assert _plan_gemm(1025, 770, 516)["loads"] == ["v4", "v2", "v2"]


def test_plan_gemm_every_suite_case():
    from cutlass_src import dispatch

    for c in _cases("gemm_epilogue"):
        p = _plan_gemm(c.M, c.N, c.K)
        assert p["splits"] <= -(-c.K // 64), (c.id, p)
        assert (p["tile"][0] == 64) == (c.M <= 64), (c.id, p)
        assert (p["loads"] == ["tma"] * 3) == (c.N % 8 == 0 and c.K % 8 == 0), (c.id, p)
        assert dispatch.wave_efficiency(p["tiles"] * p["splits"], SMS) > 0 and p["max_clusters"] >= 1


@pytest.mark.parametrize("m_tiles,n_tiles,cluster_m", [(32, 16, 1), (32, 16, 2), (3, 5, 1),
                                                       (3, 5, 2), (17, 2, 2), (1, 1, 2), (9, 7, 1)])
def test_raster_covers_every_tile_once(m_tiles, n_tiles, cluster_m):
    """Every output tile is owned by exactly one (unit, CTA rank); with an odd number of tile rows
    in 2x1 clusters only rank 1 of the last cluster row gets rows below M."""
    from cutlass_src.gemm_base import raster

    cm_tiles = -(-m_tiles // cluster_m)
    seen = []
    for u in range(cm_tiles * n_tiles):
        for r in range(cluster_m):
            pm, pn = raster(u, cm_tiles, n_tiles, cluster_m, r)
            assert 0 <= pn < n_tiles
            if pm >= m_tiles:
                assert r == cluster_m - 1 and pm == m_tiles and m_tiles % cluster_m
                continue
            seen.append((pm, pn))
    assert sorted(seen) == [(i, j) for i in range(m_tiles) for j in range(n_tiles)]


@pytest.mark.parametrize("k_tiles", [1, 3, 4, 7, 64, 129, 448])
def test_split_range_balanced_and_non_empty(k_tiles):
    from cutlass_src.gemm_base import split_range

    for splits in range(1, min(k_tiles, 16) + 1):
        ranges = [split_range(s, splits, k_tiles) for s in range(splits)]
        assert ranges[0][0] == 0 and ranges[-1][1] == k_tiles
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        sizes = [k1 - k0 for k0, k1 in ranges]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


# -- the softmax planner: bytes per row ---------------------------------------------------------
def test_plan_softmax_by_bytes_per_row(monkeypatch):
    from cutlass_src import dispatch

    def kernel(M, N, es, aligned=True):
        return dispatch.plan_softmax(M, N, es, aligned, sms=SMS)["kernel"]

    assert kernel(32768, 512, 2) == "rows" and kernel(8192, 1024, 4) == "rows"
    assert kernel(32768, 4096, 2) == "block"                 # 8 KB rows, rows enough to fill SMs
    assert kernel(8, 4096, 2) == "split"                     # 8 rows: spread them over the GPU
    # long rows: staged in shared memory while the M x C CTAs cover the SMs
    assert kernel(4096, 32000, 2) == "smem" and kernel(4096, 151936, 4) == "smem"
    assert kernel(64, 128256, 2) == "smem" and kernel(8, 50000, 2) == "split"
    p = dispatch.plan_softmax(4096, 50257, 2, aligned=False, sms=SMS, kernel="cluster")
    assert (p["kernel"], p["cluster"]) == ("cluster", 4) and p["threads"] * p["k"] * 4 >= 6283, p
    monkeypatch.setattr(dispatch, "SOFTMAX_SMEM_CLUSTER_MAX", 2)   # rows no smem cluster holds: split
    assert kernel(4096, 128256, 4) == "split" and kernel(64, 128256, 2) == "split"
    monkeypatch.undo()
    p = dispatch.plan_softmax(4096, 50257, 2, aligned=False, sms=SMS, kernel="split")
    assert (p["parts"], p["grid"] % p["parts"]) == (4, 0)
    assert p["threads"] * p["k"] * p["parts"] >= dispatch.row_vectors(50257, 2, False)
    assert dispatch.row_vectors(50257, 2, False) == 6283 and dispatch.row_vectors(32000, 2, True) == 4000
    p = dispatch.plan_softmax(1, 262147, 4, aligned=False, sms=SMS)
    assert p["parts"] > 16 and p["grid"] == p["parts"]       # one row: one vector a thread, wide
    with pytest.raises(ValueError, match="co-resident"):
        dispatch.plan_softmax(2, 300 * 4096 * 4, 4, sms=SMS, kernel="split")
    assert kernel(2, 300 * 4096 * 4, 4) == "simple"          # the default declines nothing
    with pytest.raises(ValueError, match="short-row"):
        dispatch.plan_softmax(8, 65536, 4, kernel="rows", sms=SMS)
    monkeypatch.setattr(dispatch, "SOFTMAX_ROWS_MAX_BYTES", 1024)
    assert kernel(32768, 1024, 2) == "block"                 # a fixture may move a threshold


@pytest.mark.parametrize("M,N,es,phase", [(4096, 50257, 2, 3), (4096, 151936, 4, 0), (3, 262147, 4, 1),
                                          (17, 40000, 2, 7), (2, 131072, 2, 0), (1, 98432, 4, 2)])
def test_softmax_split_chunks_cover_the_row(M, N, es, phase):
    """Thread t of chunk p holds vectors (k*C + p)*T + t: every vector that touches the row is
    held exactly once, and the chunks' shares differ by at most one vector per thread."""
    from cutlass_src import dispatch

    p = dispatch.plan_softmax(M, N, es, aligned=(phase == 0), sms=SMS, kernel="split")
    C, T, K, V = p["parts"], p["threads"], p["k"], 16 // es
    touched = -(-(N + phase) // V)
    held = [(k * C + part) * T + t for part in range(C) for k in range(K) for t in range(T)]
    assert sorted(j for j in held if j < touched) == list(range(touched))
    per = [sum(1 for k in range(K) for t in range(T) if (k * C + part) * T + t < touched) for part in range(C)]
    assert max(per) - min(per) <= T


def test_plan_softmax_smem_rule():
    """softmax_smem: a CTA a row while one CTA's shared memory holds it (any alignment; a pair of
    CTAs where one would be alone on its SM and the halves let three share it), else the
    smallest cluster whose slices let two CTAs share an SM; few rows widen the cluster; threads: the
    SM's budget (1536 for a CTA a row, 768 for a cluster) over the CTAs its shared memory holds, a
    power of two in 128..512; the plan's shared memory is the kernel's."""
    from cutlass_src import dispatch

    def plan(M, N, es, **kw):
        return dispatch.plan_softmax(M, N, es, False, sms=SMS, **kw)

    want = {(4096, 32000, 2): (1, 512, 3), (4096, 50257, 2): (1, 512, 2), (4096, 128256, 2): (4, 256, 3),
            (4096, 151936, 2): (4, 256, 3), (4096, 32000, 4): (2, 256, 3), (4096, 50257, 4): (1, 512, 1),
            (4096, 128256, 4): (8, 256, 3), (4096, 151936, 4): (8, 256, 3), (2000, 50000, 2): (1, 512, 2),
            (8192, 16384, 2): (1, 256, 6), (8192, 12000, 2): (1, 128, 9),
            # a row one CTA holds alone on its SM: a pair when the halves let 3 CTAs share an SM
            (4096, 64000, 2): (2, 256, 3), (4096, 40000, 4): (1, 512, 1), (4096, 80000, 2): (1, 512, 1)}
    for (M, N, es), (c, t, per_sm) in want.items():
        p = plan(M, N, es)
        assert p["kernel"] == "smem" and (p["cluster"], p["threads"], p["ctas_per_sm"]) == (c, t, per_sm), (M, N, p)
        assert p["cap"] * c >= dispatch.row_vectors(N, es, False) and p["smem"] <= dispatch.SOFTMAX_SMEM_PER_CTA
        if c > 1:      # the next smaller cluster's slices would not let two CTAs share an SM
            half = -(-dispatch.row_vectors(N, es, False) // (c // 2))
            assert 2 * (dispatch._smem_bytes(half) + 1024) > dispatch.SOFTMAX_SMEM_PER_SM
    assert plan(64, 50257, 2)["cluster"] == 4                       # 64 rows: 256 CTAs cover the SMs
    # a row per CTA in registers while 256 threads hold it: fp32 up to 32 KB, 16-bit up to 16 KB
    aligned = lambda M, N, es: dispatch.plan_softmax(M, N, es, True, sms=SMS)["kernel"]
    assert aligned(16384, 8192, 4) == "block" and aligned(8192, 8192, 2) == "block"
    assert aligned(8192, 8200, 2) == "smem" and plan(8192, 8192, 2)["kernel"] == "smem"   # 1025 vectors
    assert plan(64, 16384, 2)["kernel"] == "split"        # too few rows to cover the SMs (block's rule too)
    assert plan(8192, 16384, 2, kernel="smem")["cluster"] == 1
    assert plan(1, 1, 2, kernel="smem")["cap"] == 1                 # any row, forced
    assert plan(4096, 262147, 4, kernel="smem")["cluster"] == 8        # 128 KB slices: one CTA an SM
    with pytest.raises(ValueError, match="shared memory"):
        plan(4096, 8 * 227 * 1024 // 4, 4, kernel="smem")
    assert plan(4096, 50257, 2, kernel="smem") == dispatch.plan_smem(4096, 50257, 2, SMS)
    assert dispatch.plan_smem(4096, 50257, 2, SMS, cluster=2)["cap"] == 3142


def test_planner_and_kernel_agree_on_smem_bytes():
    """The planner's shared-memory size of a slice is the kernel module's own."""
    pytest.importorskip("cutlass")
    from cutlass_src import dispatch, softmax_smem
    assert softmax_smem.smem_bytes(1234) == dispatch._smem_bytes(1234)


@pytest.mark.parametrize("N,V,C,phase", [(50257, 8, 1, 3), (50257, 8, 4, 7), (1, 8, 1, 5), (1, 4, 2, 3),
                                         (131072, 4, 8, 0), (37, 8, 8, 1), (128256, 8, 4, 1)])
def test_softmax_smem_slices_cover_the_row(N, V, C, phase):
    """The kernel's index arithmetic (softmax_smem.py), in Python: the C slices' vectors cover every
    vector touching the row once, each within the capacity; the 8 chunks of a slice tile it; every
    column in [0, N) is read once and columns outside are masked."""
    from cutlass_src import dispatch

    count = -(-(N + phase) // V)
    cap = -(-dispatch.row_vectors(N, 16 // V, False) // C)
    seen = []
    cols = []
    for rank in range(C):
        per_rank = -(-count // C)
        v0 = rank * per_rank
        nv = max(min(count - v0, per_rank), 0)
        assert nv <= cap
        col0 = v0 * V - phase
        per = -(-nv // 8)
        chunks = [(k * per, min(nv, k * per + per)) for k in range(8) if k * per < min(nv, k * per + per)]
        assert [j for a, b in chunks for j in range(a, b)] == list(range(nv))
        seen += [v0 + j for j in range(nv)]
        cols += [col0 + j * V + e for j in range(nv) for e in range(V) if 0 <= col0 + j * V + e < N]
    assert seen == list(range(count)) and cols == list(range(N))


def test_plan_softmax_every_suite_case():
    from cutlass_src import dispatch

    for c in _cases("softmax"):
        es = {"float32": 4}.get(c.dtype, 2)
        for aligned in (True, False):
            p = dispatch.plan_softmax(c.M, c.N, es, aligned, sms=SMS)
            nvec = dispatch.row_vectors(c.N, es, aligned)
            assert p["kernel"] != "simple", c.id
            if p["kernel"] == "rows":
                assert p["group"] * p["k"] >= nvec
            elif p["kernel"] == "smem":
                assert p["cap"] * p["cluster"] >= dispatch.row_vectors(c.N, es, False)
                assert p["cluster"] <= dispatch.SOFTMAX_SMEM_CLUSTER_MAX and p["smem"] <= dispatch.SOFTMAX_SMEM_PER_CTA
            elif p["kernel"] in ("block", "cluster"):
                assert p["threads"] * p["k"] * p["cluster"] >= nvec
                assert p["cluster"] <= dispatch.SOFTMAX_CLUSTER_MAX
            else:
                assert p["threads"] * p["k"] * p["parts"] >= nvec and p["grid"] % p["parts"] == 0, (c.id, p)


# -- compile-only for sm_90a: every default on every verify + models case ------------------------
def _facts(problem, impl_id, case):
    facts = registry.get(problem, impl_id, candidates=True).compile_only_fn(case)
    assert facts["compile_s"] >= 0 and facts.get("registers"), facts     # ptxas -v on the DSL's PTX
    return facts


@needs_cute
@pytest.mark.slow
@pytest.mark.parametrize("problem", PROBLEMS)
def test_compile_default_every_suite_case(problem):
    """Every case of the verify and models suites: the default plans it and its kernel compiles
    for sm_90a (each distinct compile-time configuration compiled once, the rest cached). No
    spills on the models suite; the predicated ping-pong paths of ragged verify shapes spill a few
    words (producer / predicated store at 88 / 208 registers)."""
    bad = []
    for case in _cases(problem):
        facts = _facts(problem, f"cute:{problem}", case)
        limit = 0 if case in problems.get(problem).cases("models") else 128
        if facts["spills"] > limit:
            bad.append(f"{case.id}: {facts['spills']} bytes spilled, plan {facts['config']}")
    assert not bad, "\n".join(bad)


# a representative case per plan branch for the variants and twins (the defaults are above)
VARIANT_CASES = {
    "vector_add": [dict(N=98_432), dict(N=4099, dtype="float16", misalign=3)],
    "softmax": [dict(M=1823, N=781), dict(M=300, N=777, layout="strided_odd"), dict(M=2048, N=2050, dtype="float16"),
                dict(M=3, N=262_147), dict(M=4096, N=50257, dtype="bfloat16"),
                dict(M=4096, N=128_256, dtype="float32")],
    "gemm_epilogue": [dict(M=127, N=65, K=129, act="gelu"), dict(M=16, N=520, K=8192, act="none"),
                      dict(M=4096, N=50257, K=768, act="none"), dict(M=512, N=384, K=1024, bias=0)],
}


@needs_cute
@pytest.mark.parametrize("problem,impl_id", [(p, i) for table in (IDS, CANDIDATES) for p, ids in table.items()
                                             for i in ids if i != f"cute:{p}"])
def test_compile_variants_and_twins(problem, impl_id):
    im = registry.get(problem, impl_id, candidates=True)
    n = 0
    for kw in VARIANT_CASES[problem]:
        case = problems.get(problem).case(**kw)
        if im.supports(case):
            continue
        facts = _facts(problem, impl_id, case)
        assert facts["spills"] <= 128, (case.id, facts)
        n += 1
    assert n, f"{impl_id} took none of its representative cases"


# -- the PTX of each path -----------------------------------------------------------------------
@needs_cute
def test_gemm_ptx_paths():
    from cutlass_src import dispatch, gemm_launch

    def ptx(plan):
        return gemm_launch.compile_gemm(torch.bfloat16, plan).ptx

    tma = dispatch.plan_gemm(4096, 6144, 4096, sms=SMS)
    text = ptx(tma)
    for needle in ("wgmma.mma_async", "cp.async.bulk.tensor", "multicast::cluster", "mapa.shared::cluster",
                   "stmatrix", "setmaxnreg.dec.sync.aligned.u32 \t40", "setmaxnreg.inc.sync.aligned.u32 \t232"):
        assert needle in text, needle
    ragged = dispatch.plan_gemm(4096, 50257, 768, (8, 1, 1), sms=SMS)
    text = ptx(ragged)
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global", text)   # A still by TMA
    assert "fence.proxy.async.shared::cta" in text and "setmaxnreg.dec.sync.aligned.u32 \t88" in text
    assert "ld.global.v4" in text and "prmt.b32" in text and "st.shared.v4" in text  # B realigned
    assert "st.global.b16" in text and "cp.async.bulk.tensor.2d.global.shared" not in text  # C predicated
    element = {**ragged, "loads": ["tma", "v1", "v1"]}
    assert "ld.global.b16" in ptx(element)
    split = dispatch.plan_gemm(16, 4096, 14336, sms=SMS)
    assert split["splits"] > 1
    text = ptx(split)
    assert "atom.global.add" in text or "red.global.add" in text
    assert "fence.acq_rel.gpu" in text and f"wgmma.mma_async.sync.aligned.m64n{split['tile'][1]}k16" in text
    wide = dispatch.plan_gemm(3000, 3000, 3000, sms=SMS, wide=True)      # GEMM_NEXT's 128 x 192
    text = ptx(wide)
    assert wide["tile"] == [128, 192] and "wgmma.mma_async.sync.aligned.m64n192k16" in text
    assert "cp.async.bulk.tensor" in text and "multicast::cluster" in text


@needs_cute
def test_softmax_ptx_paths():
    from cutlass_src import dispatch, softmax_block, softmax_cluster, softmax_rows, softmax_split

    p = dispatch.plan_softmax(4096, 50257, 2, aligned=False, sms=SMS, kernel="split")
    text = softmax_split.compile_split(torch.bfloat16, p).ptx
    assert ".minnctapersm 2" in text and ".reqntid 256, 1, 1" in text
    assert text.count("st.relaxed.gpu.global.b64") >= 1 and "ld.relaxed.gpu.global.b64" in text
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in text
    assert "vote.sync.all" in text and re.search(r"atom\.global\.acq_rel\.add", text)
    assert "ld.shared.v4" in text and "st.global.v4" in text              # 128-bit at any alignment
    assert "membar" not in text and "fence.sc" not in text
    one = softmax_split.compile_split(torch.float32, dispatch.plan_softmax(4096, 16000, 4, sms=SMS, kernel="split")).ptx
    assert "ld.relaxed" not in one and "atom" not in one                 # C = 1: no exchange
    text = softmax_block.compile_block(torch.bfloat16, dispatch.plan_softmax(32768, 4096, 2, sms=SMS)).ptx
    assert "ld.global.v4" in text and "st.global.v4" in text
    rows = dispatch.plan_softmax(4096, 1024, 4, sms=SMS)
    body = softmax_rows.compile_rows(torch.float32, rows).ptx
    body = body[body.find(".entry"):]
    # the first row's loads (prologue) and the next row's (in the loop) precede the first shuffle
    assert body[:body.find("shfl.sync.bfly")].count("ld.global.v4") >= 2 * rows["k"], rows
    assert f".minnctapersm {rows['ctas_per_sm']}" in body, rows        # the capped grid is resident
    cl = dispatch.plan_softmax(4096, 50257, 2, aligned=False, sms=SMS, kernel="cluster")
    assert cl["kernel"] == "cluster" and "mapa.shared::cluster" in softmax_cluster.compile_cluster(torch.bfloat16, cl).ptx
    assert "mapa" not in text                                              # the block kernel: no cluster


_WARP_SYNC = re.compile(r"\b(shfl\.sync|vote\.sync|bar\.warp\.sync|match\.sync|redux\.sync)\b")


def lane_zero_warp_syncs(ptx: str) -> list[str]:
    """Warp-synchronous instructions (``shfl.sync`` ...) inside a branch only lane 0 takes: the
    code after ``setp.ne %p, <%laneid>, 0; @%p bra L`` up to ``L:``. Such an instruction waits for
    31 lanes that never arrive - the kernel hangs (or is undefined) on the GPU."""
    lane_regs, lane_preds, found = set(), set(), []
    lines = ptx.splitlines()
    for i, line in enumerate(lines):
        t = line.strip()
        if m := re.match(r"mov\.u32\s+(%r\d+),\s*%laneid;", t):
            lane_regs.add(m.group(1))
        elif m := re.match(r"setp\.ne\.[bsu]32\s+(%p\d+),\s*(%r\d+),\s*0;", t):
            if m.group(2) in lane_regs:
                lane_preds.add(m.group(1))
        elif m := re.match(r"@(%p\d+)\s+bra(?:\.uni)?\s+(\$?\w+);", t):
            if m.group(1) in lane_preds:
                for body in lines[i + 1:]:
                    if body.strip() == f"{m.group(2)}:":
                        break
                    if _WARP_SYNC.search(body):
                        found.append(body.strip())
    return found


def test_lane_zero_check_finds_a_shuffle_in_the_branch():
    bad = "mov.u32 %r84, %laneid;\nsetp.ne.b32 %p15, %r84, 0;\n@%p15 bra $L__BB0_5;\n" \
          "shfl.sync.idx.b32 %r86, %r85, 0, 31, -1;\nst.shared.v2.b32 [%r88], {%r4, %r5};\n$L__BB0_5:\n"
    good = "shfl.sync.idx.b32 %r86, %r85, 0, 31, -1;\nmov.u32 %r84, %laneid;\nsetp.ne.b32 %p15, %r84, 0;\n" \
           "@%p15 bra $L__BB0_5;\nst.shared.v2.b32 [%r88], {%r4, %r5};\n$L__BB0_5:\nshfl.sync.bfly.b32 %r1, %r2, 1, 31, -1;\n"
    assert lane_zero_warp_syncs(bad) == ["shfl.sync.idx.b32 %r86, %r85, 0, 31, -1;"]
    assert lane_zero_warp_syncs(good) == []


@needs_cute
def test_softmax_kernels_no_warp_sync_in_lane_zero_branch():
    """Every CuTe softmax kernel, the twin included: no warp shuffle where only lane 0 runs (the
    twin once took its warp index - a ``shfl.sync`` of the whole warp - inside ``if lane == 0``
    and hung on the H200)."""
    from cutlass_src import dispatch, softmax, softmax_block, softmax_cluster, softmax_rows, softmax_smem, softmax_split

    dt = torch.bfloat16
    texts = {"simple": softmax._compile(dt).ptx,
             "rows": softmax_rows.compile_rows(dt, dispatch.plan_softmax(4096, 1000, 2, False, sms=SMS)).ptx,
             "block": softmax_block.compile_block(dt, dispatch.plan_softmax(32768, 4096, 2, sms=SMS)).ptx,
             "cluster": softmax_cluster.compile_cluster(dt, dispatch.plan_softmax(4096, 50257, 2, False, sms=SMS,
                                                                                  kernel="cluster")).ptx,
             "smem": softmax_smem.compile_smem(dt, dispatch.plan_softmax(4096, 50257, 2, False, sms=SMS)).ptx,
             "split": softmax_split.compile_split(dt, dispatch.plan_softmax(4096, 50257, 2, False, sms=SMS,
                                                                            kernel="split")).ptx}
    for name, text in texts.items():
        assert text and "shfl.sync" in text, name
        assert lane_zero_warp_syncs(text) == [], name


@needs_cute
def test_gemm_and_vector_add_kernels_no_warp_sync_in_lane_zero_branch():
    """The same check over the GEMM schedules (warp-specialised, ping-pong, split-K, the ragged
    loads), the GEMM twin and both vector-add kernels."""
    from cutlass_src import dispatch, gemm_epilogue, gemm_launch, vector_add, vector_add_unmasked

    dt = torch.bfloat16
    plans = [dispatch.plan_gemm(4096, 6144, 4096, sms=SMS), dispatch.plan_gemm(4096, 50257, 768, (8, 1, 1), sms=SMS),
             dispatch.plan_gemm(16, 4096, 14336, sms=SMS), dispatch.plan_gemm(256, 6144, 4096, sms=SMS, schedule="pingpong")]
    assert {p["schedule"] for p in plans} == {"ws", "pingpong"} and any(p["splits"] > 1 for p in plans)
    texts = [gemm_launch.compile_gemm(dt, p).ptx for p in plans]
    texts += [gemm_epilogue._compile(dt).ptx, vector_add._compile(dt).ptx, vector_add_unmasked._compile(dt, 16, 4)[0].ptx]
    for plan, text in zip(plans + ["gemm twin", "vector add twin", "vector add"], texts):
        assert text and ".entry" in text, plan
        assert lane_zero_warp_syncs(text) == [], plan


@needs_cute
@pytest.mark.parametrize("M,N,dtype", [(4096, 50257, torch.bfloat16), (4096, 128256, torch.bfloat16),
                                       (4096, 50257, torch.float32), (4096, 151936, torch.float32),
                                       (2000, 50000, torch.float16)])
def test_softmax_smem_ptx(M, N, dtype):
    """The slice arrives by 8 bulk copies on 8 mbarriers into dynamic shared memory (no static
    shared memory: its size is the launch's), 128-bit shared loads and global stores, DSMEM for
    C > 1, few registers and no spills."""
    from cutlass_src import dispatch, softmax_smem

    p = dispatch.plan_softmax(M, N, torch.empty((), dtype=dtype).element_size(), aligned=False, sms=SMS)
    assert p["kernel"] == "smem", p
    comp = softmax_smem.compile_smem(dtype, p)
    text = comp.ptx
    assert text.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == softmax_smem.CHUNKS
    assert text.count("mbarrier.init.shared.b64") == softmax_smem.CHUNKS and "mbarrier.try_wait.parity" in text
    assert ".extern .shared .align 128 .b8" in text
    assert "ld.shared.v4" in text and "st.global.v4" in text and "ld.global" not in text
    assert ("mapa.shared::cluster" in text) == (p["cluster"] > 1)
    facts = comp.facts()
    assert facts["spills"] == 0 and facts["registers"] <= 64 and not facts.get("smem"), facts


def test_plan_cluster_rule():
    """softmax_cluster (asked for only; no default reaches it): the fewest CTAs C >= 2 of 256
    threads holding a row at <= 64 values a thread, C doubled while M x C < SMs, up to 16; the
    default's choice never is it (a sweep of row counts, lengths, dtypes, alignments)."""
    from cutlass_src import dispatch

    def plan(M, N, es, aligned=True):
        return dispatch.plan_softmax(M, N, es, aligned, sms=SMS, kernel="cluster")

    want = {(4096, 32000, 2): (2, 8), (4096, 128256, 2): (8, 8), (4096, 151936, 2): (16, 5),
            (4096, 128256, 4): (8, 16), (4096, 151936, 4): (16, 10), (4096, 50257, 4): (4, 13),
            (48, 65536, 2): (4, 8), (8, 200003, 2): (16, 7)}
    for (M, N, es), (c, k) in want.items():
        p = plan(M, N, es)
        assert (p["cluster"], p["k"], p["threads"]) == (c, k, 256), (M, N, p)
        assert p["cluster"] * p["threads"] * p["k"] * (16 // es) >= N and p["k"] * 16 // es <= 64
    assert plan(2, 20000, 4)["cluster"] == 16                      # few rows: a row over more SMs
    with pytest.raises(ValueError, match="registers of a cluster"):
        plan(1, 786433, 4)                                         # 16 x 256 x 64 values < the row
    for M in (1, 8, 48, 66, 100, 131, 132, 528, 4096):
        for N in (4000, 16385, 32000, 65536, 128256, 200003, 786433):
            for es, aligned in ((2, True), (4, False)):
                assert dispatch.plan_softmax(M, N, es, aligned, sms=SMS)["kernel"] != "cluster", (M, N, es)


def test_next_sends_long_rows_to_the_cluster_kernel():
    """The pending switch (cute:softmax_next, SOFTMAX_CLUSTER_LONG): a row over 32 KB goes to the
    cluster kernel where a cluster holds it and its M x C CTAs cover the SMs, else as before
    (short rows, few rows of long rows: split; rows past 16 CTAs' registers); the switch is
    restored after the block."""
    from cutlass_src import dispatch

    def kernel(M, N, es, aligned=True):
        return dispatch.plan_softmax(M, N, es, aligned, sms=SMS)["kernel"]

    today = {(M, N, es): kernel(M, N, es) for M in (8, 48, 4096) for N in (512, 4096, 32000, 128256, 786433)
             for es in (2, 4)}
    with dispatch.switched(dispatch.SOFTMAX_NEXT):
        for (M, N, es), was in today.items():
            p = dispatch.plan_softmax(M, N, es, True, sms=SMS)
            held = dispatch.plan_cluster(M, dispatch.row_vectors(N, es, True), 16 // es, SMS)
            if N * es > dispatch.SOFTMAX_BLOCK_MAX_BYTES and held and M * held["cluster"] >= SMS:
                assert p == held, (M, N, es, p)
            else:
                assert p["kernel"] == was, (M, N, es, p)
    assert not dispatch.SOFTMAX_CLUSTER_LONG


@needs_cute
@pytest.mark.parametrize("stage", [True, False])
def test_softmax_cluster_ptx(stage):
    """The cluster kernel: every load issued before the first shuffle (cp.async.cg into shared
    memory when staged, 128-bit global loads into registers when not), one exponential per
    element (not two: fewer ex2 than twice the values a thread), the partials as 64-bit words
    through DSMEM behind cluster barriers, no CTA barrier, 128-bit stores, no spills."""
    from cutlass_src import dispatch, softmax_cluster

    p = {**dispatch.plan_softmax(4096, 50257, 2, False, sms=SMS, kernel="cluster"), "stage": stage}
    comp = softmax_cluster.compile_cluster(torch.bfloat16, p)
    text = comp.ptx
    body = text[text.find(".entry"):]
    head = body[:body.find("shfl.sync.bfly")]
    if stage:
        assert head.count("cp.async.cg.shared.global") == p["k"] and "cp.async.wait_group" in head
        assert "ld.global" not in body
    else:
        assert head.count("ld.global.v4") == p["k"] and "cp.async" not in body
    values = p["k"] * p["vec"]
    assert values + 20 <= body.count("ex2.approx") < 2 * values, body.count("ex2.approx")
    assert "ld.shared::cluster.b64" in body and "mapa.shared::cluster" in body
    assert body.count("barrier.cluster.arrive") == 2 and body.count("barrier.cluster.wait") == 2
    assert "bar.sync" not in body and "barrier.sync" not in body
    assert "st.global.v4" in body and comp.facts()["spills"] == 0
    # each exponent is a difference scaled by log2(e) (x - m) * L, never x * L - m * L: ptxas fuses
    # the latter into an fma whose per-thread rounding of m * L fails fp32 rows of values ~1e4
    defs = {reg: (op, args) for op, reg, args in re.findall(r"^\s*([a-z][\w.]*)\s+(%r\d+), ([^;]*);", body, re.M)}
    for src in re.findall(r"ex2\.approx\.ftz\.f32\s+%r\d+, (%r\d+);", body):
        op, args = defs[src]
        assert op == "mul.f32" and args.endswith("0f3FB8AA3B"), (src, op, args)
        assert not defs[args.split(",")[0]][0].startswith(("mul", "fma")), (src, args)


def test_softmax_cluster_vectors_cover_the_row():
    """Thread t of rank r holds vectors (k*C + r)*T + t: at any phase every vector touching the
    row is held once, and every rank holds some (none is left with only -inf)."""
    from cutlass_src import dispatch

    for M, N, es, phase in ((4096, 151936, 2, 0), (4096, 151936, 4, 3), (8, 200003, 2, 5), (4096, 32000, 2, 7)):
        p = dispatch.plan_softmax(M, N, es, phase == 0, sms=SMS, kernel="cluster")
        C, T, K, V = p["cluster"], p["threads"], p["k"], 16 // es
        touched = -(-(N + phase) // V)
        held = [(k * C + r) * T + t for r in range(C) for k in range(K) for t in range(T)]
        assert sorted(j for j in held if j < touched) == list(range(touched))
        assert all(r * T < touched for r in range(C))


@needs_cute
def test_twins_ptx():
    from cutlass_src import gemm_epilogue, softmax, vector_add

    assert "mma.sync.aligned.m16n8k16" in gemm_epilogue._compile(torch.bfloat16).ptx
    assert "v4" not in vector_add._compile(torch.float32).ptx.split(".entry")[1]
    assert "bar.sync" in softmax._compile(torch.float16).ptx


# -- input validation (runs without a GPU: checks fire before any launch) -------------------------
@needs_cute
def test_validation_names_the_argument():
    from cutlass_src import gemm_launch, softmax_base, vector_add_unmasked

    x = torch.zeros(8)
    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        vector_add_unmasked.validate(x, x, x)
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        vector_add_unmasked.validate([1.0], x, x)
    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        softmax_base.validate(torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        softmax_base.validate("x", None)
    a = torch.zeros(4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a: must be a CUDA tensor"):
        gemm_launch.validate(a, a, None, a, "relu")
    with pytest.raises(ValueError, match="act"):
        from cutlass_src.epilogue import act_code
        act_code("tanh")
    from cutlass_src.gemm_epilogue_ws import GemmWS
    with pytest.raises(ValueError, match="cluster_m"):
        GemmWS((128, 256), ("tma", "realign", "v1"), cluster_m=2)
    with pytest.raises(ValueError, match="loads"):
        GemmWS((128, 256), ("tma", "tma", "realign"))


def test_access_widths():
    from cutlass_src.gemm_launch import access_elems

    assert access_elems(2 * 768) == 8 and access_elems(2 * 50257) == 1 and access_elems(2 * 1026) == 2
    assert access_elems(2 * 1024, 2 * 1030) == 2 and access_elems(16, 0x7f0000000002) == 1


# -- on a GPU: the verify suite, split-K and the split softmax ---------------------------------
@pytest.fixture(scope="module")
def compiled_ahead():
    """Every kernel of the verify suites, compiled in parallel first (the DSL's compiles of 13 ids'
    suites take minutes serially; the exported kernels on disk are loaded by the tests)."""
    compile_ahead([(p, i, c) for p, ids in IDS.items() for i in ids for c in problems.get(p).cases("verify")
                   if not registry.get(p, i).supports(c)])


@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE_GPU and HAVE_CUTE), reason="needs a CUDA GPU and the CuTe DSL")
@pytest.mark.parametrize("problem,impl_id", [(p, i) for p, ids in IDS.items() for i in ids])
def test_verify_suite_gpu(problem, impl_id, compiled_ahead):
    from harness.verify import verify_case

    prob, im = problems.get(problem), registry.get(problem, impl_id)
    bad = []
    for case in prob.cases("verify"):
        why = im.supports(case)
        if why:
            assert im.role != "default", f"{impl_id} declined {case.id}: {why}"
            continue
        c = verify_case(im, prob, case, "cuda", seeds=GPU_SEEDS)
        if not c.ok:
            bad.append(f"{case.id}: {c.reason}")
    assert not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE_GPU and HAVE_CUTE), reason="needs a CUDA GPU and the CuTe DSL")
def test_gemm_splits_agree_gpu():
    """The same GEMM with 1, 2, 5 and 16 splits, cooperative and ping-pong, TMA and predicated:
    within fp32-accumulation error of each other and of a float64 reference; bit-identical
    across two launches (the last split sums the partials in split order)."""
    from cutlass_src import dispatch, gemm_launch

    g = torch.Generator(device="cuda").manual_seed(0)
    for M, N, K in ((200, 1000, 4096), (16, 50257, 768), (1, 520, 2051)):
        a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        b = torch.randn(K, N, device="cuda", generator=g).bfloat16()
        bias = torch.randn(N, device="cuda", generator=g).bfloat16()
        ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")
        widths = gemm_launch.operand_widths(a, b, torch.empty(M, N, dtype=a.dtype, device="cuda"))
        for schedule in ("ws", "pingpong"):
            for splits in (1, 2, 5, 16):
                if M <= 64 and schedule == "ws":
                    continue
                try:
                    plan = dispatch.plan_gemm(M, N, K, widths, schedule=schedule, min_splits=splits)
                except ValueError as e:   # only a K too short for this many splits
                    assert "cannot make" in str(e) and splits > 1, (M, N, K, schedule, splits, e)
                    continue
                plan["splits"] = min(splits, -(-K // 64))
                out = torch.empty(M, N, dtype=a.dtype, device="cuda")
                launch = gemm_launch.prepare_gemm(a, b, bias, out, "gelu", plan)[0]
                launch()
                first = out.clone()
                launch()
                torch.cuda.synchronize()
                assert torch.equal(first, out), (M, N, K, plan)
                err = (out.double() - ref).abs().max().item()
                assert err <= 0.05 * ref.abs().max().item(), (M, N, K, plan, err)


@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE_GPU and HAVE_CUTE), reason="needs a CUDA GPU and the CuTe DSL")
def test_softmax_split_gpu():
    """split: chunks of rows at every alignment, -inf chunks, an all -inf row (NaN, as torch),
    fp16/bf16, several rounds per CTA, and the bounded spin (max_spin = 0: every CTA gives up at
    once and writes NaN instead of waiting). Two launches in a row: the slots reset themselves."""
    from cutlass_src import dispatch, softmax_split as ss

    def run(x, **kw):
        out = torch.empty_like(x)
        plan = dispatch.plan_softmax(x.shape[0], x.shape[1], x.element_size(), False, kernel="split")
        launch = ss.prepare_softmax_split(x, out, plan, **kw)[0]
        launch()
        return out, launch

    def check(x):
        y, launch = run(x)
        ref = torch.softmax(x.double(), -1)
        tol = dict(rtol=1e-4, atol=1e-9) if x.dtype == torch.float32 else dict(rtol=2e-2, atol=1e-5)
        assert torch.allclose(y.double(), ref, equal_nan=True, **tol), (x.shape, x.dtype)
        launch()
        assert torch.allclose(y.double(), ref, equal_nan=True, **tol), ("second launch", x.shape)
        return y

    for n in (32769, 100_000, 262144, 262147):
        check(torch.randn(7, n, device="cuda"))
    check(torch.randn(600, 131072, device="cuda"))           # many rounds
    check(torch.randn(5, 70003, device="cuda")[:, 1:70000])  # rows at every 16-byte phase
    for dt in (torch.float16, torch.bfloat16):
        check(torch.randn(9, 200_001, device="cuda").to(dt))
    x = torch.randn(6, 100_000, device="cuda") * 30
    x[0, :16384] = float("-inf")
    x[1, 50_000:] = float("-inf")
    x[2] = float("-inf")
    x[3, :99_999] = float("-inf")
    x[4] -= 500
    y = check(x)
    assert torch.isnan(y[2]).all() and not torch.isnan(y[[0, 1, 3, 4, 5]]).any()
    y, _ = run(torch.randn(8, 100_000, device="cuda"), max_spin=0)
    assert torch.isnan(y).all()


def test_realign_shift_arithmetic():
    """The realign loader's shift, in plain Python: words of RUN + 1 aligned 16-byte vectors,
    shifted by 2 words if s & 4, by 1 word if s & 2, then prmt(z[i], z[i+1], 0x5432) if s is odd,
    give the 8 * RUN 16-bit elements that start s elements past the first vector."""
    import random

    def prmt(a, b, sel):                     # PTX prmt.b32: bytes {b, a}, result byte i = nibble i
        src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
        return sum(src[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))

    RUN = 4
    rng = random.Random(0)
    for s in range(8):
        elems = [rng.randrange(1 << 16) for _ in range(8 * (RUN + 1))]
        words = [elems[2 * i] | (elems[2 * i + 1] << 16) for i in range(4 * (RUN + 1))] + [0, 0]
        y = [words[i + 2] if s & 4 else words[i] for i in range(4 * RUN + 2)]
        z = [y[i + 1] if s & 2 else y[i] for i in range(4 * RUN + 1)]
        out = [prmt(z[i], z[i + 1], 0x5432) if s & 1 else z[i] for i in range(4 * RUN)]
        got = [e for w in out for e in (w & 0xFFFF, w >> 16)]
        assert got == elems[s:s + 8 * RUN], s


# -- compiled kernels kept on disk across processes ---------------------------------------------


@needs_cute
def test_compiles_are_kept_on_disk_across_processes(tmp_path):
    """A second process loads the exported kernel instead of compiling it (the DSL's own file cache
    does not cover cute.compile); a changed key compiles again."""
    import subprocess
    import sys

    import cutlass_src
    if not cutlass_src.use_tvm_ffi():
        pytest.skip("the disk cache keeps tvm-ffi objects only (apache-tvm-ffi not installed)")
    code = ("import json, sys, torch\n"
            "from cutlass_src import dispatch, gemm_launch\n"
            "plan = dispatch.plan_gemm(256, 512, 1024, sms=132)\n"
            "c = gemm_launch.compile_gemm(torch.bfloat16, plan)\n"
            "print(json.dumps({'from_disk': c.from_disk, 's': c.compile_s, 'ptx': bool(c.ptx)}))\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "CUTE_DSL_ARCH": "sm_90a"}
    # the second process may not compile at all: its cute.compile raises (a timing bound would be
    # a timed unit test, and flaky on a loaded runner)
    no_compile = ("import cutlass.cute as _cute\n"
                  "def _refuse(*a, **k):\n"
                  "    raise RuntimeError('compiled again instead of loading from disk')\n"
                  "_cute.compile = _refuse\n")
    runs = []
    for prelude in ("", no_compile):
        out = subprocess.run([sys.executable, "-c", prelude + code], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["from_disk"] is False and runs[1]["from_disk"] is True
    assert runs[1]["ptx"]                                  # facts (registers) still available
    kept = list((tmp_path / "kernel-layers" / "cute").glob("*/*.o"))
    assert len(kept) == 1


@pytest.mark.parametrize("cc,gemm_ok,long_rows_ok", [((8, 0), False, False), ((8, 9), False, False),
                                                     ((9, 0), True, True), ((10, 0), False, True),
                                                     ((12, 0), False, True)],
                         ids=["a100", "rtx4090", "h100", "b200", "rtx5090"])
def test_defaults_say_why_not_on_other_gpus(monkeypatch, cc, gemm_ok, long_rows_ok):
    """On a GPU other than Hopper the CuTe rows say in one line why a default cannot run a case
    (wgmma/TMA GEMM: sm_90a only; the smem/split/cluster softmax kernels: sm_90 bulk copies and
    clusters), and take the cases the device runs."""
    from backends import cute_layer
    if cute_layer._available():
        pytest.skip(cute_layer._available())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cc)
    gemm = registry.get("gemm_epilogue", "cute:gemm_epilogue")
    why = gemm.supports(problems.get("gemm_epilogue").case(M=4096, N=4096, K=4096, dtype="bfloat16"))
    assert (why is None) == gemm_ok and (gemm_ok or "sm_90a" in why and f"sm_{cc[0]}{cc[1]}" in why), why
    sm = registry.get("softmax", "cute:softmax")
    assert sm.supports(problems.get("softmax").case(M=4096, N=256, dtype="bfloat16")) is None   # rows: anywhere
    long_case = problems.get("softmax").case(M=4096, N=128_256, dtype="bfloat16")
    kernel = cute_layer._sm_plan(long_case)["kernel"]
    why = sm.supports(long_case)
    if kernel in cute_layer._SM90_SOFTMAX:
        assert (why is None) == long_rows_ok and (long_rows_ok or "sm_90" in why), (kernel, why)
    va = registry.get("vector_add", "cute:vector_add")
    assert va.supports(problems.get("vector_add").case(N=1000, dtype="float32")) is None


