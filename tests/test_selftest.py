"""The verifier self-test: every planted bug FAILs, every correct twin PASSes (runs in CI)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import selftest

ROOT = Path(__file__).resolve().parent.parent


def test_selftest_passes_in_a_subprocess():
    # what `python -m harness selftest` runs: a fresh interpreter with TRITON_INTERPRET=1
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, "-m", "harness.selftest", "--format", "json", "--quiet"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads(r.stdout)
    assert rows and all(o["ok"] for o in rows)
    planted = {o["bug"] for o in rows if o["role"] == "planted"}
    assert len(planted) == len(selftest.CHECKS) >= 6
    assert all(o["got"] == "FAIL" for o in rows if o["role"] == "planted")
    assert all(o["got"] == "PASS" for o in rows if o["role"] in ("twin", "control"))
    # each failure says why (a NaN tail, a mutated input, an all-zero output, ...)
    reasons = " ".join(o["reason"] for o in rows if o["role"] == "planted")
    for needle in ("NaN where the reference is finite", "was modified", "all zero", "outside atol"):
        assert needle in reasons


def test_main_reexecs_with_interpreter_and_returns_status(monkeypatch):
    # main() without TRITON_INTERPRET runs a child with it set; the status comes back
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    seen = {}

    def fake_run(cmd, env):
        seen["cmd"], seen["env"] = cmd, env
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(selftest.subprocess, "run", fake_run)
    p = argparse.ArgumentParser()
    selftest.add_parser(p.add_subparsers())
    args = p.parse_args(["selftest", "--format", "json"])
    assert args.func(args) == 1
    assert seen["env"]["TRITON_INTERPRET"] == "1"
    assert seen["cmd"][1:4] == ["-m", "harness.selftest", "--format"]


def test_a_bug_the_verifier_misses_makes_it_exit_1(monkeypatch, capsys):
    # A "planted bug" that is in fact correct must be reported as WRONG with exit status 1.
    fake = [("not really a bug", "softmax", ("torch_bugs", "prepare_softmax", "torch"),
             ("torch_bugs", "prepare_softmax", "torch"), [("float32", dict(M=2, N=5))], [])]
    monkeypatch.setattr(selftest, "CHECKS", fake)
    assert selftest._run_here("table", quiet=True) == 1
    out = capsys.readouterr().out
    assert "WRONG" in out and "SELFTEST FAILED" in out


def test_planted_impls_are_not_registered():
    from harness import registry

    ids = {i.id for i in registry.all_impls()}
    assert not any("planted" in i for i in ids)
