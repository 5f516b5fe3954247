"""Triton adapter, attention: the teaching twin ``triton:attention_simple`` (``triton_src/attention.py``,
launched the tutorial way) and the default ``triton:attention`` (``triton_src/dispatch_attention.py``
plans once in ``prepare``; the launch is one call of the compiled kernel's launcher). The layer's
shared glue (availability, the sm_90 compile of a launch spec, the CPU-mode limits) is
``backends.triton_layer``'s; this file holds only what attention adds.
"""
from __future__ import annotations

import math
import time

from harness import Source, planned, planned_sources, register
from harness.errors import Unsupported
from harness.meta_inputs import meta_attention

from . import planner_rules
from . import triton_layer as T

if T.triton is not None:
    import triton

    from triton_src import H200, attention_split, attention_tma, device_facts, dispatch_attention
    from triton_src import attention as attention_simple
    from triton_src.runtime import Spec
else:   # the rules alone: the ids and their sources as with triton
    dispatch_attention = planner_rules("triton_src", "dispatch_attention")

# The interpreter runs a program's key loop in numpy, tens of milliseconds a key block: in the
# CPU mode, cases above this many FLOPs are compiled for sm_90 but not executed (the verify
# suite's three largest, 0.27-1.1 GFLOP, take 3-20 s a launch and four launches a case)
INTERPRETER_MAX_FLOPS = 1 << 26

#: the variants' own ids count these; the default derives its Sources from the planner
VARIANT_SOURCES = {"tma": [Source("triton_src/attention_tma.py", kernels=("attention_tma_kernel",),
                                  host=("bind_launch",))],
                   "split": [Source("triton_src/attention_split.py",
                                    kernels=("attention_split_kernel", "attention_combine_kernel"),
                                    host=("bind_launch",))]}
#: what binds every plan of the default (its prepare: dispatch_attention.bind_variant)
BINDER_SOURCES = [Source("triton_src/dispatch_attention.py", kernels=(), host=("bind_variant",)),
                  Source("triton_src/runtime.py", kernels=(), host=("bind_spec",))]


def default_sources() -> list:
    """The default's Sources, derived from its planner (``harness.planned``: the variants
    ``dispatch.plan`` chooses over the suites' cases), then its binder; every variant when Triton,
    and so the planner, cannot be imported."""
    if T.triton is not None:
        from triton_src import dispatch
        return planned(dispatch.plan, "attention", BINDER_SOURCES)
    return planned_sources(VARIANT_SOURCES, tuple(VARIANT_SOURCES), BINDER_SOURCES)


def _table(variant: str):
    """The planner's table a row plans with: today's, the candidate ``next``'s (its pending
    switches on), or the ``split`` variant's (split wherever the grid leaves room to)."""
    A = dispatch_attention.ATTENTION
    if variant == "next":
        return {**A, **dispatch_attention.ATTENTION_NEXT}
    if variant == "split":
        return {**A, "split": True, "split_below_waves": float("inf")}
    return A


def _choice(variant: str, B, Hq, Sq, Sk, D, es, facts):
    """(variant, config) of a row on a case; Unsupported where the ``split`` variant has nothing
    to split (the grid already fills the SMs ``split_target_waves`` times, or too few key blocks)."""
    A = _table(variant)
    if variant == "split":
        cfg = dispatch_attention.attention_split_config(B, Hq, Sq, Sk, D, es, facts, A)
        if cfg is None:
            raise Unsupported("nothing to split: the grid already fills the SMs, or the key axis has "
                              f"fewer than {2 * A['split_min_blocks']} blocks")
        return "split", cfg
    return dispatch_attention.attention_choice(B, Hq, Sq, Sk, D, es, facts, A)


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
    name, c = _choice(variant, case.B, case.Hq, case.Sq, case.Sk, case.D, q.element_size(), H200)
    if name == "split":
        part, lse = attention_split.workspace(q, (cfg or c)["SPLITS"], "meta")
        return attention_split.launch_specs(q, k, v, out, case.params["causal"], cfg or c, part, lse)
    return [attention_tma.launch_spec(q, k, v, out, case.params["causal"], cfg or c)]


def _compile(variant):
    def compile_only(case):
        if variant == "simple":
            return T.compile_specs(attention_specs(variant, case))
        q = meta_attention(case)[0]
        name = _choice(variant, case.B, case.Hq, case.Sq, case.Sk, case.D, q.element_size(), H200)[0]
        return T.compile_specs(attention_specs(variant, case), variant=name)
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
        B, Hq, Sq, D = q.shape
        facts = device_facts(q.device)
        name, cfg = _choice(variant, B, Hq, Sq, k.shape[2], D, q.element_size(), facts)
        try:
            cfg, launch = dispatch_attention.bind_variant(name, q, k, v, out, causal, cfg)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        secs = time.perf_counter() - t0 + T._first_call(launch)
        launch.info = T._info(secs, cfg, launch, variant=name, config=dict(cfg))
        return launch
    return prepare


_ATTENTION = {
    "default": ("attention", "Q / K / V / O through 4-d TMA descriptors, K / V "
                "tiles software-pipelined over as many stages as shared memory holds, exp2 with the "
                "scale folded in, unmasked bulk + masked edge loops, causal blocks above the "
                "diagonal skipped (longest query blocks first), 128 or 64 query rows by waves; "
                "planned once, launched through the compiled kernel's launcher",
                default_sources()),
    "simple": ("attention_simple", "teaching twin: a block of 64 queries a "
               "program, a loop over 64-key blocks with the online softmax, pointer loads with masks; "
               "any case", [Source("triton_src/attention.py", kernels=("attention_kernel",), host=("attention",))]),
}

_CANDIDATES = {
    "split": ("attention_split", "candidate, not yet run on a GPU: the key axis split over programs "
              "(TMA loop of the default over a range of key blocks, fp32 partials and their "
              "log-sum-exp), then a combine kernel; only where the grid leaves SMs idle",
              VARIANT_SOURCES["split"]),
    "next": ("attention_next", "candidate, not yet run on a GPU: the default with its pending switches "
             "on (split the key axis where the grid leaves SMs idle)",
             default_sources() + VARIANT_SOURCES["split"]),
}

for _variant, (_name, _desc, _sources) in (_ATTENTION | _CANDIDATES).items():
    register(problem="attention", layer=T.LAYER, name=_name, description=_desc, sources=_sources,
             devices=("cuda", "cpu"), cpu_max_flops=INTERPRETER_MAX_FLOPS, available=T.available,
             compile_only=T._compile_only(_compile(_variant)) if T.triton else None,
             candidate=_variant in _CANDIDATES)(_prepare(_variant))
