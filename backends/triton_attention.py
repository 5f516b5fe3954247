"""Triton adapter, attention: the teaching twin ``triton:attention_simple`` (``triton_src/attention.py``,
launched the tutorial way) and the default ``triton:attention`` (``triton_src/dispatch_attention.py``
plans once in ``prepare``; the launch is one call of the compiled kernel's launcher). The layer's
shared glue (availability, the sm_90 compile of a launch spec, the CPU-mode limits) is
``backends.triton_layer``'s; this file holds only what attention adds.
"""
from __future__ import annotations

import math
import time

from harness import Source, planned_sources, register
from harness.errors import Unsupported
from harness.meta_inputs import meta_attention

from . import triton_layer as T

if T.triton is not None:
    import triton

    from triton_src import H200, attention_tma, dispatch_attention
    from triton_src import attention as attention_simple
    from triton_src.runtime import Spec

# The interpreter runs a program's key loop in numpy, tens of milliseconds a key block: in the
# CPU mode, cases above this many FLOPs are compiled for sm_90 but not executed (the verify
# suite's three largest, 0.27-1.1 GFLOP, take 3-20 s a launch and four launches a case)
INTERPRETER_MAX_FLOPS = 1 << 26

VARIANT_SOURCES = {"tma": [Source("triton_src/attention_tma.py", kernels=("attention_tma_kernel",),
                                  host=("bind_launch",))]}
PLANNER_SOURCES = [Source("triton_src/dispatch_attention.py", kernels=(), host=("plan_attention",)),
                   Source("triton_src/runtime.py", kernels=(), host=("bind_spec",))]


def default_sources() -> list:
    reach = dispatch_attention.reachable("attention") if T.triton is not None else tuple(VARIANT_SOURCES)
    return planned_sources(VARIANT_SOURCES, reach, PLANNER_SOURCES)


def _simple_spec(case):
    q, k, v, out = meta_attention(case)
    grid = (triton.cdiv(case.Sq, 64), case.B * case.Hq)
    args = dict(zip(("sq_b", "sq_h", "sq_s"), q.stride()[:3])) | dict(zip(("sk_b", "sk_h", "sk_s"), k.stride()[:3]))
    args |= dict(zip(("sv_b", "sv_h", "sv_s"), v.stride()[:3])) | dict(zip(("so_b", "so_h", "so_s"), out.stride()[:3]))
    args |= {"q_ptr": q, "k_ptr": k, "v_ptr": v, "o_ptr": out, "Hq": case.Hq, "GROUP": case.Hq // case.Hkv,
             "Sq": case.Sq, "Sk": case.Sk, "scale": 1.0 / math.sqrt(case.D), "CAUSAL": bool(case.params["causal"]),
             "D": case.D, "BLOCK_M": 64, "BLOCK_N": 64}
    return Spec(attention_simple.attention_kernel, grid, args, {})


def attention_specs(variant: str, case, cfg=None) -> list:
    """The launch specs of ``variant`` ("default" or "simple") for ``case`` on meta tensors as an
    H200 would get them, with ``cfg`` instead of the planner's configuration if given."""
    if variant == "simple":
        return [_simple_spec(case)]
    q, k, v, out = meta_attention(case)
    name, c = dispatch_attention.attention_choice(case.B, case.Hq, case.Sq, case.Sk, case.D,
                                                  q.element_size(), H200)
    return [attention_tma.launch_spec(q, k, v, out, case.params["causal"], cfg or c)]


def _compile(variant):
    def compile_only(case):
        return T.compile_specs(attention_specs(variant, case), **({"variant": "tma"} if variant == "default" else {}))
    compile_only.__name__ = f"attention_compile_{variant}"
    return compile_only


def _prepare(variant):
    def prepare(case, inputs, out):
        from triton_src.checks import attention_args
        T._check_device(inputs)
        q, k, v = inputs
        causal = case.params["causal"]
        attention_args(q, k, v, out, causal)
        if variant == "simple":
            def launch():
                attention_simple.attention(q, k, v, causal, out)
            launch.info = {"compile_s": round(T._first_call(launch), 3)}
            return launch
        t0 = time.perf_counter()
        try:
            plan = dispatch_attention.plan_attention(q, k, v, out, causal)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        secs = time.perf_counter() - t0 + T._first_call(plan.launch)
        plan.launch.info = T._info(secs, plan.config, plan.launch, variant=plan.variant, config=dict(plan.config))
        return plan.launch
    return prepare


_ATTENTION = {
    "default": ("attention", "not yet run on a GPU: Q / K / V / O through 4-d TMA descriptors, K / V "
                "tiles software-pipelined over as many stages as shared memory holds, exp2 with the "
                "scale folded in, unmasked bulk + masked edge loops, causal blocks above the "
                "diagonal skipped (longest query blocks first), 128 or 64 query rows by waves; "
                "planned once, launched through the compiled kernel's launcher",
                default_sources() if T.triton is not None else []),
    "simple": ("attention_simple", "teaching twin (not yet run on a GPU): a block of 64 queries a "
               "program, a loop over 64-key blocks with the online softmax, pointer loads with masks; "
               "any case", [Source("triton_src/attention.py", kernels=("attention_kernel",), host=("attention",))]),
}

for _variant, (_name, _desc, _sources) in _ATTENTION.items():
    register(problem="attention", layer=T.LAYER, name=_name, description=_desc, sources=_sources,
             devices=("cuda", "cpu"), cpu_max_flops=INTERPRETER_MAX_FLOPS, available=T.available,
             compile_only=T._compile_only(_compile(_variant)) if T.triton else None)(_prepare(_variant))
