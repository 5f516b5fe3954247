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

from harness import Source, planned, register
from tilelang_src import dispatch as _plans   # plain Python: the defaults' planner (harness.planned)
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
    launch = call
    launch.info = _facts(entries, plan)
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


# the vector kernels guard every access themselves (whole 16-byte groups, guarded row edges):
# TileLang's per-element bounds legalisation would split their vectors into element accesses
def _vector_cfg() -> dict:
    from tilelang.transform import PassConfigKey

    return {PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS.value: True}


def _sm_flat(x, out):
    """(flat X, flat Y, off, sx, aligned) for the vector kernels: 1-D views of x's and out's
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


def _sm_compile(dtype: str, plan: dict) -> list:
    """The compiled kernels of a plan, in launch order."""
    from tilelang_src import softmax_online, softmax_rows, softmax_smem, softmax_split

    if plan["kernel"] == "rows" and "vec" in plan:
        c, r, t, v = plan["cols"], plan["rows"], plan["threads"], plan["vec"]
        return [_compile(("softmax_rows_vec", dtype, c, r, t, v),
                         lambda: softmax_rows.softmax_rows_vec_kernel(dtype, c, r, t, v), _vector_cfg())]
    if plan["kernel"] == "rows":
        c, r, t = plan["cols"], plan["rows"], plan["threads"]
        return [_compile(("softmax_rows", dtype, c, r, t), lambda: softmax_rows.softmax_rows_kernel(dtype, c, r, t))]
    tile, t = plan["tile"], plan["threads"]
    if plan["kernel"] == "online" and "vec" in plan:
        v = plan["vec"]
        return [_compile(("softmax_online_vec", dtype, tile, t, v),
                         lambda: softmax_online.softmax_online_vec_kernel(dtype, tile, t, v), _vector_cfg())]
    if plan["kernel"] == "smem" and "vec" in plan:
        c, v = plan["cols"], plan["vec"]
        return [_compile(("softmax_smem_vec", dtype, c, tile, t, v),
                         lambda: softmax_smem.softmax_smem_vec_kernel(dtype, c, tile, t, v), _vector_cfg())]
    if plan["kernel"] == "smem":
        c = plan["cols"]
        return [_compile(("softmax_smem", dtype, c, tile, t), lambda: softmax_smem.softmax_smem_kernel(dtype, c, tile, t))]
    if plan["kernel"] == "split":
        return [_compile(("softmax_split_stats", dtype, tile, t),
                         lambda: softmax_split.softmax_split_stats_kernel(dtype, tile, t)),
                _compile(("softmax_split_write", dtype, tile, t),
                         lambda: softmax_split.softmax_split_write_kernel(dtype, tile, t))]
    return [_compile(("softmax_online", dtype, tile, t), lambda: softmax_online.softmax_online_kernel(dtype, tile, t))]


def _sm_impl(kernel):
    vector = kernel in ("rows", "smem", "online")    # the variants' vector kernels (not yet run on a GPU)

    def plan_of(m, n, es, flat_ok=False, aligned=False):
        """The vector plan where the views allow it, else the element plan of the same kernel."""
        from tilelang_src import dispatch

        if vector and flat_ok:
            try:
                return dispatch.plan_softmax(m, n, es, kernel=kernel, vector=True, aligned=aligned)
            except ValueError:
                pass
        return dispatch.plan_softmax(m, n, es, kernel=kernel)

    def case_flat(case):
        """(flat_ok, aligned) of the harness's tensors for ``case``: contiguous rows, x and out
        alike (a case with a misalignment or a row stride of its own takes the element plan's
        compile here; prepare decides from the tensors themselves)."""
        es = _esize(case.dtype)
        plain = not int(case.params.get("misalign", 0)) and case.params.get("layout", "contiguous") in (
            "contiguous", "contig")
        return plain, plain and case.N % (16 // es) == 0

    def supports(case):
        if _available():
            return None
        try:
            plan_of(case.M, case.N, _esize(case.dtype))
        except ValueError as e:
            return str(e)
        return None

    def compile_only(case):
        _need()
        try:
            plan = plan_of(case.M, case.N, _esize(case.dtype), *case_flat(case))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        return _facts(_sm_simple_compile(case.dtype) if kernel == "simple" else _sm_compile(case.dtype, plan), plan)

    def prepare(case, inputs, out):
        _need()
        (x,) = inputs
        _check_cuda(x, out)
        if x.dim() != 2 or out.shape != x.shape or out.dtype != x.dtype:
            raise Unsupported("x, out: 2-D, same shape and dtype")
        if x.stride(1) != 1 or out.stride(1) != 1:
            raise Unsupported("x, out: unit column stride")
        flat = _sm_flat(x, out) if vector else None
        try:
            plan = plan_of(x.shape[0], x.shape[1], x.element_size(), flat is not None, bool(flat and flat[4]))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        import tilelang_src

        dt = tilelang_src.dtype_name(x.dtype)
        entries = _sm_simple_compile(dt) if kernel == "simple" else _sm_compile(dt, plan)
        k = entries[0].kernel
        if "vec" in plan:
            fx, fy, off, sx, _ = flat
            m, n = x.shape
            if plan["kernel"] == "rows":
                return _launch(entries, plan, lambda: k(fx, fy, m, n, sx, off))
            return _launch(entries, plan, lambda: k(fx, fy, n, sx, off, m))
        if plan["kernel"] != "split":
            return _launch(entries, plan, lambda: k(x, out))
        import torch

        work = torch.empty((x.shape[0], plan["chunks"], 2), dtype=torch.float32, device=x.device)
        k2 = entries[1].kernel

        def launch():
            k(x, work)
            k2(x, work, out)
        return _launch(entries, plan, launch)

    return supports, compile_only, prepare


_SM_SIMPLE = Source(src(C, "softmax.py"), kernels=("softmax_kernel",))
_SM_ROWS = Source(src(C, "softmax_rows.py"), kernels=("softmax_rows_kernel",))
_SM_ONLINE = Source(src(C, "softmax_online.py"), kernels=("softmax_online_kernel",))
_SM_ROWS_VEC = Source(src(C, "softmax_rows.py"), kernels=("softmax_rows_vec_kernel", "softmax_rows_kernel"))
_SM_ONLINE_VEC = Source(src(C, "softmax_online.py"), kernels=("softmax_online_vec_kernel", "softmax_online_kernel"))
_SM_SMEM_VEC = Source(src(C, "softmax_smem.py"), kernels=("softmax_smem_vec_kernel", "softmax_smem_kernel"))
_SM_VEC_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_sm_compile", "_sm_flat", "_vector_cfg"))
_SM_SMEM = Source(src(C, "softmax_smem.py"), kernels=("softmax_smem_kernel",))
_SM_SPLIT = Source(src(C, "softmax_split.py"), kernels=("softmax_split_stats_kernel", "softmax_split_write_kernel"))
_SM_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_sm_compile",))
_SM_SIMPLE_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_sm_simple_compile",))
_SM_PLAN = Source(src(C, "dispatch.py"), kernels=(), host=("plan_softmax", "_pow2_at_least"))
for _name, _kernel, _desc, _srcs in (
        ("softmax", None, "planned by row length: softmax_rows (whole rows in registers, several short rows "
                          "per CTA) up to 16384 columns; longer rows: softmax_split when they cover less than "
                          "half the SMs, else softmax_smem (row staged in shared memory, <= 220 KB) or "
                          "softmax_online (two reads)",
         planned(_plans.plan, "softmax", [_SM_HOST])),
        ("softmax_simple", "simple", "teaching twin: a CTA per row, online (max, sum) over 1024-column tiles, "
                                     "then a write pass", [_SM_SIMPLE, _SM_SIMPLE_HOST]),
        ("softmax_rows", "rows", "whole rows in registers, reduce_max / reduce_sum along the row, one read one "
                                 "write, in 16-byte vectors with guarded row edges (not yet run on a GPU); the "
                                 "element kernel where x and out differ in stride or 16-byte phase",
         [_SM_ROWS_VEC, _SM_VEC_HOST, _SM_PLAN]),
        ("softmax_online", "online", "a CTA per row: online (max, sum) over column tiles, second read to write, "
                                     "in 16-byte vectors with guarded row edges (not yet run on a GPU); the "
                                     "element kernel where x and out differ in stride or 16-byte phase",
         [_SM_ONLINE_VEC, _SM_VEC_HOST, _SM_PLAN]),
        ("softmax_smem", "smem", "a CTA per row, the row staged raw in shared memory, then (max, sum) online "
                                 "and the write from shared memory (one read, one write), in 16-byte vectors "
                                 "with guarded row edges (not yet run on a GPU); the element kernel where x "
                                 "and out differ in stride or 16-byte phase",
         [_SM_SMEM_VEC, _SM_VEC_HOST, _SM_PLAN]),
        ("softmax_split", "split", "C CTAs per row: online (max, sum) per chunk to a workspace, then each CTA "
                                   "merges its row's C pairs and writes its chunk", [_SM_SPLIT, _SM_HOST, _SM_PLAN])):
    _s, _c, _p = _sm_impl(_kernel)
    register(problem="softmax", layer=LAYER, name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=_available, supports=_s, compile_only=_c)(_p)


# -- gemm_epilogue ------------------------------------------------------------------------------
def _gemm_simple_compile(dtype: str, has_bias: bool) -> list:
    from tilelang_src import gemm_epilogue

    return [_compile(("gemm_epilogue", dtype, has_bias), lambda: gemm_epilogue.gemm_kernel(dtype, has_bias))]


def _gemm_compile(dtype: str, has_bias: bool, plan: dict) -> list:
    """The compiled kernels of a plan, in launch order."""
    from tilelang_src import gemm_epilogue_splitk, gemm_epilogue_tma

    cfg = (plan["bm"], plan["bn"], plan["bk"], plan["stages"], plan["threads"])
    if plan["kernel"] == "splitk":
        return [_compile(("gemm_splitk_partial", dtype, cfg),
                         lambda: gemm_epilogue_splitk.gemm_splitk_partial_kernel(dtype, *cfg)),
                _compile(("gemm_splitk_epilogue", dtype, has_bias),
                         lambda: gemm_epilogue_splitk.gemm_splitk_epilogue_kernel(dtype, has_bias))]
    tma = plan["kernel"] == "tma"
    if plan.get("stage_bias"):
        return [_compile(("gemm_epilogue_tma", dtype, has_bias, cfg, tma, "stage_bias"),
                         lambda: gemm_epilogue_tma.gemm_tma_kernel(dtype, has_bias, *cfg, tma=tma, stage_bias=True))]
    return [_compile(("gemm_epilogue_tma", dtype, has_bias, cfg, tma),
                     lambda: gemm_epilogue_tma.gemm_tma_kernel(dtype, has_bias, *cfg, tma=tma))]


def _gemm_arch_check():
    """The pipelined GEMM kernels are Hopper kernels (TMA, wgmma, setmaxnreg: sm_90a); TileLang
    0.1.15 does not lower them for other architectures (sm_80: the pipelined loop over a dynamic K
    fails in codegen; sm_100: nvcc rejects the generated source), so they decline there."""
    import tilelang_src

    a = tilelang_src.arch()
    if not a.startswith("sm_90"):
        raise ValueError(f"arch: TileLang's pipelined GEMM kernels here are Hopper kernels (TMA + wgmma, sm_90a), "
                         f"not {a}")


def _gemm_impl(kernel):
    def plan_of(m, n, k, es, tma_ok):
        from tilelang_src import dispatch

        if kernel == "simple":
            return {"kernel": "simple"}
        _gemm_arch_check()
        return dispatch.plan_gemm(m, n, k, es, tma_ok, kernel=kernel, stage_bias=kernel == "tma")

    def case_tma_ok(case):
        return case.N * 2 % 16 == 0 and case.K * 2 % 16 == 0

    def supports(case):
        if _available():
            return None
        try:
            plan_of(case.M, case.N, case.K, 2, case_tma_ok(case))
        except ValueError as e:
            return str(e)
        return None

    def compile_only(case):
        _need()
        try:
            plan = plan_of(case.M, case.N, case.K, 2, case_tma_ok(case))
        except ValueError as e:
            raise Unsupported(str(e)) from None
        has_bias = bool(int(case.params.get("bias", 1)))
        entries = _gemm_simple_compile(case.dtype, has_bias) if kernel == "simple" else \
            _gemm_compile(case.dtype, has_bias, plan)
        return _facts(entries, plan)

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
        m, kk = a.shape
        n = b.shape[1]
        es = a.element_size()
        tma_ok = n * es % 16 == 0 and kk * es % 16 == 0 and all(t.data_ptr() % 16 == 0 for t in (a, b, out))
        try:
            plan = plan_of(m, n, kk, es, tma_ok)
        except ValueError as e:
            raise Unsupported(str(e)) from None
        import tilelang_src

        dt = tilelang_src.dtype_name(a.dtype)
        entries = _gemm_simple_compile(dt, bias is not None) if kernel == "simple" else \
            _gemm_compile(dt, bias is not None, plan)
        k = entries[0].kernel
        tail = ((out,) if bias is None else (bias, out)) + (code,)
        if plan["kernel"] != "splitk":
            return _launch(entries, plan, lambda: k(a, b, *tail))
        import torch

        work = torch.empty((plan["splits"], m, n), dtype=torch.float32, device=a.device)
        k2 = entries[1].kernel

        def launch():
            k(a, b, work)
            k2(work, *tail)
        return _launch(entries, plan, launch)

    return supports, compile_only, prepare


_GE_EPI = Source(src(C, "epilogue.py"), kernels=("act", "bias_act"))
_GE_SIMPLE = Source(src(C, "gemm_epilogue.py"), kernels=("gemm_kernel",))
_GE_TMA = Source(src(C, "gemm_epilogue_tma.py"), kernels=("gemm_tma_kernel",))
_GE_TILED = Source(src(C, "gemm_epilogue_tiled.py"), kernels=("load_tiles_guarded",))
_GE_SPLITK = Source(src(C, "gemm_epilogue_splitk.py"),
                    kernels=("gemm_splitk_partial_kernel", "gemm_splitk_epilogue_kernel"))
_GE_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_gemm_compile", "_gemm_arch_check"))
_GE_SIMPLE_HOST = Source("backends/tilelang_layer.py", kernels=(), host=("_gemm_simple_compile",))
_GE_PLAN = Source(src(C, "dispatch.py"), kernels=(), host=("plan_gemm",))
for _name, _kernel, _desc, _srcs in (
        ("gemm_epilogue", None, "T.Pipelined TMA + wgmma (128x128x64, 4 stages; 64-row tiles for M <= 64), "
                                "swizzled shared layouts, rastered CTAs, bias + act on the accumulator fragment; "
                                "split-K when the tiles leave half the SMs idle; guarded element loads where N "
                                "or K is not a multiple of 8",
         planned(_plans.plan, "gemm_epilogue", [_GE_EPI, _GE_HOST])),
        ("gemm_epilogue_simple", "simple", "teaching twin: 128x128x32 tiles, T.copy to shared, T.gemm, bias + act "
                                           "on the accumulator fragment, no pipelining hints",
         [_GE_SIMPLE, _GE_EPI, _GE_SIMPLE_HOST]),
        ("gemm_epilogue_tma", "tma", "T.Pipelined TMA + wgmma only (16-byte rows: N, K multiples of 8), the "
                                     "tile's bias slice staged in shared memory once (no spills in the "
                                     "128x256 tile; not yet run on a GPU)",
         [_GE_TMA, _GE_EPI, _GE_HOST, _GE_PLAN]),
        ("gemm_epilogue_tiled", "tiled", "the pipeline with guarded element loads instead of TMA",
         [_GE_TILED, _GE_TMA, _GE_EPI, _GE_HOST, _GE_PLAN]),
        ("gemm_epilogue_splitk", "splitk", "split-K (>= 2 splits): pipelined TMA + wgmma partials in fp32 "
                                           "planes, a second kernel sums them in order and applies bias + act",
         [_GE_SPLITK, _GE_EPI, _GE_HOST, _GE_PLAN])):
    _s, _c, _p = _gemm_impl(_kernel)
    register(problem="gemm_epilogue", layer=LAYER, name=_name, description=_desc, sources=_srcs,
             devices=("cuda",), available=_available, supports=_s, compile_only=_c)(_p)


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
