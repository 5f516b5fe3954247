"""CUDA C++ and CuPy attention, the warp-specialised Hopper kernel (``attention_ws.cu``) and the
switch that makes the default take it (docs/performance.md, "CUDA C++ / attention"): the variants'
registration, the planner's answers with the switch on (and off), where it falls back, the TMA descriptor
arguments (the (D, S, H, B) view of both layouts), the sm_90a compile of every instance (ptxas:
no spills; the PTX has wgmma, 4-D TMA, mbarriers and setmaxnreg), CuPy's NVRTC compile; on a GPU the
verify suite of each variant."""
from __future__ import annotations

import importlib
import shutil

import pytest
import torch

from cuda_src import dispatch
from cuda_src import dispatch_attention as A
from harness import problems, registry
from harness.problems import SUITES

P = problems.get("attention")
WS_IDS = ("cuda:attention_ws", "cupy:attention_ws")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
H200 = dispatch.H200
SM80 = dispatch.Device(sms=108, cc=(8, 0), smem_optin=166912, smem_per_sm=167936, sm90a=False, clusters=False)
NO90A = dispatch.Device(sm90a=False, clusters=False)            # an H100 running the module's compute_80 PTX
CASES = [P.case(B=2, Hq=4, Hkv=2, Sq=77, Sk=131, D=d, dtype=dt, causal=cz)
         for d in (64, 128) for dt in ("float16", "bfloat16") for cz in (0, 1)]


def _impl(impl_id):
    return registry.get("attention", impl_id)


def _plan(path="auto", B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1, dev=H200, aligned=True):
    def contiguous(H, S):
        return (H * S * D, S * D, D)
    strides = {"q": contiguous(Hq, Sq), "k": contiguous(Hkv, Sk), "v": contiguous(Hkv, Sk), "o": contiguous(Hq, Sq)}
    return A.plan_attention(path, B, Hq, Hkv, Sq, Sk, D, "bfloat16", causal, strides, aligned, dev)


def _all_cases():
    return [c for s in SUITES for c in P.cases(s)]


# -- registration ----------------------------------------------------------------------------------
def test_ws_is_a_variant_row_and_next_is_gone():
    rows = {i.id: i for i in registry.select(problem="attention") if i.layer in ("cuda", "cupy")}
    cands = {i.id for i in registry.candidates() if i.problem == "attention"}
    for impl_id in WS_IDS:
        assert impl_id in rows and impl_id not in cands and rows[impl_id].role == "variant", impl_id
        assert {s.path for s in rows[impl_id].sources if s.path.endswith(".cu")} == {"cuda_src/attention_ws.cu"}
    # both builds have run on a GPU (NVRTC on the H200, nvcc on an H100): no row says otherwise
    assert not any("not yet run on a GPU" in rows[i].description for i in WS_IDS)
    for layer in ("cuda", "cupy"):
        assert f"{layer}:attention_next" not in set(rows) | cands
        # the default's Sources come from its planner, which launches the ws kernel on the suites' cases
        assert "cuda_src/attention_ws.cu" in {s.path for s in rows[f"{layer}:attention"].sources}
    assert "next" not in A.ATTENTION_PATHS
    assert "ws" in A.VARIANTS and "ws" in dispatch.VARIANTS["attention"]


# -- the planner -----------------------------------------------------------------------------------
def test_the_switch_is_on_and_the_default_takes_ws_on_hopper():
    from harness.meta_inputs import case_facts
    assert A.ATTENTION["ws"] is True
    p = _plan("auto")
    assert (p.info["path"], p.kernel, p.plans[0].block) == ("ws", "attention_ws_kernel<true, 128, 2>", 384)
    assert p.plans[0].grid == (4096 // 128, 32, 4) and p.plans[0].smem == A.ws_smem(128) <= H200.smem_optin
    assert _plan("auto", D=64).kernel == "attention_ws_kernel<true, 64, 4>"
    case = P.case(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1)
    c = A.plan("attention", case_facts(case))
    assert c.variant == "ws" and {s.path for s in c.sources} == {"cuda_src/attention_ws.cu"}


def test_the_default_takes_tiled_with_the_switch_off(monkeypatch):
    from harness.meta_inputs import case_facts
    monkeypatch.setitem(A.ATTENTION, "ws", False)
    case = P.case(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1)
    assert A.plan("attention", case_facts(case)).variant == "tiled"
    assert _plan("auto").info["path"] == "tiled"


def test_the_default_falls_back_where_tma_or_hopper_code_is_missing():
    assert _plan("auto", aligned=False).info["path"] == "simple"    # rows off 16 bytes: the twin's kernel
    assert _plan("auto", dev=SM80).info["path"] == "tiled"          # no sm_90a code
    assert _plan("auto", dev=NO90A).info["path"] == "tiled"
    small = dispatch.Device(smem_optin=100 * 1024)
    assert _plan("auto", dev=small).info["path"] == "tiled"
    with pytest.raises(dispatch.Decline, match="TMA needs 16-byte"):
        _plan("ws", aligned=False)
    with pytest.raises(dispatch.Decline, match="sm_90a"):
        _plan("ws", dev=SM80)


def test_the_default_plans_ws_on_every_suite_case_with_valid_launches():
    """Every case of every suite (all 16-byte rows), planned for the H200: the default plans the ws
    kernel (the contract's ``plan`` too), the grid covers every query row, the arguments match the
    kernel's signature and the instance is built."""
    from backends.cuda_attention import case_attention
    from harness.meta_inputs import case_facts
    for case in _all_cases():
        ls = case_attention("auto", case, H200)
        p = ls.plans[0]
        assert ls.info["path"] == "ws" and p.kernel in dispatch.instances()["attention_ws.cu"], case.id
        assert A.plan("attention", case_facts(case)).variant == "ws", case.id
        assert len(p.args) == len(A.SIGNATURES["attention_ws_kernel"]), case.id
        assert p.grid[1:] == (case.Hq, case.B) and p.grid[0] * 128 >= case.Sq > (p.grid[0] - 1) * 128, case.id
        assert p.smem == p.max_dynamic_smem == A.ws_smem(case.D) <= H200.smem_optin, case.id


def test_ws_descriptors_view_each_operand_as_d_s_h_b():
    """The bshd layout: rows H * D apart, heads D apart; the TMA arguments carry (S, D, row stride,
    box rows, 64) and the outer (H, head stride), (B, batch stride); o's strides as the kernel's i64s."""
    from backends.cuda_attention import case_attention
    case = P.case(B=2, Hq=4, Hkv=2, Sq=65, Sk=190, D=64, causal=1, layout="bshd")
    args = [v for _, v in case_attention("ws", case).plans[0].args]
    assert args[0] == ("q", 65, 64, 4 * 64, 128, 64, ((4, 64), (2, 65 * 4 * 64)))
    assert args[1] == ("k", 190, 64, 2 * 64, 128, 64, ((2, 64), (2, 190 * 2 * 64)))
    assert args[2] == ("v", 190, 64, 2 * 64, 128, 64, ((2, 64), (2, 190 * 2 * 64)))
    assert args[3:] == ["o", 2, 65, 190, 4 * 65 * 64, 65 * 64, 64, 1, 1]   # causal, ping-pong


def test_ws_descriptors_of_size_one_dimensions_get_a_tma_stride():
    """B = H = S = 1 (one decode token): the strides of those dimensions never move a box, and each
    is given as a multiple of 16 bytes, which TMA requires of every stride."""
    strides = {n: (7, 5, 3) for n in A.OPERANDS}
    strides["o"] = (64, 64, 64)
    ls = A.plan_attention("ws", 1, 1, 1, 1, 1, 64, "float16", 0, strides, True, H200)
    for _, (name, S, D, rs, _, _, ((H, hs), (B, bs))) in ls.plans[0].args[:3]:
        assert (S, D, H, B) == (1, 64, 1, 1), name
        assert all(x * 2 % 16 == 0 for x in (rs, hs, bs)), (name, rs, hs, bs)


def test_pack_hands_the_outer_dimensions_to_the_encoder():
    calls = []

    def encode(ptr, rows, cols, ld, box_rows, box_cols, outer=()):
        calls.append((ptr, rows, cols, ld, box_rows, box_cols, outer))
        return bytes(128)
    p = _plan("ws", B=2, Hq=4, Hkv=2, Sq=300, Sk=300, D=128).plans[0]
    blob, offsets = dispatch.pack(p, {"q": 1 << 20, "k": 2 << 20, "v": 3 << 20, "o": 4 << 20}, encode)
    assert [c[0] for c in calls] == [1 << 20, 2 << 20, 3 << 20]
    assert calls[0][1:] == (300, 128, 128, 128, 64, ((4, 300 * 128), (2, 4 * 300 * 128)))
    assert offsets[:4] == [0, 128, 256, 384] and len(offsets) == len(A.SIGNATURES["attention_ws_kernel"])


# -- compiles ----------------------------------------------------------------------------------------
@needs_nvcc
@pytest.mark.timeout(900)
def test_ws_compiles_for_sm90a_without_spills_for_every_head_dim_dtype_and_mask():
    impl = _impl("cuda:attention_ws")
    for case in CASES:
        f = impl.compile_only_fn(case)
        st = A.ATTENTION["ws_stages"][case.D]
        bf16 = "true" if case.dtype == "bfloat16" else "false"
        assert f["kernel"] == f"attention_ws_kernel<{bf16}, {case.D}, {st}>", (case.id, f)
        assert f["arch"] == "sm_90a" and 0 < f["registers"] <= 168 and f.get("spills", 0) == 0, (case.id, f)
        assert f["smem"] == A.ws_smem(case.D), (case.id, f)


@needs_nvcc
@pytest.mark.timeout(900)
def test_ws_ptx_has_wgmma_tma_mbarriers_and_setmaxnreg():
    from tests.test_cuda_attention import _ptx
    ptx = _ptx("attention_ws.cu")
    for feature in ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
                    "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                    "mbarrier.try_wait.parity", "setmaxnreg.dec.sync.aligned.u32 24",
                    "setmaxnreg.inc.sync.aligned.u32 240", "wgmma.wait_group.sync.aligned 1", "ex2.approx",
                    "bar.arrive 3, ", "bar.arrive 4, "):   # the ping-pong's hand-overs
        assert feature in ptx, feature
    assert "mma.sync" not in ptx and "ld.global" not in ptx   # every operand through TMA


@pytest.mark.timeout(900)
def test_cupy_compiles_ws_through_nvrtc():
    pytest.importorskip("cupy")
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception as e:   # the package without libnvrtc: nothing to compile with
        pytest.skip(f"NVRTC not loadable: {type(e).__name__}")
    f = _impl("cupy:attention_ws").compile_only_fn(P.case(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1))
    assert f["kernel"] == "attention_ws_kernel<true, 128, 2>" and f["facts_from"].startswith("NVRTC"), f
    assert f["registers"] > 0 and f.get("spills", 0) == 0, f


# -- on a GPU ------------------------------------------------------------------------------------------
def _gpu_impl(impl_id):
    impl = _impl(impl_id)
    if (why := impl.available()):
        pytest.skip(why)
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the ws kernel is sm_90a code: a Hopper GPU")
    return impl


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("impl_id", WS_IDS)
def test_verify_suite_gpu(impl_id):
    from harness.verify import verify_case

    impl = _gpu_impl(impl_id)
    for case in P.cases("verify"):
        chk = verify_case(impl, P, case, "cuda")
        assert chk.ok, (impl_id, case.id, chk.reason)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("impl_id", WS_IDS)
def test_ws_without_the_pingpong_gpu(impl_id, monkeypatch):
    """The kernel's other schedule (ATTENTION["ws_pingpong"] off: the warpgroups issue freely) passes
    the verify suite too: a GPU run may time one against the other."""
    from harness.verify import verify_case

    impl = _gpu_impl(impl_id)
    monkeypatch.setitem(A.ATTENTION, "ws_pingpong", False)
    for case in P.cases("verify"):
        chk = verify_case(impl, P, case, "cuda")
        assert chk.ok, (impl_id, case.id, chk.reason)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl_id", WS_IDS)
def test_ws_launch_runs_the_ws_kernel_gpu(impl_id):
    """The ws row launches the ws kernel (not a fallback) on a Hopper GPU, and a q that starts one
    element off 16 bytes is declined before launch (TMA cannot read it)."""
    from harness.errors import Unsupported
    impl = _gpu_impl(impl_id)
    case = P.case(B=1, Hq=4, Hkv=2, Sq=100, Sk=130, D=64, causal=1)
    q, k, v = P.make_inputs(case, "cuda", 0)
    out = torch.full(P.out_shape(case), float("nan"), dtype=q.dtype, device="cuda")
    launch = impl.prepare(case, (q, k, v), out)
    launch()
    torch.cuda.synchronize()
    ref = P.reference((q, k, v), case)
    assert ((out.double() - ref).norm() / ref.norm()).item() <= P.tolerance(case.dtype).rel_norm
    buf = torch.empty(q.numel() + 1, dtype=q.dtype, device="cuda")
    q1 = buf[1:].view(q.shape)
    q1.copy_(q)
    with pytest.raises(Unsupported, match="TMA needs 16-byte"):
        impl.prepare(case, (q1, k, v), out)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl_id", ("cuda:attention", "cupy:attention"))
def test_the_default_launches_the_ws_kernel_gpu(impl_id):
    """On a Hopper GPU the default's launch of an aligned case is the ws kernel's."""
    impl = _gpu_impl(impl_id)
    case = P.case(B=1, Hq=4, Hkv=2, Sq=100, Sk=130, D=128, causal=1)
    q, k, v = P.make_inputs(case, "cuda", 0)
    out = torch.full(P.out_shape(case), float("nan"), dtype=q.dtype, device="cuda")
    launch = impl.prepare(case, (q, k, v), out)
    assert launch.info["config"]["path"] == "ws"
    launch()
    torch.cuda.synchronize()
    ref = P.reference((q, k, v), case)
    assert ((out.double() - ref).norm() / ref.norm()).item() <= P.tolerance(case.dtype).rel_norm


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kl_cuda_encodes_a_4d_descriptor_gpu():
    cuda_layer = importlib.import_module("backends.cuda_layer")
    if (why := cuda_layer.available()):
        pytest.skip(why)
    mod = cuda_layer.module()
    x = torch.empty(2, 8, 4, 64, dtype=torch.bfloat16, device="cuda")   # (B, S, H, D) storage
    desc = mod.encode_tma(x.data_ptr(), 2, 8, 64, 4 * 64, 128, 64, [(4, 64), (2, 8 * 4 * 64)])
    assert len(desc) == 128
    with pytest.raises(ValueError, match="^outer:"):
        mod.encode_tma(x.data_ptr(), 2, 8, 64, 4 * 64, 128, 64, [(4, 3)])
