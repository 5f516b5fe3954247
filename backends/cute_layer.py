"""CuTe DSL adapter (nvidia-cutlass-dsl 4.8): registers the CuTe layer's implementations.

Per problem: the default (``cute:<problem>``, planned by ``cutlass_src/dispatch.py``), the teaching
twin (``cute:<problem>_simple``) and the tuned variants (``cute:<problem>_<algorithm>``). Glue only:
availability, which cases a variant takes (and why not), compile-only facts for sm_90a without a
GPU, and ``prepare`` -> zero-argument launch. Kernels, launch wrappers and the planners live in
``cutlass_src/``; compiles are cached per compile-time configuration (sizes, strides, alignment
and the GEMM's split count, bias and activation are run-time arguments).
"""
from __future__ import annotations

from cutlass_src import dispatch as _dispatch
from harness import Source, planned, planned_sources, register
from harness.errors import Unsupported

from . import src

C = "cutlass_src"


def _available() -> str | None:
    try:
        import cutlass_src
    except Exception as e:  # pragma: no cover
        return f"cutlass_src failed to import: {type(e).__name__}: {e}"
    return cutlass_src.unavailable()


def _need():
    why = _available()
    if why:
        raise Unsupported(why)


def _gpu_cc() -> tuple[int, int] | None:
    """The compute capability of the GPU the rows would run on (None without one)."""
    import torch

    return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None


#: the kernels that need sm_90's bulk copies, mbarriers or thread-block clusters
_SM90_SOFTMAX = ("smem", "split", "cluster")


def _arch_why(kind: str) -> str | None:
    """Why this GPU cannot run a CuTe kernel of ``kind`` ("gemm" or a softmax plan's kernel), or None."""
    cc = _gpu_cc()
    if cc is None:
        return None
    sm = f"sm_{cc[0]}{cc[1]}"
    if kind == "gemm" and cc != (9, 0):
        return f"the CuTe GEMM kernels are Hopper's (wgmma and TMA, sm_90a only); this GPU is {sm}"
    if kind in _SM90_SOFTMAX and cc < (9, 0):
        return f"the {kind} softmax kernel needs sm_90 bulk copies, mbarriers and clusters; this GPU is {sm}"
    return None


def _esize(dtype: str) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]


def _facts(comp, plan: dict) -> dict:
    info = comp.facts()
    info["config"] = dict(plan)
    return info


def _prepared(launch, comp, plan: dict):
    launch.info = _facts(comp, plan)
    return launch


def _wrap(fn, *args):
    """Call a cutlass_src prepare; its input errors become Unsupported (prepare may decline)."""
    try:
        return fn(*args)
    except (ValueError, TypeError) as e:
        raise Unsupported(str(e)) from None


def _kernel_sources(file: str, cls: str, *host: str) -> Source:
    """A CuTe kernel class: the @cute.kernel method is the kernel entry point; the @cute.jit
    launcher (grid, arguments) and the named host functions are host lines."""
    return Source(src(C, file), kernels=(f"{cls}.kernel",), host=(f"{cls}.__call__", *host))


# -- vector_add ---------------------------------------------------------------------------------
def _va_align(case) -> int:
    from cutlass_src import align_of

    return align_of(int(case.params.get("misalign", 0)) * _esize(case.dtype))


def _va_compile_only(case):
    _need()
    from cutlass_src import vector_add_unmasked as va

    vec, unroll = va.access_plan(case.N, case.torch_dtype, _va_align(case))
    comp, vec = va._compile(case.torch_dtype, _va_align(case), unroll)
    return _facts(comp, {"threads": va.THREADS, "unroll": unroll, "vec": vec})


@register(problem="vector_add", layer="cute", name="vector_add",
          description="unmasked full tiles of 128-bit vectors (narrower when misaligned), one predicated tail",
          sources=planned(_dispatch.plan, "vector_add"),
          devices=("cuda",), available=_available, compile_only=_va_compile_only)
def vector_add_prepare(case, inputs, out):
    _need()
    from cutlass_src import vector_add_unmasked as va

    launch, comp, vec, unroll = _wrap(va.prepare_vector_add, *inputs, out)
    return _prepared(launch, comp, {"threads": va.THREADS, "unroll": unroll, "vec": vec})


def _va_simple_compile_only(case):
    _need()
    from cutlass_src import vector_add as va

    return _facts(va._compile(case.torch_dtype), {"threads": va.THREADS, "per_thread": va.PER_THREAD})


@register(problem="vector_add", layer="cute", name="vector_add_simple",
          description="teaching twin: zipped_divide tiles, thread-value layout, predicated by an "
                      "identity tensor, one element per access",
          sources=[_kernel_sources("vector_add.py", "VectorAddSimple", "prepare_vector_add_simple", "_compile"),
                   Source(src(C, "vector_add_unmasked.py"), kernels=(), host=("validate",))],
          devices=("cuda",), available=_available, compile_only=_va_simple_compile_only)
def vector_add_simple_prepare(case, inputs, out):
    _need()
    from cutlass_src import vector_add as va

    launch, comp = _wrap(va.prepare_vector_add_simple, *inputs, out)
    return _prepared(launch, comp, {"threads": va.THREADS, "per_thread": va.PER_THREAD})


# -- softmax ------------------------------------------------------------------------------------
def _sm_case_aligned(case) -> bool:
    """Whether every row of the case's input starts on a 16-byte boundary (as make_inputs lays it
    out; the harness's output rows are then aligned too)."""
    from harness.problems.softmax import row_pad, start_offset

    layout = case.params.get("layout", "contiguous")
    es = _esize(case.dtype)
    return start_offset(layout) * es % 16 == 0 and (case.M == 1 or (case.N + row_pad(layout, case.N)) * es % 16 == 0) \
        and (case.M == 1 or case.N * es % 16 == 0)


def _sm_tensors_aligned(x, out) -> bool:
    es = x.element_size()
    rows = x.shape[0] > 1
    return all(t.data_ptr() % 16 == 0 and (not rows or t.stride(0) * es % 16 == 0) for t in (x, out))


def _sm_plan(case, kernel=None) -> dict:
    from cutlass_src import dispatch

    return dispatch.plan_softmax(case.M, case.N, _esize(case.dtype), _sm_case_aligned(case), kernel=kernel)


def _sm_compile(dtype, plan: dict):
    from cutlass_src import softmax, softmax_block, softmax_cluster, softmax_rows, softmax_smem, softmax_split

    if plan["kernel"] == "smem":
        return softmax_smem.compile_smem(dtype, plan)
    if plan["kernel"] == "cluster":
        return softmax_cluster.compile_cluster(dtype, plan)
    if plan["kernel"] == "simple":
        return softmax._compile(dtype)
    if plan["kernel"] == "rows":
        return softmax_rows.compile_rows(dtype, plan)
    if plan["kernel"] == "split":
        return softmax_split.compile_split(dtype, plan)
    return softmax_block.compile_block(dtype, plan)


def _sm_prepare(x, out, plan: dict):
    from cutlass_src import softmax, softmax_block, softmax_cluster, softmax_rows, softmax_smem, softmax_split

    if plan["kernel"] == "smem":
        return softmax_smem.prepare_softmax_smem(x, out, plan)
    if plan["kernel"] == "cluster":
        return softmax_cluster.prepare_softmax_cluster(x, out, plan)
    if plan["kernel"] == "simple":
        return (*softmax.prepare_softmax_simple(x, out), plan)
    if plan["kernel"] == "rows":
        return softmax_rows.prepare_softmax_rows(x, out, plan)
    if plan["kernel"] == "split":
        return softmax_split.prepare_softmax_split(x, out, plan)
    return softmax_block.prepare_softmax_block(x, out, plan)


def _softmax_impl(kernel: str | None):
    """supports / compile_only / prepare of cute:softmax (kernel None: the planner's choice) or of
    the variant that forces ``kernel``."""
    def supports(case):
        if _available():
            return None
        try:
            plan = _sm_plan(case, kernel)
        except ValueError as e:
            return str(e)
        return _arch_why(plan["kernel"])

    def compile_only(case):
        _need()
        try:
            plan = _sm_plan(case, kernel)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        return _facts(_sm_compile(case.torch_dtype, plan), plan)

    def prepare(case, inputs, out):
        _need()
        from cutlass_src import dispatch

        (x,) = inputs
        try:
            plan = dispatch.plan_softmax(x.shape[0], x.shape[1], x.element_size(),
                                         _sm_tensors_aligned(x, out), kernel=kernel)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        return _prepared(*_wrap(_sm_prepare, x, out, plan))

    return supports, compile_only, prepare


_ROWS_SRC = _kernel_sources("softmax_rows.py", "SoftmaxRows", "prepare_softmax_rows", "compile_rows")
_BLOCK_SRC = _kernel_sources("softmax_block.py", "SoftmaxBlock", "prepare_softmax_block", "compile_block")
_CLUSTER_SRC = Source(src(C, "softmax_cluster.py"), kernels=("SoftmaxCluster.kernel", "load_peer_i64"),
                      host=("SoftmaxCluster.__call__", "prepare_softmax_cluster", "compile_cluster"))
_SPLIT_SRC = _kernel_sources("softmax_split.py", "SoftmaxSplit", "prepare_softmax_split", "compile_split", "_slots")
_SMEM_SRC = Source(src(C, "softmax_smem.py"), kernels=("SoftmaxSmem.kernel", "SoftmaxSmem.vector"),
                   host=("SoftmaxSmem.__call__", "prepare_softmax_smem", "compile_smem", "smem_bytes"))
# the helpers the three kernels share (imported from softmax_base.py)
_SM_BASE = Source(src(C, "softmax_base.py"),
                  kernels=("row_vectors", "load_row", "store_row", "row_stats", "normalise", "block_reduce",
                           "vec_copy_atom", "fmax", "add"),
                  host=("validate", "fake_rows", "row_args"))
_PLAN_SRC = Source(src(C, "dispatch.py"), kernels=(), host=("plan_softmax", "row_vectors"))
_SMEM_PLAN_SRC = Source(src(C, "dispatch.py"), kernels=(), host=("plan_softmax", "row_vectors", "plan_smem",
                                                                 "_smem_bytes", "_block_threads"))

# the helpers the smem kernel shares with the split and cluster kernels
_SMEM_HELPERS = [Source(src(C, "softmax_split.py"), kernels=("bulk_g2s", "merge"), host=()),
                 Source(src(C, "softmax_cluster.py"), kernels=("load_peer_f32",), host=())]

# registered as candidates (register(candidate=True): no id of the tool until a GPU verifies them):
# softmax_cluster was rewritten after it FAILed the verify suite on the H200 and has not run since
_SM_CANDIDATES = ("softmax_cluster",)

for _name, _kernel, _desc, _srcs in (
        ("softmax", None, "planned by bytes per row: softmax_rows (<= 4 KB rows), softmax_block (a row "
                          "per CTA in registers while rows fill the GPU and 256 threads hold one), "
                          "softmax_smem (longer rows staged in the shared memory of a CTA or a cluster of "
                          "<= 8, while the CTAs cover the SMs), softmax_split (the rest); 16-byte "
                          "accesses at any row alignment",
         planned(_dispatch.plan, "softmax", [_SM_BASE])),
        ("softmax_rows", "rows", "short rows: a warp (or a few) per row, several rows per CTA, grid-stride "
                                 "row loop with the next row's loads in flight", [_ROWS_SRC, _SM_BASE, _PLAN_SRC]),
        ("softmax_block", "block", "a row per CTA held in registers, warp + block reductions",
         [_BLOCK_SRC, _SM_BASE, _PLAN_SRC]),
        ("softmax_split", "split", "long rows: chunks in the registers of a persistent grid (2 CTAs per SM), "
                                   "next chunk prefetched into shared memory by bulk copies, (max, sum) "
                                   "exchanged as one 64-bit word per chunk in global memory",
         [_SPLIT_SRC, _SM_BASE, _PLAN_SRC]),
        ("softmax_cluster", "cluster", "not yet verified on a GPU: long rows over a thread-block cluster of 2-16 CTAs, "
                                       "each CTA's share in its registers (cp.async staging), one exponential "
                                       "per element, one (max, sum) word a warp through distributed shared memory",
         [_CLUSTER_SRC, _SM_BASE, _PLAN_SRC,
          Source(src(C, "softmax_split.py"), kernels=("merge", "pack_pair", "unpack_pair"), host=())]),
        ("softmax_smem", "smem", "long rows staged in shared memory: a CTA per row (or a cluster of C, (max, "
                                 "sum) exchanged through distributed shared memory), the slice copied in by "
                                 "bulk copies on 8 mbarriers, running (max, sum) as they land, one pass over "
                                 "shared memory to write",
         [_SMEM_SRC, _SM_BASE, _SMEM_PLAN_SRC, *_SMEM_HELPERS])):
    _sup, _co, _prep = _softmax_impl(_kernel)
    register(problem="softmax", layer="cute", name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=_available, supports=_sup, compile_only=_co,
             candidate=_name in _SM_CANDIDATES)(_prep)


def _sm_next(fn):
    """``fn`` of the default, planned with the pending switches on (``dispatch.SOFTMAX_NEXT``)."""
    def call(*args):
        with _dispatch.switched(_dispatch.SOFTMAX_NEXT):
            return fn(*args)
    return call


# (a candidate counts every kernel the pending planner may launch)
_NEXT_TABLE = {"rows": _ROWS_SRC, "block": _BLOCK_SRC, "smem": _SMEM_SRC, "split": _SPLIT_SRC, "cluster": _CLUSTER_SRC,
               "simple": Source(src(C, "softmax.py"), kernels=("SoftmaxSimple.kernel",), host=("SoftmaxSimple.__call__",))}
_NEXT_SRC = planned_sources(_NEXT_TABLE, tuple(_NEXT_TABLE), [_SM_BASE, _SMEM_PLAN_SRC, *_SMEM_HELPERS,
                            Source(src(C, "softmax_split.py"), kernels=("pack_pair", "unpack_pair"), host=())])
# the candidate that times tomorrow's default beside today's (not yet run on a GPU)
_sup, _co, _prep = map(_sm_next, _softmax_impl(None))
register(problem="softmax", layer="cute", name="softmax_next", candidate=True,
         description="candidate: the default with the switches of dispatch.SOFTMAX_NEXT on (rows over 32 KB "
                     "to softmax_cluster while a cluster holds the row and M x C CTAs cover the SMs); not yet "
                     "run on a GPU", sources=_NEXT_SRC, devices=("cuda",), available=_available,
         supports=_sup, compile_only=_co)(_prep)


def _sm_simple_compile_only(case):
    _need()
    from cutlass_src import softmax as sm

    return _facts(sm._compile(case.torch_dtype), {"threads": sm.THREADS})


@register(problem="softmax", layer="cute", name="softmax_simple",
          description="teaching twin: a CTA per row, online (max, sum) pass, butterfly + shared-memory "
                      "merge, write pass; one element per access",
          sources=[Source(src(C, "softmax.py"), kernels=("SoftmaxSimple.kernel",),
                          host=("SoftmaxSimple.__call__", "prepare_softmax_simple", "_compile")),
                   Source(src(C, "softmax_base.py"), kernels=(), host=("validate", "fake_rows", "row_args"))],
          devices=("cuda",), available=_available, compile_only=_sm_simple_compile_only)
def softmax_simple_prepare(case, inputs, out):
    _need()
    from cutlass_src import softmax as sm

    (x,) = inputs
    launch, comp = _wrap(sm.prepare_softmax_simple, x, out)
    return _prepared(launch, comp, {"threads": sm.THREADS})


# -- gemm_epilogue ------------------------------------------------------------------------------
def _gemm_case_widths(case) -> tuple[int, int, int]:
    """Access widths of the case's contiguous inputs (make_inputs) and the harness's 256-byte
    aligned output: set by K (A's rows) and N (B's and C's rows)."""
    from cutlass_src.gemm_launch import access_elems

    return access_elems(case.K * 2), access_elems(case.N * 2), access_elems(case.N * 2)


_GEMM_VARIANTS = {
    None: {},
    "ws": {"schedule": "ws"},
    "pingpong": {"schedule": "pingpong"},
    "splitk": {"min_splits": 2},
    "tiled": {"tma": False},
}


def _gemm_impl(variant: str | None):
    def plan_for(M, N, K, widths):
        from cutlass_src import dispatch

        opts = dispatch.GEMM_NEXT if variant == "next" else _GEMM_VARIANTS[variant]
        return dispatch.plan_gemm(M, N, K, widths, **opts)

    def supports(case):
        if _available():
            return None
        try:
            plan_for(case.M, case.N, case.K, _gemm_case_widths(case))
        except ValueError as e:
            return str(e)
        return _arch_why("gemm")

    def compile_only(case):
        _need()
        from cutlass_src import gemm_launch

        try:
            plan = plan_for(case.M, case.N, case.K, _gemm_case_widths(case))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        return _facts(gemm_launch.compile_gemm(case.torch_dtype, plan), plan)

    def prepare(case, inputs, out):
        _need()
        from cutlass_src import gemm_launch

        a, b, bias = inputs
        act = case.params.get("act", "relu")
        try:
            gemm_launch.validate(a, b, bias, out, act)
            plan = plan_for(a.shape[0], b.shape[1], a.shape[1], gemm_launch.operand_widths(a, b, out))
        except (ValueError, TypeError) as e:
            raise Unsupported(str(e)) from None
        return _prepared(*_wrap(gemm_launch.prepare_gemm, a, b, bias, out, act, plan))

    return supports, compile_only, prepare


# the family's device code lives in the base class (gemm_base.py) and the schedule files; its
# methods are named here because the schedules reach them through ``self`` (inheritance)
_GEMM_BASE = Source(src(C, "gemm_base.py"),
                    kernels=("GemmSm90.make_ring", "GemmSm90.copy_realign",
                             "GemmSm90.produce", "GemmSm90.mainloop", "GemmSm90.release",
                             "GemmSm90.epilogue_parts", "GemmSm90.epilogue", "raster"),
                    host=("GemmSm90.__call__", "GemmSm90._setup", "GemmSm90.__init__"))
# split-K's fix-up and the predicated tiled copies: bases of GemmSm90, each in the file of its id
_SPLITK = Source(src(C, "gemm_epilogue_splitk.py"), kernels=("SplitK.splitk_fixup", "split_range"))
_TILED = Source(src(C, "gemm_epilogue_tiled.py"),
                kernels=("TiledCopies.gmem_copy", "TiledCopies.copy_predicated", "TiledCopies.c_copy"))
_GEMM_EPI = Source(src(C, "epilogue.py"), kernels=("bias_act", "gelu_tanh"), host=("act_code",))
_GEMM_HOST = [Source(src(C, "gemm_launch.py"), kernels=(), host=("prepare_gemm", "compile_gemm", "workspace",
                                                                 "validate", "operand_widths")),
              Source(src(C, "dispatch.py"), kernels=(), host=("plan_gemm", "plan_search"))]
_WS = Source(src(C, "gemm_epilogue_ws.py"), kernels=("GemmWS.kernel",))
_PP = Source(src(C, "gemm_epilogue_pingpong.py"), kernels=("GemmPingpong.kernel", "GemmPingpong.step_over"))
# the default's: the schedules (with split-K's fix-up and the predicated copies) its planner
# chooses over the suites' cases, then the family's base, epilogue and launcher
_GEMM_SRC = planned(_dispatch.plan, "gemm_epilogue", [_GEMM_BASE, _GEMM_EPI, _GEMM_HOST[0]])

for _name, _variant, _desc, _srcs in (
        ("gemm_epilogue", None, "planned by waves and K: persistent warp-specialised sm_90a GEMM "
                                "(cooperative 128x256 or ping-pong 128x128 / 64xN), split-K when the tiles "
                                "do not fill the GPU; TMA for 16-byte rows, predicated copies otherwise",
         _GEMM_SRC),
        ("gemm_epilogue_ws", "ws", "persistent cooperative warp-specialised: TMA producer warpgroup, two "
                                   "wgmma warpgroups on 128-row tiles, 2x1 clusters multicasting B",
         [_WS, _GEMM_BASE, _SPLITK, _TILED, _GEMM_EPI, *_GEMM_HOST]),
        ("gemm_epilogue_pingpong", "pingpong", "persistent ping-pong: two consumer warpgroups on alternate "
                                               "tiles, one's epilogue under the other's wgmmas",
         [_PP, _GEMM_BASE, _SPLITK, _TILED, _GEMM_EPI, *_GEMM_HOST]),
        ("gemm_epilogue_splitk", "splitk", "split-K over the family's schedules: fp32 partials in a "
                                           "workspace, the last split of a tile sums them in split order",
         _GEMM_SRC),
        ("gemm_epilogue_tiled", "tiled", "no TMA: the producer warpgroup's predicated tiled copies for "
                                         "A and B, a predicated copy for C", _GEMM_SRC)):
    _sup, _co, _prep = _gemm_impl(_variant)
    register(problem="gemm_epilogue", layer="cute", name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=_available, supports=_sup, compile_only=_co)(_prep)

# a candidate (not yet run on a GPU): the default with dispatch.GEMM_NEXT's switches on
_sup, _co, _prep = _gemm_impl("next")
register(problem="gemm_epilogue", layer="cute", name="gemm_epilogue_next", candidate=True,
         description="candidate, not yet run on a GPU: the default with its pending switches on (A / B rows TMA "
                     "cannot read copied to 16-byte rows, then TMA loads)",
         sources=_GEMM_SRC + [Source(src(C, "gemm_stage.py"), kernels=("StageRows.kernel",),
                                     host=("stage_launch", "compile_stage", "staged"))],
         devices=("cuda",), available=_available, supports=_sup, compile_only=_co)(_prep)


def _gemm_simple_compile_only(case):
    _need()
    from cutlass_src import gemm_epilogue as ge

    return _facts(ge._compile(case.torch_dtype), {"tile": list(ge.TILE), "mma": "mma.sync m16n8k16"})


@register(problem="gemm_epilogue", layer="cute", name="gemm_epilogue_simple",
          description="teaching twin: 64x64 tiles, element-wise predicated copies to shared memory, "
                      "mma.sync tensor cores, fused bias + act, predicated store",
          sources=[Source(src(C, "gemm_epilogue.py"), kernels=("GemmSimple.kernel", "load_tile"),
                          host=("GemmSimple.__call__", "prepare_gemm_simple", "_compile")),
                   Source(src(C, "epilogue.py"), kernels=("bias_act", "gelu_tanh"), host=("act_code",))],
          devices=("cuda",), available=_available, compile_only=_gemm_simple_compile_only)
def gemm_simple_prepare(case, inputs, out):
    _need()
    from cutlass_src import gemm_epilogue as ge

    a, b, bias = inputs
    launch, comp = _wrap(ge.prepare_gemm_simple, a, b, bias, out, case.params.get("act", "relu"))
    return _prepared(launch, comp, {"tile": list(ge.TILE)})
