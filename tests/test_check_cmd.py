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


def _fake_compare(calls, rc_of):
    """A stand-in for one compare run: records its argv, writes a results.json of one row of the
    phase the run is asked for (the verify suite's when --verify-suite-only)."""
    import json

    def fake(argv, folder):
        calls.append(argv)
        folder.mkdir(parents=True, exist_ok=True)
        phase = "verify-suite" if "--verify-suite-only" in argv else "timed"
        row = _row("cutile:softmax", 5.0, case=f"{phase}-case", phase=phase)
        (folder / "results.json").write_text(json.dumps({"rows": [row]}))
        return rc_of(argv)
    return fake


@pytest.fixture
def no_admission(monkeypatch):
    """check's run admits the candidates into this process's registry (its own selection); here
    that would leak into every later test's registry: kept out."""
    monkeypatch.setattr(registry, "admit_candidates", lambda: None)


def _check_args(tmp_path, **kw):
    import argparse
    base = dict(layers=["cutile"], problem=["softmax"], only="all", impl=[], suite="models,edge",
                no_verify_suite=False, out=str(tmp_path / "chk"), time_cap=0.2, min_samples=10, timeout=None,
                jobs=None, device="cpu", store=None)
    return argparse.Namespace(**{**base, **kw})


def test_check_times_first_then_runs_the_verify_suite(tmp_path, monkeypatch, no_admission):
    import json

    from rich.console import Console
    calls = []
    monkeypatch.setattr(check_cmd, "_compare", _fake_compare(calls, lambda argv: 0))
    rc = check_cmd.run(_check_args(tmp_path), Console(file=open(tmp_path / "log", "w")))
    assert rc == 0 and len(calls) == 2
    first, second = calls
    assert "--no-verify-suite" in first and "--verify-suite-only" not in first
    assert "--verify-suite-only" in second and "--no-verify-suite" not in second
    assert first[first.index("--out") + 1] == str(tmp_path / "chk")
    assert second[second.index("--out") + 1] == str(tmp_path / "chk" / check_cmd.VERIFY_SUITE)
    s = json.loads((tmp_path / "chk" / "check.json").read_text())["impls"]["softmax/cutile:softmax"]
    assert s["timed"] == 1 and s["verify"]["PASS"] == 2     # both runs' rows in one summary


def test_a_check_stopped_in_its_timed_run_keeps_its_summary_and_stops(tmp_path, monkeypatch, no_admission):
    import json

    from rich.console import Console
    calls = []
    monkeypatch.setattr(check_cmd, "_compare", _fake_compare(calls, lambda argv: check_cmd.INTERRUPTED))
    rc = check_cmd.run(_check_args(tmp_path), Console(file=open(tmp_path / "log", "w")))
    assert rc == check_cmd.INTERRUPTED and len(calls) == 1
    assert json.loads((tmp_path / "chk" / "check.json").read_text())["impls"]["softmax/cutile:softmax"]["timed"] == 1


def test_no_verify_suite_is_one_timed_run(tmp_path, monkeypatch, no_admission):
    from rich.console import Console
    calls = []
    monkeypatch.setattr(check_cmd, "_compare", _fake_compare(calls, lambda argv: 0))
    check_cmd.run(_check_args(tmp_path, no_verify_suite=True), Console(file=open(tmp_path / "log", "w")))
    assert len(calls) == 1 and "--no-verify-suite" in calls[0]


def test_verify_suite_only_times_nothing(tmp_path):
    """compare --verify-suite-only: the verify suite's rows and no timed case (CPU, torch eager)."""
    import json

    from harness.cli import main
    out = tmp_path / "v"
    rc = main(["compare", "--problem", "vector_add", "--impl", "torch:vector_add", "--verify-suite-only",
               "--out", str(out), "--format", "json", "--jobs", "1", "--compile-jobs", "0"])
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rc == 0 and rows and {r["phase"] for r in rows} == {"verify-suite"}
    from harness import problems
    assert {r["case"]["id"] for r in rows} == {c.id for c in problems.get("vector_add").cases("verify")}


def test_verify_suite_only_with_no_verify_suite_is_a_usage_error(tmp_path):
    from harness.args import UsageError
    from harness.cli import build_parser
    from harness import compare
    argv = ["compare", "--problem", "vector_add", "--verify-suite-only", "--no-verify-suite",
            "--out", str(tmp_path / "x")]
    with pytest.raises(UsageError, match="--verify-suite-only"):
        compare.run(build_parser().parse_args(argv), None, argv)
    assert not (tmp_path / "x").exists()
