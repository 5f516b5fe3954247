"""Helion adapter, attention: the teaching twin ``helion:attention_simple`` (``helion_src/attention.py``,
Helion's default configuration) and the tuned ``helion:attention`` (``helion_src/attention_tma.py``
with the configuration of ``helion_src/dispatch_attention.py``: planned once in ``prepare``, launched
through the compiled Triton kernel's launcher; the default's lines of code follow ``helion_src/dispatch.py``'s
``plan``). Both verified on a GPU (an H100, 2026-12-07). The
layer's shared glue (availability, the recording launcher, the sm_90 compile of the generated
Triton) is ``backends.helion_layer``'s; this file holds what attention adds.

CPU mode: Helion's generated Triton runs under Triton's interpreter (TRITON_INTERPRET=1) on small
cases (``INTERPRETER_MAX_FLOPS``), and every case compiles for sm_90 (``compile_only``).

Fixed, and verified on the GPU since: under Helion 1.4 both ids failed causal cases at D = 64 (the tuned one
with Triton's ``CompilationError``, the twin with Helion's ``ShapeMismatch``): the kernels sliced
the tile indices for the causal mask (``tm.index[:, None]``), and Helion 1.4 then specialised the
query tile's block size to the head dim's 64. They now ``unsqueeze`` them (the kernels' docstrings
say why); ``tests/test_helion_attention.py`` checks the generated code's query tile at D = 64.
"""
from __future__ import annotations

import contextlib

import torch

from harness import Source, planned, planned_sources, register
from harness.meta_inputs import meta_attention

from . import helion_layer as H
from . import src

# imported on first use, as the layer's other kernels (helion_layer._Lazy): the twin's module imports
# helion (seconds: torch._dynamo and more), which registering the rows must not
attention_simple, dispatch = H._Lazy("helion_src.attention"), H.dispatch

# The interpreter runs a program's key loop in numpy: in the CPU mode, cases above this many FLOPs
# compile for sm_90 but do not run. Helion's generated code runs slowly there: the verify suite's
# cases of a few MFLOP cost tens of seconds each (first call and three seeds), more than the rest of
# the CPU main job together; its KFLOP cases a second or two.
INTERPRETER_MAX_FLOPS = 1 << 16
H200_SMEM_PER_SM = 233472  # the CPU mode plans for an H200: 228 KB of shared memory an SM


def available() -> str | None:
    if H._IMPORT_ERROR:
        return H._IMPORT_ERROR
    if not torch.cuda.is_available() and not H.interpreting():
        return "no CUDA GPU; under TRITON_INTERPRET=1 Helion's generated Triton runs on the CPU"
    return None


def check_attention(q, k, v, out, causal) -> None:
    """O = attention(Q, K, V): q and out [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], 16-bit, one
    dtype and device, unit last strides, D 64 or 128, Hq a multiple of Hkv, Sq <= Sk if causal."""
    hp = (torch.float16, torch.bfloat16)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        H._check_tensor(name, t, hp, ndim=4)
        if t is not q:
            H._same(name, t, q)
        if t.stride(3) != 1:
            raise ValueError(f"{name}: the head dim must be contiguous (stride(3) == 1), got strides {t.stride()}")
    B, Hq, Sq, D = q.shape
    if D not in (64, 128):
        raise ValueError(f"q: head dim {D} is not 64 or 128")
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or min(k.shape) == 0 or min(q.shape) == 0:
        raise ValueError(f"k, v: expected non-empty [{B}, Hkv, Sk, {D}] alike, got {tuple(k.shape)}, {tuple(v.shape)}")
    if Hq % k.shape[1]:
        raise ValueError(f"k: {k.shape[1]} heads do not divide q's {Hq}")
    if causal and Sq > k.shape[2]:
        raise ValueError(f"q: causal attention needs Sq <= Sk, got {Sq} > {k.shape[2]}")
    if out.shape != q.shape:
        raise ValueError(f"out: shape {tuple(out.shape)}, q has {tuple(q.shape)}")


def _aligned(*tensors) -> bool:
    """Every tensor starts on a 16-byte boundary (meta tensors: their offset in the storage)."""
    return all((t.storage_offset() * t.element_size() if t.device.type == "meta" else t.data_ptr()) % 16 == 0
               for t in tensors)


def plan_for(args):
    """The attention plan (dispatch.plan_attention) for the kernel arguments (q, k, v, out, causal)."""
    q = args[0]
    smem = (torch.cuda.get_device_properties(q.device).shared_memory_per_multiprocessor
            if q.device.type == "cuda" else H200_SMEM_PER_SM)
    B, Hq, Sq, D = q.shape
    return dispatch.plan_attention(B, Hq, Sq, D, q.element_size(), H._sms(q), smem, aligned=_aligned(*args[:4]))


@contextlib.contextmanager
def _interpreter_exp2():
    """Under the interpreter, libdevice's functions are stubs (they return nothing): for the length
    of a CPU launch, the generated code's ``libdevice.exp2`` is Triton's own exp2, which the
    interpreter runs in numpy. On the GPU nothing changes."""
    if not H.interpreting():
        yield
        return
    import triton.language as tl
    from triton.language.extra import libdevice
    stub = libdevice.exp2
    libdevice.exp2 = lambda x, **kw: tl.math.exp2(x)
    try:
        yield
    finally:
        libdevice.exp2 = stub


def _args(case, inputs, out):
    q, k, v = inputs
    causal = bool(case.params["causal"])
    check_attention(q, k, v, out, causal)
    return (q, k, v, out, causal)


def _cpu_safe(launch):
    """``launch`` with the interpreter's exp2 in place on each call (see _interpreter_exp2)."""
    if not H.interpreting():
        return launch

    def run():
        with _interpreter_exp2():
            launch()
    run.info = launch.info
    return run


def prepare_default(case, inputs, out):
    H._need_import()
    H._check_device(inputs)
    args = _args(case, inputs, out)
    with _interpreter_exp2():
        return _cpu_safe(H._launch_plan(plan_for(args), args))


def prepare_simple(case, inputs, out):
    H._need_import()
    H._check_device(inputs)
    args = _args(case, inputs, out)
    with _interpreter_exp2():
        return _cpu_safe(H._launch_simple(attention_simple.attention, args))


def _meta_args(case):
    return (*meta_attention(case), bool(case.params["causal"]))


def compile_default(case):
    H._need_import()
    args = _meta_args(case)
    return H._plan_compile_only(plan_for(args), args)


def compile_simple(case):
    H._need_import()
    return H._compile_facts(attention_simple.attention, _meta_args(case), None, variant="simple")


def code_default(case):
    args = _meta_args(case)
    return H._launches(plan_for(args), args)


def code_simple(case):
    return attention_simple.attention, _meta_args(case), None


TWIN = [Source(src(H.H, "attention.py"), kernels=("attention",), host=())]
VARIANT_SOURCES = {"tma": [Source(src(H.H, "attention_tma.py"), kernels=("attention_tma",), host=())]}
PLANNER_SOURCES = [Source(src(H.H, "dispatch.py"), kernels=(), host=("plan_attention",)),
                   Source(src(H.H, "dispatch_attention.py"), kernels=(), host=("attention_config",))]
BINDING = [Source("backends/helion_layer.py", kernels=(), host=("_launch_plan",))]   # the binding of a plan

_IDS = {
    "attention": ("the twin's loop compiled for the case's sizes "
                  "(static shapes: no masks on whole tiles), Q / K / V / O by TMA (tensor-descriptor "
                  "indexing), K / V pipelined over stages by shared memory, 128 or 64 query rows by "
                  "waves, causal tiles above the diagonal skipped; configuration by rule, no autotuning",
                  # the layer's one planner (dispatch.plan) where Helion imports, else every variant
                  planned(dispatch.plan, "attention", BINDING) if H.helion
                  else planned_sources(VARIANT_SOURCES, tuple(VARIANT_SOURCES), PLANNER_SOURCES + BINDING),
                  compile_default, code_default, prepare_default),
    "attention_simple": ("teaching twin: a tile of query rows of one "
                         "head a program, a loop over key tiles with the online softmax in exp2, explicit "
                         "masks; Helion's default configuration", TWIN, compile_simple, code_simple,
                         prepare_simple),
}

for _name, (_desc, _sources, _compile, _code, _prepare) in _IDS.items():
    register(problem="attention", layer=H.LAYER, name=_name, description=_desc, sources=_sources,
             devices=("cuda", "cpu"), available=available, cpu_max_flops=INTERPRETER_MAX_FLOPS,
             compile_only=_compile if H.helion else None, helion_code=_code)(_prepare)
