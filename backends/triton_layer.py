"""Triton adapter: registers the kernels of ``triton_src/`` with the harness.

Besides ``prepare`` (compile outside the timed region, then a zero-argument launch) every
implementation has ``compile_only(case)``, which compiles its kernel for sm_90 with no GPU
(``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))``) and reports registers,
spills and shared memory from ``ptxas -v`` on the PTX; and ``grid(case)``, which describes the
launch grid and what the first and last programs cover.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from harness import Source, register
from harness.errors import Unsupported

try:
    import triton
    import triton.language as tl  # noqa: F401
    _IMPORT_ERROR = None
except Exception as e:  # pragma: no cover - depends on the machine
    triton = None
    _IMPORT_ERROR = f"triton not importable: {type(e).__name__}: {e}"

if triton is not None:
    from triton_src import device_facts, interpreting
    from triton_src import gemm_epilogue as G
    from triton_src import softmax as S
    from triton_src import vector_add as V

# The interpreter runs each program in numpy: about 10 ms per program on a slow core. In the CPU
# mode, cases with more output elements than this are compiled for sm_90 but not executed.
INTERPRETER_MAX_ELEMENTS = 1 << 18
INTERPRETER_MAX_FLOPS = 1 << 27  # GEMM: the interpreter's tl.dot loop costs about M*N*K

LAYER = "triton"
_TRITON_SIG = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


# -- availability ------------------------------------------------------------------------------
def available() -> str | None:
    if _IMPORT_ERROR:
        return _IMPORT_ERROR
    if not interpreting() and not torch.cuda.is_available():
        return "no CUDA GPU; set TRITON_INTERPRET=1 (before importing triton) to run on the CPU"
    return None


def _check_device(inputs) -> None:
    dev = next(t for t in inputs if isinstance(t, torch.Tensor)).device
    if dev.type == "cpu" and not interpreting():
        raise Unsupported("CPU tensors run only under TRITON_INTERPRET=1")
    if dev.type == "cuda" and interpreting():
        raise Unsupported("TRITON_INTERPRET=1 is set: Triton runs on the CPU in this process")


# -- compile facts -----------------------------------------------------------------------------
def _python_fn(k):
    """The plain Python function under @triton.jit / heuristics / autotune (or interpreter) wrappers."""
    while not callable(k) or hasattr(k, "fn"):
        nxt = getattr(k, "fn", None)
        if nxt is None:
            break
        k = nxt
    return k


_JIT: dict = {}


def _jit_function(kernel):
    """A compilable JITFunction for ``kernel``, also when TRITON_INTERPRET=1 made it an interpreter
    object (compile_only must work in such a process)."""
    from triton.runtime.jit import JITFunction
    if isinstance(kernel, JITFunction):
        return kernel
    fn = _python_fn(kernel)
    if fn not in _JIT:
        _JIT[fn] = JITFunction(fn)
    return _JIT[fn]


def _ptxas_path() -> str:
    """The ptxas Triton itself assembles sm_90 with (3.9 uses its newer 'ptxas-blackwell' for
    sm_90+; 3.6 its bundled ptxas), so the PTX ISA version it emits is accepted."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        return get_ptxas(90).path
    except Exception:
        pass
    try:
        return triton.knobs.nvidia.ptxas.path
    except Exception:
        pass
    p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if p.exists():
        return str(p)
    from harness.ptxas import find_ptxas
    return find_ptxas()


def ptx_facts(ptx: str) -> dict:
    """``ptxas -v`` on Triton's PTX with Triton's own ptxas (the PTX ISA version it emits can be
    newer than a system CUDA toolkit's ptxas accepts)."""
    from harness.ptxas import parse_ptxas_log
    arch = (re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M) or [None, "sm_90a"])[1]
    exe = _ptxas_path()
    if not exe:
        raise RuntimeError("ptxas not found")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        Path(src).write_text(ptx)
        r = subprocess.run([exe, "-v", f"-arch={arch}", src, "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"ptxas failed: {r.stderr.strip()[:1000]}")
    return parse_ptxas_log(r.stderr + r.stdout)


def _ast_source(jf, signature: dict, constexprs: dict, aligned: set):
    """ASTSource across Triton versions: 3.3+ (3.6 on the GPU machine, 3.9 here) take constexprs
    keyed by argument-index paths and attributes as [["tt.divisibility", 16]] lists; some
    releases accept only names as keys, so fall back to those."""
    from triton.compiler import ASTSource
    names = list(jf.arg_names)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    try:
        return ASTSource(fn=jf, signature=signature,
                         constexprs={(names.index(k),): v for k, v in constexprs.items()}, attrs=attrs)
    except (TypeError, AssertionError):
        return ASTSource(fn=jf, signature=signature, constexprs=dict(constexprs), attrs=attrs)


class _compiler_mode:
    """Under TRITON_INTERPRET=1 the standard library's @triton.jit helpers (tl.cdiv, tl.max,
    tl.sum, ...) are interpreter objects, which the code generator cannot compile. For the
    duration of a compile, swap each for a JITFunction of the same Python function and turn the
    interpret knob off; restore both afterwards."""

    _cache: dict = {}

    @staticmethod
    def _undo_leaked_patches(mods) -> None:
        """The interpreter patches tl builtins for the length of a run, but a nested call of a
        standard-library helper (tl.cdiv, ...) re-patches triton.language.core without undoing it
        (triton 3.9). Those wrappers keep the original as their ``member`` default: put it back."""
        import types
        for obj in mods:
            for attr, val in list(vars(obj).items()):
                kw = getattr(val, "__kwdefaults__", None) if isinstance(val, types.FunctionType) else None
                if val.__class__ is types.FunctionType and val.__name__ == "<lambda>" and kw and "member" in kw:
                    setattr(obj, attr, kw["member"])

    def __enter__(self):
        self.changes = []
        if not interpreting():
            return self
        import sys as _sys
        from triton.runtime.interpreter import InterpretedFunction
        lang = [m for n, m in list(_sys.modules.items()) if m is not None and n.startswith("triton.language")]
        self._undo_leaked_patches(lang + [triton.language.core.tensor])
        from triton.runtime.jit import JITFunction
        for name, mod in list(_sys.modules.items()):
            if not name.startswith("triton.language") or mod is None:
                continue
            for attr, val in list(vars(mod).items()):
                if isinstance(val, InterpretedFunction):
                    jf = self._cache.get(val.fn) or self._cache.setdefault(val.fn, JITFunction(val.fn))
                    self.changes.append((mod, attr, val))
                    setattr(mod, attr, jf)
        try:
            self.knob = triton.knobs.runtime.interpret
            triton.knobs.runtime.interpret = False
        except Exception:
            self.knob = None
        return self

    def __exit__(self, *exc):
        for mod, attr, val in reversed(self.changes):
            setattr(mod, attr, val)
        if self.changes and self.knob is not None:
            triton.knobs.runtime.interpret = self.knob
        return False


def compile_sm90(kernel, args: dict, constexprs: dict, num_warps: int, num_stages: int = 3,
                 aligned: tuple = ()) -> dict:
    """Compile ``kernel`` for sm_90 without a GPU; ``args`` maps runtime arguments to Triton type
    strings ('*fp32', 'i32', ...). Returns compile seconds, registers, spills, shared memory."""
    from triton.backends.compiler import GPUTarget
    jf = _jit_function(kernel)
    sig = {}
    for name in jf.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in args:
            sig[name] = args[name]
        else:
            raise ValueError(f"compile_only: no type or value for argument {name!r} of {jf.__name__}")
    src = _ast_source(jf, sig, constexprs, set(aligned))
    t0 = time.perf_counter()
    with _compiler_mode():
        ck = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": num_warps, "num_stages": num_stages})
    secs = time.perf_counter() - t0
    per_kernel = ptx_facts(ck.asm["ptx"])
    d = next(iter(per_kernel.values()), {})
    smem = getattr(ck.metadata, "shared", None)
    return {"compile_s": round(secs, 3), "registers": d.get("registers"), "spills": d.get("spills", 0),
            "smem": smem if smem is not None else d.get("smem", 0),
            "kernels": {jf.__name__: {**d, "smem": smem}}, "target": "sm_90a" if "sm_90a" in
            ck.asm["ptx"] else "sm_90", "triton": triton.__version__,
            "config": {"num_warps": num_warps, "num_stages": num_stages,
                       **{k: v for k, v in constexprs.items()}}}


def _compile_only(fn):
    """compile_only for the registry: in this process (also under TRITON_INTERPRET=1); should the
    interpreter have left Triton's language module in a state the compiler cannot use, compile in
    a fresh process without the interpreter instead (same facts, a few seconds slower)."""
    def compile_only(case):
        try:
            return fn(case)
        except Unsupported:
            raise
        except Exception as first:
            if not interpreting():
                raise
            import json
            import sys
            env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
            root = str(Path(__file__).resolve().parent.parent)
            code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from harness.case import Case; "
                    "from backends import triton_layer as T; "
                    f"print('@@' + json.dumps(T.{fn.__name__}(Case.from_json(json.loads(sys.argv[2])))))")
            r = subprocess.run([sys.executable, "-c", code, root, json.dumps(case.to_json())], env=env,
                               capture_output=True, text=True, timeout=600)
            line = next((ln for ln in r.stdout.splitlines() if ln.startswith("@@")), None)
            if r.returncode != 0 or line is None:
                raise RuntimeError(f"compile_only failed in process ({first}) and in a subprocess: "
                                   f"{r.stderr.strip()[-800:]}") from None
            return json.loads(line[2:]) | {"note": "compiled in a subprocess"}
    return compile_only


def _ptr(case) -> str:
    return "*" + _TRITON_SIG[case.torch_dtype]


def _runtime_facts(kernel, *args, grid=(1,), **kw) -> dict:
    """Registers / spills / shared memory of the kernel the launch used (GPU only)."""
    if interpreting():
        return {}
    try:
        k = kernel.warmup(*args, grid=grid, **kw)
        k._init_handles()
        return {"registers": k.n_regs, "spills": k.n_spills, "smem": k.metadata.shared}
    except Exception:
        return {}


def _timed_first_call(fn) -> float:
    t0 = time.perf_counter()
    fn()
    if not interpreting() and torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _programs(grid_size, describe, first=3, last=2):
    ids = list(range(min(first, grid_size))) + list(range(max(first, grid_size - last), grid_size))
    return [describe(i) for i in ids]


# -- vector_add --------------------------------------------------------------------------------
def _va_compile(case):
    cfg = V.vector_add_config(case.N)
    p = _ptr(case)
    return compile_sm90(V.vector_add_kernel, {"x_ptr": p, "y_ptr": p, "out_ptr": p, "n": "i32"},
                        {"BLOCK": cfg["BLOCK"], "INT64": cfg["INT64"]}, cfg["num_warps"],
                        aligned=("x_ptr", "y_ptr", "out_ptr"))


def _va_grid(case):
    n = case.N
    cfg = V.vector_add_config(n)
    b = cfg["BLOCK"]
    g = V.vector_add_grid(n, b)[0]

    def describe(i):
        lo, hi = i * b, min(n, (i + 1) * b)
        return {"pid": [i, 0, 0], "covers": f"elements {lo}..{hi - 1}", "kept": hi - lo,
                "dropped": b - (hi - lo)}
    return {"grid": [g, 1, 1], "block": {"BLOCK": b, "num_warps": cfg["num_warps"]},
            "programs": _programs(g, describe)}


@register(problem="vector_add", layer=LAYER, name="add",
          description="one program per BLOCK elements, masked tail; BLOCK/num_warps tuned on H200",
          sources=[Source("triton_src/vector_add.py", kernels=("vector_add_kernel",),
                          host=("vector_add",))],
          devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS, available=available, compile_only=_compile_only(_va_compile), grid=_va_grid)
def prepare_vector_add(case, inputs, out):
    _check_device(inputs)
    x, y = inputs
    scratch = torch.empty_like(out)
    secs = _timed_first_call(lambda: V.vector_add(x, y, scratch))
    cfg = V.vector_add_config(x.numel())

    def launch():
        V.vector_add(x, y, out)
    launch.info = {"compile_s": round(secs, 3), "config": cfg,
                   **_runtime_facts(V.vector_add_kernel, x, y, out, x.numel(), BLOCK=cfg["BLOCK"],
                                    INT64=cfg["INT64"], num_warps=cfg["num_warps"])}
    return launch


# -- softmax -----------------------------------------------------------------------------------
def _sm_args(case):
    p = _ptr(case)
    return {"x_ptr": p, "out_ptr": p, "M": "i32", "N": "i32", "stride_x": "i32", "stride_o": "i32"}


def _row_stride(case) -> int:
    from harness.problems.softmax import row_pad
    return case.N + row_pad(case.params.get("layout", "contiguous"), case.N)


def _sm_aligned(case):
    s = torch.empty((), dtype=case.torch_dtype).element_size()
    ok_stride = (_row_stride(case) * s) % 16 == 0
    return ("x_ptr", "out_ptr") + (("stride_x",) if ok_stride and _row_stride(case) % 16 == 0 else ())


def _fused_compile(case):
    if (why := S.fused_row_supports(case.N)):
        raise Unsupported(why)
    cfg = S.fused_row_config(case.N)
    return compile_sm90(S.softmax_fused_row_kernel, _sm_args(case), {"BLOCK_N": cfg["BLOCK_N"]},
                        cfg["num_warps"], aligned=_sm_aligned(case))


def _persistent_compile(case):
    if (why := S.persistent_supports(case.N)):
        raise Unsupported(why)
    cfg = S.persistent_config(case.N, elem_size=torch.empty((), dtype=case.torch_dtype).element_size())
    return compile_sm90(S.softmax_persistent_kernel, _sm_args(case),
                        {k: cfg[k] for k in ("ROWS", "BLOCK_N", "NUM_STAGES")}, cfg["num_warps"],
                        aligned=_sm_aligned(case))


def _online_compile(case):
    cfg = S.online_config(case.N, torch.empty((), dtype=case.torch_dtype).element_size())
    return compile_sm90(S.softmax_online_kernel, _sm_args(case),
                        {k: cfg[k] for k in ("BLOCK_N", "NUM_STAGES")}, cfg["num_warps"],
                        aligned=_sm_aligned(case))


def _split_args(case):
    return {"x_ptr": _ptr(case), "out_ptr": _ptr(case), "slot_ptr": "*i64", "N": "i32",
            "stride_x": "i32", "stride_o": "i32", "C": "i32", "n_units": "i32", "max_spin": "i32"}


def _split_cfg(case):
    return S.split_config(case.N, torch.empty((), dtype=case.torch_dtype).element_size())


def _split_compile(case):
    if (why := S.split_supports(case.N)):
        raise Unsupported(why)
    cfg = _split_cfg(case)
    # integer arguments the launch specialises as multiples of 16 (out is contiguous, stride N);
    # N's and the strides' decide the vector width of the loads and stores, so without them the
    # facts would describe a scalar-store kernel with a layout conversion the launch never runs
    ints = {"N": case.N, "stride_o": case.N, "C": cfg["C"], "n_units": case.M * cfg["C"],
            "max_spin": S.SPLIT_MAX_SPIN}
    aligned = _sm_aligned(case) + ("slot_ptr",) + tuple(k for k, v in ints.items() if v % 16 == 0)
    return compile_sm90(S.softmax_split_kernel, _split_args(case),
                        {k: cfg[k] for k in ("CHUNK", "C_PAD", "PREFETCH")}, cfg["num_warps"],
                        aligned=aligned)


def _split_grid(case):
    if (why := S.split_supports(case.N)):
        return {"unsupported": why}
    cfg = _split_cfg(case)
    M, N, B, C = case.M, case.N, cfg["CHUNK"], cfg["C"]
    if interpreting() or not torch.cuda.is_available():
        # the H200 run's compiled defaults: fp32 two programs an SM, 16-bit four
        per_sm = 2 if cfg["num_warps"] >= 8 else 4
        sms, where = 132, f"an H200's 132 SMs x {per_sm} programs/SM (the GPU launch computes it)"
    else:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        per_sm = max(1, 64 // cfg["num_warps"])
        where = f"{sms} SMs x {per_sm} programs/SM (upper bound; the launch refines it from n_regs)"
    g = min(M * C, sms * per_sm // C * C)
    units = M * C

    def describe(i):
        mine = list(range(i, units, g))
        kept = sum(min(B, N - (u % C) * B) for u in mine)
        first = ", ".join(f"row {u // C} chunk {u % C}" for u in mine[:2])
        return {"pid": [i, 0, 0], "covers": f"{len(mine)} units: {first}{'...' if len(mine) > 2 else ''}",
                "kept": kept, "dropped": len(mine) * B - kept}
    return {"grid": [g, 1, 1], "block": cfg,
            "note": f"{C} chunks of {B} columns a row, one unit per chunk; grid = multiple of C <= "
                    f"{where}; units u = pid + k*grid, all chunks of a row in one round",
            "programs": _programs(g, describe)}


def _dispatch_name(case) -> str:
    return S.choose_variant(case.N, torch.empty((), dtype=case.torch_dtype).element_size())


def _rows_grid(case, block_n, extra):
    M, N = case.M, case.N

    def describe(i):
        return {"pid": [i, 0, 0], "covers": f"row {i}, columns 0..{N - 1}", "kept": N,
                "dropped": block_n - N}
    return {"grid": [M, 1, 1], "block": extra, "programs": _programs(M, describe)}


def _fused_grid(case):
    if (why := S.fused_row_supports(case.N)):
        return {"unsupported": why}
    cfg = S.fused_row_config(case.N)
    return _rows_grid(case, cfg["BLOCK_N"], cfg)


def _persistent_grid(case):
    if (why := S.persistent_supports(case.N)):
        return {"unsupported": why}
    cfg = S.persistent_config(case.N, elem_size=torch.empty((), dtype=case.torch_dtype).element_size())
    M, N, R = case.M, case.N, cfg["ROWS"]
    blocks = -(-M // R)
    sms = torch.cuda.get_device_properties(0).multi_processor_count \
        if torch.cuda.is_available() and not interpreting() else 132
    per_sm = max(1, 64 // cfg["num_warps"])  # upper bound; the launch refines it from n_regs
    g = min(blocks, sms * per_sm)

    def describe(i):
        mine = list(range(i, blocks, g))
        first_rows = [b * R for b in mine[:2]]
        kept = sum(min(R, M - b * R) for b in mine) * N
        total = len(mine) * R * cfg["BLOCK_N"]
        return {"pid": [i, 0, 0], "covers": f"{len(mine)} blocks of {R} rows, starting at rows "
                f"{first_rows}{'...' if len(mine) > 2 else ''}", "kept": kept, "dropped": total - kept}
    return {"grid": [g, 1, 1], "block": cfg, "note": f"grid <= {sms} SMs x {per_sm} programs/SM "
            f"(refined at launch from the compiled kernel's registers and shared memory)",
            "programs": _programs(g, describe)}


def _online_grid(case):
    cfg = S.online_config(case.N, torch.empty((), dtype=case.torch_dtype).element_size())
    M, N, B = case.M, case.N, cfg["BLOCK_N"]
    tiles = -(-N // B)

    def describe(i):
        return {"pid": [i, 0, 0], "covers": f"row {i}: {tiles} tiles of {B} columns, read twice",
                "kept": N, "dropped": tiles * B - N}
    return {"grid": [M, 1, 1], "block": cfg, "programs": _programs(M, describe)}


def _softmax_prepare(variant):
    def prepare(case, inputs, out):
        _check_device(inputs)
        (x,) = inputs
        name = _dispatch_name(case) if variant == "softmax" else variant
        fn = S.VARIANTS[name]
        scratch = torch.empty_like(out)
        try:
            secs = _timed_first_call(lambda: fn(x, scratch))
        except ValueError as e:
            raise Unsupported(str(e)) from None

        def launch():
            fn(x, out)
        launch.info = {"compile_s": round(secs, 3), "variant": name}
        return launch
    return prepare


def _softmax_supports(variant):
    def supports(case):
        if variant in ("fused_row", "persistent"):
            return S.fused_row_supports(case.N)
        if variant == "split":
            return S.split_supports(case.N)
        return None
    return supports


_SM_SRC = "triton_src/softmax.py"
for _name, _kernel, _host, _desc, _comp, _grid in (
    ("fused_row", "softmax_fused_row_kernel", "softmax_fused_row",
     "one row per program, whole row in registers, -inf padding",
     _compile_only(_fused_compile) if triton else None,
     _fused_grid),
    ("persistent", "softmax_persistent_kernel", "softmax_persistent",
     "grid = SMs x occupancy; programs loop over blocks of rows, software-pipelined",
     _compile_only(_persistent_compile) if triton else None, _persistent_grid),
    ("online", "softmax_online_kernel", "softmax_online",
     "column tiles, online max/sum rescaling, second pass newest-tile-first; any N",
     _compile_only(_online_compile) if triton else None, _online_grid),
    ("split", "softmax_split_kernel", "softmax_split",
     "long rows, one read: each row's chunks in registers of co-resident programs that swap "
     "(max, sum) through 64-bit slots in global memory; N > 16384. CPU mode runs the same "
     "kernel with its programs as concurrent threads (protocol and math checked, GPU memory "
     "ordering and residency only on the GPU)",
     _compile_only(_split_compile) if triton else None, _split_grid),
):
    register(problem="softmax", layer=LAYER, name=_name, description=_desc,
             sources=[Source(_SM_SRC, kernels=(_kernel,), host=(_host,))], devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS,
             available=available, supports=_softmax_supports(_name), compile_only=_comp,
             grid=_grid)(_softmax_prepare(_name))


def _dispatch_compile(case):
    return {"fused_row": _fused_compile, "persistent": _persistent_compile, "online": _online_compile,
            "split": _split_compile}[_dispatch_name(case)](case) | {"variant": _dispatch_name(case)}


def _dispatch_grid(case):
    return {"fused_row": _fused_grid, "persistent": _persistent_grid, "online": _online_grid,
            "split": _split_grid}[_dispatch_name(case)](case) | {"variant": _dispatch_name(case)}


register(problem="softmax", layer=LAYER, name="softmax",
         description="dispatcher: persistent for short rows, fused_row up to 32K columns, else split "
                     "(online where split cannot)",
         sources=[Source(_SM_SRC, kernels=("softmax_fused_row_kernel", "softmax_persistent_kernel",
                                           "softmax_split_kernel", "softmax_online_kernel"),
                         host=("softmax", "choose_variant"))],
         devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS, available=available, compile_only=_compile_only(_dispatch_compile),
         grid=_dispatch_grid)(_softmax_prepare("softmax"))


# -- gemm_epilogue -----------------------------------------------------------------------------
def _gemm_config_for(case):
    """The config compile_only reports: the first surviving config (CONFIGS lists the H200's
    usual autotune pick first)."""
    return G.prune_configs(G.CONFIGS, {"M": case.M, "N": case.N})[0]


def _gemm_flags(case) -> dict:
    return {"ACT": G.ACTS[case.params.get("act", "relu")], "HAS_BIAS": bool(int(case.params.get("bias", 1))),
            "UPCAST": False}


def _gemm_tile(pid, tiles_m, tiles_n, group_m):
    """(row, column) of C tile ``pid`` in the kernels' grouped order (``_grouped_tile``)."""
    per_group = group_m * tiles_n
    first = (pid // per_group) * group_m
    rows = min(tiles_m - first, group_m)
    return first + (pid % per_group) % rows, (pid % per_group) // rows


def _gemm_compile(case):
    cfg = _gemm_config_for(case)
    p = _ptr(case)
    args = {"a_ptr": p, "b_ptr": p, "bias_ptr": p, "c_ptr": p, "M": "i32", "N": "i32", "K": "i32",
            "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32",
            "stride_cm": "i32", "stride_cn": "i32"}
    aligned = ["a_ptr", "b_ptr", "bias_ptr", "c_ptr"]
    # row strides K, N, N: 16-divisible ones specialise (unit strides are passed as values)
    for name, v in (("stride_am", case.K), ("stride_bk", case.N), ("stride_cm", case.N)):
        if v % 16 == 0:
            aligned.append(name)
    for name in ("M", "N", "K"):
        if getattr(case, name) % 16 == 0:
            aligned.append(name)
    const = {**_gemm_flags(case), **cfg.kwargs, "EVEN_K": case.K % cfg.kwargs["BLOCK_K"] == 0}
    return compile_sm90(G.gemm_epilogue_kernel, args, const, cfg.num_warps, cfg.num_stages,
                        aligned=tuple(aligned))


def _gemm_grid(case):
    cfg = _gemm_config_for(case) if not interpreting() else G.INTERPRETER_CONFIG
    kw = cfg.kwargs
    M, N, BM, BN, GM = case.M, case.N, kw["BLOCK_M"], kw["BLOCK_N"], kw["GROUP_M"]
    tm, tn = -(-M // BM), -(-N // BN)
    g = tm * tn

    def describe(i):
        pm, pn = _gemm_tile(i, tm, tn, GM)
        rm, rn = min(BM, M - pm * BM), min(BN, N - pn * BN)
        return {"pid": [i, 0, 0], "covers": f"C tile ({pm}, {pn}): rows {pm * BM}..{pm * BM + rm - 1}, "
                f"cols {pn * BN}..{pn * BN + rn - 1}", "kept": rm * rn, "dropped": BM * BN - rm * rn}
    return {"grid": [g, 1, 1], "block": {**kw, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
                                         "EVEN_K": case.K % kw["BLOCK_K"] == 0},
            "note": "autotuned on the GPU; the grid shown is for the listed config",
            "programs": _programs(g, describe)}


@register(problem="gemm_epilogue", layer=LAYER, name="gemm",
          description="tiled tl.dot, grouped order, fp32 acc, bias+act on the accumulator; autotuned",
          sources=[Source("triton_src/gemm_epilogue.py", kernels=("gemm_epilogue_kernel",),
                          host=("gemm_epilogue", "prune_configs", "gemm_grid"))],
          devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS, cpu_max_flops=INTERPRETER_MAX_FLOPS, available=available, compile_only=_compile_only(_gemm_compile) if triton else None,
          grid=_gemm_grid)
def prepare_gemm(case, inputs, out):
    _check_device(inputs)
    a, b, bias = inputs
    act = case.params.get("act", "relu")
    scratch = torch.empty_like(out)
    secs = _timed_first_call(lambda: G.gemm_epilogue(a, b, bias, act, scratch))
    cfg = None if interpreting() else G.tuned_config(a, b, act, bias is not None)

    def launch():
        G.gemm_epilogue(a, b, bias, act, out)
    info = {"compile_s": round(secs, 3), "note": "compile_s includes autotuning" if cfg else ""}
    if cfg is not None:
        info["config"] = {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        info |= _runtime_facts(G.gemm_epilogue_kernel, a, b, bias if bias is not None else a, out,
                               a.shape[0], b.shape[1], a.shape[1], a.stride(0), a.stride(1),
                               b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                               ACT=G.ACTS[act], HAS_BIAS=bias is not None, UPCAST=False,
                               **cfg.kwargs, EVEN_K=a.shape[1] % cfg.kwargs["BLOCK_K"] == 0,
                               num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    launch.info = info
    return launch


# -- gemm_epilogue, persistent TMA-descriptor variant ----------------------------------------
def _gemm_tma_supports(case):
    return G.gemm_tma_supports(case.M, case.N, case.K, dtype=case.torch_dtype)


def _gemm_tma_config_for(case):
    """As for triton:gemm: the first surviving config of TMA_CONFIGS (the expected H200 pick)."""
    return G.prune_configs(G.TMA_CONFIGS, {"M": case.M, "N": case.N})[0]


def _gpu_sms() -> int:
    """SMs the persistent grid is sized for: this process's GPU, else an H200's 132."""
    if torch.cuda.is_available() and not interpreting():
        return torch.cuda.get_device_properties(0).multi_processor_count
    return 132


def _gemm_tma_compile(case, config=None):
    """compile_only for ``config`` (default: the expected pick). The descriptors enter the
    signature as 'tensordesc<bf16[BM, BK]>' types: the box shape is part of the kernel's type."""
    if (why := _gemm_tma_supports(case)):
        raise Unsupported(why)
    cfg = config or _gemm_tma_config_for(case)
    kw = cfg.kwargs
    t = _TRITON_SIG[case.torch_dtype]
    c_cols = kw["BLOCK_N"] // 2 if kw["EPILOGUE_SUBTILE"] else kw["BLOCK_N"]
    args = {"a_desc": f"tensordesc<{t}[{kw['BLOCK_M']}, {kw['BLOCK_K']}]>",
            "b_desc": f"tensordesc<{t}[{kw['BLOCK_K']}, {kw['BLOCK_N']}]>",
            "c_desc": f"tensordesc<{t}[{kw['BLOCK_M']}, {c_cols}]>",
            "bias_ptr": _ptr(case), "M": "i32", "N": "i32", "K": "i32"}
    aligned = ["bias_ptr"] + [n for n in ("M", "N", "K") if getattr(case, n) % 16 == 0]
    return compile_sm90(G.gemm_epilogue_tma_kernel, args, {**_gemm_flags(case), **kw, "NUM_SMS": _gpu_sms()},
                        cfg.num_warps, cfg.num_stages, aligned=tuple(aligned))


def _gemm_tma_grid(case):
    if (why := _gemm_tma_supports(case)):
        return {"unsupported": why}
    if interpreting():
        cfg, sms = G.TMA_INTERPRETER_CONFIG, device_facts(torch.device("cpu"))["sms"]
    else:
        cfg, sms = _gemm_tma_config_for(case), _gpu_sms()
    kw = cfg.kwargs
    M, N, BM, BN = case.M, case.N, kw["BLOCK_M"], kw["BLOCK_N"]
    tm, tn = -(-M // BM), -(-N // BN)
    g = G.tma_grid(M, N, BM, BN, sms)[0]

    def describe(i):
        mine = [_gemm_tile(t, tm, tn, kw["GROUP_M"]) for t in range(i, tm * tn, g)]
        kept = sum(min(BM, M - pm * BM) * min(BN, N - pn * BN) for pm, pn in mine)
        return {"pid": [i, 0, 0], "covers": f"{len(mine)} C tiles of {BM}x{BN}, first "
                f"{', '.join(map(str, mine[:2]))}{'...' if len(mine) > 2 else ''}",
                "kept": kept, "dropped": len(mine) * BM * BN - kept}
    return {"grid": [g, 1, 1], "block": {**kw, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
            "note": f"persistent: min({sms} SMs, {tm * tn} tiles) programs, tile stride {g}; autotuned "
            "on the GPU, the grid shown is for the listed config", "programs": _programs(g, describe)}


@register(problem="gemm_epilogue", layer=LAYER, name="gemm_tma",
          description="persistent (one program per SM), TMA descriptors for A/B/C, grouped order, "
                      "fp32 acc, bias+act on the accumulator; autotuned; K, N multiples of 8",
          sources=[Source("triton_src/gemm_epilogue.py", kernels=("gemm_epilogue_tma_kernel",),
                          host=("gemm_epilogue_tma", "gemm_tma_supports", "tma_descriptors"))],
          devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS,
          cpu_max_flops=INTERPRETER_MAX_FLOPS, available=available, supports=_gemm_tma_supports,
          compile_only=_compile_only(_gemm_tma_compile) if triton else None, grid=_gemm_tma_grid)
def prepare_gemm_tma(case, inputs, out):
    _check_device(inputs)
    a, b, bias = inputs
    act = case.params.get("act", "relu")
    scratch = torch.empty_like(out)
    for o in (out, scratch):
        if (why := G.gemm_tma_check(a, b, o)):
            raise Unsupported(why)
    secs = _timed_first_call(lambda: G.gemm_epilogue_tma(a, b, bias, act, scratch))
    cfg = None if interpreting() else G.tuned_config(a, b, act, bias is not None, G.gemm_epilogue_tma_tuned)

    def launch():
        G.gemm_epilogue_tma(a, b, bias, act, out)
    info = {"compile_s": round(secs, 3), "note": "compile_s includes autotuning" if cfg else ""}
    if cfg is not None:
        info["config"] = {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        info |= _runtime_facts(G.gemm_epilogue_tma_kernel, *G.tma_descriptors(a, b, out, cfg.kwargs),
                               bias if bias is not None else a, a.shape[0], b.shape[1], a.shape[1],
                               **_gemm_flags(case), **cfg.kwargs, NUM_SMS=_gpu_sms(),
                               num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    launch.info = info
    return launch
