"""Gluon adapter, attention: the teaching twin ``gluon:attention_simple`` (``gluon_src/attention.py``,
launched the tutorial way) and the default ``gluon:attention`` (``gluon_src/dispatch_attention.py``
plans once in ``prepare``). Gluon has no CPU interpreter: the CPU mode compiles them for sm_90a
(``compile_only``). The layer's shared glue (availability, the sm_90a compile of a launch spec) is
``backends.gluon_layer``'s; this file holds only what attention adds.
"""
from __future__ import annotations

import math

from harness import Source, register
from harness.meta_inputs import meta_attention

from . import gluon_layer as G
from . import planner_rules

if G.triton is not None:
    import triton

    from gluon_src import H200, attention_tma, dispatch_attention
    from gluon_src import attention as attention_simple
    from gluon_src.runtime import Spec
else:   # the rules alone: the ids and their sources as with Gluon
    dispatch_attention = planner_rules("gluon_src", "dispatch_attention")


def _strides(names, t) -> dict:
    return dict(zip(names, t.stride()[:3]))


def simple_spec(case):
    """The twin's launch for ``case`` on meta tensors."""
    q, k, v, out = meta_attention(case)
    args = (_strides(("sq_b", "sq_h", "sq_s"), q) | _strides(("sk_b", "sk_h", "sk_s"), k)
            | _strides(("sv_b", "sv_h", "sv_s"), v) | _strides(("so_b", "so_h", "so_s"), out))
    args |= {"q_ptr": q, "k_ptr": k, "v_ptr": v, "o_ptr": out, "Hq": case.Hq, "GROUP": case.Hq // case.Hkv,
             "Sq": case.Sq, "Sk": case.Sk, "scale": 1.0 / math.sqrt(case.D), "CAUSAL": bool(case.params["causal"]),
             "D": case.D, "BLOCK_M": 64, "BLOCK_N": 64}
    return Spec(attention_simple.attention_kernel, (triton.cdiv(case.Sq, 64), case.B * case.Hq), args,
                {"num_warps": 4})


@register(problem="attention", layer=G.LAYER, name="attention_simple",
          description="teaching twin: Triton's twin with its layouts spelled out - "
                      "64 query rows a program in mma.sync's layout (16 a warp), masked K^T / V loads "
                      "converted to the MMA operands' layouts, the online softmax per row; any case",
          sources=[Source("gluon_src/attention.py", kernels=("attention_kernel",), host=("attention",))],
          devices=("cuda",), available=G.available,
          compile_only=(lambda case: G.compile_specs([simple_spec(case)])) if G.triton else None)
def prepare_attention_simple(case, inputs, out):
    G._check_device(inputs)
    q, k, v = inputs
    return G._twin(attention_simple.attention, q, k, v, case.params["causal"], out)


#: the variant's kernel, and what binds every plan of the default (its prepare: plan_attention)
VARIANT_SOURCES = {"tma": [Source("gluon_src/attention_tma.py", kernels=("attention_tma_kernel",),
                                  host=("launch_spec", "check"))]}
BINDER_SOURCES = [Source("gluon_src/dispatch_attention.py", kernels=(), host=("plan_attention",)),
                  Source("gluon_src/runtime.py", kernels=(), host=("bind",))]


def default_spec(case):
    """The default's launch for ``case`` on meta tensors, planned as for an H200."""
    q, k, v, out = meta_attention(case)
    _, cfg = dispatch_attention.attention_choice(case.B, case.Hq, case.Sq, case.D, q.element_size(), H200)
    return attention_tma.launch_spec(q, k, v, out, case.params["causal"], cfg)


@register(problem="attention", layer=G.LAYER, name="attention",
          description="TMA loads into a ring of K / V stages with an mbarrier each, "
                      "S = Q K^T and O += P V on wgmma (P from registers), online softmax in the log2 "
                      "domain, masks only on edge blocks, causal blocks skipped (longest first); 128 or "
                      "64 query rows by waves, stages by shared memory",
          sources=G._derived("attention", VARIANT_SOURCES, BINDER_SOURCES),
          devices=("cuda",), available=G.available,
          compile_only=(lambda case: G.compile_specs([default_spec(case)], variant="tma")) if G.triton else None)
def prepare_attention(case, inputs, out):
    G._check_device(inputs)
    q, k, v = inputs
    return G._planned(lambda: dispatch_attention.plan_attention(q, k, v, out, case.params["causal"]))
