"""CUDA C++ gemm_epilogue: registration, supports() reasons, the planner's GEMM plans, sm_90a compile
facts (CPU), and the verify suite, graph capture and argument validation on a GPU (``gpu``)."""
from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest
import torch

from cuda_src import dispatch
from conftest import GPU_SEEDS  # noqa: E402
from harness import problems, registry

P = problems.get("gemm_epilogue")
ROOT = Path(__file__).resolve().parent.parent
IDS = ("cuda:gemm_epilogue", "cuda:gemm_epilogue_simple", "cuda:gemm_epilogue_tiled", "cuda:gemm_epilogue_ws",
       "cuda:gemm_epilogue_pingpong", "cuda:gemm_epilogue_splitk")
CUPY_IDS = tuple(i.replace("cuda:", "cupy:") for i in IDS)
HOPPER = ("cuda:gemm_epilogue_ws", "cuda:gemm_epilogue_pingpong", "cuda:gemm_epilogue_splitk")
cuda_layer = importlib.import_module("backends.cuda_layer")


def _impl(i):
    return registry.get("gemm_epilogue", i)


def _built() -> bool:
    try:
        return bool(importlib.import_module("kl_cuda_build").BUILT)
    except ImportError:
        return False


def test_registered_with_roles_and_sources():
    ids = {i.id for i in registry.select(problem="gemm_epilogue", layer="cuda")}
    assert set(IDS) <= ids
    ids = {i.id for i in registry.select(problem="gemm_epilogue", layer="cupy")}
    assert set(CUPY_IDS) <= ids
    for i in IDS + CUPY_IDS:
        impl = _impl(i)
        assert impl.devices == ("cuda",)
        assert impl.sources and impl.sources[0].path.startswith("cuda_src/gemm_epilogue")
        want = "default" if i.endswith(":gemm_epilogue") else "simple" if i.endswith("_simple") else "variant"
        assert impl.role == want


def test_one_id_per_algorithm_word_and_its_file():
    """The split-K row's reduction lives in gemm_epilogue_splitk.cu (its id's file), beside the ws
    kernel whose split-K mode writes the partials; the 2 x 1 cluster form of ping-pong is the
    planner's pingpong_c2 path (tuning, GPU script), no id of its own."""
    srcs = {s.path: s.kernels for s in _impl("cuda:gemm_epilogue_splitk").sources}
    assert srcs["cuda_src/gemm_epilogue_splitk.cu"] == ("gemm_splitk_reduce_kernel",)
    assert srcs["cuda_src/gemm_epilogue_ws.cu"] == ("gemm_ws_kernel",)
    inst = dispatch.instances()
    assert {"gemm_splitk_reduce_kernel<true>", "gemm_splitk_reduce_kernel<false>"} == set(inst["gemm_epilogue_splitk.cu"])
    assert not any(k.startswith("gemm_splitk_reduce") for k in inst["gemm_epilogue_ws.cu"])
    ids = {i.id for i in registry.select(problem="gemm_epilogue")}
    assert not {"cuda:gemm_epilogue_pingpong_c2", "cupy:gemm_epilogue_pingpong_c2"} & ids
    p = dispatch.plan_gemm("pingpong_c2", 4096, 4096, 4096)
    assert p.plans[0].cluster == 2 and p.plans[0].cluster_launch
    # the default's tiled split-K (M <= 64) counts the reduction's file too
    auto = {s.path for s in _impl("cuda:gemm_epilogue").sources}
    assert "cuda_src/gemm_epilogue_splitk.cu" in auto
    assert dispatch.plan_gemm("auto", 16, 4096, 14336).plans[-1].kernel.startswith("gemm_splitk_reduce_kernel")


def test_tiled_tile_rows_by_the_busiest_sm():
    """Above the B stream (M > stream_max_m) the tiled fallback (A or B not TMA-readable where
    staging models slower, or no Hopper code) takes the tile rows with the least load work on the
    busiest SM: ceil(tiles / SMs) x (bm + 128) elements a k-step, ties to the larger bm. Written
    from its inputs on shapes of several classes (odd and small, odd and mid-size, large) on an
    sm_80 part (no TMA: always the tiled kernel); on the H200 the case 97 x 211 x 389 keeps the
    tiled kernel on 32 rows (why: docs/performance.md, "The pending switches of CUDA C++, CuPy, Triton and Gluon measured on 2026-12-06 (H100)")."""
    G = dispatch.GEMM
    a100 = dispatch.Device(sms=108, cc=(8, 0), smem_optin=166912, smem_per_sm=167936, sm90a=False, clusters=False)
    shapes = [(411, 733, 957), (333, 777, 999), (97, 211, 389), (1000, 1000, 999), (2000, 2000, 1001),
              (4096, 4096, 4095), (129, 65, 129), (1025, 769, 513), (700, 3001, 777), (65, 20_000, 515),
              (1000, 733, 957)]
    seen = set()
    for dev in (a100,):
        for M, N, K in shapes:
            for dt in ("float16", "bfloat16"):
                p = dispatch.plan_gemm("auto", M, N, K, dt, dev=dev)
                assert p.info["path"] == "tiled", (M, N, K, p.info)
                gx = -(-N // 128)

                def work(bm):
                    return -(-(-(-M // bm) * gx) // dev.sms) * (bm + 128)
                best = min(work(b) for b in G["tiled_bms"])
                want = max(b for b in G["tiled_bms"] if work(b) == best)
                bm = p.info["tile"][0]
                assert bm == want and p.plans[0].grid[:2] == (gx, -(-M // bm)), (M, N, K, dev.sms, bm)
                seen.add(bm)
    assert seen == set(G["tiled_bms"])      # every tile height is reached by some class
    # few tiles of 128 rows -> more, shorter tiles
    assert dispatch.plan_gemm("auto", 411, 733, 957, "float16", dev=a100).plans[0].grid == (6, 13, 1)
    p = dispatch.plan_gemm("auto", 97, 211, 389, "bfloat16")
    assert p.info["path"] == "tiled" and p.info["tile"][0] == 32 and p.plans[0].grid == (2, 4, 1)
    assert dispatch.plan_gemm("auto", 4096, 4096, 4095, "float16").info["tile"][0] == 128
    # the B stream (M <= 64) keeps its own rule; the tiled variant pins nothing new
    assert dispatch.plan_gemm("auto", 33, 1001, 3000).info["tile"][0] == 64
    assert dispatch.plan_gemm("tiled", 411, 733, 957).info["tile"][0] == 128
    assert dispatch.plan_gemm("tiled", 411, 733, 957, bm=64).plans[0].grid == (6, 7, 1)
    with pytest.raises(ValueError, match="bm"):
        dispatch.plan_gemm("tiled", 411, 733, 957, bm=48)
    with pytest.raises(ValueError, match="bm"):
        dispatch.plan_gemm("ws", 512, 512, 512, bm=64)


def test_available_follows_the_build_not_the_gpu():
    """Availability says whether the module is built; a missing GPU is not a reason (the rows then
    run compile_only). A broken adapter (reason for a built module, or None without one) fails."""
    for i in IDS:
        why = _impl(i).available()
        if _built():
            assert why is None, (i, why)
        else:
            assert isinstance(why, str) and "not built" in why, (i, why)
    for i in CUPY_IDS:
        why = _impl(i).available()
        if not torch.cuda.is_available():
            assert isinstance(why, str) and any(w in why for w in ("cupy", "NVRTC", "GPU")), why


@pytest.mark.parametrize("hopper", HOPPER)
def test_supports_reasons(hopper):
    w = _impl(hopper)
    assert w.supports(P.case(M=4096, N=4096, K=4096)) is None
    assert w.supports(P.case(M=129, N=264, K=72)) is None  # ragged M and N tiles, K % 64 != 0
    for M, N, K in ((1, 17, 33), (127, 65, 129), (1025, 769, 513)):
        why = w.supports(P.case(M=M, N=N, K=K))
        assert why and "16-byte" in why
    for i in ("cuda:gemm_epilogue", "cuda:gemm_epilogue_tiled", "cuda:gemm_epilogue_simple"):
        for suite in ("verify", "models"):
            for c in P.cases(suite):
                assert _impl(i).supports(c) is None, (i, c)


A100 = dispatch.Device(sms=108, cc=(8, 0), smem_optin=166912, smem_per_sm=167936, sm90a=False, clusters=False)


def test_default_gemm_on_cases_with_known_answers(monkeypatch):
    """The path of cases worked out by hand from TMA legality (16-byte row strides of A, B, C), the
    Hopper code, M against the table's stream_max_m (64), and the tile counts against the SMs:
    (M, N, K, ldc) -> (path, operands staged to 16-byte rows)."""
    known = [
        ((4096, 6144, 4096, None), "pingpong", False),   # A, B, C TMA-legal, 1536 tiles: no split
        ((16, 6144, 4096, None), "tiled_splitk", False),  # a stream of B (M <= 64): tiled, K split
        ((64, 28672, 4096, None), "tiled", False),       # ... 224 tiles of 64 x 128 >= 132 SMs: no split
        ((65, 28672, 4096, None), "pingpong", False),    # M > 64: the Hopper path
        ((256, 4096, 14_336, None), "splitk", False),    # 32 tiles of a long K: split-K on ws
        ((4096, 50_257, 768, None), "pingpong", True),   # B rows of 50257 bf16: staged to 16-byte rows
        ((127, 50_257, 768, None), "pingpong", True),    # ... at 127 rows too (above the B stream)
        ((4096, 733, 957, None), "pingpong", True),      # K = 957, N = 733: A and B staged
        ((97, 211, 389, None), "tiled", False),          # ... a small one: staging models slower
        ((4096, 6144, 4096, 6148), "pingpong", False),   # C's rows not 16-byte aligned: plain stores
    ]
    for (M, N, K, ldc), path, staged in known:
        p = dispatch.plan_gemm("auto", M, N, K, ldc=ldc)
        assert p.info["path"] == path, (M, N, K, ldc, p.info.get("why"))
        assert (p.plans[0].kernel == "gemm_stage_rows_kernel") == staged, (M, N, K, ldc)
    # sm_80 has no Hopper code: the tiled kernel, K split for a stream of B
    assert dispatch.plan_gemm("auto", 4096, 6144, 4096, dev=A100).info["path"] == "tiled"
    assert dispatch.plan_gemm("auto", 16, 6144, 4096, dev=A100).info["path"] == "tiled_splitk"
    # the table decides: without tiled split-K, a stream of B splits K on the ws kernel
    monkeypatch.setitem(dispatch.GEMM, "tiled_splitk", False)
    assert dispatch.plan_gemm("auto", 16, 6144, 4096).info["path"] == "splitk"


def test_default_gemm_invariants(monkeypatch):
    """On shapes of every class (M from 1 to 8192; N and K aligned and odd; few and many output
    tiles; an unaligned C; H200 and an sm_80 part; tiled split-K on and off): every case gets a
    plan whose launches are well-formed; the Hopper paths (splitk, pingpong, ws) only on sm_90a;
    A or B is staged exactly when a Hopper path meets rows TMA cannot read (K or N not a multiple
    of 8), and then never on a B stream with tiled split-K; a split plan ends with its reduction;
    every path is taken somewhere; the default's one-pass kernel is ping-pong (ws only split)."""
    shapes = [(M, N, K) for M in (1, 16, 64, 65, 127, 256, 1000, 4096, 8192)
              for N, K in ((6144, 4096), (50257, 768), (733, 957), (4096, 128), (1001, 136), (28672, 4096),
                           (2048, 64), (264, 72), (4096, 14_336))]
    seen = set()
    for on in (True, False):
        monkeypatch.setitem(dispatch.GEMM, "tiled_splitk", on)
        for dev in (dispatch.H200, A100):
            for M, N, K in shapes:
                for ldc in (None, N + 4 if N % 8 == 0 else None):
                    p = dispatch.plan_gemm("auto", M, N, K, dev=dev, ldc=ldc)
                    path, kernels = p.info["path"], [q.kernel for q in p.plans]
                    seen.add(path)
                    _check_gemm_launches(p, dev)
                    hopper = path in ("splitk", "pingpong", "ws")
                    assert not hopper or dev.sm90a, (M, N, K, dev.sms, path)
                    staged = kernels[0] == "gemm_stage_rows_kernel"
                    assert staged == (hopper and (N % 8 != 0 or K % 8 != 0)), (M, N, K, path)
                    assert not staged or not (on and M <= dispatch.GEMM["stream_max_m"]), (M, N, K)
                    assert path != "ws", (M, N, K, ldc)
                    assert ("splitk" in path) == kernels[-1].startswith("gemm_splitk_reduce_kernel"), kernels
                    assert path != "tiled_splitk" or on, (M, N, K)
    assert seen == {"tiled", "tiled_splitk", "splitk", "pingpong"}, seen
    assert set(dispatch.VARIANTS["gemm_epilogue"]) == {"tiled", "splitk", "pingpong", "ws"}


def _check_gemm_launches(launches, dev):
    names = {n for v in dispatch.instances().values() for n in v}
    for p in launches.plans:
        assert p.kernel in names, p.kernel
        gx, gy, gz = p.grid
        assert 1 <= gx < 2 ** 31 and 1 <= gy <= 65535 and 1 <= gz <= 65535, p
        assert 1 <= p.block <= 1024 and p.block % 32 == 0 and 0 <= p.smem <= dev.smem_optin, p


def cuda_layer_case(case):
    from backends.cuda_gemm import case_gemm

    return case_gemm("auto", case)


def test_kernel_sources_have_the_instructions():
    """The Hopper kernels issue wgmma/TMA/setmaxnreg/stmatrix; the tiled one mma.sync/ldmatrix/cp.async."""
    src = "".join((ROOT / "cuda_src" / f).read_text() for f in ("gemm_wgmma_ops.cuh", "ptx.cuh", "gemm_epilogue_ws.cu",
                                                                "gemm_epilogue_pingpong.cu", "gemm_epilogue_tiled.cu"))
    for needle in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "cp.async.bulk.tensor.2d",
                   "setmaxnreg.inc", "mbarrier.try_wait.parity", "mma.sync.aligned.m16n8k16",
                   "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global",
                   "stmatrix.sync.aligned.m8n8.x4.shared.b16", ".multicast::cluster", "fence.proxy.async.shared::cta"):
        assert needle in src, needle


def test_smem_figures_fit_the_device():
    assert dispatch.PP_SMEM <= dispatch.H200.smem_optin and dispatch.ws_smem(256) <= dispatch.H200.smem_optin
    assert dispatch.ws_smem(128) <= dispatch.H200.smem_optin and dispatch.ws_smem(192) <= dispatch.H200.smem_optin


def test_default_gelu_by_exp2():
    """The default's GELU is the ex2.approx form (kernel act code 3; measured against tanhf in
    docs/performance.md, "The pending switches of CUDA C++, CuPy, Triton and Gluon measured on 2026-12-06 (H100)"): every launch of a GELU plan carries it; other activations keep
    their codes; the variant ids (ws, tiled, pingpong) keep libm's tanhf (code 2)."""
    D = dispatch.dispatch_gemm
    at = {"gemm_ws_kernel": 8, "gemm_pingpong_kernel": 7, "gemm_tiled_kernel": 10,
          "gemm_splitk_reduce_kernel": 8}    # the act argument's place in each signature
    for M, N, K in ((3000, 3000, 3000), (16, 6144, 4096), (2048, 2047, 2048), (97, 211, 389), (256, 4096, 14336)):
        for act in ("gelu", "relu", "none"):
            want = D.ACT_GELU_EXP2 if act == "gelu" else dispatch.ACT_CODE[act]
            n = 0
            for plan in dispatch.plan_gemm("auto", M, N, K, "bfloat16", act).plans:
                if (i := at.get(plan.kernel.split("<")[0])) is not None:
                    assert plan.args[i] == ("i32", want), (M, N, K, act, plan.kernel)
                    n += 1
            assert n >= 1
    assert dispatch.plan_gemm("ws", 4096, 4096, 4096, "bfloat16", "gelu").plans[0].args[8] == ("i32", 2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (or the build log) for sm_90a facts")
@pytest.mark.slow
def test_compile_only_sm90a_facts():
    w = _impl("cuda:gemm_epilogue_ws").compile_only_fn(P.case(M=4096, N=4096, K=4096))
    assert w["registers"] and w["spills"] == 0 and w["kernel"] == "gemm_ws_kernel<true, 256>"
    assert w["smem"] > 150_000  # the 4-stage TMA ring
    m = _impl("cuda:gemm_epilogue").compile_only_fn(P.case(M=127, N=65, K=129))
    assert m["path"] == "tiled" and m["spills"] == 0 and m["kernel"] == "gemm_tiled_kernel<true, 32, false, false>"
    pp = _impl("cuda:gemm_epilogue_pingpong").compile_only_fn(P.case(M=4096, N=4096, K=4096, dtype="float16"))
    assert pp["kernel"] == "gemm_pingpong_kernel<false, 1>" and pp["registers"] <= 168
    assert pp["smem"] >= dispatch.PP_SMEM > 220_000


# -- GPU ---------------------------------------------------------------------------------------
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("impl_id", IDS + CUPY_IDS)
def test_verify_suite(impl_id):
    from harness.verify import verify_case
    impl = _impl(impl_id)
    if impl.available():
        pytest.skip(impl.available())
    for case in P.cases("verify"):
        if impl.supports(case):
            continue
        chk = verify_case(impl, P, case, "cuda", seeds=GPU_SEEDS)
        assert chk.ok, f"{case.label}: {chk.reason}"


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("impl_id", IDS)
def test_graph_capture_records_the_launch(impl_id):
    """One launch captured in a torch CUDA graph, replayed into a poisoned output, verifies."""
    from harness.verify import graph_replay
    impl = _impl(impl_id)
    if impl.available():
        pytest.skip(impl.available())
    for case in (P.case(M=16, N=6144, K=4096, act="gelu"), P.case(M=256, N=1000, K=512)):
        if impl.supports(case):
            continue
        chk = graph_replay(impl, P, case)
        assert chk.ok, f"{impl_id} {case.label}: {chk.reason}"


@pytest.mark.gpu
@gpu
def test_bad_arguments_raise_named_errors():
    impl = _impl("cuda:gemm_epilogue")
    if impl.available():
        pytest.skip(impl.available())
    case = P.case(M=64, N=48, K=32)
    a, b, bias = P.make_inputs(case, "cuda", 0)
    out = P.alloc_out(case, "cuda")
    with pytest.raises(TypeError, match="a:"):
        impl.prepare(case, (a.float(), b, bias), out)
    with pytest.raises(ValueError, match="b:"):
        impl.prepare(case, (a, b[:16], bias), out)
    with pytest.raises(ValueError, match="rows must have unit inner stride"):
        impl.prepare(case, (a, b.t().contiguous().t(), bias), out)
    with pytest.raises(ValueError, match="bias"):
        impl.prepare(case, (a, b, bias[:3]), out)


@pytest.mark.gpu
@gpu
def test_pingpong_declines_unaligned_output():
    impl = _impl("cuda:gemm_epilogue_pingpong")
    if impl.available():
        pytest.skip(impl.available())
    from harness.errors import Unsupported
    case = P.case(M=64, N=64, K=64)
    a, b, bias = P.make_inputs(case, "cuda", 0)
    wide = torch.empty(64, 68, device="cuda", dtype=case.torch_dtype)
    with pytest.raises(Unsupported, match="ldc"):
        impl.prepare(case, (a, b, bias), wide[:, :64])


def test_default_stages_operands_tma_cannot_read():
    """The default: above the B stream, an A or B whose rows TMA cannot
    read is copied into a workspace of 16-byte rows by one gemm_stage_rows_kernel launch (a job per
    such operand), and the TMA kernel reads the copy (the descriptor's columns stay K / N, so the
    box clips at the real edge); C goes out by TMA where ldc allows, else by ping-pong's plain
    stores. Staged exactly when the plan's modelled seconds beat the tiled kernel's at
    tiled_unaligned_flops. Checked on shapes of every alignment class (A, B, both, neither; C
    strided), fp16 and bf16, and an sm_80 part (never staged: no TMA)."""
    G = dispatch.GEMM
    a100 = dispatch.Device(sms=108, cc=(8, 0), smem_optin=166912, smem_per_sm=167936, sm90a=False, clusters=False)
    seen = set()
    for M, N, K in ((2048, 2047, 2048), (555, 1234, 777), (411, 733, 957), (97, 211, 389), (4096, 50257, 768),
                    (2050, 1001, 136), (1025, 769, 513), (300, 4096, 4095), (127, 65, 129), (512, 1024, 1024)):
        for dt in ("float16", "bfloat16"):
            g = dispatch.GemmCase(M, N, K, dt, "gelu", True, K, N, N)
            p = dispatch.plan_gemm("auto", M, N, K, dt, "gelu")
            assert dispatch.plan_gemm("auto", M, N, K, dt, "gelu", dev=a100).info["path"] == "tiled"
            unaligned = {"apad": not g.tma_a(), "bpad": not g.tma_b()}
            if not any(unaligned.values()):
                assert p.plans[0].kernel != "gemm_stage_rows_kernel"
                continue
            staged = p.plans[0].kernel == "gemm_stage_rows_kernel"
            bm = p.info["tile"][0] if not staged else dispatch.dispatch_gemm._tiled_fill_bm(g, dispatch.H200)[0]
            tiles = -(-M // bm) * -(-N // 128)
            t_tiled = 2.0 * M * N * K / G["tiled_unaligned_flops"] / (tiles / (-(-tiles // 132) * 132))
            s = dispatch.dispatch_gemm._plan_staged(g, dispatch.H200)
            assert staged == (s.info["model_s"] < t_tiled), (M, N, K)
            seen.add(staged)
            if not staged:
                assert p.info["path"] == "tiled"
                continue
            cp = p.plans[0]
            jobs = [n for n, u in unaligned.items() if u]
            assert cp.grid[1] == len(jobs) and set(p.workspace) >= set(jobs)
            for i, dst in enumerate(jobs):
                src, lds, buf, ld, rows, cols = (v for _, v in cp.args[6 * i: 6 * i + 6])
                want_rows, want_cols = (M, K) if dst == "apad" else (K, N)
                assert (src, buf, rows, cols) == (dst[0], dst, want_rows, want_cols) and ld % 8 == 0 and ld >= cols
                assert p.workspace[dst] == rows * ld * 2
            main = p.plans[1]
            descs = [v for t, v in main.args if t == "tma"]
            assert descs[0][0] == ("apad" if unaligned["apad"] else "a") and descs[1][0] == ("bpad" if unaligned["bpad"] else "b")
            assert descs[0][1:3] == (M, K) and descs[1][1:3] == (K, N)      # clipped at the real edges
            if main.kernel.startswith("gemm_pingpong_kernel"):
                assert main.args[-1] == ("i32", int(g.tma_c())) and main.args[-3] == ("ptr", "c")
    assert seen == {True, False}
    # A and B aligned, C not TMA-storable: ping-pong's plain stores
    p = dispatch.plan_gemm("auto", 1024, 1024, 1024, ldc=1027)
    assert p.info["path"] == "pingpong" and p.plans[0].args[-1] == ("i32", 0)


def test_default_stages_unaligned_n():
    """An unaligned N (2047 bf16: rows of 4094 bytes) above the B stream: the default copies B to
    16-byte rows (one gemm_stage_rows_kernel job, row stride 2048) and runs ping-pong on the copy,
    C by its plain 16-byte stores; the same through the adapter's case (both launchers)."""
    p = dispatch.plan_gemm("auto", 2048, 2047, 2048, "bfloat16", "gelu")
    assert [q.kernel for q in p.plans] == ["gemm_stage_rows_kernel", "gemm_pingpong_kernel<true, 1>"]
    assert p.info["stage"] == {"bpad": 2048} and p.workspace["bpad"] == 2048 * 2048 * 2
    assert p.plans[1].args[-1] == ("i32", 0)      # C (ldc 2047) by plain stores
    case = P.case(M=2048, N=2047, K=2048, act="gelu", dtype="bfloat16")
    from backends.cuda_gemm import case_gemm
    assert case_gemm("auto", case).plans[0].kernel == "gemm_stage_rows_kernel"


def test_no_next_candidate_is_left():
    """GEMM_NEXT's switches are resolved (on, or removed with their code): no ``_next`` id remains,
    registered or candidate, in either launcher, and no kernel of the removed B repack is built."""
    for layer in ("cuda", "cupy"):
        with pytest.raises(ValueError, match="not registered"):
            registry.get("gemm_epilogue", f"{layer}:gemm_epilogue_next", candidates=True)
    assert not hasattr(dispatch.dispatch_gemm, "GEMM_NEXT") and "next" not in dispatch.GEMM_PATHS
    names = {n for v in dispatch.instances().values() for n in v}
    assert "gemm_stage_rows_kernel" in names and "gemm_pad_rows_kernel" not in names
