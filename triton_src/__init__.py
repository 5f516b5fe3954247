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

from kltools.loc_marks import interpreter_flag


@interpreter_flag
def interpreting() -> bool:
    """True when Triton runs kernels with its CPU interpreter (Triton's own ``interpret`` knob)."""
    import triton
    return bool(triton.knobs.runtime.interpret)


#: what the planner assumes without a GPU (compile_only, the interpreter): an H200
H200 = {"sms": 132, "regs_per_sm": 65536, "smem_per_sm": 233472, "max_warps_per_sm": 64,
        "l2_bytes": 50 * 2 ** 20, "cc": (9, 0)}


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
            "l2_bytes": getattr(p, "L2_cache_size", 0) or H200["l2_bytes"],
            "cc": (p.major, p.minor)}


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


#: the softmax kernels' aligned frame (``aligned_frame``) on; False times them without it
FRAME = True


def aligned_frame(x: torch.Tensor, out: torch.Tensor) -> int:
    """Elements per 16 bytes when a softmax kernel should address each row from the 16-byte
    boundary at or before its start (so that its loads and stores are 128-bit), else 0.

    Triton vectorises a row's accesses only when it can prove them 16-byte aligned: the pointer
    (specialised when divisible by 16), the row stride and the column bound (specialised when
    divisible by 16 elements). A row of 50257 bf16 columns proves none of it, and the kernel then
    moves 2 bytes an instruction. The frame puts every row's accesses on 16-byte groups instead;
    it needs both tensors 16-byte aligned with rows that start equally far past a boundary."""
    if not FRAME:
        return 0
    vec = 16 // x.element_size()
    N = x.shape[1]
    sx, so = x.stride(0), out.stride(0)
    if N % 16 == 0 and sx % 16 == 0 and so % 16 == 0:
        return 0   # Triton's own specialisation already proves the 16-byte accesses
    if x.data_ptr() % 16 or out.data_ptr() % 16 or (sx - so) % vec or N < 2 * vec:
        return 0
    return vec


def _on_import() -> None:
    try:
        if interpreting():
            from kltools.triton_interp import apply_bf16_fixes
            apply_bf16_fixes()
    except ImportError:  # no triton: the adapter reports it
        pass


_on_import()
