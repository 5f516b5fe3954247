"""The command line: list / verify / compare in the CPU mode, bad input, crash and hang isolation."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
PL = ROOT / "tests" / "plugins"


def _env():
    """The checkout on PYTHONPATH: the subprocess runs in a tmp folder, so a default results/ (the
    store, a run folder) lands there and never in the checkout."""
    import os
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def cli(*args, cwd, timeout=900):
    r = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                       cwd=cwd, env=_env(), timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def test_list_json(capsys):
    assert main(["list", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {p["name"] for p in data["problems"]} == {"vector_add", "softmax", "gemm_epilogue", "attention"}
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


def test_verify_json_reports_each_row_on_stderr(capsys):
    """--format json: stdout is the JSON alone; each row is also reported on stderr as it finishes,
    so a run cut short by a time limit still shows what it verified."""
    rc = main(["verify", "--problem", "vector_add", "--impl", "torch:vector_add", "--suite", "smoke",
               "--no-isolate", "--format", "json"])
    cap = capsys.readouterr()
    rows = json.loads(cap.out)
    assert rc == 0 and rows
    lines = [ln for ln in cap.err.splitlines() if "torch:vector_add" in ln]
    assert len(lines) == len(rows) and all("PASS" in ln for ln in lines)
    assert all(r["case"].split("[")[0] == "vector_add" for r in rows)


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
    (["compare", "--timeout", "-1"], "--timeout must be > 0"),
    (["compare", "--time-cap", "-1"], "--time-cap must be > 0"),
    (["compare", "--min-samples", "0"], "--min-samples must be > 0"),
    (["verify", "--problem", "vector_add", "--set", "N=5", "--set", "N=7"], "--set: N given twice"),
    (["verify", "--problem", "vector_add", "--set", "N=5", "--set", "misalign=abc"], "misalign: must be an integer"),
    (["verify", "--problem", ""], "expected a problem name"),
    (["verify", "--plugin", str(PL / "exits.py")], "called exit(3) while loading"),
    (["verify", "--plugin", str(PL / "clash.py")], "torch:vector_add (vector_add) from"),
    (["compare", "--roles", "fastest"], "--roles: fastest is not a role"),
])
def test_bad_input_one_line_exit_2(args, msg, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err, err
    assert "Traceback" not in err and len(err.splitlines()) <= 2


def test_crash_and_hang_are_isolated(tmp_path):
    rc, out, err = cli("verify", "--plugin", str(PL / "crash.py"), "--layer", "crash", "--problem",
                       "vector_add", "--set", "N=1000", "--timeout", "15", "--format", "json", cwd=tmp_path)
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
    ran = [r for r in suite if r["impl"] != "torch:vector_add_compile"]
    assert ran and all(r["status"] == "PASS" for r in ran)
    # torch.compile's rows are GPU rows (on a CPU it would verify Inductor's C++, not its GPU code)
    compiled = [r for r in suite if r["impl"] == "torch:vector_add_compile"]
    assert compiled and all(r["status"] == "SKIP" and r["kind"] == "needs-gpu" for r in compiled)
    assert timed and all(r["time"] is None for r in timed)
    assert all(r["time_note"] == "timing needs a GPU" for r in timed if r["impl"] != "torch:vector_add_compile")
    assert (out / "results.csv").read_text().startswith("problem,phase,case,dtype,impl")
    assert "| problem |" in (out / "results.md").read_text()
    assert "no GPU (CPU mode): nothing timed" in text and "verification against the float64 reference" in text


def test_a_test_run_writes_nothing_into_the_checkouts_results(default_results, capsys):
    """compare without --out or --store, in the test process: its run folder and its store row
    land under the test's tmp folder (conftest's default_results), the checkout's results/ is
    left as it was (the same fixture fails any test that writes there)."""
    from conftest import results_snapshot
    before = results_snapshot()
    rc = main(["compare", "--layer", "torch", "--problem", "vector_add", "--set", "N=1000",
               "--no-verify-suite", "--no-isolate", "--device", "cpu"])
    assert rc == 0, capsys.readouterr().err
    assert results_snapshot() == before
    assert (default_results / "runs.sqlite").is_file()
    assert [p for p in default_results.iterdir() if (p / "results.json").is_file()]


def test_compare_failed_verify_suite_is_not_timed(tmp_path, capsys):
    rc = main(["compare", "--plugin", str(PL / "bad.py"), "--impl", "bad:no_tail", "--problem", "vector_add",
               "--suite", "smoke", "--no-isolate", "--out", str(tmp_path), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    timed = [r for r in doc["rows"] if r.get("phase") != "verify-suite"]
    assert timed and all(r["status"] == "FAIL" and r["kind"] == "failed-verify-suite" and r["time"] is None
                         for r in timed)


def test_plugin_clash_names_both_origins(capsys):
    assert main(["list", "--plugin", str(PL / "clash.py")]) == 2
    err = capsys.readouterr().err
    assert "clash.py" in err and "backends.torch_layer" in err


@pytest.mark.parametrize("kind", ["file", "nonempty", "readonly"])
def test_bad_out_rejected_before_running(tmp_path, kind, capsys):
    import os
    target = tmp_path / "out"
    if kind == "file":
        target.write_text("x")
    elif kind == "nonempty":
        target.mkdir()
        (target / "something").write_text("x")
    else:
        target.mkdir()
        os.chmod(target, 0o500)
        if os.access(target, os.W_OK):  # root ignores the mode: nothing to test here
            pytest.skip("this user can write into a read-only folder")
    rc = main(["compare", "--layer", "torch", "--problem", "vector_add", "--suite", "smoke",
               "--device", "cpu", "--out", str(target), "--no-isolate"])
    err = capsys.readouterr().err
    assert rc == 2 and "--out" in err and len(err.strip().splitlines()) == 1, err
    assert not (target / "run.json").exists() if target.is_dir() else True


def test_default_result_folders_are_unique():
    from harness.results import default_dir
    assert len({default_dir("/tmp/x") for _ in range(50)}) == 50


def test_plain_progress_one_line_per_row_and_summary(tmp_path):
    rc, out, err = cli("compare", "--layer", "torch", "--problem", "vector_add", "--suite", "smoke",
                       "--roles", "baseline", "--no-verify-suite", "--device", "cpu", "--out", str(tmp_path / "r"),
                       cwd=tmp_path)
    assert rc == 0, err
    lines = [l for l in err.splitlines() if l.startswith("[")]
    assert len(lines) == 3 and lines[-1].startswith("[3/3 ") and "torch:vector_add" in lines[0]
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    line = doc["summary"]["vector_add"]["lines"][0]
    assert line["impl"] == "torch:vector_add" and line["role"] == "baseline" and line["pass"] == 3
    assert "### headline: vector_add" in (tmp_path / "r" / "results.md").read_text()
    # strict JSON: every machine-readable file parses without NaN/Infinity
    for f in ("results.json", "run.json"):
        json.loads((tmp_path / "r" / f).read_text(), parse_constant=lambda c: pytest.fail(c))
    for l in (tmp_path / "r" / "rows.jsonl").read_text().splitlines():
        json.loads(l, parse_constant=lambda c: pytest.fail(c))


def test_compare_default_selects_defaults_baselines_and_libraries(tmp_path, capsys, monkeypatch):
    from harness import plan as P
    roles = {i.id: i.role for i in P.select(P.Selection(["vector_add"], roles=P.COMPARE_ROLES))}
    assert set(roles.values()) == {"baseline", "library", "default"}
    assert "torch:vector_add_compile" in roles and "cuda:vector_add_simple" not in roles
    # compare without --roles runs COMPARE_ROLES (here without the libraries: torch.compile's first
    # compile on a CPU takes a minute)
    monkeypatch.setattr(P, "COMPARE_ROLES", ("baseline", "default"))
    rc = main(["compare", "--problem", "vector_add", "--suite", "smoke", "--no-verify-suite",
               "--device", "cpu", "--no-isolate", "--out", str(tmp_path / "r"), "--format", "json",
               "--set", "N=100"])
    doc = json.loads(capsys.readouterr().out)
    roles = {r["role"] for r in doc["rows"]}
    assert roles <= {"baseline", "default"} and "baseline" in roles
    assert "torch:vector_add_compile" not in {r["impl"] for r in doc["rows"]}


def test_compare_json_stays_json_when_an_implementation_prints(tmp_path, capsys):
    # a layer's compiler that prints to stdout (TileLang's log lines start with a date) must not
    # break the JSON document a pipe reads, in this process (--no-isolate) as in a worker
    for isolate in ([], ["--no-isolate"]):
        rc = main(["compare", "--plugin", str(PL / "chatty.py"), "--impl", "chatty:vector_add",
                   "--problem", "vector_add", "--suite", "smoke", "--no-verify-suite", "--device", "cpu",
                   *isolate, "--out", str(tmp_path / f"r{len(isolate)}"), "--format", "json"])
        captured = capsys.readouterr()
        doc = json.loads(captured.out)
        assert rc == 0, captured.err
        assert doc["rows"] and all(r["status"] == "PASS" for r in doc["rows"])
        if isolate:   # in this process the lines go to stderr (a worker keeps its own stderr)
            assert "[chatty] begins to compile" in captured.err


def _row_lines(path):
    return [line for line in path.read_text().splitlines() if line.strip() and '"_event"' not in line]


def test_interrupt_keeps_rows_and_resume_finishes(tmp_path):
    import signal
    import time as _t
    out = tmp_path / "r"
    p = subprocess.Popen([sys.executable, "-m", "harness", "compare", "--plugin", str(PL / "slow.py"),
                          "--impl", "slow:vector_add", "--problem", "vector_add", "--suite", "verify",
                          "--no-verify-suite", "--device", "cpu", "--out", str(out)],
                         cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = _t.time() + 300
    while _t.time() < deadline:
        rows = out / "rows.jsonl"
        if rows.exists() and len(_row_lines(rows)) >= 2:
            break
        _t.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert (out / "INTERRUPTED").exists() and "--resume" in (out / "INTERRUPTED").read_text()
    kept = len(_row_lines(out / "rows.jsonl"))   # rows; run-level events share the file
    assert kept >= 2 and "finished row(s) kept" in err
    doc = json.loads((out / "results.json").read_text())
    assert doc["interrupted"] and len(doc["rows"]) == kept
    rc, _, err = cli("compare", "--resume", str(out), cwd=tmp_path)
    assert rc == 0, err
    doc = json.loads((out / "results.json").read_text())
    assert not (out / "INTERRUPTED").exists() and "interrupted" not in doc
    from harness import problems
    n_cases = len(problems.get("vector_add").cases("verify"))
    assert len(doc["rows"]) == n_cases and all(r["status"] == "PASS" for r in doc["rows"])


def test_failing_builtin_adapter_is_reported_by_every_command(monkeypatch, capsys):
    from harness import registry
    registry.load_backends()
    monkeypatch.setitem(registry.BACKEND_ERRORS, "fake_layer", "ImportError: no module named fake")
    main(["verify", "--problem", "vector_add", "--impl", "torch:vector_add", "--set", "N=10",
          "--no-isolate", "--format", "json"])
    assert "backends/fake_layer.py not loaded" in capsys.readouterr().err


def test_adapters_are_declared_and_a_missing_one_is_recorded(monkeypatch, tmp_path):
    """Every backends/*.py module is in backends.ADAPTERS (the registry imports that list, not a
    glob); a declared adapter whose file is missing lands in BACKEND_ERRORS instead of failing."""
    import backends
    from harness import registry

    here = Path(backends.__file__).parent
    files = {p.stem for p in here.glob("*.py") if not p.stem.startswith("_")}
    assert files <= set(backends.ADAPTERS), files - set(backends.ADAPTERS)
    monkeypatch.setattr(backends, "ADAPTERS", ("torch_layer", "no_such_layer"))
    monkeypatch.setattr(registry, "_loaded_backends", False)
    monkeypatch.setattr(registry, "BACKEND_ERRORS", {})
    registry.load_backends()
    assert "no_such_layer.py does not exist" in registry.BACKEND_ERRORS["no_such_layer"]
    assert "torch_layer" not in registry.BACKEND_ERRORS


@pytest.mark.parametrize("command", ["compare", "verify", "model", "grid"])
def test_help_names_every_registered_problem(command, capsys):
    """The help of every command that takes a problem lists the registered problems (read from
    the registry, so a new problem cannot be missing), and --layer's help names no fixed list."""
    from harness.problems import all_problems
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    names = [p.name for p in all_problems()]
    assert "attention" in names
    for name in names:
        assert name in out, (command, name)
    assert "torch | cuda | cupy | triton | cute" not in out

