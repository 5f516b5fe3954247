"""GPU memory (harness.gpumem): the admission of the parallel phase's tasks, the estimate of a
case's memory, and what an out-of-memory error becomes (a retry alone, then SKIP
'out-of-memory', never a FAIL). CPU only: the memory numbers are made up."""
import random
from pathlib import Path

import pytest
import torch

from harness import gpumem
from harness.gpumem import ALONE, Admission

GB = 10 ** 9
PLUGIN = str(Path(__file__).parent / "plugins" / "oom.py")


def _simulate(lanes: list[list[float]], budget: float, steps: int = 10_000, seed: int = 0):
    """Lanes run their tasks (needs) in order, one at a time, each for a few steps, admitted by
    one Admission; returns (the order each lane ran its tasks in, what was held at each step,
    the lanes holding something at each step)."""
    rng = random.Random(seed)
    adm = Admission(budget)
    left = [list(enumerate(t)) for t in lanes]
    running: dict = {}            # lane -> (task index, steps left)
    ran: list = [[] for _ in lanes]
    trace = []
    for _ in range(steps):
        for ln in rng.sample(range(len(lanes)), len(lanes)):   # lanes poll in any order
            if ln in running:
                i, n = running[ln]
                if n > 1:
                    running[ln] = (i, n - 1)
                    continue
                del running[ln]
                adm.shrink(ln, 0)
            if left[ln] and adm.take(ln, left[ln][0][1]):
                i, _ = left[ln].pop(0)
                ran[ln].append(i)
                running[ln] = (i, rng.randint(1, 4))
            elif not left[ln]:
                adm.release(ln)
        trace.append((dict(adm.held), sorted(ln for ln, v in adm.held.items() if v > 0)))
        if not running and not any(left):
            break
    return ran, trace, adm


def test_admission_never_exceeds_the_budget_and_every_task_runs_in_order():
    rng = random.Random(1)
    budget = 40 * GB
    lanes = [[rng.choice([0.01, 0.5, 3, 12, 20, 34]) * GB for _ in range(25)] for _ in range(8)]
    ran, trace, adm = _simulate(lanes, budget)
    assert ran == [list(range(25))] * 8, "every task of every lane ran, in its lane's order"
    for held, holders in trace:
        assert sum(held.values()) <= budget
    assert max(len(h) for _, h in trace) > 1, "small tasks do run side by side"
    assert adm.in_use() == 0 and not adm.waiting


def test_a_task_above_the_budget_runs_alone_and_is_not_starved():
    budget = 10 * GB
    big = 25 * GB
    lanes = [[1 * GB] * 30, [1 * GB] * 30, [0.5 * GB, big, 0.5 * GB], [2 * GB] * 30]
    ran, trace, _ = _simulate(lanes, budget)
    assert ran[2] == [0, 1, 2]
    with_big = [holders for held, holders in trace if held.get(2) == big]
    assert with_big and all(h == [2] for h in with_big), "the big task held the GPU alone"
    # it did not wait for the other lanes to run out of tasks: they went on after it
    first_big = next(i for i, (held, _) in enumerate(trace) if held.get(2) == big)
    assert any(any(k in holders for k in (0, 1, 3)) for _, holders in trace[first_big + 1:])


def test_a_waiting_owner_keeps_its_turn_and_alone_blocks_everyone():
    adm = Admission(10)
    assert adm.take("a", 6) and adm.take("b", 3)
    assert not adm.take("c", 5)            # does not fit: c waits first
    assert not adm.take("b", 3)            # b fits, but c waited first: b adds nothing now
    adm.shrink("a", 0)
    assert adm.take("c", 5) and adm.take("b", 3)
    assert not adm.take("d", ALONE)        # alone: waits for every holder
    adm.shrink("b", 0)
    assert not adm.take("d", ALONE)
    adm.release("c")
    assert adm.take("d", ALONE)
    assert not adm.take("a", 1)            # nothing runs beside it
    adm.release("d")
    assert adm.take("a", 1)
    adm.withdraw("a")
    assert adm.in_use() == 1


def test_the_estimate_covers_inputs_output_and_float64_reference():
    from harness import problems
    for name, kw in [("softmax", dict(M=4096, N=151936, dtype="float32")),
                     ("softmax", dict(M=7, N=3, dtype="bfloat16")),
                     ("gemm_epilogue", dict(M=4096, N=28672, K=4096)),
                     ("vector_add", dict(N=1000))]:
        p = problems.get(name)
        c = p.case(**kw)
        out = 1
        for d in p.out_shape(c):
            out *= d
        need = gpumem.case_bytes(p, c)
        assert need >= p.traffic(c) + 8 * out, (name, kw)   # inputs, output, the float64 reference
    p = problems.get("softmax")
    assert gpumem.case_bytes(p, p.case(M=8, N=4096)) < gpumem.case_bytes(p, p.case(M=4096, N=4096))


def test_the_budget_leaves_room_for_every_process():
    total = 80 * GB
    assert 0 < gpumem.budget(total, 9) < gpumem.budget(total, 2) < total
    assert not gpumem.releases(10 ** 6, total) and gpumem.releases(total // 8, total)
    assert not gpumem.releases(total, None)


@pytest.mark.parametrize("err, is_oom", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.96 GiB"), True),
    (RuntimeError("CUDA error: out of memory"), True),
    (RuntimeError("the checker failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 4.6 GiB"), True),
    (RuntimeError("out of resource: shared memory, Required: 262144, Hardware limit: 232448"), False),
    (ValueError("shape mismatch"), False),
])
def test_out_of_memory_errors_are_recognised(err, is_oom):
    assert gpumem.oom(err) is is_oom
    assert gpumem.oom(str(err)) is is_oom   # as the timing reports it: a message


@pytest.fixture
def plugin_here(monkeypatch):
    """The OOM plugin registered in this process too, for this test only."""
    from harness import registry
    for name in ("_IMPLS", "_LAYER_INFO", "_loaded_plugins"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))
    registry.load_plugins([PLUGIN], with_backends=False)


def _oom_tasks():
    from harness import problems
    p = problems.get("vector_add")
    return [{"id": "t0", "problem": "vector_add", "case": p.case(N=1000).to_json(), "phase": "verify",
             "impls": ["oom:always", "oom:once", "oom:fine"], "time": False}]


@pytest.mark.parametrize("isolate", [True, False])
def test_out_of_memory_is_retried_alone_then_a_skip_not_a_fail(isolate, plugin_here):
    from harness import runner
    runner._STOPPING.clear()
    seen = []
    res = runner.run_tasks(_oom_tasks(), device="cpu", plugins=[PLUGIN], modules=[], isolate=isolate,
                           on_event=seen.append)
    rows = {r["impl"]: r for r in res.rows}
    assert len(res.rows) == 3, "one row each: the first attempt's row is replaced by the retry's"
    bad = rows["oom:always"]
    assert bad["status"] == "SKIP" and bad["kind"] == "out-of-memory", bad
    assert bad["reason"].startswith("out of GPU memory even when run alone in the worker (needs ~")
    assert "retry" not in bad
    assert rows["oom:once"]["status"] == "PASS", "out of memory once, then passed alone"
    assert rows["oom:fine"]["status"] == "PASS"
    shown = [e["row"]["impl"] for e in seen if e.get("event") == "row"]
    assert sorted(shown) == ["oom:always", "oom:fine", "oom:once"]


def test_a_dead_checker_is_replaced_and_never_gives_a_broken_pipe():
    from harness import checker, problems
    p = problems.get("vector_add")
    case = p.case(N=64)
    x, y = p.make_inputs(case, "cpu", 0)
    c = checker.get("cpu")
    assert c.check("vector_add", case, 0, (x, y), x.double().add(y).float())["ok"]
    c.release()                                   # drops its cache; still serves
    c.proc.kill()                                 # dies under the worker (not yet reaped)
    with pytest.raises(checker.CheckerDied):
        c.check("vector_add", case, 0, (x, y), x + y)
    fresh = checker.get("cpu")
    assert fresh is not c and fresh.alive()
    assert fresh.check("vector_add", case, 0, (x, y), x + y)["ok"]


class _Recording(Admission):
    """An Admission that records what is held after every grant."""

    def __init__(self, budget_bytes):
        super().__init__(budget_bytes)
        self.seen = []

    def take(self, owner, need):
        ok = super().take(owner, need)
        if ok:
            self.seen.append(dict(self.held))
        return ok


def test_parallel_lanes_send_tasks_only_when_admitted(plugin_here):
    """Two workers, tasks with made-up estimates (two above the budget): every row arrives, the
    granted holdings stay under the budget but for a task alone, and all is given back."""
    from harness import problems, runner
    runner._STOPPING.clear()
    p = problems.get("vector_add")
    needs = [3, 3, 12, 3, 3, 3, 12, 3]
    tasks = [{"id": f"t{i}", "problem": "vector_add", "case": p.case(N=100 + i).to_json(), "phase": "verify",
              "impls": ["oom:fine"], "time": False, "seeds": [0], "gpu_bytes": n * GB}
             for i, n in enumerate(needs)]
    adm = _Recording(8 * GB)
    res = runner.run_parallel(tasks, 2, device="cpu", plugins=[PLUGIN], admission=adm)
    assert sorted(r["case"]["dims"]["N"] for r in res.rows) == [100 + i for i in range(len(needs))]
    assert {r["status"] for r in res.rows} == {"PASS"}
    for held in adm.seen:
        live = [v for v in held.values() if v > 0]
        assert sum(live) <= adm.budget or len(live) == 1
    assert any([v for v in held.values() if v] == [12 * GB] for held in adm.seen), "a task above the budget ran alone"
    assert adm.in_use() == 0 and not adm.waiting


def test_the_checker_answers_a_request_it_cannot_unpack():
    from harness import checker, problems
    c = checker.get("cpu")
    with c.lock:
        c.conn.send_bytes(b"not a pickle")
        res = c.conn.recv()
    assert "error" in res and c.alive()
    p = problems.get("vector_add")
    case = p.case(N=16)
    x, y = p.make_inputs(case, "cpu", 1)
    assert c.check("vector_add", case, 1, (x, y), x + y)["ok"]
