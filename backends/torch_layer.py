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
    Every shape gets its own static graph (``dynamic=False``: the fastest code, what a benchmark of
    torch.compile should show). The rows run on a GPU only (COMPILE_ON_GPU)."""
    if not _compiled:
        _raise_recompile_limits()
    if key not in _compiled:
        try:
            _compiled[key] = torch.compile(fn, dynamic=False)
        except Exception as e:  # pragma: no cover - depends on the machine
            raise Unsupported(f"torch.compile unavailable: {type(e).__name__}: {e}") from None
    return _compiled[key]


def _warm_compiled(f, *args):
    """The first call, inside prepare: compile and autotune before the launch is timed; a failure
    there is the row's one-line reason (Unsupported), never a crash of the worker."""
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


# torch.compile on a CPU generates Inductor's C++ (OpenMP loops), not the Triton kernels it runs on
# a GPU: verifying that code says nothing about the GPU rows, and its compiles were the CPU main
# job's largest cost (docs/DESIGN.md, "Runs and results"). Its rows need a GPU.
COMPILE_ON_GPU = dict(devices=("cuda",),
                      cpu_note="torch.compile emits C++ for a CPU, not the Triton kernels its GPU rows run")


@register(problem="vector_add", layer="torch", name="vector_add_compile", role="library", description="torch.compile(x + y)",
          **COMPILE_ON_GPU)
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
          description="torch.compile(torch.softmax)", **COMPILE_ON_GPU)
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
          description="torch.compile(act(A @ B + bias))", **COMPILE_ON_GPU)
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


# -- attention ---------------------------------------------------------------------------------
def attention_math(q, k, v, causal: int):
    """softmax(Q K^T / sqrt(D) + mask) V as plain tensor math: the scores and the probabilities
    are materialised in the input dtype. Grouped heads by broadcasting (query heads viewed as
    [Hkv, group]), the bottom-right causal mask by ``tril(diagonal=Sk - Sq)``."""
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    q5 = q.view(B, Hkv, Hq // Hkv, Sq, D)
    s = torch.matmul(q5, k.unsqueeze(2).transpose(-1, -2)) * (D ** -0.5)
    if causal:
        keep = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril(Sk - Sq)
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v.unsqueeze(2)).reshape(B, Hq, Sq, D)


def _attention_fits(case, inputs) -> None:
    """Unsupported where the unfused math's scores and probabilities (and their fp32 softmax
    temporaries) cannot fit the GPU's free memory."""
    q = inputs[0]
    if q.device.type != "cuda":
        return
    need = case.B * case.Hq * case.Sq * case.Sk * (2 * q.element_size() + 4)
    free = torch.cuda.mem_get_info(q.device)[0]
    if need > 0.8 * free:
        raise Unsupported(f"the unfused math materialises {need / 2 ** 30:.1f} GiB of scores and "
                          f"probabilities; {free / 2 ** 30:.1f} GiB are free")


# roundings=2: where the dispatcher picks its math backend, q and k are scaled in the input dtype
# and the scores rounded to it before the softmax (the fused backends round only P)
@register(problem="attention", layer="torch", name="attention", baseline=True, roundings=2,
          description="F.scaled_dot_product_attention as dispatched (enable_gqa; causal_lower_right "
                      "where Sq != Sk)")
def attention_eager(case, inputs, out):
    from harness.problems.attention import torch_sdpa
    q, k, v = inputs
    causal = case.params["causal"]
    return lambda: torch_sdpa(q, k, v, causal)


@register(problem="attention", layer="torch", name="attention_compile", role="library", roundings=2,
          model_variant="unfused",
          description="torch.compile(softmax(Q K^T / sqrt(D) + mask) V), the plain math (S and P "
                      "materialised)", **COMPILE_ON_GPU)
def attention_compile(case, inputs, out):
    q, k, v = inputs
    causal = case.params["causal"]
    _attention_fits(case, inputs)
    f = _compile(("attention", causal, q.device.type), attention_math)
    _warm_compiled(f, q, k, v, causal)
    return lambda: f(q, k, v, causal)
