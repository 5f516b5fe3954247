"""Gluon adapter: registers the kernels of ``gluon_src/`` (``triton.experimental.gluon``, Triton's
explicit-layout level) with the harness.

Ids: ``gluon:<problem>`` the default (``gluon_src/dispatch.py`` plans once in ``prepare``),
``gluon:<problem>_simple`` the teaching twin (launched the tutorial way), and the variants
``gluon:softmax_{rows,block,smem,split,split_smem,online}``, ``gluon:gemm_epilogue_{tma,tiled,splitk}``.

Gluon has no CPU interpreter: the implementations run on CUDA GPUs only (Hopper: the GEMMs use
wgmma), and the CPU mode is ``compile_only(case)``: the very launch ``prepare`` would bind, built
on meta tensors with the case's shapes, strides and alignment, specialised as the launcher would
and compiled for sm_90a with no GPU (``triton.compile(GluonASTSource(...), target=GPUTarget("cuda",
90, 32))``), with registers, spills and shared memory from ``ptxas -v``. ``python -m harness
inspect`` records those compiles (TTGIR, PTX, ...).
"""
from __future__ import annotations

import time

import torch

from harness import Source, planned, planned_sources, register
from harness.errors import Unsupported
from harness.registry import describe_layer
from harness.meta_inputs import meta_gemm as _meta_gemm, meta_softmax as _meta_softmax, meta_vector_add as _meta_vector_add

try:
    import triton
    from triton.experimental import gluon  # noqa: F401
    from triton.experimental.gluon import language as _gl  # noqa: F401
    _IMPORT_ERROR = None
except Exception as e:  # pragma: no cover - depends on the machine
    triton = None
    _IMPORT_ERROR = f"triton.experimental.gluon not importable: {type(e).__name__}: {e}"

if triton is not None:
    try:
        from gluon_src import H200, dispatch
        from gluon_src import gemm_epilogue as gemm_simple
        from gluon_src import gemm_epilogue_splitk as gemm_splitk
        from gluon_src import gemm_epilogue_tiled as gemm_tiled
        from gluon_src import gemm_epilogue_tma as gemm_tma
        from gluon_src import softmax as softmax_simple
        from gluon_src import softmax_block, softmax_online, softmax_rows, softmax_smem, softmax_split
        from gluon_src import softmax_split_smem
        from gluon_src import vector_add as vector_add_simple
        from gluon_src.epilogue import ACTS
        from gluon_src.runtime import Spec, bind_all
    except Exception as e:  # pragma: no cover - a triton whose Gluon lacks what the kernels use
        triton = None
        _IMPORT_ERROR = f"gluon_src not importable with this triton: {type(e).__name__}: {e}"

LAYER = "gluon"


def _derived(problem: str, table: dict, common: list):
    """The default's Sources, derived from its planner (``harness.planned``), then ``common``;
    every variant of ``table`` when Gluon cannot be imported."""
    if triton is not None:
        return planned(dispatch.plan, problem, common)
    return planned_sources(table, tuple(table), common)


def available() -> str | None:
    if _IMPORT_ERROR:
        return _IMPORT_ERROR
    if not torch.cuda.is_available():
        return "no CUDA GPU (Gluon has no CPU interpreter; compile_only compiles for sm_90a)"
    if torch.cuda.get_device_capability()[0] < 9:
        return "the Gluon kernels target Hopper (sm_90: TMA, wgmma)"
    return None


def _check_device(inputs) -> None:
    dev = next(t for t in inputs if isinstance(t, torch.Tensor)).device
    if dev.type != "cuda":
        raise Unsupported("Gluon kernels run on CUDA tensors only (no CPU interpreter)")


# -- compile-only ------------------------------------------------------------------------------
def _compiler_mode():
    """Under TRITON_INTERPRET=1 (CI's CPU mode) the triton.language helpers that Gluon's gl.max,
    gl.sum, ... wrap are interpreter objects: the Triton adapter's context swaps them for
    compilable ones during a compile."""
    import contextlib
    try:
        from backends.triton_layer import _compiler_mode as mode
    except ImportError:
        return contextlib.nullcontext()
    return mode()


def compile_spec(spec) -> dict:
    """Compile one launch spec for sm_90a without a GPU, every argument specialised as the
    launcher specialises it (pointer dtype and 16-byte alignment, integer width, multiples of 16,
    1 as a constant, tensor descriptors by block type and layout)."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from backends.triton_layer import ptx_facts
    jf = spec.kernel
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
    src = GluonASTSource(fn=jf, signature=signature, constexprs=constexprs, attrs=attrs)
    t0 = time.perf_counter()
    with _compiler_mode():
        ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(spec.options))
    secs = time.perf_counter() - t0
    d = next(iter(ptx_facts(ck.asm["ptx"]).values()), {})
    config = {**spec.options, **{k: v for k, v in spec.args.items()
                                 if jf.params[jf.arg_names.index(k)].is_constexpr}}
    return {"compile_s": round(secs, 3), "registers": d.get("registers"), "spills": d.get("spills", 0),
            "smem": getattr(ck.metadata, "shared", None) or d.get("smem", 0), "kernel": jf.__name__,
            "target": "sm_90a" if "sm_90a" in ck.asm["ptx"] else "sm_90", "triton": triton.__version__,
            "grid": list(spec.grid), "config": config, "ptx": ck.asm["ptx"]}


def compile_specs(specs, **extra) -> dict:
    """compile_spec of each launch: the first kernel's facts, every kernel's under ``kernels``
    (the PTX left out)."""
    facts = [compile_spec(s) for s in specs]
    out = {k: v for k, v in facts[0].items() if k != "ptx"}
    out["kernels"] = {f["kernel"]: {k: f[k] for k in ("registers", "spills", "smem", "grid")} for f in facts}
    out["compile_s"] = round(sum(f["compile_s"] for f in facts), 3)
    return out | extra


def _first_call(launch) -> float:
    t0 = time.perf_counter()
    launch()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def _facts(launch) -> dict:
    ck = getattr(launch, "compiled", None)
    try:
        return {"registers": ck.n_regs, "spills": ck.n_spills, "smem": ck.metadata.shared}
    except Exception:
        return {}


def _strip(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if isinstance(v, (int, float, str, bool, list, tuple))}


def _twin(fn, *args):
    def launch():
        fn(*args)
    launch.info = {"compile_s": round(_first_call(launch), 3)}
    return launch


def _planned(make):
    """prepare's common tail: plan (``make() -> (variant, cfg, launch)``), first call, facts."""
    t0 = time.perf_counter()
    try:
        variant, cfg, launch = make()
    except ValueError as e:
        raise Unsupported(str(e)) from None
    secs = time.perf_counter() - t0 + _first_call(launch)
    launch.info = {"compile_s": round(secs, 3), "variant": variant, "config": _strip(dict(cfg)), **_facts(launch)}
    return launch


# -- vector_add --------------------------------------------------------------------------------
def _va_spec(case):
    x, y, out = _meta_vector_add(case)
    cfg = dispatch.vector_add_choice(case.N, x.element_size(), dispatch.vector_alignment(x, y, out))
    from gluon_src import vector_add_unmasked
    return vector_add_unmasked.launch_spec(x, y, out, cfg)


def _va_simple_spec(case):
    x, y, out = _meta_vector_add(case)
    B = vector_add_simple.BLOCK
    return Spec(vector_add_simple.vector_add_kernel, (triton.cdiv(case.N, B),),
                {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": case.N, "BLOCK": B}, {"num_warps": 4})


@register(problem="vector_add", layer=LAYER, name="vector_add",
          description="explicit BlockedLayout, 16 bytes a thread per access (narrower where the "
                      "pointers' alignment is less), unmasked full blocks, one masked tail program",
          sources=_derived("vector_add", {"unmasked": Source("gluon_src/vector_add_unmasked.py",
                                                             kernels=("vector_add_unmasked_kernel",),
                                                             host=("launch_spec", "config"))},
                           [Source("gluon_src/dispatch.py", kernels=(), host=("plan_vector_add",)),
                            Source("gluon_src/runtime.py", kernels=(), host=("bind",))]),
          devices=("cuda",), available=available,
          compile_only=(lambda case: compile_specs([_va_spec(case)])) if triton else None)
def prepare_vector_add(case, inputs, out):
    _check_device(inputs)
    x, y = inputs
    return _planned(lambda: dispatch.plan_vector_add(x, y, out))


@register(problem="vector_add", layer=LAYER, name="vector_add_simple",
          description="teaching twin: one masked block a program, 4 elements a thread",
          sources=[Source("gluon_src/vector_add.py", kernels=("vector_add_kernel",), host=("vector_add",))],
          devices=("cuda",), available=available,
          compile_only=(lambda case: compile_specs([_va_simple_spec(case)])) if triton else None)
def prepare_vector_add_simple(case, inputs, out):
    _check_device(inputs)
    return _twin(vector_add_simple.vector_add, inputs[0], inputs[1], out)


# -- softmax -----------------------------------------------------------------------------------
def _sm_cfg(variant, M, N, es, facts):
    if variant == "rows":
        S = dispatch.SOFTMAX
        return softmax_rows.config(N, es, S["rows_warps"], S["rows_values_per_thread"])
    if variant == "block":
        return softmax_block.config(N, es)
    if variant == "online":
        return dispatch.softmax_online_config(M, N, es, facts)
    if variant == "split":
        return dispatch.softmax_split_config(M, N, es, facts)
    if variant == "split_smem":
        cfg = dispatch.softmax_split_smem_config(M, N, es, facts)
        if cfg is None:
            raise Unsupported(f"N = {N}: no chunk of {dispatch.SOFTMAX['split_smem_pieces']} pieces splits "
                              f"the row over at least 2 co-resident programs")
        return cfg
    return softmax_smem.config(N, es, dispatch.softmax_smem_warps(N, es, facts))


def _sm_supports(variant):
    def supports(case):
        es = torch.empty((), dtype=case.torch_dtype).element_size()
        if variant == "rows":
            return softmax_rows.supports(case.N)
        if variant == "block":
            return softmax_block.supports(case.N, es)
        if variant == "smem":
            return (softmax_smem.supports(case.N, es, dispatch.softmax_smem_warps(case.N, es, H200), H200)
                    or softmax_smem.supports_tensors(*_meta_softmax(case)))
        if variant == "split_smem":
            if dispatch.softmax_split_smem_config(case.M, case.N, es, H200) is None:
                return f"N = {case.N}: too short to split over co-resident programs"
            return softmax_split_smem.supports_tensors(*_meta_softmax(case))
        return None
    return supports


def _sm_specs(variant, case):
    x, out = _meta_softmax(case)
    M, N, es = case.M, case.N, x.element_size()
    if variant == "simple":
        B = min(triton.next_power_of_2(N), 4096)
        return "simple", [Spec(softmax_simple.softmax_kernel, (M,), {"x_ptr": x, "out_ptr": out, "N": N,
                               "stride_x": x.stride(0), "stride_out": out.stride(0), "BLOCK": B}, {"num_warps": 8})]
    if variant == "default":
        variant, cfg = dispatch.softmax_choice(M, N, es, H200, softmax_smem.supports_tensors(x, out) is None,
                                               softmax_split_smem.supports_tensors(x, out) is None)
    else:
        cfg = _sm_cfg(variant, M, N, es, H200)
    if variant == "split_smem":
        slots = torch.empty(M * cfg["C"], dtype=torch.int64, device="meta")
        per_sm = softmax_split_smem.programs_per_sm(cfg["smem"], 0, cfg["num_warps"], H200)
        grid = softmax_split_smem.grid_for(M, cfg, per_sm, H200["sms"])
        return variant, [softmax_split_smem.launch_spec(x, out, slots, cfg, grid)]
    if variant == "split":
        ws = torch.empty(M * cfg["C"] * 2, dtype=torch.float32, device="meta")
        return variant, dispatch.softmax_specs(variant, x, out, cfg, ws)
    return variant, dispatch.softmax_specs(variant, x, out, cfg)


def _sm_compile(variant):
    def compile_only(case):
        if variant not in ("default", "simple") and (why := _sm_supports(variant)(case)):
            raise Unsupported(why)
        v, specs = _sm_specs(variant, case)
        return compile_specs(specs, variant=v)
    return compile_only


def _sm_prepare(variant):
    def prepare(case, inputs, out):
        _check_device(inputs)
        (x,) = inputs
        if variant == "simple":
            return _twin(softmax_simple.softmax, x, out)
        if variant == "default":
            return _planned(lambda: dispatch.plan_softmax(x, out))
        if (why := _sm_supports(variant)(case)):
            raise Unsupported(why)

        def make():
            M, N = x.shape
            cfg = _sm_cfg(variant, M, N, x.element_size(), dispatch.device_facts(x.device))
            if variant == "smem":
                launch = softmax_smem.bind_launch(x, out, cfg)
                return variant, launch.config, launch
            if variant == "split_smem":
                launch = softmax_split_smem.bind_launch(x, out, cfg, dispatch.device_facts(x.device))
                return variant, launch.config, launch
            ws = softmax_split.workspace(x, cfg) if variant == "split" else None
            launch = bind_all(dispatch.softmax_specs(variant, x, out, cfg, ws), x.device)
            launch.workspace = ws
            return variant, cfg, launch
        return _planned(make)
    return prepare


_DISPATCH_SRC = Source("gluon_src/dispatch.py", kernels=(), host=("plan_softmax", "softmax_specs"))
_SM_SRC = {
    "rows": Source("gluon_src/softmax_rows.py", kernels=("softmax_rows_kernel",), host=("launch_spec",)),
    "block": Source("gluon_src/softmax_block.py", kernels=("softmax_block_kernel",), host=("launch_spec",)),
    "smem": Source("gluon_src/softmax_smem.py", kernels=("softmax_smem_kernel",), host=("bind_launch", "launch_spec")),
    "split": Source("gluon_src/softmax_split.py", kernels=("softmax_split_partial_kernel", "softmax_split_write_kernel"),
                    host=("launch_specs", "workspace")),
    "online": Source("gluon_src/softmax_online.py", kernels=("softmax_online_kernel",), host=("launch_spec",)),
    "split_smem": Source("gluon_src/softmax_split_smem.py", kernels=("softmax_split_smem_kernel", "_issue"),
                         host=("bind_launch", "launch_spec", "grid_for", "programs_per_sm")),
}
_SOFTMAX = {
    "default": ("softmax", "dispatcher: rows (rows <= 1024 columns, several a program), block (a row in "
                "registers), split (long rows, too few to fill the SMs), smem (long rows staged in a "
                "program's shared memory by cp.async when they fit it), split with the chunks staged in "
                "the shared memory of co-resident programs (rows past one program's shared memory, on "
                "16-byte boundaries: one read, one write), online (any other row)",
                _derived("softmax", _SM_SRC,
                         [_DISPATCH_SRC, Source("gluon_src/runtime.py", kernels=(), host=("bind", "bind_all"))])),
    "simple": ("softmax_simple", "teaching twin: a program a row, column tiles with a running max/sum, "
               "then a second pass that writes; any N",
               [Source("gluon_src/softmax.py", kernels=("softmax_kernel",), host=("softmax",))]),
    "rows": ("softmax_rows", "several short rows a program, a row a warp (or part of one), in registers",
             [_SM_SRC["rows"]]),
    "block": ("softmax_block", "a row a program, the whole row in registers (<= 32768 columns)", [_SM_SRC["block"]]),
    "smem": ("softmax_smem", "a row a program staged raw in shared memory by 16-byte cp.async copies, "
             "then max, sum and the store read it there; rows that fit a program's shared memory",
             [_SM_SRC["smem"]]),
    "split": ("softmax_split", "a long row over several programs: chunk partials (max, sum) through "
              "global memory between two launches, then each chunk written", [_SM_SRC["split"]]),
    "online": ("softmax_online", "persistent grid sized to L2, column tiles with a running max/sum, "
               "second pass newest tile first; any N", [_SM_SRC["online"]]),
}

for _variant, (_name, _desc, _sources) in _SOFTMAX.items():
    register(problem="softmax", layer=LAYER, name=_name, description=_desc, sources=_sources,
             devices=("cuda",), available=available,
             supports=None if _variant in ("default", "simple") else _sm_supports(_variant),
             compile_only=_sm_compile(_variant) if triton else None)(_sm_prepare(_variant))


# -- gemm_epilogue -----------------------------------------------------------------------------
def _wgmma_missing() -> str | None:
    """Why the device has no wgmma (Hopper's sm_90 only: Blackwell's tensor cores take tcgen05,
    which these kernels do not use), or None (an sm_90 device, or none: compile-only targets sm_90a)."""
    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] != 9:
        major, minor = torch.cuda.get_device_capability()
        return (f"wgmma (warpgroup_mma) is Hopper's (sm_90); this device is sm_{major}{minor}, whose tensor "
                f"cores these Gluon GEMMs do not program (no tcgen05 path)")
    return None


def _gemm_supports(variant):
    def supports(case):
        if variant != "simple" and (why := _wgmma_missing()):
            return why
        if variant in ("tma", "splitk"):
            es = torch.empty((), dtype=case.torch_dtype).element_size()
            if case.N % (16 // es) or case.K % (16 // es):
                return f"N = {case.N}, K = {case.K}: TMA needs both multiples of {16 // es} (16-byte strides)"
        return None
    return supports


def _gemm_specs(variant, case):
    a, b, bias, act, out = _meta_gemm(case)
    if variant == "simple":
        BM, BN, BK = 64, 64, 32
        return "simple", [Spec(gemm_simple.gemm_epilogue_kernel, (triton.cdiv(case.M, BM), triton.cdiv(case.N, BN)),
                               {"a_ptr": a, "b_ptr": b, "bias_ptr": bias if bias is not None else out, "c_ptr": out,
                                "M": case.M, "N": case.N, "K": case.K, "stride_am": a.stride(0),
                                "stride_bk": b.stride(0), "stride_cm": out.stride(0), "BLOCK_M": BM,
                                "BLOCK_N": BN, "BLOCK_K": BK, "HAS_BIAS": bias is not None, "ACT": ACTS[act]},
                               {"num_warps": 4})]
    if variant == "default":
        variant, cfg = dispatch.gemm_choice(case.M, case.N, case.K, gemm_tma.check(a, b, out) is None, H200,
                                            dispatch.gemm_copies(a, b))
    else:
        cfg = _gemm_cfg(variant, case.M, case.N, case.K, H200)
    ws = None
    if variant == "splitk":
        from gluon_src.gemm_epilogue_splitk import slices
        ws = torch.empty(slices(case.K, cfg["BLOCK_K"], cfg["SPLIT"])[1] * case.M * case.N,
                         dtype=torch.float32, device="meta")
    return variant, dispatch.gemm_specs(variant, a, b, bias, act, out, cfg, H200["sms"], ws)


def _gemm_cfg(variant, M, N, K, facts):
    if variant == "splitk":
        return dispatch.gemm_splitk_config(M, N, K, facts)
    return dict(min(dispatch.GEMM[variant], key=lambda c: (dispatch._gemm_time(M, N, K, c, facts["sms"]),
                                                           c["BLOCK_M"] * c["BLOCK_N"])))


def _gemm_compile(variant):
    def compile_only(case):
        if (why := _gemm_supports(variant)(case)):
            raise Unsupported(why)
        v, specs = _gemm_specs(variant, case)
        return compile_specs(specs, variant=v)
    return compile_only


def _gemm_prepare(variant):
    def prepare(case, inputs, out):
        _check_device(inputs)
        a, b, bias = inputs
        act = case.params.get("act", "relu")
        if act not in ACTS:
            raise ValueError(f"act: must be one of {', '.join(ACTS)}, got {act!r}")
        if variant == "simple":
            return _twin(gemm_simple.gemm_epilogue, a, b, bias, act, out)
        if variant == "default":
            return _planned(lambda: dispatch.plan_gemm(a, b, bias, act, out))

        def make():
            if variant in ("tma", "splitk") and (why := gemm_tma.check(a, b, out)):
                raise ValueError(why)
            M, K = a.shape
            N = b.shape[1]
            facts = dispatch.device_facts(a.device)
            cfg = _gemm_cfg(variant, M, N, K, facts)
            ws = gemm_splitk.workspace(a, b, cfg) if variant == "splitk" else None
            launch = bind_all(dispatch.gemm_specs(variant, a, b, bias, act, out, cfg, facts["sms"], ws), a.device)
            launch.workspace = ws
            return variant, cfg, launch
        return _planned(make)
    return prepare


_GEMM_SRC = {
    "tma": Source("gluon_src/gemm_epilogue_tma.py", kernels=("gemm_epilogue_tma_kernel", "tile_coords"),
                  host=("launch_spec", "check")),
    "tiled": Source("gluon_src/gemm_epilogue_tiled.py", kernels=("gemm_epilogue_tiled_kernel",),
                    host=("launch_spec", "vec_facts")),
    "splitk": Source("gluon_src/gemm_epilogue_splitk.py", kernels=("gemm_splitk_partial_kernel", "gemm_splitk_reduce_kernel"),
                     host=("launch_specs", "workspace", "slices")),
    "epilogue": Source("gluon_src/epilogue.py", kernels=("bias_act",), host=()),
}
#: staging (no word: a tma plan whose config names operands under "stage" launches it first)
_STAGE_SRC = Source("gluon_src/gemm_epilogue_tma.py", kernels=("stage_rows_kernel",),
                    host=("staged_specs", "stage_spec", "staged"))
_GEMM = {
    "default": ("gemm_epilogue", "dispatcher: tma (persistent, TMA ring + wgmma) when A, B and C allow "
                "16-byte TMA strides; else, above 64 rows, the rows TMA cannot read copied to 16-byte rows and "
                "then the tma kernel (C stored from registers where TMA cannot write it) where that models "
                "faster than tiled (masked loads into NVMMA shared memory + wgmma); splitk for few rows whose "
                "tiles leave SMs idle; tile config by waves on the SMs",
                _derived("gemm_epilogue", {k: [v] + ([_STAGE_SRC] if k == "tma" else [])
                                           for k, v in _GEMM_SRC.items() if k != "epilogue"},
                         [_GEMM_SRC["epilogue"],
                          Source("gluon_src/dispatch.py", kernels=(), host=("plan_gemm", "gemm_specs")),
                          Source("gluon_src/runtime.py", kernels=(), host=("bind", "bind_all"))])),
    "simple": ("gemm_epilogue_simple", "teaching twin: a 2-d grid of C tiles, masked loads, mma_v2 on "
               "register operands, fp32 accumulator, bias + activation, one masked store; any shape",
               [Source("gluon_src/gemm_epilogue.py", kernels=("gemm_epilogue_kernel",), host=("gemm_epilogue",)),
                _GEMM_SRC["epilogue"]]),
    "tma": ("gemm_epilogue_tma", "persistent programs, TMA loads into a multi-stage mbarrier ring, async "
            "wgmma, epilogue in registers, TMA store; K, N multiples of 8",
            [_GEMM_SRC["tma"], _GEMM_SRC["epilogue"]]),
    "splitk": ("gemm_epilogue_splitk", "K cut in slices over programs (TMA ring + wgmma each), fp32 partials "
               "summed in order by a second kernel with bias + activation; K, N multiples of 8",
               [_GEMM_SRC["splitk"], _GEMM_SRC["epilogue"]]),
    "tiled": ("gemm_epilogue_tiled", "masked pointer loads (as wide as the alignment allows) into "
              "double-buffered NVMMA shared memory, async wgmma; any shape",
              [_GEMM_SRC["tiled"], _GEMM_SRC["epilogue"]]),
}
for _variant, (_name, _desc, _sources) in _GEMM.items():
    register(problem="gemm_epilogue", layer=LAYER, name=_name, description=_desc, sources=_sources,
             devices=("cuda",), available=available,
             supports=None if _variant == "simple" else _gemm_supports(_variant),
             compile_only=_gemm_compile(_variant) if triton else None)(_gemm_prepare(_variant))


def _artifacts(impl, case, art):
    from backends.triton_inspect import triton_artifacts
    return triton_artifacts(impl, case, art)


describe_layer(LAYER, order=5, colour="#ff7f0e", artifacts=_artifacts)
