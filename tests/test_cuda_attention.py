"""CUDA C++ and CuPy attention: the rows' registration, the planner's answers and invariants,
the sm_90a compile of every instance (ptxas: registers, no spills; the tiled kernel's PTX has mma.sync,
ldmatrix and cp.async), CuPy's NVRTC compile, the inputs' validation; on a GPU the verify suite."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from cuda_src import dispatch
from cuda_src import dispatch_attention as A
from harness import problems, registry
from harness.problems import SUITES

ROOT = Path(__file__).resolve().parent.parent
P = problems.get("attention")
CUDA_IDS = ("cuda:attention", "cuda:attention_simple")
IDS = CUDA_IDS + ("cupy:attention", "cupy:attention_simple")
HAS_NVCC = shutil.which("nvcc") is not None
needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc is not installed")
H200 = dispatch.H200
SM80 = dispatch.Device(sms=108, cc=(8, 0), smem_optin=166912, smem_per_sm=167936, sm90a=False, clusters=False)
RTX4090 = dispatch.Device(sms=128, cc=(8, 9), smem_optin=101376, smem_per_sm=102400, sm90a=False, clusters=False)
NO90A = dispatch.Device(sm90a=False, clusters=False)   # an H100 running the module's compute_80 PTX


def _impl(impl_id):
    return registry.get("attention", impl_id, candidates=True)


def _contiguous(B, H, S, D):
    return (H * S * D, S * D, D)


def _plan(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1, dev=H200, aligned=True, path="auto", **kw):
    strides = {"q": _contiguous(B, Hq, Sq, D), "k": _contiguous(B, Hkv, Sk, D), "v": _contiguous(B, Hkv, Sk, D),
               "o": _contiguous(B, Hq, Sq, D)}
    return A.plan_attention(path, B, Hq, Hkv, Sq, Sk, D, "bfloat16", causal, strides, aligned, dev, **kw)


def _all_cases():
    return [c for s in SUITES for c in P.cases(s)]


# -- registration ----------------------------------------------------------------------------------
def test_ids_are_rows_with_their_roles():
    # rows of the main job, no candidates left (the ws variant: tests/test_cuda_attention_ws.py)
    cands = {i.id: i for i in registry.select(problem="attention") if i.layer in ("cuda", "cupy")}
    assert set(cands) == set(IDS) | {"cuda:attention_ws", "cupy:attention_ws"}
    for layer in ("cuda", "cupy"):
        assert cands[f"{layer}:attention"].role == "default"
        assert cands[f"{layer}:attention_simple"].role == "simple"
    # every row has run on a GPU (the ws kernel's nvcc build too, on an H100 on 2026-12-07)
    assert not {i for i, impl in cands.items() if "not yet run on a GPU" in impl.description}
    assert not [i for i in registry.candidates() if i.problem == "attention" and i.layer in ("cuda", "cupy")]
    # the twin's kernel lives in attention.cu, the default's in the files of its words (the ws kernel
    # on the suites' cases planned for the H200)
    assert {s.path for s in cands["cuda:attention_simple"].sources if s.path.endswith(".cu")} == \
        {"cuda_src/attention.cu"}
    assert "cuda_src/attention_ws.cu" in {s.path for s in cands["cuda:attention"].sources}


# -- the planner -----------------------------------------------------------------------------------
def test_plan_by_waves_known_answers():
    """The tiled kernel's CTA by waves: where the default takes it without sm_90a code (an H100
    running the compute_80 PTX), and by request on the H200."""
    # a long prefill: 32 x 128 x 4 = 16384 CTAs of 128 rows, many waves -> 8 warps, 128 rows
    big = _plan(dev=NO90A)
    assert (big.info["path"], big.info["warps"], big.plans[0].block) == ("tiled", 8, 256)
    assert big.plans[0].kernel == "attention_tiled_kernel<true, 128, 8>"
    assert big.plans[0].grid == (32, 32, 4) and big.plans[0].smem == (128 + 4 * 64) * 128 * 2
    assert _plan(path="tiled").info == big.info
    # a chunk of 64 queries: 128 CTAs of 128 rows are less than a wave of 132 SMs -> 64 rows
    assert _plan(Sq=64, Sk=8192, dev=NO90A).info["warps"] == 4
    # one decode token: never a CTA of more rows than the smallest's 64
    assert _plan(B=8, Sq=1, path="tiled").info["warps"] == 4
    # the smaller head dim fits two 128-row CTAs an SM by shared memory; a few heads of a short
    # sequence stay below a wave -> 64 rows
    assert _plan(B=1, Hq=2, Hkv=2, Sq=1000, Sk=1000, D=64, path="tiled").info["warps"] == 4
    assert _plan(B=8, Hq=32, Hkv=8, Sq=2048, Sk=2048, D=64, path="tiled").info["warps"] == 8


def test_plan_takes_the_twin_where_the_tiled_kernel_cannot():
    assert _plan(aligned=False).info["path"] == "simple"
    assert _plan(aligned=False).plans[0].kernel == "attention_simple_kernel<true, 128>"
    with pytest.raises(dispatch.Decline, match="16-byte"):
        _plan(aligned=False, path="tiled")
    tiny = dispatch.Device(sms=10, cc=(8, 0), smem_optin=48 * 1024, smem_per_sm=64 * 1024)
    assert _plan(dev=tiny).info["path"] == "simple"            # no tiled CTA fits 48 KB
    assert _plan(dev=dispatch.Device(cc=(7, 5))).info["path"] == "simple"   # no bf16 mma.sync
    assert _plan(path="simple").plans[0].grid == (4096 // A.SIMPLE_ROWS, 32, 4)


def test_plan_validates_its_arguments():
    with pytest.raises(ValueError, match="^D:"):
        _plan(D=96)
    with pytest.raises(ValueError, match="^Sq:"):
        _plan(Sq=10, Sk=5, causal=1)
    with pytest.raises(ValueError, match="^Hq:"):
        _plan(Hq=6, Hkv=4)
    with pytest.raises(ValueError, match="^path:"):
        _plan(path="tma")
    with pytest.raises(ValueError, match="^warps:"):
        _plan(warps=2)
    with pytest.raises(ValueError, match="^strides:"):
        A.plan_attention("auto", 1, 1, 1, 4, 4, 64, "float16", 0, {"q": (1, 2, 3)})
    with pytest.raises(ValueError, match="^dtype:"):
        A.plan_attention("auto", 1, 1, 1, 4, 4, 64, "float32", 0, {n: (0, 0, 64) for n in A.OPERANDS})


@pytest.mark.parametrize("dev", [H200, SM80, RTX4090], ids=["h200", "a100", "rtx4090"])
def test_plan_invariants_on_every_suite_case(dev):
    """Every case of every suite (the suites' rows are 16-byte rows): the default takes the ws kernel on
    the H200, the tiled kernel on the others (no sm_90a code); the tiled kernel's plan keeps shared
    memory within a CTA's limit, the grid covering every query row, the tiles a whole number of
    16-byte chunks a thread (the kernel's static_assert), the arguments of the kernel's signature."""
    from backends.cuda_attention import case_attention
    for case in _all_cases():
        assert case_attention("auto", case, dev).info["path"] == ("ws" if dev is H200 else "tiled"), case.id
        ls = case_attention("tiled", case, dev)
        p = ls.plans[0]
        assert ls.info["path"] == "tiled", case.id
        assert len(p.args) == len(A.SIGNATURES[dispatch.family(p.kernel)]), case.id
        assert p.grid[1:] == (case.Hq, case.B), case.id
        w = ls.info["warps"]
        assert p.block == 32 * w and p.grid[0] * 16 * w >= case.Sq > (p.grid[0] - 1) * 16 * w, case.id
        assert p.smem == A.tiled_smem(case.D, w) <= dev.smem_optin and p.max_dynamic_smem == p.smem, case.id
        chunks = case.D // 8
        assert (16 * w * chunks) % p.block == 0 and (A.ATTENTION["block_n"] * chunks) % p.block == 0, case.id
        assert p.kernel in dispatch.instances()["attention_tiled.cu"], case.id


def test_plan_reads_the_facts_of_the_bshd_layout():
    from backends.cuda_attention import case_attention
    case = P.case(B=2, Hq=4, Hkv=2, Sq=65, Sk=190, D=64, causal=1, layout="bshd")
    args = dict(zip(("q", "k", "v", "o", "group", "Sq", "Sk", *(f"{n}{d}" for n in "qkvo" for d in "bhs"),
                     "causal"), (v for _, v in case_attention("tiled", case).plans[0].args)))
    assert (args["group"], args["Sq"], args["Sk"], args["causal"]) == (2, 65, 190, 1)
    assert (args["qb"], args["qh"], args["qs"]) == (65 * 4 * 64, 64, 4 * 64)     # [B, S, H, D] storage
    assert (args["kb"], args["kh"], args["ks"]) == (190 * 2 * 64, 64, 2 * 64)
    assert (args["ob"], args["oh"], args["os"]) == (4 * 65 * 64, 65 * 64, 64)    # out: contiguous [B, H, S, D]


def test_planner_asks_no_gpu(monkeypatch):
    from backends.cuda_attention import case_attention
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(1) or False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: asked.append(1) or 0)
    for case in P.cases("verify"):
        case_attention("auto", case)
    assert not asked


# -- compiles ----------------------------------------------------------------------------------------
@needs_nvcc
@pytest.mark.timeout(900)
def test_every_instance_compiles_for_sm90a_without_spills():
    """ptxas facts of every instance (the build log, or nvcc here where the module predates the
    sources): registers within the planner's occupancy assumption, no spills."""
    cuda_layer = importlib.import_module("backends.cuda_layer")
    for src, names in A.instances().items():
        for k in names:
            f = cuda_layer.kernel_facts(k)
            assert f["registers"] and f.get("spills", 0) == 0, (k, f)
            if src == "attention_tiled.cu":
                D = int(k.split(",")[1])
                assert f["registers"] <= A.ATTENTION["regs"][D], (k, f)


CASES = [P.case(B=2, Hq=4, Hkv=2, Sq=77, Sk=131, D=d, dtype=dt, causal=cz)
         for d in (64, 128) for dt in ("float16", "bfloat16") for cz in (0, 1)]


@needs_nvcc
@pytest.mark.timeout(900)
@pytest.mark.parametrize("impl_id", CUDA_IDS)
def test_compile_only_for_every_head_dim_dtype_and_mask(impl_id):
    impl = _impl(impl_id)
    for case in CASES:
        f = impl.compile_only_fn(case)
        want = "attention_ws_kernel" if impl_id == "cuda:attention" else "attention_simple_kernel"
        assert f["kernel"].startswith(want) and f"{case.D}" in f["kernel"], (case.id, f)
        assert ("true" in f["kernel"]) == (case.dtype == "bfloat16"), (case.id, f)
        assert f["arch"] == "sm_90a" and f["registers"] > 0 and f.get("spills", 0) == 0, (case.id, f)
        assert f["smem"] > 0, (case.id, f)


def _ptx(src: str) -> str:
    """The PTX nvcc makes of a kernel source's instance unit for sm_90a (the build's flags)."""
    cuda_layer = importlib.import_module("backends.cuda_layer")
    with tempfile.TemporaryDirectory() as d:
        dispatch.emit_instances(d)
        unit = Path(d) / f"{Path(src).stem}_instances.cu"
        out = os.path.join(d, "k.ptx")
        subprocess.run([shutil.which("nvcc"), "-ptx", "-arch=sm_90a", *cuda_layer.NVCC_FLAGS, "-I",
                        str(ROOT / "cuda_src"), str(unit), "-o", out], check=True, capture_output=True, timeout=600)
        return Path(out).read_text()


@needs_nvcc
@pytest.mark.timeout(900)
def test_the_tiled_ptx_has_tensor_core_mma_ldmatrix_and_cp_async():
    ptx = _ptx("attention_tiled.cu")
    for feature in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global",
                    "cp.async.wait_group", "ex2.approx"):
        assert feature in ptx, feature
    twin = _ptx("attention.cu")
    assert "mma.sync" not in twin and "cp.async" not in twin and "ex2.approx" in twin


@pytest.mark.timeout(900)
def test_cupy_compiles_one_case_through_nvrtc():
    pytest.importorskip("cupy")
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception as e:   # the package without libnvrtc: nothing to compile with
        pytest.skip(f"NVRTC not loadable: {type(e).__name__}")
    for impl_id, kernel in (("cupy:attention", "attention_ws_kernel<true, 128, 2>"),
                            ("cupy:attention_simple", "attention_simple_kernel<true, 128>")):
        f = _impl(impl_id).compile_only_fn(P.case(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1))
        assert f["kernel"] == kernel and f["facts_from"].startswith("NVRTC"), f
        assert f["registers"] > 0 and f.get("spills", 0) == 0, f


# -- validation ----------------------------------------------------------------------------------------
def test_inputs_are_validated_naming_the_argument():
    from cuda_src.dispatch_attention import check_attention
    case = P.case(B=1, Hq=2, Hkv=1, Sq=8, Sk=8, D=64)
    q, k, v = P.make_inputs(case, "cpu", 0)
    out = torch.empty(P.out_shape(case), dtype=case.torch_dtype)
    with pytest.raises(ValueError, match="^inputs:"):
        check_attention(case, (q, k), out)
    with pytest.raises(TypeError, match="^q: expected a torch.Tensor"):
        check_attention(case, (q.tolist(), k, v), out)
    with pytest.raises(ValueError, match="^q: must be a CUDA tensor"):
        check_attention(case, (q, k, v), out)



@pytest.mark.parametrize("impl_id", IDS)
def test_a_declined_plan_is_unsupported_naming_the_path(impl_id):
    """Both launchers' rows turn the planner's Decline into the harness's Unsupported, the path
    named (Hq is grid dimension y: at most 65535)."""
    from harness.errors import Unsupported
    path = "simple" if impl_id.endswith("_simple") else "auto"
    case = P.case(B=1, Hq=65536, Hkv=1, Sq=16, Sk=16, D=64)
    with pytest.raises(Unsupported, match=f"^{path} path: grid: Hq \\(65536\\)"):
        _impl(impl_id).compile_only_fn(case)

# -- on a GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("impl_id", IDS)
def test_verify_suite_gpu(impl_id):
    from harness.verify import verify_case

    impl = _impl(impl_id)
    if (why := impl.available()):
        pytest.skip(why)
    for case in P.cases("verify"):
        chk = verify_case(impl, P, case, "cuda")
        assert chk.ok, (impl_id, case.id, chk.reason)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl_id", ("cuda:attention", "cupy:attention"))
def test_rows_off_16_bytes_take_the_twins_kernel_gpu(impl_id):
    """The default takes a q that starts one element off 16 bytes (no suite case has one) with the
    twin's kernel, and its output matches the reference within the dtype's tolerance."""
    impl = _impl(impl_id)
    if (why := impl.available()):
        pytest.skip(why)
    case = P.case(B=1, Hq=4, Hkv=2, Sq=100, Sk=130, D=64, causal=1)
    q, k, v = P.make_inputs(case, "cuda", 0)
    buf = torch.empty(q.numel() + 1, dtype=q.dtype, device="cuda")
    q1 = buf[1:].view(q.shape)
    q1.copy_(q)
    out = torch.full(P.out_shape(case), float("nan"), dtype=q.dtype, device="cuda")
    launch = impl.prepare(case, (q1, k, v), out)
    assert launch.info["config"]["path"] == "simple"
    launch()
    torch.cuda.synchronize()
    ref = P.reference((q, k, v), case)
    assert ((out.double() - ref).norm() / ref.norm()).item() <= P.tolerance(case.dtype).rel_norm
