"""The command line: list / verify / compare in the CPU mode, bad input, crash and hang isolation."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
PL = ROOT / "tests" / "plugins"


def cli(*args, timeout=900):
    r = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def test_list_json(capsys):
    assert main(["list", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {p["name"] for p in data["problems"]} == {"vector_add", "softmax", "gemm_epilogue"}
    ids = {(i["problem"], i["id"]) for i in data["implementations"]}
    assert ("softmax", "torch:softmax") in ids and ("softmax", "torch:softmax_naive") in ids
    assert ("gemm_epilogue", "torch:gemm_epilogue_unfused") in ids and ("vector_add", "torch:vector_add_compile") in ids
    for i in data["implementations"]:
        assert i["available"] or i["reason"], "an unavailable implementation must say why"


def test_verify_json_good_plugin(capsys):
    rc = main(["verify", "--plugin", str(PL / "good.py"), "--layer", "plugin", "--suite", "smoke",
               "--no-isolate", "--format", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert rows and all(r["status"] == "PASS" for r in rows)
    assert set(rows[0]) >= {"impl", "layer", "problem", "case", "status", "reason", "max_abs_err", "rel_err"}


def test_verify_exit_1_on_fail(capsys):
    rc = main(["verify", "--plugin", str(PL / "bad.py"), "--impl", "bad:last_unwritten",
               "--problem", "vector_add", "--suite", "smoke", "--no-isolate", "--format", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 1 and all(r["status"] == "FAIL" for r in rows)
    assert "NaN" in rows[0]["reason"]


def test_verify_custom_case(capsys):
    rc = main(["verify", "--problem", "softmax", "--impl", "torch:softmax", "--set", "M=7", "--set", "N=33",
               "--dtype", "bf16", "--no-isolate", "--format", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and rows[0]["case"] == "softmax[M=7,N=33,bfloat16]"


@pytest.mark.parametrize("args,msg", [
    (["verify", "--problem", "matmul"], "unknown problem 'matmul'"),
    (["verify", "--layer", "fortran"], "--layer: unknown layer 'fortran'"),
    (["verify", "--impl", "triton:nope"], "--impl: unknown implementation 'triton:nope'"),
    (["verify", "--dtype", "int8"], "unknown dtype 'int8'"),
    (["verify", "--suite", "huge"], "--suite: unknown suite 'huge'"),
    (["verify", "--problem", "softmax", "--set", "M=12x", "--set", "N=3"], "M: size must be a positive integer"),
    (["verify", "--problem", "softmax", "--set", "M"], "--set: expected KEY=VALUE"),
    (["verify", "--set", "M=3"], "--set needs exactly one --problem"),
    (["verify", "--plugin", "/no/such/file.py"], "--plugin: no such file"),
    (["verify", "--plugin", str(PL / "broken.py")], "ImportError: this plugin needs a package"),
    (["compare", "--problem", "gemm_epilogue", "--dtype", "float32"], "gemm_epilogue takes float16, bfloat16"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_one_line_exit_2(args, msg, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err, err
    assert "Traceback" not in err and len(err.splitlines()) <= 2


def test_crash_and_hang_are_isolated():
    rc, out, err = cli("verify", "--plugin", str(PL / "crash.py"), "--layer", "crash", "--problem",
                       "vector_add", "--set", "N=1000", "--timeout", "15", "--format", "json")
    rows = {r["impl"]: r for r in json.loads(out)}
    assert rc == 1
    assert rows["crash:abort"]["status"] == "FAIL" and "crashed the worker: signal 6" in rows["crash:abort"]["reason"]
    assert rows["crash:hang"]["status"] == "FAIL" and "no progress for 15 s" in rows["crash:hang"]["reason"]
    assert rows["crash:raises"]["status"] == "FAIL" and "compile error" in rows["crash:raises"]["reason"]
    assert rows["crash:fine"]["status"] == "PASS", "the run must go on after a crash and a hang"


def test_compare_cpu_mode_writes_results(tmp_path, capsys):
    out = tmp_path / "res"
    rc = main(["compare", "--layer", "torch", "--problem", "vector_add", "--suite", "smoke",
               "--no-isolate", "--out", str(out), "--device", "cpu"])
    text = capsys.readouterr().out
    assert rc == 0, text
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == "kernel-layers/results/1" and doc["machine"]["device"] == "cpu"
    assert "timing needs a GPU" in doc["timing"]["description"]
    timed = [r for r in doc["rows"] if r.get("phase") != "verify-suite"]
    suite = [r for r in doc["rows"] if r.get("phase") == "verify-suite"]
    assert suite and all(r["status"] == "PASS" for r in suite)
    assert timed and all(r["time"] is None and r["time_note"] == "timing needs a GPU" for r in timed)
    assert (out / "results.csv").read_text().startswith("problem,case,dtype,impl")
    assert "| problem |" in (out / "results.md").read_text()
    assert "needs GPU" in text


def test_compare_failed_verify_suite_is_not_timed(tmp_path, capsys):
    rc = main(["compare", "--plugin", str(PL / "bad.py"), "--impl", "bad:no_tail", "--problem", "vector_add",
               "--suite", "smoke", "--no-isolate", "--out", str(tmp_path), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    timed = [r for r in doc["rows"] if r.get("phase") != "verify-suite"]
    assert timed and all(r["status"] == "FAIL" and r["kind"] == "failed-verify-suite" and r["time"] is None
                         for r in timed)
