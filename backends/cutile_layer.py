"""cuTile adapter: registers the kernels of ``cutile_src/`` (``import cuda.tile as ct``).

Ids (docs/DESIGN.md): ``cutile:<problem>`` the default (``cutile_src/dispatch.py`` plans once in
``prepare``: variant, tile shape, grid, kernel hints; the launch is one ``ct.launch``),
``cutile:<problem>_simple`` the teaching twin (``cutile_src/<problem>.py``), and the variants
``cutile:<problem>_<algorithm>``.

CPU mode: cuTile has no interpreter, but its compiler runs without a GPU or driver. Every
implementation has ``compile_only(case)``: it builds the kernel signature a launch on the case's
tensors would use (dtypes, ranks, the last stride 1, the base addresses' and strides' 16-byte
divisibility, int32 indices; the launch derives the same facts from the tensors) and exports a
cubin for sm_90 through ``cuda.tile.compilation.export_kernel`` (the CUDA 13.4 ``tileiras`` of
the ``nvidia-cuda-tileiras`` pip package). Registers, the local-memory frame, threads and static
shared memory are read from the cubin's ELF attributes; where ``cuobjdump`` is found, the SASS
opcode counts that show whether the GEMM uses wgmma (HGMMA) and TMA (UTMALDG / UTMASTG).
"""
from __future__ import annotations

import io
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from cutile_src import dispatch as _plans   # plain Python: the planner's reachable variants
from harness import Source, planned, planned_sources, register
from harness.errors import Unsupported
from kltools.loc_marks import compile_step
from harness.registry import describe_layer
from harness.meta_inputs import meta_gemm as _meta_gemm, meta_softmax as _meta_softmax, meta_vector_add as _meta_vector_add

try:
    import cuda.tile as ct
    _IMPORT_ERROR = None
except Exception as e:  # pragma: no cover - depends on the machine
    ct = None
    _IMPORT_ERROR = f"cuda.tile not importable: {type(e).__name__}: {e}"

if ct is not None:
    from cutile_src import dispatch
    from cutile_src import gemm_epilogue as gemm_simple
    from cutile_src import gemm_epilogue_splitk as gemm_splitk
    from cutile_src import gemm_epilogue_tiled as gemm_tiled
    from cutile_src import gemm_stage
    from cutile_src import softmax as softmax_simple
    from cutile_src import softmax_online, softmax_online_flat, softmax_online_tma, softmax_rows, softmax_rows_tma
    from cutile_src import softmax_split
    from cutile_src import vector_add as vector_add_simple
    from cutile_src import vector_add_unmasked

LAYER = "cutile"
ARCH = "sm_90"
ACT = {"none": 0, "relu": 1, "gelu": 2}
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


# -- availability ------------------------------------------------------------------------------
def available() -> str | None:
    if _IMPORT_ERROR:
        return _IMPORT_ERROR
    if not torch.cuda.is_available():
        return "no CUDA GPU (cuTile has no CPU interpreter; compile-only for sm_90 works without one)"
    return None


def _cuda_inputs(inputs) -> None:
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.device.type != "cuda":
            raise Unsupported("cuTile runs on CUDA tensors only (no CPU interpreter)")


# -- kernels with hints ------------------------------------------------------------------------
_HINTED: dict = {}


def hinted(kernel, hints: dict):
    """``kernel`` with cuTile compiler hints (occupancy, num_worker_warps), made once."""
    if not hints:
        return _watch(kernel)
    key = (id(kernel), tuple(sorted(hints.items())))
    if key not in _HINTED:
        _HINTED[key] = _watch(kernel.replace_hints(**hints))
    return _HINTED[key]


# -- compile facts from a cubin ----------------------------------------------------------------
def cubin_facts(cubin: bytes) -> dict:
    """Registers (EIATTR_REGCOUNT), the per-thread local-memory frame (EIATTR_FRAME_SIZE: spilled
    registers and local arrays), threads per block (EIATTR_REQNTID) and static shared memory
    (the ``.nv.shared.*`` sections) of the one kernel in a cuTile cubin."""
    d = cubin
    if d[:4] != b"\x7fELF":
        raise ValueError("cubin: not an ELF file")
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]

    def name(off):
        return d[strtab + off:d.index(b"\0", strtab + off)].decode()

    out = {"registers": None, "local_bytes": 0, "threads": None, "smem": 0}
    for s in secs:
        n, off, size = name(s[0]), s[4], s[5]
        if n.startswith(".nv.shared.") and "reserved" not in n:
            out["smem"] += size
        if not n.startswith(".nv.info"):
            continue
        p = off
        while p < off + size:
            fmt, attr = d[p], d[p + 1]
            if fmt == 4:  # EIFMT_SVAL: u16 size, payload
                sz, = struct.unpack_from("<H", d, p + 2)
                pay = d[p + 4:p + 4 + sz]
                if attr == 0x2F and sz >= 8:
                    out["registers"] = struct.unpack_from("<II", pay)[1]
                elif attr == 0x11 and sz >= 8:
                    out["local_bytes"] = max(out["local_bytes"], struct.unpack_from("<II", pay)[1])
                elif attr == 0x10 and sz >= 12:
                    out["threads"] = math.prod(struct.unpack_from("<III", pay))
                p += 4 + sz
            elif fmt == 3:  # EIFMT_HVAL
                p += 4
            else:
                p += 2
    return out


def _cuobjdump() -> str | None:
    try:
        import nvidia.cu13 as cu13
        for base in cu13.__path__:
            p = Path(base) / "bin" / "cuobjdump"
            if p.exists():
                return str(p)
    except Exception:
        pass
    return shutil.which("cuobjdump")


SASS_OPS = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDGSTS", "LDG", "STG", "STL", "LDL")


def sass_text(cubin: bytes) -> str | None:
    exe = _cuobjdump()
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "k.cubin")
        Path(f).write_bytes(cubin)
        r = subprocess.run([exe, "-sass", f], capture_output=True, text=True, timeout=120)
    return r.stdout if r.returncode == 0 else None


def sass_ops(sass: str) -> dict:
    """How many SASS instructions start with each opcode of SASS_OPS (predicates skipped)."""
    counts = dict.fromkeys(SASS_OPS, 0)
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", sass):
        if m.group(1) in counts:
            counts[m.group(1)] += 1
    return counts


# -- signatures: what a launch on the case's tensors would compile ---------------------------------
def array_constraint(t: torch.Tensor):
    """An ArrayConstraint for tensor ``t`` (a meta tensor is fine): its dtype and rank, the last
    stride 1 where it is, the other strides' and the base address's 16-byte divisibility (the
    base counted from a 256-byte aligned allocation), each length's divisibility (up to 16:
    tileiras vectorises only what it can prove divisible), int32 indices while they fit."""
    from cuda.tile.compilation import ArrayConstraint
    es = t.element_size()
    strides = t.stride()
    const = tuple(1 if (i == t.dim() - 1 and s == 1) else None for i, s in enumerate(strides))
    # as a launch derives them (H200 check): 16 bytes or nothing for strides and the base, a
    # length divisible by 16 elements or nothing
    div = tuple(1 if c is not None else (16 // es if (s * es) % 16 == 0 else 1) for c, s in zip(const, strides))
    shape_div = tuple(16 if int(n) % 16 == 0 else 1 for n in t.shape)
    extent = sum((n - 1) * s for n, s in zip(t.shape, strides)) + 1
    idx = ct.int32 if max(list(t.shape) + [extent]) < 2 ** 31 else ct.int64
    return ArrayConstraint(getattr(ct, str(t.dtype).removeprefix("torch.")), t.dim(), index_dtype=idx,
                           stride_lower_bound_incl=0, alias_groups=(), may_alias_internally=False,
                           stride_constant=const, stride_divisible_by=div, shape_divisible_by=shape_div,
                           base_addr_divisible_by=16 if _address(t) % 16 == 0 else 1)


def _address(t: torch.Tensor) -> int:
    """The tensor's data address where it has memory, else its offset into a 256-byte aligned
    allocation (meta tensors)."""
    return t.data_ptr() if t.device.type == "cuda" else t.storage_offset() * t.element_size()


def _rows16(t: torch.Tensor) -> bool:
    """Whether every row of the 2-d ``t`` starts on a 16-byte boundary (base and row stride)."""
    return _address(t) % 16 == 0 and (t.shape[0] <= 1 or (t.stride(0) * t.element_size()) % 16 == 0)


def one_row_aligned(t: torch.Tensor) -> torch.Tensor:
    """A one-row 2-d ``t`` as a view whose row stride is a 16-byte multiple (the stride of a single
    row addresses nothing, but tileiras derives its TMA and vector choices from it); else ``t``."""
    if t.dim() != 2 or t.shape[0] != 1:
        return t
    per = 16 // t.element_size()
    return t.as_strided(t.shape, (-(-t.shape[1] // per) * per, 1))


def _constant_params(kernel) -> list[bool]:
    """For each parameter of a cuTile kernel, whether it is annotated ``ct.Constant[...]``
    (compiled in) rather than passed at run time."""
    import inspect
    fn = getattr(kernel, "_pyfunc", kernel)
    return ["Constant" in repr(p.annotation) for p in inspect.signature(fn).parameters.values()]


def _constraint(arg, constant: bool):
    """The constraint of one argument: an array for a tensor, the value for a constant parameter,
    a 32-bit (64-bit where needed) scalar for a runtime integer, fp32 for a runtime float."""
    from cuda.tile.compilation import ScalarConstraint
    if isinstance(arg, torch.Tensor):
        return array_constraint(arg)
    if constant:
        return arg
    if isinstance(arg, bool) or isinstance(arg, int):
        return ScalarConstraint(ct.int32 if -2 ** 31 <= int(arg) < 2 ** 31 else ct.int64)
    return ScalarConstraint(ct.float32)


_COMPILED: dict = {}
_RECORD: list | None = None  # (name, kernel, signature) of each compile while inspect records


def compile_kernel(kernel, args, hints=None, sass: bool = True) -> dict:
    """Export ``kernel`` for sm_90 with the signature of ``args`` (tensors -> arrays, the rest
    constants) and read the cubin's facts; no GPU needed. CUDA tensors give the launch's own
    signature (``KernelSignature.from_kernel_args``). Remembered per kernel and signature, so a
    repeated compile in one process (the same case again) reports the first compile's time."""
    from cuda.tile.compilation import CallingConvention, KernelSignature, export_kernel
    k = hinted(kernel, hints or {})
    cc = CallingConvention.cutile_python_v1()
    if any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args):
        sig = KernelSignature.from_kernel_args(k, args, cc)  # the launch's own signature
    else:
        sig = KernelSignature([_constraint(a, c) for a, c in zip(args, _constant_params(k))], cc)
    name = getattr(getattr(kernel, "_pyfunc", None), "__name__", None) or getattr(kernel, "__name__", "kernel")
    key = (id(k), sig.with_mangled_symbol(name).symbol, sass)
    if _RECORD is not None:
        _RECORD.append((name, k, sig))
    if key in _COMPILED:
        return dict(_COMPILED[key])
    buf = io.BytesIO()
    t0 = time.perf_counter()
    export_kernel(k, [sig], buf, gpu_code=ARCH, output_format="cubin")
    secs = time.perf_counter() - t0
    cubin = buf.getvalue()
    facts = cubin_facts(cubin)
    facts["compile_s"] = round(secs, 3)
    facts["cubin_bytes"] = len(cubin)
    facts["arch"] = ARCH
    if sass:
        text = sass_text(cubin)
        facts["sass_ops"] = sass_ops(text) if text else "cuobjdump not found"
    facts["kernel"] = name
    _COMPILED[key] = facts | {"_cubin": cubin}
    return dict(_COMPILED[key])


def _facts(launches) -> dict:
    """The row's facts from [(kernel, args, hints)], one compile each: the first kernel's,
    registers / spills / smem the largest over all, every kernel's under ``kernels``."""
    per = [compile_kernel(k, a, h) for k, a, h in launches]
    out = {k: v for k, v in per[0].items() if k != "_cubin"}
    out["compile_s"] = round(sum(f["compile_s"] for f in per), 3)
    out["registers"] = max(f["registers"] or 0 for f in per)
    out["spills"] = max(f["local_bytes"] for f in per)
    out["smem"] = max(f["smem"] for f in per)
    out["kernels"] = {f["kernel"]: {k: f[k] for k in ("registers", "local_bytes", "threads", "smem", "sass_ops")
                                    if k in f} for f in per}
    out["note"] = ("compiled for sm_90 by tileiras without a GPU; spills = the local-memory frame "
                   "(bytes per thread) from the cubin")
    return out


def _sms() -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return dispatch.H200_SMS


def _l2() -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return dispatch.H200_L2


# -- input checks ------------------------------------------------------------------------------
def _check_same(name: str, t, dtype, shape) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name}: dtype {t.dtype}, expected {dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {tuple(shape)}")


def _check_dtype(name: str, t, allowed) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in allowed:
        raise TypeError(f"{name}: dtype {t.dtype} not supported (expected one of {sorted(map(str, allowed))})")


def vector_add_args(x, y, out) -> None:
    _check_dtype("x", x, DTYPES)
    if x.dim() != 1:
        raise ValueError(f"x: expected a 1-d tensor, got shape {tuple(x.shape)}")
    _check_same("y", y, x.dtype, x.shape)
    _check_same("out", out, x.dtype, x.shape)
    for n, t in (("x", x), ("y", y), ("out", out)):
        if t.shape[0] > 1 and t.stride(0) != 1:
            raise ValueError(f"{n}: elements must be contiguous (stride {t.stride(0)})")


def softmax_args(x, out) -> None:
    _check_dtype("x", x, DTYPES)
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-d tensor [M, N], got shape {tuple(x.shape)}")
    _check_same("out", out, x.dtype, x.shape)
    for n, t in (("x", x), ("out", out)):
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ValueError(f"{n}: columns must be contiguous (stride {t.stride(1)})")


def gemm_args(a, b, bias, act, c) -> None:
    _check_dtype("a", a, (torch.float16, torch.bfloat16))
    if a.dim() != 2 or not isinstance(b, torch.Tensor) or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a, b: expected [M, K] and [K, N], got {tuple(a.shape)} and "
                         f"{tuple(getattr(b, 'shape', ()))}")
    _check_same("b", b, a.dtype, b.shape)
    if bias is not None:
        _check_same("bias", bias, a.dtype, (b.shape[1],))
    if act not in ACT:
        raise ValueError(f"act: {act!r} not one of {sorted(ACT)}")
    _check_same("c", c, a.dtype, (a.shape[0], b.shape[1]))
    for n, t in (("a", a), ("b", b), ("c", c)):
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ValueError(f"{n}: rows must be contiguous (column stride {t.stride(1)})")


# -- first call --------------------------------------------------------------------------------
def _first_call(launch) -> float:
    t0 = time.perf_counter()
    launch()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


_JIT_CUBINS: dict = {}  # symbol -> cubin, as the launches' own JIT compiled them


@compile_step
def _watch(kernel):
    """Record the cubins ``kernel``'s JIT compiles (its ``_compile`` returns the cubin and the
    kernel's symbol), so the facts of a launch come from the very cubin it runs."""
    if getattr(kernel, "_cutile_layer_watched", False):
        return kernel
    orig = kernel._compile

    def _compile(signature, context, compute_capability=None):
        res = orig(signature, context, compute_capability)
        try:
            _JIT_CUBINS[res[1]] = res[0]
        except Exception:
            pass
        return res
    try:
        kernel._compile = _compile
        kernel._cutile_layer_watched = True
    except Exception:
        pass
    return kernel


def _run_facts(launches) -> dict:
    """Compile facts of a GPU launch from the cubin its JIT compiled (recorded by ``_watch``),
    else from an export of the same signature (a hit in cuTile's disk cache)."""
    from cuda.tile.compilation import CallingConvention, KernelSignature
    t0 = time.perf_counter()
    per, source = [], "jit"
    try:
        for k, a, h in launches:
            kk = hinted(k, h)
            cub = None
            for cc in (CallingConvention.cutile_python_v1(), CallingConvention.cutile_python_v2()):
                try:
                    cub = _JIT_CUBINS.get(KernelSignature.from_kernel_args(kk, a, cc).symbol)
                except Exception:
                    cub = None
                if cub:
                    break
            if cub:
                per.append(cubin_facts(cub))
            else:
                source = "export"
                per.append(compile_kernel(k, a, h, sass=False))
    except Exception as e:  # facts are optional; the launch itself already ran
        return {"facts_error": f"{type(e).__name__}: {e}"[:300]}
    return {"registers": max(f["registers"] or 0 for f in per),
            "spills": max(f["local_bytes"] for f in per), "smem": max(f["smem"] for f in per),
            "threads": per[0]["threads"], "facts_from": source,
            "facts_s": round(time.perf_counter() - t0, 3)}


def _finish(launch, launches, config: dict):
    for k, _, h in launches:
        hinted(k, h)  # watched before the first call compiles it
    secs = _first_call(launch)
    launch.info = {"compile_s": round(secs, 3), "config": config} | _run_facts(launches)
    return launch


# -- vector_add --------------------------------------------------------------------------------
def _binder(*names: str) -> Source:
    """This adapter's binding of a default's plan to tensors (a host Source of the default)."""
    return Source("backends/cutile_layer.py", kernels=(), host=names)


def _va_plan(x):
    return dispatch.plan_vector_add(x.shape[0], x.element_size())


def _va_launches(variant, x, y, out):
    if variant == "simple":
        t = vector_add_simple.TILE
        return [(vector_add_simple.vector_add_kernel, (x, y, out, t), {})], {"TILE": t}
    p = _va_plan(x)
    return [(vector_add_unmasked.vector_add_unmasked_kernel,
             vector_add_unmasked.split_args(x, y, out, p["TILE"]), p["hints"])], p


def _va_compile(variant):
    def compile_only(case):
        x, y, out = _meta_vector_add(case)
        launches, cfg = _va_launches(variant, x, y, out)
        return _facts(launches) | {"config": cfg}
    compile_only.__name__ = f"compile_vector_add_{variant}"
    return compile_only


def _va_prepare(variant):
    def prepare(case, inputs, out):
        _cuda_inputs(inputs)
        x, y = inputs
        vector_add_args(x, y, out)
        launches, cfg = _va_launches(variant, x, y, out)
        if variant == "simple":
            def launch():
                vector_add_simple.vector_add(x, y, out)
        else:
            k, _, h = launches[0]
            launch = vector_add_unmasked.bind_launch(x, y, out, cfg["TILE"], kernel=hinted(k, h))
        return _finish(launch, launches, cfg)
    return prepare


_VA = {
    "default": ("vector_add", "planned: full tiles loaded and stored without bounds checks, one "
                "checked tail tile; tile by element size",
                planned(_plans.plan, "vector_add", [_binder("_va_launches", "hinted")])),
    "simple": ("vector_add_simple", "teaching twin: one 1024-element tile a program, ct.load pads "
               "and ct.store drops the ragged tail",
               [Source("cutile_src/vector_add.py", kernels=("vector_add_kernel",), host=("vector_add",))]),
}
for _v, (_name, _desc, _src) in _VA.items():
    register(problem="vector_add", layer=LAYER, name=_name, description=_desc, sources=_src,
             devices=("cuda",), available=available,
             compile_only=_va_compile(_v) if ct else None)(_va_prepare(_v))


# -- softmax -----------------------------------------------------------------------------------
def _sm_contiguous(x, out) -> bool:
    """The flat kernel's condition on the tensors: x and out contiguous, 16-byte aligned bases."""
    return softmax_online_flat.flat_ok(x, out) and _address(x) % 16 == 0 and _address(out) % 16 == 0


def _sm_plan(variant, x, out) -> dict:
    """The plan of ``variant``: the default's (GPU_VERIFIED switches) or next's (every pending
    rule on) planner, or the named kernel with the planner's configuration rule for it."""
    M, N = x.shape
    es, sms, contiguous = x.element_size(), _sms(), _sm_contiguous(x, out)
    if variant in ("default", "next"):
        return dispatch.plan_softmax(M, N, es, sms, contiguous, _l2(), dispatch.NEXT if variant == "next" else None,
                                     rows16=_rows16(x) and _rows16(out))
    if variant in ("rows", "rows_tma"):
        return dispatch.rows_config(M, N, sms, tma=variant == "rows_tma")
    if variant == "online":
        return dispatch.online_plain_config(M, N)
    if variant == "split":
        return dispatch.split_config(M, N, sms)
    if variant == "online_tma" or dispatch.flat_fits(M, N, contiguous):
        return dispatch.online_config(M, N, es, sms, _l2(), variant)
    # online_flat where no flat view exists: the planner's choice with every pending rule on
    return dispatch.plan_softmax(M, N, es, sms, contiguous, _l2(), dispatch.NEXT, rows16=_rows16(x) and _rows16(out))


def _sm_launches(p, x, out):
    """[(kernel, args, hints)] of plan ``p`` on x and out (the launch's own arguments)."""
    v, h, ok = p["variant"], p["hints"], softmax_rows.tma_store_ok(out)
    if v == "simple":
        return [(softmax_simple.softmax_kernel, (x, out, p["TILE"]), h)]
    if v == "rows":
        return [(softmax_rows.softmax_rows_kernel, (x, out, p["ROWS"], p["TN"], ok), h)]
    if v == "rows_tma":
        return [(softmax_rows_tma.softmax_rows_tma_kernel, (x, out, p["ROWS"], p["TN"], p["LATENCY"], ok), h)]
    if v == "online_tma":
        return [(softmax_online_tma.softmax_online_tma_kernel, (x, out, p["TILE"], p["LATENCY"], ok), h)]
    if v == "online_flat":
        return [(softmax_online_flat.softmax_online_flat_kernel,
                 softmax_online_flat.flat_args(x, out, p["TILE"], p["LATENCY"]), h)]
    if v == "split":
        mx, sm = softmax_split.partials(x.shape[0], p["C"], x.device)
        return [(softmax_split.softmax_split_stats_kernel, (x, mx, sm, p["CHUNK"]), h),
                (softmax_split.softmax_split_norm_kernel, (x, out, mx, sm, p["CHUNK"], p["CP"], ok), h)]
    return [(softmax_online.softmax_online_kernel, (x, out, p["TILE"], ok), h)]


def _sm_supports(variant):
    def supports(case):
        if variant in ("rows", "rows_tma") and (1 << max(0, (case.N - 1).bit_length())) > dispatch.SOFTMAX["ROW_TILE_MAX"]:
            return (f"{variant}: N = {case.N} rounds up past {dispatch.SOFTMAX['ROW_TILE_MAX']} columns a tile "
                    "(a longer row spills out of registers)")
        return None
    return supports


def _sm_compile(variant):
    def compile_only(case):
        x, out = _meta_softmax(case)
        if variant != "simple":
            x, out = one_row_aligned(x), one_row_aligned(out)
        p = _sm_plan(variant, x, out) if variant != "simple" else _simple_sm_plan()
        return _facts(_sm_launches(p, x, out)) | {"config": p}
    compile_only.__name__ = f"compile_softmax_{variant}"
    return compile_only


def bind_softmax(variant, x, out):
    """The planned launch of ``variant`` on CUDA tensors: (launch, launches, plan)."""
    x, out = one_row_aligned(x), one_row_aligned(out)   # (a single row's stride addresses nothing)
    p = _sm_plan(variant, x, out)
    launches = _sm_launches(p, x, out)
    v, g = p["variant"], p["grid"]
    k = hinted(launches[0][0], p["hints"])
    if v == "rows":
        launch = softmax_rows.bind_launch(x, out, p["ROWS"], p["TN"], g, kernel=k)
    elif v == "rows_tma":
        launch = softmax_rows_tma.bind_launch(x, out, p["ROWS"], p["TN"], p["LATENCY"], g, kernel=k)
    elif v == "online_tma":
        launch = softmax_online_tma.bind_launch(x, out, p["TILE"], p["LATENCY"], g, kernel=k)
    elif v == "online_flat":
        launch = softmax_online_flat.bind_launch(x, out, p["TILE"], p["LATENCY"], g, kernel=k)
    elif v == "split":  # the launches' own buffers (the partials)
        launch = softmax_split.bind_launch(x, out, p, kernels=[hinted(kk, p["hints"]) for kk, _, _ in launches],
                                           bufs=launches[-1][1][2:4])
    else:
        launch = softmax_online.bind_launch(x, out, p["TILE"], g, kernel=k)
    return launch, launches, p


def _simple_sm_plan() -> dict:
    return {"variant": "simple", "TILE": softmax_simple.TILE, "hints": {}}


def _sm_prepare(variant):
    def prepare(case, inputs, out):
        _cuda_inputs(inputs)
        (x,) = inputs
        softmax_args(x, out)
        if _sm_supports(variant)(case):
            raise Unsupported(_sm_supports(variant)(case))
        if variant == "simple":
            p = _simple_sm_plan()

            def launch():
                softmax_simple.softmax(x, out)
            return _finish(launch, _sm_launches(p, x, out), p)
        launch, launches, cfg = bind_softmax(variant, x, out)
        return _finish(launch, launches, cfg)
    return prepare


_SM_SRC = {"rows": Source("cutile_src/softmax_rows.py", kernels=("softmax_rows_kernel",), host=("bind_launch",)),
           "online": Source("cutile_src/softmax_online.py", kernels=("softmax_online_kernel",), host=("bind_launch",)),
           "online_flat": Source("cutile_src/softmax_online_flat.py", kernels=("softmax_online_flat_kernel",),
                                 host=("flat_ok", "flat_args", "bind_launch")),
           "rows_tma": Source("cutile_src/softmax_rows_tma.py", kernels=("softmax_rows_tma_kernel",),
                              host=("bind_launch",)),
           "online_tma": Source("cutile_src/softmax_online_tma.py", kernels=("softmax_online_tma_kernel",),
                                host=("bind_launch",)),
           "split": Source("cutile_src/softmax_split.py",
                           kernels=("softmax_split_stats_kernel", "softmax_split_norm_kernel"),
                           host=("partials", "bind_launch"))}
_SM_PLAN = [Source("cutile_src/dispatch.py", kernels=(), host=("plan_softmax",))]
_SM = {
    "default": ("softmax", "planned: split (a row's chunks over many programs, (max, sum) through global "
                "memory) for few long rows; rows (whole rows as one tile, several short rows a tile; occupancy "
                "hint by the tile's live values; masked by column index, TMA loads, where rows are 16-byte "
                "multiples) while a row rounds up to <= 32768 columns; online (column tiles, running max and "
                "sum, second pass newest tile first) for longer rows",
                planned(_plans.plan, "softmax", [_binder("bind_softmax")])),
    "simple": ("softmax_simple", "teaching twin: a program per row, online max/sum over 1024-column "
               "tiles, second pass stores; any N",
               [Source("cutile_src/softmax.py", kernels=("softmax_kernel",), host=("softmax",))]),
    "rows": ("softmax_rows", "a (ROWS, TN) tile of whole rows a program (ROWS = 1: one row as one tile); "
             "rows up to 32768 columns rounded up", [_SM_SRC["rows"]]),
    "online": ("softmax_online", "a program per row, column tiles with lane-wise running max and sum, "
               "second pass newest tile first; any N", [_SM_SRC["online"]]),
    "online_flat": ("softmax_online_flat", "candidate (hung on the H200 at 4096 x 50257 bf16, 2026-12-06; verified there on an H100, 2026-12-07): online_tma's algorithm over aligned "
                    "2048-element tiles of the contiguous rows as one vector (TMA loads where a row's bytes "
                    "are not a 16-byte multiple), masked to the row, shared tiles stored through a masked "
                    "scatter; other layouts: the planner's choice; any N", [_SM_SRC["online_flat"]]),
    "rows_tma": ("softmax_rows_tma", "verified (2026-12-06), planned by the default: the rows kernel with the columns past N masked "
                 "by index, not by -inf padding, so that tileiras loads the tile through TMA; rows up to "
                 "32768 columns rounded up", [_SM_SRC["rows_tma"]]),
    "online_tma": ("softmax_online_tma", "candidate, not yet timed on a GPU: the online kernel with the columns past N "
                   "masked by index (TMA loads), a latency hint, one exp a lane in pass 1, the programs an "
                   "SM by the rows in flight against L2; any N", [_SM_SRC["online_tma"]]),
    "split": ("softmax_split", "a row cut into chunks over many programs, each "
              "chunk's (max, sum) exchanged through global memory between two launches (the second re-reads "
              "its chunk, from L2 for few rows); any N",
              [_SM_SRC["split"]]),
    "next": ("softmax_next", "candidate: the default's planner with its pending rules on as well "
             "(online_tma for long aligned rows, online_flat for unaligned contiguous rows; each PASSed 17 of "
             "the models and edge suites' 23 cases on an H100, not yet timed)",
             planned_sources(_SM_SRC, _plans.reachable("softmax", _plans.NEXT), _SM_PLAN)),
}
#: built, not yet run on a GPU: candidates (registry.get(..., candidates=True)), no ids of the tool yet
# candidates: reached by `python -m harness check` only. rows_tma is verified and the default plans
# it, but it is no algorithm word (docs/DESIGN.md): no id of its own. Staging (GEMM operands copied to
# 16-byte rows) is a mechanism of the default's plans, not a candidate (its id gemm_epilogue_pack,
# the one-operand rules without the small switch, was removed on 2026-12-07).
CANDIDATES = ("online_flat", "online_tma", "next", "rows_tma")
for _v, (_name, _desc, _src) in _SM.items():
    register(problem="softmax", layer=LAYER, name=_name, description=_desc, sources=_src,
             devices=("cuda",), available=available, candidate=_v in CANDIDATES,
             supports=_sm_supports(_v) if _v in ("rows", "rows_tma") else None,
             compile_only=_sm_compile(_v) if ct else None)(_sm_prepare(_v))


# -- gemm_epilogue -----------------------------------------------------------------------------
def _gemm_plan(variant, a, b):
    """The plan of ``variant``; the default's may stage operands: the tiled / split-K plan with
    ``stage`` ({operand, or "ab" for both in one launch: the copy's config})."""
    (M, K), N = a.shape, b.shape[1]
    es, sms = a.element_size(), _sms()
    facts = {"a_rows16": _rows16(a), "b_rows16": _rows16(b)}
    if variant == "tiled":
        return dispatch.tiled_config(M, N, K, es, sms)
    if variant == "splitk":
        return dispatch.splitk_config(M, N, K, sms, min_split=2)
    return dispatch.plan_gemm(M, N, K, es, sms, l2=_l2(), **facts)


def _gemm_operands(p, a, b):
    """(a, b, staging launches, staging binds): the operands the GEMM kernels read -- for those the
    plan stages, views into freshly allocated 16-byte-row buffers -- with the staging launches
    [(kernel, args, hints)] and the zero-argument launches that fill them (CUDA tensors)."""
    launches, binds, ops = [], [], {"a": a, "b": b}
    for name, cfg in p.get("stage", {}).items():
        if name == "ab":   # A and B in one launch, the plan's only copy (the small switch)
            return gemm_stage.bind_pair_operands(a, b, cfg, hinted)
        src = ops[name]
        buf, view = gemm_stage.staged_buffer(src)
        launches.append((gemm_stage.stage_rows_kernel, (src, buf, cfg["TR"], cfg["TC"]), {}))
        if src.device.type == "cuda":
            binds.append(gemm_stage.bind_stage(src, buf, cfg["TR"], cfg["TC"], cfg["grid"],
                                               kernel=hinted(gemm_stage.stage_rows_kernel, {})))
        ops[name] = view
    return ops["a"], ops["b"], launches, binds


def _gemm_launches(variant, a, b, bias, act, c, ws=None):
    M, K = a.shape
    N = b.shape[1]
    bias_arg = c[0] if bias is None else bias
    hb, ac = int(bias is not None), ACT[act]
    if variant == "simple":
        g = gemm_simple
        return [(g.gemm_epilogue_kernel, (a, b, bias_arg, c, hb, ac, g.TM, g.TN, g.TK), {})], \
            {"variant": "simple", "TM": g.TM, "TN": g.TN, "TK": g.TK}
    cfg = _gemm_plan(variant, a, b)
    a, b, stages, _ = _gemm_operands(cfg, a, b)
    p = cfg
    if p["variant"] == "splitk":
        if ws is None:
            ws = gemm_splitk.workspace(p, M, N, c.device, pad=bool(stages))
        ok = gemm_tiled.tma_store_ok
        return stages + [(gemm_splitk.gemm_splitk_partial_kernel,
                         (a, b, ws, p["KPER"], p["TM"], p["TN"], p["TK"], ok(ws)), p["hints"]),
                        (gemm_splitk.gemm_splitk_reduce_kernel, (ws, bias_arg, c, hb, ac, p["RM"], p["RN"], ok(c)),
                         {})], cfg
    return stages + [(gemm_tiled.gemm_epilogue_tiled_kernel,
                     (a, b, bias_arg, c, hb, ac, p["TM"], p["TN"], p["TK"], p["GROUP"], gemm_tiled.tma_store_ok(c)),
                     p["hints"])], cfg


def _gemm_compile(variant):
    def compile_only(case):
        a, b, bias, act, c = _meta_gemm(case)
        launches, cfg = _gemm_launches(variant, a, b, bias, act, c)
        return _facts(launches) | {"config": cfg}
    compile_only.__name__ = f"compile_gemm_{variant}"
    return compile_only


def bind_gemm(variant, a, b, bias, act: str, out):
    """The planned launch of ``variant`` (default / tiled / splitk) on CUDA tensors: the copies
    of unaligned operands (plans with ``stage``), then the GEMM (one kernel, or split-K's two);
    (launch, launches, cfg), buffers and workspace allocated here, once, outside the launch."""
    cfg = _gemm_plan(variant, a, b)
    a2, b2, _, stage_binds = _gemm_operands(cfg, a, b)
    p = cfg
    if p["variant"] == "splitk":
        kp = hinted(gemm_splitk.gemm_splitk_partial_kernel, p["hints"])
        ws = gemm_splitk.workspace(p, a.shape[0], b.shape[1], out.device, pad=bool(stage_binds))
        main = gemm_splitk.bind_launch(a2, b2, bias, ACT[act], out, p, ws=ws,
                                       kernels=(kp, gemm_splitk.gemm_splitk_reduce_kernel))
    else:
        main = gemm_tiled.bind_launch(a2, b2, bias, ACT[act], out, p,
                                      kernel=hinted(gemm_tiled.gemm_epilogue_tiled_kernel, p["hints"]))
    launches, _ = _gemm_launches(variant, a, b, bias, act, out, ws=getattr(main, "workspace", None))
    if not stage_binds:
        return main, launches, cfg

    def launch():
        for f in stage_binds:
            f()
        main()
    launch.buffers, launch.main = (a2, b2), main
    return launch, launches, cfg


def _gemm_prepare(variant):
    def prepare(case, inputs, out):
        _cuda_inputs(inputs)
        a, b, bias = inputs
        act = case.params.get("act", "relu")
        gemm_args(a, b, bias, act, out)
        if variant == "simple":
            launches, cfg = _gemm_launches(variant, a, b, bias, act, out)

            def launch():
                gemm_simple.gemm_epilogue(a, b, bias, act, out)
            return _finish(launch, launches, cfg)
        launch, launches, cfg = bind_gemm(variant, a, b, bias, act, out)
        return _finish(launch, launches, cfg)
    return prepare


_GT = "cutile_src/gemm_epilogue_tiled.py"
_GS = "cutile_src/gemm_epilogue_splitk.py"
_G_SRC = {"tiled": Source(_GT, kernels=("gemm_epilogue_tiled_kernel",), host=("bind_launch",)),
          "splitk": Source(_GS, kernels=("gemm_splitk_partial_kernel", "gemm_splitk_reduce_kernel"),
                           host=("workspace", "bind_launch"))}
_GEMM = {
    "default": ("gemm_epilogue", "planned: tiled (ct.mma over K tiles, grouped order, tile shape by waves "
                "on the SMs, 8 worker warps for 128-row tiles; one program an SM looping over the tiles where "
                "they outnumber the SMs); where the C tiles fill under half the SMs, narrower tiles, then split-K into "
                "an fp32 workspace only where those still do; operands whose rows are no 16-byte multiples "
                "staged into 16-byte rows first (TMA loads; A and B in one launch), except a B larger than L2 "
                "under M <= 64, read in place by skinny tiles; bias + activation on the accumulator tile",
                planned(_plans.plan, "gemm_epilogue", [_binder("bind_gemm")])),
    "simple": ("gemm_epilogue_simple", "teaching twin: a 2-d grid of 128 x 128 C tiles, ct.mma over "
               "zero-padded K tiles, bias + activation before the one store; any shape",
               [Source("cutile_src/gemm_epilogue.py", kernels=("gemm_epilogue_kernel",),
                       host=("gemm_epilogue",))]),
    "tiled": ("gemm_epilogue_tiled", "1-d grid of C tiles in grouped order, tile shape by waves on the "
              "SMs; any shape", [_G_SRC["tiled"]]),
    "splitk": ("gemm_epilogue_splitk", "K split over programs into an fp32 workspace (at least 2 slices "
               "where K has 2 tiles), then one reduce + bias + activation kernel (deterministic); any shape",
               [_G_SRC["splitk"]]),
}
for _v, (_name, _desc, _src) in _GEMM.items():
    register(problem="gemm_epilogue", layer=LAYER, name=_name, description=_desc, sources=_src,
             devices=("cuda",), available=available, candidate=_v in CANDIDATES,
             compile_only=_gemm_compile(_v) if ct else None)(_gemm_prepare(_v))


# -- python -m harness inspect -----------------------------------------------------------------
def cutile_artifacts(impl, case, art) -> None:
    """compile_only(case) with every compile recorded; per kernel: the cubin, its SASS (cuobjdump),
    the Tile IR it was compiled from (tileirdisasm of the bytecode) and the facts."""
    import json
    global _RECORD
    if impl.compile_only_fn is None or ct is None:
        raise ValueError(f"inspect: {impl.id} is not available here: {_IMPORT_ERROR or 'no compile_only'}")
    from cuda.tile._compile import _bytecode_to_mlir_text
    from cuda.tile.compilation import export_kernel
    art.source = "compile_only(case) for sm_90 (cuda.tile.compilation.export_kernel), every compile recorded"
    _RECORD = []
    try:
        facts = impl.compile_only_fn(case)
        seen = list(_RECORD)
    finally:
        _RECORD = None
    for j, (name, k, sig) in enumerate(seen):
        stem = f"{impl.layer}_{impl.name}_{j}_{name}"
        buf = io.BytesIO()
        export_kernel(k, [sig], buf, gpu_code=ARCH, output_format="cubin")
        art.write(f"{stem}.cubin", buf.getvalue())
        text = sass_text(buf.getvalue())
        if text:
            art.write(f"{stem}.sass", text)
        else:
            art.notes.append("no cuobjdump (pip nvidia-cuda-cuobjdump): no SASS")
        try:
            bc = io.BytesIO()
            export_kernel(k, [sig], bc, output_format="tileir_bytecode")
            art.write(f"{stem}.tileir.mlir", _bytecode_to_mlir_text(bc.getvalue()))
        except Exception as e:
            art.notes.append(f"no Tile IR text for {name}: {type(e).__name__}: {e}"[:300])
    art.notes.append("tileiras compiles Tile IR to a cubin itself: there is no PTX step to run "
                     "ptxas -v on; registers, frame and threads come from the cubin")
    art.write("compile_facts.json", json.dumps(facts, indent=2, default=str))


describe_layer(LAYER, order=7, colour="#76b900", artifacts=cutile_artifacts)
