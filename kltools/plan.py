"""The one planner contract every layer keeps (docs/DESIGN.md, "One contract per layer").

A layer's planner module (``<layer>_src/dispatch.py``; the CuPy rows share ``cuda_src``'s) exposes

* ``VARIANTS``: ``{problem: (word, ...)}``, the algorithm words of the variants it plans among
  (the words of docs/DESIGN.md's table, each the suffix of an id ``<layer>:<problem>_<word>``
  or a kernel only the default launches);
* ``plan(problem, facts) -> Plan``: the default's choice for one case, from the case's facts
  alone (``Facts``: sizes, dtype, each operand's strides and 16-byte alignment, the device) --
  pure Python, no GPU, no compile, the same answer the default's ``prepare`` acts on;
* ``bind(plan, inputs, out) -> launch`` where the layer binds in its own folder (Triton, Gluon),
  else its adapter's ``bind`` (``backends/<layer>_layer.py``): the plan bound to tensors, a
  zero-argument launch.

The harness turns a ``Case`` into ``Facts`` (``harness.meta_inputs.case_facts``); the lines-of-code
rule (``harness.loc``) runs ``plan`` over every suite's cases to find the kernels a default can
launch. Kernel folders import this module, never the harness.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

ESIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Device:
    """What a planner may read of a GPU. The default is an H200 (132 SMs, sm_90): what every plan
    made without a GPU assumes, the line counts included."""
    name: str = "H200"
    sms: int = 132
    cc: tuple[int, int] = (9, 0)
    smem_per_sm: int = 233472       # bytes of shared memory an SM
    smem_per_cta: int = 232448      # the most one CTA may opt in to
    l2_bytes: int = 50 * 2 ** 20
    regs_per_sm: int = 65536
    threads_per_sm: int = 2048


H200 = Device()


@dataclass(frozen=True)
class Operand:
    """One tensor of a case as a planner sees it: its sizes, its strides (elements) and the byte
    address of its first element modulo 16 (0: 16-byte aligned)."""
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    addr16: int = 0

    def rows16(self, esize: int) -> bool:
        """Every row starts on a 16-byte boundary (its start, and its row stride where it has
        more than one row); a 1-d operand: its start."""
        if self.addr16 % 16:
            return False
        if len(self.shape) < 2 or self.shape[0] <= 1:
            return True
        return (self.strides[0] * esize) % 16 == 0


@dataclass(frozen=True)
class Facts:
    """One case of one problem, as facts: ``dims`` (``N``; ``M, N``; ``M, N, K``), the dtype, the
    problem's parameters (``act``, ``bias``...), each operand by name (``x``, ``y``, ``out``;
    ``a``, ``b``, ``bias``, ``out``; an absent bias is not there) and the device. Sizes read as
    ``facts.M``."""
    problem: str
    dims: Mapping[str, int]
    dtype: str
    params: Mapping[str, Any] = field(default_factory=dict)
    operands: Mapping[str, Operand] = field(default_factory=dict)
    device: Device = H200

    def __getattr__(self, name: str):
        dims = self.__dict__.get("dims", {})
        if name in dims:
            return dims[name]
        raise AttributeError(name)

    @property
    def esize(self) -> int:
        return ESIZE[self.dtype]

    def rows16(self, *names: str) -> bool:
        """Whether every row of each named operand (all of them when none is named) starts on a
        16-byte boundary."""
        ops = [self.operands[n] for n in names] if names else list(self.operands.values())
        return all(o.rows16(self.esize) for o in ops)

    def meta(self, name: str):
        """The operand as a torch meta tensor of the same sizes, strides and alignment (no memory):
        for the layers' tensor-level checks, which read only those."""
        import torch
        op = self.operands[name]
        es = self.esize
        dt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[self.dtype]
        off = op.addr16 // es if op.addr16 % es == 0 else 0
        extent = off + sum((n - 1) * s for n, s in zip(op.shape, op.strides)) + 1 if all(op.shape) else off + 1
        return torch.empty(extent, dtype=dt, device="meta").as_strided(op.shape, op.strides, off)


def operand_of(t) -> Operand:
    """The ``Operand`` of a tensor (a CUDA, CPU or meta tensor: a meta tensor's address is its
    offset into a 256-byte aligned allocation)."""
    es = t.element_size()
    addr = t.storage_offset() * es if t.device.type == "meta" else t.data_ptr()
    return Operand(tuple(int(n) for n in t.shape), tuple(int(s) for s in t.stride()), addr % 16)


def facts_of(problem: str, dims: Mapping[str, int], dtype: str, params: Mapping[str, Any],
             tensors: Mapping[str, Any], device: Device = H200) -> Facts:
    """``Facts`` from tensors by operand name (None: an absent operand, e.g. no bias)."""
    if dtype not in ESIZE:
        raise ValueError(f"dtype: {dtype!r} is not one of {', '.join(ESIZE)}")
    ops = {n: operand_of(t) for n, t in tensors.items() if t is not None}
    return Facts(problem, dict(dims), dtype, dict(params), ops, device)


@dataclass(frozen=True)
class Source:
    """Where the LOC counter looks (``harness.loc``): a file (relative to the repository root), its
    kernel entry points and its host entry points.

    Kernel lines = the named kernels (or, in Python, every ``@triton.jit`` / ``@cute.kernel`` /
    ``@cute.jit`` function when ``kernels`` is None) plus the device helpers they call; host
    lines = the named host functions plus the host helpers they call.
    """

    path: str
    kernels: tuple[str, ...] | None = None
    host: tuple[str, ...] = ()
    #: the planner's variant this Source is counted for (set by ``planned_sources``)
    variant: str | None = None


@dataclass(frozen=True)
class Plan:
    """A planner's answer for one case: the variant (an algorithm word of the layer's
    ``VARIANTS[problem]``), its configuration (plain data, the layer's own keys), the rule that
    chose it (in words, where the planner says) and ``sources``: the kernel files and entry
    points it launches, with the host entries that bind them (``Source``; by default the
    variant's in ``VARIANTS``)."""
    problem: str
    variant: str
    config: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""
    sources: tuple[Source, ...] = ()


def make_plan(problem: str, variant: str, variants: Mapping[str, Mapping[str, tuple]], config=None,
              why: str = "", sources: tuple = ()) -> Plan:
    """A ``Plan`` of ``variant``, which must be a word of ``variants[problem]`` (ValueError
    naming it otherwise); its sources default to that word's."""
    words = variants[problem]
    if variant not in words:
        raise ValueError(f"variant: {variant!r} is not one of {problem}'s {', '.join(words)}")
    return Plan(problem, variant, dict(config or {}), why, tuple(sources) or tuple(words[variant]))


def check_problem(problem: str, variants: Mapping[str, tuple]) -> None:
    """ValueError naming ``problem`` when the layer plans no such problem."""
    if problem not in variants:
        raise ValueError(f"problem: {problem!r} is not one of {', '.join(variants)}")
