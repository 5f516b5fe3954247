"""make_plots on a hand-written fixture (tests/fixtures/plots_results_fixture.json, not a measurement)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from harness.plots import make_plots, timed_rows  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "plots_results_fixture.json"
PNG = b"\x89PNG\r\n\x1a\n"


def load():
    return json.loads(FIXTURE.read_text())


def test_all_five_plots_from_the_fixture(tmp_path):
    paths = make_plots(load(), tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["bandwidth_softmax.png", "bandwidth_vector_add.png", "loc_vs_ceiling.png",
                     "roofline.png", "tflops_gemm_epilogue.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 20_000, p


def test_only_pass_rows_with_a_time_are_drawn():
    res = load()
    rows = timed_rows(res)
    assert rows and all(r["status"] == "PASS" for r in rows)
    assert len(rows) == len(res["rows"]) - 2  # the FAIL and the SKIP row of the fixture


def test_tolerates_missing_fields(tmp_path):
    res = load()
    for r in res["rows"][::3]:
        r["gbps"] = r["tflops"] = None
        r["loc"] = None
    for r in res["rows"][1::5]:
        r["pct_ceiling"] = None
    res["ceilings"] = None
    res["machine"] = {}
    assert len(make_plots(res, tmp_path)) == 5
    # no rows at all, or only failures: nothing to draw, no error
    assert make_plots({"rows": []}, tmp_path / "empty") == []
    assert make_plots({"rows": [{"status": "FAIL", "time": None}]}, tmp_path / "fail") == []
    # a CPU run (no timed rows, null ceilings)
    assert make_plots({"machine": {"gpu": None}, "ceilings": {"copy_bytes_per_s": None,
                                                              "gemm_flops_per_s": {}}, "rows": []},
                      tmp_path / "cpu") == []


def test_rejects_a_non_dict():
    with pytest.raises(ValueError, match="results"):
        make_plots([], Path("."))
