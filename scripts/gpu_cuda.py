#!/usr/bin/env python3
"""One GPU run for the CUDA C++ layer (kl_cuda) and its NVRTC twin (cupy), at most 150 s.

Run from the repository root on the GPU machine after the offline build
(``python3 -m pip install -q --no-build-isolation --no-deps --no-index -e .``):

    python3 scripts/gpu_cuda.py            # the edge stages; JSON under $OUT/cuda (default ./gpu_out/cuda)
    python3 scripts/gpu_cuda.py --stages verify_defaults,time_gemm_small --total 200

Default stages (issue 35, the edge suite), each in a subprocess with a time budget (a crash or a
hang costs that stage's current row, not the run: the stage is restarted after the row that
crashed, at most three times):
  verify_edge        cuda:/cupy: defaults on the edge suite and on off-suite shapes of its classes;
                     the split variant (8192 / 4096-column chunks, not run on a GPU before) on few
                     long rows; cuda:gemm_epilogue on the verify suite's GEMMs; then the defaults
                     with the planner rules still off in the tables turned on (FLAGS: GEMM
                     "tiled_fill_rows", SOFTMAX "split_fill_sms"), on the suites they reroute
  time_edge          each edge case (and the issue's shapes of the same classes): torch eager, a copy
                     of the same bytes, the defaults (cuda, cupy), the default with its FLAGS rule
                     on ("default+<flag>") and every candidate plan the rules
                     choose between (softmax: split chunks, smem C, warp threads, rows CTAs/SM, block
                     elements a thread, online; GEMM: tiled tile rows x splits, ping-pong (1 and 2x1
                     clusters), ws, split-K factors; vector add: unroll), interleaved, cold L2
  time_edge_compile  torch eager, torch.compile and the cuda default on the edge cases (compile
                     paid in prepare, outside the timing), as many as the budget allows
Older stages (--stages): verify_defaults, time_softmax, time_gemm, time_vector_add, verify_variants,
time_gemm_small, probe_vector_add (the models suite's checks).
Every timed launch's output is checked against the float64 reference after its timing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT") or "gpu_out") / "cuda"
TOTAL_S = 145.0
BUDGET = {"verify_defaults": 70, "time_softmax": 45, "time_gemm": 50, "time_vector_add": 12, "verify_variants": 50,
          "time_gemm_small": 60, "probe_vector_add": 20, "verify_edge": 40, "time_edge": 75, "time_edge_compile": 30}


# ---------------------------------------------------------------------------------------------------
# stage side (runs in a subprocess: python3 scripts/gpu_cuda.py --stage NAME --skip KEY ...)

def _log(stage: str, rec: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"{stage}.jsonl", "a") as f:
        f.write(json.dumps(rec, default=str) + "\n")


def _impl(impl_id):
    from harness import problems, registry

    name = impl_id.split(":", 1)[1]
    prob = "vector_add" if name.startswith("vector_add") else "gemm_epilogue" if name.startswith("gemm") else "softmax"
    return registry.get(prob, impl_id), problems.get(prob)


def _row(stage, key, skip, fn):
    """Run one row: log its start (so a crash can be blamed on it), then its result."""
    if key in skip:
        return
    _log(stage, {"start": key})
    t0 = time.perf_counter()
    try:
        rec = fn()
    except Exception as e:
        rec = {"status": "ERROR", "reason": f"{type(e).__name__}: {e}"[:500],
               "trace": traceback.format_exc()[-1500:]}
    rec.update(key=key, seconds=round(time.perf_counter() - t0, 3))
    _log(stage, rec)
    if rec.get("status") == "ERROR" and any(w in rec.get("reason", "") for w in STICKY):
        os._exit(3)  # the CUDA context is unusable now: the driver restarts the stage after this row


STICKY = ("illegal", "unspecified launch failure", "misaligned address", "an illegal instruction",
          "cudaErrorLaunchFailure", "device-side assert", "CUDA error: an")


def _verify(impl_id, case, seeds, repeat=True):
    from harness.verify import verify_case

    impl, prob = _impl(impl_id)
    if impl.available():
        return {"status": "SKIP", "reason": impl.available()}
    if (why := impl.supports(case)):
        return {"status": "SKIP", "reason": why}
    c = verify_case(impl, prob, case, "cuda", seeds=seeds, repeat=repeat)
    info = c.details.get("info", {}) if isinstance(c.details, dict) else {}
    return {"status": "PASS" if c.ok else "FAIL", "reason": c.reason, "max_abs_err": c.max_abs_err,
            "rel_err": c.rel_err, "kernel": info.get("kernel"), "path": (info.get("config") or {}).get("path")}


def _graph_check(impl_id, case):
    from harness.verify import graph_replay

    impl, prob = _impl(impl_id)
    if impl.available() or impl.supports(case):
        return {"status": "SKIP", "reason": impl.available() or impl.supports(case)}
    c = graph_replay(impl, prob, case)
    return {"status": "PASS" if c.ok else "FAIL", "reason": c.reason or "graph replay wrote the output"}


def stage_verify_defaults(skip):
    from harness import problems, registry

    registry.load_backends()
    for layer in ("cuda", "cupy"):
        for prob in ("vector_add", "softmax", "gemm_epilogue"):
            impl_id = f"{layer}:{prob}"
            for suite, seeds in (("verify", (0, 1, 2)), ("models", (0,))):
                for case in problems.get(prob).cases(suite):
                    _row("verify_defaults", f"{impl_id}|{suite}|{case.id}", skip,
                         lambda: _verify(impl_id, case, seeds, repeat=suite == "verify"))
    gp = problems.get("gemm_epilogue")
    for impl in registry.select(problem="gemm_epilogue", layer="cuda"):
        for case in (gp.case(M=16, N=6144, K=4096, act="gelu"), gp.case(M=300, N=1001, K=136),
                     gp.case(M=512, N=1024, K=1024)):
            _row("verify_defaults", f"graph|{impl.id}|{case.id}", skip, lambda: _graph_check(impl.id, case))
    for impl_id in ("cuda:softmax", "cuda:softmax_split", "cuda:vector_add", "cupy:softmax", "cupy:gemm_epilogue"):
        impl, prob = _impl(impl_id)
        case = prob.case(M=64, N=100_000) if "softmax" in impl_id else prob.case(N=98432) if "vector" in impl_id \
            else prob.case(M=16, N=6144, K=4096)
        _row("verify_defaults", f"graph|{impl_id}|{case.id}", skip, lambda: _graph_check(impl_id, case))


def stage_verify_variants(skip):
    from harness import registry

    registry.load_backends()
    ids = [i.id for layer in ("cuda", "cupy") for i in registry.select(layer=layer)
           if i.role in ("variant", "simple")]
    for suite in ("verify", "models"):
        for impl_id in ids:
            impl, prob = _impl(impl_id)
            for case in prob.cases(suite):
                _row("verify_variants", f"{impl_id}|{suite}|{case.id}", skip,
                     lambda: _verify(impl_id, case, (0,), repeat=False))


# -- timing ------------------------------------------------------------------------------------------
def _cfg():
    from harness.timing import TimingConfig

    return TimingConfig(min_samples=5, max_samples=60, rel_spread=0.01, time_cap_s=0.3, warmup_ms=5)


def _time_case(prob, case, cands: dict):
    """cands: name -> (prepare(inputs, out) -> launch). Interleaved cold timing, then each output checked."""
    import torch

    from harness.timing import time_cold
    from harness.verify import check_output

    inputs = prob.make_inputs(case, "cuda", 0)
    ref = prob.reference(inputs, case)
    launches, outs, errors = {}, {}, {}
    for name, prep in cands.items():
        try:
            out = prob.alloc_out(case, "cuda")
            launches[name] = prep(inputs, out)
            outs[name] = out
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {e}"[:300]
    stats = time_cold(launches, _cfg(), "cuda") if launches else {}
    torch.cuda.synchronize()
    res = {}
    for name, st in stats.items():
        q1, med, q3 = st.quartiles()
        ok = check_output(prob, case, outs[name], ref) if not name.startswith(("copy", "torch")) else None
        res[name] = {"median_s": med, "iqr_s": q3 - q1, "n": st.n, "host_us": None if st.host_s is None
                     else round(st.host_s * 1e6, 2), "check": None if ok is None else ("PASS" if ok.ok else
                                                                                    "FAIL " + ok.reason[:200])}
    for name, why in errors.items():
        res[name] = {"error": why}
    return res


def _impl_prep(impl_id, case):
    impl, _ = _impl(impl_id)

    def prep(inputs, out):
        from harness.errors import Unsupported

        if impl.available():
            raise Unsupported(impl.available())
        if (why := impl.supports(case)):
            raise Unsupported(why)
        return impl.prepare(case, inputs, out)
    return prep


def _plan_prep(kind, path, case, **opts):
    """A launch of a pinned plan through the pybind11 module (configs the registry rows do not pin)."""
    def prep(inputs, out):
        from backends import cuda_gemm, cuda_layer as cl

        mod = cl.module()
        if kind == "softmax":
            (x,) = inputs
            plan = cl.softmax_launches(x, out, path, cl.device(cl.dev_index(x)), **opts)
            return cl.make_launcher(mod, plan, {"x": x.data_ptr(), "out": out.data_ptr()}, cl.dev_index(x),
                                    cl.DTYPE_CODE[x.dtype])
        a, b, bias = inputs
        act = case.params.get("act", "relu")
        plan = cuda_gemm.gemm_launches(path, case, a, b, bias, out, act, cl.device(cl.dev_index(a)), **opts)
        ptrs = {"a": a.data_ptr(), "b": b.data_ptr(), "bias": bias.data_ptr() if bias is not None else 0,
                "c": out.data_ptr()}
        return cl.make_launcher(mod, plan, ptrs, cl.dev_index(a), cl.DTYPE_CODE[a.dtype])
    return prep


def stage_time_softmax(skip):
    import torch

    from harness import problems, registry

    registry.load_backends()
    prob = problems.get("softmax")
    cases = prob.cases("models") + [prob.case(M=2000, N=50000, dtype="float16"), prob.case(M=1, N=262147),
                                    prob.case(M=65536, N=128, dtype="bfloat16"),
                                    prob.case(M=8192, N=32000, dtype="float16"),
                                    prob.case(M=8192, N=50257, dtype="bfloat16"), prob.case(M=4096, N=50257),
                                    prob.case(M=8192, N=4096, dtype="bfloat16"),
                                    prob.case(M=16384, N=2048, dtype="bfloat16"), prob.case(M=6000, N=3000, dtype="float16")]
    # a focused run (--max-n N): rows of at most N columns
    most = int(sys.argv[sys.argv.index("--max-n") + 1]) if "--max-n" in sys.argv else 0
    cases = [c for c in cases if not most or c.N <= most]
    for case in cases:
        def run(case=case):
            from backends import cuda_layer as cl

            cands = {"torch": _impl_prep("torch:softmax", case),
                     "copy": lambda inputs, out: (lambda: out.copy_(inputs[0])),
                     "cuda:softmax": _impl_prep("cuda:softmax", case), "cupy:softmax": _impl_prep("cupy:softmax", case)}
            for p in ("warp", "rows", "block", "split", "online"):
                cands[f"cuda:softmax_{p}"] = _impl_prep(f"cuda:softmax_{p}", case)
            for c in (1, 2, 4, 8, 16):
                cands[f"smem C={c}"] = _plan_prep("softmax", "smem", case, cluster=c)
            if case.N <= 8192:   # short rows: the rows kernel's persistent grid, the block kernel's width
                for b in (2, 3, 4, 6, 8):
                    cands[f"rows bps={b}"] = _plan_prep("softmax", "rows", case, blocks_per_sm=b)
            if case.N <= 32768:
                for e in (8, 16, 32):
                    cands[f"block ept={e}"] = _plan_prep("softmax", "block", case, ept=e)
            res = _time_case(prob, case, cands)
            plan = cl.case_softmax("auto", case, cl.device(torch.cuda.current_device()))
            return {"status": "TIMED", "case": case.id, "bytes": prob.traffic(case), "default_plan": plan.info,
                    "results": res}
        _row("time_softmax", f"time|{case.id}", skip, run)


def _time_gemm_cases(stage, cases, extra, skip):
    """Each case timed: torch, the cuda / cupy defaults and ``extra(case)``'s candidates."""
    import torch

    from harness import problems

    prob = problems.get("gemm_epilogue")
    for case in cases:
        def run(case=case):
            from backends import cuda_gemm, cuda_layer as cl

            cands = {"torch": _impl_prep("torch:gemm_epilogue", case),
                     "cuda:gemm_epilogue": _impl_prep("cuda:gemm_epilogue", case),
                     "cupy:gemm_epilogue": _impl_prep("cupy:gemm_epilogue", case)}
            cands.update(extra(case))
            res = _time_case(prob, case, cands)
            plan = cuda_gemm.case_gemm("auto", case, cl.device(torch.cuda.current_device()))
            return {"status": "TIMED", "case": case.id, "flops": prob.flops(case), "default_plan": plan.info,
                    "results": res}
        _row(stage, f"time|{case.id}", skip, run)


def stage_time_gemm(skip):
    from harness import problems, registry

    registry.load_backends()
    prob = problems.get("gemm_epilogue")
    c = prob.case
    cases = prob.cases("models") + [c(M=32, N=5000, K=3000), c(M=300, N=2000, K=1000), c(M=2048, N=50257, K=1024),
                                    c(M=1000, N=4000, K=3000, act="gelu"), c(M=128, N=8192, K=8192, dtype="float16"),
                                    c(M=1000, N=3000, K=4000, act="gelu")]

    def extra(case):
        cands = {f"cuda:gemm_epilogue_{v}": _impl_prep(f"cuda:gemm_epilogue_{v}", case)
                 for v in ("pingpong", "ws", "tiled")}
        cands["pingpong_c2"] = _plan_prep("gemm", "pingpong_c2", case)
        if case.M <= 512:
            for s in (2, 3, 4, 6, 8, 12):
                cands[f"splitk S={s}"] = _plan_prep("gemm", "splitk", case, splits=s)
        if case.N % 8:
            cands["auto (repack+ws)"] = _plan_prep("gemm", "auto", case)
        return cands
    _time_gemm_cases("time_gemm", cases, extra, skip)


def stage_time_gemm_small(skip):
    """M <= 64 (a stream of B): the default against pinned split factors of the tiled kernel."""
    from harness import problems, registry

    registry.load_backends()
    prob = problems.get("gemm_epilogue")
    c = prob.case
    cases = [x for x in prob.cases("models") if x.M <= 64] + [
        c(M=1, N=4096, K=4096), c(M=7, N=4000, K=2048, act="relu", bias=0), c(M=33, N=1001, K=3000, act="gelu"),
        c(M=32, N=5000, K=3000), c(M=64, N=8192, K=2048), c(M=16, N=10001, K=4096), c(M=8, N=3072, K=12288),
        c(M=1, N=1024, K=512)]
    _time_gemm_cases("time_gemm_small", cases,
                     lambda case: {f"tiled S={sp}": _plan_prep("gemm", "tiled", case, splits=sp)
                                   for sp in (2, 4, 6, 8, 12, 16)}, skip)


def _va_unroll_prep(layer, unroll):
    """The default's vector plan with ``unroll`` pinned, prepared once (a launch is one call, as the
    registered rows'), through the pybind11 module or NVRTC."""
    def prep(inputs, out):
        from backends import cuda_layer as cl, cupy_layer as cp

        x, y = inputs
        di = cl.dev_index(x)
        plan = cl.vector_add_launches(x, y, out, "auto", cl.device(di), unroll=unroll)
        ptrs = {"x": x.data_ptr(), "y": y.data_ptr(), "out": out.data_ptr()}
        if layer == "cuda":
            return cl.make_launcher(cl.module(), plan, ptrs, di, cl.DTYPE_CODE[x.dtype])
        return cp._make(plan, ptrs, di, cl.DTYPE_CODE[x.dtype])
    return prep


def stage_time_vector_add(skip):
    from cuda_src import dispatch
    from harness import problems, registry

    registry.load_backends()
    prob = problems.get("vector_add")
    # off-suite small sizes too: there the grid (vectors / (256 x unroll)) covers few SMs
    extra = [prob.case(N=262_144, dtype="bfloat16"), prob.case(N=1_000_003, dtype="float32"),
             prob.case(N=4_000_000, dtype="bfloat16")]
    for case in prob.cases("models") + extra:
        def run(case=case):
            cands = {"torch": _impl_prep("torch:vector_add", case),
                     "copy": lambda inputs, out: (lambda: out.copy_(inputs[0])),
                     "cuda:vector_add": _impl_prep("cuda:vector_add", case),
                     "cuda:vector_add_simple": _impl_prep("cuda:vector_add_simple", case),
                     "cupy:vector_add": _impl_prep("cupy:vector_add", case)}
            for u in dispatch.VECTOR_ADD["unrolls"]:        # each pinned, the default's rule beside them
                cands[f"cuda unroll {u}"] = _va_unroll_prep("cuda", u)
                cands[f"cupy unroll {u}"] = _va_unroll_prep("cupy", u)
            return {"status": "TIMED", "case": case.id, "bytes": prob.traffic(case),
                    "results": _time_case(prob, case, cands)}
        _row("time_vector_add", f"time|{case.id}", skip, run)


def stage_probe_vector_add(skip):
    """Where a short vector add's time goes: the same plan (unroll 1) launched through the module
    and through NVRTC into four output buffers each, interleaved in one timing loop, each output
    checked. Separates the launch path from the placement of the buffers."""
    import torch

    from harness import problems, registry
    from harness.timing import time_cold
    from harness.verify import check_output

    registry.load_backends()
    prob = problems.get("vector_add")
    for case in (prob.case(N=65536, dtype="bfloat16"), prob.case(N=262_144, dtype="bfloat16")):
        def run(case=case):
            inputs = prob.make_inputs(case, "cuda", 0)
            ref = prob.reference(inputs, case)
            outs = [prob.alloc_out(case, "cuda") for _ in range(4)]
            launches = {"torch": (lambda: torch.add(inputs[0], inputs[1], out=outs[0]))}
            for layer in ("cuda", "cupy"):
                for i, o in enumerate(outs):
                    launches[f"{layer} out{i}"] = _va_unroll_prep(layer, 1)(inputs, o)
            for layer in ("cuda", "cupy"):
                launches[f"{layer}:vector_add out0"] = _impl_prep(f"{layer}:vector_add", case)(inputs, outs[0])
            stats = time_cold(launches, _cfg(), "cuda")
            torch.cuda.synchronize()
            res = {}
            for name, st in stats.items():
                q1, med, q3 = st.quartiles()
                res[name] = {"median_s": med, "iqr_s": q3 - q1, "n": st.n}
            bad = [i for i, o in enumerate(outs) if not check_output(prob, case, o, ref).ok]
            return {"status": "TIMED" if not bad else f"FAIL outputs {bad}", "case": case.id,
                    "addresses_mod_4096": [o.data_ptr() % 4096 for o in outs], "results": res}
        _row("probe_vector_add", f"probe|{case.id}", skip, run)


# -- the edge suite (issue 35) -------------------------------------------------------------------
def _edge_cases(prob):
    """The edge suite's cases, then off-suite shapes of the same classes (the issue's measured gaps
    among them): results are also checked on shapes nobody shows."""
    c = prob.case
    extra = {
        "softmax": lambda: [c(M=1, N=1_000_000, dtype="float32"), c(M=2, N=600_000, dtype="float32"),
                    c(M=128, N=50_257, dtype="bfloat16"), c(M=64, N=65_536, dtype="float16"),
                    c(M=100_000, N=64, dtype="bfloat16"),
                    c(M=300, N=777, dtype="float16")],
        "gemm_epilogue": lambda: [c(M=333, N=777, K=999, dtype="float16", act="gelu"),
                          c(M=1000, N=4000, K=3000, dtype="bfloat16", act="gelu"),
                          c(M=77, N=18_944, K=3_584, dtype="bfloat16", act="gelu"),
                          c(M=512, N=1000, K=4000, dtype="float16", act="relu"),
                          c(M=1000, N=1000, K=999, dtype="bfloat16", act="none"),
                          c(M=4096, N=4096, K=128, dtype="float16", act="gelu")],
        "vector_add": lambda: [c(N=65_537, dtype="float16"), c(N=1_000_003, dtype="bfloat16", misalign=3)],
    }[prob.name]()
    return prob.cases("edge") + extra


def stage_verify_edge(skip):
    """Most informative first (a stage cut short by its budget loses the tail): the cuda: defaults,
    the split variant's new chunks, the GEMM default on the verify suite (the tile-row rule), then
    the cupy: defaults (NVRTC compiles each source once, cold on a fresh machine)."""
    from harness import problems, registry

    registry.load_backends()
    names = ("softmax", "gemm_epilogue", "vector_add")
    work = [(f"cuda:{n}", "edge", c, (0,)) for n in names for c in _edge_cases(problems.get(n))]
    work += [("cuda:softmax_split", "edge", c, (0,)) for c in _edge_cases(problems.get("softmax")) if c.N > 32768]
    gv = problems.get("gemm_epilogue").cases("verify")
    work += [("cuda:gemm_epilogue", "verify", c, (0, 1)) for c in gv]
    # the rules still off in the tables (FLAGS), on: the kernels they would pick, verified
    flag = [("cuda:gemm_epilogue", "verify", c, (0, 1)) for c in gv]
    flag += [("cuda:gemm_epilogue", "edge", c, (0,)) for c in _edge_cases(problems.get("gemm_epilogue"))]
    flag += [("cuda:softmax", "edge", c, (0,)) for c in _edge_cases(problems.get("softmax")) if c.N > 32768]
    flag += [("cuda:softmax", "verify", c, (0,)) for c in problems.get("softmax").cases("verify") if c.N > 32768]
    cupy = [(f"cupy:{n}", "edge", c, (0,)) for n in names for c in _edge_cases(problems.get(n))]
    for impl_id, suite, case, seeds in work:
        _row("verify_edge", f"{impl_id}|{suite}|{case.id}", skip,
             lambda impl_id=impl_id, case=case, seeds=seeds: _verify(impl_id, case, seeds, repeat=False))
    for impl_id, suite, case, seeds in flag:
        _row("verify_edge", f"{impl_id}+flag|{suite}|{case.id}", skip,
             lambda impl_id=impl_id, case=case, seeds=seeds: _verify_flag_on(impl_id, case, seeds))
    for impl_id, suite, case, seeds in cupy:
        _row("verify_edge", f"{impl_id}|{suite}|{case.id}", skip,
             lambda impl_id=impl_id, case=case, seeds=seeds: _verify(impl_id, case, seeds, repeat=False))


#: table flags off until this script has run their paths: (table, key) -> what turning it on does
FLAGS = {"softmax": ("SOFTMAX", "split_fill_sms"), "gemm_epilogue": ("GEMM", "tiled_fill_rows")}


class _flag_on:
    """The planner table's flag of ``problem`` on inside the block (this process only)."""
    def __init__(self, problem):
        from cuda_src import dispatch

        self.table, self.key = getattr(dispatch, FLAGS[problem][0]), FLAGS[problem][1]

    def __enter__(self):
        self.old = self.table[self.key]
        self.table[self.key] = True

    def __exit__(self, *exc):
        self.table[self.key] = self.old


def _verify_flag_on(impl_id, case, seeds):
    with _flag_on(impl_id.split(":", 1)[1]):
        rec = _verify(impl_id, case, seeds, repeat=False)
    rec["flag"] = FLAGS[impl_id.split(":", 1)[1]][1] + " on"
    return rec


def _flag_prep(impl_id, case):
    """The default prepared with its problem's table flag on (the plan is fixed at prepare)."""
    base = _impl_prep(impl_id, case)

    def prep(inputs, out):
        with _flag_on(impl_id.split(":", 1)[1]):
            return base(inputs, out)
    return prep


def _pins(kind, case, pins):
    """name -> prepare of each pinned plan; a pin the planner declines is left out (its reason logged)."""
    from backends import cuda_gemm, cuda_layer as cl
    from cuda_src import dispatch

    out, declined = {}, {}
    for name, path, opts in pins:
        try:
            if kind == "softmax":
                cl.case_softmax(path, case, **opts)
            else:
                cuda_gemm.case_gemm(path, case, **opts)
        except (dispatch.Decline, ValueError) as e:
            declined[name] = str(e)[:160]
            continue
        out[name] = _plan_prep(kind, path, case, **opts)
    return out, declined


def _softmax_pins(case):
    S = __import__("cuda_src.dispatch", fromlist=["SOFTMAX"]).SOFTMAX
    pins = [(f"split chunk={ch}", "split", {"chunk": ch}) for ch in S["split_chunks"]]
    pins += [(f"smem C={k}", "smem", {"cluster": k}) for k in (1, 2, 4, 8, 16)]
    pins += [(f"online C={k}", "online", {"cluster": k}) for k in (1, 2, 4, 8)]
    if case.N <= 1024:
        pins += [(f"warp threads={t}", "warp", {"threads": t}) for t in (32, 64, 128, 256)]
    if case.N <= 8192:
        pins += [(f"rows bps={b}", "rows", {"blocks_per_sm": b}) for b in (2, 3, 4, 6)]
        pins += [(f"rows ept={e}", "rows", {"ept": e}) for e in S["rows_short_epts"]]   # not run on a GPU before
    if case.N <= 32768:
        pins += [(f"block ept={e}", "block", {"ept": e}) for e in (8, 16, 32)]
    return pins


def _gemm_pins(case):
    pins = [(f"tiled bm={bm} S={sp}", "tiled", {"bm": bm, "splits": sp}) for bm in (32, 64, 128) for sp in (1, 2, 4)]
    pins += [("pingpong", "pingpong", {}), ("pingpong_c2", "pingpong_c2", {}), ("ws bn=256", "ws", {"bn": 256}),
             ("ws bn=128", "ws", {"bn": 128})]
    pins += [(f"splitk S={sp}", "splitk", {"splits": sp}) for sp in (2, 3, 4, 6)]
    return pins


def stage_time_edge(skip):
    import torch

    from backends import cuda_gemm, cuda_layer as cl
    from harness import problems, registry

    registry.load_backends()
    for name in ("softmax", "gemm_epilogue", "vector_add"):
        prob = problems.get(name)
        for case in _edge_cases(prob):
            def run(case=case, name=name, prob=prob):
                dev = cl.device(torch.cuda.current_device())
                cands = {"torch": _impl_prep(f"torch:{name}", case),
                         f"cuda:{name}": _impl_prep(f"cuda:{name}", case),
                         f"cupy:{name}": _impl_prep(f"cupy:{name}", case)}
                if name in FLAGS:   # the default with its table's pending rule on
                    cands[f"default+{FLAGS[name][1]}"] = _flag_prep(f"cuda:{name}", case)
                declined = {}
                if name != "gemm_epilogue":
                    cands["copy"] = lambda inputs, out: (lambda: out.copy_(inputs[0]))
                if name == "softmax":
                    more, declined = _pins("softmax", case, _softmax_pins(case))
                    plan = cl.case_softmax("auto", case, dev)
                elif name == "gemm_epilogue":
                    more, declined = _pins("gemm", case, _gemm_pins(case))
                    plan = cuda_gemm.case_gemm("auto", case, dev)
                else:
                    from cuda_src import dispatch
                    more = {f"cuda unroll {u}": _va_unroll_prep("cuda", u) for u in dispatch.VECTOR_ADD["unrolls"]}
                    more["cuda:vector_add_simple"] = _impl_prep("cuda:vector_add_simple", case)
                    plan = cl.case_vector_add("auto", case, dev)
                cands.update(more)
                res = _time_case(prob, case, cands)
                info = {k: v for k, v in plan.info.items() if isinstance(v, (int, float, str, bool, list, tuple))}
                return {"status": "TIMED", "case": case.id, "default_plan": info, "declined": declined,
                        "results": res}
            _row("time_edge", f"time|{case.id}", skip, run)


def stage_time_edge_compile(skip):
    """torch.compile beside eager and the default, compile paid in prepare (outside the timing)."""
    from harness import problems, registry

    registry.load_backends()
    order = [("softmax", c) for c in _edge_cases(problems.get("softmax"))]
    order += [("gemm_epilogue", c) for c in _edge_cases(problems.get("gemm_epilogue"))]
    order += [("vector_add", c) for c in _edge_cases(problems.get("vector_add"))]
    for name, case in order:
        prob = problems.get(name)

        def run(case=case, name=name, prob=prob):
            t0 = time.perf_counter()
            cands = {"torch": _impl_prep(f"torch:{name}", case), "torch.compile": _impl_prep(f"torch:{name}_compile", case),
                     f"cuda:{name}": _impl_prep(f"cuda:{name}", case)}
            res = _time_case(prob, case, cands)
            return {"status": "TIMED", "case": case.id, "results": res, "wall_s": round(time.perf_counter() - t0, 2)}
        _row("time_edge_compile", f"compile|{case.id}", skip, run)


STAGES = {"verify_edge": stage_verify_edge, "time_edge": stage_time_edge, "time_edge_compile": stage_time_edge_compile,
          "verify_defaults": stage_verify_defaults, "time_softmax": stage_time_softmax,
          "time_gemm": stage_time_gemm, "time_vector_add": stage_time_vector_add,
          "probe_vector_add": stage_probe_vector_add,
          "verify_variants": stage_verify_variants, "time_gemm_small": stage_time_gemm_small}
DEFAULT_STAGES = ("verify_edge", "time_edge", "time_edge_compile")


# ---------------------------------------------------------------------------------------------------
# driver side

def _read(stage):
    p = OUT / f"{stage}.jsonl"
    rows, started = [], []
    if p.is_file():
        for line in p.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "start" in r:
                started.append(r["start"])
            else:
                rows.append(r)
    done = {r["key"] for r in rows}
    return rows, [k for k in started if k not in done]


def run_stage(stage, deadline, order=DEFAULT_STAGES):
    # this stage's share of the time left (what earlier stages did not use goes to the later ones)
    later = list(order)[list(order).index(stage):]
    budget = (deadline - time.time()) * BUDGET[stage] / sum(BUDGET[s] for s in later)
    end = time.time() + max(budget, 0)
    crashes = []
    for attempt in range(4):
        left = end - time.time()
        if left < 5:
            break
        rows, lost = _read(stage)
        skip = {r["key"] for r in rows} | set(crashes)
        for k in lost:
            if k not in crashes:
                crashes.append(k)
                _log(stage, {"key": k, "status": "CRASH", "reason": "the process died or hung in this row"})
                skip.add(k)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", stage, "--skip-file",
               str(OUT / f"{stage}.skip")]
        (OUT / f"{stage}.skip").write_text(json.dumps(sorted(skip)))
        try:
            r = subprocess.run(cmd, timeout=left, capture_output=True, text=True, cwd=ROOT)
            if r.returncode == 0:
                break
            (OUT / f"{stage}.stderr.txt").write_text(r.stderr[-20000:])
        except subprocess.TimeoutExpired:
            _log(stage, {"key": f"{stage}:timeout", "status": "TIMEOUT", "reason": f"stage budget {budget:.0f} s"})
            break
    rows, lost = _read(stage)
    for k in lost:
        rows.append({"key": k, "status": "CRASH", "reason": "unfinished when the stage ended"})
    return rows


def table(results):
    lines = []
    for stage, rows in results.items():
        counts = {}
        for r in rows:
            counts[r.get("status")] = counts.get(r.get("status"), 0) + 1
        lines.append(f"{stage}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=str)))
        for r in rows:
            if r.get("status") in ("FAIL", "ERROR", "CRASH", "TIMEOUT"):
                lines.append(f"  {r['status']:5} {r['key']}: {str(r.get('reason'))[:160]}")
    for stage in ("time_softmax", "time_vector_add"):
        for r in results.get(stage, []):
            res = r.get("results") or {}
            copy = (res.get("copy") or {}).get("median_s")
            if not copy:
                continue
            cells = []
            for name in ("cuda:softmax", "cupy:softmax", "cuda:vector_add", "torch"):
                if (res.get(name) or {}).get("median_s"):
                    cells.append(f"{name} {100 * copy / res[name]['median_s']:.0f}%")
            best = min(((v["median_s"], k) for k, v in res.items() if v.get("median_s") and k not in ("copy", "torch")
                        and (v.get("check") or "PASS").startswith("PASS")), default=(None, None))
            if best[0]:
                cells.append(f"best {best[1]} {100 * copy / best[0]:.0f}%")
            lines.append(f"  {r['case']}: " + ", ".join(cells) + " of copy")
    for r in results.get("time_gemm", []) + results.get("time_gemm_small", []):
        res = r.get("results") or {}
        t = (res.get("torch") or {}).get("median_s")
        if not t:
            continue
        cells = [f"{k} {t / v['median_s']:.2f}x" for k, v in res.items()
                 if v.get("median_s") and k != "torch" and (v.get("check") or "PASS").startswith("PASS")]
        cells += [f"{k} {v.get('check') or v.get('error')}"[:120] for k, v in res.items()
                  if not (v.get("check") or "PASS").startswith("PASS") or "error" in v]
        lines.append(f"  {r['case']} ({r.get('default_plan', {}).get('path')}): " + ", ".join(cells) + " of torch")
    # edge: per case the defaults and the best passing candidate against the faster of torch eager
    # and torch.compile (the compile stage's figure where it ran)
    comp = {r.get("case"): (r.get("results") or {}).get("torch.compile", {}).get("median_s")
            for r in results.get("time_edge_compile", [])}
    for r in results.get("time_edge", []):
        res = r.get("results") or {}
        ok = {k: v["median_s"] for k, v in res.items() if v.get("median_s") and k != "copy"
              and (v.get("check") or "PASS").startswith("PASS")}
        ref = min(x for x in (ok.get("torch"), comp.get(r.get("case"))) if x) if ok.get("torch") else None
        if not ref:
            continue
        cand = {k: v for k, v in ok.items() if k != "torch" and not k.startswith(("cuda:", "cupy:"))
                or k.endswith("_simple")}
        best = min(cand.items(), key=lambda kv: kv[1]) if cand else (None, None)
        cells = [f"{k} {ref / ok[k]:.2f}x" for k in ok if k.startswith(("cuda:", "cupy:")) and not k.endswith("_simple")]
        if best[0]:
            cells.append(f"best {best[0]} {ref / best[1]:.2f}x")
        bad = [k for k, v in res.items() if not (v.get("check") or "PASS").startswith("PASS")]
        lines.append(f"  {r['case']} [{(r.get('default_plan') or {}).get('path')}] {ref * 1e6:.1f} us ref: "
                     + ", ".join(cells) + (f"; FAIL {bad}" if bad else ""))
    return "\n".join(lines)


def main():
    if "--stage" in sys.argv:
        stage = sys.argv[sys.argv.index("--stage") + 1]
        skip = set()
        if "--skip-file" in sys.argv:
            p = Path(sys.argv[sys.argv.index("--skip-file") + 1])
            skip = set(json.loads(p.read_text())) if p.is_file() else set()
        STAGES[stage](skip)
        return 0
    # --stages a,b: those stages only, in that order; --total S: their whole time budget
    order = (sys.argv[sys.argv.index("--stages") + 1].split(",") if "--stages" in sys.argv else list(DEFAULT_STAGES))
    unknown = [x for x in order if x not in STAGES]
    if unknown:
        sys.exit(f"--stages: unknown stage(s) {unknown}; known: {sorted(STAGES)}")
    total = float(sys.argv[sys.argv.index("--total") + 1]) if "--total" in sys.argv else TOTAL_S
    OUT.mkdir(parents=True, exist_ok=True)
    for stage in order:
        (OUT / f"{stage}.jsonl").unlink(missing_ok=True)
    t0 = time.time()
    deadline = t0 + total
    results = {}
    for stage in order:
        results[stage] = run_stage(stage, deadline, order)
        (OUT / "gpu_cuda.json").write_text(json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                       "seconds": round(time.time() - t0, 1), "stages": results},
                                                      indent=1, default=str))
    print(table(results))
    print(f"gpu_cuda: {time.time() - t0:.0f} s, JSON in {OUT / 'gpu_cuda.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
