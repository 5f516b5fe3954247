"""The problems: each module defines one ``Problem`` subclass and registers it here.

A problem is data, not a kernel: the cases of each suite, an input generator driven by an
explicit ``torch.Generator``, a float64 reference, a tolerance, and the traffic / FLOP counts
that the metrics and the roofline model use.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..case import DTYPES, Case, dtype_name

SUITES = ("smoke", "verify", "bench", "models", "edge", "full", "awkward")
#: the ``awkward`` suite's seed and size (``Problem.awkward_cases``)
AWKWARD_SEED = 20261207
AWKWARD_CASES = 60
#: sizes the awkward suite draws from a third of the time: 1, primes, powers of two and neighbours
AWKWARD_SIZES = (1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 255, 257, 1023, 1025, 4097, 32769)


def awkward_size(rng: random.Random, hi: int) -> int:
    """One size for the awkward suite: a size of ``AWKWARD_SIZES`` or log-uniform in [1, ``hi``]."""
    if rng.random() < 0.35:
        return min(hi, rng.choice(AWKWARD_SIZES))
    return min(hi, max(1, int(10 ** rng.uniform(0, math.log10(hi)))))


@dataclass(frozen=True)
class Tolerance:
    """Pass when ``||out-ref|| / ||ref|| <= rel_norm`` and every element satisfies
    ``|out-ref| <= atol + rtol*|ref|`` with ``atol = max(atol_floor, atol_rms * rms(ref))``."""

    rel_norm: float
    rtol: float
    atol_floor: float
    atol_rms: float = 0.0


@dataclass(frozen=True)
class Kernel:
    """One kernel of a modeled variant: FLOPs and the fewest bytes it reads and writes."""

    name: str
    flops: int
    bytes_read: int
    bytes_written: int


#: operands (reads + the write) of the same-size copy per read:write mix (``copy_launch``)
COPY_MIXES = {"1:1": 2, "2:1": 3}


class Problem:
    name: str = ""
    description: str = ""
    dim_names: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    input_names: tuple[str, ...] = ()
    metric: str = "GB/s"  # or "TFLOP/s"
    #: read:write mix of the streaming traffic: which measured bandwidth ceiling applies
    #: ("read", "1:1", "2:1"); GEMMs are measured against the vendor GEMM instead
    mix: str = "1:1"
    #: parameters a case may carry, with their allowed values (None = any int)
    param_choices: dict[str, Sequence[Any] | None] = {}
    param_defaults: dict[str, Any] = {}
    #: parameters that change only the inputs' values, never the code an implementation runs
    #: (the compile-ahead pool's shape classes leave them out)
    value_params: tuple[str, ...] = ()

    # -- cases -------------------------------------------------------------------------------
    def cases(self, suite: str) -> list[Case]:
        raise NotImplementedError

    def draw(self, rng: random.Random) -> Case | None:
        """One case of the ``awkward`` suite drawn with ``rng`` (None: draw again)."""
        raise NotImplementedError

    def awkward_cases(self) -> list[Case]:
        """The ``awkward`` suite: ``AWKWARD_CASES`` shapes no other suite holds, drawn by ``draw``
        with a fixed seed (the same cases on every machine): sizes 1, primes, powers of two and
        their neighbours, odd strides and starts, every dtype and parameter. No planner is tuned on
        them; they find the kernels and rules a default reaches only on a user's shapes (the
        lines-of-code rule plans them too: docs/DESIGN.md, "LOC"). ``python -m harness verify
        --suite awkward`` checks every implementation on them."""
        rng = random.Random(f"{self.name}/{AWKWARD_SEED}")
        taken = {c.id for s in SUITES if s != "awkward" for c in self.cases(s)}
        out: dict[str, Case] = {}
        while len(out) < AWKWARD_CASES:
            c = self.draw(rng)
            if c is not None and c.id not in taken:
                out.setdefault(c.id, c)
        return list(out.values())

    def case(self, dtype: str = "float32", **kw) -> Case:
        """Build one case from named sizes and parameters, validating every value."""
        dims, params = {}, dict(self.param_defaults)
        for k, v in kw.items():
            if k in self.dim_names:
                if isinstance(v, bool) or not re.fullmatch(r"\s*\d+\s*", str(v)) or int(v) < 1:
                    raise ValueError(f"{k}: size must be a positive integer, got {v!r}")
                iv = int(v)
                dims[k] = iv
            elif k in self.param_choices:
                choices = self.param_choices[k]
                if choices is None:
                    if isinstance(v, bool) or not re.fullmatch(r"\s*-?\d+\s*", str(v)):
                        raise ValueError(f"{k}: must be an integer, got {v!r}")
                    params[k] = int(v)
                else:
                    match = [c for c in choices if str(c).lower() == str(v).lower()]
                    if not match:
                        raise ValueError(f"{k}: {v!r} is not one of {', '.join(map(str, choices))}")
                    params[k] = match[0]
            else:
                known = list(self.dim_names) + list(self.param_choices)
                raise ValueError(f"{self.name}: unknown key {k!r}; known keys: {', '.join(known)}")
        missing = [d for d in self.dim_names if d not in dims]
        if missing:
            raise ValueError(f"{self.name}: missing size(s) {', '.join(missing)}")
        dt = dtype_name(dtype)
        if dt not in self.dtypes:
            raise ValueError(f"dtype: {self.name} takes {', '.join(self.dtypes)}, not {dt}")
        return Case(self.name, {d: dims[d] for d in self.dim_names}, dt, params)

    # -- data --------------------------------------------------------------------------------
    def make_inputs(self, case: Case, device: str | torch.device, seed: int) -> tuple:
        raise NotImplementedError

    def out_shape(self, case: Case) -> tuple[int, ...]:
        raise NotImplementedError

    def alloc_out(self, case: Case, device) -> torch.Tensor:
        """The output buffer, poisoned with NaN so that an unwritten element fails."""
        return torch.full(self.out_shape(case), float("nan"), dtype=case.torch_dtype, device=device)

    def reference(self, inputs: tuple, case: Case) -> torch.Tensor:
        raise NotImplementedError

    def tolerance(self, dtype: str) -> Tolerance:
        raise NotImplementedError

    def reference_and_bound(self, inputs: tuple, case: Case, roundings: int = 0):
        """``(ref, bound, systematic)``: the float64 reference and, where the problem derives one
        from its arithmetic, a per-element error bound (float64, before the final rounding to the
        output dtype, which the check adds at each element; None: ``tolerance()`` decides) and
        the part of that bound that may be systematic (e.g. an activation evaluated in fp32 that
        flushes a tiny tail to zero), which the bias test allows (None: nothing).

        ``roundings``: how many times the implementation declares that it rounds an intermediate
        result to the output dtype (an eager op chain: matmul, then bias, then activation)."""
        return self.reference(inputs, case), None, None

    #: whether the check tests for a systematic bias of the errors (see harness.verify)
    bias_check: bool = True
    #: whether reference_and_bound derives a per-element bound (then a check made without it,
    #: from a tool comparing two outputs, skips the bias test: its allowances come with the bound)
    derives_bound: bool = False
    #: float64 tensors of the inputs' size and of the output's size that ``reference_and_bound``
    #: holds at its peak (temporaries included): the GPU memory model of ``harness.gpumem``
    ref_f64_inputs: int = 2
    ref_f64_outputs: int = 6

    # -- counts ------------------------------------------------------------------------------
    def traffic(self, case: Case) -> int:
        """Fewest bytes read + written: each input read once, each output written once."""
        raise NotImplementedError

    def flops(self, case: Case) -> int:
        return 0

    def copy_launch(self, case: Case, device) -> "Callable[[], object] | None":
        """The same-size copy this case's bandwidth is a share of (``pct_ceiling``): a torch op
        moving the case's ``traffic`` bytes in its ``mix`` (1:1 ``copy_``; 2:1 ``torch.add`` of
        two inputs into a third), on fresh fp32 buffers, timed beside the implementations in the
        same run and timing mode. None for problems measured against arithmetic (GEMM)."""
        if self.metric != "GB/s" or self.mix not in COPY_MIXES:
            return None
        parts = COPY_MIXES[self.mix]
        n = max(1, -(-self.traffic(case) // (4 * parts)))   # fp32 elements per operand
        bufs = [torch.ones(n, device=device) for _ in range(parts)]
        if parts == 2:
            x, z = bufs
            return lambda: z.copy_(x)
        x, y, z = bufs
        return lambda: torch.add(x, y, out=z)

    def variants(self, case: Case) -> dict[str, list[Kernel]]:
        """Modeled kernels of named variants (the fused kernel first)."""
        return {}

    def fused_variant(self, case: Case) -> str:
        return next(iter(self.variants(case)), "fused")


def elem_size(dtype: str) -> int:
    return torch.empty((), dtype=DTYPES[dtype_name(dtype)]).element_size()


def generator(device, seed: int) -> torch.Generator:
    dev = torch.device(device)
    g = torch.Generator(device=dev if dev.type == "cuda" else "cpu")
    g.manual_seed(int(seed))
    return g


def randn(shape, g: torch.Generator, device, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)


_REGISTRY: dict[str, Problem] = {}


def register_problem(p: Problem) -> Problem:
    _REGISTRY[p.name] = p
    return p


def get(name: str) -> Problem:
    _load()
    if name not in _REGISTRY:
        raise ValueError(f"problem: unknown problem {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def all_problems() -> list[Problem]:
    _load()
    order = ("vector_add", "softmax", "gemm_epilogue", "attention")
    return [_REGISTRY[k] for k in order if k in _REGISTRY] + [
        v for k, v in _REGISTRY.items() if k not in order]


def names_help() -> str:
    """The registered problems as a help string (``vector_add | softmax | ...``), so that every
    command's help names each problem, a new one included."""
    return " | ".join(p.name for p in all_problems())


def _load():
    from . import attention, gemm_epilogue, softmax, vector_add  # noqa: F401
