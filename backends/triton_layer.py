"""Triton adapter: registers the kernels of ``triton_src/`` with the harness.

Ids (docs/DESIGN.md): ``triton:<problem>`` the default (``triton_src/dispatch.py`` plans once in
``prepare``: kernel, configuration, grid, constexprs; the launch is one call of the compiled
kernel's launcher), ``triton:<problem>_simple`` the teaching twin (``triton_src/<problem>.py``,
launched the tutorial way), ``triton:<problem>_<algorithm>`` the tuned variants.

Every implementation also has ``compile_only(case)``: it builds the very launch ``prepare`` would
bind, on meta tensors with the case's shapes, strides and alignment, specialises it as Triton's
launcher would and compiles it for sm_90 with no GPU (``triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))``), reporting registers, spills and shared memory from
``ptxas -v``; and ``grid(case)``, the launch grid and what the first and last programs cover.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from harness import Source, planned, planned_sources, register
from harness import grid as hgrid
from harness.errors import Unsupported
from harness.meta_inputs import meta_gemm as _meta_gemm, meta_softmax as _meta_softmax, meta_vector_add as _meta_vector_add

from . import planner_rules

try:
    import triton
    import triton.language as tl  # noqa: F401
    _IMPORT_ERROR = None
except Exception as e:  # pragma: no cover - depends on the machine
    triton = None
    _IMPORT_ERROR = f"triton not importable: {type(e).__name__}: {e}"

if triton is not None:
    from triton_src import H200, dispatch, interpreting
    from triton_src import gemm_epilogue as gemm_simple
    from triton_src import gemm_epilogue_splitk as gemm_splitk
    from triton_src import gemm_epilogue_tiled as gemm_tiled
    from triton_src import gemm_epilogue_tma as gemm_tma
    from triton_src import softmax as softmax_simple
    from triton_src import softmax_block, softmax_online, softmax_rows, softmax_split
    from triton_src import vector_add as vector_add_simple
    from triton_src import vector_add_unmasked
    from triton_src.runtime import Spec
else:   # the rules alone: the ids and their sources as with triton
    dispatch = planner_rules("triton_src")

# The interpreter runs each program in numpy: about 10 ms per program on a slow core. In the CPU
# mode, cases with more output elements than this are compiled for sm_90 but not executed.
INTERPRETER_MAX_ELEMENTS = 1 << 18
# long rows run as thousands of interpreted column tiles per program (a minute at 2 x 131072):
# in the CPU mode the softmax rows above this many columns are compiled, not executed
INTERPRETER_MAX_COLS = 1 << 15
INTERPRETER_MAX_FLOPS = 1 << 27  # GEMM: the interpreter's tl.dot loop costs about M*N*K

LAYER = "triton"


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
        raise Unsupported("CPU tensors run only under Triton's interpreter (TRITON_INTERPRET=1)")
    if dev.type == "cuda" and interpreting():
        raise Unsupported("Triton's interpreter is on: Triton runs on the CPU in this process")


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
            if not name.startswith(("triton.language", "triton_src")) or mod is None:
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



def compile_spec(spec: "Spec", ptxas: bool = True, cc: int = 90) -> dict:
    """Compile one launch spec for sm_90 (``cc``: another compute capability, e.g. 80) without a GPU. Every argument is specialised as Triton's
    launcher specialises it (``native_specialize_impl``: pointer dtype and 16-byte alignment,
    integers as i32 / i64, multiples of 16, the value 1 as a constant), so the PTX is the one the
    launch would run. Returns compile seconds, registers, spills, shared memory, the config."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource
    jf = _jit_function(spec.kernel)
    signature, constexprs, attrs = {}, {}, {}
    for i, p in enumerate(jf.params):
        if p.name not in spec.args:
            raise ValueError(f"compile_only: no value for argument {p.name!r} of {jf.__name__}")
        v = spec.args[p.name]
        if p.is_constexpr:
            signature[p.name], constexprs[(i,)] = "constexpr", v
            continue
        ty, attr = native_specialize_impl(BaseBackend, v, False, True, True)
        if ty == "constexpr":
            signature[p.name], constexprs[(i,)] = "constexpr", attr
            continue
        signature[p.name] = ty
        if isinstance(attr, str) and attr:
            attrs[(i,)] = BaseBackend.parse_attr(attr)
    src = ASTSource(fn=jf, signature=signature, constexprs=constexprs, attrs=attrs)
    t0 = time.perf_counter()
    with _compiler_mode():
        ck = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=dict(spec.options))
    secs = time.perf_counter() - t0
    d = next(iter(ptx_facts(ck.asm["ptx"]).values()), {}) if ptxas else {}
    smem = getattr(ck.metadata, "shared", None)
    config = {**spec.options, **{k: v for k, v in spec.args.items()
                                 if jf.params[jf.arg_names.index(k)].is_constexpr}}
    return {"compile_s": round(secs, 3), "registers": d.get("registers"), "spills": d.get("spills", 0),
            "local_bytes": d.get("stack", 0),
            "smem": smem if smem is not None else d.get("smem", 0), "kernel": jf.__name__,
            "target": "sm_90a" if "sm_90a" in ck.asm["ptx"] else f"sm_{cc}", "triton": triton.__version__,
            "grid": list(spec.grid), "config": config, "ptx": ck.asm["ptx"]}


def compile_specs(specs, **extra) -> dict:
    """compile_spec for each launch of an implementation: the first kernel's facts, every
    kernel's under ``kernels`` (the PTX text left out of the result)."""
    facts = [compile_spec(s) for s in specs]
    out = {k: v for k, v in facts[0].items() if k != "ptx"}
    out["kernels"] = {f["kernel"]: {k: f[k] for k in ("registers", "spills", "local_bytes", "smem", "grid")}
                      for f in facts}
    out["compile_s"] = round(sum(f["compile_s"] for f in facts), 3)
    return out | extra


def _compile_only(fn):
    """compile_only for the registry: ``fn`` in this process, also under the interpreter
    (``_compiler_mode`` swaps the interpreter's function objects for compilable ones meanwhile)."""
    def compile_only(case):
        return fn(case)
    compile_only.__name__ = fn.__name__
    return compile_only


def _elem(case) -> int:
    return torch.empty((), dtype=case.torch_dtype).element_size()


def _first_call(launch) -> float:
    """The first launch's seconds (the JIT compile on a GPU). Under the interpreter there is no
    compile, and a first call would only interpret the whole kernel once more (a large share of
    this layer's CPU time in a CPU-mode compare): 0.0, and the harness's own launches run it."""
    if interpreting():
        return 0.0
    t0 = time.perf_counter()
    launch()
    if not interpreting() and torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _compiled_facts(launch) -> dict:
    ck = getattr(launch, "compiled", None)
    if ck is None:
        return {}
    try:
        return {"registers": ck.n_regs, "spills": ck.n_spills, "smem": ck.metadata.shared}
    except Exception:
        return {}


def _info(secs, plan_or_cfg, launch, **more) -> dict:
    return {"compile_s": round(secs, 3), **more, **_compiled_facts(launch)}


def _persistent(count: int, units: int, unit: str, describe, block: dict, note: str) -> dict:
    """A persistent grid of ``count`` programs over ``units`` units, program p taking
    p, p + count, ...: the first and last programs, each with what ``describe(units)`` says."""
    progs = []
    for p in hgrid._ends(count, hgrid.SHOW):
        mine = list(range(p, units, count))
        kept, dropped = describe(mine)
        first = ", ".join(f"{unit} {u}" for u in mine[:2]) + ("..." if len(mine) > 2 else "")
        progs.append({"pid": [p, 0, 0], "covers": f"{len(mine)} {unit}s: {first}", "kept": kept,
                      "dropped": dropped})
    return {"grid": [count, 1, 1], "block": block, "programs": progs, "note": note}


def specs_for(problem: str, variant: str, case, cfg=None) -> list:
    """The launch specs of ``variant`` ("default", "simple" or an algorithm word) of ``problem``
    for ``case`` on meta tensors, with ``cfg`` instead of dispatch's configuration if given:
    what compile_only compiles (and what a script can compile ahead, in parallel)."""
    if problem == "vector_add":
        return [_va_simple_spec(case) if variant == "simple" else _va_default_spec(case, cfg)]
    if problem == "softmax":
        v = _sm_choice(case)[0] if variant == "default" else variant
        return [_sm_spec(v, case, cfg)]
    v, c = _gemm_variant(variant, case)
    return _gemm_specs(v, case, cfg or c)


# -- vector_add --------------------------------------------------------------------------------
def _va_default_spec(case, cfg=None):
    x, y, out = _meta_vector_add(case)
    return vector_add_unmasked.launch_spec(x, y, out, cfg or dispatch.vector_add_choice(case.N, _elem(case))[1])


def _va_simple_spec(case):
    x, y, out = _meta_vector_add(case)
    B = vector_add_simple.BLOCK
    return Spec(vector_add_simple.vector_add_kernel, (triton.cdiv(case.N, B),),
                {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": case.N, "BLOCK": B}, {})


def va_compile_default(case):
    return compile_specs([_va_default_spec(case)])


def va_compile_simple(case):
    return compile_specs([_va_simple_spec(case)])


def _va_grid(spec_fn):
    def grid(case):
        s = spec_fn(case)
        return hgrid.blocks_1d(case.N, s.args["BLOCK"], **s.options)
    return grid


# -- lines of code: each variant's Sources, the planner's (harness.loc) -------------------------
# Without Triton a default counts every variant (planned_sources) plus the planner and
# the runtime; each variant's own row counts its Sources alone.
_GEMM_SRC = "triton_src/gemm_epilogue_{}.py"
VARIANT_SOURCES = {
    "vector_add": {"unmasked": [Source("triton_src/vector_add_unmasked.py", kernels=("vector_add_unmasked_kernel",),
                                       host=("launch_spec", "bind_launch", "config"))]},
    "softmax": {v: [Source(f"triton_src/softmax_{v}.py", kernels=(f"softmax_{v}_kernel",), host=("bind_launch",))]
                for v in ("rows", "block", "online", "split")},
    "gemm_epilogue": {
        "tma": [Source(_GEMM_SRC.format("tma"), kernels=("gemm_epilogue_tma_kernel",), host=("bind_launch",))],
        "tiled": [Source(_GEMM_SRC.format("tiled"), kernels=("gemm_epilogue_tiled_kernel",), host=("bind_launch",))],
        "splitk": [Source(_GEMM_SRC.format("splitk"), kernels=("gemm_splitk_partial_kernel",
                                                               "gemm_splitk_reduce_kernel"), host=("bind_launch",))],
        # the twin's kernel, which the planner also launches (dispatch.plain_spec, plan column)
        "plain": [Source("triton_src/gemm_epilogue.py", kernels=("gemm_epilogue_kernel",), host=())]},
}
#: staging (no word: a tma plan whose config names operands under "stage" launches it first)
STAGE_SOURCES = [Source(_GEMM_SRC.format("tma"), kernels=("stage_rows_kernel",), host=("bind_staged_launch",))]
PLANNER_SOURCES = {
    "vector_add": [Source("triton_src/dispatch.py", kernels=(), host=("plan_vector_add",)),
                   Source("triton_src/runtime.py", kernels=(), host=("bind_spec",))],
    "softmax": [Source("triton_src/dispatch.py", kernels=(), host=("plan_softmax",)),
                Source("triton_src/runtime.py", kernels=(), host=("bind_spec", "programs_per_sm"))],
    "gemm_epilogue": [Source("triton_src/dispatch.py", kernels=(), host=("plan_gemm",)),
                      Source("triton_src/runtime.py", kernels=(), host=("bind_spec",))],
}


def default_sources(problem: str) -> list:
    """The default's Sources, derived from its planner (``harness.planned``: the variants
    ``dispatch.plan`` chooses over the suites' cases), then the binders and the runtime; every
    variant when Triton, and so the planner, cannot be imported."""
    if triton is not None:
        return planned(dispatch.plan, problem, PLANNER_SOURCES[problem])
    table = dict(VARIANT_SOURCES[problem])
    if problem == "gemm_epilogue":   # the tma word's plans may stage
        table["tma"] = table["tma"] + STAGE_SOURCES
    return planned_sources(table, tuple(table), PLANNER_SOURCES[problem])


@register(problem="vector_add", layer=LAYER, name="vector_add",
          description="unmasked full blocks (16-byte vectors whatever N), one masked tail program; "
                      "specialised once, launched through the compiled kernel's launcher",
          sources=default_sources("vector_add"),
          devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS, available=available,
          compile_only=_compile_only(va_compile_default) if triton else None,
          grid=_va_grid(_va_default_spec) if triton else None)
def prepare_vector_add(case, inputs, out):
    from triton_src.checks import vector_add_args
    _check_device(inputs)
    x, y = inputs
    vector_add_args(x, y, out)
    t0 = time.perf_counter()
    plan = dispatch.plan_vector_add(x, y, out)
    secs = time.perf_counter() - t0 + _first_call(plan.launch)
    plan.launch.info = _info(secs, plan, plan.launch, variant=plan.variant, config=plan.config)
    return plan.launch


@register(problem="vector_add", layer=LAYER, name="vector_add_simple",
          description="teaching twin: the tutorial kernel (one masked block per program)",
          sources=[Source("triton_src/vector_add.py", kernels=("vector_add_kernel",), host=("vector_add",))],
          devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS, available=available,
          compile_only=_compile_only(va_compile_simple) if triton else None,
          grid=_va_grid(_va_simple_spec) if triton else None)
def prepare_vector_add_simple(case, inputs, out):
    _check_device(inputs)
    x, y = inputs

    def launch():
        vector_add_simple.vector_add(x, y, out)
    launch.info = {"compile_s": round(_first_call(launch), 3)}
    return launch


# -- softmax -----------------------------------------------------------------------------------
def _sm_cfg(variant, case):
    M, N, es = case.M, case.N, _elem(case)
    if variant == "split":
        return dispatch.softmax_split_config_for(*_meta_softmax(case), H200)
    if variant == "block":
        return dispatch.softmax_block_config(N, es)
    if variant == "rows":
        return dispatch.softmax_rows_config(N, es)
    if variant == "online":
        return dispatch.softmax_online_config(M, N, es, H200)
    return dispatch.softmax_split_config(M, N, es, H200)


def _split_programs(cfg, M) -> tuple[int, int]:
    """(grid, per_sm) of the split kernel on an H200 as the launch computes it, with the
    registers it is expected to take (SOFTMAX's values a thread: about 120 a thread)."""
    per_sm = max(1, 65536 // (128 * 32 * cfg["num_warps"]))
    cap = H200["sms"] * per_sm
    return min(M * cfg["C"], cap // cfg["C"] * cfg["C"]), per_sm


def _sm_spec(variant, case, cfg=None):
    """The launch spec of ``variant`` ("simple", "block", "rows", "online", "split") for ``case``
    on meta tensors (persistent grids as an H200 would get them); ``cfg`` instead of dispatch's."""
    x, out = _meta_softmax(case)
    M, N = case.M, case.N
    if variant == "simple":
        B = min(triton.next_power_of_2(N), 4096)
        return Spec(softmax_simple.softmax_kernel, (M,), {"x_ptr": x, "out_ptr": out, "N": N,
                    "stride_x": x.stride(0), "stride_out": out.stride(0), "BLOCK": B}, {})
    cfg = cfg or _sm_cfg(variant, case)
    if variant == "block":
        return softmax_block.launch_spec(x, out, cfg)
    if variant == "rows":
        blocks = triton.cdiv(M, cfg["ROWS"])
        return softmax_rows.launch_spec(x, out, cfg, H200["sms"] * max(1, 64 // cfg["num_warps"])
                                        if cfg.get("PERSISTENT") else blocks)
    if variant == "online":
        return softmax_online.launch_spec(x, out, cfg)
    cfg = softmax_split.with_frame(cfg, x, out)
    slots = torch.empty(M * cfg["C"], dtype=torch.int64, device="meta")
    return softmax_split.launch_spec(x, out, slots, cfg, _split_programs(cfg, M)[0],
                                     softmax_split.MAX_SPIN)


def _sm_supports(variant):
    def supports(case):
        if variant in ("block", "rows"):
            return {"block": softmax_block, "rows": softmax_rows}[variant].supports(case.N)
        if variant == "split":
            return softmax_split.supports(case.N)
        return None
    return supports


def _sm_grid_of(variant, case) -> dict:
    M, N = case.M, case.N
    s = _sm_spec(variant, case)
    a = s.args
    if variant == "simple":
        return hgrid.rows(M, N, a["BLOCK"], **s.options)
    if variant == "block":
        return hgrid.rows(M, N, a["BLOCK_N"], **s.options)
    if variant == "rows":
        R, B = a["ROWS"], a["BLOCK_N"]
        blocks = triton.cdiv(M, R)

        def blk(mine):
            kept = sum(min(R, M - b * R) for b in mine) * N
            return kept, len(mine) * R * B - kept
        note = (f"one block of {R} rows a program" if s.grid[0] >= blocks else
                f"grid <= {H200['sms']} SMs x {64 // s.options['num_warps']} programs/SM (warp "
                f"limit; the launch refines it from the compiled kernel); blocks of {R} rows")
        return _persistent(s.grid[0], blocks, "block", blk, {**a, **s.options} | {"x_ptr": None, "out_ptr": None},
                           note)
    if variant == "online":
        B = a["BLOCK_N"]
        tiles = triton.cdiv(N, B)

        def rows_of(mine):
            return len(mine) * N, len(mine) * (tiles * B - N)
        return _persistent(s.grid[0], M, "row", rows_of, {"BLOCK_N": B, **s.options},
                           f"each row: {tiles} tiles of {B} columns, read twice (the second time "
                           f"newest first, from L2 when it still holds the row)")
    C, B = a["C"], a["CHUNK"]

    def units(mine):
        kept = sum(min(B, N - (u % C) * B) for u in mine)
        return kept, len(mine) * B - kept
    g, per_sm = _split_programs(_sm_cfg("split", case), M)
    return _persistent(g, M * C, "unit", units, {"CHUNK": B, "C": C, **s.options},
                       f"{C} chunks of {B} columns a row, unit u = chunk u % C of row u // C; grid = "
                       f"a multiple of C <= {H200['sms']} SMs x {per_sm} programs/SM (expected; the "
                       f"launch computes it from the compiled kernel), all chunks of a row in one round")


def _strip(d: dict) -> dict:
    return {k: v for k, v in d.items() if not isinstance(v, torch.Tensor) and v is not None}


def _sm_grid(variant):
    def grid(case):
        if variant not in ("default", "simple") and (why := _sm_supports(variant)(case)):
            return {"unsupported": why}
        v = _sm_choice(case)[0] if variant == "default" else variant
        d = _sm_grid_of(v, case)
        d["block"] = _strip(d["block"])
        return d | ({"variant": v} if variant == "default" else {})
    return grid


def _sm_choice(case):
    return dispatch.softmax_choice(case.M, case.N, _elem(case), H200)


def _split_capped_spec(case):
    """The split launch spec with the register cap its launch would choose
    (``softmax_split.with_register_cap``): compiled uncapped, then under the cap
    ``dispatch.split_register_cap`` proposes, kept by the same rule. ptxas's stack frame stands
    for the local memory the GPU reports (spilled values = bytes / 4)."""
    from types import SimpleNamespace

    from triton_src.runtime import programs_per_sm
    spec = _sm_spec("split", case)
    warps = spec.options["num_warps"]

    def capped(cap):
        return spec if cap is None else Spec(spec.kernel, spec.grid, spec.args, {**spec.options, "maxnreg": cap})

    def rule_facts(cap):
        f = compile_spec(capped(cap))
        kernel = SimpleNamespace(n_regs=f["registers"], metadata=SimpleNamespace(shared=f["smem"] or 0),
                                 function=None)
        return {"regs": f["registers"], "spills": (f["local_bytes"] or 0) // 4, "smem": f["smem"] or 0,
                "per_sm": programs_per_sm(kernel, warps, H200), "regs_cap": cap}
    return capped(dispatch.split_register_cap_of(rule_facts, warps, H200))


def _sm_compile(variant):
    def compile_only(case):
        if variant not in ("default", "simple") and (why := _sm_supports(variant)(case)):
            raise Unsupported(why)
        v = _sm_choice(case)[0] if variant == "default" else variant
        if v == "split":
            return compile_specs([_split_capped_spec(case)], variant=v)
        return compile_specs([_sm_spec(v, case)], variant=v)
    compile_only.__name__ = f"softmax_compile_{variant}"
    globals()[compile_only.__name__] = compile_only
    return compile_only


def _sm_prepare(variant):
    def prepare(case, inputs, out):
        from triton_src.checks import softmax_args
        _check_device(inputs)
        (x,) = inputs
        softmax_args(x, out)
        if variant == "simple":
            def launch():
                softmax_simple.softmax(x, out)
            launch.info = {"compile_s": round(_first_call(launch), 3)}
            return launch
        t0 = time.perf_counter()
        try:
            if variant == "default":
                plan = dispatch.plan_softmax(x, out)
                name, cfg, launch = plan.variant, plan.config, plan.launch
            else:
                M, N = x.shape
                name = variant
                facts = dispatch.device_facts(x.device)
                if variant in ("block", "rows"):
                    cfg = getattr(dispatch, f"softmax_{variant}_config")(N, x.element_size())
                elif variant == "split":
                    cfg = dispatch.softmax_split_config_for(x, out, facts)
                else:
                    cfg = dispatch.softmax_online_config(M, N, x.element_size(), facts)
                module = {"block": softmax_block, "rows": softmax_rows, "online": softmax_online,
                          "split": softmax_split}[variant]
                launch = module.bind_launch(x, out, cfg)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        secs = time.perf_counter() - t0 + _first_call(launch)
        launch.info = _info(secs, cfg, launch, variant=name, config=_strip(dict(cfg)),
                            **({"grid": getattr(launch, "grid")} if hasattr(launch, "grid") else {}))
        return launch
    return prepare


_SOFTMAX = {
    "default": ("softmax", "dispatcher: rows (rows <= 4 KB, several a program), block (a row in "
                "registers), split (longer rows over co-resident programs), online (rows "
                "too long for the co-resident grid to hold all their chunks); planned once, launched "
                "through the compiled kernel's launcher",
                default_sources("softmax")),
    "simple": ("softmax_simple", "teaching twin: a program per row, online max/sum over column tiles, "
               "second pass writes; any N",
               [Source("triton_src/softmax.py", kernels=("softmax_kernel",), host=("softmax",))]),
    "block": ("softmax_block", "one row per program, the whole row in registers (rows <= 32768 columns)",
              VARIANT_SOURCES["softmax"]["block"]),
    "rows": ("softmax_rows", "blocks of several short rows, one block a program (or a persistent, "
             "software-pipelined grid)",
             VARIANT_SOURCES["softmax"]["rows"]),
    "online": ("softmax_online", "persistent grid, column tiles with online max/sum, second pass "
               "newest tile first (L2); any N",
               VARIANT_SOURCES["softmax"]["online"]),
    "split": ("softmax_split", "long rows, one read: each row's chunks in registers of co-resident "
              "programs that swap (max, sum) through 64-bit slots in global memory; N > 16384. CPU mode "
              "runs the same kernel with its programs as concurrent threads",
              VARIANT_SOURCES["softmax"]["split"]),
}

for _variant, (_name, _desc, _sources) in _SOFTMAX.items():
    register(problem="softmax", layer=LAYER, name=_name, description=_desc, sources=_sources,
             devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS,
             cpu_max_cols=INTERPRETER_MAX_COLS, available=available,
             supports=None if _variant in ("default", "simple") else _sm_supports(_variant),
             compile_only=_compile_only(_sm_compile(_variant)) if triton else None,
             grid=_sm_grid(_variant) if triton else None)(_sm_prepare(_variant))


# -- gemm_epilogue -----------------------------------------------------------------------------
def _gemm_aligned(a, b, bias, out) -> bool:
    vec = gemm_tiled.vec_facts(a, b, bias, out)
    return dispatch.gemm_aligned(a.element_size(), vec["K_VEC"], vec["N_VEC"])


def _gemm_choice(case):
    a, b, bias, act, out = _meta_gemm(case)
    return dispatch.gemm_choice(case.M, case.N, case.K, gemm_tma.check(a, b, out) is None, H200,
                                _gemm_aligned(a, b, bias, out), dispatch.gemm_copies(a, b))


def _gemm_cfg(variant, case):
    M, N, K = case.M, case.N, case.K
    aligned = _gemm_aligned(*(t for i, t in enumerate(_meta_gemm(case)) if i != 3))
    if variant == "tma":
        return dispatch.gemm_tma_config(M, N, K, H200)
    if variant == "splitk":
        return dispatch.gemm_splitk_config(M, N, K, H200, aligned)
    return dispatch.gemm_tiled_config(M, N, K, H200, aligned)


def _gemm_specs(variant, case, cfg=None):
    a, b, bias, act, out = _meta_gemm(case)
    if variant in ("simple", "plain"):   # the twin's kernel (the default's "plain" path too, its config)
        return [dispatch.plain_spec(a, b, bias, act, out, cfg if variant == "plain" else None)]
    cfg = cfg or _gemm_cfg(variant, case)
    if variant == "tma" and "stage" not in cfg:
        return [gemm_tma.launch_spec(a, b, bias, act, out, cfg, H200["sms"])]
    if variant == "tma":   # staged: the copies of the operands TMA cannot read, then the TMA kernel
        ops = {n: t if gemm_tma.tma_readable(t) else gemm_tma.staged(t) for n, t in (("a", a), ("b", b))}
        copies = [gemm_tma.stage_spec(t, ops[n]) for n, t in (("a", a), ("b", b)) if ops[n] is not t]
        main = gemm_tma.launch_spec(ops["a"], ops["b"], bias, act, out if gemm_tma.tma_readable(out) else ops["a"],
                                    cfg, H200["sms"])
        if not gemm_tma.tma_readable(out):
            main.args.update(c_desc=None, c_ptr=out, stride_cm=out.stride(0), C_TMA=False)
        return [main] + copies   # launched copies first; the TMA kernel is the one a report names
    if variant == "splitk":
        ws = torch.empty((gemm_splitk.slices(case.K, cfg["BLOCK_K"], cfg["SPLIT"])[1], case.M,
                          triton.cdiv(case.N, 4) * 4), dtype=torch.float32, device="meta")
        return list(gemm_splitk.launch_specs(a, b, bias, act, out, ws, cfg))
    return [gemm_tiled.launch_spec(a, b, bias, act, out, cfg)]


def _gemm_supports(variant):
    def supports(case):
        if variant == "tma":
            return gemm_tma.supports(case.M, case.N, case.K, dtype=case.torch_dtype)
        return None
    return supports


def _gemm_variant(variant, case):
    if variant == "default":
        return _gemm_choice(case)
    return variant, None


def _gemm_compile(variant):
    def compile_only(case):
        if (why := _gemm_supports(variant)(case)):
            raise Unsupported(why)
        v, cfg = _gemm_variant(variant, case)
        staged = {"stage": cfg["stage"]} if cfg and "stage" in cfg else {}
        return compile_specs(_gemm_specs(v, case, cfg), variant=v, **staged)
    compile_only.__name__ = f"gemm_compile_{variant}"
    globals()[compile_only.__name__] = compile_only
    return compile_only


def _tile_of(pid, tm, tn, group):
    per_group = group * tn
    first = (pid // per_group) * group
    rows = min(tm - first, group)
    return first + (pid % per_group) % rows, (pid % per_group) // rows


def _gemm_grid(variant):
    def grid(case):
        if (why := _gemm_supports(variant)(case)):
            return {"unsupported": why}
        v, cfg = _gemm_variant(variant, case)
        specs = _gemm_specs(v, case, cfg)
        s = specs[0]
        M, N = case.M, case.N
        if v in ("simple", "plain"):
            a = s.args
            d = hgrid.tiles_2d(M, N, a["BLOCK_M"], a["BLOCK_N"], BLOCK_K=a["BLOCK_K"])
        else:
            a = s.args
            BM, BN, GM = a["BLOCK_M"], a["BLOCK_N"], a["GROUP_M"]
            tm, tn = triton.cdiv(M, BM), triton.cdiv(N, BN)
            block = {k: a[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")} | s.options

            def tiles(mine):
                kept = sum(min(BM, M - pm * BM) * min(BN, N - pn * BN)
                           for pm, pn in (_tile_of(t, tm, tn, GM) for t in mine))
                return kept, len(mine) * BM * BN - kept
            if v == "tma":
                d = _persistent(s.grid[0], tm * tn, "tile", tiles, block,
                                f"persistent: min({H200['sms']} SMs, {tm * tn} tiles) programs, grouped order")
            else:
                d = _persistent(tm * tn, tm * tn, "tile", tiles, block, "one C tile a program, grouped order")
                if v == "splitk":
                    d["grid"][1] = s.grid[1]
                    d["note"] = (f"grid [tiles, SPLIT]: program (t, s) takes K slice s of tile t "
                                 f"(K_SLICE = {a['K_SLICE']}); then a reduce + epilogue grid of "
                                 f"{specs[1].grid[0]} x {specs[1].grid[1]} programs")
        return d | ({"variant": v} if variant == "default" else {})
    return grid


def _gemm_prepare(variant):
    def prepare(case, inputs, out):
        from triton_src.checks import gemm_args
        _check_device(inputs)
        a, b, bias = inputs
        act = case.params.get("act", "relu")
        gemm_args(a, b, bias, act, out)
        if variant == "simple":
            def launch():
                gemm_simple.gemm_epilogue(a, b, bias, act, out)
            launch.info = {"compile_s": round(_first_call(launch), 3)}
            return launch
        t0 = time.perf_counter()
        M, K = a.shape
        N = b.shape[1]
        facts = dispatch.device_facts(a.device)
        aligned = _gemm_aligned(a, b, bias, out)
        try:
            if variant == "default":
                plan = dispatch.plan_gemm(a, b, bias, act, out)
                name, cfg, launch = plan.variant, plan.config, plan.launch
            elif variant == "tma":
                if (why := gemm_tma.check(a, b, out)):
                    raise Unsupported(why)
                name, cfg = variant, dispatch.gemm_tma_config(M, N, K, facts)
                sms = dispatch.INTERPRETER_SMS if interpreting() else facts["sms"]
                launch = gemm_tma.bind_launch(a, b, bias, act, out, cfg, sms)
            elif variant == "splitk":
                name, cfg = variant, dispatch.gemm_splitk_config(M, N, K, facts, aligned)
                launch = gemm_splitk.bind_launch(a, b, bias, act, out, cfg)
            else:
                name, cfg = variant, dispatch.gemm_tiled_config(M, N, K, facts, aligned)
                launch = gemm_tiled.bind_launch(a, b, bias, act, out, cfg)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        secs = time.perf_counter() - t0 + _first_call(launch)
        launch.info = _info(secs, cfg, launch, variant=name, config=_strip(dict(cfg)))
        return launch
    return prepare


_GEMM = {
    "default": ("gemm_epilogue", "dispatcher: persistent TMA when the operands allow it; where TMA cannot "
                "read A or B (N or K not a multiple of 8), those rows copied to 16-byte rows and then the TMA "
                "kernel (C stored from registers where TMA cannot write it) where that models faster than the "
                "pointer kernels; split-K for few rows; tile config by waves on the SMs; planned once, launched "
                "through the compiled kernel's launcher",
                default_sources("gemm_epilogue")),
    "simple": ("gemm_epilogue_simple", "teaching twin: a 2-d grid of C tiles, masked tl.dot loop, fp32 "
               "accumulator, bias + activation before the one store; any shape",
               [Source("triton_src/gemm_epilogue.py", kernels=("gemm_epilogue_kernel",), host=("gemm_epilogue",))]),
    "tiled": ("gemm_epilogue_tiled", "pointer tiles, grouped order, vector loads on ragged shapes "
              "(alignment facts passed to the kernel), unmasked K loop + masked tail; any shape",
              VARIANT_SOURCES["gemm_epilogue"]["tiled"]),
    "tma": ("gemm_epilogue_tma", "persistent (one program per SM), TMA descriptors for A/B/C, grouped "
            "order, epilogue stored in two halves; K, N multiples of 8",
            VARIANT_SOURCES["gemm_epilogue"]["tma"]),
    "splitk": ("gemm_epilogue_splitk", "K split over programs into an fp32 workspace, then one reduce + "
               "bias + activation kernel (deterministic); for few rows",
               VARIANT_SOURCES["gemm_epilogue"]["splitk"]),
}

for _variant, (_name, _desc, _sources) in _GEMM.items():
    register(problem="gemm_epilogue", layer=LAYER, name=_name, description=_desc, sources=_sources,
             devices=("cuda", "cpu"), cpu_max_elements=INTERPRETER_MAX_ELEMENTS,
             cpu_max_flops=INTERPRETER_MAX_FLOPS, available=available,
             supports=_gemm_supports(_variant) if _variant == "tma" else None,
             compile_only=_compile_only(_gemm_compile(_variant)) if triton else None,
             grid=_gemm_grid(_variant) if triton else None)(_gemm_prepare(_variant))
