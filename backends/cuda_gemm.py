"""CUDA C++ adapter for ``gemm_epilogue`` (kernels in ``cuda_src/gemm_epilogue.cu``).

Four rows:
- ``cuda:gemm_wgmma``: the Hopper path (sm_90a): TMA ring on mbarriers, warp-specialised wgmma,
  two consumer warpgroups cooperating on one 128 x 256 tile, bias + activation on the
  accumulators. Declines (with the reason) what TMA cannot take.
- ``cuda:gemm_pingpong``: Hopper, ping-pong: each consumer warpgroup owns a whole 128 x 128 tile
  and the two alternate, so one's epilogue (stmatrix -> shared memory -> TMA store) overlaps the
  other's wgmma mainloop. Same TMA conditions, plus a 16-byte aligned output with ldc % 8 == 0.
- ``cuda:gemm_pingpong_c2``: the ping-pong kernel in 2 x 1 thread-block clusters: the two CTAs of
  a pair take vertically adjacent tiles and each loads one half of the shared B tile, multicast
  into both (half the L2 -> SM traffic for B).
- ``cuda:gemm_mma``: the portable path (sm_80+): mma.sync + ldmatrix + cp.async ring; any shape.
- ``cuda:gemm``: the dispatcher the module exposes: Hopper when it can run, else portable. Which
  Hopper kernel it picks is ``DISPATCH_HOPPER`` below ("wgmma", "pingpong" or "pingpong_c2"; the environment
  variable ``KL_CUDA_GEMM_HOPPER`` overrides it for one run). A ping-pong pick falls back to
  wgmma when the output is not TMA-storable.

The compiled module is ``kl_cuda`` (built by CMake from ``cuda_src/``); its availability comes from
``backends.cuda_layer`` when that adapter exists. ``KL_CUDA_GEMM_MODULE=name`` points the adapter
at another build of the same bindings (``scripts/tune_cuda_gemm.py`` uses it on the GPU machine).
"""
from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from harness import Source, register
from harness.errors import Unsupported

LAYER = "cuda"
ROOT = Path(__file__).resolve().parent.parent
SRC = "cuda_src/gemm_epilogue.cu"
DTYPE_CODE = {torch.float16: 1, torch.bfloat16: 2}
ACT_CODE = {"none": 0, "relu": 1, "gelu": 2}

# The switch: which Hopper kernel `cuda:gemm` dispatches to. Flip to "pingpong" once a GPU run has
# verified it and timed it faster than "wgmma" (docs/perf-notes.md, CUDA C++ GEMM section).
HOPPER_KERNELS = ("wgmma", "pingpong", "pingpong_c2")
# "pingpong": fastest Hopper kernel at every bench shape of the 2026-11-29 H200 run
# (docs/results/h200-2026-11-29/gemm: 672 vs 585 TFLOP/s for wgmma at bf16 4096^3 relu+bias)
DISPATCH_HOPPER = os.environ.get("KL_CUDA_GEMM_HOPPER", "pingpong")
if DISPATCH_HOPPER not in HOPPER_KERNELS:
    raise ValueError(f"KL_CUDA_GEMM_HOPPER: expected one of {', '.join(HOPPER_KERNELS)}, got {DISPATCH_HOPPER!r}")

# Dynamic shared memory the launchers request (mirrors WgCfg<256>::SMEM and PP_SMEM in the .cu).
SMEM_WGMMA = 4 * 49152 + 2 * 4 * 8 + 1024
SMEM_PINGPONG = 5 * (16384 + 16384) + 2 * 32768 + (2 * 5 + 2) * 8 + 1024

_module_cache: dict = {}


# -- the compiled module -----------------------------------------------------------------------
def _load():
    """(module, None) or (None, reason)."""
    if "m" in _module_cache:
        return _module_cache["m"]
    name = os.environ.get("KL_CUDA_GEMM_MODULE")
    mod, why = None, None
    if name:
        try:
            mod = importlib.import_module(name)
        except Exception as e:
            why = f"KL_CUDA_GEMM_MODULE={name}: not importable: {type(e).__name__}: {e}"
    else:
        base = None
        try:
            base = importlib.import_module("backends.cuda_layer")
        except Exception:
            base = None  # the base CUDA adapter is optional for this one
        reason = getattr(base, "available", None)
        if callable(reason):
            try:
                why = reason()
            except Exception as e:
                why = f"cuda_layer availability check failed: {type(e).__name__}: {e}"
        if why is None and callable(getattr(base, "module", None)):
            try:
                mod = base.module()
            except Exception as e:
                why = f"kl_cuda not loadable: {type(e).__name__}: {e}"
        elif why is None:
            try:
                mod = importlib.import_module("kl_cuda")
            except Exception as e:
                why = f"kl_cuda not built/importable: {type(e).__name__}: {e}"
    if mod is not None and not hasattr(mod, "gemm_epilogue_wgmma"):
        mod, why = None, f"{mod.__name__} was built without cuda_src/gemm_epilogue.cu (no gemm_epilogue_* functions)"
    _module_cache["m"] = (mod, why)
    return mod, why


def _available() -> str | None:
    """None when the module is built; a missing GPU is no reason here (without one the rows run
    ``compile_only``: the ptxas facts for sm_90a), a GPU of the wrong generation is."""
    mod, why = _load()
    if mod is None:
        return why
    return None


def _available_wgmma() -> str | None:
    why = _available()
    if why or not torch.cuda.is_available():
        return why
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        return f"needs an sm_90 (Hopper) GPU for TMA + wgmma; this GPU is sm_{cap[0]}{cap[1]}"
    return None


def _available_pingpong() -> str | None:
    why = _available_wgmma()
    if why:
        return why
    mod, _ = _load()
    if not hasattr(mod, "gemm_epilogue_pingpong"):
        return f"{mod.__name__} predates the ping-pong kernel (rebuild from cuda_src/)"
    return None


def _available_mma() -> str | None:
    why = _available()
    if why or not torch.cuda.is_available():
        return why
    cap = torch.cuda.get_device_capability()
    if cap < (8, 0):
        return f"needs sm_80+ for bf16 mma.sync/cp.async; this GPU is sm_{cap[0]}{cap[1]}"
    return None


# -- supports ----------------------------------------------------------------------------------
def _supports_dtype(case) -> str | None:
    if case.dtype not in ("float16", "bfloat16"):
        return f"fp16/bf16 only (got {case.dtype})"
    return None


def _supports_wgmma(case) -> str | None:
    if (why := _supports_dtype(case)):
        return why
    if case.K % 8 or case.N % 8:
        return (f"TMA needs 16-byte aligned row strides (K % 8 == 0 and N % 8 == 0 for 16-bit); "
                f"K={case.K}, N={case.N} -> use cuda:gemm_mma or cuda:gemm")
    return None


# -- argument checks (names the argument) -------------------------------------------------------
def _check(case, inputs, out):
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
        if t.dim() != 2 or (t.numel() > 0 and t.stride(1) != 1):
            raise ValueError(f"{name}: rows must have unit inner stride (got strides {tuple(t.stride())})")
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
    if act not in ACT_CODE:
        raise ValueError(f"act: unknown activation {act!r}; choose from {', '.join(ACT_CODE)}")
    return a, b, bias, act


def _call_args(case, inputs, out):
    a, b, bias, act = _check(case, inputs, out)
    dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(a.device).cuda_stream
    return dict(a=a.data_ptr(), b=b.data_ptr(), bias=bias.data_ptr() if bias is not None else 0,
                c=out.data_ptr(), M=case.M, N=case.N, K=case.K,
                lda=max(a.stride(0), 1), ldb=max(b.stride(0), 1), ldc=max(out.stride(0), 1),
                dtype=DTYPE_CODE[a.dtype], act=ACT_CODE[act], has_bias=bias is not None,
                stream=stream, device=dev)


def _attrs(mod, dev, pick) -> dict:
    """launch.info facts from cudaFuncGetAttributes on the kernel this row launches."""
    try:
        allk = mod.gemm_kernel_attributes(dev)
    except Exception as e:  # facts are optional; the row still runs
        return {"facts_error": f"{type(e).__name__}: {e}"}
    k = allk.get(pick, {})
    return {"registers": k.get("registers"), "spills": k.get("local_bytes"),
            "smem": (k.get("static_smem") or 0) + (k.get("dynamic_smem") or 0),
            "kernels": {pick: k}}


def _kernel_key(path: str, case, args: dict) -> str:
    ty = "bf16" if case.dtype == "bfloat16" else "f16"
    if path == "wgmma":
        return f"gemm_wgmma_kernel<{ty},256>"
    if path in ("pingpong", "pingpong_c2"):
        return f"gemm_pingpong_kernel<{ty},{2 if path == 'pingpong_c2' else 1}>"
    vec = (case.K % 8 == 0 and case.N % 8 == 0 and args["lda"] % 8 == 0 and args["ldb"] % 8 == 0
           and args["a"] % 16 == 0 and args["b"] % 16 == 0)
    return f"gemm_mma_kernel<{ty},{'vec' if vec else 'gather'}>"


def _prepare(path: str):
    def prepare(case, inputs, out):
        mod, why = _load()
        if mod is None:
            raise Unsupported(why)
        args = _call_args(case, inputs, out)
        if path == "wgmma":
            reason = mod.gemm_wgmma_unsupported(**args)
            if reason is not None:
                raise Unsupported(reason)
            fn, taken = mod.gemm_epilogue_wgmma, "wgmma"
        elif path in ("pingpong", "pingpong_c2"):
            reason = mod.gemm_pingpong_unsupported(**args)
            if reason is not None:
                raise Unsupported(reason)
            args = dict(args, cluster_m=2 if path == "pingpong_c2" else 1)
            fn, taken = mod.gemm_epilogue_pingpong, path
        elif path == "mma":
            fn, taken = mod.gemm_epilogue_mma, "mma"
        else:
            hopper = DISPATCH_HOPPER
            args = dict(args, hopper=hopper)
            fn = mod.gemm_epilogue
            plain = {k: v for k, v in args.items() if k != "hopper"}
            if hopper != "wgmma" and mod.gemm_pingpong_unsupported(**plain) is None:
                taken = hopper
            elif mod.gemm_wgmma_unsupported(**plain) is None:
                taken = "wgmma"
            else:
                taken = "mma"

        def launch():
            fn(**args)

        # No warm-up launch here: the harness poisons `out` before prepare and warms up itself.
        info = {"path": taken, "config": dict(mod.gemm_config[taken]),
                "compile_s": 0.0}  # ahead of time: compiled when the module was built
        info.update(_attrs(mod, args["device"], _kernel_key(taken, case, args)))
        if path == "auto":
            info["dispatch_hopper"] = DISPATCH_HOPPER
        launch.info = info
        return launch
    return prepare


# -- compile_only: ptxas facts for sm_90a without a GPU -----------------------------------------
_ptx_cache: dict = {}
_ptxas_cache: dict = {}


def _kernels_ptx() -> tuple[str, float]:
    """PTX of cuda_src/gemm_epilogue.cu for compute_90a (nvcc), cached by source hash."""
    nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    if not os.path.exists(nvcc):
        raise Unsupported("nvcc not found: compile_only needs the CUDA toolkit")
    srcs = sorted((ROOT / "cuda_src").glob("gemm_*"))
    h = hashlib.sha256(b"".join(p.read_bytes() for p in srcs)).hexdigest()[:16]
    if h in _ptx_cache:
        return _ptx_cache[h]
    cache = Path(tempfile.gettempdir()) / "kl_cuda_gemm_ptx"
    cache.mkdir(exist_ok=True)
    ptx, meta = cache / f"{h}.ptx", cache / f"{h}.s"
    if not ptx.exists():
        t0 = time.perf_counter()
        r = subprocess.run([nvcc, "-std=c++17", "-O3", "-ptx", "-gencode", "arch=compute_90a,code=compute_90a",
                            str(ROOT / SRC), "-o", str(ptx) + ".tmp"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc -ptx failed: {r.stderr.strip()[:2000]}")
        os.replace(str(ptx) + ".tmp", ptx)
        meta.write_text(f"{time.perf_counter() - t0:.3f}")
    secs = float(meta.read_text()) if meta.exists() else None
    _ptx_cache[h] = (ptx.read_text(), secs)
    return _ptx_cache[h]


def _compile_only(path: str):
    def compile_only(case):
        from harness.ptxas import ptxas_info, summarize
        why = _supports_dtype(case) or (_supports_wgmma(case) if path in HOPPER_KERNELS else None)
        if why:
            raise Unsupported(why)
        ptx, secs = _kernels_ptx()
        key = hash(ptx)
        if key not in _ptxas_cache:  # one ptxas run per PTX text serves every row and case
            _ptxas_cache[key] = ptxas_info(ptx, "sm_90a")
        per = _ptxas_cache[key]
        bf = "Lb1E" if case.dtype == "bfloat16" else "Lb0E"
        taken = path
        if path == "auto":
            taken = DISPATCH_HOPPER if _supports_wgmma(case) is None else "mma"
        if taken == "wgmma":
            want = f"gemm_wgmma_kernelI{bf}Li256E"
        elif taken in ("pingpong", "pingpong_c2"):
            want = f"gemm_pingpong_kernelI{bf}Li{2 if taken == 'pingpong_c2' else 1}E"
        else:
            vec = "Lb1E" if (case.K % 8 == 0 and case.N % 8 == 0) else "Lb0E"
            want = f"gemm_mma_kernelI{bf}{vec}"
        picked = {k: v for k, v in per.items() if want in k}
        facts = summarize(picked)
        # dynamic shared memory the launcher requests (ptxas reports static only)
        dyn = {"wgmma": SMEM_WGMMA, "pingpong": SMEM_PINGPONG, "pingpong_c2": SMEM_PINGPONG}.get(taken, 65536)
        facts["smem"] = (facts.get("smem") or 0) + dyn
        facts.update({"compile_s": secs, "arch": "sm_90a", "path": taken,
                      "note": "registers before setmaxnreg (40 producer / 232 consumer)"
                      if taken in HOPPER_KERNELS else ""})
        return facts
    return compile_only


_SOURCES_WGMMA = (Source(SRC, kernels=("gemm_wgmma_kernel",),
                         host=("gemm_epilogue_wgmma", "gemm_wgmma_unsupported")),)
_SOURCES_PINGPONG = (Source(SRC, kernels=("gemm_pingpong_kernel",),
                            host=("gemm_epilogue_pingpong", "gemm_pingpong_unsupported")),)
_SOURCES_MMA = (Source(SRC, kernels=("gemm_mma_kernel",), host=("gemm_epilogue_mma",)),)
_SOURCES_AUTO = (Source(SRC, kernels=("gemm_wgmma_kernel" if DISPATCH_HOPPER == "wgmma" else "gemm_pingpong_kernel",
                                      "gemm_mma_kernel"), host=("gemm_epilogue_auto",)),)

register(problem="gemm_epilogue", layer=LAYER, name="gemm_wgmma",
         description="Hopper: TMA 4-stage ring + warp-specialised wgmma 128x256x64, persistent, fused bias+act",
         sources=_SOURCES_WGMMA, devices=("cuda",), available=_available_wgmma, supports=_supports_wgmma,
         compile_only=_compile_only("wgmma"))(_prepare("wgmma"))
register(problem="gemm_epilogue", layer=LAYER, name="gemm_pingpong",
         description="Hopper ping-pong: 2 consumer WGs on alternating 128x128x64 tiles, 5-stage TMA ring, "
                     "TMA-store epilogue overlapping the other WG's wgmma, persistent, fused bias+act",
         sources=_SOURCES_PINGPONG, devices=("cuda",), available=_available_pingpong, supports=_supports_wgmma,
         compile_only=_compile_only("pingpong"))(_prepare("pingpong"))
register(problem="gemm_epilogue", layer=LAYER, name="gemm_pingpong_c2",
         description="Hopper ping-pong in 2x1 clusters: as gemm_pingpong, each CTA of a pair loads half of "
                     "the shared B tile and TMA-multicasts it to both",
         sources=_SOURCES_PINGPONG, devices=("cuda",), available=_available_pingpong, supports=_supports_wgmma,
         compile_only=_compile_only("pingpong_c2"))(_prepare("pingpong_c2"))
register(problem="gemm_epilogue", layer=LAYER, name="gemm_mma",
         description="portable: mma.sync m16n8k16 + ldmatrix + 4-stage cp.async, 128x128x32, any shape",
         sources=_SOURCES_MMA, devices=("cuda",), available=_available_mma, supports=_supports_dtype,
         compile_only=_compile_only("mma"))(_prepare("mma"))
register(problem="gemm_epilogue", layer=LAYER, name="gemm",
         description=f"dispatcher: gemm_{DISPATCH_HOPPER} when TMA can take the shape on sm_90, else gemm_mma",
         sources=_SOURCES_AUTO, devices=("cuda",), available=_available_mma, supports=_supports_dtype,
         compile_only=_compile_only("auto"))(_prepare("auto"))
