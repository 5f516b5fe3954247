"""Helion adapter: registers the kernels of ``helion_src/`` with the harness.

Ids: ``helion:<problem>`` the default (``helion_src/dispatch.py`` picks the kernel and its
configuration by rules over shape classes; the kernels take runtime sizes, so one compile serves a
class), ``helion:<problem>_simple`` the teaching twin (the plain Helion kernel with Helion's default
configuration and its default static shapes: one compile per shape), ``helion:softmax_online`` the
online softmax variant with Helion's default configuration, ``helion:gemm_epilogue_splitk``
split-K on every case. No candidates: dispatch's switches (SOFTMAX_NEXT, GEMM_NEXT) are on since
the GPU run of 2026-12-06; a new pending rule registers ``helion:<problem>_next`` again (the
default with it on: ``_prepare_default(problem, pending=True)``).

Nothing here autotunes: every kernel is declared with ``autotune_effort="none"`` and the default's
configuration comes from dispatch (``scripts/tune_helion.py`` is the offline autotuner).

The default launches its kernel through the compiled Triton kernel's launcher: the Helion host
function runs once with a recording launcher, which yields the Triton kernel, grid, arguments and
options; ``triton_src.runtime.bind`` (launch glue, no kernel of that layer) then binds them.

CPU mode (``compile_only``): Helion binds on meta tensors, generates its Triton code for the
configuration (``BoundKernel.to_triton_code``), and the generated Triton kernel is compiled for
sm_90 with ``triton.compile(..., target=GPUTarget("cuda", 90, 32))``; registers and spills come
from ``ptxas -v``. ``python -m harness inspect`` writes the generated Triton source beside the
compiler stages.
"""
from __future__ import annotations

import contextlib
import io
import json
import time

import torch

from harness import Source, planned, planned_sources, register
from harness.errors import Unsupported
from harness.registry import describe_layer
from helion_src import frame  # torch only (the aligned frame's arguments): no helion

from . import src

LAYER = "helion"
H = "helion_src"


class _Lazy:
    """A module imported on its first attribute access: registering the layer's rows imports
    neither helion nor its kernels (a worker that never runs a Helion row never pays for them)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        import importlib
        return getattr(importlib.import_module(self._name), attr)

    def __bool__(self) -> bool:
        return _IMPORT_ERROR is None


def _probe() -> str | None:
    """Why helion cannot be used here (None: it is installed); cheap: no import."""
    import importlib.util
    try:
        found = importlib.util.find_spec("helion")
    except (ImportError, ValueError) as e:
        return f"helion not importable: {type(e).__name__}: {e}"
    return None if found else "helion not importable: helion is not installed"


_IMPORT_ERROR = _probe()
helion = _Lazy("helion")
dispatch, tuned = _Lazy("helion_src.dispatch"), _Lazy("helion_src.tuned")
gemm_simple, softmax_simple = _Lazy("helion_src.gemm_epilogue"), _Lazy("helion_src.softmax")
softmax_online, va_simple = _Lazy("helion_src.softmax_online"), _Lazy("helion_src.vector_add")




def available() -> str | None:
    if _IMPORT_ERROR:
        return _IMPORT_ERROR
    if not torch.cuda.is_available():
        return "no CUDA GPU (the CPU mode compiles Helion's generated Triton for sm_90: compile_only)"
    try:
        helion.Config   # noqa: B018  (the import itself, once: a broken install says why here)
    except Exception as e:
        return f"helion not importable: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return None


def _need_import():
    if _IMPORT_ERROR:
        raise Unsupported(_IMPORT_ERROR)


def version() -> str:
    try:
        from importlib.metadata import version as v
        return v("helion")
    except Exception:
        return "?"


# -- input checks ------------------------------------------------------------------------------
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _check_tensor(name, t, dtypes=_FLOATS, ndim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: dtype {t.dtype} not supported (expected one of "
                        f"{', '.join(str(d) for d in dtypes)})")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")


def _same(name, t, ref):
    if t.dtype != ref.dtype:
        raise TypeError(f"{name}: dtype {t.dtype} differs from {ref.dtype}")
    if t.device != ref.device:
        raise ValueError(f"{name}: on {t.device}, the other tensors on {ref.device}")


def check_vector_add(x, y, out):
    _check_tensor("x", x, ndim=1)
    for n, t in (("y", y), ("out", out)):
        _check_tensor(n, t, ndim=1)
        _same(n, t, x)
    if not (x.shape == y.shape == out.shape):
        raise ValueError(f"x, y, out: shapes {tuple(x.shape)}, {tuple(y.shape)}, {tuple(out.shape)} differ")


def check_softmax(x, out):
    _check_tensor("x", x, ndim=2)
    _check_tensor("out", out, ndim=2)
    _same("out", out, x)
    if x.shape != out.shape:
        raise ValueError(f"out: shape {tuple(out.shape)}, x has {tuple(x.shape)}")


def check_gemm(a, b, bias, out, act):
    hp = (torch.float16, torch.bfloat16)
    _check_tensor("a", a, hp, ndim=2)
    _check_tensor("b", b, hp, ndim=2)
    _check_tensor("out", out, hp, ndim=2)
    _same("b", b, a)
    _same("out", out, a)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"b: shape {tuple(b.shape)} does not follow a {tuple(a.shape)} (K differs)")
    if tuple(out.shape) != (a.shape[0], b.shape[1]):
        raise ValueError(f"out: shape {tuple(out.shape)}, expected {(a.shape[0], b.shape[1])}")
    if bias is not None:
        _check_tensor("bias", bias, hp, ndim=1)
        _same("bias", bias, a)
        if bias.shape[0] != b.shape[1]:
            raise ValueError(f"bias: length {bias.shape[0]}, N is {b.shape[1]}")
    if act not in ("none", "relu", "gelu"):
        raise ValueError(f"act: {act!r} is not one of none, relu, gelu")


def _check_device(inputs):
    dev = next(t for t in inputs if isinstance(t, torch.Tensor)).device
    if dev.type == "cpu" and interpreting():
        return  # Helion's generated Triton under Triton's interpreter (the CPU tests)
    if dev.type != "cuda":
        raise Unsupported("Helion kernels run on the GPU; on the CPU this layer compiles only")


# -- meta tensors of a case (compile_only) -----------------------------------------------------
def _meta_args(problem, case):
    dt = case.torch_dtype
    if problem == "vector_add":
        off = int(case.params.get("misalign", 0))
        x = torch.empty(case.N + off, dtype=dt, device="meta")[off:]
        y = torch.empty(case.N + off, dtype=dt, device="meta")[off:]
        return (x, y, torch.empty(case.N, dtype=dt, device="meta"))
    if problem == "softmax":
        from harness.problems.softmax import row_pad, start_offset
        layout = case.params.get("layout", "contiguous")
        pad, off = row_pad(layout, case.N), start_offset(layout)
        flat = torch.empty(off + case.M * (case.N + pad), dtype=dt, device="meta")
        x = flat[off:].view(case.M, case.N + pad)[:, :case.N]
        return (x, torch.empty(case.M, case.N, dtype=dt, device="meta"))
    a = torch.empty(case.M, case.K, dtype=dt, device="meta")
    b = torch.empty(case.K, case.N, dtype=dt, device="meta")
    bias = torch.empty(case.N, dtype=dt, device="meta") if int(case.params.get("bias", 1)) else None
    return (a, b, bias, torch.empty(case.M, case.N, dtype=dt, device="meta"), case.params.get("act", "relu"))


def plan_for(problem, args, pending: bool = False):
    """dispatch's plan for these kernel arguments (``pending``: with the pending rules on, the
    candidates ``helion:<problem>_next``)."""
    if problem == "vector_add":
        x = args[0]
        return dispatch.plan_vector_add(x.numel(), x.element_size())
    if problem == "softmax":
        x, out = args
        planner = dispatch.softmax_planner(pending)
        facts = ({"framed": frame.frame_args(x, out) is not None, "sms": _sms(x)}
                 if planner is dispatch.plan_softmax_next else {})
        return planner(x.shape[0], x.shape[1], x.element_size(), **facts)
    a, b = args[0], args[1]
    return dispatch.gemm_planner(pending)(a.shape[0], b.shape[1], a.shape[1], a.element_size(),
                                          aligned=all(_rows16(t) for t in (a, b)), sms=_sms(a))


def _rows16(t) -> bool:
    """Rows of ``t`` start on 16-byte boundaries (its row stride and its start)."""
    e = t.element_size()
    start = t.storage_offset() * e if t.device.type == "meta" else t.data_ptr()
    return (t.stride(0) * e) % 16 == 0 and start % 16 == 0


# -- the generated code and its launch ---------------------------------------------------------
@contextlib.contextmanager
def _quiet():
    """Helion prints the configuration it takes (to stderr) when none is given; keep it off the
    harness's output (the configuration is in ``launch.info``)."""
    with contextlib.redirect_stderr(io.StringIO()):
        yield


def _config(bound, cfg: dict | None):
    """The helion.Config for ``cfg`` (None: Helion's default configuration for this binding).
    A binding without a reduction loop takes no ``reduction_loops``: Helion 1.5 specialises a
    dimension of size 1 away, so rows of one element have no reduction to loop over."""
    if cfg is None:
        return bound.config_spec.default_config()
    if "reduction_loops" in cfg and len(bound.config_spec.reduction_loops) == 0:
        cfg = {k: v for k, v in cfg.items() if k != "reduction_loops"}
    return helion.Config(**cfg)


def _config_dict(config) -> dict:
    try:
        return {k: v for k, v in dict(config).items()}
    except Exception:
        return {"config": str(config)}


@contextlib.contextmanager
def _as_h200(args):
    """Without a GPU, Helion is asked about the H200 the CPU mode compiles for: on meta tensors
    (compile-only) or CPU tensors (the interpreter) a persistent kernel's host code asks for the
    SM count (132); on meta tensors, whether the device has TMA (Helion asks the current CUDA
    device; sm_90 has it), so that tensor-descriptor indexing is generated as on the H200. The
    interpreter keeps Helion's own answer (pointer indexing)."""
    import helion._compat as compat
    import helion.runtime as rt
    tensors = [t for t in args if isinstance(t, torch.Tensor)]
    if all(t.device.type == "cuda" for t in tensors):
        yield
        return
    orig, orig_td = rt.get_num_sm, compat._supports_tensor_descriptor
    rt.get_num_sm = lambda device, *a, **k: orig(device, *a, **k) if device.type == "cuda" else 132
    if any(t.device.type == "meta" for t in tensors):
        compat._supports_tensor_descriptor = lambda: True
    try:
        yield
    finally:
        rt.get_num_sm, compat._supports_tensor_descriptor = orig, orig_td


def _record(compiled, args):
    """Run Helion's host function with a recording launcher: the Triton kernel, its grid, its
    positional arguments and its launch options, exactly as Helion would launch them."""
    seen = []

    def launcher(kernel, grid, *kargs, **options):
        seen.append((kernel, tuple(grid), kargs, options))

    with _as_h200(args):
        compiled(*args, _launcher=launcher)
    if len(seen) != 1:
        raise RuntimeError(f"Helion's host code launched {len(seen)} kernels; one expected")
    return seen[0]


@contextlib.contextmanager
def _compilable(kernel):
    """Under TRITON_INTERPRET=1 (the CPU test mode) every ``@triton.jit`` function is an
    interpreter object, which the compiler cannot take: for the compile, the Triton helpers that
    Helion's generated code calls (torch inductor's, Helion's, the generated module's own) are
    swapped for compilable JITFunctions, on top of the Triton layer's own swaps."""
    import sys
    from backends.triton_layer import _compiler_mode
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except Exception:  # pragma: no cover
        InterpretedFunction = None
    changes = []
    if InterpretedFunction is not None and interpreting():
        gen = getattr(getattr(kernel, "fn", kernel), "__module__", None)
        for name, mod in list(sys.modules.items()):
            if mod is None or not (name.startswith(("torch._inductor.runtime", "helion.runtime"))
                                   or name == gen):
                continue
            for attr, val in list(vars(mod).items()):
                if isinstance(val, InterpretedFunction):
                    changes.append((mod, attr, val))
                    setattr(mod, attr, _JIT.setdefault(val.fn, JITFunction(val.fn)))
    try:
        with _compiler_mode():
            yield
    finally:
        for mod, attr, val in reversed(changes):
            setattr(mod, attr, val)


_JIT: dict = {}


def interpreting() -> bool:
    import os
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _spec(recorded):
    from triton_src.runtime import Spec
    kernel, grid, kargs, options = recorded
    names = list(getattr(kernel, "arg_names", None) or getattr(kernel.fn, "__code__").co_varnames[
        :kernel.fn.__code__.co_argcount])
    if len(names) != len(kargs):
        raise RuntimeError(f"{kernel.__name__}: {len(kargs)} arguments for {len(names)} parameters")
    opts = {k: v for k, v in options.items() if k in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
    return Spec(kernel, grid, dict(zip(names, kargs)), opts)


def generated(kernel, args, cfg: dict | None):
    """(bound kernel, Config, generated Triton source) for ``args`` and ``cfg``."""
    with _quiet(), _as_h200(args):
        bound = kernel.bind(tuple(args))
        config = _config(bound, cfg)
        code = bound.to_triton_code(config)
    return bound, config, code


def _compile_facts(kernel, args, cfg: dict | None, keep_ptx: bool = False, **extra) -> dict:
    """Compile-only facts of ``kernel`` for ``args`` (meta tensors) and ``cfg``; ``keep_ptx``: the
    PTX text too (under "ptx")."""
    from backends.triton_layer import compile_spec
    t0 = time.perf_counter()
    bound, config, code = generated(kernel, args, cfg)
    with _quiet(), _as_h200(args):
        compiled = bound.compile_config(config, allow_print=False)
    spec = _spec(_record(compiled, args))
    helion_s = time.perf_counter() - t0
    with _compilable(spec.kernel):
        facts = compile_spec(spec)
    if not keep_ptx:
        facts.pop("ptx", None)
    facts["compile_s"] = round(facts["compile_s"] + helion_s, 3)
    facts["helion_codegen_s"] = round(helion_s, 3)
    facts["config"] = _config_dict(config)
    facts["helion"] = version()
    facts["generated_lines"] = code.count("\n")
    return facts | extra


def _launch_default(kernel, args, cfg: dict):
    """Compile ``kernel`` for ``cfg`` and bind its one Triton launch (see the module docstring)."""
    from triton_src.runtime import bind
    t0 = time.perf_counter()
    if cfg.get("indexing") == "tensor_descriptor":
        _descriptor_allocator()
    with _quiet():
        bound = kernel.bind(tuple(args))
        config = _config(bound, cfg)
        compiled = bound.compile_config(config, allow_print=False)
    spec = _spec(_record(compiled, args))
    launch = bind(spec.kernel, spec.grid, spec.args, device=args[0].device, **spec.options)
    launch()
    _sync(args[0])
    secs = time.perf_counter() - t0
    facts = {}
    ck = getattr(launch, "compiled", None)
    if ck is not None:
        with contextlib.suppress(Exception):
            facts = {"registers": ck.n_regs, "spills": ck.n_spills, "smem": ck.metadata.shared}
    launch.info = {"compile_s": round(secs, 3), "config": _config_dict(config), "grid": list(spec.grid),
                   **facts}
    return launch


def _descriptor_allocator() -> None:
    """Tensor descriptors made on the device need scratch memory from Triton's allocator, which
    Helion's own launcher installs on its first launch; the default launches Triton's launcher
    directly, so it installs one (torch's caching allocator) where none is set."""
    import triton
    from triton.runtime import _allocation
    current = _allocation._allocator
    current = current.get() if hasattr(current, "get") else current
    if isinstance(current, _allocation.NullAllocator):
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def _sync(t) -> None:
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)


def _launch_simple(kernel, args):
    """The plain Helion call: Helion binds, takes its default configuration, compiles, launches."""
    t0 = time.perf_counter()
    with _quiet():
        kernel(*args)
    _sync(args[0])
    secs = time.perf_counter() - t0
    with _quiet():
        bound = kernel.bind(tuple(args))
        config = bound.config_spec.default_config()

    def launch():
        kernel(*args)
    launch.info = {"compile_s": round(secs, 3), "config": _config_dict(config)}
    return launch


def _args(problem, case, inputs, out):
    if problem == "vector_add":
        x, y = inputs
        check_vector_add(x, y, out)
        return (x, y, out)
    if problem == "softmax":
        (x,) = inputs
        check_softmax(x, out)
        return (x, out)
    a, b, bias = inputs
    act = case.params.get("act", "relu")
    check_gemm(a, b, bias, out, act)
    return (a, b, bias, out, act)


def _prepare_default(problem, pending: bool = False):
    def prepare(case, inputs, out):
        _need_import()
        _check_device(inputs)
        args = _args(problem, case, inputs, out)
        return _launch_plan(plan_for(problem, args, pending), args)
    prepare.__name__ = f"prepare_{problem}{'_next' if pending else ''}"
    return prepare


def _prepare_simple(problem, kernel_of):
    def prepare(case, inputs, out):
        _need_import()
        _check_device(inputs)
        args = _args(problem, case, inputs, out)
        return _launch_simple(kernel_of(), args)
    prepare.__name__ = f"prepare_{problem}_simple"
    return prepare


def _compile_default(problem, pending: bool = False):
    def compile_only(case):
        _need_import()
        args = _meta_args(problem, case)
        return _plan_compile_only(plan_for(problem, args, pending), args)
    return compile_only


def _compile_simple(problem, kernel_of):
    def compile_only(case):
        _need_import()
        return _compile_facts(kernel_of(), _meta_args(problem, case), None, variant="simple")
    return compile_only


# -- inspect: the generated Triton source and its compiler stages ------------------------------
def helion_artifacts(impl, case, art) -> None:
    from backends.triton_inspect import _watch_triton, _write_triton
    _need_import()
    hook = impl.extra.get("helion_code")
    if hook is None:
        raise ValueError(f"inspect: {impl.id} has no helion_code hook")
    got = hook(case)
    art.source = ("Helion's generated Triton (BoundKernel.to_triton_code for the configuration), "
                  "compiled with triton.compile(ASTSource, GPUTarget('cuda', 90, 32))")
    for kernel, args, cfg in (got if isinstance(got, list) else [got]):
        _, config, code = generated(kernel, args, cfg)
        name = getattr(kernel, "name", None) or getattr(kernel.fn, "__name__", "kernel")
        art.write(f"helion_generated_{name}.py", code)
        art.write(f"helion_config_{name}.json", json.dumps(_config_dict(config), indent=2, default=str))
    with _watch_triton() as seen:
        facts = impl.compile_only_fn(case)
    names: dict = {}
    for s, ck in seen:
        name = getattr(getattr(s, "fn", None), "__name__", None) or "kernel"
        names[name] = names.get(name, 0) + 1  # one kernel launched twice (vector add's body, tail)
        _write_triton(art, ck, name if names[name] == 1 else f"{name}_{names[name]}")
    art.write("compile_facts.json", json.dumps(facts, indent=2, default=str))


def _code_default(problem, pending: bool = False):
    def hook(case):
        args = _meta_args(problem, case)
        return _launches(plan_for(problem, args, pending), args)
    return hook


def _code_simple(problem, kernel_of):
    def hook(case):
        return kernel_of(), _meta_args(problem, case), None
    return hook


# no compile-ahead pool: its processes see no GPU, where Helion 1.4.0 refuses to trace (softmax,
# vector add), and the GPU process generates the code again anyway (docs/DESIGN.md, cache table)
describe_layer(LAYER, order=7, colour="#9467bd", artifacts=helion_artifacts, compile_ahead=False)


# -- registration ------------------------------------------------------------------------------
def _plan_source(problem) -> Source:
    """The planner the default calls now (dispatch's switches pick it): its reachable code is the plan."""
    name = {"vector_add": lambda: "plan_vector_add", "softmax": lambda: dispatch.softmax_planner().__name__,
            "gemm_epilogue": lambda: dispatch.gemm_planner().__name__}[problem]()
    return Source(src(H, "dispatch.py"), kernels=(), host=(name,))


def _default_sources(problem, variants):
    """The default's Sources, derived from its planner (``harness.planned``), then the runtime-size
    kernels' wrapper; every variant (and the planner the switches select) when Helion cannot be
    imported."""
    common = [Source(src(H, "tuned.py"), kernels=(), host=("dynamic",)),
              Source("backends/helion_layer.py", kernels=(), host=("_launch_plan",))]   # the binding of a plan
    if helion:
        return planned(dispatch.plan, problem, common)
    return planned_sources(variants, tuple(variants), common + [_plan_source(problem)])


_PROBLEMS = {
    # problem: (twin file, twin kernel name, the default's variants {variant: ((file, kernel), ...)},
    # description); the default counts the variants dispatch.plan chooses (harness.planned)
    "vector_add": ("vector_add.py", "vector_add", {"block": (("vector_add.py", "vector_add"),)},
                   "the twin's kernel over runtime sizes with a configuration by element size "
                   "(dispatch rules); a length not a multiple of 16 as two launches, whole blocks "
                   "(16-byte accesses) then the tail"),
    "softmax": ("softmax.py", "softmax", {"rows": (("softmax.py", "softmax"),),
                                          "online": (("softmax_online.py", "softmax_online"),)},
                "rows that fit registers: the twin's kernel, whole rows, rows packed per program; "
                "longer rows: the online kernel (two passes over the row); configurations by row size"),
    "gemm_epilogue": ("gemm_epilogue.py", "gemm_epilogue",
                      {"tiled": (("gemm_epilogue.py", "gemm_epilogue"),),
                       "splitk": (("gemm_epilogue_splitk.py", "gemm_partial_sums"),
                                  ("gemm_epilogue_splitk.py", "splitk_epilogue"))},
                      "the twin's tiled kernel (addmm on tiles, bias + act on the fp32 accumulator) "
                      "over runtime sizes; tile by rule: few rows, else the widest tile that fills "
                      "the SMs, narrower K steps for rows not 16-byte aligned"),
}

_TWIN_DESC = {
    "vector_add": "teaching twin: hl.tile over the length, out[tile] = x[tile] + y[tile]; Helion's default config",
    "softmax": "teaching twin: a tile of whole rows, amax / exp / sum as torch calls; Helion's default config "
               "(its looped reduction for long rows)",
    "gemm_epilogue": "teaching twin: hl.tile over (M, N), addmm over K tiles, bias + act on the accumulator; "
                     "Helion's default config",
}


def _twin_kernel(problem):
    mod = {"vector_add": lambda: va_simple.vector_add, "softmax": lambda: softmax_simple.softmax,
           "gemm_epilogue": lambda: gemm_simple.gemm_epilogue}[problem]
    return mod


# the variants of the planners behind dispatch.SOFTMAX_NEXT, GEMM_NEXT: the online frame kernel
# beside the kernels it falls back to, and split; the GEMM's: the tiled kernel only (plan_gemm_next
# is plan_gemm with one row tile for few rows, never split-K)
_NEXT_VARIANTS = {
    "softmax": {"rows": (("softmax.py", "softmax"),),
                "online": (("softmax_online.py", "softmax_online"),
                           ("softmax_online_frame.py", "softmax_online_frame")),
                "split": (("softmax_split.py", "softmax_split_stats"), ("softmax_split.py", "softmax_split_norm"))},
    "gemm_epilogue": {"tiled": (("gemm_epilogue.py", "gemm_epilogue"),)},
}


def _variant_sources(problem, pending: bool = False) -> dict:
    """{variant: [Source]} of the planner the default (``pending``: the ``_next`` candidate) calls."""
    on = pending or {"softmax": dispatch.SOFTMAX_NEXT, "gemm_epilogue": dispatch.GEMM_NEXT}.get(problem, False)
    table = _NEXT_VARIANTS[problem] if on and problem in _NEXT_VARIANTS else _PROBLEMS[problem][2]
    return {v: [Source(src(H, f), kernels=(k,), host=()) for f, k in fks] for v, fks in table.items()}


for _p, (_file, _kname, _variants, _desc) in _PROBLEMS.items():
    _vsrc = _variant_sources(_p)
    register(problem=_p, layer=LAYER, name=_p, description=_desc,
             sources=_default_sources(_p, _vsrc),
             devices=("cuda",), available=available,
             compile_only=_compile_default(_p) if helion else None,
             helion_code=_code_default(_p))(_prepare_default(_p))
    _kof = _twin_kernel(_p)
    register(problem=_p, layer=LAYER, name=f"{_p}_simple", description=_TWIN_DESC[_p],
             sources=[Source(src(H, _file), kernels=(_kname,), host=())],
             devices=("cuda",), available=available,
             compile_only=_compile_simple(_p, _kof) if helion else None,
             helion_code=_code_simple(_p, _kof))(_prepare_simple(_p, _kof))

register(problem="softmax", layer=LAYER, name="softmax_online",
         description="online softmax (running max and rescaled sum over column tiles, then the write "
                     "pass); Helion's default config",
         sources=[Source(src(H, "softmax_online.py"), kernels=("softmax_online",), host=())],
         devices=("cuda",), available=available,
         compile_only=_compile_simple("softmax", lambda: softmax_online.softmax_online) if helion else None,
         helion_code=_code_simple("softmax", lambda: softmax_online.softmax_online))(
    _prepare_simple("softmax", lambda: softmax_online.softmax_online))

# -- a plan's launches: one kernel; the pieces of a vector add (a body of whole blocks, a length
# Triton knows to be a multiple of 16, then the tail: dispatch.vector_add_pieces says why); the
# frame kernels' arguments (helion_src/frame.py); the two kernels of split and split-K with
# their workspace ------------------------------------------------------------------------------
def _launches(plan, args) -> list[tuple]:
    """(kernel, kernel arguments, configuration) of each launch of ``plan`` on ``args``, in order."""
    if plan.pieces is not None:
        return [(plan.kernel, tuple(t[lo:hi] for t in args), plan.config) for lo, hi in plan.pieces]
    if plan.variant == "splitk":
        a, b, bias, out, act = args
        chunks = -(-a.shape[1] // plan.config["block_sizes"][2])
        # one fp32 [M, N] slice per K chunk, every element written before it is read: no zeroing
        ws = torch.empty((chunks, *out.shape), dtype=torch.float32, device=out.device)
        return [(plan.kernel, (a, b, ws), plan.config), (plan.epilogue_kernel, (ws, bias, out, act), plan.epilogue[1])]
    if plan.frame is None:
        return [(plan.kernel, args, plan.config)]
    x, out = args
    f, (m, n) = frame.frame_args(x, out), x.shape
    if plan.variant == "split":
        chunk, chunks = plan.frame["chunk_groups"], plan.frame["chunks"]
        wmax, wsum = (torch.empty(m, chunks, dtype=torch.float32, device=x.device) for _ in range(2))
        return [(plan.kernel, (f["xf"], wmax, wsum, n, f["sx"], f["lx"], chunk, f["v"]), plan.config),
                (plan.epilogue_kernel, (f["xf"], f["of"], wmax, wsum, n, f["sx"], f["so"], f["lx"], f["lo"], chunk,
                                    f["v"]), plan.epilogue[1])]
    kargs = (f["xf"], f["of"], m, n, f["sx"], f["so"], f["lx"], f["lo"], f["v"], *plan.frame.values())
    return [(plan.kernel, kargs, plan.config)]


def _plan_info(plan, parts: list[dict]) -> dict:
    """What a launch (or compile-only) of ``plan`` reports: the first kernel's facts, and for a
    plan of several launches each one's."""
    info = dict(parts[0], variant=plan.variant, rule=plan.rule)
    if len(parts) > 1:
        info["kernels"] = [{k: p.get(k) for k in ("kernel", "config", "grid", "registers", "spills", "smem")}
                           for p in parts]
        info["compile_s"] = round(sum(p["compile_s"] for p in parts), 3)
    if plan.pieces is not None:
        info["pieces"] = [list(p) for p in plan.pieces]
    return info


def _launch_plan(plan, args):
    launches = [_launch_default(k, a, c) for k, a, c in _launches(plan, args)]
    if len(launches) == 1:
        launch = launches[0]
    else:
        def launch():
            for one in launches:
                one()
    launch.info = _plan_info(plan, [one.info for one in launches])
    return launch


def _plan_compile_only(plan, args):
    return _plan_info(plan, [_compile_facts(k, a, c) for k, a, c in _launches(plan, args)])


def _sms(t) -> int:
    if t.device.type == "cuda":
        return torch.cuda.get_device_properties(t.device).multi_processor_count
    return 132  # the H200 the CPU mode compiles for


def _splitk_plan(args):
    a, b = args[0], args[1]
    return dispatch.plan_gemm_splitk(a.shape[0], b.shape[1], a.shape[1], a.element_size(), _sms(a))


def _splitk_compile_only(case):
    args = _meta_args("gemm_epilogue", case)
    return _plan_compile_only(_splitk_plan(args), args)


def _splitk_code(case):
    args = _meta_args("gemm_epilogue", case)
    return _launches(_splitk_plan(args), args)


@register(problem="gemm_epilogue", layer=LAYER, name="gemm_epilogue_splitk",
          description="split-K for few output tiles: each K chunk's fp32 partial sum in its own workspace "
                      "slice (no atomics), then a kernel that adds the slices in a fixed order, bias + act",
          sources=[Source(src(H, "gemm_epilogue_splitk.py"), kernels=("gemm_partial_sums", "splitk_epilogue"),
                          host=()),
                   Source(src(H, "dispatch.py"), kernels=(), host=("plan_gemm_splitk",))],
          devices=("cuda",), available=available,
          compile_only=_splitk_compile_only if helion else None, helion_code=_splitk_code)
def prepare_gemm_epilogue_splitk(case, inputs, out):
    _need_import()
    _check_device(inputs)
    args = _args("gemm_epilogue", case, inputs, out)
    return _launch_plan(_splitk_plan(args), args)
