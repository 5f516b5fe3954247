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
