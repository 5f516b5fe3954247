"""TileLang adapter, attention: the teaching twin ``tilelang:attention_simple``
(``tilelang_src/attention.py``) and the default ``tilelang:attention`` (``attention_ws.py``, planned
by ``tilelang_src/dispatch_attention.py``). Both kernels take sizes and strides at run time, so
one compile serves a (dtype, D, causal, tile) class whatever the lengths, batch and heads.
TileLang has no interpreter: the CPU mode compiles them for sm_90a (``compile_only``, ptxas facts).
The layer's shared glue (availability, the compile cache, facts, launch facts) is
``backends.tilelang_layer``'s; this file holds only what attention adds.
"""
from __future__ import annotations

from harness import Source, planned, register
from harness.errors import Unsupported
from tilelang_src import dispatch as _dispatch             # plain Python: the layer's one planner
from tilelang_src import dispatch_attention as _plans   # plain Python

from . import src
from . import tilelang_layer as L

C = "tilelang_src"


def _simple_compile(dtype: str, D: int, causal: bool) -> list:
    from tilelang_src import attention

    return [L._compile(("attention", dtype, D, causal), lambda: attention.attention_kernel(dtype, D, causal))]


def _ws_compile(dtype: str, D: int, causal: bool, plan: dict) -> list:
    """The default's kernel for a plan: Hopper only (TMA, wgmma, setmaxnreg), like the GEMM's."""
    import tilelang_src
    from tilelang_src import attention_ws

    if not tilelang_src.arch().startswith("sm_90"):
        raise ValueError(f"arch: tilelang:attention is a Hopper kernel (TMA + wgmma, sm_90a), not {tilelang_src.arch()}")
    cfg = (plan["bm"], plan["bn"], plan["stages"], plan["threads"])
    return [L._compile(("attention_ws", dtype, D, causal) + cfg,
                       lambda: attention_ws.attention_ws_kernel(dtype, D, causal, *cfg))]


def _check(q, k, v, out, causal: int, tma: bool) -> None:
    """The tensors' contract (Unsupported naming the argument): q [B, Hq, Sq, D], k / v
    [B, Hkv, Sk, D] with a unit last stride, out contiguous like q, one 16-bit dtype, Hq a
    multiple of Hkv, Sq <= Sk when causal; for TMA (``tma``) 16-byte aligned bases and strides."""
    L._check_cuda(q, k, v, out)
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or (k.shape[0], k.shape[3]) != (q.shape[0], q.shape[3]):
        raise Unsupported("q, k, v: q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D]")
    if q.shape[3] not in (64, 128) or q.shape[1] % k.shape[1] or (causal and q.shape[2] > k.shape[2]):
        raise Unsupported("q, k: D 64 or 128, Hq a multiple of Hkv, Sq <= Sk when causal")
    if len({t.dtype for t in (q, k, v, out)}) != 1 or out.shape != q.shape or not out.is_contiguous():
        raise Unsupported("out: contiguous, q's shape, one dtype for q, k, v and out")
    if any(t.stride(3) != 1 for t in (q, k, v)):
        raise Unsupported("q, k, v: the head dim must be contiguous (stride(3) == 1)")
    es = q.element_size()
    if tma and any(t.data_ptr() % 16 or any(s * es % 16 for s in t.stride()[:3]) for t in (q, k, v, out)):
        raise Unsupported("q, k, v, out: TMA needs 16-byte aligned bases and strides")


def _impl(kernel: str):
    def entries(dtype, D, causal, plan):
        if kernel == "simple":
            return _simple_compile(dtype, D, causal)
        return _ws_compile(dtype, D, causal, plan)

    def plan_of(B, Hq, Sq, D, es):
        return {"kernel": "simple"} if kernel == "simple" else _plans.plan_attention(B, Hq, Sq, D, es)

    def compile_only(case):
        L._need()
        plan = plan_of(case.B, case.Hq, case.Sq, case.D, L._esize(case.dtype))
        try:
            return L._facts(entries(case.dtype, case.D, bool(case.params["causal"]), plan), plan)
        except ValueError as e:
            raise Unsupported(str(e)) from None

    def prepare(case, inputs, out):
        L._need()
        q, k, v = inputs
        causal = bool(case.params["causal"])
        _check(q, k, v, out, causal, tma=kernel != "simple")
        import tilelang_src

        B, Hq, Sq, D = q.shape
        plan = plan_of(B, Hq, Sq, D, q.element_size())
        try:
            found = entries(tilelang_src.dtype_name(q.dtype), D, causal, plan)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        fn = found[0].kernel
        return L._launch(found, plan, lambda: fn(q, k, v, out))

    return compile_only, prepare


_SIMPLE = [Source(src(C, "attention.py"), kernels=("attention_kernel",)),
           Source("backends/tilelang_attention.py", kernels=(), host=("_simple_compile", "_check"))]
_HOSTS = [Source("backends/tilelang_attention.py", kernels=(), host=("_ws_compile", "_check"))]

for _name, _kernel, _desc, _srcs in (
        ("attention", "ws", "T.Pipelined over K / V blocks: TMA loads on mbarriers "
         "from a producer warpgroup TileLang splits off (setmaxnreg), S = Q K^T and O += P V on wgmma (P from "
         "registers) in 64-row consumer warpgroups, the mask as S's initial value, online softmax in exp2 with "
         "the scale folded in, causal blocks above the diagonal skipped (longest first), O out by TMA; 128 or 64 "
         "query rows by waves, stages by shared memory; dynamic sizes and strides (one compile a class)",
         planned(_dispatch.plan, "attention", _HOSTS)),
        ("attention_simple", "simple", "teaching twin: 64 query rows a CTA, a loop "
         "over 64-key blocks with the online softmax, guarded element copies into shared memory, T.gemm for "
         "both products; dynamic sizes and strides, any case", _SIMPLE)):
    _c, _p = _impl(_kernel)
    register(problem="attention", layer=L.LAYER, name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=L._available, compile_only=_c)(_p)
