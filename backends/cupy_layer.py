"""CuPy adapter: the SAME ``cuda_src/*.cu`` kernels compiled at run time by NVRTC (``cupy.RawModule``
with name expressions for the template instances) and launched through the CUDA driver API on
torch's current stream, from the SAME plans as the pybind11 rows (``cuda_src/dispatch.py``).

Kernel lines are identical to the CUDA C++ rows by construction; host lines are the launcher here
(``_Launcher``). NVRTC gets the device flags of the nvcc build (``NVRTC_FLAGS``; see CMakeLists.txt)
and the device's exact architecture (sm_90a on Hopper: wgmma, setmaxnreg).

Rows: ``cupy:vector_add``, ``cupy:vector_add_simple``, ``cupy:softmax`` and its twin and variants,
``cupy:gemm_epilogue`` and its twin and variants (TMA descriptors encoded through the driver's
``cuTensorMapEncodeTiled``); a plan with a runtime cluster (the planner's ``pingpong_c2`` path: a
launch attribute, which CuPy's driver API does not pass) declines. NVRTC compiles one kernel instance
at a time (``compile_instance``; sizes are arguments, so one cubin serves every shape of a plan),
kept on disk in the kltools cache; ``launch.info["compile_s"]`` is what this prepare spent compiling
or loading (0 for an instance this process already holds).
"""
from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import torch

from backends import cuda_gemm
from backends.cuda_layer import (DTYPE_CODE, SOFTMAX_DESCRIPTIONS, SOFTMAX_ROWS, _config,
                                 case_softmax, case_vector_add, check_softmax, check_vector_add, dev_index,
                                 softmax_grid, softmax_launches, softmax_sources, softmax_supports,
                                 vector_add_grid, vector_add_launches, va_sources)
from cuda_src import dispatch
from harness import Source, register
from harness.errors import Unsupported
from kltools.loc_marks import compile_step

ROOT = Path(__file__).resolve().parent.parent
CUDA_SRC = ROOT / "cuda_src"
# The nvcc build's device flags (CMakeLists.txt), and the device's exact architecture (nvrtc_options).
NVRTC_FLAGS = ("-std=c++17", "--ftz=true", "-lineinfo")
HOST = Source("backends/cupy_layer.py", kernels=(), host=("_Launcher",))
_modules: dict = {}
_state: dict = {}


# -- availability ------------------------------------------------------------------------------
def available() -> str | None:
    if "why" in _state:
        return _state["why"]
    why = None
    try:
        import cupy  # noqa: F401
        from cupy_backends.cuda.libs import nvrtc
    except Exception as e:
        why = f"cupy is not installed (pip install cupy-cuda13x): {type(e).__name__}: {e}"
    if why is None:
        try:
            nvrtc.getVersion()
        except Exception as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            why = f"NVRTC (libnvrtc) not found: {msg}"
    if why is None and not torch.cuda.is_available():
        why = "no CUDA GPU visible to torch: cupy kernels need one to launch"
    if why is None:
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                why = "no CUDA GPU visible to cupy"
        except Exception as e:
            why = f"cupy sees no CUDA device: {type(e).__name__}: {e}"
    _state["why"] = why
    return why


def _require():
    if (why := available()):
        raise Unsupported(why)


# -- NVRTC modules ------------------------------------------------------------------------------
def include_dirs() -> list[str]:
    """cuda_src and the CUDA headers (cuda_fp16.h, cuda_bf16.h, cooperative_groups.h); no GPU needed."""
    dirs = [str(CUDA_SRC)]
    cands = []
    try:
        import cupy

        cp = cupy.cuda.get_cuda_path()
        if cp:
            cands += [os.path.join(cp, "include"), os.path.join(cp, "include", "cccl")]
    except Exception:
        pass
    cands += ["/usr/local/cuda/include", "/usr/local/cuda/include/cccl"]
    for d in cands:
        if os.path.isdir(d) and d not in dirs:
            dirs.append(d)
    return dirs


def nvrtc_options(arch: str) -> list[str]:
    """NVRTC options for one architecture ("90a", "80"...): the nvcc build's flags (NVRTC_FLAGS) and
    ptxas's report (registers, spills: the compile facts of the cubin that runs)."""
    return list(NVRTC_FLAGS) + [f"-arch=sm_{arch}", "-Xptxas=-v"] + [f"-I{d}" for d in include_dirs()]


def device_arch(dev: int) -> str:
    """The architecture NVRTC targets for device ``dev``: sm_90a on Hopper (wgmma, setmaxnreg)."""
    major, minor = torch.cuda.get_device_capability(dev)
    return f"{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")


@compile_step
def _source_digest() -> bytes:
    """Every cuda_src file (a kernel's source and the headers it includes), read once a process."""
    if "digest" not in _state:
        import hashlib

        h = hashlib.sha256()
        for f in sorted(CUDA_SRC.glob("*.cu*")):
            h.update(f.name.encode() + f.read_bytes())
        _state["digest"] = h.digest()
    return _state["digest"]


@compile_step
def compile_instance(kernel: str, arch: str) -> dict:
    """One kernel instance (``softmax_rows_kernel<float, 4, 32, 8>``) compiled by NVRTC for
    ``sm_<arch>``: {"cubin", "lowered", "log", "compile_s", "cached"}. One compile per instance:
    sizes are kernel arguments, so every shape a plan sends to this instance runs the same cubin.
    Kept on disk (kltools cache ``nvrtc/``), keyed by the cuda_src sources, the instance, the
    architecture, the options and the NVRTC version; a process with no GPU (a compile-ahead
    worker) fills the entry the GPU's process loads. Needs libnvrtc, no GPU."""
    import base64
    import json

    from cupy_backends.cuda.libs import nvrtc

    from kltools.cache import cache_dir, key, write_atomic

    src = dispatch.source_of(kernel)
    opts = nvrtc_options(arch)
    k = key(_source_digest(), kernel, [o for o in opts if not o.startswith("-I")], tuple(nvrtc.getVersion()))
    path = cache_dir("nvrtc", f"{Path(src).stem}-{k[:24]}.json")
    t0 = time.perf_counter()
    try:
        entry = json.loads(path.read_text())
        return {**entry, "cubin": base64.b64decode(entry["cubin"]), "compile_s": time.perf_counter() - t0,
                "cached": True}
    except (OSError, ValueError, KeyError):
        pass
    prog = nvrtc.createProgram((CUDA_SRC / src).read_text(), src, [], [])
    try:
        nvrtc.addNameExpression(prog, f"kl::{kernel}")
        try:
            nvrtc.compileProgram(prog, opts)
        except Exception as e:
            raise RuntimeError(f"NVRTC compile of {kernel} ({src}) failed: {e}: "
                               f"{nvrtc.getProgramLog(prog)[:2000]}") from None
        entry = {"lowered": nvrtc.getLoweredName(prog, f"kl::{kernel}"), "log": nvrtc.getProgramLog(prog),
                 "arch": f"sm_{arch}"}
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    write_atomic(path, json.dumps({**entry, "cubin": base64.b64encode(cubin).decode()}))
    return {**entry, "cubin": cubin, "compile_s": time.perf_counter() - t0, "cached": False}


@compile_step
def get_kernel(kernel: str, dev: int | None = None):
    """(function handle, seconds this call spent compiling or loading it) for a planned instance:
    ``compile_instance`` for the device's exact architecture, loaded once per process and device."""
    import cupy

    dev = cupy.cuda.Device().id if dev is None else dev
    key = (kernel, dev)
    if key in _modules:
        return _modules[key][1], 0.0
    t0 = time.perf_counter()
    entry = compile_instance(kernel, device_arch(dev))
    with cupy.cuda.Device(dev):
        mod = cupy.cuda.function.Module()
        mod.load(entry["cubin"])
    _modules[key] = (mod, mod.get_function(entry["lowered"]))
    return _modules[key][1], time.perf_counter() - t0


def _encode_tma(dtype_code: int):
    """cuTensorMapEncodeTiled from libcuda (ctypes): the same descriptor kl_cuda.encode_tma builds."""
    lib = _state.get("libcuda")
    if lib is None:
        lib = _state["libcuda"] = ctypes.CDLL("libcuda.so.1")
        lib.cuTensorMapEncodeTiled.restype = ctypes.c_int

    def encode(ptr, rows, cols, ld, box_rows, box_cols, outer=()):
        raw = (ctypes.c_uint8 * 192)()  # the driver wants the CUtensorMap 64-byte aligned
        desc = ctypes.c_void_p((ctypes.addressof(raw) + 63) & ~63)
        rank = 2 + len(outer)       # outer: further (size, stride) dimensions, boxes of 1 (kl_cuda's too)
        dims = (ctypes.c_uint64 * rank)(cols, rows, *(n for n, _ in outer))
        strides = (ctypes.c_uint64 * (rank - 1))(ld * 2, *(st * 2 for _, st in outer))
        box = (ctypes.c_uint32 * rank)(box_cols, box_rows, *([1] * len(outer)))
        estr = (ctypes.c_uint32 * rank)(*([1] * rank))
        # CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6, BFLOAT16 = 9; INTERLEAVE_NONE = 0; SWIZZLE_128B = 3;
        # L2_PROMOTION_L2_256B = 3; FLOAT_OOB_FILL_NONE = 0
        r = lib.cuTensorMapEncodeTiled(desc, 9 if dtype_code == 2 else 6, rank, ctypes.c_void_p(ptr), dims, strides,
                                       box, estr, 0, 3, 3, 0)
        if r != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {r})")
        return ctypes.string_at(desc.value, 128)
    return encode


class _Launcher:
    """A prepared plan for the driver API: per step the function, launch shape, a ctypes copy of the
    packed arguments and its pointer array; calling it enqueues every step on torch's stream."""

    def __init__(self, launches: dispatch.Launches, pointers: dict, dev: int, dtype_code: int):
        import cupy
        from cupy_backends.cuda.api import driver

        self.dev, self.keep, self.steps = dev, {}, []
        ptrs = dict(pointers)
        for name, nbytes in launches.workspace.items():
            t = torch.zeros(max(int(nbytes), 1), dtype=torch.uint8, device=f"cuda:{dev}")
            self.keep[name] = t
            ptrs[name] = t.data_ptr()
        with cupy.cuda.Device(dev):
            for p in launches.plans:
                if p.cluster_launch:
                    raise Unsupported("a 2 x 1 cluster given as a launch attribute: CuPy's driver API has no "
                                      "cuLaunchKernelEx")
                fn, secs = get_kernel(p.kernel, dev)
                self.compile_s = getattr(self, "compile_s", 0.0) + secs
                func = fn.ptr
                # CU_FUNC_ATTRIBUTE_ MAX_DYNAMIC_SHARED_SIZE_BYTES = 8, PREFERRED_SHARED_MEMORY_CARVEOUT = 9,
                # NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14 (set once per function, only ever raised)
                key = ("attr", func)
                done = _state.get(key, 0)
                if p.max_dynamic_smem > done:
                    driver.funcSetAttribute(func, 8, p.max_dynamic_smem)
                    _state[key] = p.max_dynamic_smem
                if p.carveout >= 0:
                    driver.funcSetAttribute(func, 9, p.carveout)
                if p.nonportable_cluster:
                    driver.funcSetAttribute(func, 14, 1)
                blob, offsets = dispatch.pack(p, ptrs, _encode_tma(dtype_code))
                buf = ctypes.create_string_buffer(len(blob) + 64)
                base = (ctypes.addressof(buf) + 63) & ~63  # the packed offsets assume a 64-byte aligned blob
                ctypes.memmove(base, blob, len(blob))
                params = (ctypes.c_void_p * len(offsets))(*[base + o for o in offsets])
                zero = [(ptrs[z], launches.workspace[z]) for z in p.zero]
                self.steps.append((func, p.grid, p.block, p.smem, p.cooperative, buf, params,
                                   ctypes.addressof(params), zero))
        self._launch, self._coop = driver.launchKernel, driver.launchCooperativeKernel
        from cupy_backends.cuda.api import runtime

        self._memset = runtime.memsetAsync

    def __call__(self, stream: int) -> None:
        import cupy

        with cupy.cuda.Device(self.dev):
            for func, g, block, smem, coop, _buf, _params, params, zero in self.steps:
                if g[0] == 0:
                    continue
                for ptr, nbytes in zero:
                    self._memset(ptr, 0, nbytes, stream)
                if coop:
                    self._coop(func, g[0], g[1], g[2], block, 1, 1, smem, stream, params)
                else:
                    self._launch(func, g[0], g[1], g[2], block, 1, 1, smem, stream, params, 0)


def _make(launches: dispatch.Launches, pointers: dict, dev: int, dtype_code: int):
    run = _Launcher(launches, pointers, dev, dtype_code)
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
        (lambda i: torch.cuda.current_stream(i).cuda_stream)

    def launch():
        run(raw(dev))

    from kltools.cache import cache_dir

    info = {"compile_s": round(getattr(run, "compile_s", 0.0), 4), "config": _config(launches),
            "cache": str(cache_dir("nvrtc"))}
    if launches.plans:
        try:
            from cupy_backends.cuda.api import driver

            main = get_kernel(launches.kernel, dev)[0].ptr  # CU_FUNC_ATTRIBUTE_ NUM_REGS = 4,
            info["registers"] = driver.funcGetAttribute(4, main)  # SHARED_SIZE_BYTES = 1, LOCAL_SIZE_BYTES = 3
            info["smem"] = driver.funcGetAttribute(1, main)
            info["spills"] = driver.funcGetAttribute(3, main)
        except Exception:
            pass
    launch.info = info
    launch.keep = run
    return launch


def _device(dev: int) -> dispatch.Device:
    key = ("dev", dev)
    if key not in _state:
        props = torch.cuda.get_device_properties(dev)
        import cupy

        coop = bool(cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrCooperativeLaunch, dev))
        cc = (props.major, props.minor)
        _state[key] = dispatch.Device(sms=props.multi_processor_count, cc=cc,
                                      smem_optin=int(getattr(props, "shared_memory_per_block_optin", 0)) or 232448,
                                      smem_per_sm=int(getattr(props, "shared_memory_per_multiprocessor", 0)) or 233472,
                                      cooperative=coop, sm90a=cc == (9, 0),  # NVRTC compiles for this very GPU
                                      clusters=cc[0] >= 9)
    return _state[key]


# -- public wrappers (tests, tune scripts) --------------------------------------------------------
def softmax(x, out=None, path: str = "auto", **opts):
    """Row softmax through the NVRTC-compiled kernels; returns out."""
    _require()
    out = check_softmax(x, out)
    di = dev_index(x)
    plan = softmax_launches(x, out, path, _device(di), **opts)
    run = _Launcher(plan, {"x": x.data_ptr(), "out": out.data_ptr()}, di, DTYPE_CODE[x.dtype])
    run(torch.cuda.current_stream(x.device).cuda_stream)
    if run.keep:
        torch.cuda.current_stream(x.device).synchronize()
    return out


def vector_add(x, y, out=None, path: str = "auto", **opts):
    _require()
    out = check_vector_add(x, y, out)
    di = dev_index(x)
    plan = vector_add_launches(x, y, out, path, _device(di), **opts)
    _Launcher(plan, {"x": x.data_ptr(), "y": y.data_ptr(), "out": out.data_ptr()}, di,
              DTYPE_CODE[x.dtype])(torch.cuda.current_stream(x.device).cuda_stream)
    return out


# -- compile facts without a GPU -------------------------------------------------------------------
def compile_only_nvrtc(kernel: str, config: dict | None = None) -> dict:
    """ptxas facts of one instance compiled by NVRTC for sm_90a (NVRTC's own ptxas, ``-Xptxas=-v``:
    the facts come from the compile that builds the cupy rows, and fill the cache the GPU run
    loads on an sm_90a GPU); needs libnvrtc, no GPU."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:
        raise Unsupported(f"NVRTC (libnvrtc) not found, cannot compile here: {type(e).__name__}") from None
    from harness.ptxas import parse_ptxas_log, summarize

    from backends.cuda_layer import demangle

    entry = compile_instance(kernel, "90a")
    per = {demangle(k): v for k, v in parse_ptxas_log(entry["log"]).items()}
    if kernel not in per:
        raise Unsupported(f"NVRTC's ptxas log names no {kernel}")
    facts = summarize({kernel: per[kernel]})
    facts.update(compile_s=round(entry["compile_s"], 3), config=config or {}, arch="sm_90a", kernel=kernel,
                 facts_from="NVRTC -arch=sm_90a -Xptxas=-v")
    return facts


# -- registration --------------------------------------------------------------------------------
def _register_softmax(path: str, name: str):
    supports = softmax_supports(path)

    def compile_only(case):
        if (why := supports(case)):
            raise Unsupported(why)
        plan = case_softmax(path, case)
        return compile_only_nvrtc(plan.kernel, _config(plan))

    @register(problem="softmax", layer="cupy", name=name,
              description="NVRTC of cuda_src: " + SOFTMAX_DESCRIPTIONS[path],
              sources=softmax_sources(path, HOST), devices=("cuda",), available=available, supports=supports,
              compile_only=compile_only,
              grid=lambda case: softmax_grid(case_softmax(path, case), case.M, case.N))
    def prepare(case, inputs, out):
        (x,) = inputs
        _require()
        check_softmax(x, out)
        di = dev_index(x)
        try:
            plan = softmax_launches(x, out, path, _device(di))
        except dispatch.Decline as e:
            raise Unsupported(f"{path} path: {e}") from None
        return _make(plan, {"x": x.data_ptr(), "out": out.data_ptr()}, di, DTYPE_CODE[x.dtype])

    return prepare


for _path, _name in SOFTMAX_ROWS:
    _register_softmax(_path, _name)


def _register_vector_add(path: str, name: str, description: str):
    @register(problem="vector_add", layer="cupy", name=name, description="NVRTC of cuda_src: " + description,
              sources=va_sources(path, [HOST]), devices=("cuda",), available=available,
              compile_only=lambda case: compile_only_nvrtc(case_vector_add(path, case).kernel,
                                                           _config(case_vector_add(path, case))),
              grid=lambda case: vector_add_grid(case_vector_add(path, case), case.N))
    def prepare(case, inputs, out):
        x, y = inputs
        _require()
        check_vector_add(x, y, out)
        di = dev_index(x)
        plan = vector_add_launches(x, y, out, path, _device(di))
        return _make(plan, {"x": x.data_ptr(), "y": y.data_ptr(), "out": out.data_ptr()}, di, DTYPE_CODE[x.dtype])

    return prepare


_register_vector_add("auto", "vector_add", "grid-stride, 16-byte loads, scalar head/tail")
_register_vector_add("simple", "vector_add_simple", "teaching twin: one element per thread, grid-stride loop")


def _register_gemm(path: str, name: str):
    base = cuda_gemm._supports(path)

    def supports(case):
        return base(case)

    def compile_only(case):
        if (why := supports(case)):
            raise Unsupported(why)
        plan = cuda_gemm.case_gemm(path, case)
        return compile_only_nvrtc(plan.kernel, _config(plan))

    @register(problem="gemm_epilogue", layer="cupy", name=name, description="NVRTC of cuda_src: " +
              cuda_gemm.DESCRIPTIONS[path], sources=cuda_gemm.sources(path, [HOST]),
              devices=("cuda",), available=available, supports=supports, compile_only=compile_only)
    def prepare(case, inputs, out):
        _require()
        if (why := supports(case)) and path != "auto":
            raise Unsupported(why)
        a, b, bias, act = cuda_gemm.check_gemm(case, inputs, out)
        di = dev_index(a)
        try:
            plan = cuda_gemm.gemm_launches(path, case, a, b, bias, out, act, _device(di))
        except dispatch.Decline as e:
            raise Unsupported(str(e)) from None
        ptrs = {"a": a.data_ptr(), "b": b.data_ptr(), "bias": bias.data_ptr() if bias is not None else 0,
                "c": out.data_ptr()}
        return _make(plan, ptrs, di, DTYPE_CODE[a.dtype])

    return prepare


for _path, _name in cuda_gemm.ROWS:
    _register_gemm(_path, _name)
