"""TileLang adapter (tilelang 0.1.15): registers the kernels of ``tilelang_src/`` with the harness.

Ids: ``tilelang:<problem>`` the default (``tilelang_src/dispatch.py`` plans in ``prepare``),
``tilelang:<problem>_simple`` the teaching twin (``tilelang_src/<problem>.py``), and the variants
``tilelang:<problem>_<algorithm>``. Kernels have dynamic sizes and strides, so one compile serves a
shape class; ``tilelang_src.compile_kernel`` keeps them in memory and TileLang's own kernel cache
keeps them on disk. ``compile_only(case)`` compiles the very kernel ``prepare`` would launch, for
sm_90a, with no GPU (TileLang compiles with nvcc), and reports ``ptxas -v`` facts; ``inspect``
writes the generated CUDA source and PTX.
"""
from __future__ import annotations

from harness import Source, planned, planned_sources, register
from tilelang_src import dispatch as _plans   # plain Python: the planner's reachable kernels
from harness.errors import Unsupported
from harness.registry import describe_layer
from kltools.loc_marks import compile_step

from . import src

C = "tilelang_src"
LAYER = "tilelang"
_SEEN: list = []        # Compiled entries of the last compile_only (for inspect)


def _available() -> str | None:
    try:
        import tilelang_src
    except Exception as e:  # pragma: no cover
        return f"tilelang_src failed to import: {type(e).__name__}: {e}"
    return tilelang_src.unavailable()


def _need():
    why = _available()
    if why:
        raise Unsupported(why)


def _esize(dtype: str) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]


@compile_step
def _compile(key, build, pass_configs=None):
    import tilelang_src

    entry = tilelang_src.compile_kernel(key, build, pass_configs)
    _SEEN.append(entry)
    return entry


def _facts(entries, plan: dict) -> dict:
    info = entries[0].facts()
    if len(entries) > 1:
        per = {}
        for e in entries:
            per.update(e.facts().get("kernels", {}))
        info["kernels"] = per
        info["compile_s"] = round(sum(e.compile_s for e in entries), 3)
    info["config"] = dict(plan)
    return info


def _launch(entries, plan, call):
    """The launch, with the facts a GPU row reports: compile seconds and the registers and stack
    of each kernel, read from the cubins TileLang built (no PTX compile of its own)."""
    launch = call
    info = entries[0].launch_facts()
    if len(entries) > 1:
        info["kernels"] = {f"{i}:{e.key[0][0]}": e.launch_facts() for i, e in enumerate(entries)}
        info["compile_s"] = round(sum(e.compile_s for e in entries), 3)
    info["config"] = dict(plan)
    launch.info = info
    return launch


def _check_cuda(*ts):
    for t in ts:
        if t is not None and t.device.type != "cuda":
            raise Unsupported("TileLang kernels run on CUDA tensors (no interpreter); compile_only works without a GPU")


# -- vector_add ---------------------------------------------------------------------------------
def _va_simple_compile(dtype: str):
    from tilelang_src import vector_add

    return _compile(("vector_add", dtype), lambda: vector_add.vector_add_kernel(dtype))


def _va_compile(dtype: str, plan: dict):
    from tilelang_src import vector_add_unmasked

    if plan["kernel"] == "simple":
        return _va_simple_compile(dtype)
    t, v, u = plan["threads"], plan["vec"], plan["unroll"]
    return _compile(("vector_add_unmasked", dtype, t, v, u),
                    lambda: vector_add_unmasked.vector_add_unmasked_kernel(dtype, t, v, u))


def _va_impl(kernel):
    def plan_of(n, es, aligned):
        from tilelang_src import dispatch

        if kernel == "simple":
            return {"kernel": "simple"}
        if kernel == "unmasked" and not aligned:
            raise ValueError("alignment: vector_add_unmasked needs 16-byte aligned pointers")
        return dispatch.plan_vector_add(n, es, aligned)

    def supports(case):
        if _available():
            return None
        if kernel == "unmasked" and int(case.params.get("misalign", 0)) * _esize(case.dtype) % 16:
            return "vector_add_unmasked needs 16-byte aligned pointers (misaligned views take the element kernel)"
        return None

    def compile_only(case):
        _need()
        es = _esize(case.dtype)
        plan = plan_of(case.N, es, int(case.params.get("misalign", 0)) * es % 16 == 0)
        return _facts([_va_compile(case.dtype, plan)], plan)

    def prepare(case, inputs, out):
        _need()
        x, y = inputs
        _check_cuda(x, y, out)
        if x.dtype != y.dtype or x.dtype != out.dtype or x.shape != y.shape or x.shape != out.shape:
            raise Unsupported("x, y, out: same shape and dtype")
        if any(t.dim() != 1 or t.stride(0) != 1 for t in (x, y, out)):
            raise Unsupported("x, y, out: contiguous 1-D tensors")
        aligned = all(t.data_ptr() % 16 == 0 for t in (x, y, out))
        try:
            plan = plan_of(x.numel(), x.element_size(), aligned)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        import tilelang_src

        entry = _va_compile(tilelang_src.dtype_name(x.dtype), plan)
        k = entry.kernel
        return _launch([entry], plan, lambda: k(x, y, out))

    return supports, compile_only, prepare


_VA_SIMPLE = Source(src(C, "vector_add.py"), kernels=("vector_add_kernel",))
_VA_UNMASKED = Source(src(C, "vector_add_unmasked.py"), kernels=("vector_add_unmasked_kernel",))
_VA_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_va_compile",))
_VA_SIMPLE_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_va_simple_compile",))
_VA_PLAN = Source(src(C, "dispatch.py"), kernels=(), host=("plan_vector_add",))
for _name, _kernel, _desc, _srcs in (
        ("vector_add", None, "full tiles in 16-byte vectors (4 per thread per operand), guarded last tile; "
                             "element accesses for misaligned views", planned(_plans.plan, "vector_add", [_VA_HOST])),
        ("vector_add_simple", "simple", "teaching twin: T.Parallel over 1024-element tiles, guarded element "
                                        "accesses", [_VA_SIMPLE, _VA_SIMPLE_HOST]),
        ("vector_add_unmasked", "unmasked", "full tiles unguarded (16-byte vectors), guarded last tile",
         [_VA_UNMASKED, _VA_HOST, _VA_PLAN])):
    _s, _c, _p = _va_impl(_kernel)
    register(problem="vector_add", layer=LAYER, name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=_available, supports=_s, compile_only=_c)(_p)


# -- softmax ------------------------------------------------------------------------------------
def _sm_simple_compile(dtype: str) -> list:
    from tilelang_src import softmax

    return [_compile(("softmax", dtype), lambda: softmax.softmax_kernel(dtype))]


# the flat kernels guard every access themselves (whole 16-byte groups, guarded row edges):
# TileLang's per-element bounds legalisation would split their vectors into element accesses
def _vector_cfg() -> dict:
    from tilelang.transform import PassConfigKey

    return {PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS.value: True}


def _sm_flat(x, out):
    """(flat X, flat Y, off, sx, aligned) for the flat kernels: 1-D views of x's and out's
    storage from the 16-byte boundary ``off`` elements at or below each one's first element, or
    None where one group map cannot serve both (different row strides or 16-byte phases, a
    storage not starting on 16 bytes, overlapping rows, indices past int32). ``aligned``: every
    row starts on 16 bytes."""
    import torch

    es = x.element_size()
    m, n = x.shape
    sx = x.stride(0) if m > 1 else n
    if (m > 1 and out.stride(0) != sx) or sx < n:
        return None
    if x.data_ptr() % es or out.data_ptr() % es or x.data_ptr() % 16 != out.data_ptr() % 16:
        return None
    off = x.data_ptr() % 16 // es
    total = off + (m - 1) * sx + n
    if off + (m + 8) * sx + n + 16 * 1024 >= 2 ** 31 or x.storage_offset() < off or out.storage_offset() < off:
        return None
    fx = torch.as_strided(x, (total,), (1,), x.storage_offset() - off)
    fy = torch.as_strided(out, (total,), (1,), out.storage_offset() - off)
    return fx, fy, off, sx, off == 0 and sx % (16 // es) == 0


def _sm_facts(x, out) -> dict:
    """The tensors' alignment facts the pending plans read (``dispatch.plan_softmax_next``)."""
    m, n = x.shape
    vec = 16 // x.element_size()
    flat = _sm_flat(x, out)
    strides = m == 1 or (x.stride(0) % vec == 0 and out.stride(0) % vec == 0)
    aligned = n % vec == 0 and strides and x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
    return {"aligned": aligned, "flat": flat is not None, "edges": not (flat and flat[4] and n % vec == 0)}


def _sm_compile(dtype: str, plan: dict) -> list:
    """Today's plans' compiled kernels (element accesses), in launch order."""
    from tilelang_src import softmax_online, softmax_rows, softmax_smem, softmax_split

    if plan["kernel"] == "rows":
        c, r, t = plan["cols"], plan["rows"], plan["threads"]
        return [_compile(("softmax_rows_element", dtype, c, r, t),
                         lambda: softmax_rows.softmax_rows_element_kernel(dtype, c, r, t))]
    tile, t = plan["tile"], plan["threads"]
    if plan["kernel"] == "smem":
        c = plan["cols"]
        return [_compile(("softmax_smem_element", dtype, c, tile, t),
                         lambda: softmax_smem.softmax_smem_element_kernel(dtype, c, tile, t))]
    if plan["kernel"] == "split":
        return [_compile(("softmax_split_element_stats", dtype, tile, t),
                         lambda: softmax_split.softmax_split_element_stats_kernel(dtype, tile, t)),
                _compile(("softmax_split_element_write", dtype, tile, t),
                         lambda: softmax_split.softmax_split_element_write_kernel(dtype, tile, t))]
    return [_compile(("softmax_online", dtype, tile, t), lambda: softmax_online.softmax_online_kernel(dtype, tile, t))]


def _sm_online_vec_compile(dtype: str, plan: dict) -> list:
    from tilelang_src import softmax_online

    tile, t, v = plan["tile"], plan["threads"], plan["vec"]
    return [_compile(("softmax_online_vec", dtype, tile, t, v),
                     lambda: softmax_online.softmax_online_vec_kernel(dtype, tile, t, v), _vector_cfg())]


def _sm_rows_compile(dtype: str, plan: dict) -> list:
    from tilelang_src import softmax_rows

    cfg = (plan["cols"], plan["rows"], plan["threads"], plan["tpr"], plan["aligned"])
    return [_compile(("softmax_rows", dtype) + cfg, lambda: softmax_rows.softmax_rows_kernel(dtype, *cfg))]


def _sm_smem_compile(dtype: str, plan: dict) -> list:
    from tilelang_src import softmax_smem

    cfg = (plan["cols"], plan["threads"], plan["cluster"], plan["edges"])
    return [_compile(("softmax_smem", dtype) + cfg, lambda: softmax_smem.softmax_smem_kernel(dtype, *cfg),
                     _vector_cfg())]


def _sm_split_compile(dtype: str, plan: dict) -> list:
    from tilelang_src import softmax_split

    cfg = (plan["threads"], plan["units"], plan["edges"])
    return [_compile(("softmax_split_stats", dtype) + cfg,
                     lambda: softmax_split.softmax_split_stats_kernel(dtype, *cfg), _vector_cfg()),
            _compile(("softmax_split_write", dtype) + cfg,
                     lambda: softmax_split.softmax_split_write_kernel(dtype, *cfg), _vector_cfg())]


def _sm_next_compile(dtype: str, plan: dict) -> list:
    """The pending plans' compiled kernels, in launch order: one compile per (kernel, class)."""
    build = {"rows": _sm_rows_compile, "smem": _sm_smem_compile, "split": _sm_split_compile}.get(plan["kernel"])
    return build(dtype, plan) if build else _sm_simple_compile(dtype)


def _sm_next_launch(entries, plan, x, out):
    """The zero-argument launch of a pending plan: flat views and the (max, sum) workspace of the
    smem cluster and split kernels are made here, outside the timed call."""
    import torch

    k = entries[0].kernel
    if plan["kernel"] in ("rows", "simple"):
        return lambda: k(x, out)
    fx, fy, off, sx, _ = _sm_flat(x, out)
    m, n = x.shape
    per_row = plan["cluster"] if plan["kernel"] == "smem" else plan["chunks"]
    work = torch.empty((m, per_row, 2), dtype=torch.float32, device=x.device)
    if plan["kernel"] == "smem":
        return lambda: k(fx, fy, work, m, n, sx, off)
    k2 = entries[1].kernel

    def launch():
        k(fx, work, m, n, sx, off)
        k2(fx, work, fy, m, n, sx, off)
    return launch


def _sm_today_launch(entries, plan, x, out):
    import torch

    k = entries[0].kernel
    if plan["kernel"] != "split":
        return lambda: k(x, out)
    work = torch.empty((x.shape[0], plan["chunks"], 2), dtype=torch.float32, device=x.device)
    k2 = entries[1].kernel

    def launch():
        k(x, work)
        k2(x, work, out)
    return launch


def _sm_case_facts(case) -> dict:
    """The alignment facts of the harness's tensors for ``case`` (compile_only has no tensors):
    x as the problem lays it out (``row_pad``, ``start_offset``) from a 16-byte-aligned storage,
    out contiguous and 16-byte aligned (the guarded output keeps the allocation's alignment)."""
    from harness.problems.softmax import row_pad, start_offset

    vec = 16 // _esize(case.dtype)
    layout = case.params.get("layout", "contiguous")
    sx, off = case.N + row_pad(layout, case.N), start_offset(layout)
    flat = off == 0 and (case.M == 1 or sx == case.N)
    strides = case.M == 1 or (sx % vec == 0 and case.N % vec == 0)
    return {"aligned": off == 0 and case.N % vec == 0 and strides, "flat": flat,
            "edges": not (flat and case.N % vec == 0)}


def _sm_impl(kernel, nxt):
    """``kernel`` forces a plan's kernel (None: the planner's choice); ``nxt``: the pending plans
    (None: as the switch says, for the default)."""
    def use_next():
        """The pending plans: where the switch says, for the default only on Hopper (their smem
        slices are cluster kernels, sm_90 only: elsewhere the default keeps today's plans)."""
        import tilelang_src
        from tilelang_src import dispatch

        if nxt is not None:
            return nxt
        return dispatch.SWITCHES["softmax_next"] and tilelang_src.arch().startswith("sm_90")

    def plan_of(m, n, es, facts):
        from tilelang_src import dispatch

        if kernel == "simple":
            return {"kernel": "simple"}
        if kernel == "online":
            return dispatch.plan_softmax(m, n, es, kernel="online", vector=facts["flat"])
        if use_next():
            return dispatch.plan_softmax_next(m, n, es, kernel=kernel, **facts)
        return dispatch.plan_softmax(m, n, es, kernel=kernel)

    def compiled(dt, plan):
        if plan["kernel"] == "online" and "vec" in plan:
            return _sm_online_vec_compile(dt, plan)
        if kernel == "simple":
            return _sm_simple_compile(dt)
        if not use_next():
            return _sm_compile(dt, plan)
        own = {"rows": _sm_rows_compile, "smem": _sm_smem_compile, "split": _sm_split_compile}
        return own[kernel](dt, plan) if kernel in own else _sm_next_compile(dt, plan)

    def supports(case):
        if _available():
            return None
        try:
            plan_of(case.M, case.N, _esize(case.dtype), _sm_case_facts(case))
        except ValueError as e:
            return str(e)
        return None

    def compile_only(case):
        _need()
        try:
            plan = plan_of(case.M, case.N, _esize(case.dtype), _sm_case_facts(case))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        return _facts(compiled(case.dtype, plan), plan)

    def prepare(case, inputs, out):
        _need()
        (x,) = inputs
        _check_cuda(x, out)
        if x.dim() != 2 or out.shape != x.shape or out.dtype != x.dtype:
            raise Unsupported("x, out: 2-D, same shape and dtype")
        if x.stride(1) != 1 or out.stride(1) != 1:
            raise Unsupported("x, out: unit column stride")
        try:
            plan = plan_of(x.shape[0], x.shape[1], x.element_size(), _sm_facts(x, out))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        import tilelang_src

        entries = compiled(tilelang_src.dtype_name(x.dtype), plan)
        if plan["kernel"] == "online" and "vec" in plan:
            fx, fy, off, sx, _ = _sm_flat(x, out)
            k, (m, n) = entries[0].kernel, x.shape
            return _launch(entries, plan, lambda: k(fx, fy, n, sx, off, m))
        if kernel == "simple" or use_next():
            return _launch(entries, plan, _sm_next_launch(entries, plan, x, out))
        return _launch(entries, plan, _sm_today_launch(entries, plan, x, out))

    return supports, compile_only, prepare


_SM_SIMPLE = Source(src(C, "softmax.py"), kernels=("softmax_kernel",))
_SM_SIMPLE_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_sm_simple_compile",))
# today's default: the element kernels
_SM_TODAY = {"rows": Source(src(C, "softmax_rows.py"), kernels=("softmax_rows_element_kernel",)),
             "smem": Source(src(C, "softmax_smem.py"), kernels=("softmax_smem_element_kernel",)),
             "online": Source(src(C, "softmax_online.py"), kernels=("softmax_online_kernel",)),
             "split": Source(src(C, "softmax_split.py"), kernels=("softmax_split_element_stats_kernel",
                                                                   "softmax_split_element_write_kernel"))}
_SM_TODAY_COMMON = [Source("backends/tilelang_layer.py", kernels=(), host=("_sm_compile", "_sm_today_launch")),
                    Source(src(C, "dispatch.py"), kernels=(), host=("plan_softmax", "_pow2_at_least"))]
# the plans of SWITCHES["softmax_next"] (the default's since 2026-12-06): 16-byte kernels by alignment class
_SM_GROUPS = Source(src(C, "row_groups.py"), kernels=("bounds", "edge_index", "edge_max", "edge_sum", "edge_write",
                                                      "vector_layout"))
_SM_NEXT = {"rows": [Source(src(C, "softmax_rows.py"), kernels=("softmax_rows_kernel", "row_layout")),
                     Source("backends/tilelang_layer.py", kernels=(), host=("_sm_rows_compile",))],
            "smem": [Source(src(C, "softmax_smem.py"), kernels=("softmax_smem_kernel",)), _SM_GROUPS,
                     Source("backends/tilelang_layer.py", kernels=(), host=("_sm_smem_compile",))],
            "split": [Source(src(C, "softmax_split.py"), kernels=("softmax_split_stats_kernel", "softmax_split_write_kernel",
                                                                  "thread_rows", "tile_offset", "chunk")), _SM_GROUPS,
                      Source("backends/tilelang_layer.py", kernels=(), host=("_sm_split_compile",))],
            "simple": [_SM_SIMPLE, _SM_SIMPLE_HOST]}
_SM_NEXT_COMMON = [Source("backends/tilelang_layer.py", kernels=(),
                          host=("_sm_next_launch", "_sm_flat", "_sm_facts", "_vector_cfg")),
                   Source(src(C, "dispatch.py"), kernels=(),
                          host=("plan_softmax_next", "_plan_rows", "_plan_smem", "_pow2_at_least"))]


def _planned(problem: str, common: list):
    """A default's Sources, derived from its planner (``harness.planned``: the kernels
    ``dispatch.plan`` chooses, today's or under the switch the pending plans'), with ``common``
    but the planner's own Sources (its lines are what it ran)."""
    return planned(_plans.plan, problem, [s for s in common if s.path != src(C, "dispatch.py")])


def _sm_sources(word: str | None, nxt: bool) -> list:
    """A softmax id's Sources: the planner's reachable kernels (``word`` None) or one variant's,
    with the host and planner code of today's or the pending plans."""
    table, common = (_SM_NEXT, _SM_NEXT_COMMON) if nxt else (_SM_TODAY, _SM_TODAY_COMMON)
    if word is None:
        planner = [Source("backends/tilelang_layer.py", kernels=(), host=("_sm_next_compile",))] if nxt else []
        return planned_sources(table, _plans.reachable("softmax", nxt), common + planner)
    srcs = table[word]
    return (list(srcs) if isinstance(srcs, list) else [srcs]) + common


_SM_ONLINE_SRCS = [Source(src(C, "softmax_online.py"), kernels=("softmax_online_vec_kernel",)),
                   Source("backends/tilelang_layer.py", kernels=(), host=("_sm_online_vec_compile", "_sm_flat",
                                                                          "_vector_cfg")),
                   Source(src(C, "dispatch.py"), kernels=(), host=("plan_softmax", "_pow2_at_least"))]
_SM_DEFAULT = {
    False: "planned by row length: whole rows in registers (several short rows per CTA) up to 16384 columns; "
           "longer rows: split when they cover less than half the SMs, else the row staged in shared memory "
           "(<= 220 KB) or online (two reads); element accesses",
    True: "planned by row length and alignment: whole rows in registers (a warp a short row, 16-byte accesses "
          "where N and the strides allow) up to 16384 columns; longer rows staged in shared memory over a "
          "cluster of up to 8 CTAs, or split over CTAs when few; 16-byte groups with guarded row edges"}
for _name, _kernel, _nxt, _desc, _srcs, _cand in (
        ("softmax", None, None, _SM_DEFAULT[_plans.SWITCHES["softmax_next"]],
         _planned("softmax", _SM_NEXT_COMMON + [Source("backends/tilelang_layer.py", kernels=(),
                                                       host=("_sm_next_compile",))]
                  if _plans.SWITCHES["softmax_next"] else _SM_TODAY_COMMON),
         False),
        ("softmax_simple", "simple", None, "teaching twin: a CTA per row, online (max, sum) over 1024-column "
                                           "tiles, then a write pass", [_SM_SIMPLE, _SM_SIMPLE_HOST], False),
        ("softmax_rows", "rows", True, "whole rows in registers, a warp a row for rows of <= 32 16-byte groups "
                                       "(several rows a CTA), 16-byte accesses where N and the strides allow "
                                       "(T.assume), element accesses elsewhere",
         _sm_sources("rows", True), False),
        ("softmax_smem", "smem", True, "the row's 16-byte groups staged in shared memory over a cluster of up to "
                                       "8 CTAs ((max, sum) exchanged at the cluster barrier), guarded row "
                                       "edges; one read, one write", _sm_sources("smem", True), False),
        ("softmax_split", "split", True, "C CTAs per row: (max, sum) per chunk of 16-byte groups to a workspace "
                                         "(thread-local running pairs), then each CTA merges its row's C pairs "
                                         "and writes its chunk", _sm_sources("split", True), False),
        ("softmax_online", "online", False, "a CTA per row: online (max, sum) over column tiles, second read to "
                                           "write, in 16-byte vectors with guarded row edges; the element kernel "
                                           "where x and out differ in stride or 16-byte phase", _SM_ONLINE_SRCS,
         False)):
    _s, _c, _p = _sm_impl(_kernel, _nxt)
    register(problem="softmax", layer=LAYER, name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=_available, supports=_s, compile_only=_c, candidate=_cand)(_p)


# -- gemm_epilogue ------------------------------------------------------------------------------
def _gemm_simple_compile(dtype: str, has_bias: bool) -> list:
    from tilelang_src import gemm_epilogue

    return [_compile(("gemm_epilogue", dtype, has_bias), lambda: gemm_epilogue.gemm_kernel(dtype, has_bias))]


def _gemm_compile(dtype: str, has_bias: bool, plan: dict) -> list:
    """Today's plans' compiled kernels, in launch order."""
    from tilelang_src import gemm_epilogue_splitk, gemm_epilogue_tma

    cfg = (plan["bm"], plan["bn"], plan["bk"], plan["stages"], plan["threads"])
    if plan["kernel"] == "splitk":
        return [_compile(("gemm_splitk_partial", dtype, cfg),
                         lambda: gemm_epilogue_splitk.gemm_splitk_partial_kernel(dtype, *cfg)),
                _compile(("gemm_splitk_epilogue", dtype, has_bias),
                         lambda: gemm_epilogue_splitk.gemm_splitk_epilogue_kernel(dtype, has_bias))]
    tma = plan["kernel"] == "tma"
    return [_compile(("gemm_epilogue_tma", dtype, has_bias, cfg, tma),
                     lambda: gemm_epilogue_tma.gemm_tma_kernel(dtype, has_bias, *cfg, tma=tma))]


def _gemm_staged_compile(dtype: str, plan: dict) -> list:
    from tilelang_src import gemm_epilogue_tma

    cfg = (plan["bm"], plan["bn"], plan["bk"], plan["stages"], plan["threads"], plan["aligned_n"])
    return [_compile(("gemm_epilogue_staged", dtype) + cfg, lambda: gemm_epilogue_tma.gemm_tma_staged_kernel(dtype, *cfg))]


def _gemm_splitk_next_compile(dtype: str, plan: dict) -> list:
    from tilelang_src import gemm_epilogue_splitk

    cfg = (plan["bm"], plan["bn"], plan["bk"], plan["stages"], plan["threads"])
    return [_compile(("gemm_splitk_partial", dtype, cfg), lambda: gemm_epilogue_splitk.gemm_splitk_partial_kernel(dtype, *cfg)),
            _compile(("gemm_splitk_sum", dtype), lambda: gemm_epilogue_splitk.gemm_splitk_sum_kernel(dtype))]


def _gemm_stage_compile(dtype: str, plan: dict) -> list:
    from tilelang_src import gemm_epilogue_tma

    return [_compile(("gemm_stage_rows", dtype), lambda: gemm_epilogue_tma.stage_rows_kernel(dtype))] \
        if plan["stage"] else []


def _gemm_next_compile(dtype: str, plan: dict) -> list:
    """The pending plans' compiled kernels: the main kernel(s), then the staging kernel where an
    operand is staged. Bias and activation are run-time values: one compile per (dtype, tile,
    C's alignment class)."""
    main = _gemm_splitk_next_compile if plan["kernel"] == "splitk" else _gemm_staged_compile
    return main(dtype, plan) + _gemm_stage_compile(dtype, plan)


def _gemm_next_launch(entries, plan, a, b, bias, out, code):
    """The zero-argument launch of a pending plan; the staged copies, the split-K planes and a
    missing bias's one-element stand-in are allocated here, outside the timed call."""
    import torch

    (m, k), n = a.shape, b.shape[1]
    vec = 16 // a.element_size()
    kp, np_ = -(-k // vec) * vec, -(-n // vec) * vec
    copies = []
    if "a" in plan["stage"]:
        copies.append((a, torch.empty((m, kp), dtype=a.dtype, device=a.device)))
        a = copies[-1][1]
    if "b" in plan["stage"]:
        copies.append((b, torch.empty((kp, np_), dtype=b.dtype, device=b.device)))
        b = copies[-1][1]
    stage = entries[-1].kernel if copies else None
    tail = (bias if bias is not None else torch.zeros(1, dtype=out.dtype, device=out.device), out,
            int(bias is not None), code)
    k1 = entries[0].kernel
    if plan["kernel"] == "splitk":
        work = torch.empty((plan["splits"], m, b.shape[1]), dtype=torch.float32, device=a.device)
        k2 = entries[1].kernel

        def main():
            k1(a, b, work)
            k2(work, *tail)
    else:
        def main():
            k1(a, b, *tail)

    def launch():
        for src_t, dst_t in copies:
            stage(src_t, dst_t)
        main()
    return launch


def _gemm_stage_pair_compile(dtype: str, plan: dict) -> list:
    """``_gemm_next_compile`` for a plan whose A and B are staged by one kernel
    (``stage_pair``, ``dispatch.plan_gemm_small``): the main kernel(s), then
    ``stage_pair_kernel``."""
    from tilelang_src import gemm_epilogue_tma

    main = _gemm_splitk_next_compile if plan["kernel"] == "splitk" else _gemm_staged_compile
    return main(dtype, plan) + [_compile(("gemm_stage_pair", dtype), lambda: gemm_epilogue_tma.stage_pair_kernel(dtype))]


def _gemm_stage_pair_launch(entries, plan, a, b, bias, out, code):
    """``_gemm_next_launch`` for a plan whose A and B are staged by one kernel (``stage_pair``,
    ``dispatch.plan_gemm_small``): both copies allocated here and filled by one launch of the pair
    kernel (the last entry), then ``_gemm_next_launch``'s GEMM on the copies (the plan without
    copies of its own)."""
    import torch

    (m, k), n = a.shape, b.shape[1]
    vec = 16 // a.element_size()
    kp, np_ = -(-k // vec) * vec, -(-n // vec) * vec
    pairs = [a, torch.empty((m, kp), dtype=a.dtype, device=a.device),
             b, torch.empty((kp, np_), dtype=b.dtype, device=b.device)]
    stage, gemm = entries[-1].kernel, _gemm_next_launch(entries, {**plan, "stage": ()}, pairs[1], pairs[3], bias, out, code)

    def launch():
        stage(*pairs)
        gemm()
    return launch


def _gemm_today_launch(entries, plan, a, b, bias, out, code):
    import torch

    k = entries[0].kernel
    tail = ((out,) if bias is None else (bias, out)) + (code,)
    if plan["kernel"] != "splitk":
        return lambda: k(a, b, *tail)
    work = torch.empty((plan["splits"], a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)
    k2 = entries[1].kernel

    def launch():
        k(a, b, work)
        k2(work, *tail)
    return launch


def _gemm_arch_check():
    """The pipelined GEMM kernels are Hopper kernels (TMA, wgmma, setmaxnreg: sm_90a); TileLang
    0.1.15 does not lower them for other architectures (sm_80: the pipelined loop over a dynamic K
    fails in codegen; sm_100: nvcc rejects the generated source), so they decline there."""
    import tilelang_src

    a = tilelang_src.arch()
    if not a.startswith("sm_90"):
        raise ValueError(f"arch: TileLang's pipelined GEMM kernels here are Hopper kernels (TMA + wgmma, sm_90a), "
                         f"not {a}")


def _gemm_facts(a, b, out) -> dict:
    """The alignment facts the plans read: 16-byte rows and bases (TMA's rule)."""
    vec = 16 // a.element_size()
    (m, k), n = a.shape, b.shape[1]
    bases = [t.data_ptr() % 16 == 0 for t in (a, b, out)]
    return {"tma_ok": n % vec == 0 and k % vec == 0 and all(bases), "aligned_n": n % vec == 0 and bases[2],
            "misaligned": tuple(p for p, ok in zip("ab", bases) if not ok)}


def _gemm_impl(kernel, nxt):
    """``kernel`` forces a plan's kernel (None: the planner's); ``nxt``: the pending plans (None:
    as the switch says)."""
    def use_next():
        from tilelang_src import dispatch

        return dispatch.SWITCHES["gemm_next"] if nxt is None else nxt

    def plan_of(m, n, k, es, facts):
        from tilelang_src import dispatch

        if kernel == "simple":
            return {"kernel": "simple"}
        _gemm_arch_check()
        if use_next() and kernel is None:   # the default: staged or today's plan, by class
            return dispatch.plan_gemm_small(m, n, k, es, facts["tma_ok"], facts["aligned_n"],
                                            misaligned=facts["misaligned"])
        if use_next():
            return dispatch.plan_gemm_next(m, n, k, es, facts["aligned_n"], kernel=kernel,
                                           misaligned=facts["misaligned"])
        return dispatch.plan_gemm(m, n, k, es, facts["tma_ok"], kernel=kernel)

    def case_facts(case):
        return {"tma_ok": case.N % 8 == 0 and case.K % 8 == 0, "aligned_n": case.N % 8 == 0, "misaligned": ()}

    def compiled(dt, has_bias, plan):
        if kernel == "simple":
            return _gemm_simple_compile(dt, has_bias)
        if "stage" not in plan:   # today's plans (a pending plan carries its staged operands, maybe none)
            return _gemm_compile(dt, has_bias, plan)
        if plan.get("stage_pair"):   # A and B staged by one kernel (plan_gemm_small)
            return _gemm_stage_pair_compile(dt, plan)
        if kernel == "tma":
            return _gemm_staged_compile(dt, plan) + _gemm_stage_compile(dt, plan)
        return _gemm_next_compile(dt, plan)

    def supports(case):
        if _available():
            return None
        try:
            plan_of(case.M, case.N, case.K, 2, case_facts(case))
        except ValueError as e:
            return str(e)
        return None

    def compile_only(case):
        _need()
        try:
            plan = plan_of(case.M, case.N, case.K, 2, case_facts(case))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        return _facts(compiled(case.dtype, bool(int(case.params.get("bias", 1))), plan), plan)

    def prepare(case, inputs, out):
        _need()
        a, b, bias = inputs
        _check_cuda(a, b, bias, out)
        from tilelang_src.epilogue import act_code

        try:
            code = act_code(case.params.get("act", "relu"))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or tuple(out.shape) != (a.shape[0], b.shape[1]):
            raise Unsupported("a, b, out: a [M, K], b [K, N], out [M, N]")
        if not (a.is_contiguous() and b.is_contiguous() and out.is_contiguous()) or \
                (bias is not None and not bias.is_contiguous()):
            raise Unsupported("a, b, bias, out: contiguous row-major tensors")
        if len({t.dtype for t in (a, b, out, bias) if t is not None}) != 1:
            raise Unsupported("a, b, bias, out: one dtype")
        try:
            plan = plan_of(a.shape[0], b.shape[1], a.shape[1], a.element_size(), _gemm_facts(a, b, out))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        import tilelang_src

        entries = compiled(tilelang_src.dtype_name(a.dtype), bias is not None, plan)
        if kernel != "simple" and plan.get("stage_pair"):
            return _launch(entries, plan, _gemm_stage_pair_launch(entries, plan, a, b, bias, out, code))
        if kernel != "simple" and "stage" in plan:
            return _launch(entries, plan, _gemm_next_launch(entries, plan, a, b, bias, out, code))
        return _launch(entries, plan, _gemm_today_launch(entries, plan, a, b, bias, out, code))

    return supports, compile_only, prepare


_GE_EPI = Source(src(C, "epilogue.py"), kernels=("act", "bias_act"))
_GE_ACT = Source(src(C, "epilogue.py"), kernels=("act",))
_GE_SIMPLE = Source(src(C, "gemm_epilogue.py"), kernels=("gemm_kernel",))
_GE_SIMPLE_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_gemm_simple_compile",))
_GE_TODAY = {"tma": Source(src(C, "gemm_epilogue_tma.py"), kernels=("gemm_tma_kernel",)),
             "tiled": [Source(src(C, "gemm_epilogue_tiled.py"), kernels=("load_tiles_guarded",)),
                       Source(src(C, "gemm_epilogue_tma.py"), kernels=("gemm_tma_kernel",))],
             "splitk": Source(src(C, "gemm_epilogue_splitk.py"),
                              kernels=("gemm_splitk_partial_kernel", "gemm_splitk_epilogue_kernel"))}
_GE_TODAY_COMMON = [_GE_EPI, Source("backends/tilelang_layer.py", kernels=(),
                                    host=("_gemm_compile", "_gemm_today_launch", "_gemm_arch_check", "_gemm_facts")),
                    Source(src(C, "dispatch.py"), kernels=(), host=("plan_gemm",))]
_GE_STAGE = Source(src(C, "gemm_epilogue_tma.py"), kernels=("stage_rows_kernel",))
_GE_NEXT = {"tma": [Source(src(C, "gemm_epilogue_tma.py"), kernels=("gemm_tma_staged_kernel",)), _GE_STAGE,
                    Source("backends/tilelang_layer.py", kernels=(), host=("_gemm_staged_compile", "_gemm_stage_compile"))],
            "splitk": [Source(src(C, "gemm_epilogue_splitk.py"),
                              kernels=("gemm_splitk_partial_kernel", "gemm_splitk_sum_kernel")), _GE_STAGE,
                       Source("backends/tilelang_layer.py", kernels=(),
                              host=("_gemm_splitk_next_compile", "_gemm_stage_compile"))]}
_GE_NEXT_COMMON = [_GE_ACT, Source("backends/tilelang_layer.py", kernels=(),
                                   host=("_gemm_next_launch", "_gemm_arch_check", "_gemm_facts")),
                   Source(src(C, "dispatch.py"), kernels=(), host=("plan_gemm_next", "_tile_by_waves", "_tile_cost"))]
#: the binding of a plan whose A and B are staged by one kernel (``stage_pair``: the default's
#: plan_gemm_small; its kernels come with the plans' Sources, dispatch.STAGE)
_GE_PAIR = [Source("backends/tilelang_layer.py", kernels=(),
                   host=("_gemm_stage_pair_compile", "_gemm_stage_pair_launch"))]


def _ge_sources(word: str | None, nxt: bool) -> list:
    """A GEMM id's Sources: the planner's reachable kernels (``word`` None) or one variant's, with
    the host and planner code of today's or the pending plans."""
    table, common = (_GE_NEXT, _GE_NEXT_COMMON) if nxt else (_GE_TODAY, _GE_TODAY_COMMON)
    if word is None:
        planner = [Source("backends/tilelang_layer.py", kernels=(), host=("_gemm_next_compile",))] if nxt else []
        return planned_sources(table, _plans.reachable("gemm_epilogue", nxt), common + planner)
    srcs = table[word]
    return (list(srcs) if isinstance(srcs, list) else [srcs]) + common


_GE_DEFAULT = {
    False: "T.Pipelined TMA + wgmma (128x256 or 128x128 tiles; 64-row tiles for M <= 64), swizzled shared "
           "layouts, rastered CTAs, bias + act on the accumulator fragment; split-K when the tiles leave half "
           "the SMs idle; guarded element loads where N or K is not a multiple of 8",
    True: "T.Pipelined TMA + wgmma, bias staged in shared memory, the tile stored through shared memory (TMA "
          "store where C's rows are 16-byte multiples); operands whose rows are not 16-byte multiples copied "
          "to padded ones (TMA for every load; A and B in one launch) unless B would be read once (one row "
          "tile: guarded element loads); 64- or 128-row by 256- or 128-column tiles by waves; split-K (fp32 "
          "partials, a second kernel sums them in order) when the tiles leave half the SMs idle and the split "
          "models faster; no more pipeline stages than K tiles"}
for _name, _kernel, _nxt, _desc, _srcs, _cand in (
        ("gemm_epilogue", None, None, _GE_DEFAULT[_plans.SWITCHES["gemm_next"]],
         _planned("gemm_epilogue", _GE_NEXT_COMMON + _GE_TODAY_COMMON
                  + [Source("backends/tilelang_layer.py", kernels=(), host=("_gemm_next_compile",))] + _GE_PAIR
                  if _plans.SWITCHES["gemm_next"] else _GE_TODAY_COMMON),
         False),
        ("gemm_epilogue_simple", "simple", None, "teaching twin: 128x128x32 tiles, T.copy to shared, T.gemm, bias "
                                                 "+ act on the accumulator fragment, no pipelining hints",
         [_GE_SIMPLE, _GE_EPI, _GE_SIMPLE_HOST], False),
        ("gemm_epilogue_tma", "tma", True, "T.Pipelined TMA + wgmma only, bias and C staged in shared memory "
                                           "(TMA store where C's rows allow), operands whose rows are not "
                                           "16-byte multiples staged first", _ge_sources("tma", True),
         False),
        ("gemm_epilogue_tiled", "tiled", False, "the pipeline with guarded element loads instead of TMA",
         _ge_sources("tiled", False), False),
        ("gemm_epilogue_splitk", "splitk", False, "split-K (>= 2 splits): pipelined TMA + wgmma partials in fp32 "
                                                  "planes, a second kernel sums them in order and applies bias "
                                                  "+ act", _ge_sources("splitk", False), False)):

    _s, _c, _p = _gemm_impl(_kernel, _nxt)
    register(problem="gemm_epilogue", layer=LAYER, name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=_available, supports=_s, compile_only=_c, candidate=_cand)(_p)


# -- inspect ------------------------------------------------------------------------------------
def tilelang_artifacts(impl, case, art) -> None:
    import json

    why = impl.available()
    if why:
        raise ValueError(f"inspect: {impl.id} is not available here: {why}")
    _SEEN.clear()
    facts = impl.compile_only_fn(case)
    art.source = "compile_only(case): the CUDA source TileLang generated and its PTX (nvcc)"
    for i, e in enumerate(_SEEN):
        name = f"{impl.layer}_{impl.name}" + (f"_{i}" if len(_SEEN) > 1 else "")
        art.write(f"{name}.cu", e.source())
        try:
            art.write(f"{name}.ptx", e.kernel._get_ptx())
        except Exception as ex:
            art.notes.append(f"no PTX: {type(ex).__name__}: {ex}")
    art.write("compile_facts.json", json.dumps(facts, indent=2, default=str))


describe_layer(LAYER, order=6, colour="#e377c2", artifacts=tilelang_artifacts)
