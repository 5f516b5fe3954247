"""The worker: runs tasks (one case x several implementations) and reports rows as JSON lines.

It runs in a subprocess of the CLI (see ``harness.runner``) so that an implementation that
crashes the process or breaks the CUDA context (illegal address), or hangs, takes down only the
worker: the parent reports that row and starts a new worker for the rest.

Protocol: the job arrives as JSON on stdin; events leave as JSON lines on the original stdout
(whatever the implementations print is redirected to stderr).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback

from . import gpumem
from .errors import Unsupported

CPU_TRAFFIC_LIMIT = 64 * 10 ** 6   # bytes: larger cases are not executed in the CPU mode
# FLOPs: larger cases are not executed in the CPU mode either. Each executed case is checked on
# three seeds against a float64 reference and a float64 bound (two more GEMMs a seed), and torch's
# fp16 GEMM runs at a fraction of a GFLOP/s on a CPU (docs/results/cpu-2core/wall.txt): such a case
# tells nothing a smaller one does not, and the cases above this stay GPU rows.
CPU_FLOP_LIMIT = 2 ** 29
BIG_CASE_BYTES = 256 * 2 ** 20   # a large case: gives its memory back at once; a heavy lane's in compare


class _Emitter:
    def __init__(self, stream):
        self.stream = stream

    def __call__(self, **event):
        from .jsonsafe import dumps
        self.stream.write(dumps(event) + "\n")
        self.stream.flush()


def _first_line(e: BaseException) -> str:
    msg = str(e).strip()
    line = msg.splitlines()[0] if msg else ""
    return f"{type(e).__name__}: {line}"[:500]


def cuda_context_broken(device) -> str | None:
    """After an exception on the GPU: is the CUDA context still usable?"""
    import torch
    if str(device) != "cuda":
        return None
    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        return None
    except Exception as e:
        return None if gpumem.oom(e) else _first_line(e)   # full memory is no broken context


def base_row(impl, problem, case, phase: str = "timed") -> dict:
    from .row import Row
    return Row.of(problem, case, impl.id, impl, phase).to_dict()


_VERSIONS: list = []
_AVAILABLE: dict = {}   # impl key -> (its available_fn, the answer) in this process


def _compiler_versions() -> str:
    """The installed compilers' versions (part of every compile-facts key), read once a process:
    importlib.metadata scans the site-packages for each package, milliseconds a call."""
    if not _VERSIONS:
        from importlib import metadata
        vs = []
        for pkg in ("triton", "nvidia-cutlass-dsl", "torch", "helion", "tilelang", "apache-tvm-ffi", "cuda-tile"):
            try:
                vs.append(metadata.version(pkg))
            except metadata.PackageNotFoundError:
                pass
        _VERSIONS.append("".join(vs))
    return _VERSIONS[0]


def available(impl) -> str | None:
    """``impl.available()`` once per worker process: a worker's packages, modules and device do
    not change while it runs (some layers' probes cost tens of ms, asked for every row)."""
    hit = _AVAILABLE.get(impl.key)
    if hit is None or hit[0] is not impl.available_fn:   # (a re-registered id asks afresh)
        hit = _AVAILABLE[impl.key] = (impl.available_fn, impl.available())
    return hit[1]


def _facts_cache(impl, case):
    """Where the compile facts of (implementation, case) are kept between runs: keyed by the
    content of every source file the implementation's line count reaches and by the compiler
    versions, so an edit or an upgrade recompiles. None when the sources cannot be hashed."""
    import hashlib
    from pathlib import Path

    from . import loc
    try:
        files = loc.count_impl(impl).get("files") or []
    except Exception:
        return None
    if not files:
        return None
    h = hashlib.sha256(f"{impl.key}|{case.id}".encode())
    for f in sorted(files):
        p = Path(f) if Path(f).is_absolute() else loc.REPO_ROOT / f
        try:
            h.update(p.read_bytes())
        except OSError:
            return None
    h.update(_compiler_versions().encode())
    from kltools.cache import cache_dir
    return cache_dir("compile-facts") / f"{h.hexdigest()[:32]}.json"


def _compile_only(impl, case, row) -> None:
    fn = impl.compile_only_fn
    if fn is None:
        return
    t0 = time.perf_counter()
    cache = _facts_cache(impl, case)
    try:
        if cache is not None and cache.is_file():
            facts = json.loads(cache.read_text())
            facts["from_cache"] = True
        else:
            facts = fn(case) or {}
            facts.setdefault("compile_s", round(time.perf_counter() - t0, 3))
            if cache is not None:
                from kltools.cache import write_atomic

                from .jsonsafe import dumps
                try:
                    write_atomic(cache, dumps(facts))
                except (TypeError, ValueError):
                    pass
        row["compile"] = facts
        row["compiled_for"] = facts.get("arch", "sm_90a")
    except Unsupported as e:
        row["compile_note"] = f"not compiled: {e}"
    except Exception as e:
        row["compile_note"] = f"compile failed: {_first_line(e)}"


def _skip_compiled(impl, case, row, kind: str, reason: str, compile: bool = True) -> bool:
    """A SKIP row that still compiles the implementation (for sm_90a) where it can, and says so;
    True when it compiled. (Not in the verify suite's rows: its compile facts would repeat those
    of the cases that are reported, at seconds a compile.)"""
    if compile:
        _compile_only(impl, case, row)
    if row.get("compiled_for"):
        reason += f"; compiled for {row['compiled_for']}"
    row.update(status="SKIP", kind=kind, reason=reason)
    return bool(row.get("compiled_for"))


def _cpu_limit(impl, problem, case) -> str | None:
    """Why this case is too large to execute in the CPU mode, or None: a layer's own caps
    (interpreters: output elements, FLOPs), then the harness's traffic/FLOP limits."""
    numel = math.prod(problem.out_shape(case))
    cpu_cap = impl.extra.get("cpu_max_elements")
    flop_cap = impl.extra.get("cpu_max_flops")
    if cpu_cap is not None and numel > cpu_cap:
        return f"{numel} output elements exceed this layer's CPU-mode limit ({cpu_cap}; it runs in an interpreter)"
    cols_cap = impl.extra.get("cpu_max_cols")
    cols = problem.out_shape(case)[-1]
    if cols_cap is not None and cols > cols_cap:
        return f"rows of {cols} columns exceed this layer's CPU-mode limit ({cols_cap}; it runs in an interpreter)"
    if flop_cap is not None and problem.flops(case) > flop_cap:
        return (f"{problem.flops(case):.3g} FLOP exceed this layer's CPU-mode limit ({flop_cap:.3g}; "
                f"it runs in an interpreter)")
    if problem.traffic(case) > CPU_TRAFFIC_LIMIT or problem.flops(case) > CPU_FLOP_LIMIT:
        return "too large for the CPU mode (needs a GPU)"
    return None


def _checker_of(device):
    """This process's checker for ``device`` (started by the first check), or None."""
    from . import checker
    return checker._CHECKERS.get("cuda" if str(device).startswith("cuda") else "cpu")


def _cpu_now(device) -> float | None:
    """CPU seconds used so far by this process and its checker (None when the checker's are
    unknown): the difference over a row is its cost whatever else loads the machine."""
    c = _checker_of(device)
    other = c.cpu_s() if c is not None else 0.0
    return None if other is None else time.process_time() + other


def settle(impl, problem, case, device: str, phase: str) -> dict:
    """The row of ``impl`` on ``case`` as far as it is decided before anything runs: SKIP when
    unavailable, unsupported, or not runnable on this device (then compiled where the layer can,
    except in the verify suite); ``status`` None when it is to be verified here. The compile-ahead
    pool settles the rows of GPU-only implementations in the CPU mode with this same function."""
    row = base_row(impl, problem, case, phase)
    reason = available(impl)
    if reason:
        row.update(status="SKIP", kind="unavailable", reason=reason)
        return row
    try:
        reason = impl.supports(case)
    except Exception as e:
        reason = f"supports() raised {_first_line(e)}"
    if reason:
        row.update(status="SKIP", kind="unsupported", reason=reason)
        return row
    if device not in impl.devices:
        why = "needs a GPU (this machine has none)" + (f": {impl.extra['cpu_note']}" if impl.extra.get("cpu_note") else "")
        compiled = _skip_compiled(impl, case, row, "needs-gpu", why, compile=phase != "verify-suite")
        if compiled:
            row["kind"] = "compile-only"
        if row.get("compile_note"):
            row["reason"] += f"; {row['compile_note']}"
        return row
    over = _cpu_limit(impl, problem, case) if device == "cpu" else None
    if over:
        _skip_compiled(impl, case, row, "too-large-for-cpu", f"not executed: {over}",
                       compile=phase != "verify-suite")
    return row


_VERDICT_KEYS = ("status", "kind", "reason", "max_abs_err", "rel_err", "bias", "worst_ratio", "verify_s",
                 "verify_parts", "compile", "bits")


def _verify_one(task, impl, problem, case, device, row, emit, seeds=None, checks=None) -> bool:
    """Verify ``impl`` on ``case`` (several seeds) into ``row``; True when it passed. A launch that
    broke the CUDA context reports a fatal event and ends this process. ``seeds``: only these
    (default the task's), continuing the verdict ``checks`` holds for the implementation from
    earlier seeds (``checks`` then gets this call's)."""
    from . import verify

    phase = task.get("phase", "timed")
    so_far = (checks or {}).get(impl.id)
    emit(event="step", task=task["id"], impl=impl.id, phase="verify")
    t0 = time.perf_counter()
    c0 = _cpu_now(device)
    try:
        # every seed launched twice on the GPU in the verify suite (small cases: races show
        # there); a timed case repeats its first seed only - its first and last timed
        # launches are checked too, and its outputs are the largest to compare
        check = verify.verify_case(impl, problem, case, device,
                                   seeds=tuple(seeds or task.get("seeds", verify.SEEDS)),
                                   repeat=(device == "cuda" and phase == "verify-suite"), so_far=so_far,
                                   bits=phase != "verify-suite")
    except Unsupported as e:  # from prepare: the implementation declines this case
        row.update(status="SKIP", kind="unsupported", reason=str(e))
        return False
    except Exception as e:
        broken = cuda_context_broken(device)
        row.update(status="FAIL", kind="error", reason=f"raised {_first_line(e)}",
                   traceback=traceback.format_exc()[-3000:])
        if broken:
            row.update(kind="crash", reason=f"crashed the CUDA context: {broken}")
            emit(event="fatal", task=task["id"], impl=impl.id, row=row)
            sys.exit(3)
        _not_a_verdict(row, task, problem, case, device, e)
        return False
    row["compile"] = {**row.get("compile", {}), **check.details.get("info", {})}
    row["compile"].setdefault("first_call_s", round(check.details.get("first_call_s", 0.0), 4))
    ahead = (task.get("ahead") or {}).get(impl.id)
    if ahead and ahead.get("compile_s") is not None:   # what the compile-ahead pool spent on it
        row["compile"]["ahead_s"] = ahead["compile_s"]
    row.update(max_abs_err=check.max_abs_err, rel_err=check.rel_err, reason=check.reason)
    if check.details.get("parts"):
        row["verify_parts"] = dict(check.details["parts"])
    if check.details.get("bias"):
        row["bias"] = check.details["bias"]
    if check.details.get("worst_ratio") is not None:
        row["worst_ratio"] = check.details["worst_ratio"]
    if check.ok and check.details.get("bits"):   # seed 0's verified output: the timing's checks match it
        row["bits"] = check.details["bits"]
    row.update(status="PASS", kind="verified") if check.ok else row.update(status="FAIL", kind="mismatch")
    before = (row.get("verify_s") or 0.0, row.get("verify_cpu_s") or 0.0) if so_far is not None else (0.0, 0.0)
    row["verify_s"] = round(before[0] + time.perf_counter() - t0, 3)
    c1 = _cpu_now(device)
    if c0 is not None and c1 is not None:   # this process's and its checker's CPU seconds
        row["verify_cpu_s"] = round(before[1] + c1 - c0, 3)
    if checks is not None:
        checks[impl.id] = check
    return check.ok


def _verify_seed_major(task, impls, problem, case, device, rows, emit) -> list:
    """Verify ``impls`` on one case seed by seed: every implementation on a seed before the next
    seed. The checker computes a seed's float64 reference and bound once for all of them (it
    keeps one seed of the largest cases in hand, so an implementation-by-implementation order
    recomputed them once an implementation); implementations declaring the same roundings are
    checked together (the bound depends on them). Returns those that passed."""
    from . import verify

    left = sorted(impls, key=lambda i: int(i.extra.get("roundings", 0)))
    checks: dict = {}
    for seed in tuple(task.get("seeds", verify.SEEDS)):
        for impl in list(left):
            if not _verify_one(task, impl, problem, case, device, rows[impl.id], emit, (seed,), checks):
                left.remove(impl)
                if rows[impl.id]["kind"] == "out-of-memory":
                    _free_gpu(device)
    return left


def _not_a_verdict(row, task, problem, case, device, e: Exception) -> None:
    """An error that says nothing of the implementation: the GPU out of memory (a SKIP saying
    so) or the checker process dead (``checker.get`` starts a fresh one); either is marked
    ``retry`` on a first attempt (the parent runs it again, alone)."""
    from .checker import CheckerDied, CheckerError
    if gpumem.oom(e):
        where = "the checker (float64 reference)" if isinstance(e, CheckerError) else "the worker"
        _out_of_memory(row, task, problem, case, device, where, _first_line(e))
    elif isinstance(e, CheckerDied) and not task.get("retry"):
        row["retry"] = "the checker process died"


def _out_of_memory(row, task, problem, case, device, where: str, err: str) -> None:
    """The row of an implementation whose run (or check) ran out of GPU memory: SKIP
    'out-of-memory' with what the case needs (``gpumem.case_bytes``) and the device has, never a
    FAIL; on a first attempt marked ``retry`` (run again alone, after the memory is given back)."""
    need = gpumem.gib(gpumem.case_bytes(problem, case))
    total = gpumem.device_total(device)
    has = f"device has {gpumem.gib(total)}" if total else "device memory unknown"
    alone = " even when run alone" if task.get("retry") else ""
    row.update(status="SKIP", kind="out-of-memory", time=None,
               reason=f"out of GPU memory{alone} in {where} (needs ~{need}, {has}): {err}")
    if not task.get("retry"):
        row["retry"] = "out of GPU memory"


def _free_gpu(device) -> None:
    """Give the GPU memory this worker and its checker keep cached back (a large case is done,
    or a retry after running out of memory starts)."""
    import gc

    from .checker import CheckerError
    gc.collect()
    if device == "cuda":
        import torch
        torch.cuda.empty_cache()
    c = _checker_of(device)
    if c is not None:
        try:
            c.release()
        except CheckerError as e:   # it died: the next check starts a fresh one
            print(f"[worker] checker release: {e}", file=sys.stderr)


def _give_back(problem, case, device) -> None:
    """After a case: on the GPU, give its memory back when its estimate is large
    (``gpumem.releases``; the parent's admission counts on it); on the CPU, collect after a large
    case (a collection costs ~0.1 s with the layers' modules loaded, more than a small case's
    whole check)."""
    if device == "cuda":
        if gpumem.releases(gpumem.case_bytes(problem, case), gpumem.device_total(device)):
            _free_gpu(device)
    elif problem.traffic(case) > BIG_CASE_BYTES:
        import gc
        gc.collect()


def process_task(task: dict, opts: dict, emit) -> None:
    """Settle, verify and (a timed task on the GPU) time each implementation of the task on its
    case; emit one row each."""
    from . import problems, registry
    from .case import Case

    problem = problems.get(task["problem"])
    case = Case.from_json(task["case"])
    device = opts["device"]
    rows: dict[str, dict] = {}
    passed = []
    verified = task.get("verified") or {}
    if task.get("retry"):   # after running out of memory: start from what this process holds least
        _free_gpu(device)
    seed_major = []   # a heavy case's implementations, verified seed by seed after the loop
    for iid in task["impls"]:
        impl = registry.get(problem.name, iid)
        row = rows[iid] = settle(impl, problem, case, device, task.get("phase", "timed"))
        if row["status"] is not None:
            continue
        pre = verified.get(impl.id)
        if pre is not None and pre.get("status") == "PASS":
            # verified (three seeds) by a parallel worker before the timed phase: its verdict
            row.update({k: pre[k] for k in _VERDICT_KEYS if k in pre})
            passed.append(impl)
        elif task.get("seed_major"):
            seed_major.append(impl)
        elif _verify_one(task, impl, problem, case, device, row, emit):
            passed.append(impl)
        elif row["kind"] == "out-of-memory":
            _free_gpu(device)   # the implementations after it on this case get the memory back
    if seed_major:   # passed in the task's order
        passed += _verify_seed_major(task, seed_major, problem, case, device, rows, emit)
        passed.sort(key=lambda i: task["impls"].index(i.id))
    if opts.get("verbose"):
        for iid, row in rows.items():
            if row.get("verify_s") is not None:
                print(f"[worker] {iid} {case.id}: {row['status']} in {row['verify_s']:.2f}s", file=sys.stderr)
    _finish_task(task, opts, emit, problem, case, device, passed, rows)


def _finish_task(task, opts, emit, problem, case, device, passed, rows) -> None:
    if task.get("preverify"):
        for impl in passed:   # verified; the timed phase times it (and keeps this verdict)
            rows[impl.id]["pending_timing"] = True
    if task.get("time") and device == "cuda" and passed:
        try:
            _time_task(task, opts, emit, problem, case, device, passed, rows)
        except Exception as e:   # the case's own buffers (inputs, the copy, the vendor's) did not fit
            if not gpumem.oom(e):
                raise
            for impl in passed:
                _out_of_memory(rows[impl.id], task, problem, case, device, "the timing worker", _first_line(e))
    elif task.get("time") and device != "cuda":
        for r in rows.values():
            if r["status"] == "PASS":
                r["time_note"] = "timing needs a GPU"
    for r in rows.values():
        emit(event="row", task=task["id"], row=r)
    _give_back(problem, case, device)


_COPIES: dict = {}   # (mix, bytes, timing mode) -> the same-size copy's timing in this process


def _timed_check(targets, impls, problem, case, seed, inputs, device, rows):
    """The timing's check of a row's first and last timed launch (its output guards, then the
    checker's verdict: an output with the bits its verification passed on seed 0, ``rows[k]["bits"]``,
    passes without a float64 reference), and a list that sums what the checks took: seconds, checks,
    checks passed on the verified bits."""
    from . import verify
    checking = [0.0, 0, 0]   # seconds, checks, checks passed on the verified bits

    def check(k, output):
        c0 = time.perf_counter()
        try:
            g = targets[k].guard()
            if g:
                return verify.Check(False, g)
            c = verify.judge(impls[k], problem, case, seed, inputs, output, device, expect=rows[k].get("bits"))
            checking[2] += bool(c.details.get("same_bits"))
            return c
        finally:
            checking[0] += time.perf_counter() - c0
            checking[1] += 1
    return check, checking


def _time_task(task, opts, emit, problem, case, device, passed, rows) -> None:
    """Time the implementations that passed, interleaved; verify their first and last timed
    launches (seed 0's inputs, fresh guarded outputs); a failure there fails that row alone."""
    from . import timing, verify

    cfg = timing.TimingConfig(**opts.get("timing", {}))
    emit(event="step", task=task["id"], impl=",".join(i.id for i in passed), phase="time")
    seed = 0
    t0 = time.perf_counter()
    inputs = verify.share_inputs(problem.make_inputs(case, device, seed), device)
    targets, impls = {}, {}
    for impl in passed:
        try:
            targets[impl.id] = verify.Launcher(impl, problem, case, inputs, device)
            impls[impl.id] = impl
        except Exception as e:
            rows[impl.id].update(status="FAIL", kind="timing-error",
                                 reason=f"prepare for timing raised {_first_line(e)}")
            if gpumem.oom(e):
                _out_of_memory(rows[impl.id], task, problem, case, device, "the timing worker", _first_line(e))

    check, checking = _timed_check(targets, impls, problem, case, seed, inputs, device, rows)

    vendor = getattr(problem, "vendor_launch", None)
    vend = vendor(case, inputs) if vendor else None
    launches = dict(targets)
    if vend is not None:
        launches["__vendor__"] = vend
    # the same-size copy (pct_ceiling's denominator), timed beside the rows; once per process
    # for a (mix, bytes, mode) already timed
    copy_key = (problem.mix, problem.traffic(case), cfg.mode)
    copy = None if copy_key in _COPIES else problem.copy_launch(case, device)
    if copy is not None:
        launches["__copy__"] = copy
    errors: dict[str, str] = {}
    t1 = time.perf_counter()
    try:
        stats = timing.time_launches(launches, cfg, device, check=check, errors=errors)
    except Exception as e:  # the GPU itself failed (a sync raised): blame every row of the case
        broken = cuda_context_broken(device)
        for k in targets:
            rows[k].update(status="FAIL", kind="timing-error", reason=f"timing raised {_first_line(e)}",
                           time=None)
            if gpumem.oom(e) and not broken:
                _out_of_memory(rows[k], task, problem, case, device, "the timing worker", _first_line(e))
        if broken:
            emit(event="fatal", task=task["id"], impl=",".join(targets), row=None)
            sys.exit(3)
        stats = {}
    # where the timed phase's wall time goes (harness.wall): preparing (compiles, loads) and sampling
    emit(event="timed_case", task=task["id"], case=case.id, prepare_s=round(t1 - t0, 3),
         sample_s=round(time.perf_counter() - t1, 3), check_s=round(checking[0], 3), checks=checking[1],
         same_bits=checking[2], rows=len(targets))
    _timing_errors(errors, rows, task, problem, case, device)
    keep_raw = bool(opts.get("keep_raw", True))
    if "__copy__" in stats:
        st = stats["__copy__"]
        t = st.quartiles()[1]
        _COPIES[copy_key] = {"bytes": copy_key[1], "mix": copy_key[0], "median_s": t,
                             "per_s": copy_key[1] / t if t > 0 else None, "host_s": st.host_s,
                             "how": "torch " + ("y.copy_(x)" if copy_key[0] == "1:1" else "torch.add(x, y, out=z)")
                             + " on fp32 buffers of the same bytes"}
    for k in targets:
        if copy_key in _COPIES and rows[k].get("status") != "FAIL":
            rows[k]["copy_ceiling"] = dict(_COPIES[copy_key])
    for k, st in stats.items():
        if k == "__copy__":
            continue
        if k == "__vendor__":
            t = st.quartiles()[1]
            emit(event="vendor", task=task["id"], case=case.id, time=st.to_json(keep_raw),
                 flops_per_s=problem.flops(case) / t if t > 0 else None)
        else:
            rows[k]["time"] = st.to_json(keep_raw)
            rows[k]["timing_mode"] = cfg.mode


def _timing_errors(errors: dict, rows: dict, task, problem, case, device) -> None:
    """The rows of the launches the timing dropped (``errors``: key -> why): FAIL, or SKIP
    'out-of-memory' where the GPU ran out of memory."""
    for k, msg in errors.items():
        if k in rows and gpumem.oom(msg):
            _out_of_memory(rows[k], task, problem, case, device, "the timing worker", msg[:300])
        elif k in rows:
            kind = "timed-mismatch" if "fails verification" in msg else "timing-error"
            rows[k].update(status="FAIL", kind=kind, reason=msg, time=None)


def _start(job: dict, emit, t_start: float) -> None:
    """Start-up from the job's header (runner.HEADER_KEYS): threads, the checker, the plugins and
    the adapters of the rows this worker runs (``modules``; every adapter when not given)."""
    if job.get("device") == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if job.get("threads"):
        import torch
        torch.set_num_threads(int(job["threads"]))
        os.environ["KL_CHECKER_THREADS"] = str(int(job["threads"]))
    from . import registry, tamper

    tamper.baseline()  # before any backend or plugin code runs in this process
    from . import checker
    checker.get(job.get("device", "cpu"))  # its interpreter starts (imports torch) while we load
    registry.load_plugins(job.get("plugins", []), with_backends=job.get("modules") is None)
    registry.load_backends(job.get("modules"))
    # start-up (imports, plugins) is over: the parent's hang watchdog starts now
    emit(event="ready", startup_s=round(time.perf_counter() - t_start, 2),
         startup_cpu_s=round(time.process_time(), 2))


def main() -> int:
    """Protocol: the header (one line), then the rest of the job (one line: timing, ceilings; none
    when the parent did not need this worker after all), then one task a line until the end of
    the input, each answered by its events as it finishes (the parent sends tasks as they become
    ready: compiled ahead, say)."""
    t_start = time.perf_counter()
    events = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # implementation prints, C-level ones too, go to stderr
    sys.stdout = sys.stderr
    emit = _Emitter(events)
    job = json.loads(sys.stdin.readline())
    _start(job, emit, t_start)
    rest = sys.stdin.readline()
    if not rest.strip():
        emit(event="done")
        return 0
    job.update(json.loads(rest))
    if job.get("ceilings"):
        from .machine import measure_ceilings
        emit(event="ceilings", ceilings=measure_ceilings())
    for line in sys.stdin:
        if not line.strip():
            continue
        task = json.loads(line)
        emit(event="task", task=task["id"])
        process_task(task, job, emit)
        emit(event="task_done", task=task["id"])
    c = _checker_of(job.get("device"))
    emit(event="done", cpu_s=round(time.process_time(), 2),
         checker_cpu_s=c.cpu_s() if c is not None else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
