"""``python -m harness check``: what it selects, what it computes, its errors (CPU)."""
import math

import pytest

from harness import check_cmd, registry
from harness import plan as P


def test_selects_the_layers_ids_candidates_and_the_references():
    ids, probs = check_cmd.selected_ids(["cutile"], ["softmax"], "all", [])
    assert probs == ["softmax"]
    assert "cutile:softmax" in ids and "torch:softmax" in ids and "torch:softmax_compile" in ids
    cands = {c.id for c in registry.candidates() if c.layer == "cutile" and c.problem == "softmax"}
    assert cands and cands <= set(ids)                      # every candidate of the layer is checked
    assert not [i for i in ids if i.split(":")[0] not in ("cutile", "torch", "quack", "liger")]


def test_only_candidates_keeps_the_default_and_drops_plain_variants():
    every, _ = check_cmd.selected_ids(["cutile"], ["softmax"], "all", [])
    few, _ = check_cmd.selected_ids(["cutile"], ["softmax"], "candidates", [])
    assert "cutile:softmax" in few and "cutile:softmax_simple" in every
    assert "cutile:softmax_simple" not in few and set(few) < set(every)


@pytest.mark.parametrize("argv, words", [
    (["nolayer"], "unknown layer 'nolayer'"),
    (["cutile", "--impl", "cutile:nothing"], "--impl: 'cutile:nothing'"),
])
def test_bad_selectors_are_one_line_errors(argv, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        check_cmd.selected_ids(argv[0:1], None, "all", argv[2:3])


def _row(impl, us, case="softmax[M=2,N=3,bfloat16]", status="PASS", phase="timed", pct=50.0):
    return {"impl": impl, "layer": impl.split(":")[0], "problem": "softmax", "role": "default",
            "case": {"id": case}, "status": status, "phase": phase, "reason": "boom" if status == "FAIL" else "",
            "time": {"median_s": us * 1e-6} if status == "PASS" and phase == "timed" else None, "pct_ceiling": pct}


def test_speed_is_against_the_better_of_eager_and_compile():
    rows = [_row("torch:softmax", 10.0), _row("torch:softmax_compile", 8.0), _row("cutile:softmax", 4.0, pct=80.0),
            _row("torch:softmax", 30.0, case="c2"), _row("torch:softmax_compile", 60.0, case="c2"),
            _row("cutile:softmax", 60.0, case="c2", pct=20.0),
            _row("cutile:softmax", 0, case="v1", status="FAIL", phase="verify-suite")]
    s = check_cmd.summarize(rows, {"cutile"})["impls"]["softmax/cutile:softmax"]
    assert s["timed"] == 2
    assert s["geomean_x"] == pytest.approx(math.sqrt(2.0 * 0.5))     # 8/4 and 30/60
    assert (s["worst_x"], s["worst_case"]) == (pytest.approx(0.5), "c2")
    assert s["min_pct"] == 20.0 and s["geomean_pct"] == pytest.approx(40.0)
    assert s["verify"]["FAIL"] == 1 and s["fails"][0].startswith("v1: boom")


def test_out_of_memory_is_listed_as_a_skip_not_a_fail():
    row = dict(_row("cutile:softmax", 0, case="big", status="SKIP"), kind="out-of-memory",
               reason="out of GPU memory even when run alone in the worker (needs ~33.7 GiB, device has 79.2 GiB)")
    s = check_cmd.summarize([row], {"cutile"})["impls"]["softmax/cutile:softmax"]
    assert s["verify"]["SKIP"] == 1 and s["verify"]["FAIL"] == 0 and not s["fails"]
    assert s["oom"] == [f"big: {row['reason']}"]


def test_timed_suites_may_be_several():
    plan = P.plan_cases(["softmax"], "models,edge", None, [])
    ids = [c.id for _, cases in plan for c in cases]
    from harness import problems
    p = problems.get("softmax")
    assert len(ids) == len(set(ids)) == len({c.id for s in ("models", "edge") for c in p.cases(s)})
    with pytest.raises(P.PlanError, match="--suite: unknown suite 'nope'"):
        P.plan_cases(["softmax"], "models,nope", None, [])


def test_selecting_leaves_the_registry_as_it_was():
    before = {i.key for i in registry.all_impls()}
    check_cmd.selected_ids(["cutile"], None, "all", [])
    assert {i.key for i in registry.all_impls()} == before


def test_named_ids_bring_their_problems_defaults_only():
    ids, probs = check_cmd.selected_ids(["cutile"], None, "all", ["cutile:softmax_next"])
    assert probs == ["softmax"]
    assert "cutile:softmax" in ids and "cutile:softmax_next" in ids
    assert not [i for i in ids if i.startswith("cutile:") and i not in ("cutile:softmax", "cutile:softmax_next")]
