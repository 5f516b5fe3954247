"""CUDA C++ layer (kl_cuda, built by CMake from cuda_src/) and the cupy layer (NVRTC, same .cu files).

CPU: the one planner (cuda_src/dispatch.py and its dispatch_<problem>.py modules) gives a valid plan for every case of the verify and
models suites on an H200 and on an sm_80 GPU; its rules on the classes that matter; its argument
signatures against the kernels' declarations; the build products (module table == planner's
instances, ptxas facts, the no-CUDA configure path); the generic launcher's argument checks; the
adapters' reasons and validation; grid descriptions; NVRTC compiles of the same sources.
GPU (@pytest.mark.gpu): every implementation on the verify suite, CUDA-graph capture, split path.
"""
from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from cuda_src import dispatch
from conftest import GPU_SEEDS  # noqa: E402
from harness import problems, registry
from harness.errors import Unsupported

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()
HAS_NVCC = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")

cuda_layer = importlib.import_module("backends.cuda_layer")
cuda_gemm = importlib.import_module("backends.cuda_gemm")
cupy_layer = importlib.import_module("backends.cupy_layer")

CUDA_IDS = ["cuda:vector_add", "cuda:vector_add_simple", "cuda:softmax", "cuda:softmax_simple", "cuda:softmax_warp",
            "cuda:softmax_block", "cuda:softmax_rows", "cuda:softmax_online", "cuda:softmax_smem",
            "cuda:softmax_split"]
CUPY_IDS = [i.replace("cuda:", "cupy:") for i in CUDA_IDS]
SM80 = dispatch.Device(sms=108, cc=(8, 0), smem_optin=166912, smem_per_sm=167936, sm90a=False, clusters=False)


def _problem(impl_id):
    return "vector_add" if "vector_add" in impl_id else "gemm_epilogue" if "gemm" in impl_id else "softmax"


def _impl(impl_id):
    p = _problem(impl_id)
    return registry.get(p, impl_id, candidates=True), problems.get(p)


def _built() -> bool:
    try:
        return bool(importlib.import_module("kl_cuda_build").BUILT) and cuda_layer.available() is None
    except ImportError:
        return False


needs_build = pytest.mark.skipif(not (HAS_NVCC and _built()), reason="kl_cuda is not built here (no nvcc)")


# -- the planner: a valid plan for every case ------------------------------------------------------
def _check_launches(launches: dispatch.Launches, dev: dispatch.Device):
    names = {n for v in dispatch.instances().values() for n in v}
    fake = {n: 0x10000 * (i + 1) for i, n in enumerate(("x", "y", "out", "a", "b", "bias", "c", *launches.workspace))}
    for p in launches.plans:
        assert p.kernel in names, p.kernel
        assert dispatch.source_of(p.kernel).endswith(".cu")
        gx, gy, gz = p.grid
        assert 1 <= gx < 2 ** 31 and 1 <= gy <= 65535 and 1 <= gz <= 65535, p
        assert 1 <= p.block <= 1024 and p.block % 32 == 0, p
        assert 0 <= p.smem <= dev.smem_optin and p.max_dynamic_smem >= p.smem, p
        assert p.cluster in (1, 2, 4, 8, 16) and gx % p.cluster == 0, p
        assert p.cluster <= 8 or p.nonportable_cluster, p
        if p.cluster > 1:
            assert dev.cc[0] >= 9
        for z in p.zero:
            assert z in launches.workspace
        blob, offs = dispatch.pack(p, fake, lambda *a: bytes(128))
        assert len(offs) == len(dispatch.SIGNATURES[dispatch.family(p.kernel)])
        assert all(o % dispatch.ALIGN[t] == 0 for o, t in zip(offs, dispatch.SIGNATURES[dispatch.family(p.kernel)]))
        if p.cooperative:  # every block co-resident: at most the launch bound's blocks per SM
            assert gx <= dev.sms * dispatch.SOFTMAX["split_blocks_per_sm"]
        if "wgmma" in p.kernel or "gemm_ws" in p.kernel or "pingpong" in p.kernel:
            assert dev.cc == (9, 0) and dev.sm90a


@pytest.mark.parametrize("dev", [dispatch.H200, SM80], ids=["h200", "sm80"])
@pytest.mark.parametrize("problem", ["vector_add", "softmax", "gemm_epilogue"])
def test_default_plans_every_verify_and_models_case(problem, dev):
    prob = problems.get(problem)
    for suite in ("verify", "models", "bench"):
        for case in prob.cases(suite):
            if problem == "softmax":
                launches = cuda_layer.case_softmax("auto", case, dev)
                # the simple twin too: one block per row, any N
                _check_launches(cuda_layer.case_softmax("simple", case, dev), dev)
            elif problem == "vector_add":
                launches = cuda_layer.case_vector_add("auto", case, dev)
                _check_launches(cuda_layer.case_vector_add("simple", case, dev), dev)
            else:
                launches = cuda_gemm.case_gemm("auto", case, dev)
                _check_launches(cuda_gemm.case_gemm("simple", case, dev), dev)
            assert launches.plans, case
            _check_launches(launches, dev)
            if problem == "gemm_epilogue":  # the workspaces a plan names are sized for it
                for p in launches.plans:
                    if "splitk_reduce" in p.kernel:
                        splits = p.args[1][1]
                        assert splits >= 2 and launches.workspace["ws"] >= splits * case.M * case.N * 4


def test_vector_add_unroll_fills_the_sms_first():
    """The default unroll is the largest (up to the table's) whose grid gives every SM a block:
    a long vector keeps the table's, a short one trades loads a thread for blocks."""
    top, b, sms = dispatch.VECTOR_ADD["unroll"], dispatch.VECTOR_ADD["block"], dispatch.H200.sms
    long_ = dispatch.plan_vector_add("auto", 1 << 26, "bfloat16")
    assert long_.info["unroll"] == top
    short = dispatch.plan_vector_add("auto", 65536, "bfloat16")      # 8192 vectors: 32 blocks at best
    assert short.info["unroll"] == min(dispatch.VECTOR_ADD["unrolls"])
    for n in (1, 4099, 65536, 262_144, 1_000_003, 3 << 20, 1 << 24):
        for dt, es in (("bfloat16", 2), ("float32", 4)):
            p = dispatch.plan_vector_add("auto", n, dt)
            u, nvec = p.info["unroll"], n // (16 // es)
            assert u in dispatch.VECTOR_ADD["unrolls"] and u <= top
            bigger = [v for v in dispatch.VECTOR_ADD["unrolls"] if u < v <= top]
            if u > min(dispatch.VECTOR_ADD["unrolls"]):
                assert -(-nvec // (b * u)) >= sms, (n, dt, u)
            assert all(-(-nvec // (b * v)) < sms for v in bigger), (n, dt, u)
            _check_launches(p, dispatch.H200)


def test_vector_add_unroll_pinned_for_tuning():
    """A tuning run may pin the vector path's unroll to any compiled instance: the grid follows it,
    the kernel named is compiled; anything else names ``unroll``."""
    names = set(dispatch.instances()["vector_add_unmasked.cu"])
    for u in dispatch.VECTOR_ADD["unrolls"]:
        p = dispatch.plan_vector_add("auto", 65536, "bfloat16", unroll=u)
        assert p.info["unroll"] == u and p.plans[0].kernel in names
        assert p.plans[0].grid[0] == -(-8192 // (256 * u))      # 8192 16-byte vectors, 256 threads
        _check_launches(p, dispatch.H200)
    for bad in (3, 0, 8):
        with pytest.raises(ValueError, match="unroll"):
            dispatch.plan_vector_add("auto", 65536, "bfloat16", unroll=bad)


def _stride(N, dt, odd):
    """A row stride >= N whose rows start 16-byte aligned (``odd``: never aligned)."""
    es = dispatch.ESIZE[dt]
    return (N if N * es % 16 else N + 1) if odd else -(-N * es // 16) * 16 // es


def _auto(M, N, dt, odd=False, dev=None):
    """cuda:softmax's plan of M rows of N columns, ``_stride`` apart."""
    sx = _stride(N, dt, odd)
    return dispatch.plan_softmax("auto", M, N, dt, sx=sx, sy=sx, dev=dev or dispatch.H200)


def test_default_softmax_on_cases_with_known_answers(monkeypatch):
    """The path of cases worked out by hand from the SOFTMAX table (H200: 132 SMs, 227 KiB of
    shared memory a CTA): bytes of rows in flight per SM against the targets, long rows staged in
    shared memory or split over co-resident blocks, online when neither holds the row."""
    known = [
        # a warp a row, 4 rows a CTA, 10 CTAs an SM: 10 x 4 x 4000 B = 160 KiB >= 32 KiB
        ((4096, 1000, "float32", False), "warp", None),
        # 512-byte rows: warps hold 20 KiB < 32 KiB; the rows kernel 3 CTAs x 64 rows x 2 x 512 B
        ((4096, 128, "float32", False), "rows", None),
        # 1025..4096 columns: the block path first, on 32 KiB: 8 CTAs x 8 KiB
        ((4096, 4096, "bfloat16", False), "block", None),
        # 8192 fp32 columns: the rows kernel, 2 CTAs x 1 row x 2 in flight x 32 KiB = 128 KiB
        ((4096, 8192, "float32", False), "rows", None),
        # LM head, bf16: 297 KiB rows exceed a CTA's shared memory; slices of 4 fit 2 CTAs an SM
        ((4096, 151_936, "bfloat16", False), "smem", 4),
        # the same in fp32, 16-byte aligned: 594 KiB rows, 64 KiB split chunks, 4096 x 10 units
        ((4096, 151_936, "float32", False), "split", None),
        # ... rows not 16-byte aligned never split: staged over 8 CTAs
        ((4096, 151_936, "float32", True), "smem", 8),
        # one 4 MB row: more than 16 CTAs' shared memory; 62 split units > online's 8 CTAs
        ((1, 1_000_000, "float32", False), "split", None),
        # two such rows, not aligned: no split, no smem: online over a cluster of 8
        ((2, 1_000_000, "float32", True), "online", 8),
        # 16-bit: a split chunk of 16384 is 32 KiB < 64 KiB, so a 2 MB row is staged over 16 CTAs
        ((4096, 1_000_000, "bfloat16", False), "smem", 16),
        # 8 MB rows: beyond 16 CTAs' shared memory, and 16-bit rows do not split
        ((4096, 4_000_000, "bfloat16", False), "online", 8),
        # 40 MB rows: 611 split chunks > the 264 co-resident blocks
        ((4096, 10_000_000, "float32", False), "online", 8),
    ]
    for (M, N, dt, odd), path, cluster in known:
        info = _auto(M, N, dt, odd).info
        assert info["path"] == path, (M, N, dt, odd, info["path"])
        if cluster is not None:
            assert info["cluster"] == cluster, (M, N, dt, odd, info["cluster"])
    # sm_80: no thread-block clusters (the smem path has C = 1 there)
    assert _auto(8, 1_000_000, "float32", dev=SM80).info["path"] == "split"
    assert _auto(4096, 50257, "bfloat16", dev=SM80).info.get("cluster", 1) == 1
    # the table decides: without the short-row block rule, the rows kernel takes 4096 bf16
    # columns (3 CTAs x 2 rows x 2 in flight x 8 KiB = 96 KiB, the resident target)
    assert _auto(32_768, 4096, "bfloat16").info["path"] == "block"
    monkeypatch.setitem(dispatch.SOFTMAX, "block_short_max_n", 0)
    assert _auto(32_768, 4096, "bfloat16").info["path"] == "rows"


def test_default_softmax_invariants():
    """On shapes of every class (1 to 32768 rows; 1 to 10^7 columns, the table's edges; fp32 and
    16-bit; aligned and odd rows; H200 and sm_80): a plan of a path of dispatch.VARIANTS, whose own
    plan (the path asked for by name, with the same chunk / cluster) takes the case and launches
    the same kernel on the same grid; split only for 16-byte aligned rows; once no path but online
    holds a row, no longer row is held either; fewer rows never take a smaller smem cluster; and
    every path it plans among is taken somewhere."""
    S = dispatch.SOFTMAX
    Ns = sorted({1, 17, 128, 512, 1000, 1024, 1500, 2048, 4096, 4097, 8192, 8193, 20_000, 32_000, 32_768,
                 32_769, 50_257, 98_432, 128_256, 151_936, 262_147, 1_000_000, 4_000_000, 10_000_000,
                 S["block_min_n"], S["block_short_max_n"], S["block_short_max_n"] + 1})
    Ms = (1, 2, 7, 64, 132, 265, 4096, 32_768)
    seen = set()
    for dev in (dispatch.H200, SM80):
        for dt in ("float32", "float16", "bfloat16"):
            for odd in (False, True):
                online_from, smem_k = None, {}
                for N in Ns:
                    for M in Ms:
                        p = _auto(M, N, dt, odd, dev)
                        path = p.info["path"]
                        seen.add(path)
                        assert path in dispatch.VARIANTS["softmax"], path
                        _check_launches(p, dev)
                        opts = {"chunk": p.info["seg"]} if path == "split" else \
                               {"cluster": p.info["cluster"]} if path in ("smem", "online") else {}
                        sx = _stride(N, dt, odd)
                        own = dispatch.plan_softmax(path, M, N, dt, sx=sx, sy=sx, dev=dev, **opts)
                        assert [(q.kernel, q.grid) for q in own.plans] == [(q.kernel, q.grid) for q in p.plans]
                        if path == "split":
                            assert not odd or M == 1, (M, N, dt)
                        if path == "smem":   # M ascending: the cluster never grows with more rows
                            assert p.info["cluster"] <= smem_k.get(N, 16), (M, N, dt, odd)
                            smem_k[N] = p.info["cluster"]
                    if online_from is None and all(_auto(M, N, dt, odd, dev).info["path"] == "online" for M in Ms):
                        online_from = N
                    elif online_from is not None:
                        assert all(_auto(M, N, dt, odd, dev).info["path"] == "online" for M in Ms), (N, dt)
    # every path it plans among is taken somewhere
    assert seen == set(dispatch.VARIANTS["softmax"]), seen


def test_split_chunk_by_the_sm_count(monkeypatch):
    """Few long rows: the split variant's chunk is the largest of SOFTMAX["split_chunks"] whose
    M x parts units cover the SMs (else the smallest that fits the co-resident grid), on 256
    threads below 16384; the default keeps 16384 (the instance run on the H200) until
    split_fill_sms is on, then takes the same rule. Shapes of several classes, two devices."""
    S = dispatch.SOFTMAX
    names = set(dispatch.instances()["softmax_split.cu"])
    for dev in (dispatch.H200, dispatch.Device(sms=78)):
        cap = dev.sms * S["split_blocks_per_sm"]
        for M, N in ((1, 786_433), (1, 1_000_000), (2, 300_000), (3, 65_600), (8, 131_072), (64, 100_000),
                     (4096, 65_537), (1, 4_000_000)):
            try:
                p = dispatch.plan_softmax("split", M, N, "float32", dev=dev)
            except dispatch.Decline:
                assert all(-(-N // ch) > cap for ch in S["split_chunks"]), (M, N)
                continue
            ch, parts = p.info["seg"], p.info["parts"]
            fits = [c for c in S["split_chunks"] if -(-N // c) <= cap]
            want = next((c for c in fits if M * -(-N // c) >= dev.sms), fits[-1])
            assert ch == want and parts == -(-N // ch), (M, N, dev.sms, ch)
            assert p.plans[0].block == (512 if ch == S["split_chunk"] else 256)
            assert p.plans[0].kernel in names and p.plans[0].grid[0] <= cap
            _check_launches(p, dev)
            d = dispatch.plan_softmax("auto", M, N, "float32", dev=dev)
            if d.info["path"] == "split":
                assert d.info["seg"] == S["split_chunk"], (M, N)
    monkeypatch.setitem(S, "split_fill_sms", True)
    d = dispatch.plan_softmax("auto", 1, 786_433, "float32")
    assert d.info["path"] == "split" and d.info["seg"] < S["split_chunk"] and d.info["parts"] >= dispatch.H200.sms
    with pytest.raises(ValueError, match="chunk"):
        dispatch.plan_softmax("split", 1, 786_433, "float32", chunk=1000)
    with pytest.raises(ValueError, match="threads"):
        dispatch.plan_softmax("split", 1, 786_433, "float32", chunk=4096, threads=512)


def test_rows_short_ept_pins():
    """Very short rows: the rows path takes ept 8 / 16 when pinned (tuning, the GPU script): G =
    max(4, pow2(ceil(N / ept))) threads a row up to rows_short_max_g, the instance compiled; the
    default keeps 32 elements a thread (the shorter ones have not run on a GPU)."""
    S = dispatch.SOFTMAX
    names = set(dispatch.instances()["softmax_rows.cu"])
    for dt in ("float32", "float16", "bfloat16"):
        for N in (17, 48, 64, 96, 128, 200, 512, 1000):
            es = dispatch.ESIZE[dt]
            vec = 16 // es if (N * es) % 16 == 0 else 1      # 16-byte vectors where every row is aligned
            for e in (*S["rows_short_epts"], 32):
                g = max(4, 1 << (-(-N // e) - 1).bit_length())
                if e < vec or (e != 32 and g > S["rows_short_max_g"]):
                    with pytest.raises((ValueError, dispatch.Decline)):
                        dispatch.plan_softmax("rows", 50_000, N, dt, ept=e)
                    continue
                p = dispatch.plan_softmax("rows", 50_000, N, dt, ept=e)
                assert p.info["groups"] == g and p.info["ept"] == e and p.info["rows_per_block"] == 256 // g
                assert p.plans[0].kernel == f"softmax_rows_kernel<{dispatch.CTYPE[dt]}, {vec}, {e // vec}, {g}>"
                assert p.plans[0].kernel in names
                _check_launches(p, dispatch.H200)
            auto = dispatch.plan_softmax("auto", 50_000, N, dt)
            if auto.info["path"] == "rows":
                assert auto.info["ept"] == 32
    with pytest.raises(ValueError, match="ept"):
        dispatch.plan_softmax("rows", 100, 64, "float32", ept=4)


def test_few_long_rows_split_rather_than_online():
    """A row too long for the smem path's 16 CTAs (fp32 > ~3.7 MB) used to fall to online (M x 8
    CTAs) unless split's units covered every SM; now split (one read, M x parts CTAs) wins where its
    units outnumber the CTAs of the path that would run instead. Waves arithmetic on the kernels
    the H200 ran: 1 x 10^6 fp32 is 62 split CTAs instead of 8 online ones."""
    for M, N in ((1, 1_000_000), (2, 1_000_000), (1, 2_000_000), (3, 1_500_004)):
        p = dispatch.plan_softmax("auto", M, N, "float32")
        with pytest.raises(dispatch.Decline):
            dispatch.plan_softmax("smem", M, N, "float32")
        online = dispatch.plan_softmax("online", M, N, "float32")
        assert p.info["path"] == "split", (M, N, p.info["why"])
        assert p.plans[0].grid[0] > online.plans[0].grid[0] and "online" in p.info["why"]
    # unaligned rows (M > 1, odd N) cannot split: online stays
    assert dispatch.plan_softmax("auto", 2, 1_000_001, "float32").info["path"] == "online"
    # too long for the co-resident grid: online
    assert dispatch.plan_softmax("auto", 1, 5_000_000, "float32").info["path"] == "online"


def test_smem_word_for_a_cta_and_for_a_cluster():
    """One word, one algorithm (docs/DESIGN.md): the row staged raw in shared memory is ``smem``
    whether a CTA holds it (C = 1) or a cluster of C CTAs does; its why says which; the default's
    counted sources name softmax_smem.cu."""
    S = dispatch.SOFTMAX
    limit = dispatch.H200.smem_optin - S["smem_reserve"]
    for M, N, dt in ((4096, 50257, "bfloat16"), (4096, 50257, "float32"), (300, 100_003, "float16")):
        p = dispatch.plan_softmax("auto", M, N, dt)
        assert N * dispatch.ESIZE[dt] <= limit and M >= dispatch.H200.sms
        assert p.info["path"] == "smem" and p.info["cluster"] == 1 and p.plans[0].cluster == 1, (M, N, dt)
        assert "a CTA a row" in p.info["why"] and p.plans[0].kernel.startswith("softmax_smem_kernel<")
    for M, N, dt in ((8, 200_003, "bfloat16"), (2, 120_001, "bfloat16"), (64, 300_007, "float16")):
        p = dispatch.plan_softmax("auto", M, N, dt)
        k = p.info["cluster"]
        assert p.info["path"] == "smem" and k >= 2 and p.plans[0].cluster == k, (M, N, dt, p.info)
        assert f"a cluster of C = {k} CTAs a row" in p.info["why"]
    assert "smem" in dispatch.VARIANTS["softmax"]
    ids = {i.id for i in registry.select(problem="softmax")}
    assert {"cuda:softmax_smem", "cupy:softmax_smem"} <= ids
    files = {s.path for s in registry.get("softmax", "cuda:softmax").sources}
    assert "cuda_src/softmax_smem.cu" in files
    files = {s.path for s in registry.get("vector_add", "cuda:vector_add").sources}
    assert "cuda_src/vector_add_unmasked.cu" in files and not (ROOT / "cuda_src" / "vector_add_vec.cu").exists()
    assert tuple(dispatch.VARIANTS["vector_add"]) == ("unmasked",)
    assert dispatch.plan_vector_add("auto", 1000, "float32").info["path"] == "unmasked"


def test_cluster_candidate_left_head():
    """cuda:softmax_cluster / cupy:softmax_cluster (a row in the registers of a cluster's CTAs,
    softmax_cluster.cu) lost on every long-row case it was planned for (docs/performance.md,
    "The pending switches of CUDA C++, CuPy, Triton and Gluon measured on 2026-12-06 (H100)") and left HEAD (issue 41): no id or candidate, no path, table entry, kernel
    instance or source of it; rows over 32 KB plan block, smem, split or online."""
    ids = {i.id for i in registry.all_impls()} | {i.id for i in registry.candidates()}
    assert not {"cuda:softmax_cluster", "cupy:softmax_cluster"} & ids
    assert "cluster" not in dispatch.SOFTMAX_PATHS and "cluster" not in dispatch.VARIANTS["softmax"]
    assert not [k for k in dispatch.SOFTMAX if k.startswith("cluster")]
    assert "softmax_cluster.cu" not in dispatch.instances() and "softmax_cluster_kernel" not in dispatch.REGS
    assert not (ROOT / "cuda_src" / "softmax_cluster.cu").exists()
    with pytest.raises(ValueError, match="path"):
        dispatch.plan_softmax("cluster", 4096, 50257, "bfloat16")
    names = {n for v in dispatch.instances().values() for n in v}
    for M in (8, 48, 4096):
        for N in (16385, 50257, 128256, 151936, 600_000):
            for dt in ("bfloat16", "float32"):
                p = dispatch.plan_softmax("auto", M, N, dt)
                assert p.info["path"] in ("block", "smem", "split", "online"), (M, N, dt, p.info["path"])
                assert all(q.kernel in names for q in p.plans), (M, N, dt)


def test_gemm_rules():
    def info(M, N, K, **kw):
        p = dispatch.plan_gemm("auto", M, N, K, **kw)
        return p.info, [q.kernel for q in p.plans]

    i, ks = info(4096, 4096, 4096)
    assert i["path"] == "pingpong" and ks == ["gemm_pingpong_kernel<true, 1>"]
    i, ks = info(16, 6144, 4096)  # 48 tiles of 32 x 128 for 132 SMs: the tiled kernel with split-K
    assert i["path"] == "tiled_splitk" and i["splits"] > 1 and ks[1] == "gemm_splitk_reduce_kernel<true>"
    assert i["units"] >= 132
    i, ks = info(16, 50257, 768)  # B not TMA-readable, few rows, 393 N tiles: tiled, predicated B gathers
    assert ks == ["gemm_tiled_kernel<true, 32, true, false>"]
    i, ks = info(4096, 50257, 768)  # B staged to 16-byte rows, then ping-pong (C by plain 16-byte stores)
    assert ks == ["gemm_stage_rows_kernel", "gemm_pingpong_kernel<true, 1>"] and i["stage"] == {"bpad": 50264}
    i, ks = info(127, 65, 129)  # A not TMA-readable, staging models slower: tiled, 32-row tiles fill the SMs
    assert ks == ["gemm_tiled_kernel<true, 32, false, false>"]
    i, ks = info(4096, 4096, 4096, dev=SM80)
    assert ks == ["gemm_tiled_kernel<true, 128, true, true>"]
    i, ks = info(4096, 4096, 4096, ldc=4100)  # C not TMA-storable: ping-pong's plain 16-byte stores
    assert ks == ["gemm_pingpong_kernel<true, 1>"] and i["c_store"] == "plain 16-byte"
    with pytest.raises(dispatch.Decline, match="16-byte"):
        dispatch.plan_gemm("pingpong", 127, 65, 129)
    with pytest.raises(dispatch.Decline, match="sm_90"):
        dispatch.plan_gemm("ws", 4096, 4096, 4096, dev=SM80)
    assert dispatch.plan_gemm("auto", 0, 5, 5).plans == []
    # split-K workspace: fp32 partials of every split, row stride a multiple of 4
    p = dispatch.plan_gemm("splitk", 16, 1000, 4096, ldc=1001, splits=4)
    assert p.workspace["ws"] == 4 * 16 * 1000 * 4 and p.info["splits"] == 4
    assert p.plans[0].args[12] == ("i32", 0)  # pair_ok off: ldc odd, the epilogue stores element by element


def _tiled_split_facts(p: dispatch.Launches):
    """(tiles, splits, k-tiles per split, ws arg, ldw arg) of a tiled plan, read from its arguments."""
    t = p.plans[0]
    assert dispatch.family(t.kernel) == "gemm_tiled_kernel"
    args = dict(zip(("a", "b", "bias", "c", "M", "N", "K", "lda", "ldb", "ldc", "act", "pair_ok", "kps", "ws", "ldw"),
                    (v for _, v in t.args)))
    return t.grid[0] * t.grid[1], t.grid[2], args["kps"], args["ws"], args["ldw"]


@pytest.mark.parametrize("dev", [dispatch.H200, SM80], ids=["h200", "sm80"])
def test_gemm_small_m_tiled_splitk_rule(dev):
    """M <= stream_max_m: the tiled kernel, K split until its CTAs fill tiled_wave_fill of one wave of
    the SMs' resident capacity (never a second wave), every split non-empty and at least tiled_min_kt_per_split
    k-tiles, the splits covering K; the reduction follows with the same workspace, ldw and splits."""
    G = dispatch.GEMM
    assert G["tiled_splitk"] is True
    cases = [(16, 6144, 4096, {}), (16, 4096, 14336, {}), (16, 8192, 28672, {}), (1, 4096, 4096, {}),
             (64, 4096, 4096, {}), (7, 1000, 3000, {}), (16, 520, 8192, {}),
             (16, 10001, 4096, {}),             # B not TMA-readable (N odd): predicated B loads
             (16, 6144, 4100, {"lda": 4100}),  # K % 8 == 4: A not TMA-readable
             (33, 3000, 5000, {"ldb": 3001, "ldc": 3003})]
    for M, N, K, kw in cases:
        p = dispatch.plan_gemm("auto", M, N, K, dev=dev, **kw)
        tiles, s, kps, ws, ldw = _tiled_split_facts(p)
        bm = p.info["tile"][0]
        assert bm == min(b for b in G["tiled_bms"] if b >= M), (M, bm)
        cap = dev.sms * dispatch.tiled_ctas_per_sm(bm, dev)
        kt = -(-K // 32)
        assert tiles < dev.sms and s > 1, (M, N, K, s)
        assert p.info["path"] == "tiled_splitk" and p.info["splits"] == s and "tiled" in p.info["why"]
        fill = int(cap * G["tiled_wave_fill"])
        assert tiles * s <= fill <= cap, (M, N, K, tiles, s, cap)          # within one resident wave
        assert s <= G["max_splits"] and kps >= G["tiled_min_kt_per_split"], (M, N, K, s, kps)
        assert kps * s >= kt and (s - 1) * kps < kt, (M, N, K, s, kps)    # covers K, no empty split
        # the kernel's k ranges [z * kps, min(kt, (z + 1) * kps)): disjoint, non-empty, all of K
        ranges = [(z * kps, min(kt, (z + 1) * kps)) for z in range(s)]
        assert all(b > a for a, b in ranges) and [a for a, _ in ranges[1:]] == [b for _, b in ranges[:-1]]
        assert ranges[0][0] == 0 and ranges[-1][1] == kt
        capped = s == G["max_splits"] or kt // (s + 1) < G["tiled_min_kt_per_split"] or "fewer" in p.info["why"]
        if not capped:  # the rule's split: every SM has CTAs, one more split would overflow the wave
            assert tiles * s >= dev.sms and tiles * (s + 1) > fill, (M, N, K, tiles, s, cap)
        assert ws == "ws" and ldw % 4 == 0 and ldw >= N
        assert len(p.plans) == 2 and p.plans[1].kernel.startswith("gemm_splitk_reduce_kernel<")
        red = dict(zip(("ws", "splits", "M", "N", "ldw", "bias", "c", "ldc", "act"), (v for _, v in p.plans[1].args)))
        assert (red["ws"], red["splits"], red["M"], red["N"], red["ldw"]) == ("ws", s, M, N, ldw)
        assert red["ldc"] == kw.get("ldc", N)
        assert p.workspace == {"ws": s * M * ldw * 4}
        _check_launches(p, dev)
    if dev is dispatch.H200:
        # the charge: 64 x 4096 x 1536 would take 32 tiles x 6 splits (48 k-tiles, at least 8 a
        # split), but 6 planes of 64 x 4096 fp32 partials + their sum cost more than a quarter of
        # the unsplit stream: fewer
        p = dispatch.plan_gemm("auto", 64, 4096, 1536)
        s = p.info["splits"]
        charge = 2 * s * 64 * 4096 * 4 / G["hbm_bytes_per_s"] + G["launch_s"]
        t1 = 48 * 32 * 128 * 2 / G["tiled_cta_bytes_per_s"]
        assert 1 < s < 6 and "fewer than 6" in p.info["why"] and charge <= G["tiled_splitk_max_charge"] * t1
    assert dispatch.plan_gemm("auto", 16, 10001, 4096, dev=dev).info["vec_b"] is False
    assert dispatch.plan_gemm("auto", 16, 6144, 4100, lda=4100, dev=dev).info["vec_a"] is False


def test_gemm_small_m_no_split_cases(monkeypatch):
    """Small M with N tiles that already fill the SMs, or too few k-tiles: one unsplit tiled launch
    (no workspace, ws = nullptr); unaligned B at N = 50257 plans too; the ws split-K path returns
    with the table entry off; M > stream_max_m is unaffected."""
    for M, N, K, kw in ((16, 28672, 4096, {}), (16, 50257, 768, {}), (1, 1024, 512, {}), (1, 17, 33, {}),
                        (64, 50257, 4096, {"ldb": 50260})):
        p = dispatch.plan_gemm("auto", M, N, K, **kw)
        tiles, s, kps, ws, ldw = _tiled_split_facts(p)
        assert s == 1 and ws == 0 and len(p.plans) == 1 and not p.workspace, (M, N, K)
        assert kps * 1 >= -(-K // 32) and p.info["path"] == "tiled"
        _check_launches(p, dispatch.H200)
    assert dispatch.plan_gemm("auto", 16, 50257, 768).plans[0].kernel == "gemm_tiled_kernel<true, 32, true, false>"
    # the explicit tiled row keeps one launch whatever the shape; a pinned split works there too
    assert len(dispatch.plan_gemm("tiled", 16, 6144, 4096).plans) == 1
    pinned = dispatch.plan_gemm("tiled", 16, 6144, 4096, splits=4)
    assert _tiled_split_facts(pinned)[1:4] == (4, 32, "ws") and len(pinned.plans) == 2
    big = {shape: dispatch.plan_gemm("auto", *shape) for shape in ((65, 6144, 4096), (256, 6144, 4096))}
    monkeypatch.setitem(dispatch.GEMM, "tiled_splitk", False)
    p = dispatch.plan_gemm("auto", 16, 6144, 4096)
    assert p.info["path"] == "splitk" and [q.kernel for q in p.plans] == ["gemm_ws_kernel<true, 128>",
                                                                          "gemm_splitk_reduce_kernel<true>"]
    assert dispatch.plan_gemm("auto", 16, 28672, 4096).plans[0].grid == (224, 1, 1)
    for shape, q in big.items():
        r = dispatch.plan_gemm("auto", *shape)
        assert [x.kernel for x in r.plans] == [x.kernel for x in q.plans] and r.info == q.info, shape


def test_tiled_ctas_per_sm():
    """Resident CTAs of the tiled kernel: shared memory, threads and the registers of the table."""
    h = dispatch.H200
    assert [dispatch.tiled_ctas_per_sm(bm, h) for bm in (32, 64, 128)] == [4, 3, 2]
    for bm in (32, 64, 128):
        n = dispatch.tiled_ctas_per_sm(bm, h)
        assert n * (dispatch.tiled_smem(bm) + 1024) <= h.smem_per_sm
        assert n * 256 * dispatch.GEMM["tiled_regs"][bm] <= dispatch.REGS_PER_SM
        assert n <= dispatch.GEMM["tiled_max_ctas_per_sm"]


def test_pack_alignment_and_types():
    p = dispatch.plan_softmax("split", 8192, 262144, "float32")
    blob, offs = dispatch.pack(p.plans[0], {"x": 16, "out": 32, "slots": 48})
    assert offs == [0, 8, 16, 24, 32, 40, 48, 56, 64] and len(blob) == 68
    g = dispatch.plan_gemm("ws", 4096, 4096, 4096)
    blob, offs = dispatch.pack(g.plans[0], {"a": 16, "b": 32, "bias": 48, "c": 64}, lambda *a: b"\1" * 128)
    assert offs[:3] == [0, 128, 256] and blob[:128] == b"\1" * 128
    bad = dispatch.Plan("softmax_warp_kernel<float, 4, 8>", (1, 1, 1), 128, (("ptr", "x"),))
    with pytest.raises(ValueError, match="takes 6 arguments"):
        dispatch.pack(bad, {"x": 0})


def test_signatures_match_kernel_declarations():
    """SIGNATURES (what the launchers pack) against every __global__ declaration in cuda_src."""
    ctype = {"i64": "i64", "long long": "i64", "int": "i32", "TmaDesc": "tma"}
    found = {}
    for f in (ROOT / "cuda_src").glob("*.cu"):
        text = f.read_text()
        for g in re.finditer(r"__global__", text):
            m = re.compile(r"\b(\w+_kernel)\s*\(([^)]*)\)", re.S).search(text, g.end())
            params = [p.strip() for p in m.group(2).split(",") if p.strip()]
            sig = []
            for p in params:
                if "*" in p:
                    sig.append("ptr")
                else:
                    typ = re.sub(r"\b(const|__grid_constant__)\b", "", p).rsplit(None, 1)[0].strip()
                    sig.append(ctype[typ])
            found[m.group(1)] = tuple(sig)
    assert set(found) == set(dispatch.SIGNATURES)
    for k, sig in found.items():
        assert dispatch.SIGNATURES[k] == sig, k


def test_one_planner_no_env_no_cpp_planner():
    """No environment variable changes behaviour; no C++ planner or route table parsed from text."""
    allowed = {"CUDA_HOME", "CUPY_CACHE_IN_MEMORY"}  # nvcc (compile facts), an info string
    planner = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "cuda_src").glob("dispatch*.py"))]
    for f in ("backends/cuda_layer.py", "backends/cuda_gemm.py", "backends/cupy_layer.py", *planner,
              "scripts/tune_cuda.py"):
        text = (ROOT / f).read_text()
        names = set(re.findall(r"environ(?:\.get)?[\[(]\s*[\"']([A-Z_]+)", text)) | set(re.findall(r"getenv\([\"']([A-Z_]+)", text))
        assert names <= allowed, (f, names - allowed)
    for f in (ROOT / "cuda_src").glob("*.c*"):
        text = f.read_text()
        assert "getenv" not in text and "plan_path" not in text and "ROUTES" not in text, f.name


# -- build products ------------------------------------------------------------------------------
@needs_build
def test_module_table_is_the_planners_instance_list():
    kl = importlib.import_module("kl_cuda")
    assert set(kl.kernels()) == {n for v in dispatch.instances().values() for n in v}
    build = importlib.import_module("kl_cuda_build")
    for flag in ("arch=compute_90a,code=sm_90a", "code=[sm_80,compute_80]"):
        assert flag in build.ARCH_FLAGS
    with pytest.raises(ValueError, match="no compiled instance"):
        kl.kernel("softmax_warp_kernel<float, 4, 3>")


@needs_build
def test_launcher_validates_before_any_cuda_call():
    kl = importlib.import_module("kl_cuda")
    fn = kl.kernel("softmax_warp_kernel<float, 4, 8>")
    good = (fn, (4, 1, 1), 128, 0, 1, False, bytes(48), [0, 8, 16, 24, 32, 40], [])
    with pytest.raises(ValueError, match="fn"):
        kl.Launch(0, [(12345,) + good[1:]])
    with pytest.raises(ValueError, match="block"):
        kl.Launch(0, [good[:2] + (2048,) + good[3:]])
    with pytest.raises(ValueError, match="offsets"):
        kl.Launch(0, [good[:7] + ([0, 8, 100],) + good[8:]])
    with pytest.raises(ValueError, match="9-tuple"):
        kl.Launch(0, [good[:5]])
    assert len(kl.Launch(0, [good[:1] + ((0, 1, 1),) + good[2:]])) == 0  # an empty grid launches nothing
    launch = kl.Launch(0, [good])
    assert len(launch) == 1
    if not HAS_GPU:  # valid arguments reach CUDA, whose error comes back as RuntimeError
        with pytest.raises(RuntimeError, match="CUDA error"):
            launch(0)


@needs_build
def test_ptxas_every_instance_sm90a():
    facts = cuda_layer.ptxas_facts()
    for src, names in dispatch.instances().items():
        for k in names:
            assert k in facts, k
            f = facts[k]
            assert f["registers"] and f["registers"] > 0, k
            fam = dispatch.family(k)
            if fam in dispatch.REGS:
                assert f["registers"] <= dispatch.REGS[fam], (k, f)  # the planner's occupancy assumption
            if fam.startswith("softmax") or fam.startswith("vector_add"):
                assert f["spills"] == 0, (k, f)
            if fam == "gemm_tiled_kernel":  # the planner's resident CTAs per SM assume these bounds
                bm = int(k.split(",")[1])
                assert f["registers"] <= dispatch.GEMM["tiled_regs"][bm] and f["spills"] == 0, (k, f)
    assert facts["softmax_smem_kernel<float, 16>"]["registers"] <= 40  # 3 CTAs x 512 threads per SM


@needs_build
@pytest.mark.parametrize("impl_id", CUDA_IDS)
def test_compile_only_reports_ptxas_facts(impl_id):
    impl, prob = _impl(impl_id)
    for case in prob.cases("models")[:4] + prob.cases("verify")[:2]:
        if impl.supports(case):
            with pytest.raises(Unsupported):
                impl.compile_only_fn(case)
            continue
        f = impl.compile_only_fn(case)
        assert f["registers"] > 0 and f["smem"] >= 0
        assert f["arch"] == "sm_90a" and f["kernel"] in f["kernels"]


def _cmake_configure(tmp_path, *extra, env=None):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not on PATH")
    # No pybind11 needed: the module (and pybind11's CMake package) is only looked for when CUDA is on.
    r = subprocess.run([cmake, "-S", str(ROOT), "-B", str(tmp_path / "b"), *extra], capture_output=True, text=True,
                       timeout=300, env=env)
    if r.returncode != 0 and "pybind11" in r.stderr:
        pytest.skip("CMake found a CUDA compiler after all, and configuring the module needs pybind11's CMake "
                    "package (a build requirement, not installed in this environment)")
    assert r.returncode == 0, r.stderr
    ns: dict = {}
    exec((tmp_path / "b" / "kl_cuda_build.py").read_text(), ns)
    return ns


def test_no_cuda_build_still_configures(tmp_path):
    """-DKL_NO_CUDA=ON (and equally a machine without nvcc) installs only the marker with the reason."""
    ns = _cmake_configure(tmp_path, "-DKL_NO_CUDA=ON")
    assert ns["BUILT"] is False and ns["REASON"] == "not built: disabled by KL_NO_CUDA"


def test_no_compiler_reason(tmp_path):
    """With no nvcc on PATH and no CUDACXX, CMake's check_language(CUDA) finds none: the build says so."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDACXX", "CUDA_HOME", "CUDA_PATH", "CUDAToolkit_ROOT")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not os.path.exists(os.path.join(p, "nvcc")))
    ns = _cmake_configure(tmp_path, "-DCMAKE_CUDA_COMPILER=", env=env)
    if ns["BUILT"]:
        pytest.skip(f"CMake still found a CUDA compiler outside PATH ({ns['NVCC']})")
    assert ns["REASON"] == "not built: no CUDA compiler"


# -- availability, reasons, validation --------------------------------------------------------------
def test_cupy_available_gives_a_reason_without_gpu():
    why = cupy_layer.available()
    if HAS_GPU:
        return
    assert isinstance(why, str) and any(w in why for w in ("cupy", "NVRTC", "GPU"))


def test_every_row_registered_with_role_and_sources():
    for i in CUDA_IDS + CUPY_IDS:
        impl, _ = _impl(i)
        assert impl.devices == ("cuda",)
        assert any(str(s.path).endswith(".cu") for s in impl.sources)
        want = "default" if i.split(":")[1] in ("vector_add", "softmax") else \
            "simple" if i.endswith("_simple") else "variant"
        assert impl.role == want, (i, impl.role)


def test_variant_reasons_and_default_declines_nothing():
    sm = problems.get("softmax")
    warp, block = registry.get("softmax", "cuda:softmax_warp"), registry.get("softmax", "cuda:softmax_block")
    assert "1024" in warp.supports(sm.case(M=2, N=4096))
    assert "32768" in block.supports(sm.case(M=2, N=65536))
    assert "8192" in registry.get("softmax", "cuda:softmax_rows").supports(sm.case(M=2, N=8193))
    split = registry.get("softmax", "cuda:softmax_split")
    assert "32768" in split.supports(sm.case(M=2, N=4096))
    assert split.supports(sm.case(M=2, N=262144)) is None
    cl = registry.get("softmax", "cuda:softmax_smem")
    assert cl.supports(sm.case(M=2, N=1_800_000, dtype="float16")) is None
    assert "shared memory" in cl.supports(sm.case(M=2, N=1_000_000))
    assert registry.get("softmax", "cupy:softmax_smem").supports(sm.case(M=2, N=1_000_000)) == \
        cl.supports(sm.case(M=2, N=1_000_000))
    for impl_id in ("cuda:softmax", "cupy:softmax", "cuda:softmax_simple", "cuda:vector_add"):
        impl, prob = _impl(impl_id)
        for suite in ("verify", "models"):
            for case in prob.cases(suite):
                assert impl.supports(case) is None, (impl_id, case)


def test_adapter_validation_names_the_argument():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="x"):
        cuda_layer.softmax([1, 2, 3])
    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        cuda_layer.softmax(x)
    with pytest.raises(ValueError, match="path"):
        cuda_layer.softmax(x, path="fastest")
    with pytest.raises(TypeError, match="x: dtype"):
        cuda_layer.check_vector_add(torch.zeros(3, dtype=torch.int32), torch.zeros(3), None)
    with pytest.raises(ValueError, match="x: must be a CUDA tensor"):
        cuda_layer.vector_add(torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="path"):
        dispatch.plan_softmax("fastest", 4, 8, "float32")
    with pytest.raises(ValueError, match="sx, sy"):
        dispatch.plan_softmax("auto", 4, 8, "float32", sx=4)
    with pytest.raises(ValueError, match="cluster"):
        dispatch.plan_softmax("online", 4, 100_000, "float32", cluster=16)
    with pytest.raises(ValueError, match="threads: the split path"):
        dispatch.plan_softmax("split", 4, 100_000, "float32", threads=128)


@pytest.mark.parametrize("impl_id", CUDA_IDS + CUPY_IDS)
def test_grid_descriptions(impl_id):
    from harness.grid import describe, render

    impl, prob = _impl(impl_id)
    for case in prob.cases("verify")[:6]:
        if impl.supports(case):
            continue
        d = describe(impl, case)
        assert d["grid"][0] >= 1 and d["programs"]
        assert d["total"]["programs"] == d["grid"][0]
        assert "program(s)" in render(d)


# -- NVRTC: the same sources compile at run time ---------------------------------------------------
def _nvrtc_or_skip():
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except (ImportError, OSError, RuntimeError) as e:   # the library is missing or does not load
        pytest.skip(f"no libnvrtc here ({type(e).__name__}); pip install nvidia-cuda-nvrtc")
    if not any(os.path.isfile(os.path.join(d, "cuda_fp16.h")) for d in cupy_layer.include_dirs()):
        pytest.skip("no CUDA headers")


@pytest.mark.slow
@pytest.mark.parametrize("impl_id,case", [("cupy:softmax_smem", dict(M=4096, N=50257, dtype="bfloat16")),
                                          ("cupy:softmax_rows", dict(M=4096, N=1024)),
                                          ("cupy:softmax_split", dict(M=8192, N=262144)),
                                          ("cupy:softmax_simple", dict(M=3, N=5)),
                                          ("cupy:vector_add", dict(N=98432))])
def test_cupy_kernels_compile_under_nvrtc(impl_id, case):
    """The same source through NVRTC (no GPU needed): the planned instance compiles, 0 spills."""
    _nvrtc_or_skip()
    impl, prob = _impl(impl_id)
    f = impl.compile_only_fn(prob.case(**case))
    assert f["registers"] > 0 and f["spills"] == 0 and f["facts_from"].startswith("NVRTC")


def _compile_in_child(cache_home, kernel, barrier, results):
    os.environ["XDG_CACHE_HOME"] = cache_home
    mod = importlib.import_module("backends.cupy_layer")
    barrier.wait(timeout=300)
    e = mod.compile_instance(kernel, "90a")
    results.put((e["cubin"], e["lowered"], e["cached"]))


def test_nvrtc_cache_one_entry_per_instance_safe_under_concurrent_compiles(tmp_path, monkeypatch):
    """Two processes compile the same instance at the same moment: both get the whole cubin, the
    cache holds one complete entry (no temporary file left), and a third call reads it back."""
    import multiprocessing as mp

    _nvrtc_or_skip()
    kernel = "vector_add_simple_kernel<float>"
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_compile_in_child, args=(str(tmp_path), kernel, barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    got = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert got[0][:2] == got[1][:2] and got[0][0][:4] == b"\x7fELF"
    folder = tmp_path / "kernel-layers" / "nvrtc"
    files = sorted(p.name for p in folder.iterdir())
    assert len(files) == 1 and files[0].startswith("vector_add-") and files[0].endswith(".json"), files
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    again = cupy_layer.compile_instance(kernel, "90a")
    assert again["cached"] and (again["cubin"], again["lowered"]) == got[0][:2]
    # another instance of the source is another entry (sizes are arguments, never part of a key)
    cupy_layer.compile_instance("vector_add_simple_kernel<__half>", "90a")
    assert len(list(folder.iterdir())) == 2


# -- GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl_id", CUDA_IDS + CUPY_IDS)
def test_verify_suite_on_gpu(impl_id):
    from harness.verify import verify_case

    impl, prob = _impl(impl_id)
    if impl.available():
        pytest.skip(impl.available())
    failures = []
    for case in prob.cases("verify"):
        if impl.supports(case):
            continue
        c = verify_case(impl, prob, case, "cuda", seeds=GPU_SEEDS)
        if not c.ok:
            failures.append(f"{case.id}: {c.reason}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl_id", ["cuda:softmax", "cuda:softmax_split", "cupy:softmax", "cuda:vector_add"])
def test_graph_capture_records_the_launch(impl_id):
    """A launch captured in a torch CUDA graph and replayed into a poisoned output writes it."""
    from harness.verify import graph_replay

    impl, prob = _impl(impl_id)
    if impl.available():
        pytest.skip(impl.available())
    case = prob.case(M=64, N=100_000) if "softmax" in impl_id else prob.case(N=98432)
    c = graph_replay(impl, prob, case)
    assert c.ok, c.reason


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_split_path_on_gpu():
    """split: ragged last chunk, -inf chunks, all--inf rows, several rounds per block, bounded spin."""
    def check(x, **kw):
        y = cuda_layer.softmax(x, path="split", **kw)
        ref = torch.softmax(x.double(), -1)
        tol = dict(rtol=1e-4, atol=1e-9) if x.dtype == torch.float32 else dict(rtol=2e-2, atol=1e-5)
        assert torch.allclose(y.double(), ref, equal_nan=True, **tol), (x.shape, x.dtype, kw)
        return y

    for n in (32769, 100_000, 262147):
        check(torch.randn(7, n, device="cuda"))
    check(torch.randn(600, 131072, device="cuda"))  # many rounds
    x = torch.randn(6, 100_000, device="cuda") * 30
    x[0, :16384] = float("-inf")
    x[2] = float("-inf")
    y = check(x)
    assert torch.isnan(y[2]).all() and not torch.isnan(y[[0, 1, 3, 4, 5]]).any()
    y = cuda_layer.softmax(torch.randn(8, 100_000, device="cuda"), path="split", max_spin=0)
    assert torch.isnan(y).all()


# -- another GPU: the planner on the devices a newcomer may have -----------------------------------
OTHER_GPUS = {   # SMs, compute capability, opt-in shared memory a CTA and shared memory an SM (bytes)
    "a100": dispatch.Device(sms=108, cc=(8, 0), smem_optin=166912, smem_per_sm=167936, sm90a=False, clusters=False),
    "rtx4090": dispatch.Device(sms=128, cc=(8, 9), smem_optin=101376, smem_per_sm=102400, sm90a=False,
                               clusters=False),
    "h100": dispatch.Device(sms=132, cc=(9, 0)),
    "b200": dispatch.Device(sms=148, cc=(10, 0), smem_optin=232448, smem_per_sm=233472, sm90a=False, clusters=False),
    "rtx5090": dispatch.Device(sms=170, cc=(12, 0), smem_optin=101376, smem_per_sm=102400, sm90a=False,
                               clusters=False),
}


@pytest.mark.parametrize("nvrtc", [False, True], ids=["kl_cuda", "nvrtc"])
@pytest.mark.parametrize("gpu", sorted(OTHER_GPUS))
def test_defaults_plan_a_runnable_path_on_other_gpus(gpu, nvrtc):
    """Every default plans every verify and models case on A100, RTX 4090, H100, B200 and RTX 5090
    with what runs there: no thread-block cluster where the running code has none (the module's
    compute_80 PTX off Hopper; NVRTC compiles for the device, so clusters from sm_90 on), no
    wgmma/TMA kernel where the sm_90a code does not run, shared memory within the device's."""
    from dataclasses import replace

    from harness import problems
    dev = OTHER_GPUS[gpu]
    if nvrtc:
        dev = replace(dev, clusters=dev.cc[0] >= 9, sm90a=dev.cc == (9, 0))
    plan_of = {"vector_add": cuda_layer.case_vector_add, "softmax": cuda_layer.case_softmax,
               "gemm_epilogue": cuda_gemm.case_gemm}
    for suite in ("verify", "models"):
        for name, plan in plan_of.items():     # the problems CUDA C++ implements
            for case in problems.get(name).cases(suite):
                L = plan("auto", case, dev)
                for q in L.plans:
                    assert q.cluster == 1 or dev.clusters, (gpu, case.id, q.kernel)
                    assert q.smem <= dev.smem_optin, (gpu, case.id, q.kernel, q.smem)
                    assert dev.sm90a or not q.kernel.startswith(("gemm_ws_kernel", "gemm_pingpong_kernel")), \
                        (gpu, case.id, q.kernel)
                    assert dispatch.source_of(q.kernel)   # an instance the module (and NVRTC) has
    # the Hopper-only GEMM variants say why they decline, in one line
    case = problems.get("gemm_epilogue").case(M=4096, N=4096, K=4096, dtype="bfloat16")
    if not dev.sm90a:
        with pytest.raises(dispatch.Decline, match="sm_90|Hopper"):
            cuda_gemm.case_gemm("ws", case, dev)


def test_smem_path_declines_clusters_without_sm90_code():
    """The module's kernels off Hopper run its compute_80 PTX, which has no cluster code: the
    planner keeps one CTA a row there and a forced cluster size is refused, naming why."""
    b200 = OTHER_GPUS["b200"]
    p = dispatch.plan_softmax("auto", 4, 262147, "float32", dev=b200)
    assert all(q.cluster == 1 for q in p.plans)
    with pytest.raises(ValueError, match="clusters need code compiled for sm_90"):
        dispatch.plan_softmax("smem", 4, 262147, "float32", dev=b200, cluster=8)
    from dataclasses import replace
    assert dispatch.plan_softmax("smem", 4, 262147, "float32", dev=replace(b200, clusters=True),
                                 cluster=8).plans[0].cluster == 8


@needs_build
def test_module_compiled_every_instance_for_sm80():
    """The module's build compiles every kernel instance for sm_80 as well as sm_90a (the build log
    has both), so the defaults' plans on an A100 / RTX 4090 name machine code the module has."""
    log = cuda_layer._log_path()
    if log is None:
        pytest.skip("no build log (kl_cuda_ptxas.log) next to the module")
    text = log.read_text()
    sm80, sm90a = cuda_layer.parse_log(text, "sm_80"), cuda_layer.parse_log(text, "sm_90a")
    names = {n for ns in dispatch.instances().values() for n in ns}
    hopper_only = {n for n in names if n.startswith(("gemm_ws_kernel", "gemm_pingpong_kernel"))}
    assert names <= set(sm90a), sorted(names - set(sm90a))[:5]
    assert names - hopper_only <= set(sm80), sorted(names - hopper_only - set(sm80))[:5]
    from harness import problems
    a100 = OTHER_GPUS["a100"]
    plan_of = {"vector_add": cuda_layer.case_vector_add, "softmax": cuda_layer.case_softmax,
               "gemm_epilogue": cuda_gemm.case_gemm}
    for name, plan in plan_of.items():         # the problems CUDA C++ implements
        for case in problems.get(name).cases("models"):
            for q in plan("auto", case, a100).plans:
                assert q.kernel in sm80, (case.id, q.kernel)
