"""CuTe DSL adapter, attention: the teaching twin ``cute:attention_simple`` (``cutlass_src/attention.py``),
the default ``cute:attention`` (``attention_tma.py``, planned by ``cutlass_src/dispatch.plan``, whose
attention rule is ``dispatch_attention.py``'s;
the twin's kernel where TMA cannot take a tensor or the GPU is not a Hopper) and the
warp-specialised variant ``cute:attention_ws`` (``attention_ws.py``, the default's tiles). The
default and the twin verified on the H200 (2026-12-06); the variant stays a candidate (no planner
picks it). Lengths, batch, heads and strides are run-time values: one compile a (dtype, D, causal,
tile) class. The CPU mode compiles them for sm_90a (``compile_only``, ptxas facts). The layer's
shared glue (availability, facts, the input-error wrapper) is ``backends.cute_layer``'s; this file
holds only what attention adds.
"""
from __future__ import annotations

from cutlass_src import dispatch as _dispatch             # plain Python: the layer's one planner
from cutlass_src import dispatch_attention as _plans   # plain Python
from harness import Source, planned, register
from harness.errors import Unsupported

from . import cute_layer as L
from . import src

C = "cutlass_src"
_VERIFIED = "candidate (verified on the H200, 2026-12-06; not yet timed): "


def _plan(B, Hq, Sq, D, esize, tma: bool) -> dict:
    """The planner's answer on this machine: a GPU other than sm_90 takes the twin's kernel."""
    from cutlass_src import dispatch

    cc = L._gpu_cc()
    return _plans.plan_attention(B, Hq, Sq, D, esize, tma=tma, hopper=cc in (None, (9, 0)), sms=dispatch.num_sms())


def _compile(dtype, D: int, causal: bool, plan: dict):
    from cutlass_src import attention, attention_tma, attention_ws

    if plan["kernel"] == "simple":
        return attention._compile(dtype, D, causal)
    if plan["kernel"] == "ws":
        return attention_ws.compile_ws(dtype, D, causal, plan)
    return attention_tma.compile_tma(dtype, D, causal, plan)


def _prepare(q, k, v, out, causal: bool, plan: dict):
    from cutlass_src import attention, attention_tma, attention_ws

    if plan["kernel"] == "simple":
        return attention.prepare_attention_simple(q, k, v, out, causal)
    if plan["kernel"] == "ws":
        return attention_ws.prepare_attention_ws(q, k, v, out, causal, plan)
    return attention_tma.prepare_attention_tma(q, k, v, out, causal, plan)


def _impl(kernel: str):
    """supports / compile_only / prepare of the default (``kernel`` "tma": the planner's choice),
    the warp-specialised variant ("ws": the default's tiles; it declines what TMA cannot take and
    GPUs other than sm_90) or the twin ("simple")."""
    def plan_of(B, Hq, Sq, D, es, tma):
        if kernel == "simple":
            return {"kernel": "simple"}
        plan = _plan(B, Hq, Sq, D, es, tma)
        if kernel == "ws":
            if plan["kernel"] != "tma":
                raise ValueError(f"cute:attention_ws is a TMA + wgmma kernel for sm_90: {plan['why']}")
            plan = dict(plan, kernel="ws", threads=plan["threads"] + 128)
        return plan

    def supports(case):
        if L._available():
            return None
        try:
            plan_of(case.B, case.Hq, case.Sq, case.D, L._esize(case.dtype), True)
        except ValueError as e:
            return str(e)
        return None

    def compile_only(case):
        L._need()
        try:
            plan = plan_of(case.B, case.Hq, case.Sq, case.D, L._esize(case.dtype), True)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        return L._facts(_compile(case.torch_dtype, case.D, bool(case.params["causal"]), plan), plan)

    def prepare(case, inputs, out):
        L._need()
        from cutlass_src import attention, attention_tma

        q, k, v = inputs
        causal = bool(case.params["causal"])
        try:
            attention.validate(q, k, v, out, causal)
            B, Hq, Sq, D = q.shape
            plan = plan_of(B, Hq, Sq, D, q.element_size(), attention_tma.tma_ready(q, k, v, out))
        except (ValueError, TypeError) as e:
            raise Unsupported(str(e)) from None
        return L._prepared(*L._wrap(_prepare, q, k, v, out, causal, plan), plan)

    return supports, compile_only, prepare


_ATT = _dispatch.VARIANTS["attention"]    # the default's variants, by the layer's one planner
_HOSTS = [Source("backends/cute_attention.py", kernels=(), host=("_plan", "_compile", "_prepare"))]
_WS = [Source(src(C, "attention_ws.py"),
              kernels=("AttentionWS.kernel", "AttentionWS.release", "AttentionWS.consumer_sync"),
              host=("AttentionWS.__init__", "compile_ws", "prepare_attention_ws")),
       Source(src(C, "attention_tma.py"), kernels=_dispatch.ATTENTION_TMA_PIECES,
              host=("AttentionTma.__call__", "AttentionTma.__init__", "tma_ready")),
       Source(src(C, "attention.py"), kernels=("online_softmax_rows", "quad_reduce"),
              host=("validate", "attention_args", "fake_qkvo"))]
_PLANNER = [Source(src(C, "dispatch_attention.py"), kernels=(), host=("plan_attention", "smem_bytes")), *_HOSTS]

for _name, _kernel, _desc, _srcs in (
        ("attention", "tma", "Q, K, V and O by TMA (4-D descriptors over (S, D, H, B) "
         "views: ragged lengths zero-filled and clipped), K / V tiles pipelined over 2-4 mbarrier stages issued "
         "by one warp, S = Q K^T and O += P V by wgmma in 64-row warpgroups (P from registers), "
         "online softmax in exp2 with the scale folded in, masks only on the steps that cross Sk or the "
         "diagonal, causal blocks past the diagonal never loaded; 128 or 64 query rows by waves, key tile and "
         "stages by shared memory; the twin's kernel where TMA cannot take a tensor or the GPU is not sm_90",
         planned(_dispatch.plan, "attention", _HOSTS)),
        ("attention_ws", "ws", _VERIFIED + "warp-specialised (FlashAttention-3's roles): "
         "warpgroup 0 gives up registers (setmaxnreg) and one warp loads Q and every K / V tile by TMA into the "
         "ring, waiting on each slot's empty mbarrier; 1-2 consumer warpgroups of 64 rows take the registers, "
         "run the default's wgmma products (P from registers) and online softmax, release a slot with one "
         "arrival a warp (no CTA barrier in the loop: the warpgroups drift apart), meet on a named barrier for "
         "the TMA store; the default's tiles; declines what TMA cannot take and GPUs other than sm_90",
         _WS + _PLANNER),
        ("attention_simple", "simple", "teaching twin: 64 query rows a CTA of 4 warps, "
         "a loop over 64-key blocks: guarded element copies into shared memory, mma.sync m16n8k16 for both "
         "products (P through shared memory), online softmax in exp2; any case", list(_ATT["simple"]))):
    _sup, _co, _p = _impl(_kernel)
    register(problem="attention", layer="cute", name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=L._available, supports=_sup, compile_only=_co,
             candidate=_name == "attention_ws")(_p)
