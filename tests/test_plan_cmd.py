"""``python -m harness plan``: the planner's answer for one case, and the files it launches."""
from __future__ import annotations

import json

import pytest

from harness.cli import main


def test_plan_names_the_planner_the_variant_and_the_kernel_file(capsys):
    assert main(["plan", "cutile:softmax", "--set", "M=4096", "--set", "N=151936", "--dtype", "bfloat16",
                 "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["planner"] == "cutile_src.dispatch.plan" and d["planner_at"].startswith("cutile_src/dispatch.py:")
    assert d["variant"] == "online"           # a row of 151936 columns rounds up past one tile
    assert [s["file"] for s in d["launches"]] == ["cutile_src/softmax_online.py"]
    assert d["launches"][0]["kernels"] == ["softmax_online_kernel"]


def test_plan_of_a_short_row_and_of_a_twin(capsys):
    assert main(["plan", "cutile:softmax", "--set", "M=64", "--set", "N=1001"]) == 0   # rows off 16 bytes
    out = capsys.readouterr().out
    assert "variant   rows\n" in out and "cutile_src/softmax_rows.py: softmax_rows_kernel" in out
    assert main(["plan", "cutile:softmax", "--set", "M=64", "--set", "N=1000"]) == 0   # 16-byte rows: TMA
    out = capsys.readouterr().out
    assert "variant   rows_tma" in out and "cutile_src/softmax_rows_tma.py: softmax_rows_tma_kernel" in out
    assert main(["plan", "cuda:softmax_simple", "--set", "M=4", "--set", "N=33"]) == 0
    out = capsys.readouterr().out
    assert "planner   none" in out and "cuda_src/softmax.cu: softmax_simple_kernel" in out


def test_plan_over_a_suite_lists_every_case(capsys):
    assert main(["plan", "cuda:vector_add", "--suite", "smoke"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all(line.split()[-1] == "unmasked" for line in lines)


@pytest.mark.parametrize("args,msg", [
    (["plan", "cutile:nothing", "--set", "M=1"], "is not registered"),
    (["plan", "cutile:softmax"], "--set"),
    (["plan", "cutile:softmax", "--suite", "smoke", "--set", "M=2"], "one or the other"),
])
def test_plan_bad_input_is_one_line(args, msg, capsys):
    assert main(args) == 2
    assert msg in capsys.readouterr().err


def test_plan_of_a_candidate_names_its_kernel_files(capsys):
    """A candidate (built, not yet the default) is planned too: the user sees what it would launch."""
    assert main(["plan", "cutile:softmax_split", "--set", "M=2", "--set", "N=2000000", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["impl"] == "cutile:softmax_split"
    assert [s["file"] for s in d["launches"]] == ["cutile_src/softmax_split.py"]
