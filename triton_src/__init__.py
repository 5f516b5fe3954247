"""Triton kernels of the three problems.

Files (docs/DESIGN.md): ``<problem>.py`` is the teaching twin (the shortest correct kernel, read top
to bottom), ``<problem>_<algorithm>.py`` a tuned variant, ``dispatch.py`` the tuning tables and the
one planner that the default implementations use, ``runtime.py`` the launch machinery (specialise
once, launch with the fewest Python steps; occupancy; the interpreter hook of the split kernel).

Shared here: the facts every wrapper needs (is Triton running its CPU interpreter; what does the
device have). Argument checks are in ``checks.py``.
"""
from __future__ import annotations

import torch


def interpreting() -> bool:
    """True when Triton runs kernels with its CPU interpreter (Triton's own ``interpret`` knob)."""
    import triton
    return bool(triton.knobs.runtime.interpret)


#: what the planner assumes without a GPU (compile_only, the interpreter): an H200
H200 = {"sms": 132, "regs_per_sm": 65536, "smem_per_sm": 233472, "max_warps_per_sm": 64,
        "l2_bytes": 50 * 2 ** 20}


def device_facts(device: torch.device | None = None) -> dict:
    """SMs, registers and shared memory per SM, warps per SM and L2 size, as the driver reports
    them (an H200's without a CUDA device)."""
    if device is None or torch.device(device).type != "cuda":
        return dict(H200)
    p = torch.cuda.get_device_properties(device)
    return {"sms": p.multi_processor_count,
            "regs_per_sm": getattr(p, "regs_per_multiprocessor", 65536),
            "smem_per_sm": getattr(p, "shared_memory_per_multiprocessor", 232448),
            "max_warps_per_sm": getattr(p, "max_threads_per_multi_processor", 2048) // 32,
            "l2_bytes": getattr(p, "L2_cache_size", 0) or H200["l2_bytes"]}


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def pow2_divisor(*values: int, limit: int = 16) -> int:
    """The largest power of two <= ``limit`` dividing every value (alignment facts in elements or
    bytes; 0 divides by anything)."""
    d = limit
    for v in values:
        while d > 1 and int(v) % d:
            d //= 2
    return d


def _on_import() -> None:
    try:
        if interpreting():
            from .runtime import patch_interpreter_bf16_dot, patch_interpreter_bf16_rounding
            patch_interpreter_bf16_dot()
            patch_interpreter_bf16_rounding()
    except ImportError:  # no triton: the adapter reports it
        pass


_on_import()
