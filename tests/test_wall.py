"""harness.wall: where a compare run's wall time went, from its rows and the parent's notes."""
from harness.wall import breakdown, render


def test_breakdown_sums_rows_and_notes_and_renders_phase_shares():
    rows = [{"kind": "verified", "verify_s": 3.0, "compile": {"first_call_s": 1.0}},
            {"kind": "verified", "verify_s": 2.0, "compile": {"first_call_s": 0.5}},
            {"kind": "compile-only", "compile": {"compile_s": 4.0}},
            {"kind": "compile-only", "compile": {"compile_s": 9.0, "from_cache": True}}]
    facts = [{"_event": "phase", "name": "parallel", "start_s": 1.0, "end_s": 31.0},
             {"_event": "phase", "name": "timed", "start_s": 31.0, "end_s": 51.0},
             {"_event": "compile_ahead", "processes": 16, "units": 40, "cpu_s": 300.0, "wall_s": 25.0,
              "done_at_s": 26.0},
             {"_event": "worker_ready", "startup_s": 2.0, "startup_cpu_s": 1.5},
             {"_event": "worker_done", "cpu_s": 10.0, "checker_cpu_s": 4.0},
             {"_event": "timed_case", "case": "c", "prepare_s": 1.5, "sample_s": 6.0, "rows": 3}]
    w = breakdown(rows, facts, 60.0)
    assert w["phases"]["parallel"]["s"] == 30.0 and w["phases"]["timed"]["s"] == 20.0
    assert w["rows"] == {"n": 4, "compile_only_s": 4.0, "first_call_s": 1.5, "verify_s": 3.5}
    # the timed phase's 20 s: 7.5 s preparing and sampling its case, 12.5 s besides
    assert w["timed"] == {"cases": 1, "prepare_s": 1.5, "sample_s": 6.0, "check_s": None, "between_s": 12.5}
    assert w["compile_ahead"]["units"] == 40 and w["workers"]["cpu_s"] == 10.0
    text = render(w)
    assert "parallel phase: 30.0 s (50 %)" in text and "timed phase: 20.0 s (33 %)" in text
    assert "40 unit(s) on 16 process(es)" in text and "sampling 6.0 s" in text
    assert "no wall-time breakdown" in render(None) and "checking each row" not in text
    # the timed cases' checks of their first and last timed launches, where the run recorded them
    facts[-1]["check_s"] = 2.5
    w = breakdown(rows, facts + [dict(facts[-1], check_s=1.0)], 60.0)
    assert w["timed"]["check_s"] == 3.5 and w["timed"]["cases"] == 2
    assert "(of which checking each row's first and last timed launch 3.5 s)" in render(w)
    assert "the rest of the timed phase (settling rows, handing cases and rows over, memory given back) 5.0 s" in render(w)   # 20 - 2 x 7.5
    # ... and how many of those checks passed on the bits the rows' verification passed with
    w = breakdown(rows, facts[:-1] + [dict(facts[-1], checks=6, same_bits=5)], 60.0)
    assert w["timed"]["checks"] == 6 and w["timed"]["same_bits"] == 5
    assert "6 checks, 5 passed on the bits the row's verification passed with" in render(w)


def test_verification_parts_are_summed_over_rows_and_named():
    rows = [{"kind": "verified", "verify_s": 3.0,
             "verify_parts": {"inputs_s": 0.5, "launch_s": 1.0, "guard_s": 0.1, "check_s": 1.4,
                              "reference_s": 0.6, "inputs_check_s": 0.1, "compare_s": 0.7,
                              "references": 3, "compares": 3}},
            {"kind": "verified", "verify_s": 1.0,
             "verify_parts": {"inputs_s": 0.25, "launch_s": 0.5, "guard_s": 0.05, "check_s": 0.2,
                              "inputs_check_s": 0.05, "compare_s": 0.1, "compares": 1}},
            {"kind": "verified", "verify_s": 1.0}]   # a row from before the parts were recorded
    w = breakdown(rows, [], 10.0)
    vp = w["verify_parts"]
    assert vp["rows"] == 2 and vp["references"] == 3 and vp["compares"] == 4
    assert vp["launch_s"] == 1.5 and vp["check_s"] == 1.6 and vp["reference_s"] == 0.6
    text = render(w)
    assert "verification of 2 row(s)" in text and "float64 references 0.6 s" in text
    assert "3 reference(s) computed, 4 output(s) compared" in text
    assert breakdown(rows[2:], [], 1.0)["verify_parts"] is None


def test_the_timing_worker_reports_the_seconds_its_checks_took():
    """A timed case's event says how much of its sampling went to checking each row's first and
    last timed launch (the checker's float64 comparisons), so the wall report can tell them apart."""
    from harness import problems, registry, worker
    p = problems.get("softmax")
    case = p.case(M=4, N=33, dtype="float32")
    impl = registry.get("softmax", "torch:softmax")
    events, rows = [], {impl.id: {"status": None}}
    task = {"id": "t", "case": case.to_json(), "problem": "softmax", "impls": [impl.id]}
    worker._time_task(task, {"device": "cpu", "timing": {"min_samples": 3, "time_cap_s": 0.05}},
                      lambda **e: events.append(e), p, case, "cpu", [impl], rows)
    (ev,) = [e for e in events if e.get("event") == "timed_case"]
    assert 0 < ev["check_s"] <= ev["sample_s"]
    assert rows[impl.id]["time"]["samples"] >= 3
    assert ev["checks"] == 2 and ev["same_bits"] == 0   # no verified bits to match: the whole check


def test_timed_launches_with_the_verified_bits_pass_on_them_and_other_bits_are_checked_whole():
    """The row's verification hands its first seed's output fingerprint to the timing; a timed
    launch with those bits passes on them (no float64 reference), one with other bits (here: a
    fingerprint that cannot match) still gets the whole check and passes on its merits."""
    from harness import problems, registry, verify, worker
    p = problems.get("softmax")
    case = p.case(M=6, N=40, dtype="float32")
    impl = registry.get("softmax", "torch:softmax")
    bits = verify.verify_case(impl, p, case, "cpu").details["bits"]
    for given, matched in ((bits, 2), ("0" * 32, 0)):
        events, rows = [], {impl.id: {"status": "PASS", "bits": given}}
        task = {"id": "t", "case": case.to_json(), "problem": "softmax", "impls": [impl.id]}
        worker._time_task(task, {"device": "cpu", "timing": {"min_samples": 3, "time_cap_s": 0.05}},
                          lambda **e: events.append(e), p, case, "cpu", [impl], rows)
        (ev,) = [e for e in events if e.get("event") == "timed_case"]
        assert (ev["checks"], ev["same_bits"]) == (2, matched)
        assert rows[impl.id]["status"] == "PASS" and rows[impl.id]["time"]["samples"] >= 3
