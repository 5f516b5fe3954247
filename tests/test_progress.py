"""What a run prints while it goes: when no row has finished for a while, a line names what is in
flight (a hung kernel is seen by name long before the runner's timeout kills its worker)."""
from __future__ import annotations

import io

from rich.console import Console

from harness.progress import STALL_S, RunProgress

TASK = {"id": "t1", "problem": "softmax", "case": {"dims": {"M": 4096, "N": 50257}, "dtype": "bfloat16"}}


def _progress() -> RunProgress:
    p = RunProgress(Console(file=io.StringIO()), total=3, title="verify suite", plain=True, quiet=True)
    p.add_tasks([TASK])
    return p


def test_a_stall_names_the_implementation_and_case_in_flight():
    p = _progress()
    p.event({"event": "step", "task": "t1", "impl": "tilelang:softmax_next", "phase": "verify"})
    assert p.stalled(now=p.last_row + STALL_S / 2) is None
    line = p.stalled(now=p.last_row + STALL_S + 1)
    assert line is not None
    assert "verifying tilelang:softmax_next on softmax 4096x50257 bfloat16" in line
    # said once per STALL_S, not on every tick
    assert p.stalled(now=p.last_row + STALL_S + 2) is None


def test_nothing_in_flight_after_the_task_is_done_or_its_row_came_from_a_killed_worker():
    p = _progress()
    p.event({"event": "step", "task": "t1", "impl": "cutile:softmax", "phase": "time"})
    p.event({"event": "task_done", "task": "t1"})
    line = p.stalled(now=p.last_row + STALL_S + 1)
    assert "cutile:softmax" not in line and "no implementation running" in line

    q = _progress()
    q.event({"event": "step", "task": "t1", "impl": "helion:softmax", "phase": "verify"})
    q.event({"event": "row", "row": {"impl": "helion:softmax", "problem": "softmax", "case": TASK["case"],
                                     "status": "FAIL", "kind": "timeout", "reason": "killed"}})
    assert q.done == 1
    assert "helion:softmax" not in q.stalled(now=q.last_row + STALL_S + 1)


def test_a_finished_row_restarts_the_quiet_clock():
    p = _progress()
    p.event({"event": "step", "task": "t1", "impl": "triton:softmax", "phase": "verify"})
    p.event({"event": "row", "row": {"impl": "triton:softmax", "problem": "softmax", "case": TASK["case"],
                                     "status": "PASS"}})
    assert p.stalled(now=p.last_row + STALL_S - 1) is None


def test_the_parallel_phase_says_its_estimate_leaves_out_the_timed_phase(capsys):
    """On a GPU the verify phase's time left is its own: the lines say that the timed phase follows
    and how large it is, so that 'ETA 7 s' is not read as the run's end."""
    from harness import problems, registry
    from harness.compare import _timed_phase_text

    sm, va = problems.get("softmax"), problems.get("vector_add")
    impls = [registry.get("softmax", "torch:softmax"), registry.get("softmax", "triton:softmax"),
             registry.get("vector_add", "torch:vector_add")]
    then = _timed_phase_text([(sm, sm.cases("smoke")), (va, va.cases("smoke"))], impls)
    n_sm, n_va = len(sm.cases("smoke")), len(va.cases("smoke"))
    assert then == (f"the timed phase: {n_sm + n_va} case(s), {2 * n_sm + n_va} row(s), "
                    "one case at a time on the GPU")
    p = RunProgress(Console(file=io.StringIO()), total=2, title="verify suite", plain=True, then=then)
    p.add_tasks([TASK])
    with p:
        p.event({"event": "row", "row": {"impl": "torch:softmax", "problem": "softmax", "case": TASK["case"],
                                         "status": "PASS", "phase": "verify-suite"}})
    err = capsys.readouterr().err
    assert f"verify suite: 2 row(s); then {then}" in err
    assert "ETA" in err and "+ the timed phase" in err
    # without a phase after it (the timed phase itself, the CPU mode) the estimate stands alone
    q = RunProgress(Console(file=io.StringIO()), total=2, title="timed cases", plain=True)
    with q:
        q.event({"event": "row", "row": {"impl": "torch:softmax", "problem": "softmax", "case": TASK["case"],
                                         "status": "PASS"}})
    assert "+ the timed phase" not in capsys.readouterr().err
    assert _timed_phase_text([(sm, sm.cases("smoke"))], impls[2:]) == ""
