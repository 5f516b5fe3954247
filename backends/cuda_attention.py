"""CUDA C++ adapter for attention (kernels in ``cuda_src/attention.cu``, ``attention_tiled.cu`` and
``attention_ws.cu``, planner in ``cuda_src/dispatch_attention.py``, launcher in
``backends/cuda_layer.py``); the CuPy rows of the same kernels (``backends/cupy_attention.py``) share
the planning here and the validation of the planner module (``dispatch_attention.check_attention``).

Rows:
- ``cuda:attention`` (default): FlashAttention-3 on Hopper (``attention_ws.cu``) wherever TMA can read
  q, k and v and the sm_90a code runs; elsewhere FlashAttention-2 on mma.sync (``attention_tiled.cu``),
  64 or 128 query rows a CTA by waves; rows cp.async cannot read (bases or strides off 16 bytes) take
  the twin's kernel.
- ``cuda:attention_simple``: the teaching twin (``attention.cu``), FMA on fp32 tiles, any stride.
- ``cuda:attention_ws``: the ws kernel alone (a TMA producer warp, two wgmma consumer warpgroups);
  declines (SKIP) where TMA cannot read q, k or v or no sm_90a code runs.
The tiled kernel and the twin are verified on the H200; the ws kernel ran on the H200 through CuPy's
NVRTC (verified and timed), this nvcc build of it has not run on a GPU yet.
docs/performance.md, "CUDA C++ / attention".

Without a GPU ``compile_only(case)`` returns the ``ptxas -v`` facts of the instance the case would
launch: from the build log, or (a module built before these kernels, or none) ``nvcc -cubin
-arch=sm_90a`` of the source here.
"""
from __future__ import annotations

from backends.cuda_layer import (DTYPE_CODE, LAUNCHER, available, dev_index, device, launch_info,
                                 make_launcher, module, plan_facts)
from cuda_src import dispatch
from cuda_src import dispatch_attention as A
from harness import Source, planned, register
from harness.errors import Unsupported

LAYER = "cuda"


def attention_launches(path: str, case, q, k, v, out, dev: dispatch.Device) -> dispatch.Launches:
    """The plan for these tensors on ``dev`` (their strides and 16-byte alignment)."""
    from kltools.plan import facts_of
    facts = facts_of("attention", case.dims, case.dtype, case.params, {"q": q, "k": k, "v": v, "out": out})
    return A.launches_for(facts, path, dev)


def case_attention(path: str, case, dev: dispatch.Device = dispatch.H200) -> dispatch.Launches:
    """The plan a harness case gets (its layout's strides, aligned bases) on ``dev`` (default: an
    assumed H200; no GPU needed)."""
    from harness.meta_inputs import case_facts
    return A.launches_for(case_facts(case), path, dev)


def or_unsupported(path: str, planner, *args) -> dispatch.Launches:
    """``planner(*args)``; a ``Decline`` (this path cannot take the case) as the harness's
    ``Unsupported`` naming the path (both launchers' rows)."""
    try:
        return planner(*args)
    except dispatch.Decline as e:
        raise Unsupported(f"{path} path: {e}") from None


def pointers(q, k, v, out) -> dict:
    return {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": out.data_ptr()}


def _prepare(path: str):
    def prepare(case, inputs, out):
        mod = module()
        q, k, v = A.check_attention(case, inputs, out)
        di = dev_index(q)
        plan = or_unsupported(path, attention_launches, path, case, q, k, v, out, device(di))
        built = set(mod.kernels())
        for p in plan.plans:
            if p.kernel not in built:
                raise Unsupported(f"kl_cuda was built before {p.kernel} (rebuild: pip install -e .)")
        launch = make_launcher(mod, plan, pointers(q, k, v, out), di, DTYPE_CODE[q.dtype])
        launch.info = launch_info(plan, path=plan.info.get("path"))
        return launch
    return prepare


def _compile_only(path: str):
    def compile_only(case):
        plan = or_unsupported(path, case_attention, path, case)
        facts = plan_facts(plan)
        facts["path"] = plan.info.get("path")
        return facts
    return compile_only


# -- registration ----------------------------------------------------------------------------------
SIMPLE_SOURCES = [Source("cuda_src/attention.cu", kernels=("attention_simple_kernel",), host=())]
WS_SOURCES = [Source("cuda_src/attention_ws.cu", kernels=("attention_ws_kernel",), host=())]


def sources(path: str, hosts) -> list:
    """A row's Sources: the default's derived from its planner (``harness.planned``: the kernels
    ``dispatch.plan`` - ``dispatch_attention.plan`` for attention - launches over the suites'
    cases, the lines it ran as the plan column); the twin's or the ws kernel; then ``hosts`` (the
    launcher)."""
    if path == "auto":
        return planned(dispatch.plan, "attention", hosts)
    return [*{"simple": SIMPLE_SOURCES, "ws": WS_SOURCES}[path], *hosts]


DESCRIPTIONS = {
    "auto": "FlashAttention-3 on Hopper where TMA can read q, k and v on sm_90a (as attention_ws), else "
            "FlashAttention-2 on mma.sync m16n8k16: 64 or 128 query rows a CTA (16 a warp) by waves, "
            "Q in registers, K / V tiles of 64 keys double-buffered by cp.async in XOR-swizzled shared memory, "
            "ldmatrix (.trans for V), online softmax in exp2 with the scale folded in, P kept in registers for "
            "O += P V, masks only on tiles crossing the diagonal or the end, causal tiles above the diagonal "
            "skipped (longest blocks first), O out by 16-byte stores; rows off 16 bytes take the twin's kernel",
    "simple": "teaching twin: 16 query rows a CTA (a warp per 4 rows, D / 32 elements a lane), "
              "K / V tiles of 32 keys in fp32 shared memory, one key at a time with the online softmax "
              "(warp-shuffle dot products, FMA), any stride",
    "ws": "FlashAttention-3 on Hopper (sm_90a): 128 query rows a CTA, a producer "
          "warp (setmaxnreg 24) loads Q once and K / V tiles of 128 keys by 4-D TMA into a 2-4 slot ring "
          "(full / empty mbarriers), two consumer warpgroups (setmaxnreg 240) of 64 rows run S = Q K^T on wgmma "
          "from shared memory beside the previous tile's O += P V (P as the register A operand, V MN-major), "
          "the online softmax in exp2 under it, masks only on tiles crossing Sk or the diagonal, causal tiles "
          "past the diagonal never loaded; O by 16-byte stores clipped at Sq; declines where TMA cannot read q, k, v",
}
ROWS = (("auto", "attention"), ("simple", "attention_simple"), ("ws", "attention_ws"))

for _path, _name in ROWS:
    register(problem="attention", layer=LAYER, name=_name,
             description=DESCRIPTIONS[_path],
             sources=sources(_path, LAUNCHER), devices=("cuda",), available=available,
             compile_only=_compile_only(_path))(_prepare(_path))
