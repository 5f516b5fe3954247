"""A case: one shape, one dtype, one set of parameters of one problem."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "f16": "float16",
                 "half": "float16", "bf16": "bfloat16", "float": "float32"}


def dtype_name(d: str | torch.dtype) -> str:
    """Canonical dtype name ('float32', 'float16', 'bfloat16'); ValueError naming the value otherwise."""
    if isinstance(d, torch.dtype):
        for k, v in DTYPES.items():
            if v == d:
                return k
        raise ValueError(f"dtype: {d} is not one of {', '.join(DTYPES)}")
    name = DTYPE_ALIASES.get(str(d).lower(), str(d).lower())
    if name not in DTYPES:
        raise ValueError(f"dtype: unknown dtype {d!r}; choose from {', '.join(DTYPES)} "
                         f"(or fp32, fp16, bf16)")
    return name


@dataclass(frozen=True)
class Case:
    """One shape of one problem.

    ``dims`` keeps the named sizes in order (e.g. M, N, K); ``params`` holds everything else
    (activation, bias, row stride, input kind, ...). Read sizes as ``case.N`` or ``case.dims["N"]``.
    """

    problem: str
    dims: Mapping[str, int]
    dtype: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "dims", dict(self.dims))
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    def __getattr__(self, name: str):
        dims = self.__dict__.get("dims", {})
        if name in dims:
            return dims[name]
        raise AttributeError(name)

    def __hash__(self):
        return hash(self.id)

    def __eq__(self, other):
        return isinstance(other, Case) and other.id == self.id

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def shape_str(self) -> str:
        return "x".join(str(v) for v in self.dims.values())

    @property
    def id(self) -> str:
        parts = [f"{k}={v}" for k, v in self.dims.items()] + [self.dtype]
        parts += [f"{k}={v}" for k, v in sorted(self.params.items())]
        return f"{self.problem}[{','.join(parts)}]"

    @property
    def label(self) -> str:
        """Short human label: sizes, dtype and the non-default parameters."""
        extra = [f"{k}={v}" for k, v in sorted(self.params.items())]
        return " ".join([self.shape_str, self.dtype] + extra)

    def to_json(self) -> dict:
        return {"problem": self.problem, "dims": dict(self.dims), "dtype": self.dtype,
                "params": dict(self.params), "id": self.id}

    @classmethod
    def from_json(cls, d: Mapping) -> "Case":
        return cls(d["problem"], d["dims"], d["dtype"], d.get("params", {}))
