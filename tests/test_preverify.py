"""On a GPU, compare verifies the timed cases in its parallel phase (three seeds, one task per case
and layer) and the timed worker only times what passed, keeping that verdict."""
from harness import problems
from harness.compare import _preverify_tasks, _with_preverified
from harness.plan import make_tasks, select, Selection
from harness.worker import process_task


def _plan():
    p = problems.get("softmax")
    return [(p, [p.case(M=3, N=40, dtype="float32"), p.case(M=5, N=17, dtype="float32")])]


def test_preverify_tasks_one_per_case_and_layer():
    impls = select(Selection(problems=["softmax"], impls=["torch:softmax", "torch:softmax_naive",
                                                          "triton:softmax"]))
    timed = make_tasks(_plan(), impls, time=True)
    assert len(timed) == 2 and all(len(t["impls"]) == 3 for t in timed)
    pre = _preverify_tasks(_plan(), impls, set())
    assert len(pre) == 4                                   # 2 cases x 2 layers
    assert len({t["id"] for t in pre}) == 4
    assert all(t["preverify"] and not t["time"] and t["phase"] == "timed" for t in pre)
    done = {("timed", "softmax", "triton:softmax", timed[0]["case"]["id"])}   # --resume: a row kept
    assert len(_preverify_tasks(_plan(), impls, done)) == 3
    assert sorted(tuple(t["impls"]) for t in pre if t["case"] == timed[0]["case"]) == \
        [("torch:softmax", "torch:softmax_naive"), ("triton:softmax",)]


def test_with_preverified_attaches_only_matching_verdicts():
    impls = select(Selection(problems=["softmax"], impls=["torch:softmax", "torch:softmax_naive"]))
    timed = make_tasks(_plan(), impls, time=True)
    cid = timed[0]["case"]["id"]
    out = _with_preverified(timed, {("torch:softmax", cid): {"status": "PASS"}})
    assert out[0]["verified"] == {"torch:softmax": {"status": "PASS"}}
    assert "verified" not in out[1]


def _run(task):
    rows = []
    process_task(task, {"device": "cpu"}, lambda **ev: rows.append(ev["row"]) if ev.get("event") == "row" else None)
    return {r["impl"]: r for r in rows}


def test_preverify_task_marks_passes_pending_timing():
    impls = select(Selection(problems=["softmax"], impls=["torch:softmax"]))
    task = _preverify_tasks(_plan(), impls, set())[0]
    row = _run(task)["torch:softmax"]
    assert row["status"] == "PASS" and row["pending_timing"] is True and row["phase"] == "timed"
    assert row["max_abs_err"] is not None and row["verify_s"] > 0
    # the fingerprint its timing checks against travels with the verdict ...
    assert len(row["bits"]) == 32
    # ... and a verify-suite case, never timed, has none
    (suite,) = [t for t in make_tasks(_plan(), impls, phase="verify-suite", prefix="v")
                if t["case"] == task["case"]]
    suite_row = _run(suite)["torch:softmax"]
    assert suite_row["status"] == "PASS" and "bits" not in suite_row


def test_timed_task_keeps_the_parallel_verdict_and_does_not_verify_again():
    impls = select(Selection(problems=["softmax"], impls=["torch:softmax", "torch:softmax_naive"]))
    task = make_tasks(_plan(), impls, time=True)[0]
    verdict = {"status": "PASS", "kind": "verified", "reason": "", "max_abs_err": 1.25e-9, "rel_err": 3e-10,
               "verify_s": 0.5, "compile": {"first_call_s": 0.01}, "pending_timing": True}
    rows = _run(dict(task, verified={"torch:softmax": verdict}))
    kept = rows["torch:softmax"]
    assert kept["max_abs_err"] == 1.25e-9 and kept["verify_s"] == 0.5 and "pending_timing" not in kept
    other = rows["torch:softmax_naive"]       # no verdict: verified here, as before
    assert other["status"] == "PASS" and other["max_abs_err"] != 1.25e-9 and "pending_timing" not in other


def test_large_cases_are_marked_heavy():
    p = problems.get("softmax")
    plan = [(p, [p.case(M=4096, N=151_936, dtype="float32"), p.case(M=3, N=40, dtype="float32")])]
    impls = select(Selection(problems=["softmax"], impls=["torch:softmax"]))
    pre = _preverify_tasks(plan, impls, set())
    assert [t["heavy"] for t in pre] == [True, False]


def test_a_heavy_case_is_one_task_of_every_layer_verified_seed_by_seed():
    p = problems.get("softmax")
    plan = [(p, [p.case(M=4096, N=151_936, dtype="float32"), p.case(M=3, N=40, dtype="float32")])]
    impls = select(Selection(problems=["softmax"], impls=["torch:softmax", "torch:softmax_naive",
                                                          "triton:softmax"]))
    pre = _preverify_tasks(plan, impls, set())
    heavy = [t for t in pre if t["heavy"]]
    assert len(heavy) == 1 and heavy[0]["seed_major"] is True
    assert sorted(heavy[0]["impls"]) == ["torch:softmax", "torch:softmax_naive", "triton:softmax"]
    light = [t for t in pre if not t["heavy"]]    # small cases keep a task a layer
    assert sorted(tuple(t["impls"]) for t in light) == [("torch:softmax", "torch:softmax_naive"),
                                                          ("triton:softmax",)]
    assert not any(t.get("seed_major") for t in light)
    assert len({t["id"] for t in pre}) == len(pre)


def _judged(monkeypatch):
    """Record (implementation, seed) of every output the checker judges."""
    from harness import verify
    seen, judge = [], verify.judge

    def spy(impl, problem, case, seed, *a, **k):
        seen.append((impl.id, seed))
        return judge(impl, problem, case, seed, *a, **k)
    monkeypatch.setattr(verify, "judge", spy)
    _rebaseline(monkeypatch)
    return seen


def _rebaseline(monkeypatch):
    """The tamper check's record of the harness taken again after the spy went in (it is taken
    once a process: an earlier test's record would see the spy as a patched harness)."""
    from harness import tamper
    monkeypatch.setattr(tamper, "_BASE", None)


def test_seed_major_task_judges_every_implementation_on_a_seed_before_the_next(monkeypatch):
    impls = select(Selection(problems=["softmax"], impls=["torch:softmax", "torch:softmax_naive"]))
    task = dict(_preverify_tasks(_plan(), impls, set())[0], seed_major=True)
    seen = _judged(monkeypatch)
    rows = _run(task)
    seeds = [s for _, s in seen]
    assert seeds == sorted(seeds) and sorted(set(seeds)) == [0, 1, 2]
    for iid in ("torch:softmax", "torch:softmax_naive"):
        assert {s for i, s in seen if i == iid} == {0, 1, 2}
        r = rows[iid]   # the verdict of three seeds, as an implementation-by-implementation run gives
        assert r["status"] == "PASS" and r["pending_timing"] is True and r["verify_s"] > 0
        assert r["compile"]["first_call_s"] >= 0 and r["max_abs_err"] is not None
    plain = _run(dict(task, seed_major=False))
    for iid in rows:
        assert plain[iid]["max_abs_err"] == rows[iid]["max_abs_err"]


def test_seed_major_task_drops_an_implementation_at_its_first_failing_seed(monkeypatch):
    from harness import verify
    from harness.output_check import Check
    impls = select(Selection(problems=["softmax"], impls=["torch:softmax", "torch:softmax_naive"]))
    task = dict(_preverify_tasks(_plan(), impls, set())[0], seed_major=True)
    seen, judge = [], verify.judge

    def wrong_on_seed_1(impl, problem, case, seed, *a, **k):   # as if the naive softmax broke on seed 1
        seen.append((impl.id, seed))
        if impl.id == "torch:softmax_naive" and seed == 1:
            return Check(False, "planted mismatch", 1.0, 1.0)
        return judge(impl, problem, case, seed, *a, **k)
    monkeypatch.setattr(verify, "judge", wrong_on_seed_1)
    _rebaseline(monkeypatch)
    rows = _run(task)
    bad = rows["torch:softmax_naive"]
    assert bad["status"] == "FAIL" and "seed 1" in bad["reason"] and "pending_timing" not in bad
    assert ("torch:softmax_naive", 2) not in seen          # not run again after it failed
    good = rows["torch:softmax"]
    assert good["status"] == "PASS" and ("torch:softmax", 2) in seen
