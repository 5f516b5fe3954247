"""Compile ahead: a pool of processes, one a CPU core, that compiles what a run will need while
the GPU verifies what is ready.

A *unit* is one implementation on one case. The pool's processes (``python -m harness.ahead``)
take units from a shared queue - each process keeps to a few layers, so it imports few layer
packages and reuses its in-process compiles - and report each as it finishes:

- on a GPU (``mode="compile"``): the implementation's ``compile_only(case)``, which builds for
  sm_90a what the GPU's process then loads from the layer's own disk cache (Triton's cache, the
  kltools cache's NVRTC cubins and exported CuTe DSL kernels, TileLang's and cuTile's caches).
  The processes see no GPU (``CUDA_VISIBLE_DEVICES`` empty: no CUDA context, no GPU memory). A
  task goes to a GPU worker once its units are done (``Pool`` is the runner's ``Gate``); a unit
  that crashed or hung its process is that implementation's FAIL on that case, and the run goes
  on. A unit whose compile facts an earlier run left (``worker._facts_cache``: keyed by the
  sources and compiler versions) is not compiled again, and units of one shape class
  (``compile_class``) never compile on two processes at once. Only on an sm_90 GPU (what
  compile_only targets); a layer opts out with
  ``describe_layer(..., compile_ahead=False)`` (the CUDA C++ layer: built at install time).
- without a GPU (``mode="row"``): the rows of the implementations that cannot run on the CPU,
  settled exactly as a worker settles them (``harness.worker.settle``: SKIP, compiled for sm_90a
  where the layer can), so the workers run only what executes on the CPU.

The timed phase starts only after the pool is done: timing keeps the GPU and the CPU to itself (a
busy pool would slow the host's launches, the ``host us`` column, and the launch-bound cases).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import OrderedDict

from .runner import _STOPPING, Gate, Worker, _blank_row, _crash_message, job_header

NICE = 5   # the pool yields the CPU to the workers that feed the GPU


def unit_key(unit_or_task: dict, impl: str) -> tuple:
    """What a unit is: an implementation on a case (a compile serves both phases of a case);
    in the row mode also the phase (each phase has its row)."""
    t = unit_or_task
    return t["problem"], impl, t["case"]["id"], t.get("phase", "timed") if t.get("mode", "row") == "row" else None


def plan_units(tasks: list[dict], mode: str) -> list[dict]:
    """The units of ``tasks``, in the order the tasks come (the lanes' order: what a GPU worker
    needs first is compiled first), each once."""
    from . import registry

    units: OrderedDict = OrderedDict()
    for t in tasks:
        for iid in t["impls"]:
            impl = registry.get(t["problem"], iid)
            if mode == "row":
                wanted = "cpu" not in impl.devices
            else:
                wanted = impl.compile_only_fn is not None and registry.layer_info(impl.layer).compile_ahead
            k = unit_key(dict(t, mode=mode), iid)
            if wanted and k not in units:
                units[k] = {"id": f"u{len(units)}", "problem": t["problem"], "impl": iid, "case": t["case"],
                            "phase": t.get("phase", "timed"), "mode": mode, "layer": impl.layer,
                            "adapter": impl.adapter, "cls": compile_class(impl, t["case"])}
    return list(units.values())


def compile_class(impl, case_json: dict) -> str | None:
    """The shape class a unit compiles, as far as the harness can tell: the implementation, the
    dtype, the case's parameters that can change code (all but the problem's
    ``value_params``, which change only the input values) and its planner's answer (variant and
    configuration) - the sizes left out, since the layers compile a class once for every size
    (TileLang's dynamic dimensions, NVRTC's size arguments). None where no planner answers (a
    twin, a variant): no class. Two units of one class are never compiled at once on two
    processes (the second would compile the same kernel again instead of loading it)."""
    from . import problems
    from .case import Case

    plan = getattr(impl.sources, "plan", None)
    if plan is None:
        return None
    try:
        from .meta_inputs import case_facts
        case = Case.from_json(case_json)
        p = plan(impl.problem, case_facts(case))
        skip = set(getattr(problems.get(impl.problem), "value_params", ()))
        params = {k: v for k, v in sorted(case.params.items()) if k not in skip}
        return json.dumps([impl.id, case.dtype, params, p.variant, dict(p.config)], sort_keys=True, default=str)
    except Exception:   # a planner that cannot answer here: the unit has no class
        return None


class _Queue:
    """Units waiting for a process. A process takes the next unit of a layer it has loaded; with
    none left there, the layer with the most work left per process working on it (``_work_left``;
    a process pays a layer's imports once). A unit whose shape class (``compile_class``) another process is
    compiling waits until that compile is done, then loads it from the layer's cache; a process
    with only such units left waits for one (``done``)."""

    def __init__(self, units: list[dict]):
        self.units = list(units)
        self.cond = threading.Condition()
        self.working: dict[str, int] = {}
        self.busy: set = set()
        self.taken: set = set()   # the classes a process has taken (compiled, or compiling)

    def take(self, loaded: set, wait: bool = True) -> dict | None:
        with self.cond:
            while True:
                if not self.units:
                    return None
                free = [i for i, u in enumerate(self.units) if u.get("cls") is None or u["cls"] not in self.busy]
                if free:
                    break
                if not wait or _STOPPING.is_set():
                    return None
                self.cond.wait(0.5)
            i = self._first([i for i in free if self.units[i]["layer"] in loaded])
            if i is None:
                left = self._work_left(free)
                layer = max(left, key=lambda L: left[L] / (1 + self.working.get(L, 0)))
                self.working[layer] = self.working.get(layer, 0) + 1
                i = self._first([j for j in free if self.units[j]["layer"] == layer])
            unit = self.units.pop(i)
            if unit.get("cls") is not None:
                self.busy.add(unit["cls"])
                self.taken.add(unit["cls"])
            return unit

    def _compiles(self, u: dict) -> bool:
        """Whether ``u`` compiles a shape class nobody has taken yet (see ``_work_left``)."""
        heavy = u.get("mode", "compile") == "compile" or u.get("phase", "timed") != "verify-suite"
        return heavy and (u.get("cls") is None or u["cls"] not in self.taken)

    def _first(self, idx: list[int]) -> int | None:
        """The unit to take of ``idx``: the first, in the lanes' order (on a GPU a task waits for its
        units); in the CPU mode, where nothing waits for the pool, the first that compiles, so that
        the processes share the compiles and the cheap rows (SKIPs, loads of a compiled class) go last."""
        if not idx:
            return None
        if self.units[idx[0]].get("mode") == "row":
            return next((i for i in idx if self._compiles(self.units[i])), idx[0])
        return idx[0]

    def _work_left(self, free: list[int]) -> dict[str, float]:
        """The work waiting in each layer, counted in compiles: a unit that compiles a shape class
        nobody has taken yet is one (on a GPU every unit compiles; in the CPU mode a timed case's
        row does, for its compile facts, and a verify-suite row is settled without one); a unit
        that loads a compiled class or only settles a row is a fiftieth. So a freed process joins
        the layer with the most compiles left (TileLang's GEMMs), not the one with the most cheap
        rows (a layer that is all SKIPs on this machine)."""
        left: dict[str, float] = {}
        counted: set = set()
        for j in free:
            u = self.units[j]
            cls = u.get("cls")
            new = self._compiles(u) and cls not in counted
            if new and cls is not None:   # a verify-suite row of a class leaves its timed row's compile counted
                counted.add(cls)
            left[u["layer"]] = left.get(u["layer"], 0.0) + (1.0 if new else 0.02)
        return left

    def done(self, unit: dict) -> None:
        """``unit`` is compiled (or failed): the units of its class may go."""
        with self.cond:
            self.busy.discard(unit.get("cls"))
            self.cond.notify_all()


class Pool(Gate):
    """The pool (parent side): ``start()``, then ``ready``/``prepare`` for the lanes (a GPU run),
    ``wait()`` until every unit is done. ``on_event`` sees ``compiling``/``compiled`` events and,
    in the row mode, each settled row."""

    def __init__(self, units: list[dict], processes: int, *, device: str, plugins=(), timeout_s: float = 600.0,
                 on_event=None, verbose: bool = False):
        self.units = {unit_key(u, u["impl"]): u for u in units}
        self.mode = units[0]["mode"] if units else "compile"
        self.results: dict[tuple, dict] = {}
        self.queue = _Queue(units)
        self.n = max(1, min(int(processes), len(units)))
        self.device, self.plugins, self.timeout_s = device, list(plugins), timeout_s
        self.on_event, self.verbose = on_event, verbose
        self.cond = threading.Condition()
        self.threads: list[threading.Thread] = []
        self.stats = {"processes": 0, "cpu_s": 0.0, "units": 0, "t0": None, "t1": None}

    # -- the parent's side ----------------------------------------------------------------------
    def start(self) -> "Pool":
        self.stats["t0"] = time.monotonic()
        if not self.units:
            self.stats["t1"] = self.stats["t0"]
            return self
        for _ in range(self.n):
            t = threading.Thread(target=self._drive, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def wait(self) -> None:
        for t in self.threads:
            while t.is_alive():
                t.join(0.5)

    def done(self) -> bool:
        return len(self.results) >= len(self.units)

    def ready(self, task: dict) -> bool:
        """Every unit of ``task`` is done (or no pool process is left to do it: the worker then
        compiles for itself)."""
        with self.cond:
            if all(k in self.results for k in self._keys(task)):
                return True
        return not any(t.is_alive() for t in self.threads)

    def prepare(self, task: dict) -> tuple[dict | None, list[dict]]:
        """The task with what was compiled ahead (``ahead``), without the implementations whose
        compile crashed or hung a pool process (their FAIL rows)."""
        rows, ahead, keep = [], {}, []
        for iid in task["impls"]:
            res = self.results.get(self.key(task, iid))
            if res and res.get("fail"):
                row = _blank_row(task, iid)
                row.update(res["fail"])
                rows.append(row)
                continue
            keep.append(iid)
            if res:
                ahead[iid] = res
        if not keep:
            return None, rows
        return dict(task, impls=keep, ahead=ahead), rows

    def key(self, task: dict, impl: str) -> tuple:
        """The unit of ``impl`` in ``task`` (a key of ``units`` when the pool builds it)."""
        return unit_key(dict(task, mode=self.mode), impl)

    def _keys(self, task: dict):
        for iid in task["impls"]:
            k = self.key(task, iid)
            if k in self.units:
                yield k

    def _resolve(self, unit: dict, result: dict) -> None:
        with self.cond:
            self.results[unit_key(unit, unit["impl"])] = result
            self.stats["units"] += 1
            if self.done():
                self.stats["t1"] = time.monotonic()
            self.cond.notify_all()
        self._emit({"event": "compiled", "unit": unit["id"], "impl": unit["impl"], "problem": unit["problem"],
                    "case": unit["case"], "mode": unit["mode"],
                    "result": {k: v for k, v in result.items() if k != "row"}})
        if result.get("row") is not None:
            self._emit({"event": "row", "row": result["row"]})

    def _emit(self, ev: dict) -> None:
        if self.on_event and not _STOPPING.is_set():
            self.on_event(ev)

    # -- one process ----------------------------------------------------------------------------
    def _spawn(self) -> Worker:
        env = {"CUDA_VISIBLE_DEVICES": ""} if self.device == "cuda" else {}
        w = Worker(job_header(self.device, self.plugins, 1, self.verbose, modules=[]), module="harness.ahead",
                   env=env)
        w.start({})
        self.stats["processes"] += 1
        return w

    def _drive(self) -> None:
        """Runs units on one process at a time; a unit that kills its process or hangs is that
        unit's failure, and a fresh process takes the next."""
        try:
            self._work()
        except Exception as e:   # a broken pool must not hold the workers: say why, let them compile
            print(f"compile-ahead pool: {type(e).__name__}: {e}", file=sys.stderr)

    def _work(self) -> None:
        w, loaded = None, set()
        while not _STOPPING.is_set():
            unit = self.queue.take(loaded)
            if unit is None:
                break
            if w is None:
                w, loaded = self._spawn(), set()
            loaded.add(unit["layer"])
            self._emit({"event": "compiling", "unit": unit["id"], "impl": unit["impl"], "problem": unit["problem"],
                        "case": unit["case"]})
            w.send(unit)
            result, alive = self._await(w, unit)
            self.queue.done(unit)
            self._resolve(unit, result)
            if not alive:
                w.reap()
                w = None
        if w is not None:
            w.close()
            self._await(w, None)
            w.reap()

    def _await(self, w: Worker, unit: dict | None) -> tuple[dict, bool]:
        """The process's answer for ``unit`` (None: its exit after the last one); False when the
        process is gone. A unit gets ``timeout_s`` of silence (plus the start-up allowance while
        the process has not said it is ready)."""
        import queue

        from .runner import STARTUP_TIMEOUT_S

        tail: list[str] = []
        last = time.monotonic()
        while True:
            try:
                tag, line = w.q.get(timeout=0.5)
            except queue.Empty:
                limit = self.timeout_s + (0.0 if getattr(w, "ready", False) else STARTUP_TIMEOUT_S)
                if unit is not None and time.monotonic() - last > limit:
                    w.proc.kill()
                    return self._failed(unit, "timeout", f"no progress for {self.timeout_s:g} s while "
                                        "compiling ahead: killed (hang?)"), False
                if _STOPPING.is_set():
                    return {}, False
                continue
            if line is None:
                if unit is None:
                    return {}, False
                w.proc.wait()
                return self._failed(unit, "crash", "crashed the compile-ahead process: "
                                    + _crash_message(tail, w.proc.returncode)), False
            if tag == "err":
                tail = (tail + [line.rstrip()])[-40:]
                if self.verbose:
                    sys.stderr.write(line)
                continue
            last = time.monotonic()
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if ev.get("event") == "ready":
                w.ready = True
            elif ev.get("event") == "unit_done" and unit is not None and ev.get("unit") == unit["id"]:
                return ev["result"], True
            elif ev.get("event") == "done" and ev.get("cpu_s") is not None:
                with self.cond:
                    self.stats["cpu_s"] += ev["cpu_s"]

    def _failed(self, unit: dict, kind: str, reason: str) -> dict:
        fail = {"status": "FAIL", "kind": kind, "reason": reason}
        if unit["mode"] == "row":
            row = _blank_row({**unit, "impls": [unit["impl"]]}, unit["impl"])
            row.update(fail)
            return {"row": row, "error": reason}
        return {"fail": fail, "error": reason}

    def summary(self) -> dict:
        """What the pool did: processes started, units, CPU seconds, wall seconds."""
        t0, t1 = self.stats["t0"], self.stats["t1"]
        return {"processes": self.stats["processes"], "units": self.stats["units"],
                "cpu_s": round(self.stats["cpu_s"], 1),
                "wall_s": round((t1 or time.monotonic()) - t0, 1) if t0 is not None else None}


# -- the process's side ---------------------------------------------------------------------------
def run_unit(unit: dict, device: str) -> dict:
    """One unit in this process: the settled row (``row`` mode) or the compile (``compile``)."""
    from . import problems, registry
    from .case import Case
    from .errors import Unsupported
    from .worker import _first_line, settle

    if unit.get("adapter"):
        registry.load_backends([unit["adapter"]])
    problem = problems.get(unit["problem"])
    case = Case.from_json(unit["case"])
    impl = registry.get(problem.name, unit["impl"])
    t0 = time.perf_counter()
    if unit["mode"] == "row":
        return {"row": settle(impl, problem, case, device, unit["phase"]),
                "compile_s": round(time.perf_counter() - t0, 3)}
    try:
        why = impl.supports(case)
        if why:
            return {"note": f"not compiled: {why}"}
        # an earlier run on this machine compiled the same sources for this case (the compile
        # facts it left are keyed by every source file the line count reaches and the compiler
        # versions): the layer's own cache holds the build, which the GPU process loads
        from .worker import _facts_cache
        cache = _facts_cache(impl, case)
        if cache is not None and cache.is_file():
            return {"compile_s": round(time.perf_counter() - t0, 3), "note": "built by an earlier run"}
        facts = impl.compile_only_fn(case) or {}
        if cache is not None and isinstance(facts, dict):
            from kltools.cache import write_atomic

            from .jsonsafe import dumps
            try:
                write_atomic(cache, dumps(dict(facts, compile_s=round(time.perf_counter() - t0, 3))))
            except (TypeError, ValueError):
                pass
    except Unsupported as e:
        return {"note": f"not compiled: {e}"}
    except Exception as e:
        return {"note": f"compile failed: {_first_line(e)}", "compile_s": round(time.perf_counter() - t0, 3)}
    return {"compile_s": round(time.perf_counter() - t0, 3)}


def main() -> int:
    """Protocol (as ``harness.worker``): the header line, the job line, then one unit a line,
    each answered by ``unit_done`` with its result."""
    from .worker import _Emitter

    events = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the compilers print goes to stderr
    sys.stdout = sys.stderr
    emit = _Emitter(events)
    job = json.loads(sys.stdin.readline())
    try:
        os.nice(NICE)
    except OSError:
        pass
    if job.get("device") == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    torch.set_num_threads(1)
    from . import registry
    registry.load_plugins(job.get("plugins", []), with_backends=False)
    emit(event="ready")
    if not sys.stdin.readline().strip():
        return 0
    for line in sys.stdin:
        if line.strip():
            unit = json.loads(line)
            emit(event="unit_done", unit=unit["id"], result=run_unit(unit, job["device"]))
    t = os.times()   # the compilers' own processes (nvcc, ptxas) included
    emit(event="done", cpu_s=round(t.user + t.system + t.children_user + t.children_system, 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
