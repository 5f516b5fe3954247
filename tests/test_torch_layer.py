"""The torch layer's torch.compile rows: how they compile (backends.torch_layer._compile) and when
prepare's first call runs (_warm_compiled). torch.compile itself is stubbed: nothing is compiled."""
from __future__ import annotations

import pytest
import torch

from backends import torch_layer as tl
from harness.errors import Unsupported


@pytest.fixture
def calls(monkeypatch):
    """torch.compile recorded, returning the function itself; the layer's caches empty."""
    seen = []

    def fake_compile(fn, **kw):
        seen.append(kw)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(tl, "_compiled", {"other": None})   # non-empty: the limits stay as they are
    monkeypatch.setattr(tl, "_warmed", set())
    return seen


def test_static_graphs_on_the_gpu_automatic_dynamic_on_the_cpu(calls):
    tl._compile(("softmax", "cuda"), lambda t: t)
    tl._compile(("softmax", "cpu"), lambda t: t)
    tl._compile(("softmax", "cpu"), lambda t: t)          # cached per key: compiled once
    assert calls == [{"dynamic": False}, {"dynamic": None}]


def test_cpu_warm_call_once_per_signature(calls):
    ran = []
    f = tl._compile(("add", "cpu"), lambda a, b: ran.append((tuple(a.shape), b)) or a)
    x = torch.zeros(4, 3)
    tl._warm_compiled(f, x, 1)
    tl._warm_compiled(f, torch.ones(4, 3), 1)           # another seed's inputs: same signature
    assert len(ran) == 1
    tl._warm_compiled(f, x, 0)                          # another flag
    tl._warm_compiled(f, torch.zeros(5, 3), 1)          # another shape
    tl._warm_compiled(f, x.t(), 1)                      # other strides
    tl._warm_compiled(f, torch.zeros(13)[1:].view(4, 3), 1)   # another storage offset
    tl._warm_compiled(f, x.half(), 1)                   # another dtype
    assert len(ran) == 6


def test_a_failed_warm_call_is_unsupported_and_not_remembered(calls):
    n = []

    def boom(a):
        n.append(1)
        raise RuntimeError("no compiler")

    f = tl._compile(("boom", "cpu"), boom)
    for _ in range(2):
        with pytest.raises(Unsupported, match="inductor cannot run here: RuntimeError: no compiler"):
            tl._warm_compiled(f, torch.zeros(2))
    assert len(n) == 2
