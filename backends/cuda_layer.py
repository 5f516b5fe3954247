"""CUDA C++ adapter: the pybind11 module ``kl_cuda`` built by CMake from ``cuda_src/``.

The planner is ``cuda_src/dispatch.py`` (one for this layer and for the NVRTC rows of
``backends/cupy_layer.py``). ``prepare`` plans once for the real tensors (pointers, strides,
alignment, the device), allocates the plan's workspaces, sets its function attributes, packs the
kernel arguments and builds a ``kl_cuda.Launch``; ``launch()`` is one call into the module with
torch's current stream, so a CUDA-graph capture records it.

Rows: ``cuda:vector_add`` (default) and ``cuda:vector_add_simple`` (twin); ``cuda:softmax``
(default: the planner's rules), ``cuda:softmax_simple`` and the variants ``cuda:softmax_warp``,
``_block``, ``_rows``, ``_online``, ``_smem``, ``_split``. The GEMM rows live in
``backends/cuda_gemm.py`` (same helpers).

Without a GPU the rows run nothing, but ``compile_only(case)`` returns the ``ptxas -v`` facts
(registers, spills, shared memory) of the exact instance the case would launch, read from the build
log (``kl_cuda_ptxas.log``, sm_90a), or from ``nvcc -cubin -arch=sm_90a`` of the ``.cu`` when the
module was not built here.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from cuda_src import dispatch
from harness import Source, planned, register
from harness.errors import Unsupported
from kltools.loc_marks import compile_step

ROOT = Path(__file__).resolve().parent.parent
ARCH = "sm_90a"
DTYPE_NAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
DTYPE_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

_state: dict = {}


# -- the compiled module -----------------------------------------------------------------------
@compile_step
def _load():
    """(kl_cuda module, None) or (None, reason)."""
    if "mod" in _state:
        return _state["mod"]
    mod, why = None, None
    try:
        build = importlib.import_module("kl_cuda_build")
    except ImportError:
        build = None
        why = ("not built: the kl_cuda_build marker is missing (install the project with "
               "`pip install -e .` so that CMake builds cuda_src/)")
    if build is not None and not build.BUILT:
        why = build.REASON or "not built"
    if why is None:
        try:
            mod = importlib.import_module("kl_cuda")
        except Exception as e:
            why = f"kl_cuda does not import: {type(e).__name__}: {e}"
    if mod is not None and not hasattr(mod, "Launch"):
        mod, why = None, "kl_cuda predates the generic launcher (rebuild: pip install -e .)"
    _state["mod"] = (mod, why)
    return mod, why


def available() -> str | None:
    """None when the module is built and imports; else why not. (A missing GPU is not a reason
    here: the rows then run ``compile_only`` on the CPU.)"""
    return _load()[1]


def module():
    mod, why = _load()
    if mod is None:
        raise Unsupported(f"CUDA C++ layer {why}")
    return mod


def device(index: int) -> dispatch.Device:
    """The planner's view of CUDA device ``index`` (cached)."""
    key = ("dev", index)
    if key not in _state:
        mod = module()
        d = mod.device_info(index)
        sm90a = False
        if tuple(d["cc"]) == (9, 0):  # the sm_90a cubin runs (not compute_80 PTX JIT-compiled instead)
            a = mod.attributes(mod.kernel("gemm_ws_kernel<true, 256>"), index)
            sm90a = a["ptx_version"] >= 90
        _state[key] = dispatch.Device(sms=d["sms"], cc=tuple(d["cc"]), smem_optin=d["smem_optin"],
                                      smem_per_sm=d["smem_per_sm"], cooperative=d["cooperative"], sm90a=sm90a,
                                      clusters=sm90a)  # elsewhere the compute_80 PTX runs
    return _state[key]


def _stream_fn():
    """A zero-argument-cheap getter of torch's current raw stream handle on a device index."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


def build_launch(mod, launches: dispatch.Launches, pointers: dict, dev_index: int, dtype_code: int):
    """(launch, keep): the module's Launch for a plan, with its workspaces allocated and function
    attributes set; ``keep`` holds the workspace tensors alive as long as the launch."""
    keep = {}
    ptrs = dict(pointers)
    for name, nbytes in launches.workspace.items():
        t = torch.zeros(max(int(nbytes), 1), dtype=torch.uint8, device=f"cuda:{dev_index}")
        keep[name] = t
        ptrs[name] = t.data_ptr()

    def encode(ptr, rows, cols, ld, box_rows, box_cols, outer=()):
        return mod.encode_tma(ptr, dtype_code, rows, cols, ld, box_rows, box_cols, list(outer))

    steps = []
    for p in launches.plans:
        fn = mod.kernel(p.kernel)
        key = ("attr", fn, dev_index)
        want = (p.max_dynamic_smem, p.carveout, p.nonportable_cluster)
        done = _state.get(key, (0, -1, False))
        if want[0] > done[0] or (want[1] >= 0 and want[1] != done[1]) or (want[2] and not done[2]):
            mod.set_attributes(fn, dev_index, max(want[0], done[0]), want[1], want[2])
            _state[key] = (max(want[0], done[0]), want[1] if want[1] >= 0 else done[1], want[2] or done[2])
        blob, offsets = dispatch.pack(p, ptrs, encode)
        # compile-time cluster dims need no launch attribute; a runtime cluster does
        cl = p.cluster if p.cluster_launch else 1
        zero = [(ptrs[z], launches.workspace[z]) for z in p.zero]
        steps.append((fn, p.grid, p.block, p.smem, cl, p.cooperative, blob, offsets, zero))
    return mod.Launch(dev_index, steps), keep


def make_launcher(mod, launches: dispatch.Launches, pointers: dict, dev_index: int, dtype_code: int):
    """The zero-argument launch of a prepared plan: one call into the module on torch's stream."""
    run, keep = build_launch(mod, launches, pointers, dev_index, dtype_code)
    stream = _stream_fn()

    def launch():
        run(stream(dev_index))

    launch.keep = keep  # the workspaces live as long as the launch
    return launch


# -- ptxas facts -------------------------------------------------------------------------------
_MANGLED = re.compile(r"_ZN2kl(\d+)")
_TYPES = {"f": "float", "6__half": "__half", "13__nv_bfloat16": "__nv_bfloat16"}


def demangle(name: str) -> str:
    """``_ZN2kl19softmax_warp_kernelIfLi4ELi8EEEv...`` -> ``softmax_warp_kernel<float, 4, 8>``
    (the instances of this layer's own kernels; anything else is returned unchanged)."""
    m = _MANGLED.match(name)
    if not m:
        return name
    i = m.end()
    n = int(m.group(1))
    base = name[i:i + n]
    i += n
    if not name.startswith("I", i):
        return base
    i += 1
    args = []
    while i < len(name) and name[i] != "E":
        for code, tname in _TYPES.items():
            if name.startswith(code, i):
                args.append(tname)
                i += len(code)
                break
        else:
            mb = re.match(r"Lb([01])E", name[i:])
            mi = re.match(r"Li(-?\d+)E", name[i:])
            if mb:
                args.append("true" if mb.group(1) == "1" else "false")
                i += mb.end()
            elif mi:
                args.append(mi.group(1))
                i += mi.end()
            else:
                return name
    return f"{base}<{', '.join(args)}>"


def parse_log(text: str, arch: str = ARCH) -> dict[str, dict]:
    """Per-kernel facts for one arch from an nvcc ``-Xptxas -v`` log (both archs are in it)."""
    from harness.ptxas import parse_ptxas_log

    keep, on = [], False
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '[^']+' for '(\w+)'", line)
        if m:
            on = m.group(1) == arch
        elif "Function properties for" in line and not on:
            continue
        if on:
            keep.append(line)
    return {demangle(k): v for k, v in parse_ptxas_log("\n".join(keep)).items()}


def _log_path() -> Path | None:
    try:
        build = importlib.import_module("kl_cuda_build")
    except ImportError:
        return None
    p = Path(build.__file__).parent / getattr(build, "PTXAS_LOG", "kl_cuda_ptxas.log")
    return p if p.is_file() and getattr(build, "BUILT", False) else None


def nvcc() -> str | None:
    for cand in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.exists(cand):
            return cand
    return None


NVCC_FLAGS = ("-std=c++17", "--ftz=true", "-lineinfo")  # the device flags of CMakeLists.txt


def _nvcc_facts(src: str) -> dict[str, dict]:
    """ptxas facts of every instance of one kernel source compiled here for sm_90a (cached)."""
    gen = Path(tempfile.gettempdir()) / "kl_cuda_gen"
    dispatch.emit_instances(str(gen))
    unit = gen / (Path(src).stem + "_instances.cu")
    text = unit.read_bytes() + b"".join(p.read_bytes() for p in sorted((ROOT / "cuda_src").glob("*.cu*")))
    key = hashlib.sha1(text).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"kl_cuda_ptxas_{Path(src).stem}_{key}.log"
    if not cache.is_file():
        cc = nvcc()
        if cc is None:
            raise Unsupported("no ptxas facts: kl_cuda was not built here and nvcc is not on PATH")
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([cc, "-cubin", f"-gencode=arch=compute_90a,code={ARCH}", *NVCC_FLAGS, "-Xptxas=-v",
                                "-I", str(ROOT / "cuda_src"), str(unit), "-o", os.path.join(d, "k.cubin")],
                               capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc -cubin {src} failed: {r.stderr.strip()[:2000]}")
        cache.write_text(r.stderr + r.stdout)
    return parse_log(cache.read_text())


def ptxas_facts(src: str | None = None) -> dict[str, dict]:
    """{"softmax_warp_kernel<float, 4, 8>": {registers, spills, smem, ...}, ...} for sm_90a: the
    build log, or (not built here) nvcc of the source ``src`` that holds the wanted kernels."""
    if "facts" not in _state:
        log = _log_path()
        _state["facts"] = (parse_log(log.read_text()), f"build log {log.name} (nvcc -Xptxas -v)") if log else \
            ({}, f"nvcc -cubin -arch={ARCH} here")
        _state["facts_srcs"] = set()
    facts, origin = _state["facts"]
    if src is not None and not origin.startswith("build log") and src not in _state["facts_srcs"]:
        facts.update(_nvcc_facts(src))
        _state["facts_srcs"].add(src)
    return facts


def kernel_facts(kernel: str) -> dict:
    """One row's compile facts for one kernel instance (``harness.ptxas.summarize`` shape)."""
    from harness.ptxas import summarize

    src = dispatch.source_of(kernel)
    facts, origin = ptxas_facts(src), _state["facts"][1]
    if kernel not in facts and origin.startswith("build log"):
        # a kernel the installed module predates (its source is newer than the build): nvcc here
        facts, origin = _nvcc_facts(src), f"nvcc -cubin -arch={ARCH} here ({src} is newer than the build)"
    if kernel not in facts:
        raise Unsupported(f"no ptxas facts for {kernel} in {origin}")
    out = summarize({kernel: facts[kernel]})
    out.update(arch=ARCH, facts_from=origin, kernel=kernel)
    return out


def plan_facts(launches: dispatch.Launches) -> dict:
    """compile_only facts of a plan: its main kernel's ptxas facts, dynamic shared memory added."""
    facts = kernel_facts(launches.kernel)
    main = next((p for p in launches.plans if p.kernel == launches.kernel), None)
    if main is not None and main.smem:
        facts["smem"] = (facts.get("smem") or 0) + main.smem
    facts.update(compile_s=0.0, config=_config(launches), note="AOT: compiled by nvcc at install time")
    return facts


def launch_info(launches: dispatch.Launches, **extra) -> dict:
    """What a prepared launch carries as ``launch.info``: its plan and the ptxas facts of its
    (first) kernel; shared by the vector add, softmax and GEMM adapters."""
    info = {**extra, "compile_s": 0.0, "config": _config(launches)}
    if launches.plans:
        try:
            info.update({k: v for k, v in kernel_facts(launches.kernel).items() if k != "config"})
        except Unsupported as e:
            info["facts_note"] = str(e)
    return info


def _config(launches: dispatch.Launches) -> dict:
    out = {k: v for k, v in launches.info.items() if isinstance(v, (int, float, str, bool, tuple, list))}
    out["launches"] = [{"kernel": p.kernel, "grid": list(p.grid), "block": p.block, "smem": p.smem,
                        "cluster": p.cluster, "cooperative": p.cooperative} for p in launches.plans]
    if launches.workspace:
        out["workspace_bytes"] = dict(launches.workspace)
    return out


# -- validation (shared with backends/cupy_layer.py and backends/cuda_gemm.py) -------------------
def tensor(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in DTYPE_CODE:
        raise TypeError(f"{name}: dtype {t.dtype} is not float32, float16 or bfloat16")
    if t.device.type != "cuda":
        raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
    if t.data_ptr() % t.element_size():
        raise ValueError(f"{name}: address not aligned to its element size")
    return t


def check_vector_add(x, y, out):
    """Validate vector_add arguments; returns out (allocated when None)."""
    tensor(x, "x")
    tensor(y, "y")
    if y.dtype != x.dtype:
        raise TypeError(f"y: dtype {y.dtype} differs from x's {x.dtype}")
    if y.device != x.device:
        raise ValueError(f"y: on {y.device}, x on {x.device}")
    if y.shape != x.shape:
        raise ValueError(f"y: shape {tuple(y.shape)} differs from x's {tuple(x.shape)}")
    for name, t in (("x", x), ("y", y)):
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous (any start address is fine), got strides {t.stride()}")
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    tensor(out, "out")
    if out.dtype != x.dtype or out.device != x.device or out.shape != x.shape:
        raise ValueError(f"out: expected {tuple(x.shape)} {x.dtype} on {x.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if not out.is_contiguous():
        raise ValueError(f"out: must be contiguous, got strides {out.stride()}")
    return out


def check_softmax(x, out):
    """Validate softmax arguments (2-D, unit column stride, row stride >= N); returns out."""
    tensor(x, "x")
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D [M, N] tensor, got shape {tuple(x.shape)}")
    M, N = x.shape
    if M < 1 or N < 1:
        raise ValueError(f"x: M and N must be >= 1, got shape {tuple(x.shape)}")
    if N > 1 and x.stride(1) != 1:
        raise ValueError(f"x: columns must be contiguous (stride(1) == 1), got strides {x.stride()}")
    if M > 1 and x.stride(0) < N:
        raise ValueError(f"x: row stride {x.stride(0)} < N = {N} (overlapping rows)")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    tensor(out, "out")
    if out.dtype != x.dtype or out.device != x.device or tuple(out.shape) != (M, N):
        raise ValueError(f"out: expected ({M}, {N}) {x.dtype} on {x.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if N > 1 and out.stride(1) != 1:
        raise ValueError(f"out: columns must be contiguous, got strides {out.stride()}")
    if M > 1 and out.stride(0) < N:
        raise ValueError(f"out: row stride {out.stride(0)} < N = {N}")
    return out


def row_stride(t: torch.Tensor) -> int:
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def dev_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


# -- plans for tensors and for cases -------------------------------------------------------------
def softmax_launches(x, out, path: str, dev: dispatch.Device, **opts) -> dispatch.Launches:
    M, N = x.shape
    return dispatch.plan_softmax(path, M, N, DTYPE_NAME[x.dtype], row_stride(x), row_stride(out),
                                 x.data_ptr() % 16, out.data_ptr() % 16, dev, **opts)


def vector_add_launches(x, y, out, path: str, dev: dispatch.Device, **opts) -> dispatch.Launches:
    return dispatch.plan_vector_add(path, x.numel(), DTYPE_NAME[x.dtype], x.data_ptr() % 16, y.data_ptr() % 16,
                                    out.data_ptr() % 16, dev, **opts)


def case_softmax(path: str, case, dev: dispatch.Device = dispatch.H200, **opts) -> dispatch.Launches:
    """The plan a harness case gets on ``dev`` (default: an assumed H200; no GPU needed)."""
    from harness.problems.softmax import row_pad, start_offset

    layout = case.params.get("layout", "contiguous")
    es = dispatch.ESIZE[case.dtype]
    sx = case.N + row_pad(layout, case.N)
    return dispatch.plan_softmax(path, case.M, case.N, case.dtype, sx, case.N, (start_offset(layout) * es) % 16, 0,
                                 dev, **opts)


def case_vector_add(path: str, case, dev: dispatch.Device = dispatch.H200) -> dispatch.Launches:
    es = dispatch.ESIZE[case.dtype]
    k = int(case.params.get("misalign", 0))
    return dispatch.plan_vector_add(path, case.N, case.dtype, (k * es) % 16, (k * es) % 16, 0, dev)


# -- public wrappers (tests, tune scripts) --------------------------------------------------------
def vector_add(x, y, out=None, path: str = "auto", **opts):
    """out = x + y with the CUDA C++ kernels (out allocated when None); returns out. ``opts``:
    unroll (tuning runs)."""
    out = check_vector_add(x, y, out)
    mod, di = module(), dev_index(x)
    plan = vector_add_launches(x, y, out, path, device(di), **opts)
    run, _ = build_launch(mod, plan, {"x": x.data_ptr(), "y": y.data_ptr(), "out": out.data_ptr()}, di,
                          DTYPE_CODE[x.dtype])
    run(torch.cuda.current_stream(x.device).cuda_stream)
    return out


def softmax(x, out=None, path: str = "auto", **opts):
    """Row softmax of a 2-D tensor with the CUDA C++ kernels; ``path`` one of dispatch.SOFTMAX_PATHS;
    ``opts``: threads, ept, cluster, blocks_per_sm, max_spin (0 = the planner's default)."""
    if path not in dispatch.SOFTMAX_PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(dispatch.SOFTMAX_PATHS)}")
    out = check_softmax(x, out)
    mod, di = module(), dev_index(x)
    plan = softmax_launches(x, out, path, device(di), **opts)
    run, keep = build_launch(mod, plan, {"x": x.data_ptr(), "out": out.data_ptr()}, di, DTYPE_CODE[x.dtype])
    run(torch.cuda.current_stream(x.device).cuda_stream)
    if keep:  # workspaces must outlive the kernel: wait for it before they are freed
        torch.cuda.current_stream(x.device).synchronize()
    return out


# -- grid descriptions (python -m harness grid) ----------------------------------------------------
def softmax_grid(plan: dispatch.Launches, M: int, N: int) -> dict:
    info = plan.info
    p = plan.plans[0]
    g = p.grid[0]
    ids = sorted({0, 1, 2, max(g - 3, 0), max(g - 2, 0), g - 1} & set(range(g)))
    progs = []
    for b in ids:
        path = info["path"]
        if path == "warp":
            rpb = info["rows_per_block"]
            r0, r1 = b * rpb, min(b * rpb + rpb, M) - 1
            covers, kept = f"rows {r0}..{r1} (one warp each), columns 0..{N - 1}", (r1 - r0 + 1) * N
            lanes = (r1 - r0 + 1) * 32 * info["chunks"] * info["vec"]
        elif path in ("block", "simple"):
            covers, kept = f"row {b}, columns 0..{N - 1}", N
            lanes = p.block * info.get("chunks", 1) * info["vec"] if path == "block" else N
        elif path == "split":
            c, seg = info["parts"], info["seg"]
            units = list(range(b, M * c, g))
            first = f"row {b // c}, columns {(b % c) * seg}..{min((b % c + 1) * seg, N) - 1}"
            covers = (f"units {b}, {b} + {g}, ... ({len(units)} rounds; unit u = chunk u % {c} of row u // {c}); "
                      f"first: {first}")
            kept = sum(min(seg, N - (u % c) * seg) for u in units)
            lanes = len(units) * p.block * info["chunks"] * info["vec"]
        elif path == "rows":
            rpb, step = info["rows_per_block"], g * info["rows_per_block"]
            r0 = b * rpb
            nrows = sum(min(rpb, max(0, M - s0)) for s0 in range(r0, M, step))
            covers = (f"rows {r0}..{r0 + rpb - 1}, then every {step} rows ({info['groups']} threads per row, "
                      f"next rows prefetched), columns 0..{N - 1}")
            kept = nrows * N
            lanes = -(-nrows // rpb) * rpb * info["groups"] * 32 if nrows else 0
        else:  # smem, online
            c, seg = info["cluster"], info["seg"]
            r, k = divmod(b, c)
            c0, c1 = k * seg, min((k + 1) * seg, N)
            covers = (f"row {r}, columns {c0}..{c1 - 1} (cluster rank {k} of {c})" + (
                f", {info['smem']} B slice in shared memory" if path == "smem" else "")) if c1 > c0 else \
                f"row {r}, no columns (cluster rank {k} of {c})"
            kept = max(c1 - c0, 0)
            lanes = kept
        progs.append({"pid": [b, 0, 0], "covers": covers, "kept": kept, "dropped": max(lanes - kept, 0)})
    block = {k: info[k] for k in ("threads", "vec", "chunks", "rows_per_block", "cluster", "groups", "smem",
                                  "blocks_per_sm", "parts") if info.get(k)}
    return {"grid": [g, 1, 1], "block": block, "programs": progs, "total": {"programs": g, "kept": M * N},
            "note": f"{p.kernel}; 'dropped' counts padded register slots (masked lanes)"}


def vector_add_grid(plan: dispatch.Launches, n: int) -> dict:
    info = plan.info
    p = plan.plans[0]
    g, b = max(p.grid[0], 1), p.block
    u, vec, head = info.get("unroll", 1), info.get("vec", 1), info.get("head", 0)
    nvec = (n - head) // vec
    per = b * u * vec
    progs = []
    for pid in sorted({0, 1, max(g - 2, 0), g - 1}):
        first = head + pid * per
        iters = max(0, -(-(nvec - pid * b * u) // (g * b * u))) if nvec > pid * b * u else 0
        covers = (f"elements {first}..{min(first + per, n) - 1} first, then every {g * per} "
                  f"({iters} grid-stride iteration(s))" if first < n else "no body elements")
        progs.append({"pid": [pid, 0, 0], "covers": covers, "kept": max(0, min(per, n - first)),
                      "dropped": max(0, per - max(0, n - first))})
    return {"grid": [g, 1, 1], "block": {"threads": b, "vec": vec, "unroll": u, "head": head},
            "programs": progs, "total": {"programs": g, "kept": n},
            "note": f"{p.kernel} (grid-stride; grid for 132 SMs when planned without a GPU)"}


# -- registration ----------------------------------------------------------------------------------
# (the helpers a kernel uses from common.cuh, softmax_common.cuh and ptx.cuh are reached through
# the .cu file's #include lines by the LOC counter: only those it calls are counted)
HOST = Source("backends/cuda_layer.py", kernels=(), host=("make_launcher", "build_launch"))
#: what every row of the layer runs to launch a plan: the binding above (Python) and the module's
#: generic launcher it calls (C++, bindings.cpp): the host column of every cuda:* row
LAUNCHER = [HOST, Source("cuda_src/bindings.cpp", kernels=(), host=("Launch", "lookup", "set_attributes", "encode_tma"))]

SOFTMAX_KERNEL = {"simple": ("softmax.cu", "softmax_simple_kernel"), "warp": ("softmax_warp.cu", "softmax_warp_kernel"),
                  "block": ("softmax_block.cu", "softmax_block_kernel"),
                  "rows": ("softmax_rows.cu", "softmax_rows_kernel"),
                  "online": ("softmax_online.cu", "softmax_online_kernel"),
                  "smem": ("softmax_smem.cu", "softmax_smem_kernel"),
                  "split": ("softmax_split.cu", "softmax_split_kernel")}
SOFTMAX_DESCRIPTIONS = {
    "auto": "planner's rules: warp / rows / block by bytes in flight per SM, long rows to smem (staged in the shared "
            "memory of a CTA or a cluster of CTAs, any alignment) or split (cooperative, aligned fp32 rows), online as "
            "the fallback",
    "simple": "teaching twin: one block per row, three sweeps (max, sum, write) over global memory",
    "warp": "one warp per row, row in registers, shuffle reductions, 16-byte loads when aligned",
    "block": "one block per row, row in registers, shuffle + shared-memory reductions",
    "online": "column tiles, running max/sum; cluster of CTAs per row merges via DSMEM (sm_90)",
    "rows": "persistent, several rows per CTA (G threads per row), next rows' loads issued before reducing",
    "smem": "the row staged raw in shared memory (bulk copy + mbarrier, any row alignment): a CTA a row while it "
            "fits, else a cluster of <= 16 CTAs a row merging (max, sum) through DSMEM: 1 read, 1 write",
    "split": "persistent cooperative grid, C blocks per row hold 16384-column chunks in registers, (max, sum) "
             "exchanged through 64-bit slots in global memory: 1 read, 1 write (N > 32768); few rows: 8192 / 4096-"
             "column chunks until the units cover the SMs (those chunks not yet run on a GPU)",
}
SOFTMAX_ROWS = (("auto", "softmax"), ("simple", "softmax_simple"), ("warp", "softmax_warp"),
                ("block", "softmax_block"), ("rows", "softmax_rows"), ("online", "softmax_online"),
                ("smem", "softmax_smem"), ("split", "softmax_split"))


def softmax_sources(path: str, host=None) -> list[Source]:
    """A path's kernel and the launcher's host code (``host``: the layer's LAUNCHER unless given);
    the default's (``auto``) derived from its planner (``harness.planned``: the kernels
    ``dispatch.plan`` launches over the suites' cases; the lines it ran are the plan column)."""
    hosts = LAUNCHER if host is None else (list(host) if isinstance(host, (list, tuple)) else [host])
    srcs = {p: Source(f"cuda_src/{f}", kernels=(k,), host=()) for p, (f, k) in SOFTMAX_KERNEL.items()}
    if path == "auto":   # derived: the kernels dispatch.plan chooses over the suites' cases
        return planned(dispatch.plan, "softmax", hosts)
    return [srcs[path], *hosts]


def softmax_supports(path: str):
    def supports(case):
        if path == "auto":
            return None  # the default takes every valid case
        try:
            case_softmax(path, case)
        except dispatch.Decline as e:
            return f"{path} path: {e}"
        return None
    return supports


def _softmax_compile_only(path):
    def compile_only(case):
        try:
            plan = case_softmax(path, case)
        except dispatch.Decline as e:
            raise Unsupported(f"{path} path: {e}") from None
        return plan_facts(plan)
    return compile_only


def _register_softmax(path: str, name: str):
    @register(problem="softmax", layer="cuda", name=name, description=SOFTMAX_DESCRIPTIONS[path],
              sources=softmax_sources(path), devices=("cuda",), available=available,
              supports=softmax_supports(path), compile_only=_softmax_compile_only(path),
              grid=lambda case: softmax_grid(case_softmax(path, case), case.M, case.N))
    def prepare(case, inputs, out):
        (x,) = inputs
        mod = module()
        out_ = check_softmax(x, out)
        di = dev_index(x)
        try:
            plan = softmax_launches(x, out_, path, device(di))
        except dispatch.Decline as e:
            raise Unsupported(f"{path} path: {e}") from None
        launch = make_launcher(mod, plan, {"x": x.data_ptr(), "out": out_.data_ptr()}, di, DTYPE_CODE[x.dtype])
        launch.info = launch_info(plan)
        return launch

    return prepare


for _path, _name in SOFTMAX_ROWS:
    _register_softmax(_path, _name)


_VA_KERNELS = {"unmasked": Source("cuda_src/vector_add_unmasked.cu", kernels=("vector_add_unmasked_kernel",), host=())}
VA_SOURCES = {"simple": [Source("cuda_src/vector_add.cu", kernels=("vector_add_simple_kernel",), host=())]}


def va_sources(path: str, hosts) -> list:
    """The default's derived from its planner (harness.planned), the twin's kernel and ``hosts``."""
    return planned(dispatch.plan, "vector_add", hosts) if path == "auto" else [*VA_SOURCES[path], *hosts]


def _register_vector_add(path: str, name: str, description: str):
    @register(problem="vector_add", layer="cuda", name=name, description=description,
              sources=va_sources(path, LAUNCHER), devices=("cuda",), available=available,
              compile_only=lambda case: plan_facts(case_vector_add(path, case)),
              grid=lambda case: vector_add_grid(case_vector_add(path, case), case.N))
    def prepare(case, inputs, out):
        x, y = inputs
        mod = module()
        check_vector_add(x, y, out)
        di = dev_index(x)
        plan = vector_add_launches(x, y, out, path, device(di))
        launch = make_launcher(mod, plan, {"x": x.data_ptr(), "y": y.data_ptr(), "out": out.data_ptr()}, di,
                               DTYPE_CODE[x.dtype])
        launch.info = launch_info(plan)
        return launch

    return prepare


_register_vector_add("auto", "vector_add",
                     "grid-stride, 4 independent 16-byte loads per input per thread, scalar head/tail")
_register_vector_add("simple", "vector_add_simple", "teaching twin: one element per thread, grid-stride loop")
