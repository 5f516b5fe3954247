"""Gluon (``triton.experimental.gluon``, Triton's explicit-layout level) kernels of the three problems.

Files (docs/DESIGN.md): ``<problem>.py`` the teaching twin, ``<problem>_<algorithm>.py`` the tuned
variants, ``dispatch.py`` the tables and the one planner, ``runtime.py`` the launch machinery,
``_compat.py`` the few names that differ between the Gluon of triton 3.6 and newer triton.

Shared here: what the device has (an H200's figures without a CUDA device: compile-only).
"""
from __future__ import annotations

#: what the planner assumes without a GPU (compile-only): an H200
H200 = {"sms": 132, "regs_per_sm": 65536, "smem_per_sm": 233472, "max_warps_per_sm": 64,
        "smem_per_block": 232448, "l2_bytes": 50 * 2 ** 20}


def device_facts(device=None) -> dict:
    """SMs, registers, shared memory (per SM, and the most one program may have) and warps per SM,
    as the driver reports them (an H200's without a CUDA device)."""
    import torch
    if device is None or torch.device(device).type != "cuda":
        return dict(H200)
    p = torch.cuda.get_device_properties(device)
    return {"sms": p.multi_processor_count,
            "regs_per_sm": getattr(p, "regs_per_multiprocessor", 65536),
            "smem_per_sm": getattr(p, "shared_memory_per_multiprocessor", 233472),
            "smem_per_block": getattr(p, "shared_memory_per_block_optin", 232448),
            "max_warps_per_sm": getattr(p, "max_threads_per_multi_processor", 2048) // 32,
            "l2_bytes": getattr(p, "L2_cache_size", 0) or H200["l2_bytes"]}


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def pow2_divisor(*values: int, limit: int = 16) -> int:
    """The largest power of two <= ``limit`` dividing every value (0 divides by anything)."""
    d = limit
    for v in values:
        while d > 1 and int(v) % d:
            d //= 2
    return d


def aligned_frame(x, out) -> int:
    """Elements per 16 bytes when the softmax kernels should address each row from the 16-byte
    boundary at or before its start (both tensors 16-byte aligned, rows equally far past a
    boundary, at least two groups a row), else 0 (rows that start on a boundary need no frame)."""
    vec = 16 // x.element_size()
    N = x.shape[1]
    sx, so = x.stride(0), out.stride(0)
    if N % vec == 0 and sx % vec == 0 and so % vec == 0 and x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0:
        return 0
    if x.data_ptr() % 16 or out.data_ptr() % 16 or (sx - so) % vec or N < 2 * vec:
        return 0
    return vec
