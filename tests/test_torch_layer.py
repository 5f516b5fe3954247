"""The torch layer's torch.compile rows: how they compile (backends.torch_layer._compile), what
prepare's first call does (_warm_compiled), and that they need a GPU (on a CPU torch.compile emits
Inductor's C++, not the code its GPU rows run). torch.compile itself is stubbed: nothing is compiled."""
from __future__ import annotations

import pytest
import torch

from backends import torch_layer as tl
from harness import registry
from harness.errors import Unsupported
from harness.problems import get as get_problem
from harness.worker import settle


@pytest.fixture
def calls(monkeypatch):
    """torch.compile recorded, returning the function itself; the layer's cache empty."""
    seen = []

    def fake_compile(fn, **kw):
        seen.append(kw)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(tl, "_compiled", {"other": None})   # non-empty: the limits stay as they are
    return seen


def test_static_graphs_compiled_once_per_key(calls):
    tl._compile(("softmax", "cuda"), lambda t: t)
    tl._compile(("softmax", "cuda"), lambda t: t)         # cached per key: compiled once
    tl._compile(("gemm", "relu", False, "cuda"), lambda t: t)
    assert calls == [{"dynamic": False}, {"dynamic": False}]


def test_a_failed_warm_call_is_unsupported_each_time(calls):
    n = []

    def boom(a):
        n.append(1)
        raise RuntimeError("no compiler")

    f = tl._compile(("boom", "cuda"), boom)
    for _ in range(2):
        with pytest.raises(Unsupported, match="inductor cannot run here: RuntimeError: no compiler"):
            tl._warm_compiled(f, torch.zeros(2))
    assert len(n) == 2


@pytest.mark.parametrize("problem", ["vector_add", "softmax", "gemm_epilogue", "attention"])
def test_compile_rows_need_a_gpu_and_say_why(problem):
    registry.load_backends(["backends.torch_layer"])
    prob = get_problem(problem)
    case = prob.cases("smoke")[0]
    row = settle(registry.get(problem, f"torch:{problem}_compile"), prob, case, "cpu", "timed")
    assert row["status"] == "SKIP" and row["kind"] == "needs-gpu"
    assert "needs a GPU" in row["reason"] and "torch.compile emits C++ for a CPU" in row["reason"]
    # the eager baseline still runs on the CPU (settled as 'to be verified here')
    eager = settle(registry.get(problem, f"torch:{problem}"), prob, case, "cpu", "timed")
    assert eager["status"] is None
