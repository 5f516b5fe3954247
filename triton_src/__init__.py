"""Triton kernels: one module per problem (kernels, then the launch wrapper that validates inputs).

Shared here: input checks that raise ``TypeError``/``ValueError`` naming the argument, and the two
facts every wrapper needs (are we running under ``TRITON_INTERPRET=1``; what does the device have).
"""
from __future__ import annotations

import os

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def interpreting() -> bool:
    """True when Triton runs kernels with its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def check_tensor(name: str, t, *, dtypes=FLOAT_DTYPES, ndim: int | None = None) -> torch.Tensor:
    """TypeError / ValueError naming ``name`` unless ``t`` is a tensor of an allowed dtype and rank
    on a device this process can run Triton on (CUDA, or CPU under the interpreter)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: dtype {t.dtype} is not one of {', '.join(map(str, dtypes))}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d tensor, got shape {tuple(t.shape)}")
    if t.device.type == "cuda":
        if interpreting():
            raise ValueError(f"{name}: CUDA tensor given while TRITON_INTERPRET=1 (the interpreter "
                             f"runs on CPU tensors)")
    elif t.device.type == "cpu":
        if not interpreting():
            raise ValueError(f"{name}: CPU tensor given; Triton runs CPU tensors only under "
                             f"TRITON_INTERPRET=1 (set before triton is imported)")
    else:
        raise ValueError(f"{name}: device {t.device} is not supported (cuda, or cpu under the interpreter)")
    return t


def check_same_device(**tensors) -> None:
    items = [(k, v) for k, v in tensors.items() if v is not None]
    first_name, first = items[0]
    for k, v in items[1:]:
        if v.device != first.device:
            raise ValueError(f"{k}: on {v.device}, but {first_name} is on {first.device}")


def device_facts(device: torch.device) -> dict:
    """SM count, registers and shared memory per SM, as the driver reports them."""
    if device.type != "cuda":
        return {"sms": 4, "regs_per_sm": 65536, "smem_per_sm": 232448, "max_warps_per_sm": 64}
    p = torch.cuda.get_device_properties(device)
    facts = {"sms": p.multi_processor_count,
             "regs_per_sm": getattr(p, "regs_per_multiprocessor", 65536),
             "smem_per_sm": getattr(p, "shared_memory_per_multiprocessor", 232448),
             "max_warps_per_sm": getattr(p, "max_threads_per_multi_processor", 2048) // 32}
    return facts


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()
