"""Who a stopped worker's lane blames: the implementation it was on, and when a step ran several
implementations at once (the interleaved timing of a case), each of them again alone first."""
from __future__ import annotations

from harness import problems
from harness.runner import Lane, _Life

IMPLS = ["torch:vector_add", "triton:vector_add", "torch:vector_add_compile"]


def _task(tid: str, n: int) -> dict:
    case = problems.get("vector_add").case("float32", N=n)
    return {"id": tid, "problem": "vector_add", "case": case.to_json(), "impls": list(IMPLS), "phase": "timed"}


def _lane() -> Lane:
    return Lane([], {}, timeout_s=30)


def _stopped(lane: Lane, task: dict, impl: str | None, timed_out: bool = True) -> None:
    life = _Life(current=task["id"], impl=impl, timed_out=timed_out)
    lane._blame(life, -9)


def test_a_hang_in_a_step_of_several_implementations_runs_each_alone():
    lane = _lane()
    first, later = _task("t0", 1000), _task("t1", 4096)
    lane.pending = [first, later]
    _stopped(lane, first, ",".join(IMPLS))
    assert lane.res.rows == [], "nobody is blamed before each ran alone"
    alone = lane.pending[:3]
    assert [t["impls"] for t in alone] == [[i] for i in IMPLS]
    assert all(t["case"] == first["case"] for t in alone) and len({t["id"] for t in alone}) == 3
    assert lane.pending[3]["impls"] == IMPLS, "the later case keeps every implementation"
    assert any("each runs again alone" in line for line in lane.res.log)

    # run alone, the second hangs again: it alone is blamed, and skipped on the later case
    lane.pending = lane.pending[1:]          # the first ran alone and finished
    _stopped(lane, alone[1], "triton:vector_add")
    row, skipped = lane.res.rows
    assert row["impl"] == "triton:vector_add" and row["status"] == "FAIL" and "no progress" in row["reason"]
    assert row["case"]["id"] == problems.get("vector_add").case("float32", N=1000).id
    assert skipped["impl"] == "triton:vector_add" and "not run: hung on" in skipped["reason"]
    assert skipped["case"]["id"] == problems.get("vector_add").case("float32", N=4096).id
    assert [t["impls"] for t in lane.pending] == [["torch:vector_add_compile"],
                                                   ["torch:vector_add", "torch:vector_add_compile"]]


def test_a_crash_in_a_step_of_one_implementation_blames_it_alone():
    lane = _lane()
    task = _task("t0", 1000)
    lane.pending = [task]
    _stopped(lane, task, "torch:vector_add_compile", timed_out=False)
    (row,) = lane.res.rows
    assert row["impl"] == "torch:vector_add_compile" and "crashed the worker" in row["reason"]
    assert lane.pending[0]["impls"] == ["torch:vector_add", "triton:vector_add"]
