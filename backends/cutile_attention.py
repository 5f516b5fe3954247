"""cuTile adapter, attention: the teaching twin ``cutile:attention_simple`` (``cutile_src/attention.py``),
the default ``cutile:attention`` (``cutile_src/attention_tma.py``, planned once in ``prepare`` by
``cutile_src/dispatch_attention.py``: tile, latency hint, grid, kernel hints; one ``ct.launch``) and
the variant ``cutile:attention_split`` (``attention_split.py``: the key axis over programs, then a
combine kernel; the default's rule for it is switched off). The default and the twin verified on
the H200 (2026-12-06); the variant stays a candidate. The layer's shared glue (availability, the
sm_90 export and the cubin's facts, the first call, input checks) is ``backends.cutile_layer``'s;
this file holds what attention adds.

CPU mode: ``compile_only(case)`` exports each kernel for sm_90 with the signature a launch on the
case's tensors would have (meta tensors of the case's layout) and reads the cubin and its SASS.
"""
from __future__ import annotations

import math

import torch

from cutile_src import dispatch as _dispatch           # plain Python: the layer's one planner
from cutile_src import dispatch_attention as _plans   # plain Python: the planner's reachable variants
from harness import Source, planned, register
from harness.errors import Unsupported
from harness.meta_inputs import meta_attention

from . import cutile_layer as L

if L.ct is not None:
    from cutile_src import attention as attention_simple
    from cutile_src import attention_split, attention_tma

HALF = (torch.float16, torch.bfloat16)
_VERIFIED = "candidate (verified on the H200, 2026-12-06; not yet timed): "


def attention_args(q, k, v, out, causal) -> None:
    """q and out [B, Hq, Sq, D], k and v [B, Hkv, Sk, D]: one 16-bit dtype, unit last strides, D 64
    or 128, Hq a multiple of Hkv, Sq <= Sk when causal, B and Hq within a grid's dimensions. ValueError or
    TypeError naming the argument."""
    L._check_dtype("q", q, HALF)
    if q.dim() != 4 or min(q.shape) == 0:
        raise ValueError(f"q: expected a non-empty [B, Hq, Sq, D] tensor, got shape {tuple(q.shape)}")
    B, Hq, Sq, D = q.shape
    if D not in _plans.HEAD_DIMS:
        raise ValueError(f"q: head dim {D} is not one of {_plans.HEAD_DIMS}")
    L._check_dtype("k", k, (q.dtype,))
    if k.dim() != 4 or k.shape[0] != B or k.shape[3] != D or min(k.shape) == 0:
        raise ValueError(f"k: expected a non-empty [{B}, Hkv, Sk, {D}] tensor, got shape {tuple(k.shape)}")
    L._check_same("v", v, q.dtype, k.shape)
    L._check_same("out", out, q.dtype, q.shape)
    if Hq % k.shape[1]:
        raise ValueError(f"k: its {k.shape[1]} heads do not divide q's {Hq} (grouped-query heads)")
    if causal and Sq > k.shape[2]:
        raise ValueError(f"q: causal attention needs Sq <= Sk, got Sq = {Sq} > Sk = {k.shape[2]}")
    if max(B, Hq) > _plans.MAX_GRID_YZ:
        raise ValueError(f"q: {B} batches, {Hq} heads: a grid holds at most {_plans.MAX_GRID_YZ} of each")
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t.stride(3) != 1:
            raise ValueError(f"{name}: the head dim must be contiguous (stride(3) == 1), got strides {t.stride()}")


#: the ``split`` id's rule: split wherever the grid leaves room to (the default's: only below a wave)
SPLIT_ID = dict(_plans.ATTENTION, split=True, split_below_waves=float("inf"))


def _plan(variant: str, q, k) -> dict | None:
    """The plan of ``variant`` (default / simple / split) for the tensors' shapes; None where the
    split id has nothing to split."""
    B, Hq, Sq, D = q.shape
    if variant == "simple":
        s = attention_simple
        return {"variant": "simple", "TM": s.TM, "TN": s.TN, "grid": [-(-Sq // s.TM), Hq, B], "hints": {}}
    if variant == "split":
        return _plans.split_config(B, Hq, Sq, k.shape[2], D, L._sms(), SPLIT_ID)
    return _plans.plan_attention(B, Hq, Sq, k.shape[2], D, L._sms())


def _launches(plan: dict, q, k, v, out, causal: bool, parts=None) -> list:
    """[(kernel, args, hints)] of ``plan``: the launch's own arguments (``parts``: the split
    workspace; default: meta tensors of its shape, for compile-only)."""
    if plan["variant"] == "simple":
        s = attention_simple
        args = (q, k, v, out, s.LOG2E / math.sqrt(q.shape[3]), q.shape[1] // k.shape[1], q.shape[3], s.TM, s.TN,
                bool(causal))
        return [(s.attention_kernel, args, {})]
    if plan["variant"] == "split":
        parts = parts or attention_split.workspace(q, plan, device="meta")
        a_part, a_comb = attention_split.launch_args(q, k, v, out, causal, plan, parts)
        return [(attention_split.attention_split_kernel, a_part, plan["hints"]),
                (attention_split.attention_combine_kernel, a_comb, {})]
    return [(attention_tma.attention_tma_kernel, attention_tma.launch_args(q, k, v, out, causal, plan),
             plan["hints"])]


def bind_attention(variant: str, q, k, v, out, causal: bool):
    """The planned launch of ``variant`` (default / split) on CUDA tensors: (launch, launches,
    plan); the split workspace allocated here, once, outside the launch."""
    plan = _plan(variant, q, k)
    if plan["variant"] == "split":
        parts = attention_split.workspace(q, plan)
        launches = _launches(plan, q, k, v, out, causal, parts)
        kernels = [L.hinted(kk, h) for kk, _, h in launches]
        launch = attention_split.bind_launch(q, k, v, out, causal, plan, parts, kernels=kernels)
        launch.workspace = parts
        return launch, launches, plan
    launches = _launches(plan, q, k, v, out, causal)
    kernel = L.hinted(launches[0][0], plan["hints"])
    return attention_tma.bind_launch(q, k, v, out, causal, plan, kernel=kernel), launches, plan


def _supports(variant: str):
    def supports(case):
        if variant != "split":
            return None
        if _plans.split_config(case.B, case.Hq, case.Sq, case.Sk, case.D, L._sms(), SPLIT_ID) is None:
            return (f"nothing to split: the grid already fills the SMs {SPLIT_ID['split_target_waves']:g} times, "
                    f"or the key axis has fewer than {2 * SPLIT_ID['split_min_tiles']} tiles")
        return None
    return supports


def _compile(variant: str):
    def compile_only(case):
        q, k, v, out = meta_attention(case)
        causal = bool(case.params["causal"])
        attention_args(q, k, v, out, causal)
        if (why := _supports(variant)(case)):
            raise Unsupported(why)
        plan = _plan(variant, q, k)
        return L._facts(_launches(plan, q, k, v, out, causal)) | {"config": plan}
    compile_only.__name__ = f"compile_attention_{variant}"
    return compile_only


def _prepare(variant: str):
    def prepare(case, inputs, out):
        L._cuda_inputs(inputs)
        q, k, v = inputs
        causal = bool(case.params["causal"])
        attention_args(q, k, v, out, causal)
        if (why := _supports(variant)(case)):
            raise Unsupported(why)
        if variant == "simple":
            plan = _plan("simple", q, k)

            def launch():
                attention_simple.attention(q, k, v, out, causal)
            return L._finish(launch, _launches(plan, q, k, v, out, causal), plan)
        launch, launches, plan = bind_attention(variant, q, k, v, out, causal)
        return L._finish(launch, launches, plan)
    return prepare


_TWIN = [Source("cutile_src/attention.py", kernels=("attention_kernel",), host=("attention",))]
_BINDER = [Source("backends/cutile_attention.py", kernels=(), host=("bind_attention",))]

_IDS = {
    "default": ("attention", "the twin's loop as tuned for Hopper: Q / K / V "
                "loaded whole-tile from the 4-d arrays (both layouts), which tileiras lowers to TMA from a "
                "producer warp (O stored by TMA), wgmma for both products; an unmasked bulk loop, then the "
                "masked edge tiles; causal tiles above the diagonal skipped, longest query tiles first; exp2 "
                "with the scale folded; 128 query rows (8 worker warps: two consumer warpgroups) where they "
                "fill the SMs, else 64 (two programs an SM); a latency hint on the K / V loads",
                planned(_dispatch.plan, "attention", _BINDER)),
    "simple": ("attention_simple", "teaching twin: 64 query rows of one head a "
               "program, a loop over 64-key tiles: ct.mma for Q K^T (K loaded transposed) and P V, the mask "
               "by index, the online softmax in fp32 with exp2; zero-padded loads; any case", _TWIN),
    "split": ("attention_split", _VERIFIED + "the key axis of each query tile cut into ranges "
              "over programs (the tma kernel's loop on each), unnormalised fp32 partials (acc, max, sum) in a "
              "workspace of whole query tiles, then a combine kernel a query tile (flash-decoding), for grids "
              "that leave SMs idle; declines cases with nothing to split",
              list(_plans.VARIANTS["attention"]["split"]) + _BINDER),
}
for _v, (_name, _desc, _src) in _IDS.items():
    register(problem="attention", layer=L.LAYER, name=_name, description=_desc, sources=_src,
             devices=("cuda",), available=L.available, candidate=_v == "split", supports=_supports(_v),
             compile_only=_compile(_v) if L.ct is not None else None)(_prepare(_v))
