"""The results store (harness/store.py) and its commands (runs, diff, import, export), on SQLite and
on PostgreSQL (KL_TEST_POSTGRES_URL; .ci/run starts a server; skipped without one)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from fixtures.store_support import (ROOT, SMALL_COMPARE, harness, small_reference,  # noqa: F401
                                    store_url, write_run_folder)
from harness import store as S
from harness.cli import main


def _cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def _row(i: int, status="PASS", median=1e-5, q1=None, q3=None, impl="triton:vector_add", layer="triton") -> dict:
    return {"problem": "vector_add", "impl": impl, "layer": layer, "role": "default", "phase": "timed",
            "case": {"id": f"vector_add[N={i},float32]", "dims": {"N": i}, "dtype": "float32", "params": {}},
            "status": status, "kind": "verified",
            "time": {"median_s": median, "q1_s": q1 if q1 is not None else median * 0.99,
                     "q3_s": q3 if q3 is not None else median * 1.01}}


# -- schema ------------------------------------------------------------------------------------
def test_new_store_has_every_migration(store_url):
    with S.open_store(store_url) as st:
        assert st.schema_version == S.SCHEMA_VERSION
        got = [r[0] for r in st._all("SELECT version FROM store_migrations ORDER BY version")]
        assert got == [m[0] for m in S.MIGRATIONS]


def test_older_store_is_migrated(store_url, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(S, "MIGRATIONS", S.MIGRATIONS[:1])
        m.setattr(S, "SCHEMA_VERSION", 1)
        with S.open_store(store_url) as st:
            rid = st.begin_run({"created": "2026-01-01T00:00:00+00:00", "command": "old"}, kind="compare")
            st.add_row(rid, _row(1))
            assert st.schema_version == 1
    with S.open_store(store_url) as st:            # the current harness: migrated to the last step
        assert st.schema_version == S.SCHEMA_VERSION
        assert len(st.rows(rid)) == 1               # the data survives the migration


def test_newer_schema_is_refused_and_nothing_written(store_url, tmp_path, capsys):
    with S.open_store(store_url) as st:
        st._exec("UPDATE store_meta SET value = ? WHERE key = 'schema_version'", (str(S.SCHEMA_VERSION + 5),))
    with pytest.raises(S.StoreError, match="newer schema"):
        S.open_store(store_url)
    rc, out, err = _cli(capsys, "runs", "--store", store_url)
    assert rc == 2 and "newer schema" in err and len(err.strip().splitlines()) == 1
    out_dir = tmp_path / "never"
    r = harness(*SMALL_COMPARE, "--store", store_url, "--out", out_dir, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "newer schema" in r.stderr and not out_dir.exists() and not (tmp_path / "results").exists()


# -- rows --------------------------------------------------------------------------------------
def test_rows_round_trip_and_upsert(store_url):
    with S.open_store(store_url) as st:
        rid = st.begin_run({"created": "2026-12-01T00:00:00+00:00", "command": "python -m harness compare",
                            "machine": {"gpu": "NVIDIA H200", "hostname": "h"}}, kind="compare")
        for i in range(5):
            st.add_row(rid, _row(i))
        st.add_row(rid, _row(3, status="FAIL"))      # the same key again: replaced, not duplicated
        doc = st.run_doc(rid)
        assert [r["case"]["id"] for r in doc["rows"]] == [f"vector_add[N={i},float32]" for i in range(5)]
        assert doc["rows"][3]["status"] == "FAIL"
        assert doc["interrupted"]                    # never finished: the store says so
        final = {k: v for k, v in doc.items() if k != "interrupted"}
        st.finish_run(rid, dict(final, rows=doc["rows"] + [_row(9)], ceilings={"copy_bytes_per_s": 1e12}))
        runs = st.list_runs()
        assert [(r["id"], r["rows"], r["PASS"], r["FAIL"], r["state"], r["gpu"]) for r in runs] == \
            [(rid, 6, 5, 1, "done", "NVIDIA H200")]
        assert st.run_doc(rid)["ceilings"] == {"copy_bytes_per_s": 1e12}
        assert st.list_runs(gpu="other") == []


# -- import ------------------------------------------------------------------------------------
def test_import_is_idempotent(store_url, tmp_path, capsys):
    ref = small_reference()
    a = write_run_folder(tmp_path / "old" / "r1" / "compare-cold", ref)
    # a run killed before its files were written: run.json and rows.jsonl only
    killed = tmp_path / "old" / "r2"
    killed.mkdir(parents=True)
    (killed / "run.json").write_text(json.dumps({"created": "2026-11-30T10:00:00+00:00",
                                                 "command": "python -m harness compare", "machine": {}}))
    (killed / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in ref["rows"][:4]) + "\n{\"torn")
    rc, out, err = _cli(capsys, "import", tmp_path / "old", "--store", store_url)
    assert rc == 0, err
    assert f"2 run folder(s), {len(ref['rows']) + 4} rows; 2 new run(s)" in out
    rc, out2, err = _cli(capsys, "import", tmp_path / "old", a, "--store", store_url)
    assert rc == 0, err
    assert "0 new run(s)" in out2 and "already in the store" in out2
    with S.open_store(store_url) as st:
        runs = st.list_runs()
        assert [r["rows"] for r in runs] == [len(ref["rows"]), 4]
        assert [r["state"] for r in runs] == ["done", "interrupted"]
        assert {r["uid"] for r in runs} == {S.folder_doc(a)[1], S.folder_doc(killed)[1]}


def test_import_of_no_run_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc, out, err = _cli(capsys, "import", tmp_path / "empty", "--store", tmp_path / "s.sqlite")
    assert rc == 2 and "no run folder" in err
    assert not (tmp_path / "s.sqlite").exists()


# -- diff --------------------------------------------------------------------------------------
def test_diff_flags_changes_beyond_the_noise(store_url, tmp_path, capsys):
    ref = small_reference()
    slower = json.loads(json.dumps(ref))
    impls = sorted({r["impl"] for r in ref["rows"] if r.get("phase") == "timed" and r["status"] == "PASS"})
    assert len(impls) >= 2
    # every implementation of one layer 1.5x slower (a layer may have a default and a twin), one
    # implementation of another layer slower by a fifth of its own spread (within the noise)
    hit_layer = impls[0].split(":")[0]
    calm = next(i for i in impls if i.split(":")[0] != hit_layer)
    for r in slower["rows"]:
        t = r.get("time")
        if r.get("phase") != "timed" or not t or not t.get("median_s"):
            continue
        f = 1.5 if r["layer"] == hit_layer else 1.0 + 0.2 * (t["iqr_s"] / t["median_s"]) if r["impl"] == calm else 1.0
        for k in ("median_s", "q1_s", "q3_s", "iqr_s"):
            if t.get(k) is not None:
                t[k] *= f
    a = write_run_folder(tmp_path / "a", ref)
    b = write_run_folder(tmp_path / "b", slower)
    _cli(capsys, "import", a, b, "--store", store_url)
    rc, out, err = _cli(capsys, "diff", "1", "2", "--store", store_url, "--format", "json")
    assert rc == 0, err
    d = json.loads(out)
    flags = {(ln["impl"], ln["case"]): ln["flag"] for ln in d["rows"]}
    timed = [ln for ln in d["rows"] if ln["ratio"]]
    hit = {ln["impl"] for ln in timed if ln["layer"] == hit_layer}
    assert timed and hit and all(flags[(ln["impl"], ln["case"])] == "slower" for ln in timed if ln["impl"] in hit)
    assert all(abs(ln["ratio"] - 1.5) < 1e-9 for ln in timed if ln["impl"] in hit)
    assert all(flags[(ln["impl"], ln["case"])] == "within noise" for ln in timed if ln["impl"] not in hit)
    layer = hit_layer
    assert abs(d["layers"][layer]["geomean_ratio"] - 1.5) < 1e-9 and d["layers"][layer]["slower"] >= 1
    assert d["same_gpu"]
    # --fail-on-regression: 50 % slower fails at 10 %, not at 60 %; a run folder works as RUN too
    rc, out, err = _cli(capsys, "diff", "1", b, "--store", store_url, "--fail-on-regression", "10")
    assert rc == 1, out + err
    assert "regression(s) beyond 10%" in out
    rc, out, err = _cli(capsys, "diff", a, "2", "--store", store_url, "--fail-on-regression", "60")
    assert rc == 0, out + err


def test_diff_across_gpus_and_statuses(tmp_path, capsys):
    ref = small_reference()
    other = json.loads(json.dumps(ref))
    other["machine"]["gpu"] = "NVIDIA H100 80GB HBM3"
    broke = next(r for r in other["rows"] if r.get("phase") == "timed" and r["status"] == "PASS")
    broke.update(status="FAIL", kind="mismatch")
    a = write_run_folder(tmp_path / "a", ref)
    b = write_run_folder(tmp_path / "b", other)
    rc, out, err = _cli(capsys, "diff", a, b, "--format", "json", "--fail-on-regression", "1000")
    d = json.loads(out)
    assert rc == 1                                 # a PASS that became a FAIL is a regression
    assert not d["same_gpu"] and d["b"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert [ln["flag"] for ln in d["regressions"]] == ["broke"]
    rc, out, err = _cli(capsys, "diff", a, b)
    assert "different GPUs" in out and "per layer" in out


# -- export ------------------------------------------------------------------------------------
def test_export_json_and_csv(store_url, tmp_path, capsys):
    ref = small_reference()
    a = write_run_folder(tmp_path / "a", ref)
    _cli(capsys, "import", a, "--store", store_url)
    rc, out, err = _cli(capsys, "export", "1", "--store", store_url, "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["rows"] == ref["rows"] and doc["machine"] == ref["machine"] and doc["ceilings"] == ref["ceilings"]
    rc, out, err = _cli(capsys, "export", "1", "--store", store_url, "--format", "csv", "--out", tmp_path / "x.csv")
    assert rc == 0, err
    from harness.report import to_csv
    assert (tmp_path / "x.csv").read_bytes().decode() == to_csv(ref["rows"])


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("url, word", [
    ("mysql://u@h/db", "unknown scheme"),
    ("postgresql://hostonly", "malformed PostgreSQL URL"),
    ("postgresql://u@h:port/db", "malformed PostgreSQL URL"),
    ("postgresql://u@127.0.0.1:1/db", "cannot connect"),
])
def test_bad_store_urls(url, word, tmp_path, capsys):
    runs = write_run_folder(tmp_path / "runs" / "one", small_reference())
    for cmd in (["runs"], ["export", "1"], ["diff", "1", "2"], ["import", runs]):
        rc, out, err = _cli(capsys, *cmd, "--store", url)
        assert rc == 2, (cmd, out, err)
        assert word in err and len(err.strip().splitlines()) == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["runs"] and [p.name for p in runs.iterdir()] == ["results.json"]


def test_unknown_run_and_missing_store(store_url, tmp_path, capsys):
    with S.open_store(store_url):
        pass
    rc, out, err = _cli(capsys, "export", "42", "--store", store_url)
    assert rc == 2 and "run 42: no such run" in err and len(err.strip().splitlines()) == 1
    rc, out, err = _cli(capsys, "diff", "42", tmp_path / "nowhere", "--store", store_url)
    assert rc == 2 and "run 42" in err
    rc, out, err = _cli(capsys, "export", tmp_path / "nowhere")
    assert rc == 2 and "nor a run folder" in err
    rc, out, err = _cli(capsys, "runs", "--store", tmp_path / "absent.sqlite")
    assert rc == 2 and "no store at" in err and not (tmp_path / "absent.sqlite").exists()


def test_a_file_that_is_no_store(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    rc, out, err = _cli(capsys, "runs", "--store", f)
    assert rc == 2 and "not an SQLite database" in err
    assert f.read_text() == "hello\n"


# -- durability and concurrency ----------------------------------------------------------------
_WRITER = textwrap.dedent("""
    import sys
    from harness.store import Recorder
    url, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rec = Recorder(url, {"created": "2026-12-01T00:00:00+00:00", "command": tag}, kind="compare")
    for i in range(n):
        rec.row({"problem": "vector_add", "impl": tag, "layer": "x", "phase": "timed", "status": "PASS",
                 "case": {"id": f"c{i}"}, "time": {"median_s": 1e-6 * (i + 1)}, "pad": "x" * 2000})
        assert rec.broken is None, rec.broken
        print(i + 1, flush=True)
""")


def _writer(url, tag, n) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WRITER, url, tag, str(n)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_kill_9_loses_no_finished_row(store_url):
    p = _writer(store_url, "killed", 100000)
    acked = 0
    for line in p.stdout:
        acked = int(line)
        if acked >= 60:
            break
    os.kill(p.pid, signal.SIGKILL)
    rest = p.stdout.read()          # rows acknowledged before the kill landed
    p.wait()
    acked = max([acked] + [int(x) for x in rest.split()])
    with S.open_store(store_url) as st:
        (run,) = st.list_runs()
        assert run["state"] == "running"
        rows = st.rows(run["id"])
        assert len(rows) >= acked, (len(rows), acked)
        assert [r["case"]["id"] for r in rows] == [f"c{i}" for i in range(len(rows))]
        if st.dialect == "sqlite":
            assert st._one("PRAGMA integrity_check")[0] == "ok"


def test_two_processes_write_one_store(store_url):
    with S.open_store(store_url):
        pass                         # created (and migrated) once; both writers then open it
    procs = [_writer(store_url, tag, 150) for tag in ("one", "two")]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with S.open_store(store_url) as st:
        runs = st.list_runs()
        assert sorted((r["command"], r["rows"]) for r in runs) == [("one", 150), ("two", 150)]
        for r in runs:
            assert {x["impl"] for x in st.rows(r["id"])} == {r["command"]}
        if st.dialect == "sqlite":
            assert st._one("PRAGMA integrity_check")[0] == "ok"


def test_two_processes_create_one_store_at_once(store_url):
    procs = [_writer(store_url, tag, 20) for tag in ("a", "b", "c")]   # all migrate the empty store
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with S.open_store(store_url) as st:
        assert st.schema_version == S.SCHEMA_VERSION
        assert sorted(r["rows"] for r in st.list_runs()) == [20, 20, 20]


# -- the real commands -------------------------------------------------------------------------
def test_compare_killed_keeps_every_row_in_the_store(store_url, tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "harness", *SMALL_COMPARE, "--store", store_url, "--out", str(out)],
                         cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, env=dict(os.environ, TRITON_INTERPRET="1"))
    deadline = time.monotonic() + 500
    try:
        while time.monotonic() < deadline:
            rows = [ln for ln in (out / "rows.jsonl").read_text().splitlines() if '"_event"' not in ln] \
                if (out / "rows.jsonl").exists() else []
            if len(rows) >= 2 or p.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    from harness.results import read_rows
    in_folder, _ = read_rows(out / "rows.jsonl")
    assert in_folder, "the run wrote no row before it was killed"
    uid = json.loads((out / "run.json").read_text())["store_uid"]
    with S.open_store(store_url) as st:
        rid = st.run_id_for_uid(uid)
        assert rid is not None
        keys = {(r["phase"], r["impl"], r["case"]["id"]) for r in st.rows(rid)}
    assert {(r["phase"], r["impl"], r["case"]["id"]) for r in in_folder} <= keys
    # --resume finishes the same store run
    r = harness("compare", "--resume", out, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    with S.open_store(store_url) as st:
        (run,) = st.list_runs()
        assert run["id"] == rid and run["state"] == "done" and run["rows"] == len(doc["rows"])


@pytest.mark.slow
def test_two_compares_then_runs_diff_export(store_url, tmp_path):
    """The acceptance path: compare twice, `runs` lists both, `diff` compares them."""
    for k in range(2):
        r = harness(*SMALL_COMPARE, "--store", store_url, "--out", tmp_path / f"out{k}", cwd=tmp_path)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert (tmp_path / f"out{k}" / "results.json").is_file()      # the files as before
    r = harness("runs", "--store", store_url, "--format", "json", cwd=tmp_path)
    runs = json.loads(r.stdout)
    assert [x["state"] for x in runs] == ["done", "done"] and all(x["rows"] > 0 for x in runs)
    for x, k in zip(runs, range(2)):
        doc = json.loads((tmp_path / f"out{k}" / "results.json").read_text())
        assert x["rows"] == len(doc["rows"])
        assert x["PASS"] == sum(r["status"] == "PASS" for r in doc["rows"])
    r = harness("diff", runs[0]["id"], runs[1]["id"], "--store", store_url, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "per layer" in r.stdout
    r = harness("export", runs[1]["id"], "--store", store_url, cwd=tmp_path)
    exported = json.loads(r.stdout)
    assert exported["rows"] == json.loads((tmp_path / "out1" / "results.json").read_text())["rows"]


def test_default_store_is_under_the_current_folder(tmp_path):
    """No --store: results/runs.sqlite under the current folder, whatever --out says."""
    r = harness(*SMALL_COMPARE, "--out", tmp_path / "elsewhere" / "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "results" / "runs.sqlite").is_file()
    r = harness("runs", "--format", "json", cwd=tmp_path)
    (run,) = json.loads(r.stdout)
    assert run["folder"] == str(tmp_path / "elsewhere" / "run") and run["state"] == "done"
    # importing the folder of a run the store recorded live finds that run
    r = harness("import", tmp_path / "elsewhere", cwd=tmp_path)
    assert r.returncode == 0 and "0 new run(s)" in r.stdout, r.stdout + r.stderr


def test_verify_writes_its_run(tmp_path):
    s = tmp_path / "v.sqlite"
    r = harness("verify", "--problem", "vector_add", "--impl", "torch:vector_add", "--suite", "smoke",
                "--jobs", "1", "--store", s, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    with S.open_store(str(s)) as st:
        (run,) = st.list_runs()
        assert run["kind"] == "verify" and run["state"] == "done" and run["rows"] > 0
        assert run["PASS"] + run["SKIP"] == run["rows"]
