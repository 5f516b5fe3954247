"""torch baselines: the eager op, the naive multi-op forms, and torch.compile of the eager op."""
from __future__ import annotations

import torch

from harness import register
from harness.registry import describe_layer
from harness.errors import Unsupported
from harness.problems.gemm_epilogue import apply_act

# The GEMM problem asks for fp32 accumulation; torch by default lets cuBLAS reduce split-K
# partial sums in the 16-bit output type (a 16-bit accumulator across K tiles, which the verifier
# fails). The baselines are held to the same arithmetic as every layer.
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False

_compiled: dict = {}


def _raise_recompile_limits() -> None:
    """One compiled graph per shape (dynamic=False): raise dynamo's per-function recompile limit so
    that a sweep of sizes never falls back silently to eager execution. Done at the first compile:
    importing dynamo costs a second, which registering these rows must not."""
    for knob in ("recompile_limit", "cache_size_limit"):
        try:
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 256))
        except Exception:  # pragma: no cover
            pass


def _compile(key, fn):
    """torch.compile once per (op, device); the first call (inside prepare) pays the compile.

    On the GPU every shape gets its own static graph (``dynamic=False``: the fastest code, what a
    benchmark of torch.compile should show). On the CPU, where this only has to be correct and
    inductor's C++ compiles are slow, torch's default automatic-dynamic shapes keep it to a few
    compiles per sweep."""
    if not _compiled:
        _raise_recompile_limits()
    if key not in _compiled:
        dynamic = False if key[-1] == "cuda" else None
        try:
            _compiled[key] = torch.compile(fn, dynamic=dynamic)
        except Exception as e:  # pragma: no cover - depends on the machine
            raise Unsupported(f"torch.compile unavailable: {type(e).__name__}: {e}") from None
    return _compiled[key]


def _warm_compiled(f, *args):
    try:
        return f(*args)
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Unsupported(f"inductor cannot run here: {type(e).__name__}: {msg}") from None


# -- vector_add --------------------------------------------------------------------------------
@register(problem="vector_add", layer="torch", name="vector_add", baseline=True,
          description="torch.add(x, y, out=out)")
def add_eager(case, inputs, out):
    x, y = inputs
    return lambda: torch.add(x, y, out=out)


@register(problem="vector_add", layer="torch", name="vector_add_compile", role="library", description="torch.compile(x + y)")
def add_compile(case, inputs, out):
    x, y = inputs
    f = _compile(("add", x.device.type), lambda a, b: a + b)
    _warm_compiled(f, x, y)
    return lambda: f(x, y)


# -- softmax -----------------------------------------------------------------------------------
@register(problem="softmax", layer="torch", name="softmax", baseline=True,
          description="torch.softmax(x, dim=-1)")
def softmax_eager(case, inputs, out):
    (x,) = inputs
    return lambda: torch.softmax(x, dim=-1)


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """Five eager ops, each a kernel with a full pass over HBM: max, subtract, exp, sum, divide.

    The math is fp32 as the problem asks (for fp16/bf16 inputs that adds the two conversions an
    eager user would write)."""
    xf = x.float()
    m = xf.amax(dim=-1, keepdim=True)
    z = xf - m
    e = torch.exp(z)
    s = e.sum(dim=-1, keepdim=True)
    return (e / s).to(x.dtype)


@register(problem="softmax", layer="torch", name="softmax_naive", model_variant="naive",
          description="five eager ops: max, subtract, exp, sum, divide")
def softmax_naive(case, inputs, out):
    (x,) = inputs
    return lambda: naive_softmax(x)


@register(problem="softmax", layer="torch", name="softmax_compile", role="library",
          description="torch.compile(torch.softmax)")
def softmax_compile(case, inputs, out):
    (x,) = inputs
    f = _compile(("softmax", x.device.type), lambda t: torch.softmax(t, dim=-1))
    _warm_compiled(f, x)
    return lambda: f(x)


# -- gemm_epilogue -----------------------------------------------------------------------------
def _act_addmm(a, b, bias, act):
    y = torch.addmm(bias, a, b) if bias is not None else torch.mm(a, b)
    if act == "relu":
        return torch.relu_(y)
    if act == "gelu":
        return torch.nn.functional.gelu(y, approximate="tanh")
    return y


def _check_cpu_half(inputs):
    a = inputs[0]
    if a.device.type == "cpu" and a.dtype == torch.float16 and not _cpu_half_mm_ok():
        raise Unsupported("this torch build has no fp16 matmul on the CPU")


_half_ok: list = []


def _cpu_half_mm_ok() -> bool:
    if not _half_ok:
        try:
            torch.ones(2, 2, dtype=torch.float16) @ torch.ones(2, 2, dtype=torch.float16)
            _half_ok.append(True)
        except Exception:
            _half_ok.append(False)
    return _half_ok[0]


@register(problem="gemm_epilogue", layer="torch", name="gemm_epilogue", baseline=True, roundings=1,
          description="act(torch.addmm(bias, A, B)) - the eager op")
def gemm_eager(case, inputs, out):
    a, b, bias = inputs
    _check_cpu_half(inputs)
    act = case.params.get("act", "relu")
    return lambda: _act_addmm(a, b, bias, act)


@register(problem="gemm_epilogue", layer="torch", name="gemm_epilogue_unfused", roundings=2, model_variant="unfused",
          description="A @ B, then + bias, then act: three separate kernels")
def gemm_unfused(case, inputs, out):
    a, b, bias = inputs
    _check_cpu_half(inputs)
    act = case.params.get("act", "relu")

    def launch():
        y = a @ b
        if bias is not None:
            y = y + bias
        return apply_act(y, act)

    return launch


@register(problem="gemm_epilogue", layer="torch", name="gemm_epilogue_compile", role="library", roundings=1,
          description="torch.compile(act(A @ B + bias))")
def gemm_compile(case, inputs, out):
    a, b, bias = inputs
    _check_cpu_half(inputs)
    act = case.params.get("act", "relu")
    f = _compile(("gemm", act, bias is None, a.device.type),
                 lambda x, w, c: apply_act(x @ w + c if c is not None else x @ w, act))
    _warm_compiled(f, a, b, bias)
    return lambda: f(a, b, bias)


describe_layer("torch", order=0, colour="#7f7f7f",
               no_source="runs torch's own kernels (prebuilt in libtorch, or generated by inductor); "
                         "there is no kernel source of ours to compile")
