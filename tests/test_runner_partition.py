"""How the parallel verify phase spreads its tasks over workers (harness.runner.partition)."""
from harness.runner import partition


def _tasks(layer, problem, dtype, n):
    return [{"impls": [f"{layer}:{problem}"], "problem": problem, "case": {"dtype": dtype}} for _ in range(n)]


def test_groups_stay_together_when_they_fit():
    tasks = _tasks("triton", "softmax", "float32", 3) + _tasks("cuda", "softmax", "float32", 3)
    bins = partition(tasks, 2)
    assert len(bins) == 2
    assert sorted({t["impls"][0] for t in b}.pop() for b in bins) == ["cuda:softmax", "triton:softmax"]


def test_a_dominant_group_is_cut_and_bins_balance():
    # one slow-compiling group with most of the tasks (the CuTe GEMMs of the verify suite)
    tasks = _tasks("cute", "gemm_epilogue", "float16", 30) + _tasks("torch", "softmax", "float32", 6)
    bins = partition(tasks, 4)
    assert len(bins) == 4
    assert sum(len(b) for b in bins) == 36
    assert max(len(b) for b in bins) == 9                 # an even share, not 30 in one worker
    assert sum(any(t["impls"][0] == "cute:gemm_epilogue" for t in b) for b in bins) >= 3


def test_bins_balance_rows_not_tasks():
    # the CPU machine's workers: a torch task holds the eager and the torch.compile rows of its case
    torch_tasks = [dict(t, impls=["torch:softmax", "torch:softmax_compile"])
                   for t in _tasks("torch", "softmax", "float32", 10)]
    tasks = torch_tasks + _tasks("triton", "softmax", "float32", 10) + _tasks("triton", "vector_add", "float32", 10)
    bins = partition(tasks, 2)
    assert sum(len(b) for b in bins) == 30
    assert sorted(sum(len(t["impls"]) for t in b) for b in bins) == [20, 20]


def test_fewer_tasks_than_jobs():
    tasks = _tasks("cuda", "vector_add", "float32", 2)
    bins = partition(tasks, 6)
    assert [len(b) for b in bins] == [1, 1]


def test_heavy_tasks_share_at_most_heavy_lanes_bins():
    from harness.runner import HEAVY_LANES
    heavy = [dict(t, heavy=True) for t in _tasks("cuda", "softmax", "float32", 8) + _tasks("cute", "softmax",
                                                                                           "bfloat16", 8)]
    light = _tasks("triton", "gemm_epilogue", "float16", 20) + _tasks("torch", "vector_add", "float32", 10)
    bins = partition(light + heavy, 6)
    assert len(bins) == 6 and sum(len(b) for b in bins) == 46
    with_heavy = [b for b in bins if any(t.get("heavy") for t in b)]
    assert len(with_heavy) == HEAVY_LANES and all(all(t.get("heavy") for t in b) for b in with_heavy)
    assert len(partition(heavy, 6)) == HEAVY_LANES   # only heavy tasks: still that many at once
    assert len(partition(light + heavy, 1)) == 1  # one job: everything in one bin


def test_after_an_interrupt_no_worker_starts_and_no_row_is_reported():
    from harness import runner
    seen = []
    runner.kill_all()               # what an interrupt does: nothing running, the flag set
    try:
        res = runner.run_tasks(_tasks("torch", "vector_add", "float32", 2), device="cpu",
                               on_event=seen.append)
    finally:
        runner._STOPPING.clear()
    assert res.rows == [] and seen == []


def test_a_worker_started_ahead_runs_the_tasks_given_later():
    """compare starts the timing worker during the parallel phase: its imports happen first, the
    tasks arrive later, and the rows are the same as from a worker started with its tasks."""
    from harness import runner
    runner._STOPPING.clear()
    w = runner.Worker(runner.job_header("cpu"))
    ev = w.q.get(timeout=120)          # it starts and says so before it has any task
    while ev[0] != "out" or '"ready"' not in (ev[1] or ""):
        ev = w.q.get(timeout=120)
    assert w.proc.poll() is None       # waiting for its tasks
    from harness import plan as P
    from harness import registry
    registry.load_backends()
    impls = [i for i in P.select(P.Selection(problems=["vector_add"], impls=["torch:vector_add"]))]
    tasks = P.make_tasks(P.plan_cases(["vector_add"], "smoke", ["float32"], []), impls, phase="verify")
    res = runner.run_tasks(tasks, device="cpu", prestarted=w)
    assert w.proc.poll() is not None
    assert res.rows and {r["status"] for r in res.rows} == {"PASS"}
    assert {r["impl"] for r in res.rows} == {"torch:vector_add"}


def test_a_worker_started_ahead_and_not_needed_is_ended():
    from harness import runner
    runner._STOPPING.clear()
    w = runner.Worker(runner.job_header("cpu"))
    res = runner.run_tasks([], device="cpu", prestarted=w)
    assert res.rows == [] and w.proc.poll() is not None
    with runner._LIVE_LOCK:
        assert w.proc not in runner._LIVE
