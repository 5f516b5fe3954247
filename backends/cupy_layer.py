"""CuPy adapter: the SAME ``cuda_src/*.cu`` kernels compiled at run time by NVRTC (``cupy.RawModule``
with name expressions for the template instances) and launched from Python on torch's current
stream. Kernel lines are identical to the CUDA C++ rows by construction (the sources point at the
same kernels); host lines are the Python launcher below (the plan functions and ``_launch``),
which mirrors the C++ host dispatcher in ``cuda_src/softmax.cu`` / ``vector_add.cu``.

Rows: ``cupy:vector_add``, ``cupy:softmax`` (dispatcher, the route table of softmax.cu),
``cupy:softmax_warp``, ``cupy:softmax_block``, ``cupy:softmax_online``, ``cupy:softmax_rows``,
``cupy:softmax_smem``, ``cupy:softmax_split`` (cooperative launch through the driver API,
``_launch_split``). ``launch.info["compile_s"]`` is the NVRTC compile
(and module load) time of the first call of that instance in this process (CuPy's on-disk kernel
cache can make it short; ``info["cache"]`` says whether the cache is on).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from harness import Source, register
from harness.errors import Unsupported

from backends.cuda_layer import (CXX_TYPE, DESCRIPTIONS, HELPERS, KERNEL_OF, SOFTMAX_PATHS, SOFTMAX_ROWS,
                                 auto_kernels, case_plan, check_softmax, check_vector_add, row_stride,
                                 softmax_grid, softmax_routes, vector_add_grid, _softmax_supports, _va_plan)

ROOT = Path(__file__).resolve().parent.parent
CUDA_SRC = ROOT / "cuda_src"
_TYPE_OF = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}
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


# -- plans (Python mirror of the C++ host dispatchers) --------------------------------------------
SMEM_TARGET_SLICE = 65536   # kSmemTargetSlice in softmax.cu
SMEM_STATIC_RESERVE = 1024  # kSmemStaticReserve
ROWS_THREADS = 256          # kRowsThreads
SPLIT_THREADS = 512         # kSplitThreads (the default; 256 is the other instance)
SPLIT_CHUNK = 16384         # kSplitChunk
SPLIT_MIN_BLOCKS = 2        # kSplitMinBlocks
SPLIT_MAX_SPIN = 1 << 20    # the C++ launcher's default max_spin
H200_SMEM_OPTIN = 232448    # cudaDevAttrMaxSharedMemoryPerBlockOptin on H100/H200 (plans without a GPU)


def rows_min_blocks(es: int, vec: int, g: int) -> int:
    """CTAs per SM of a rows-kernel instance (its launch bound; ``rows_min_blocks`` in softmax.cu)."""
    return 3 if vec > 1 and (es == 2 or g <= 32) else 2


def _pow2_at_least(v: int) -> int:
    return 1 if v <= 1 else 1 << (v - 1).bit_length()


def _plan_path(path, p, M, N, es, cc_major, threads, ept, cluster, blocks_per_sm, sm_count, smem_optin):
    """Fill p for one concrete path; returns None or why the path cannot take the case
    (the same rules and messages as ``plan_path`` in softmax.cu)."""
    vec = p["vec"]
    p["path"] = path
    if path == "warp":
        if N > 1024:
            return f"N: the warp-per-row path takes N <= 1024, got {N}"
        p["chunks"] = _pow2_at_least(-(-N // (32 * vec)))
        p["threads"] = threads or 128
        p["rows_per_block"] = p["threads"] // 32
        p["grid"] = -(-M // p["rows_per_block"])
        args = (vec, p["chunks"])
    elif path == "block":
        if N > 32768:
            return f"N: the block-per-row path holds at most 32768 columns in registers, got {N}"
        e = ept or 32
        nt = (-(-N // e) + 31) // 32 * 32
        while nt > 1024 and e < 32:
            e *= 2
            nt = (-(-N // e) + 31) // 32 * 32
        e = max(e, vec)
        p["chunks"] = e // vec
        p["threads"] = threads or nt
        p["grid"] = M
        args = (vec, p["chunks"])
    elif path == "rows":
        if N > 32 * ROWS_THREADS:
            return f"N: the rows path holds a row in at most 256 threads x 32 elements: N <= 8192, got {N}"
        if ept not in (0, 32):
            raise ValueError(f"ept: the rows path uses 32 elements per thread, got {ept}")
        if threads not in (0, ROWS_THREADS):
            raise ValueError(f"threads: the rows path uses 256 threads per block, got {threads}")
        if not 0 <= blocks_per_sm <= 32:
            raise ValueError(f"blocks_per_sm: must be 0 (default 2 or 3) .. 32, got {blocks_per_sm}")
        p["chunks"] = 32 // vec
        p["groups"] = max(4, _pow2_at_least(-(-N // 32)))
        p["threads"] = ROWS_THREADS
        p["rows_per_block"] = ROWS_THREADS // p["groups"]
        p["blocks_per_sm"] = blocks_per_sm or rows_min_blocks(es, vec, p["groups"])
        need = -(-M // p["rows_per_block"])  # CTA-steps; balanced grid: equal steps for every CTA
        steps = -(-need // (sm_count * p["blocks_per_sm"]))
        p["grid"] = -(-need // steps)
        args = (vec, p["chunks"], p["groups"])
    elif path == "smem":
        cmax = 16 if cc_major >= 9 else 1
        if cluster not in (0, 1, 2, 4, 8, 16):
            raise ValueError(f"cluster: the smem path takes 0 (default), 1, 2, 4, 8 or 16, got {cluster}")
        if cluster > cmax:
            raise ValueError("cluster: thread-block clusters need compute capability 9.0 or newer")
        limit = (smem_optin or H200_SMEM_OPTIN) - SMEM_STATIC_RESERVE

        def slice_bytes(c):
            seg = -(-(-(-N // c)) // vec) * vec
            return -(-seg * es // 16) * 16

        cands = [k for k in (1, 2, 4, 8, 16) if k <= cmax]
        c = cluster or next((k for k in cands if slice_bytes(k) <= SMEM_TARGET_SLICE), 0) or \
            (cmax if slice_bytes(cmax) <= limit else 0)
        if not c:
            return (f"N: a row of {N * es} bytes does not fit {cmax} CTAs' shared memory "
                    f"({limit} bytes each)")
        if slice_bytes(c) > limit:
            return (f"cluster: {c} CTAs x {limit} bytes of shared memory cannot hold N = {N} "
                    f"({slice_bytes(c)} bytes per CTA)")
        p["cluster"] = c
        p["threads"] = threads or 512
        p["seg"] = -(-(-(-N // c)) // vec) * vec
        p["smem"] = slice_bytes(c)
        p["grid"] = M * c
        args = (vec, c)
    elif path == "split":
        if N <= 2 * SPLIT_CHUNK:
            return ("N: the split path takes rows longer than 32768 columns (the block path keeps shorter rows on "
                    f"chip in one block), got N = {N}")
        if threads not in (0, 256, 512):
            raise ValueError(f"threads: the split path takes 256 or 512 threads per block (0: 512), got {threads}")
        nt = threads or SPLIT_THREADS
        if ept not in (0, SPLIT_CHUNK // nt):
            raise ValueError(f"ept: the split path holds 16384 / threads = {SPLIT_CHUNK // nt} elements per thread, "
                             f"got {ept}")
        if cluster > 1:
            raise ValueError(f"cluster: the split path uses no clusters, got {cluster}")
        if not 0 <= blocks_per_sm <= 32:
            raise ValueError(f"blocks_per_sm: must be 0 (default 2) .. 32, got {blocks_per_sm}")
        c = -(-N // SPLIT_CHUNK)
        p["blocks_per_sm"] = blocks_per_sm or SPLIT_MIN_BLOCKS
        cap = (sm_count or 132) * p["blocks_per_sm"]
        if c > cap:
            return f"N: the split path needs C = {c} co-resident blocks per row (N = {N}), the device holds {cap}"
        p["parts"] = c
        p["chunks"] = SPLIT_CHUNK // nt // vec
        p["threads"] = nt
        p["seg"] = SPLIT_CHUNK
        p["grid"] = min(M * c, cap // c * c)
        args = (vec, nt)
    else:
        c = cluster
        if c == 16:
            raise ValueError("cluster: the online path takes 0 (default), 1, 2, 4 or 8, got 16")
        if not c:
            b = N * es
            c = 1 if b <= 65536 else 2 if b <= 2 * 65536 else 4 if b <= 4 * 65536 else 8
        if c > 1 and cc_major < 9:
            if cluster > 1:
                raise ValueError("cluster: thread-block clusters need compute capability 9.0 or newer")
            c = 1
        p["cluster"] = c
        p["threads"] = threads or 512
        seg = -(-N // c)
        p["seg"] = -(-seg // vec) * vec
        p["grid"] = M * c
        args = (vec, c)
    p["kernel"] = f"{KERNEL_OF[path]}<{p['ctype']}, {', '.join(map(str, args))}>"
    return None


def softmax_plan(path: str, M: int, N: int, aligned: bool, ctype: str, es: int, cc_major: int,
                 threads: int = 0, ept: int = 0, cluster: int = 0, blocks_per_sm: int = 0,
                 sm_count: int = 132, smem_optin: int = H200_SMEM_OPTIN) -> dict:
    """Path, template instance and launch shape; same rules as ``kl::softmax_plan`` (the "auto"
    route table is parsed from softmax.cu). ``sm_count``/``smem_optin`` default to an H200's."""
    if path not in SOFTMAX_PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(SOFTMAX_PATHS)}")
    if M < 1 or not 1 <= N < 2 ** 31 - 64:
        raise ValueError(f"M, N: need M >= 1 and 1 <= N < 2^31 - 64, got M={M}, N={N}")
    if cluster not in (0, 1, 2, 4, 8, 16):
        raise ValueError(f"cluster: must be 0 (default), 1, 2, 4, 8 or 16 (16: smem path), got {cluster}")
    base = {"path": path, "vec": 16 // es if aligned else 1, "chunks": 1, "threads": 128, "rows_per_block": 1,
            "cluster": 1, "seg": 0, "groups": 0, "blocks_per_sm": 0, "smem": 0, "parts": 0, "ctype": ctype}
    opts = (M, N, es, cc_major, threads, ept, cluster, blocks_per_sm, sm_count, smem_optin)
    if path != "auto":
        p = dict(base)
        why = _plan_path(path, p, *opts)
        if why:
            raise ValueError(why)
    else:
        why, p = f"no row of the route table takes N = {N}", None
        for max_n, route in softmax_routes():
            if max_n and N > max_n:
                continue
            q = dict(base)
            w = _plan_path(route, q, *opts)
            if w is None:
                p = q
                break
            why = w
        if p is None:
            raise ValueError(why)
    del p["ctype"]
    return p


def vector_add_plan(n: int, ctype: str, es: int, x_mis: int, y_mis: int, out_mis: int, sm_count: int,
                    blocks_per_sm: int = 3, grid: int = 0, block: int = 0) -> dict:
    """Same rules as ``kl::vector_add_plan``: x/y/out byte offsets modulo 16 decide the vector path."""
    same = x_mis == out_mis and y_mis == out_mis
    vec = 16 // es if same else 1
    head = min(((16 - out_mis) % 16) // es, n) if same else 0
    b, unroll = block or 256, 4
    nvec = (n - head) // vec
    full = max(1, -(-nvec // (b * unroll)))
    g = grid or min(full, sm_count * blocks_per_sm * 1024)
    return {"vec": vec, "head": head, "unroll": unroll, "block": b, "grid": g,
            "kernel": f"vector_add_kernel<{ctype}, {vec}, {unroll}>"}


# -- NVRTC modules ------------------------------------------------------------------------------
def _include_dirs() -> list[str]:
    import cupy

    dirs = [str(CUDA_SRC)]
    cands = []
    try:
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


def instances(cu: str) -> list[str]:
    """Every template instance the host plans can pick in ``cuda_src/<cu>`` (one NVRTC compile)."""
    out = []
    for t, es in (("float", 4), ("__half", 2), ("__nv_bfloat16", 2)):
        vecs = (1, 16 // es)
        if cu == "vector_add.cu":
            out += [f"vector_add_kernel<{t}, {v}, 4>" for v in vecs]
        else:
            for v in vecs:
                out += [f"softmax_warp_kernel<{t}, {v}, {c}>" for c in (1, 2, 4, 8, 16, 32) if c * v * 32 <= 1024]
                out += [f"softmax_block_kernel<{t}, {v}, {c}>" for c in (1, 2, 4, 8, 16, 32) if 8 <= c * v <= 32]
                out += [f"softmax_online_kernel<{t}, {v}, {c}>" for c in (1, 2, 4, 8)]
                out += [f"softmax_rows_kernel<{t}, {v}, {32 // v}, {g}>" for g in (4, 8, 16, 32, 64, 128, 256)]
                out += [f"softmax_smem_kernel<{t}, {v}, {c}>" for c in (1, 2, 4, 8, 16)]
                out += [f"softmax_split_kernel<{t}, {v}, {nt}>" for nt in (256, 512)]
    return out


def get_kernel(cu: str, kernel: str):
    """(cupy RawKernel, NVRTC compile + load seconds) for ``kernel`` in ``cuda_src/<cu>``.

    The first request compiles the whole file with every instance the plans can pick (one NVRTC
    run, name expressions for all of them); its time is what every instance of the file reports."""
    import cupy

    dev = cupy.cuda.Device().id
    key = (cu, dev)
    if key not in _modules:
        src = (CUDA_SRC / cu).read_text()
        opts = ("-std=c++17",) + tuple(f"-I{d}" for d in _include_dirs())
        names = [f"kl::{k}" for k in instances(cu)]
        t0 = time.perf_counter()
        try:
            mod = cupy.RawModule(code=src, options=opts, name_expressions=names, backend="nvrtc")
            mod.get_function(names[0])  # compiles (NVRTC) and loads the module here
        except Exception as e:
            raise RuntimeError(f"NVRTC compile of {cu} failed: {e}") from None
        _modules[key] = (mod, time.perf_counter() - t0, {})
    mod, dt, fns = _modules[key]
    if kernel not in fns:
        if kernel not in instances(cu):
            raise ValueError(f"kernel: {kernel} is not an instance compiled from {cu}")
        fns[kernel] = mod.get_function(f"kl::{kernel}")
    return fns[kernel], dt


def _launch(fn, grid: int, block: int, args: tuple, t: torch.Tensor, smem: int = 0) -> None:
    """Launch on torch's current stream of t's device (``smem``: dynamic shared memory bytes)."""
    import cupy

    with cupy.cuda.Device(t.device.index), \
            cupy.cuda.ExternalStream(torch.cuda.current_stream(t.device).cuda_stream, t.device.index):
        fn((int(grid),), (int(block),), args, shared_mem=int(smem))


def _facts(fn, compile_s: float, plan: dict) -> dict:
    info = {"compile_s": compile_s, "config": dict(plan),
            "cache": "off" if os.environ.get("CUPY_CACHE_IN_MEMORY") else "on (~/.cupy/kernel_cache)"}
    try:
        info["registers"] = int(fn.attributes["num_regs"])
        info["smem"] = int(fn.attributes["shared_size_bytes"])
        info["spills"] = int(fn.attributes["local_size_bytes"])  # local memory per thread (spills + stack)
    except Exception:
        pass
    return info


def _device_plan(x, out, path, threads=0, ept=0, cluster=0, blocks_per_sm=0) -> dict:
    M, N = x.shape
    es = x.element_size()
    sx, sy = row_stride(x), row_stride(out)
    aligned = x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0 and (
        M == 1 or ((sx * es) % 16 == 0 and (sy * es) % 16 == 0))
    key = ("dev", x.device.index)
    if key not in _state:
        props = torch.cuda.get_device_properties(x.device)
        _state[key] = (props.major, props.multi_processor_count,
                       int(getattr(props, "shared_memory_per_block_optin", 0)) or H200_SMEM_OPTIN)
    cc, sms, optin = _state[key]
    return softmax_plan(path, M, N, aligned, _TYPE_OF[x.dtype], es, cc, threads, ept, cluster, blocks_per_sm,
                        sm_count=sms, smem_optin=optin)


def _smem_attributes(fn, plan: dict) -> None:
    """Dynamic shared memory above 48 KiB needs an opt-in; 16-CTA clusters the non-portable flag."""
    # The limit is per function and only ever raised (as the C++ launcher does): lowering it for a
    # small row would make a later launch of a larger slice through the same function invalid.
    key = ("attr", id(fn))  # fn: one RawKernel per (instance, device), see get_kernel
    if _state.get(key, -1) >= int(plan["smem"]):
        return
    fn.max_dynamic_shared_size_bytes = max(int(plan["smem"]), _state.get(key, 0))
    fn.preferred_shared_memory_carveout = 100  # all shared: 3 CTAs of 64 KiB per SM
    if plan["cluster"] > 8:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(fn.kernel.ptr, 14, 1)  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    _state[key] = max(int(plan["smem"]), _state.get(key, 0))


def _split_slots(device: torch.device, n: int) -> torch.Tensor:
    """The split path's slot workspace (int64, one per unit), cached per device and grown on demand;
    zeroed on torch's current stream before every launch (``_launch_split``)."""
    key = ("slots", device.index)
    buf = _state.get(key)
    if buf is None or buf.numel() < n:
        buf = _state[key] = torch.empty(n, dtype=torch.int64, device=device)
    return buf[:n]


def _launch_split(fn, p: dict, x, out, M: int, N: int, sx: int, sy: int, max_spin: int = -1) -> None:
    """Cooperative launch of softmax_split_kernel (cuLaunchCooperativeKernel from the driver API:
    the NVRTC module is the ordinary one, no -rdc needed since the kernel uses no grid.sync). The
    grid is refused before launching when the instance's occupancy cannot hold it at once."""
    import ctypes

    import cupy
    from cupy_backends.cuda.api import driver, runtime

    if max_spin < -1:
        raise ValueError(f"max_spin: must be -1 (default 2^20 polls) or >= 0, got {max_spin}")
    dev = x.device.index
    with cupy.cuda.Device(dev):
        if not runtime.deviceGetAttribute(runtime.cudaDevAttrCooperativeLaunch, dev):
            raise ValueError(f"path: the split path needs cooperative launch, which device {dev} does not support")
        func = fn.kernel.ptr  # loads the module (compiled by get_kernel)
        occ = driver.occupancyMaxActiveBlocksPerMultiprocessor(func, p["threads"], 0)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        if p["grid"] > occ * sms:
            raise ValueError(f"blocks_per_sm: the split grid of {p['grid']} blocks ({p['blocks_per_sm']} per SM) "
                             f"cannot be co-resident: {p['kernel']} fits {occ} blocks of {p['threads']} threads "
                             f"per SM x {sms} SMs = {occ * sms}; refused, not launched")
        units = M * p["parts"]
        slots = _split_slots(x.device, units)
        slots.zero_()  # torch's current stream: the launch below is on the same stream
        vals = [ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(out.data_ptr()), ctypes.c_uint64(slots.data_ptr()),
                ctypes.c_int32(N), ctypes.c_int64(sx), ctypes.c_int64(sy), ctypes.c_int32(p["parts"]),
                ctypes.c_int64(units), ctypes.c_int32(SPLIT_MAX_SPIN if max_spin < 0 else max_spin)]
        params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        stream = torch.cuda.current_stream(x.device).cuda_stream
        driver.launchCooperativeKernel(func, int(p["grid"]), 1, 1, int(p["threads"]), 1, 1, 0, stream,
                                       ctypes.addressof(params))


def softmax(x, out=None, path: str = "auto", threads: int = 0, ept: int = 0, cluster: int = 0,
            blocks_per_sm: int = 0, max_spin: int = -1):
    """Row softmax through the NVRTC-compiled kernels; returns out."""
    import numpy as np

    if (why := available()):
        raise Unsupported(why)
    out = check_softmax(x, out)
    M, N = x.shape
    sx, sy = row_stride(x), row_stride(out)
    p = _device_plan(x, out, path, threads, ept, cluster, blocks_per_sm)
    fn, _ = get_kernel("softmax.cu", p["kernel"])
    if p["path"] == "split":
        _launch_split(fn, p, x, out, M, N, sx, sy, max_spin)
        return out
    xp, yp = np.uint64(x.data_ptr()), np.uint64(out.data_ptr())
    smem = 0
    if p["path"] in ("warp", "rows"):
        args = (xp, yp, np.int64(M), np.int32(N), np.int64(sx), np.int64(sy))
    elif p["path"] == "block":
        args = (xp, yp, np.int32(N), np.int64(sx), np.int64(sy))
    else:
        args = (xp, yp, np.int32(N), np.int64(sx), np.int64(sy), np.int32(p["seg"]))
        if p["path"] == "smem":
            import cupy

            with cupy.cuda.Device(x.device.index):
                _smem_attributes(fn, p)
            smem = p["smem"]
    _launch(fn, p["grid"], p["threads"], args, x, smem)
    return out


def vector_add(x, y, out=None):
    """out = x + y through the NVRTC-compiled kernel; returns out."""
    import numpy as np

    if (why := available()):
        raise Unsupported(why)
    out = check_vector_add(x, y, out)
    es = x.element_size()
    n = x.numel()
    if n == 0:
        return out
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    p = vector_add_plan(n, _TYPE_OF[x.dtype], es, x.data_ptr() % 16, y.data_ptr() % 16, out.data_ptr() % 16, sms)
    fn, _ = get_kernel("vector_add.cu", p["kernel"])
    p["grid"] = max(1, min(p["grid"], sms * _resident(fn, p["block"]) * 1024))
    args = (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.uint64(out.data_ptr()), np.int64(n),
            np.int64(p["head"]))
    _launch(fn, p["grid"], p["block"], args, x)
    return out


def _resident(fn, block: int) -> int:
    """Blocks per SM the registers allow (the grid is capped at 1024 such waves, as in C++)."""
    try:
        regs = max(1, int(fn.attributes["num_regs"]))
        return max(1, min(2048 // block, 65536 // (((regs * 32 + 255) // 256) * 256 * (block // 32))))
    except Exception:
        return 3


# -- registration --------------------------------------------------------------------------------
def _register_softmax(path: str, name: str):
    kernels = auto_kernels() if path == "auto" else (KERNEL_OF[path],)
    srcs = [Source("cuda_src/softmax.cu", kernels=kernels, host=()), HELPERS,
            Source("backends/cupy_layer.py", kernels=(), host=("softmax", "softmax_plan", "_launch", "get_kernel"))]

    supports = _softmax_supports(path)

    def compile_only(case):
        reason = supports(case)
        if reason:
            raise Unsupported(reason)
        return _compile_only_nvrtc("softmax.cu", case_plan(path, case))

    @register(problem="softmax", layer="cupy", name=name, description="NVRTC of cuda_src: " + DESCRIPTIONS[path],
              sources=srcs, devices=("cuda",), available=available, supports=supports,
              compile_only=compile_only, grid=lambda case: softmax_grid(case_plan(path, case), case.M, case.N))
    def prepare(case, inputs, out):
        (x,) = inputs
        if (why := available()):
            raise Unsupported(why)
        check_softmax(x, out)
        try:
            p = _device_plan(x, out, path)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        fn, compile_s = get_kernel("softmax.cu", p["kernel"])
        softmax(x, out, path)  # first launch (module already loaded) outside the timed region
        torch.cuda.synchronize(x.device)

        def launch():
            softmax(x, out, path)

        launch.info = _facts(fn, compile_s, p)
        return launch

    return prepare


for _path, _name in SOFTMAX_ROWS:
    _register_softmax(_path, _name)


def _compile_only_nvrtc(cu: str, plan: dict) -> dict:
    """ptxas facts of the NVRTC PTX (sm_90a) when NVRTC is here; no GPU needed."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:
        raise Unsupported(f"NVRTC (libnvrtc) not found, cannot compile here: {type(e).__name__}") from None
    from harness.ptxas import ptxas_info, summarize

    from backends.cuda_layer import demangle

    key = ("ptx", cu, plan["kernel"])
    if key not in _modules:
        src = (CUDA_SRC / cu).read_text()
        prog = nvrtc.createProgram(src, cu, [], [])
        nvrtc.addNameExpression(prog, f"kl::{plan['kernel']}")
        opts = ["-std=c++17", "-arch=compute_90a"] + [f"-I{d}" for d in _include_dirs_nogpu()]
        t0 = time.perf_counter()
        try:
            nvrtc.compileProgram(prog, opts)
        except Exception as e:
            raise RuntimeError(f"NVRTC compile of {cu} failed: {e}: {nvrtc.getProgramLog(prog)[:2000]}") from None
        dt = time.perf_counter() - t0
        ptx = nvrtc.getPTX(prog)
        ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
        _modules[key] = (ptx, dt)
    ptx, dt = _modules[key]
    per = {demangle(k): v for k, v in ptxas_info(ptx.rstrip("\x00"), "sm_90a").items()}
    facts = summarize({k: v for k, v in per.items() if k == plan["kernel"]} or per)
    facts.update(compile_s=dt, config=plan, arch="sm_90a", facts_from="NVRTC PTX + ptxas -v")
    return facts


def _include_dirs_nogpu() -> list[str]:
    dirs = [str(CUDA_SRC)]
    for d in ("/usr/local/cuda/include", "/usr/local/cuda/include/cccl"):
        if os.path.isdir(d):
            dirs.append(d)
    return dirs


def _va_compile_only(case):
    return _compile_only_nvrtc("vector_add.cu", _va_plan(case))


@register(problem="vector_add", layer="cupy", name="vector_add",
          description="NVRTC of cuda_src/vector_add.cu: grid-stride, 16-byte loads, scalar head/tail",
          sources=[Source("cuda_src/vector_add.cu", kernels=("vector_add_kernel",), host=()), HELPERS,
                   Source("backends/cupy_layer.py", kernels=(), host=("vector_add", "vector_add_plan",
                                                                        "_launch", "get_kernel"))],
          devices=("cuda",), available=available, compile_only=_va_compile_only,
          grid=lambda case: vector_add_grid(_va_plan(case), case.N))
def prepare_vector_add(case, inputs, out):
    x, y = inputs
    if (why := available()):
        raise Unsupported(why)
    check_vector_add(x, y, out)
    es = x.element_size()
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    p = vector_add_plan(x.numel(), _TYPE_OF[x.dtype], es, x.data_ptr() % 16, y.data_ptr() % 16,
                        out.data_ptr() % 16, sms)
    fn, compile_s = get_kernel("vector_add.cu", p["kernel"])
    vector_add(x, y, out)
    torch.cuda.synchronize(x.device)

    def launch():
        vector_add(x, y, out)

    launch.info = _facts(fn, compile_s, p)
    return launch
