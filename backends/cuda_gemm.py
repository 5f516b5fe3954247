"""CUDA C++ adapter for ``gemm_epilogue`` (kernels in ``cuda_src/gemm_epilogue*.cu``, planner in
``cuda_src/dispatch.py``, launcher in ``backends/cuda_layer.py``).

Rows:
- ``cuda:gemm_epilogue`` (default): the planner's rules. Small M (a stream of B): the tiled mma.sync
  kernel, with K split (fp32 partials, then the reduction kernel) until its CTAs fill three
  quarters of the SMs' resident capacity (GEMM["tiled_wave_fill"]). Where TMA can read A and B
  (16-byte strides and bases): the ping-pong kernel (C by TMA, or by plain 16-byte stores where
  TMA cannot write it), or the warp-specialised kernel with split-K when the output tiles would
  leave SMs idle; where TMA cannot read A or B (N = 50257, K = 957): those operands copied once a
  call into workspaces of 16-byte rows, then the same choice, where the model says that beats the
  tiled mma.sync kernel (any shape, stride, alignment; its tile rows by the load of the busiest SM).
  GELU by ex2.approx.
- ``cuda:gemm_epilogue_simple``: the teaching twin (shared-memory tiles, FMA, any shape).
- ``cuda:gemm_epilogue_tiled``: mma.sync + ldmatrix + cp.async ring (sm_80+), any shape.
- ``cuda:gemm_epilogue_ws``: Hopper, TMA ring + warp-specialised wgmma 128 x 256 (sm_90a).
- ``cuda:gemm_epilogue_pingpong``: Hopper ping-pong, TMA-store epilogue. (Its 2 x 1 cluster form
  with B multicast is the planner's ``pingpong_c2`` path, for tuning runs and python -m harness check cuda:
  the same algorithm, so no id of its own.)
- ``cuda:gemm_epilogue_splitk``: the ws kernel with K split across CTAs (fp32 workspace from
  prepare) and the reduction kernel of ``gemm_epilogue_splitk.cu`` that applies bias + activation once.
"""
from __future__ import annotations

import torch

from backends.cuda_layer import (DTYPE_CODE, DTYPE_NAME, LAUNCHER, available, dev_index, device,
                                 launch_info, make_launcher, module, plan_facts)
from cuda_src import dispatch
from harness import Source, planned, register
from harness.errors import Unsupported

LAYER = "cuda"


def check_gemm(case, inputs, out):
    """Validate (a, b, bias|None) and out for a case; returns (a, b, bias, act)."""
    if len(inputs) != 3:
        raise ValueError(f"inputs: expected (a, b, bias|None), got {len(inputs)} items")
    a, b, bias = inputs
    M, N, K = case.M, case.N, case.K
    want = case.torch_dtype
    for name, t, shape in (("a", a, (M, K)), ("b", b, (K, N)), ("out", out, (M, N))):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be a CUDA tensor (got device {t.device})")
        if t.dtype != want:
            raise TypeError(f"{name}: dtype {t.dtype} != case dtype {want}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} != expected {shape}")
        if t.dim() != 2 or (t.numel() > 0 and t.shape[1] > 1 and t.stride(1) != 1):
            raise ValueError(f"{name}: rows must have unit inner stride (got strides {tuple(t.stride())})")
        if t.data_ptr() % 2:
            raise ValueError(f"{name}: 16-bit tensors must be 2-byte aligned")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.device.type != "cuda":
            raise ValueError("bias: must be a CUDA tensor or None")
        if bias.dtype != want:
            raise TypeError(f"bias: dtype {bias.dtype} != case dtype {want}")
        if tuple(bias.shape) != (N,) or (N > 1 and bias.stride(0) != 1):
            raise ValueError(f"bias: expected a contiguous [{N}] vector, got shape {tuple(bias.shape)} "
                             f"strides {tuple(bias.stride())}")
    devs = {t.device for t in (a, b, out, bias) if isinstance(t, torch.Tensor)}
    if len(devs) != 1:
        raise ValueError(f"a, b, bias, out: all on one device, got {sorted(map(str, devs))}")
    act = case.params.get("act", "relu")
    if act not in dispatch.ACT_CODE:
        raise ValueError(f"act: unknown activation {act!r}; choose from {', '.join(dispatch.ACT_CODE)}")
    return a, b, bias, act


def _ld(t: torch.Tensor, cols: int) -> int:
    return max(t.stride(0), 1) if t.shape[0] > 1 else max(cols, 1)


def gemm_launches(path, case, a, b, bias, out, act, dev: dispatch.Device, **opts) -> dispatch.Launches:
    return dispatch.plan_gemm(path, case.M, case.N, case.K, DTYPE_NAME[a.dtype], act, bias is not None,
                              _ld(a, case.K), _ld(b, case.N), _ld(out, case.N), a.data_ptr() % 16,
                              b.data_ptr() % 16, out.data_ptr() % 16, dev, **opts)


def case_gemm(path: str, case, dev: dispatch.Device = dispatch.H200, **opts) -> dispatch.Launches:
    """The plan a harness case gets (contiguous inputs, 256-byte aligned bases) on ``dev``."""
    return dispatch.plan_gemm(path, case.M, case.N, case.K, case.dtype, case.params.get("act", "relu"),
                              bool(int(case.params.get("bias", 1))), dev=dev, **opts)


def _supports(path: str):
    def supports(case):
        if case.dtype not in ("float16", "bfloat16"):
            return f"fp16/bf16 only (got {case.dtype})"
        if path == "auto":
            return None
        try:
            case_gemm(path, case)
        except dispatch.Decline as e:
            return str(e)
        return None
    return supports


def _prepare(path: str):
    def prepare(case, inputs, out):
        mod = module()
        a, b, bias, act = check_gemm(case, inputs, out)
        di = dev_index(a)
        try:
            plan = gemm_launches(path, case, a, b, bias, out, act, device(di))
        except dispatch.Decline as e:
            raise Unsupported(str(e)) from None
        for p in plan.plans:  # a runtime cluster: no more clusters than can be co-resident at once
            if p.cluster_launch:
                fn = mod.kernel(p.kernel)
                mod.set_attributes(fn, di, p.max_dynamic_smem)
                n = mod.max_active_clusters(fn, di, p.grid[0], p.block, p.smem, p.cluster)
                if n >= 1:
                    p.grid = (min(p.grid[0], n * p.cluster), 1, 1)
        ptrs = {"a": a.data_ptr(), "b": b.data_ptr(), "bias": bias.data_ptr() if bias is not None else 0,
                "c": out.data_ptr()}
        launch = make_launcher(mod, plan, ptrs, di, DTYPE_CODE[a.dtype])
        launch.info = launch_info(plan, path=plan.info.get("path"))
        return launch
    return prepare


def _compile_only(path: str):
    def compile_only(case):
        why = _supports(path)(case)
        if why:
            raise Unsupported(why)
        plan = case_gemm(path, case)
        facts = plan_facts(plan)
        facts["path"] = plan.info.get("path")
        if "ws" in plan.kernel or "pingpong" in plan.kernel:
            facts["note"] = "registers before setmaxnreg (40 producer / 232 consumer)"
        return facts
    return compile_only


def _src(f: str, *kernels: str) -> Source:
    return Source(f"cuda_src/{f}", kernels=kernels, host=())


SOURCES = {
    "simple": [_src("gemm_epilogue.cu", "gemm_simple_kernel")],
    "tiled": [_src("gemm_epilogue_tiled.cu", "gemm_tiled_kernel")],
    "ws": [_src("gemm_epilogue_ws.cu", "gemm_ws_kernel")],
    "splitk": [_src("gemm_epilogue_ws.cu", "gemm_ws_kernel"), _src("gemm_epilogue_splitk.cu", "gemm_splitk_reduce_kernel")],
    "pingpong": [_src("gemm_epilogue_pingpong.cu", "gemm_pingpong_kernel")],
}


def sources(path: str, hosts) -> list:
    """A row's Sources: the default's derived from its planner (harness.planned: the kernels
    dispatch.plan launches over the suites' cases, the staging copies included); else the path's
    kernels; then ``hosts`` (the launcher)."""
    if path == "auto":
        return planned(dispatch.plan, "gemm_epilogue", hosts)
    return SOURCES[path] + list(hosts)

DESCRIPTIONS = {
    "auto": "planner's rules: small M tiled mma.sync + split-K filling the SMs' resident CTAs, ping-pong where "
            "TMA can read A and B (C by TMA or plain 16-byte stores), ws + split-K when tiles leave SMs idle, A / B "
            "rows TMA cannot read staged to 16-byte rows where that models faster than tiled mma.sync (tile rows by "
            "SM load), GELU by ex2.approx",
    "simple": "teaching twin: 16 x 16 shared-memory tiles, one output per thread, FMA, any shape",
    "tiled": "mma.sync m16n8k16 + ldmatrix + 4-stage cp.async, 128x128x32, any shape and alignment",
    "ws": "Hopper: TMA 4-stage ring + warp-specialised wgmma 128x256x64, persistent, fused bias+act",
    "pingpong": "Hopper ping-pong: 2 consumer WGs on alternating 128x128x64 tiles, 5-stage TMA ring, "
                "TMA-store epilogue overlapping the other WG's wgmma, persistent, fused bias+act",
    "splitk": "Hopper ws kernel 128x128 with K split across CTAs (fp32 partials in a workspace), then one "
              "reduction kernel applies bias + activation",
}
ROWS = (("auto", "gemm_epilogue"), ("simple", "gemm_epilogue_simple"), ("tiled", "gemm_epilogue_tiled"),
        ("ws", "gemm_epilogue_ws"), ("pingpong", "gemm_epilogue_pingpong"),
        ("splitk", "gemm_epilogue_splitk"))

for _path, _name in ROWS:
    register(problem="gemm_epilogue", layer=LAYER, name=_name, description=DESCRIPTIONS[_path],
             sources=sources(_path, LAUNCHER), devices=("cuda",), available=available,
             supports=_supports(_path), compile_only=_compile_only(_path))(_prepare(_path))
