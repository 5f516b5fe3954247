"""A case's inputs and output as meta tensors: the shapes, strides and alignment the suites give
(misaligned vector-add starts, padded and odd-offset softmax rows, bias on or off), no memory.
What compile-only planning and compiling read in place of real tensors, in every adapter."""
from __future__ import annotations

import torch


def meta_vector_add(case):
    """(x, y, out)."""
    off, dt = int(case.params.get("misalign", 0)), case.torch_dtype
    x = torch.empty(case.N + off, dtype=dt, device="meta")[off:]
    y = torch.empty(case.N + off, dtype=dt, device="meta")[off:]
    return x, y, torch.empty(case.N, dtype=dt, device="meta")


def meta_softmax(case):
    """(x, out), x laid out as the case's ``layout`` lays out the real input."""
    from .problems.softmax import row_pad, start_offset
    layout = case.params.get("layout", "contiguous")
    pad, off = row_pad(layout, case.N), start_offset(layout)
    flat = torch.empty(off + case.M * (case.N + pad), dtype=case.torch_dtype, device="meta")
    x = flat[off:].view(case.M, case.N + pad)[:, :case.N]
    return x, torch.empty(case.M, case.N, dtype=case.torch_dtype, device="meta")


def meta_gemm(case):
    """(a, b, bias or None, act, out)."""
    dt = case.torch_dtype
    a = torch.empty(case.M, case.K, dtype=dt, device="meta")
    b = torch.empty(case.K, case.N, dtype=dt, device="meta")
    bias = torch.empty(case.N, dtype=dt, device="meta") if int(case.params.get("bias", 1)) else None
    return a, b, bias, case.params.get("act", "relu"), torch.empty(case.M, case.N, dtype=dt, device="meta")


def meta_attention(case):
    """(q, k, v, out), q / k / v laid out as the case's ``layout`` lays out the real inputs."""
    dt, B, D = case.torch_dtype, case.B, case.D

    def tensor(h, s):
        if case.params.get("layout", "bhsd") == "bshd":
            return torch.empty(B, s, h, D, dtype=dt, device="meta").transpose(1, 2)
        return torch.empty(B, h, s, D, dtype=dt, device="meta")
    return (tensor(case.Hq, case.Sq), tensor(case.Hkv, case.Sk), tensor(case.Hkv, case.Sk),
            torch.empty(B, case.Hq, case.Sq, D, dtype=dt, device="meta"))


def case_facts(case, device=None):
    """The case as the planners' ``kltools.plan.Facts``: sizes, dtype, parameters and each
    operand's strides and 16-byte alignment, read from the meta tensors above (the layouts the
    suites give); ``device`` a ``kltools.plan.Device`` (default: the H200 every plan made without
    a GPU assumes)."""
    from kltools.plan import H200, facts_of

    if case.problem == "vector_add":
        x, y, out = meta_vector_add(case)
        tensors = {"x": x, "y": y, "out": out}
    elif case.problem == "softmax":
        x, out = meta_softmax(case)
        tensors = {"x": x, "out": out}
    elif case.problem == "gemm_epilogue":
        a, b, bias, _, out = meta_gemm(case)
        tensors = {"a": a, "b": b, "bias": bias, "out": out}
    elif case.problem == "attention":
        q, k, v, out = meta_attention(case)
        tensors = {"q": q, "k": k, "v": v, "out": out}
    else:
        raise ValueError(f"case: no planner facts for problem {case.problem!r}")
    return facts_of(case.problem, case.dims, case.dtype, case.params, tensors, device or H200)
