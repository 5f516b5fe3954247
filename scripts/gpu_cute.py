#!/usr/bin/env python3
"""One GPU call for the CuTe DSL layer, under 4 minutes of wall time.

1. verify: every ``cute:`` implementation against the float64 reference (``harness.verify``) on
   the verify suite (seeds 0, 1) and the models suite (seed 0); FAIL rows printed with reasons.
2. time: per shape class the plans the dispatch tables choose between - softmax kernel by bytes per
   row (rows / block / split / cluster, split chunk size), GEMM schedule / tile / split count for
   M = 16 and 256, the predicated path for N = 50257 - on the models shapes and a few off-suite
   shapes of the same classes, interleaved with torch's eager op and a copy of the same bytes
   (``harness.timing.time_cold``, 0.3 s cap). Every timed candidate's output is checked too.
3. JSON under $OUT (default ./gpu_out): gpu_cute.json (merged) and one file per section, written
   as rows finish; a short table last.

Run from the repository root on the GPU machine after the offline build:

    python3 -m pip install -q --no-build-isolation --no-deps --no-index -e .
    python3 scripts/gpu_cute.py

Sections run in subprocesses with wall-clock budgets, so a kernel that hangs (an unbounded
mbarrier wait) costs its own section only: three verify sections (vector add + softmax, GEMM
default + twin, GEMM variants) run side by side while the timing section compiles its candidates;
timing starts, alone on the GPU, once every verify section has ended. Rows past a section's
deadline are recorded as skipped (defaults first, so those are the last to be cut).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT") or ROOT / "gpu_out")
BUDGET_S = 235.0                # whole run
VERIFY_S = 118.0                # both verify sections (in parallel)
GO = "timing.go"                # written when the verify sections have ended
VERIFY_SECTIONS = ("verify_small", "verify_gemm", "verify_gemmvar")

# -- what is timed -------------------------------------------------------------------------------
# softmax: (M, N, dtype); models shapes first, then off-suite shapes of the same classes
SOFTMAX_SHAPES = [
    (32768, 512, "bfloat16"), (32768, 1024, "bfloat16"), (8192, 2048, "float16"), (32768, 4096, "bfloat16"),
    (4096, 32000, "bfloat16"), (4096, 50257, "bfloat16"), (4096, 128256, "bfloat16"), (4096, 151936, "bfloat16"),
    (4096, 32000, "float32"), (4096, 50257, "float32"), (4096, 128256, "float32"), (4096, 151936, "float32"),
    (65536, 128, "bfloat16"), (16384, 8192, "float32"), (8192, 16384, "bfloat16"), (2000, 50000, "float16"),
    (1, 262147, "float32"), (8192, 12000, "bfloat16"), (4096, 24000, "float32"), (4096, 40000, "bfloat16"),
]
# GEMM: (M, N, K, dtype, act); M = 16 / 256 models shapes, the N = 50257 head at every M, the
# large models shapes (default only), then off-suite shapes
GEMM_SHAPES = [
    (16, 6144, 4096, "bfloat16", "none"), (16, 28672, 4096, "bfloat16", "gelu"), (16, 4096, 14336, "bfloat16", "none"),
    (16, 8192, 28672, "bfloat16", "none"), (16, 50257, 768, "bfloat16", "none"),
    (16, 6144, 2048, "bfloat16", "none"), (16, 6144, 8192, "bfloat16", "none"),   # K scaling: fixed vs per-byte cost
    (256, 6144, 4096, "bfloat16", "none"), (256, 28672, 4096, "bfloat16", "gelu"), (256, 4096, 14336, "bfloat16", "none"),
    (256, 8192, 28672, "bfloat16", "none"), (256, 50257, 768, "bfloat16", "none"),
    (4096, 50257, 768, "bfloat16", "none"), (4096, 6144, 4096, "bfloat16", "none"),
    (4096, 28672, 4096, "bfloat16", "gelu"), (4096, 4096, 14336, "bfloat16", "none"),
    (4096, 8192, 28672, "bfloat16", "none"),
    (128, 8192, 8192, "float16", "relu"), (32, 5000, 3000, "bfloat16", "gelu"), (300, 2000, 1000, "bfloat16", "relu"),
    (2048, 50257, 1024, "bfloat16", "none"),
]


# -- shared helpers ---------------------------------------------------------------------------------
def log(*a):
    print(*a, flush=True)


def save(name: str, data) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"gpu_cute_{name}.json").write_text(json.dumps(data, indent=1, default=str))


def left(deadline: float) -> float:
    return deadline - time.time()


def err_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:600]


# -- section: verify ----------------------------------------------------------------------------------
class ContextLost(Exception):
    """A kernel left the CUDA context unusable (illegal address...): the section stops here and the
    driver starts it again past this row."""


def _context_ok() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").item()
        return True
    except Exception:
        return False


def section_verify(which: str, deadline: float) -> None:
    import torch

    from harness import problems, registry
    from harness.verify import verify_case

    registry.load_backends()
    plist = ("vector_add", "softmax") if which == "small" else ("gemm_epilogue",)
    roles = ("variant",) if which == "gemmvar" else (("default", "simple") if which == "gemm" else
                                                      ("default", "simple", "variant"))
    f = OUT / f"gpu_cute_verify_{which}.json"
    res = json.loads(f.read_text()) if f.exists() else {"section": f"verify_{which}", "rows": []}
    rows, done = res["rows"], len(res["rows"])          # resumed after a lost context: skip those
    res["backend_errors"] = registry.BACKEND_ERRORS
    index = 0
    # defaults first on both suites, then the twins and variants on the verify suite, then the
    # rest of the models suite: what the deadline cuts off is the least important
    impls = [i for i in registry.select(layer="cute") if i.problem in plist]
    passes = [(role, suite) for role, suite in (("default", "verify"), ("default", "models"), ("simple", "verify"),
                                                ("variant", "verify"), ("simple", "models"), ("variant", "models"))]
    for role, suite in passes:
        if role not in roles:
            continue
        seeds = (0, 1) if suite == "verify" else (0,)
        for im in sorted((i for i in impls if i.role == role), key=lambda i: i.key):
            prob = problems.get(im.problem)
            for case in prob.cases(suite):
                index += 1
                if index <= done:
                    continue
                row = {"id": im.id, "role": im.role, "suite": suite, "case": case.id}
                if left(deadline) < 3:
                    row["status"] = "skipped (time budget)"
                    rows.append(row)
                    continue
                why = im.supports(case)
                if why:
                    row.update(status="SKIP" if im.role != "default" else "FAIL", reason=f"declined: {why}")
                else:
                    t0 = time.time()
                    try:
                        c = verify_case(im, prob, case, "cuda", seeds=seeds, repeat=True)
                        row.update(status="PASS" if c.ok else "FAIL", reason=c.reason,
                                   rel_err=c.rel_err, max_abs_err=c.max_abs_err,
                                   plan=(c.details.get("info") or {}).get("config"),
                                   first_call_s=round(c.details.get("first_call_s", 0.0), 3))
                    except Exception as e:
                        row.update(status="FAIL", reason=f"crashed: {err_text(e)}")
                    row["s"] = round(time.time() - t0, 2)
                if row["status"] == "FAIL":
                    log(f"FAIL {im.id} {suite} {case.id}: {row.get('reason', '')[:300]}")
                rows.append(row)
                save(f"verify_{which}", res)
                if row["status"] == "FAIL" and not _context_ok():
                    raise ContextLost(f"{im.id} {case.id}")
    res["complete"] = True
    save(f"verify_{which}", res)


# -- section: timing ------------------------------------------------------------------------------------
@contextlib.contextmanager
def _tables(**entries):
    """``cutlass_src.dispatch`` with these table entries replaced for the duration (the planners read
    them at call time), then restored."""
    from cutlass_src import dispatch

    saved = {k: getattr(dispatch, k) for k in entries}
    try:
        for k, v in entries.items():
            setattr(dispatch, k, v)
        yield
    finally:
        for k, v in saved.items():
            setattr(dispatch, k, v)


def _add(out: dict, label: str, plan) -> None:
    """A candidate under ``label`` unless it is empty or a plan already listed under another label."""
    if plan and plan not in out.values():
        out[label] = plan


def softmax_candidates(M, N, es, aligned):
    """label -> plan: the planner's choice and the alternatives its byte thresholds choose
    between for this class of row (short: rows / block; medium: block / rows / split / smem; long:
    split, split with half the chunk, block, cluster, smem, smem with half / twice the cluster)."""
    from cutlass_src import dispatch

    out = {"default": dispatch.plan_softmax(M, N, es, aligned)}
    row = N * es
    if row <= dispatch.SOFTMAX_ROWS_MAX_BYTES:
        kernels = ("rows", "block")
    elif row <= dispatch.SOFTMAX_BLOCK_MAX_BYTES:
        kernels = ("block", "rows", "split", "smem")
    else:
        kernels = ("split", "block", "cluster", "smem")
    for kernel in kernels:
        try:
            _add(out, kernel, dispatch.plan_softmax(M, N, es, aligned, kernel=kernel))
        except ValueError:
            continue
    if row <= dispatch.SOFTMAX_ROWS_MAX_BYTES:          # rows: half the vectors a thread holds
        with _tables(SOFTMAX_ROWS_VECTORS=max(1, dispatch.SOFTMAX_ROWS_VECTORS // 2)):
            _add(out, "rows_half_vectors", dispatch.plan_softmax(M, N, es, aligned, kernel="rows"))
    if row > dispatch.SOFTMAX_BLOCK_MAX_BYTES:         # split chunk size: half the table's
        vectors = dispatch.SOFTMAX_SPLIT_VECTORS
        with _tables(SOFTMAX_SPLIT_VECTORS={**vectors, es: vectors[es] // 2}):
            _add(out, "split_half_chunk", dispatch.plan_softmax(M, N, es, aligned, kernel="split"))
    if row > dispatch.SOFTMAX_BLOCK_MAX_BYTES // 2:    # smem: the slice count either side of the rule's
        sp = dispatch.plan_smem(M, N, es, dispatch.num_sms())
        for label, c in (("smem_half_c", sp and sp["cluster"] // 2), ("smem_double_c", sp and sp["cluster"] * 2)):
            p = dispatch.plan_smem(M, N, es, dispatch.num_sms(), cluster=c) if c else None
            _add(out, label, p if p and p["cluster"] <= 8 else None)
        # smem: twice / half the rule's threads an SM (up to 1024 a CTA)
        for label, f in (("smem_threads_x2", 2.0), ("smem_threads_half", 0.5)):
            with _tables(SOFTMAX_SMEM_THREADS_PER_SM=int(dispatch.SOFTMAX_SMEM_THREADS_PER_SM * f),
                         SOFTMAX_SMEM_CLUSTER_THREADS_PER_SM=int(dispatch.SOFTMAX_SMEM_CLUSTER_THREADS_PER_SM * f),
                         SOFTMAX_SMEM_MAX_THREADS=1024):
                _add(out, label, dispatch.plan_smem(M, N, es, dispatch.num_sms()))
    return out


def gemm_candidates(M, N, K, widths):
    """label -> plan: the planner's, then schedule / tile / split alternatives (deduplicated)."""
    from cutlass_src import dispatch

    out = {"default": dispatch.plan_gemm(M, N, K, widths)}
    if M >= 1024 and all(k == "tma" for k in out["default"]["loads"]):
        return out                                    # large aligned shapes: the default only
    tries = [("ws_s1", dict(schedule="ws")), ("pingpong", dict(schedule="pingpong")),
             ("splitk", dict(min_splits=2))]
    if N == 6144:                                     # the predicated path on aligned rows vs TMA
        tries.append(("no_tma", dict(tma=False)))
    for label, kw in tries:
        try:
            p = dispatch.plan_gemm(M, N, K, widths, **kw)
        except ValueError:
            continue
        if label == "ws_s1":
            p["splits"] = 1
        _add(out, label, p)
    for entry in dispatch.GEMM_TILES:                 # each other tile, its best split count by the model
        if (entry[1] == 64) != (M <= 64):
            continue
        with _tables(GEMM_TILES=(entry,)):
            _add(out, f"{entry[0]}_{entry[1]}x{entry[2]}", dispatch.plan_gemm(M, N, K, widths))
    d = out["default"]
    if any(k != "tma" for k in d["loads"][:2]):       # ragged rows: realign vs element-wise copies
        with _tables(GEMM_RAGGED_LOAD="vector"):
            out["ragged_vector"] = dispatch.plan_gemm(M, N, K, widths)
    top = max(1, -(-K // 64) // dispatch.GEMM_MIN_KTILES_PER_SPLIT)
    if d["splits"] > 1:                               # the same tile without split-K, and 2x splits
        out.setdefault("no_split", {**d, "splits": 1})
        if d["splits"] * 2 <= top:
            out["splits_x2"] = {**d, "splits": d["splits"] * 2}
    if M <= 64:                                       # a stream of B: every split count the model weighs
        for sp in (1, 2, 3, 4, 6, 8, 12):
            if sp <= top:
                _add(out, f"s{sp}", {**d, "splits": sp})
    return out


def _softmax_prepare(x, out, plan):
    from backends.cute_layer import _sm_prepare

    return _sm_prepare(x, out, plan)[0]


def section_timing(deadline: float, go: Path, gemm_max_m: int = 0, softmax_only: bool = False,
                   labels: tuple[str, ...] = (), min_row_bytes: int = 0) -> None:
    """Compile every candidate, wait for ``go``, then time them (``gemm_max_m``: GEMM shapes of at
    most that many rows and no softmax shape, as ``--timing-only --gemm-max-m`` asks;
    ``softmax_only``: no GEMM shape; ``labels``: only the softmax candidates whose label starts
    with one of these, the default always; ``min_row_bytes``: softmax rows of at least this many
    bytes)."""
    import torch

    from cutlass_src import dispatch, gemm_launch
    from harness import problems, registry
    from harness.timing import TimingConfig, time_cold
    from harness.verify import check_output

    registry.load_backends()
    cfg = TimingConfig(min_samples=5, max_samples=60, rel_spread=0.02, time_cap_s=0.3, warmup_ms=5)
    f = OUT / "gpu_cute_timing.json"
    res = json.loads(f.read_text()) if f.exists() else {"section": "timing", "softmax": [], "gemm": [], "compile": []}
    done = {tuple(r["shape"]) for r in res["softmax"] + res["gemm"] if "shape" in r and "label" not in r}
    sm_prob, gm_prob = problems.get("softmax"), problems.get("gemm_epilogue")

    # 1. compile every candidate (the verify sections run meanwhile)
    plans_sm, plans_gm = {}, {}
    from cutlass_src.gemm_launch import access_elems

    for M, N, dt in ([] if gemm_max_m else SOFTMAX_SHAPES):
        es = 4 if dt == "float32" else 2
        if (M, N, dt) not in done and N * es >= min_row_bytes:
            cands = softmax_candidates(M, N, es, (N * es) % 16 == 0)
            plans_sm[(M, N, dt)] = {k: v for k, v in cands.items()
                                    if k == "default" or not labels or k.startswith(labels)}
    for M, N, K, dt, act in ([] if softmax_only else GEMM_SHAPES):
        if gemm_max_m and M > gemm_max_m:
            continue
        if (M, N, K, dt, act) not in done:
            plans_gm[(M, N, K, dt, act)] = gemm_candidates(M, N, K, (access_elems(2 * K), access_elems(2 * N),
                                                                     access_elems(2 * N)))
    from backends.cute_layer import _sm_compile

    for key, cands in list(plans_sm.items()) + list(plans_gm.items()):
        dt = getattr(torch, key[2] if len(key) == 3 else key[3])
        for label, plan in cands.items():
            if left(deadline) < 60:
                break
            t0 = time.time()
            try:
                (_sm_compile(dt, plan) if len(key) == 3 else gemm_launch.compile_gemm(dt, plan))
                res["compile"].append({"shape": key, "label": label, "s": round(time.time() - t0, 2)})
            except Exception as e:
                res["compile"].append({"shape": key, "label": label, "error": err_text(e)})
                log(f"compile FAIL {key} {label}: {err_text(e)}")
    save("timing", res)

    # 2. wait until the verify sections are done: timing alone on the GPU
    while not go.exists() and left(deadline) > 30:
        time.sleep(0.2)
    res.setdefault("waited_until", time.time())
    if "copy_ceiling_bytes_per_s" not in res:
        n = 2 ** 28
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        st = time_cold({"copy": lambda: y.copy_(x)}, cfg, "cuda")["copy"]
        res["copy_ceiling_bytes_per_s"] = 2 * n * 4 / st.quartiles()[1]
        del x, y
        save("timing", res)

    def sample(M):
        """Rows the timed outputs are checked on (every row up to 64, else 64 spread ones)."""
        return torch.linspace(0, M - 1, min(M, 64), device="cuda").round().long().unique()

    def timed(kind, key, case, prob, launches, outs, ref, traffic, flops, rows):
        row = {"shape": key, "case": case.id, "plans": {}, "results": {}}
        try:
            stats = time_cold(launches, cfg, "cuda")
        except Exception as e:
            row["error"] = err_text(e)
            return row
        for label, s in stats.items():
            j = s.to_json(keep_raw=False)
            med = j["median_s"]
            r = {"median_us": round(med * 1e6, 2), "iqr_us": round(j["iqr_s"] * 1e6, 2),
                 "host_us": j["host_us"]}
            if traffic:
                r["GB/s"] = round(traffic / med / 1e9, 1)
            if flops:
                r["TFLOP/s"] = round(flops / med / 1e12, 1)
            if label in outs:
                c = check_output(prob, case, outs[label][rows], ref)
                r["check"] = "ok" if c.ok else c.reason[:200]
            row["results"][label] = r
        return row

    for (M, N, dt), cands in plans_sm.items():
        if left(deadline) < 8:
            res["softmax"].append({"shape": (M, N, dt), "status": "skipped (time budget)"})
            continue
        case = sm_prob.case(M=M, N=N, dtype=dt)
        try:
            (x,) = sm_prob.make_inputs(case, "cuda", 0)
            rows = sample(M)
            ref = sm_prob.reference((x[rows],), case)
            launches, outs = {}, {}
            for label, plan in cands.items():
                try:
                    outs[label] = torch.empty_like(x)
                    launches[label] = _softmax_prepare(x, outs[label], plan)
                except Exception as e:
                    res["softmax"].append({"shape": (M, N, dt), "label": label, "error": err_text(e)})
            launches["torch"] = registry.get("softmax", "torch:softmax").prepare(case, (x,), None)
            yc = torch.empty_like(x)
            launches["copy"] = lambda: yc.copy_(x)
            row = timed("softmax", (M, N, dt), case, sm_prob, launches, outs, ref, sm_prob.traffic(case), 0, rows)
            row["plans"] = cands
            res["softmax"].append(row)
            del x, ref, outs, launches, yc
        except Exception as e:
            res["softmax"].append({"shape": (M, N, dt), "error": err_text(e), "trace": traceback.format_exc()[-800:]})
        save("timing", res)
        if not _context_ok():
            raise ContextLost(str((M, N, dt)))
        torch.cuda.empty_cache()

    for (M, N, K, dt, act), cands in plans_gm.items():
        if left(deadline) < 8:
            res["gemm"].append({"shape": (M, N, K, dt, act), "status": "skipped (time budget)"})
            continue
        case = gm_prob.case(M=M, N=N, K=K, dtype=dt, act=act, bias=1)
        try:
            a, b, bias = gm_prob.make_inputs(case, "cuda", 0)
            rows = sample(M)
            ref = gm_prob.reference((a[rows], b, bias), case)
            launches, outs = {}, {}
            for label, plan in cands.items():
                try:
                    outs[label] = torch.empty(M, N, dtype=a.dtype, device="cuda")
                    launches[label] = gemm_launch.prepare_gemm(a, b, bias, outs[label], act, plan)[0]
                except Exception as e:
                    res["gemm"].append({"shape": (M, N, K, dt, act), "label": label, "error": err_text(e)})
            launches["torch"] = registry.get("gemm_epilogue", "torch:gemm_epilogue").prepare(case, (a, b, bias), None)
            row = timed("gemm", (M, N, K, dt, act), case, gm_prob, launches, outs, ref, 0, gm_prob.flops(case), rows)
            row["plans"] = cands
            res["gemm"].append(row)
            del a, b, bias, ref, outs, launches
        except Exception as e:
            res["gemm"].append({"shape": (M, N, K, dt, act), "error": err_text(e), "trace": traceback.format_exc()[-800:]})
        save("timing", res)
        if not _context_ok():
            raise ContextLost(str((M, N, K, dt, act)))
        torch.cuda.empty_cache()
    res["complete"] = True
    save("timing", res)


# -- driver ---------------------------------------------------------------------------------------------
def machine() -> dict:
    import torch

    info = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        import cutlass

        info["cutlass_dsl"] = getattr(cutlass, "__version__", "?")
    except Exception as e:
        info["cutlass_dsl"] = err_text(e)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, sms=p.multi_processor_count, capability=f"{p.major}.{p.minor}")
    try:
        from cutlass_src import use_tvm_ffi

        info["call"] = "tvm-ffi" if use_tvm_ffi() else "from_dlpack"
    except Exception:
        pass
    return info


def table(merged: dict) -> None:
    log("\n== verify (PASS / FAIL / SKIP / skipped) ==")
    counts: dict = {}
    for sec in VERIFY_SECTIONS:
        for r in (merged.get(sec) or {}).get("rows", []):
            k = (r["id"], r["suite"])
            c = counts.setdefault(k, {"PASS": 0, "FAIL": 0, "SKIP": 0, "skipped": 0})
            st = r["status"] if r["status"] in c else "skipped"
            c[st] += 1
    for (iid, suite), c in sorted(counts.items()):
        log(f"{iid:34s} {suite:7s} {c['PASS']:4d} {c['FAIL']:4d} {c['SKIP']:4d} {c['skipped']:4d}")
    t = merged.get("timing") or {}
    ceil = t.get("copy_ceiling_bytes_per_s")
    log(f"\n== softmax: % of copy ({(ceil or 0) / 1e9:.0f} GB/s), x torch ==")
    for row in t.get("softmax", []):
        r = row.get("results")
        if not r:
            log(f"{row.get('shape')}: {row.get('status') or row.get('error', '')[:120]}")
            continue
        ok = {k: v for k, v in r.items() if k not in ("torch", "copy") and v.get("check", "ok") == "ok"}
        best = min(ok, key=lambda k: ok[k]["median_us"]) if ok else None
        d = r.get("default", {})
        pct = lambda v: f"{100 * v['GB/s'] * 1e9 / ceil:5.1f}%" if ceil and v.get("GB/s") else "  ?  "
        xt = lambda v: f"{r['torch']['median_us'] / v['median_us']:.2f}x" if "torch" in r and v else "?"
        log(f"{str(row['shape']):28s} default {row['plans']['default']['kernel']:6s} {pct(d)} {xt(d):>6s}"
            f" | best {best} {pct(r[best]) if best else ''} | torch {pct(r.get('torch', {}))}"
            f"{'' if d.get('check', 'ok') == 'ok' else '  CHECK FAIL: ' + d['check'][:60]}")
    log("\n== GEMM: TFLOP/s, x torch act(addmm) ==")
    for row in t.get("gemm", []):
        r = row.get("results")
        if not r:
            log(f"{row.get('shape')}: {row.get('status') or row.get('error', '')[:120]}")
            continue
        ok = {k: v for k, v in r.items() if k != "torch" and v.get("check", "ok") == "ok"}
        best = min(ok, key=lambda k: ok[k]["median_us"]) if ok else None
        d = r.get("default", {})
        p = row["plans"]["default"]
        xt = lambda v: f"{r['torch']['median_us'] / v['median_us']:.2f}x" if "torch" in r and v.get("median_us") else "?"
        log(f"{str(row['shape'][:3]):20s} default {p['schedule']}{p['tile']} s{p['splits']} {d.get('TFLOP/s', '?'):>6} "
            f"{xt(d):>6s} | best {best} {xt(r[best]) if best else ''} | torch {r.get('torch', {}).get('TFLOP/s', '?')}"
            f"{'' if d.get('check', 'ok') == 'ok' else '  CHECK FAIL: ' + d['check'][:60]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--section", choices=VERIFY_SECTIONS + ("timing",))
    ap.add_argument("--deadline", type=float)
    ap.add_argument("--go", default=None)
    ap.add_argument("--timing-only", action="store_true", help="the timing section alone (no verify sections)")
    ap.add_argument("--gemm-max-m", type=int, default=0, help="with --timing-only: GEMM shapes of M <= this only")
    ap.add_argument("--softmax-only", action="store_true", help="with --timing-only: softmax shapes only")
    ap.add_argument("--softmax-labels", default="", help="with --timing-only: comma-separated label prefixes "
                    "of the softmax candidates to time (the default plan always)")
    ap.add_argument("--softmax-shape", action="append", default=[], metavar="M,N,DTYPE",
                    help="with --timing-only: these softmax shapes instead of the list (repeatable)")
    ap.add_argument("--softmax-min-row-bytes", type=int, default=0, help="with --timing-only: softmax rows "
                    "of at least this many bytes")
    args = ap.parse_args()
    if args.softmax_shape:
        SOFTMAX_SHAPES[:] = [(int(m), int(n), dt) for m, n, dt in (x.split(",") for x in args.softmax_shape)]
    if args.timing_only:
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "gpu_cute_timing.json").unlink(missing_ok=True)
        (OUT / GO).write_text("timing only\n")
        section_timing(time.time() + BUDGET_S - 5, OUT / GO, args.gemm_max_m, args.softmax_only,
                       tuple(x for x in args.softmax_labels.split(",") if x), args.softmax_min_row_bytes)
        f = OUT / "gpu_cute_timing.json"
        table({"timing": json.loads(f.read_text()) if f.exists() else None})
        return 0
    if args.section:
        try:
            if args.section == "timing":
                section_timing(args.deadline, Path(args.go))
            else:
                section_verify(args.section.split("_")[1], args.deadline)
        except ContextLost as e:
            log(f"[gpu_cute] {args.section}: CUDA context lost after {e}")
            return 3
        except Exception:
            traceback.print_exc()
            return 1
        return 0

    t0 = time.time()
    OUT.mkdir(parents=True, exist_ok=True)
    go = OUT / GO
    for old in [go] + [OUT / f"gpu_cute_{s}.json" for s in VERIFY_SECTIONS + ("timing",)]:
        if old.exists():
            old.unlink()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    me = [sys.executable, str(Path(__file__).resolve())]
    procs = {}
    for sec, dl in [(v, t0 + VERIFY_S) for v in VERIFY_SECTIONS] + [("timing", t0 + BUDGET_S - 5)]:
        cmd = me + ["--section", sec, "--deadline", str(dl), "--go", str(go)]
        procs[sec] = (subprocess.Popen(cmd, cwd=ROOT, env=env), dl)
    status = {sec: [] for sec in VERIFY_SECTIONS}
    pending = dict(procs)
    pending.pop("timing")
    while pending:
        for sec, (p, dl) in list(pending.items()):
            rc = p.poll()
            if rc is None and time.time() < dl + 4:
                continue
            if rc is None:
                p.kill()
                p.wait()
                status[sec].append("killed at its deadline (a hang?)")
                log(f"[gpu_cute] {sec} killed at its deadline")
                del pending[sec]
                continue
            status[sec].append(rc)
            f = OUT / f"gpu_cute_{sec}.json"
            done = json.loads(f.read_text()).get("complete") if f.exists() else False
            if rc == 3 and not done and time.time() < dl - 10:     # lost its CUDA context: resume
                cmd = me + ["--section", sec, "--deadline", str(dl), "--go", str(go)]
                pending[sec] = (subprocess.Popen(cmd, cwd=ROOT, env=env), dl)
                log(f"[gpu_cute] {sec} lost its CUDA context; resumed past the crashing row")
            else:
                del pending[sec]
        time.sleep(0.2)
    go.write_text("go")
    p, dl = procs["timing"]
    status["timing"] = []
    while True:
        try:
            rc = p.wait(timeout=max(1.0, dl + 3 - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            status["timing"].append("killed at its deadline (a hang?)")
            log("[gpu_cute] timing killed at its deadline")
            break
        status["timing"].append(rc)
        if rc != 3 or time.time() > dl - 20:
            break
        log("[gpu_cute] timing lost its CUDA context; resumed past the crashing shape")
        cmd = me + ["--section", "timing", "--deadline", str(dl), "--go", str(go)]
        p = subprocess.Popen(cmd, cwd=ROOT, env=env)
    merged = {"command": "python3 scripts/gpu_cute.py", "machine": machine(), "status": status,
              "wall_s": None, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    for sec in VERIFY_SECTIONS + ("timing",):
        f = OUT / f"gpu_cute_{sec}.json"
        merged[sec] = json.loads(f.read_text()) if f.exists() else None
    merged["wall_s"] = round(time.time() - t0, 1)
    (OUT / "gpu_cute.json").write_text(json.dumps(merged, indent=1, default=str))
    table(merged)
    log(f"\n[gpu_cute] {merged['wall_s']} s; JSON in {OUT / 'gpu_cute.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
