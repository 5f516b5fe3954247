"""The compile-ahead pool (harness.ahead): the same rows as workers that compile for themselves,
a crash inside a pool compile blamed on its implementation, units kept to few processes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import ahead, runner
from harness import plan as P
from harness.cli import main

PLUGIN = str(Path(__file__).parent / "plugins" / "compile_crash.py")
# every kind of CPU-mode row: runs (torch, Triton's interpreter), compiled for sm_90a (cuda, cute),
# unavailable here (cupy)
IMPLS = ("torch:vector_add", "triton:vector_add", "cuda:vector_add", "cute:vector_add", "cupy:vector_add")


def _rows(path):
    rows = json.loads((path / "results.json").read_text())["rows"]
    return {(r["phase"], r["impl"], r["case"]["id"]):
            (r["status"], r["kind"], r["reason"], (r.get("compile") or {}).get("config")) for r in rows}


def _compare(tmp_path, name, *extra):
    args = ["compare", "--problem", "vector_add", "--suite", "smoke", "--device", "cpu", "--format", "json",
            "--out", str(tmp_path / name), *extra]
    for i in IMPLS:
        args += ["--impl", i]
    assert main(args) == 0
    return _rows(tmp_path / name)


def test_pool_rows_equal_the_workers_own(tmp_path, capsys):
    """Same rows, statuses, reasons and chosen configurations with the pool (the rows of what
    cannot run on the CPU settled there) and without (each worker compiles what it reaches)."""
    pooled = _compare(tmp_path, "pool")
    serial = _compare(tmp_path, "serial", "--compile-jobs", "0")
    capsys.readouterr()
    assert pooled == serial
    assert {v[1] for v in pooled.values()} >= {"verified", "compile-only", "unavailable"}
    events = [json.loads(l) for l in (tmp_path / "pool" / "rows.jsonl").read_text().splitlines() if '"_event"' in l]
    pool = [e for e in events if e["_event"] == "compile_ahead"]
    assert pool and pool[0]["units"] == sum(1 for k in pooled if k[1].split(":")[0] in ("cuda", "cute", "cupy"))


def test_a_crash_in_a_pool_compile_fails_that_row_and_the_run_goes_on(tmp_path, capsys):
    rc = main(["compare", "--problem", "vector_add", "--suite", "smoke", "--no-verify-suite", "--device", "cpu",
               "--plugin", PLUGIN, "--impl", "aheadcrash:gpu_only", "--impl", "torch:vector_add",
               "--format", "json", "--out", str(tmp_path / "r")])
    capsys.readouterr()
    rows = _rows(tmp_path / "r")
    assert rc == 1
    crashed = rows[("timed", "aheadcrash:gpu_only", "vector_add[N=1000,float16]")]
    assert crashed[:2] == ("FAIL", "crash") and "crashed the compile-ahead process: signal 6" in crashed[2]
    others = [v for k, v in rows.items() if k[1] == "aheadcrash:gpu_only" and k[2] != "vector_add[N=1000,float16]"]
    assert len(others) == 2 and all(v[1] == "compile-only" and v[3] for v in others)
    assert {v[0] for k, v in rows.items() if k[1] == "torch:vector_add"} == {"PASS"}


def test_gate_holds_tasks_until_compiled_and_drops_a_crashed_compile(capsys):
    """A GPU run's gate, exercised on the CPU: each task goes to its worker once its units are
    compiled; the implementation whose compile crashed the pool's process is FAIL on that case,
    the other implementations of the task run."""
    from harness import registry
    registry.load_plugin(PLUGIN)
    impls = P.select(P.Selection(problems=["vector_add"], impls=["aheadcrash:anywhere", "torch:vector_add"]))
    tasks = P.make_tasks(P.plan_cases(["vector_add"], "smoke", None, []), impls, phase="timed")
    units = ahead.plan_units(tasks, "compile")
    assert [u["impl"] for u in units] == ["aheadcrash:anywhere"] * 3     # torch has no compile_only
    seen = []
    pool = ahead.Pool(units, 2, device="cpu", plugins=[PLUGIN], on_event=seen.append).start()
    res = runner.run_tasks(tasks, device="cpu", plugins=[PLUGIN], gate=pool, on_event=seen.append)
    pool.wait()
    rows = {(r["impl"], r["case"]["id"]): r for r in res.rows}
    bad = rows[("aheadcrash:anywhere", "vector_add[N=1000,float16]")]
    assert bad["status"] == "FAIL" and bad["kind"] == "crash" and "compile-ahead process" in bad["reason"]
    assert rows[("torch:vector_add", "vector_add[N=1000,float16]")]["status"] == "PASS"
    assert sum(r["status"] == "PASS" for r in res.rows) == 5
    compiled = [i for i, e in enumerate(seen) if e.get("event") == "compiled"]
    started = [i for i, e in enumerate(seen) if e.get("event") == "task"]
    assert len(compiled) == 3 and pool.summary()["units"] == 3
    # a task's worker starts it only after its unit is compiled: the first task waits for one unit
    assert started and compiled[0] < started[0]


def test_queue_keeps_a_layer_on_few_processes():
    units = [{"layer": L, "id": f"{L}{i}"} for L in ("a", "b") for i in range(4)]
    q = ahead._Queue(units)
    first, second = q.take(set()), q.take(set())
    assert {first["layer"], second["layer"]} == {"a", "b"}    # two processes: one layer each
    assert q.take({first["layer"]})["layer"] == first["layer"]  # then each stays on its layer
    while (u := q.take({"a"})) is not None and u["layer"] == "a":
        pass
    assert u is not None and u["layer"] == "b"               # layer a done: it helps with b


def test_a_free_process_joins_the_layer_with_the_most_compiles_left():
    """Work is counted in compiles, not units: 50 verify-suite rows settled without a compile weigh
    less than 5 timed rows of 5 shape classes, and 10 units of one class are one compile."""
    rows = [{"layer": "skips", "id": f"s{i}", "mode": "row", "phase": "verify-suite", "cls": None} for i in range(50)]
    rows += [{"layer": "compiles", "id": f"c{i}", "mode": "row", "phase": "timed", "cls": f"K{i}"} for i in range(5)]
    q = ahead._Queue(rows)
    assert [q.take(set())["layer"] for _ in range(2)] == ["compiles", "compiles"]
    units = [{"layer": "one", "id": f"o{i}", "mode": "compile", "cls": "K"} for i in range(10)]
    units += [{"layer": "three", "id": f"t{i}", "mode": "compile", "cls": f"T{i}"} for i in range(3)]
    assert ahead._Queue(units).take(set())["layer"] == "three"
    # a class's verify-suite rows (settled without a compile) before its timed row: still one compile
    rows = [{"layer": "late", "id": f"l{i}", "mode": "row", "phase": "verify-suite", "cls": f"L{i % 3}"} for i in range(6)]
    rows += [{"layer": "late", "id": f"t{i}", "mode": "row", "phase": "timed", "cls": f"L{i}"} for i in range(3)]
    rows += [{"layer": "two", "id": f"w{i}", "mode": "row", "phase": "timed", "cls": f"W{i}"} for i in range(2)]
    assert ahead._Queue(rows).take(set())["layer"] == "late"


def test_in_the_cpu_mode_the_compiles_go_first_and_the_cheap_rows_last():
    """Row mode (no GPU waits for the pool): a process takes the next unit that compiles a class
    nobody has taken, so two processes compile two classes side by side; then the cheap rows."""
    def u(i, phase, cls):
        return {"layer": "a", "id": f"a{i}", "mode": "row", "phase": phase, "cls": cls}
    q = ahead._Queue([u(0, "verify-suite", None), u(1, "verify-suite", None), u(2, "timed", "K1"),
                      u(3, "timed", "K1"), u(4, "timed", "K2")])
    first, second = q.take(set()), q.take({"a"})
    assert (first["id"], second["id"]) == ("a2", "a4")        # K1 and K2 compile at once
    assert q.take({"a"}, wait=False)["id"] == "a0"             # then the rows without a compile
    q.done(first)
    assert [q.take({"a"})["id"] for _ in range(2)] == ["a1", "a3"]
    gpu = ahead._Queue([{"layer": "a", "id": "g0", "mode": "compile", "cls": "K1"},
                        {"layer": "a", "id": "g1", "mode": "compile", "cls": "K2"}])
    assert gpu.take(set())["id"] == "g0"                       # on a GPU: the lanes' order


@pytest.mark.parametrize("mode,expected", [("row", 2), ("compile", 1)])
def test_units_once_per_case_and_phase(mode, expected):
    """A compile serves both phases of a case; a row is per phase."""
    case = {"id": "vector_add[N=5,float32]", "dims": {"N": 5}, "dtype": "float32", "params": {}}
    tasks = [{"id": f"t{i}", "problem": "vector_add", "case": case, "impls": ["cute:vector_add"], "phase": ph}
             for i, ph in enumerate(("verify-suite", "timed"))]
    assert len(ahead.plan_units(tasks, mode)) == expected


def test_queue_never_compiles_one_class_on_two_processes_at_once():
    units = [{"layer": "a", "id": "a0", "cls": "K"}, {"layer": "a", "id": "a1", "cls": "K"},
             {"layer": "a", "id": "a2", "cls": None}]
    q = ahead._Queue(units)
    first = q.take(set())
    assert first["id"] == "a0"
    second = q.take({"a"}, wait=False)
    assert second["id"] == "a2"                                # the class K is being compiled
    assert q.take({"a"}, wait=False) is None                   # only K's second unit is left: wait
    q.done(first)
    assert q.take({"a"}, wait=False)["id"] == "a1"             # K compiled: its next unit loads it
    assert q.take({"a"}) is None


def test_a_waiting_process_goes_on_when_the_class_is_done():
    import threading
    units = [{"layer": "a", "id": "a0", "cls": "K"}, {"layer": "a", "id": "a1", "cls": "K"}]
    q = ahead._Queue(units)
    first = q.take(set())
    got = []
    t = threading.Thread(target=lambda: got.append(q.take({"a"})))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got                            # waits while K compiles elsewhere
    q.done(first)
    t.join(5)
    assert got and got[0]["id"] == "a1"


def test_compile_class_leaves_out_the_sizes_and_the_input_values():
    from harness import registry
    from harness.case import Case
    registry.load_backends()
    impl = registry.get("softmax", "tilelang:softmax")
    cls = lambda **kw: ahead.compile_class(impl, Case("softmax", {"M": kw.pop("M"), "N": kw.pop("N")},  # noqa: E731
                                                      kw.pop("dtype", "float32"), kw).to_json())
    a = cls(M=64, N=1000)
    assert a is not None
    assert cls(M=80, N=1000) == a                              # another row count: the same kernel
    assert cls(M=64, N=1000, kind="neginf") == a               # other input values: the same kernel
    assert cls(M=64, N=1000, dtype="bfloat16") != a            # another dtype: another compile
    assert cls(M=64, N=200000) != a                            # the planner picks another variant
    twin = registry.get("softmax", "tilelang:softmax_simple")
    assert ahead.compile_class(twin, Case("softmax", {"M": 4, "N": 8}, "float32").to_json()) is None


def test_helion_is_not_compiled_ahead_on_a_gpu():
    """The pool's processes see no GPU, where Helion cannot trace: its rows compile in the GPU
    worker (a Triton row beside it still goes to the pool)."""
    case = {"id": "vector_add[N=5,float32]", "dims": {"N": 5}, "dtype": "float32", "params": {}}
    task = {"id": "t0", "problem": "vector_add", "case": case, "phase": "timed",
            "impls": ["helion:vector_add", "triton:vector_add"]}
    assert [u["impl"] for u in ahead.plan_units([task], "compile")] == ["triton:vector_add"]
    assert [u["impl"] for u in ahead.plan_units([task], "row")] == ["helion:vector_add"]  # CPU mode: settled there


def test_a_unit_an_earlier_run_built_is_not_compiled_again(tmp_path, monkeypatch):
    """The pool's compile of (implementation, case) leaves its compile facts keyed by the
    sources; the next run's unit finds them and does not compile again; an edit would."""
    from harness import registry
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(registry, "_IMPLS", dict(registry._IMPLS))
    compiled = []

    def compile_only(case):
        compiled.append(case.id)
        return {"registers": 32, "spills": 0}

    from kltools.plan import Source
    src = [Source("tests/plugins/compile_crash.py", host=("anywhere",))]   # any file: the key's contents

    @registry.register(problem="vector_add", layer="aheadcache", name="vector_add", devices=("cuda",),
                       compile_only=compile_only, sources=src)
    def prepare(case, inputs, out):
        raise AssertionError("never launched here")

    case = {"problem": "vector_add", "id": "vector_add[N=4099,float16]", "dims": {"N": 4099}, "dtype": "float16", "params": {}}
    unit = {"id": "u0", "problem": "vector_add", "impl": "aheadcache:vector_add", "case": case,
            "phase": "timed", "mode": "compile", "layer": "aheadcache", "adapter": None}
    first = ahead.run_unit(unit, "cuda")
    assert compiled == [case["id"]] and "note" not in first
    again = ahead.run_unit(unit, "cuda")
    assert compiled == [case["id"]] and again["note"] == "built by an earlier run"
    other = dict(unit, case=dict(case, id="vector_add[N=5,float16]", dims={"N": 5}))
    ahead.run_unit(other, "cuda")
    assert compiled == [case["id"], "vector_add[N=5,float16]"]   # another case compiles


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no CPU affinity on this system")
def test_pools_size_themselves_by_the_cores_they_may_use():
    """A run pinned to one core (taskset, a cpuset) starts one compile process and one verify
    worker, not one a core of the machine (four pinned pytest groups on a 16-core GPU machine
    would otherwise start 64 compile processes)."""
    import subprocess
    import sys
    code = ("import os, argparse; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "from harness.compare import compile_jobs, default_jobs; "
            "print(compile_jobs(argparse.Namespace(compile_jobs=None)), default_jobs('cpu'), default_jobs('cuda'), "
            "compile_jobs(argparse.Namespace(compile_jobs=3)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout.split()
    assert out == ["1", "1", "1", "3"]
