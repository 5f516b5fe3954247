"""Public libraries as yardsticks (role ``library``): what a user would pick instead of writing a kernel.

- ``quack:softmax``: ``quack.softmax`` of quack-kernels (Dao-AILab; CuTe DSL kernels), writing into
  the harness's output buffer through its ``_softmax_fwd(x, out)`` entry.
- ``liger:softmax``: Liger-Kernel's Triton softmax (``LigerSoftmaxFunction``), which returns a new
  tensor.

Each declines a case where the library itself refuses it, with the library's own message (quack's
assertions and compile errors, Liger's block-size limit), found by running the library once in
``prepare``. Neither is tuned or wrapped beyond that: the row is the library as shipped.
"""
from __future__ import annotations

import importlib

import torch

from harness import register
from harness.errors import Unsupported
from harness.registry import describe_layer

_NO_SOURCE = "a public library's own kernels: no source of this project's to count"
describe_layer("quack", order=90, colour="#7f7f7f", no_source=_NO_SOURCE)
describe_layer("liger", order=91, colour="#bcbd22", no_source=_NO_SOURCE)


def _importable(module: str, package: str):
    def available() -> str | None:
        try:
            importlib.import_module(module)
        except Exception as e:
            return f"{package} not importable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if not torch.cuda.is_available():
            return f"{package} runs on a CUDA GPU only (this machine has none)"
        return None
    return available


def _first_run(fn, library: str):
    """Run the library once (its compile happens here, outside the timed region); where the library
    refuses the case, the row is a SKIP with the library's own words."""
    try:
        return fn()
    except (AssertionError, RuntimeError, ValueError, TypeError, NotImplementedError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Unsupported(f"{library} declines: {type(e).__name__}: {msg}") from None


@register(problem="softmax", layer="quack", name="softmax", role="library", devices=("cuda",),
          description="quack.softmax (quack-kernels, CuTe DSL), into the output buffer",
          available=_importable("quack.softmax", "quack-kernels"))
def quack_softmax(case, inputs, out):
    from quack.softmax import _softmax_fwd

    (x,) = inputs
    _first_run(lambda: (_softmax_fwd(x, out), torch.cuda.synchronize()), "quack")
    return lambda: _softmax_fwd(x, out)


@register(problem="softmax", layer="liger", name="softmax", role="library", devices=("cuda",),
          description="Liger-Kernel's Triton softmax (LigerSoftmaxFunction), returns a new tensor",
          available=_importable("liger_kernel.ops.softmax", "liger-kernel"))
def liger_softmax(case, inputs, out):
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    (x,) = inputs
    _first_run(lambda: (LigerSoftmaxFunction.apply(x), torch.cuda.synchronize()), "liger")
    return lambda: LigerSoftmaxFunction.apply(x)


# -- attention ---------------------------------------------------------------------------------
describe_layer("cudnn", order=92, colour="#76b900", no_source=_NO_SOURCE)
describe_layer("fa2", order=93, colour="#9467bd", no_source=_NO_SOURCE)
describe_layer("fa4", order=94, colour="#e377c2", no_source=_NO_SOURCE)


def _sdpa_backend(backend: str):
    """prepare of torch's SDPA restricted to one backend (``SDPBackend.<backend>``): where torch
    finds no kernel of that backend for the case, the row is a SKIP with torch's reasons (it
    gives them as warnings before it raises)."""
    def prepare(case, inputs, out):
        import warnings

        from torch.nn.attention import SDPBackend, sdpa_kernel

        from harness.problems.attention import torch_sdpa
        q, k, v = inputs
        causal = case.params["causal"]
        which = getattr(SDPBackend, backend)

        def launch():
            with sdpa_kernel(which):
                return torch_sdpa(q, k, v, causal)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            try:
                launch()
                torch.cuda.synchronize()
            except RuntimeError as e:
                why = "; ".join(str(w.message).strip().splitlines()[0] for w in said[:3]) or str(e).splitlines()[0]
                raise Unsupported(f"torch's {backend} backend declines: {why}") from None
        return launch
    return prepare


def _torch_backend_available(backend: str):
    def available() -> str | None:
        if not torch.cuda.is_available():
            return f"torch's {backend} backend runs on a CUDA GPU only (this machine has none)"
        try:
            from torch.nn.attention import SDPBackend
        except ImportError as e:
            return f"torch.nn.attention not importable: {e}"
        return None if hasattr(SDPBackend, backend) else f"this torch has no SDPBackend.{backend}"
    return available


register(problem="attention", layer="cudnn", name="attention", role="library", devices=("cuda",),
         description="cuDNN's fused attention through torch (SDPBackend.CUDNN_ATTENTION)",
         available=_torch_backend_available("CUDNN_ATTENTION"))(_sdpa_backend("CUDNN_ATTENTION"))
register(problem="attention", layer="fa2", name="attention", role="library", devices=("cuda",),
         description="FlashAttention-2 as built into torch (SDPBackend.FLASH_ATTENTION)",
         available=_torch_backend_available("FLASH_ATTENTION"))(_sdpa_backend("FLASH_ATTENTION"))


def _fa4_available() -> str | None:
    try:
        importlib.import_module("flash_attn.cute")
    except ImportError:
        return "flash-attn-4 is not installed"
    except Exception as e:
        return f"flash-attn-4 not importable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if not torch.cuda.is_available():
        return "flash-attn-4 runs on a CUDA GPU only (this machine has none)"
    return None


@register(problem="attention", layer="fa4", name="attention", role="library", devices=("cuda",),
          description="FlashAttention-4 (flash-attn-4, CuTe DSL): flash_attn_func on [B, S, H, D] views "
                      "(its causal mask is bottom-right aligned, as the problem's)",
          available=_fa4_available)
def fa4_attention(case, inputs, out):
    from flash_attn.cute import flash_attn_func

    q, k, v = (t.transpose(1, 2) for t in inputs)
    causal = bool(case.params["causal"])

    def launch():
        o = flash_attn_func(q, k, v, causal=causal)
        return (o[0] if isinstance(o, tuple) else o).transpose(1, 2)
    _first_run(lambda: (launch(), torch.cuda.synchronize()), "flash-attn-4")
    return launch
