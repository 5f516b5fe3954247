"""CUDA C++ adapter: the pybind11 module ``kl_cuda`` built by CMake from ``cuda_src/``.

Rows (problem / id): vector_add ``cuda:vector_add``; softmax ``cuda:softmax`` (the host
dispatcher; its route table is ``KL_SOFTMAX_ROUTES`` in ``cuda_src/softmax.cu``: warp per row for
N <= 1024, block per row up to 32768, split (persistent cooperative grid) above, online where split declines;
``KL_CUDA_SOFTMAX_ROUTE`` overrides it at run
time), ``cuda:softmax_warp``, ``cuda:softmax_block``, ``cuda:softmax_online``, ``cuda:softmax_rows``
(persistent multi-row, N <= 8192), ``cuda:softmax_smem`` (cluster, slice in shared memory: one HBM
read + one write), ``cuda:softmax_split`` (N > 32768: persistent cooperative grid, blocks of a
row exchange (max, sum) through 64-bit slots; the dispatcher's choice above 32768) (each path
on its own).
The GEMM rows live in ``backends/cuda_gemm.py``.

The module takes raw device pointers, sizes, strides (elements), a dtype code and the stream
handle; this file turns torch tensors into those after validating them (device, dtype, shape,
strides, alignment), raising ``TypeError``/``ValueError`` that names the argument. Without a GPU the
rows run nothing, but ``compile_only(case)`` returns the ``ptxas -v`` facts (registers, spills,
shared memory) of the exact template instance the case would launch, read from the build log
(``kl_cuda_ptxas.log``, sm_90a), or from ``nvcc -cubin -arch=sm_90a`` of the ``.cu`` when the module
was not built here.

Public Python API (torch tensors): ``vector_add(x, y, out=None)``, ``softmax(x, out=None,
path="auto")``; ``available()``; ``ptxas_facts()``.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from harness import Source, register
from harness.errors import Unsupported

ROOT = Path(__file__).resolve().parent.parent
ARCH = "sm_90a"
DTYPE_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
CXX_TYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
SOFTMAX_PATHS = ("auto", "warp", "block", "online", "rows", "smem", "split")
ROUTE_PATHS = ("warp", "block", "online", "rows", "smem", "split")

_state: dict = {}


# -- the dispatcher's route table (one table, in cuda_src/softmax.cu) ----------------------------
def softmax_routes(env: bool = True) -> list[tuple[int, str]]:
    """[(max_n, path), ...]: the ``KL_SOFTMAX_ROUTES`` table of ``cuda_src/softmax.cu`` (parsed from
    the file, so C++ and Python share one table), or, when ``env`` and the environment variable
    ``KL_CUDA_SOFTMAX_ROUTE`` is set ("1024:warp,32768:block,0:online"), that. A case goes to the
    first row with N <= max_n (0: any N) whose path can take it."""
    spec = os.environ.get("KL_CUDA_SOFTMAX_ROUTE", "") if env else ""
    if spec:
        rows = []
        for item in spec.split(","):
            if not item:
                continue
            num, _, path = item.partition(":")
            if not (num.isdigit() and len(num) < 12 and path in ROUTE_PATHS):
                raise ValueError(f"KL_CUDA_SOFTMAX_ROUTE: {item!r} is not max_n:path with path "
                                 "warp|block|online|rows|smem|split")
            rows.append((int(num), path))
        if not rows:
            raise ValueError(f"KL_CUDA_SOFTMAX_ROUTE: no max_n:path rows in {spec!r}")
        return rows
    if "routes" not in _state:
        text = (ROOT / "cuda_src" / "softmax.cu").read_text()
        body = text.split("// KL_SOFTMAX_ROUTES_BEGIN", 1)[1].split("// KL_SOFTMAX_ROUTES_END", 1)[0]
        _state["routes"] = [(int(n), p) for n, p in re.findall(r'\{\s*(\d+)\s*,\s*"(\w+)"\s*\}', body)]
    return list(_state["routes"])


# -- the compiled module -----------------------------------------------------------------------
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


# -- ptxas facts -------------------------------------------------------------------------------
_MANGLED = re.compile(r"_ZN2kl(\d+)")


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
    types = {"f": "float", "6__half": "__half", "13__nv_bfloat16": "__nv_bfloat16"}
    while i < len(name) and name[i] != "E":
        for code, tname in types.items():
            if name.startswith(code, i):
                args.append(tname)
                i += len(code)
                break
        else:
            mi = re.match(r"Li(-?\d+)E", name[i:])
            if not mi:
                return name
            args.append(mi.group(1))
            i += mi.end()
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
    return p if p.is_file() else None


def _nvcc() -> str | None:
    for cand in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.exists(cand):
            return cand
    return None


def _nvcc_facts(cu: str) -> dict[str, dict]:
    """ptxas facts of one .cu compiled here for sm_90a (cached by file content)."""
    path = ROOT / cu
    key = hashlib.sha1(path.read_bytes() + (ROOT / "cuda_src/common.cuh").read_bytes()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"kl_cuda_ptxas_{path.stem}_{key}.log"
    if not cache.is_file():
        nvcc = _nvcc()
        if nvcc is None:
            raise Unsupported("no ptxas facts: kl_cuda was not built here and nvcc is not on PATH")
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([nvcc, "-cubin", f"-gencode=arch=compute_90a,code={ARCH}", "-std=c++17", "-O3",
                                "-Xptxas=-v", "-I", str(ROOT / "cuda_src"), str(path), "-o",
                                os.path.join(d, "k.cubin")], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc -cubin {cu} failed: {r.stderr.strip()[:2000]}")
        cache.write_text(r.stderr + r.stdout)
    return parse_log(cache.read_text())


def ptxas_facts() -> dict[str, dict]:
    """{"softmax_warp_kernel<float, 4, 8>": {registers, spills, smem, ...}, ...} for sm_90a."""
    if "facts" not in _state:
        log = _log_path()
        if log is not None:
            facts, source = parse_log(log.read_text()), f"build log {log.name} (nvcc -Xptxas -v)"
        else:
            facts = {}
            for cu in ("cuda_src/vector_add.cu", "cuda_src/softmax.cu"):
                facts.update(_nvcc_facts(cu))
            source = f"nvcc -cubin -arch={ARCH} here"
        _state["facts"] = (facts, source)
    return _state["facts"][0]


def kernel_facts(kernel: str) -> dict:
    """One row's compile facts for one template instance (``harness.ptxas.summarize`` shape)."""
    from harness.ptxas import summarize

    facts = ptxas_facts()
    if kernel not in facts:
        raise Unsupported(f"no ptxas facts for {kernel} in {_state['facts'][1]}")
    out = summarize({kernel: facts[kernel]})
    out.update(arch=ARCH, facts_from=_state["facts"][1], kernel=kernel)
    return out


# -- validation (shared with backends/cupy_layer.py) ---------------------------------------------
def _tensor(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in DTYPE_CODE:
        raise TypeError(f"{name}: dtype {t.dtype} is not float32, float16 or bfloat16")
    if t.device.type != "cuda":
        raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
    return t


def check_vector_add(x, y, out):
    """Validate vector_add arguments; returns out (allocated when None)."""
    _tensor(x, "x")
    _tensor(y, "y")
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
    _tensor(out, "out")
    if out.dtype != x.dtype or out.device != x.device or out.shape != x.shape:
        raise ValueError(f"out: expected {tuple(x.shape)} {x.dtype} on {x.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if not out.is_contiguous():
        raise ValueError(f"out: must be contiguous, got strides {out.stride()}")
    return out


def check_softmax(x, out):
    """Validate softmax arguments (2-D, unit column stride, row stride >= N); returns out."""
    _tensor(x, "x")
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
    _tensor(out, "out")
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


def stream_of(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


# -- public wrappers -----------------------------------------------------------------------------
def vector_add(x, y, out=None, grid: int = 0, block: int = 0):
    """out = x + y with the CUDA C++ kernel (out allocated when None); returns out."""
    out = check_vector_add(x, y, out)
    module().vector_add(x.data_ptr(), y.data_ptr(), out.data_ptr(), x.numel(), DTYPE_CODE[x.dtype],
                        stream_of(x), x.device.index, grid, block)
    return out


def softmax(x, out=None, path: str = "auto", threads: int = 0, ept: int = 0, cluster: int = 0,
            blocks_per_sm: int = 0, max_spin: int = -1):
    """Row softmax of a 2-D tensor with the CUDA C++ kernels; ``path`` auto|warp|block|online|rows|smem|split
    (``cluster`` for online/smem, ``ept`` for block, ``blocks_per_sm`` for rows/split; 0 = default;
    ``max_spin`` for split: polls before a waiting block gives up and writes NaN, -1 = 2^20)."""
    if path not in SOFTMAX_PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(SOFTMAX_PATHS)}")
    out = check_softmax(x, out)
    M, N = x.shape
    module().softmax(path, x.data_ptr(), out.data_ptr(), M, N, row_stride(x), row_stride(out),
                     DTYPE_CODE[x.dtype], stream_of(x), x.device.index, threads, ept, cluster, blocks_per_sm,
                     max_spin)
    return out


# -- registration ----------------------------------------------------------------------------------
def _case_align(case):
    """(x rows 16-byte aligned, out rows aligned) for the harness's inputs of this case."""
    from harness.problems.softmax import row_pad, start_offset

    es = torch.empty((), dtype=case.torch_dtype).element_size()
    pad = row_pad(case.params.get("layout", "contiguous"), case.N)
    off = start_offset(case.params.get("layout", "contiguous")) * es
    one = case.M == 1
    return (one or ((case.N + pad) * es) % 16 == 0) and off % 16 == 0, one or (case.N * es) % 16 == 0


def case_plan(path: str, case, cc_major: int = 9, **opts) -> dict:
    """The plan a case gets (Python mirror of the C++ dispatcher; used without a GPU)."""
    from backends.cupy_layer import softmax_plan

    ax, ao = _case_align(case)
    return softmax_plan(path, case.M, case.N, ax and ao, CXX_TYPE[case.dtype],
                        torch.empty((), dtype=case.torch_dtype).element_size(), cc_major, **opts)


def _softmax_supports(path):
    def supports(case):
        if path == "warp" and case.N > 1024:
            return f"warp-per-row path holds a row in one warp's registers: N <= 1024 (N = {case.N})"
        if path == "block" and case.N > 32768:
            return f"block-per-row path holds a row in registers: N <= 32768 (N = {case.N})"
        if path == "rows" and case.N > 8192:
            return f"rows path holds a row in 256 threads x 32 elements: N <= 8192 (N = {case.N})"
        if path == "split" and case.N <= 32768:
            return (f"split path: rows of N <= 32768 fit one block's registers (the block path keeps them on "
                    f"chip); N = {case.N}")
        if path in ("smem", "split"):
            try:
                case_plan(path, case)  # H100/H200 shared memory (227 KiB per CTA), clusters <= 16
            except ValueError as e:
                return f"shared-memory path: {e}" if path == "smem" else f"split path: {e}"
        return None
    return supports


def _softmax_compile_only(path):
    def compile_only(case):
        reason = _softmax_supports(path)(case)
        if reason:
            raise Unsupported(reason)
        plan = case_plan(path, case)
        facts = kernel_facts(plan["kernel"])
        facts.update(compile_s=0.0, config=plan, note="AOT: compiled by nvcc at install time")
        return facts
    return compile_only


def _softmax_grid(path):
    def grid(case):
        plan = case_plan(path, case)
        return softmax_grid(plan, case.M, case.N)
    return grid


def softmax_grid(plan: dict, M: int, N: int) -> dict:
    """``python -m harness grid`` description of a softmax plan."""
    g = plan["grid"]
    ids = sorted({0, 1, 2, max(g - 3, 0), max(g - 2, 0), g - 1} & set(range(g)))
    progs = []
    for b in ids:
        if plan["path"] == "warp":
            r0 = b * plan["rows_per_block"]
            r1 = min(r0 + plan["rows_per_block"], M) - 1
            covers = f"rows {r0}..{r1} (one warp each), columns 0..{N - 1}"
            kept = (r1 - r0 + 1) * N
            lanes = (r1 - r0 + 1) * 32 * plan["chunks"] * plan["vec"]
        elif plan["path"] == "block":
            covers, kept = f"row {b}, columns 0..{N - 1}", N
            lanes = plan["threads"] * plan["chunks"] * plan["vec"]
        elif plan["path"] == "split":
            c, g, seg = plan["parts"], plan["grid"], plan["seg"]
            units = list(range(b, M * c, g))
            first = f"row {b // c}, columns {(b % c) * seg}..{min((b % c + 1) * seg, N) - 1}"
            covers = (f"units {b}, {b} + {g}, ... ({len(units)} rounds; unit u = chunk u % {c} of row u // {c}); "
                      f"first: {first}")
            kept = sum(min(seg, N - (u % c) * seg) for u in units)
            lanes = len(units) * plan["threads"] * plan["chunks"] * plan["vec"]
        elif plan["path"] == "rows":
            rpb, step = plan["rows_per_block"], plan["grid"] * plan["rows_per_block"]
            r0 = b * rpb
            nrows = sum(min(rpb, max(0, M - s0)) for s0 in range(r0, M, step))
            covers = (f"rows {r0}..{r0 + rpb - 1}, then every {step} rows ({plan['groups']} threads per row, "
                      f"next rows prefetched), columns 0..{N - 1}")
            kept = nrows * N
            lanes = -(-nrows // rpb) * rpb * plan["groups"] * plan["chunks"] * plan["vec"] if nrows else 0
        else:
            c, seg = plan["cluster"], plan["seg"]
            r, k = divmod(b, c)
            c0, c1 = k * seg, min((k + 1) * seg, N)
            covers = f"row {r}, columns {c0}..{c1 - 1} (cluster rank {k} of {c})" + (
                f", {plan['smem']} B slice in shared memory" if plan["path"] == "smem" else "") if c1 > c0 else \
                f"row {r}, no columns (cluster rank {k} of {c})"
            kept = max(c1 - c0, 0)
            lanes = kept
        progs.append({"pid": [b, 0, 0], "covers": covers, "kept": kept, "dropped": max(lanes - kept, 0)})
    block = {k: plan[k] for k in ("threads", "vec", "chunks", "rows_per_block", "cluster", "groups", "smem",
                                  "blocks_per_sm", "parts") if plan.get(k)}
    return {"grid": [g, 1, 1], "block": block, "programs": progs, "total": {"programs": g, "kept": M * N},
            "note": f"{plan['kernel']}; 'dropped' counts padded register slots (masked lanes)"}


SOFTMAX_SRC = Source("cuda_src/softmax.cu", kernels=None, host=("softmax",))
HELPERS = Source("cuda_src/common.cuh", kernels=(
    "to_float", "from_float", "load_vec", "store_vec", "load_vec_masked", "store_vec_masked", "RawVec",
    "unpack", "pack", "warp_max", "warp_sum", "exp_shifted", "online_merge", "warp_online_merge"), host=())
KERNEL_OF = {"warp": "softmax_warp_kernel", "block": "softmax_block_kernel", "online": "softmax_online_kernel",
             "rows": "softmax_rows_kernel", "smem": "softmax_smem_kernel", "split": "softmax_split_kernel"}
DESCRIPTIONS = {
    "auto": "host dispatcher by N (route table in softmax.cu: warp <= 1024, block <= 32768, split above, online where split declines)",
    "warp": "one warp per row, row in registers, shuffle reductions, 16-byte loads when aligned",
    "block": "one block per row, row in registers, shuffle + shared-memory reductions",
    "online": "column tiles, running max/sum; cluster of CTAs per row merges via DSMEM (sm_90)",
    "rows": "persistent, several rows per CTA (G threads per row), next rows' loads issued before reducing",
    "smem": "cluster of <=16 CTAs per row, slice held in shared memory (bulk copy + mbarrier): 1 read, 1 write",
    "split": "persistent cooperative grid, C blocks per row hold 16384-column chunks in registers, (max, sum) "
             "exchanged through 64-bit slots in global memory: 1 read, 1 write (N > 32768)",
}
SOFTMAX_ROWS = (("auto", "softmax"), ("warp", "softmax_warp"), ("block", "softmax_block"),
                ("online", "softmax_online"), ("rows", "softmax_rows"), ("smem", "softmax_smem"),
                ("split", "softmax_split"))


def auto_kernels() -> tuple[str, ...]:
    """The kernels the dispatcher's route table (in softmax.cu, not the env override) can launch."""
    return tuple(dict.fromkeys(KERNEL_OF[p] for _, p in softmax_routes(env=False)))


def _register_softmax(path: str, name: str):
    kernels = auto_kernels() if path == "auto" else (KERNEL_OF[path],)
    src = Source("cuda_src/softmax.cu", kernels=kernels, host=("softmax",))

    @register(problem="softmax", layer="cuda", name=name, description=DESCRIPTIONS[path],
              sources=[src, HELPERS], devices=("cuda",), available=available,
              supports=_softmax_supports(path), compile_only=_softmax_compile_only(path),
              grid=_softmax_grid(path))
    def prepare(case, inputs, out):
        (x,) = inputs
        mod = module()
        out_ = check_softmax(x, out)
        M, N = x.shape
        args = (x.data_ptr(), out_.data_ptr(), M, N, row_stride(x), row_stride(out_), DTYPE_CODE[x.dtype])
        dev = x.device.index
        try:
            plan = mod.softmax_plan(path, *args, dev)
        except ValueError as e:  # e.g. the smem path on a GPU with less shared memory than planned for
            raise Unsupported(str(e)) from None
        t0 = time.perf_counter()
        mod.softmax(path, *args, stream_of(x), dev)  # first call: module load, outside the timed region
        torch.cuda.synchronize(x.device)
        first = time.perf_counter() - t0

        def launch():
            mod.softmax(path, *args, torch.cuda.current_stream(x.device).cuda_stream, dev)

        info = {"compile_s": 0.0, "first_call_s": first, "config": dict(plan)}
        try:
            info.update({k: v for k, v in kernel_facts(plan["kernel"]).items() if k != "config"})
        except Unsupported as e:
            info["facts_note"] = str(e)
        launch.info = info
        return launch

    return prepare


for _path, _name in SOFTMAX_ROWS:
    _register_softmax(_path, _name)


def _va_plan(case, sm_count: int = 132) -> dict:
    from backends.cupy_layer import vector_add_plan

    es = torch.empty((), dtype=case.torch_dtype).element_size()
    k = int(case.params.get("misalign", 0))
    return vector_add_plan(case.N, CXX_TYPE[case.dtype], es, (k * es) % 16, (k * es) % 16, 0, sm_count)


def _va_compile_only(case):
    plan = _va_plan(case)
    facts = kernel_facts(plan["kernel"])
    facts.update(compile_s=0.0, config=plan, note="AOT: compiled by nvcc at install time")
    return facts


def _va_grid(case):
    plan = _va_plan(case)
    return vector_add_grid(plan, case.N)


def vector_add_grid(plan: dict, n: int) -> dict:
    g, b, u, vec, head = plan["grid"], plan["block"], plan["unroll"], plan["vec"], plan["head"]
    nvec = (n - head) // vec
    per = b * u * vec
    progs = []
    for p in sorted({0, 1, max(g - 2, 0), g - 1}):
        first = head + p * per
        iters = max(0, -(-(nvec - p * b * u) // (g * b * u))) if nvec > p * b * u else 0
        covers = (f"elements {first}..{min(first + per, n) - 1} first, then every {g * per} "
                  f"({iters} grid-stride iteration(s))" if first < n else "no body elements")
        progs.append({"pid": [p, 0, 0], "covers": covers, "kept": max(0, min(per, n - first)),
                      "dropped": max(0, per - max(0, n - first))})
    return {"grid": [g, 1, 1], "block": {"threads": b, "vec": vec, "unroll": u, "head": head},
            "programs": progs, "total": {"programs": g, "kept": n},
            "note": f"{plan['kernel']} (grid-stride; grid for 132 SMs when planned without a GPU)"}


@register(problem="vector_add", layer="cuda", name="vector_add",
          description="grid-stride, 4 independent 16-byte loads per input per thread, scalar head/tail",
          sources=[Source("cuda_src/vector_add.cu", kernels=("vector_add_kernel",), host=("vector_add",)), HELPERS],
          devices=("cuda",), available=available, compile_only=_va_compile_only, grid=_va_grid)
def prepare_vector_add(case, inputs, out):
    x, y = inputs
    mod = module()
    check_vector_add(x, y, out)
    args = (x.data_ptr(), y.data_ptr(), out.data_ptr(), x.numel(), DTYPE_CODE[x.dtype])
    dev = x.device.index
    plan = mod.vector_add_plan(*args, dev)
    t0 = time.perf_counter()
    mod.vector_add(*args, stream_of(x), dev)
    torch.cuda.synchronize(x.device)
    first = time.perf_counter() - t0

    def launch():
        mod.vector_add(*args, torch.cuda.current_stream(x.device).cuda_stream, dev)

    kern = f"vector_add_kernel<{CXX_TYPE[case.dtype]}, {plan['vec']}, {plan['unroll']}>"
    info = {"compile_s": 0.0, "first_call_s": first, "config": dict(plan, kernel=kern)}
    try:
        info.update({k: v for k, v in kernel_facts(kern).items() if k != "config"})
    except Unsupported as e:
        info["facts_note"] = str(e)
    launch.info = info
    return launch
