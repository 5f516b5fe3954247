"""helion:softmax's planner (plan_softmax_next) on short rows: the plan's programs cover every row once, the frame holds
each row where it starts, and the outputs under the interpreter match torch.softmax in float64."""
from __future__ import annotations

import importlib.util
import itertools
import os

import pytest
import torch

from harness import problems

HAVE_HELION = importlib.util.find_spec("helion") is not None
needs_helion = pytest.mark.skipif(not HAVE_HELION, reason="helion not installed")
MS = (1, 2, 3, 7, 129, 1000, 2049)
NS = (1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 200)
LAYOUTS = ({}, {"layout": "strided"}, {"layout": "strided_odd"})


def _grid(hl, kernel, kargs, cfg):
    """The grid Helion's own host code launches ``kernel`` on for ``kargs``."""
    with hl._quiet():
        bound = kernel.bind(tuple(kargs))
        compiled = bound.compile_config(hl._config(bound, cfg), allow_print=False)
    return hl._record(compiled, kargs)[1]


def _check_frame(m, n, f, width):
    """Every row's frame position (lead) leaves the row inside ``width`` positions, and the output
    row sits at the same lead."""
    v = f["v"]
    for r in range(m):
        lead = (r * f["sx"] + f["lx"]) % v
        assert lead + n <= width and (r * f["so"] + f["lo"]) % v == lead, (r, lead, width)


@needs_helion
def test_plan_covers_every_row_once():
    from backends import helion_layer as hl
    from helion_src import frame
    prob = problems.get("softmax")
    for m, n, dt, lay in itertools.product(MS, NS, ("float32", "float16", "bfloat16"), LAYOUTS):
        args = hl._meta_args("softmax", prob.case(M=m, N=n, dtype=dt, **lay))
        plan = hl.plan_for("softmax", args, pending=True)
        f = frame.frame_args(*args)
        for kernel, kargs, cfg in hl._launches(plan, args):
            rows = cfg["block_sizes"][0] if plan.variant != "split" else 1
            programs = _grid(hl, kernel, kargs, cfg)[0]
            if plan.variant == "split":
                programs //= plan.frame["chunks"]
                assert plan.frame["chunks"] * plan.frame["chunk_groups"] * f["v"] >= n + f["v"] - 1
            seen = torch.zeros(m, dtype=torch.int64)
            for p in range(programs):
                seen[p * rows:(p + 1) * rows] += 1
            assert seen.eq(1).all() and (programs - 1) * rows < m, (m, n, dt, lay, plan.rule, programs, rows)
            if plan.frame is not None and plan.variant == "rows":
                _check_frame(m, n, f, plan.frame["width"])
                # Triton 3.6 miscompiles the frame on a row stride of 1 with several rows a program
                assert rows == 1 or 1 not in (f["sx"], f["so"]), (m, n, dt, lay)


@pytest.mark.skipif(not HAVE_HELION or os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                    reason="runs Helion's generated Triton under Triton's interpreter (TRITON_INTERPRET=1)")
@pytest.mark.parametrize("kw", [dict(M=129, N=1, dtype="float32"), dict(M=7, N=1, dtype="float16"),
                                dict(M=1000, N=3, dtype="float32", layout="strided"),
                                dict(M=129, N=5, dtype="float16", layout="strided_odd"),
                                dict(M=2049, N=17, dtype="float16"), dict(M=3, N=33, dtype="float32"),
                                dict(M=2, N=200, dtype="float32", layout="strided")])
def test_short_rows_under_interpreter(monkeypatch, kw):
    """Outputs against torch.softmax in float64 (bf16 is left out: the interpreter adds bf16
    values as raw bits), every element written."""
    import triton.language as tl
    from triton.language.extra import libdevice

    from harness import registry
    monkeypatch.setattr(libdevice, "exp", lambda x, **k: tl.exp(x))   # a stub in the interpreter
    prob = problems.get("softmax")
    impl = registry.get("softmax", "helion:softmax")
    case = prob.case(**kw)
    x, = prob.make_inputs(case, "cpu", 0)
    out = torch.full((case.M, case.N), float("nan"), dtype=x.dtype)
    impl.prepare(case, (x,), out)()
    want = torch.softmax(x.double(), -1)
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), want, atol=2e-3 if x.element_size() == 2 else 1e-5, rtol=0)
