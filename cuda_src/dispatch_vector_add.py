"""vector_add plans of the CUDA C++ layer (``dispatch`` is the entry): the default is the
``unmasked`` algorithm (``vector_add_unmasked.cu``: a grid-stride loop of 16-byte vectors where x, y
and out share their alignment, a scalar head and tail), its unroll by the grid that gives every SM
a block; the twin (``vector_add.cu``) one element a thread."""
from __future__ import annotations

from .dispatch_common import CTYPE, ESIZE, H200, THREADS_PER_SM, Device, Launches, Plan, _cdiv, _types

# ---------------------------------------------------------------------------------------------------
# tuning table

VECTOR_ADD = {
    "block": 256,             # threads per block
    "unroll": 4,              # most independent 16-byte loads per input per thread (template argument)
    "unrolls": (1, 2, 4),     # the instances compiled: a tuning run may pin one (plan's ``unroll``)
    # the unroll is the largest whose grid still gives every SM a block: on a short vector more
    # blocks (more SMs issuing loads at once) shorten the one round trip the launch waits for,
    # where more loads a thread only make fewer, longer blocks
    "blocks_per_sm": 8,       # resident blocks of 256 threads (the grid is capped at 1024 such waves)
    "max_waves": 1024,
}

# ---------------------------------------------------------------------------------------------------
# kernel instances (the module's table and NVRTC's name expressions) and argument signatures

SIGNATURES = {  # parameter types in order: ptr / i32 / i64 / tma (a 128-byte CUtensorMap by value)
    "vector_add_simple_kernel": ("ptr", "ptr", "ptr", "i64"),
    "vector_add_unmasked_kernel": ("ptr", "ptr", "ptr", "i64", "i64"),
}


def instances() -> dict[str, list[str]]:
    """{source file: [instance, ...]}: every kernel instance a plan can name, by source."""
    out: dict[str, list[str]] = {}
    out["vector_add.cu"] = [f"vector_add_simple_kernel<{t}>" for t, _ in _types()]
    out["vector_add_unmasked.cu"] = [f"vector_add_unmasked_kernel<{t}, {v}, {u}>"
                                for t, es in _types() for v in (1, 16 // es) for u in VECTOR_ADD["unrolls"]]
    return out


# ---------------------------------------------------------------------------------------------------
# plans

VECTOR_ADD_PATHS = ("auto", "simple")  # auto: the unmasked kernel


def plan_vector_add(path: str, n: int, dtype: str, x_mod16: int = 0, y_mod16: int = 0, out_mod16: int = 0,
                    dev: Device = H200, unroll: int | None = None) -> Launches:
    """``*_mod16``: byte address modulo 16 of x, y, out (the 16-byte vector path needs them equal).
    ``unroll``: pin the vector path's loads in flight per thread (one of VECTOR_ADD["unrolls"]),
    for tuning runs; by default the largest up to VECTOR_ADD["unroll"] whose grid has a block for
    every SM (the smallest when none has)."""
    if path not in VECTOR_ADD_PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(VECTOR_ADD_PATHS)}")
    if unroll is not None and unroll not in VECTOR_ADD["unrolls"]:
        raise ValueError(f"unroll: must be one of {VECTOR_ADD['unrolls']}, got {unroll!r}")
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    t, es = CTYPE[dtype], ESIZE[dtype]
    if path == "simple":
        block = 256
        grid = min(_cdiv(max(n, 1), block), dev.sms * (THREADS_PER_SM // block) * 32)
        p = Plan(f"vector_add_simple_kernel<{t}>", (grid if n else 0, 1, 1), block,
                 (("ptr", "x"), ("ptr", "y"), ("ptr", "out"), ("i64", n)))
        return Launches([p], info={"path": "simple", "kernel": p.kernel, "grid": grid, "block": block})
    same = x_mod16 == out_mod16 and y_mod16 == out_mod16
    vec = 16 // es if same else 1
    head = min(((16 - out_mod16) % 16) // es, n) if same else 0
    b = VECTOR_ADD["block"]
    nvec = (n - head) // vec
    if unroll is None:
        fits = [u for u in VECTOR_ADD["unrolls"] if u <= VECTOR_ADD["unroll"] and _cdiv(nvec, b * u) >= dev.sms]
        unroll = max(fits) if fits else min(VECTOR_ADD["unrolls"])
    full = max(1, _cdiv(nvec, b * unroll))
    grid = min(full, dev.sms * VECTOR_ADD["blocks_per_sm"] * VECTOR_ADD["max_waves"])
    grid = max(grid, _cdiv(vec, b))  # the head and the tail (< vec elements each) need vec threads
    kern = f"vector_add_unmasked_kernel<{t}, {vec}, {unroll}>"
    p = Plan(kern, (grid if n else 0, 1, 1), b, (("ptr", "x"), ("ptr", "y"), ("ptr", "out"), ("i64", n), ("i64", head)))
    return Launches([p], info={"path": "unmasked", "kernel": kern, "vec": vec, "head": head, "unroll": unroll,
                               "block": b, "grid": grid})
