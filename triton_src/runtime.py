"""Launch machinery shared by the tuned kernels (not by the teaching twins, which launch the way
the Triton tutorials do: ``kernel[grid](...)``).

- ``bind``: specialise a kernel once for fixed arguments and return a zero-argument launch that
  calls the compiled kernel's launcher directly. ``kernel[grid](...)`` re-derives the
  specialisation key from every argument (types, 16-byte alignment, values of 1), looks the
  kernel up and canonicalises the grid on every call; for a kernel whose arguments never change
  (the harness's ``prepare`` -> ``launch`` contract) that work is done once here.
- ``programs_per_sm``: occupancy of a compiled kernel (registers, shared memory, warps), for
  persistent grids and for the split kernel, whose programs must all be resident.
- ``interpret_concurrently``: runs one interpreter launch with its programs as concurrent threads
  (the split kernel's programs wait for each other; the interpreter runs programs one by one).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import triton.language as tl  # noqa: F401 - the interpreter patches the tl visible from ``spawn``

from kltools.loc_marks import interpreter_only

from . import interpreting


class Spec(NamedTuple):
    """One kernel launch, fully specified: what ``bind`` binds and ``compile_only`` compiles."""
    kernel: object
    grid: tuple
    args: dict
    options: dict


def bind_spec(spec: Spec, device: torch.device) -> Callable[[], None]:
    return bind(spec.kernel, spec.grid, spec.args, device=device, **spec.options)


def bind(kernel, grid, args: dict, *, device: torch.device, **options) -> Callable[[], None]:
    """A zero-argument launch of ``kernel`` on ``grid`` with ``args`` (every parameter by name,
    constexprs included) and compile ``options`` (num_warps, num_stages, ...).

    On the GPU: compile now (``warmup``: the same specialisation a ``kernel[grid]`` call would
    pick, from these very tensors), then each launch is one call of the compiled kernel's launcher
    on torch's current stream (so CUDA-graph capture records it). Under the interpreter: a plain
    ``kernel[grid](...)`` call. ``launch.compiled`` is the compiled kernel (None when interpreting)."""
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    if interpreting():
        def launch():
            kernel[grid](**args, **options)
        launch.compiled = None
        return launch
    missing = [n for n in kernel.arg_names if n not in args]
    if missing:
        raise TypeError(f"bind: no value for {', '.join(missing)} of {kernel.__name__}")
    compiled = kernel.warmup(grid=grid, **args, **options)
    if hasattr(compiled, "result"):  # asynchronous compile mode
        compiled = compiled.result()
    compiled._init_handles()
    values = tuple(args[n] for n in kernel.arg_names)
    run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
    g0, g1, g2 = grid
    index = device.index if device.index is not None else torch.cuda.current_device()
    current_stream = torch._C._cuda_getCurrentRawStream

    def launch():
        run(g0, g1, g2, current_stream(index), function, meta, None, None, None, *values)
    launch.compiled = compiled
    return launch


def programs_per_sm(compiled, num_warps: int, facts: dict) -> int:
    """Programs of a compiled kernel that one SM holds at once: the warp limit, the registers and
    the shared memory (plus the 1 KB the driver reserves per block), computed the way the CUDA
    occupancy calculator does (cuda_occupancy.h): registers are allocated per warp in units of 256
    inside each of the SM's 4 sub-partitions, so the warps that fit are 4 x (a quarter of the
    register file // a warp's registers), which is less than (the whole file // a warp's
    registers) whenever the division leaves a remainder. On the GPU the answer is also capped by
    the driver's own occupancy query (the figure a cooperative launch is checked against)."""
    per_sm = max(1, min(facts["max_warps_per_sm"] // num_warps, 32))
    regs_per_warp = -(-compiled.n_regs * 32 // 256) * 256
    if regs_per_warp:
        warps = (facts["regs_per_sm"] // SUB_PARTITIONS // regs_per_warp) * SUB_PARTITIONS
        per_sm = min(per_sm, warps // num_warps)
    smem = compiled.metadata.shared
    if smem:
        per_sm = min(per_sm, facts["smem_per_sm"] // (smem + 1024))
    driver = driver_occupancy(compiled, num_warps)
    if driver is not None:
        per_sm = min(per_sm, driver)
    return max(0, per_sm)


#: register file sub-partitions of an SM (every architecture since Maxwell but sm_60)
SUB_PARTITIONS = 4


def driver_occupancy(compiled, num_warps: int) -> int | None:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor for the compiled kernel (its dynamic shared
    memory as the launcher passes it), or None where the driver cannot be asked."""
    import ctypes
    function = getattr(compiled, "function", None)
    if not function:
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        query = cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor
    except (OSError, AttributeError):
        return None
    query.restype = ctypes.c_int
    query.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    blocks = ctypes.c_int(0)
    rc = query(ctypes.byref(blocks), ctypes.c_void_p(int(function)), 32 * num_warps,
               int(compiled.metadata.shared or 0))
    return int(blocks.value) if rc == 0 else None


@interpreter_only
def interpret_concurrently(kernel, n_programs: int, *args, **kwargs) -> None:
    """One interpreter launch of ``kernel`` on a grid of ``n_programs`` whose programs run at the
    same time, one Python thread each (the interpreter itself runs them one after another, which
    a kernel whose programs wait for each other cannot survive). The launch goes through the
    interpreter's own GridExecutor (argument conversion, language patching, copy-back); only the
    per-program call is replaced: it queues a thread, and the last one starts them all and joins.
    ``tl.program_id`` answers each thread with its own index.

    Scheduling: left alone, threads change hands only at the GIL's 5 ms switch, in start order,
    so whether a partner is late is luck. Instead, before every load (the polls are loads too) a
    thread sleeps 0 or 1 ms at random (a fixed seed per program) and every atomic hands the GIL on:
    a spinning thread costs little, and stragglers arrive late in every round, so a kernel that
    read its partners' partials without waiting for them reads empty or stale slots and fails
    verification (checked by removing the wait: every run failed).

    It checks the indexing, the masks, the arithmetic, the publish-and-poll protocol and that a
    grid whose programs all run at once finishes; not the GPU memory model (the GIL makes every
    store visible at once), residency on a real GPU, or speed. It uses interpreter internals
    (``GridExecutor``, ``InterpretedFunction.rewrite``, three ``interpreter_builder`` methods);
    should they change, the launch fails loudly, it does not fall back."""
    import inspect
    import random
    import threading
    import time
    from types import SimpleNamespace
    try:
        from triton.runtime import interpreter as interp
        body = kernel.rewrite()
        builder = interp.interpreter_builder
        program_id = type(builder).create_get_program_id
        rmw, masked_load = builder.create_atomic_rmw, builder.create_masked_load
        executor = interp.GridExecutor
        signature = inspect.signature(kernel.fn)
    except Exception as e:
        raise RuntimeError(f"this Triton's interpreter lacks what the concurrent CPU-mode launch "
                           f"uses ({type(e).__name__}: {e})") from None
    local = threading.local()
    threads: list = []
    errors: list = []

    def run(idx, kw):
        local.grid_idx = idx
        local.rng = random.Random(idx[0])
        try:
            body(**kw)
        except BaseException as e:  # re-raised in the launching thread
            errors.append(e)

    def atomic_rmw(*a, **k):
        time.sleep(0)
        return rmw(*a, **k)

    def load(*a, **k):
        time.sleep(local.rng.choice((0, 0, 0.001)))
        return masked_load(*a, **k)

    def spawn(**kw):
        threads.append(threading.Thread(target=run, args=(builder.grid_idx, kw), daemon=True))
        if len(threads) < n_programs:
            return
        builder.create_get_program_id = lambda axis: program_id(
            SimpleNamespace(grid_idx=local.grid_idx), axis)
        builder.create_atomic_rmw, builder.create_masked_load = atomic_rmw, load
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            del builder.create_get_program_id, builder.create_atomic_rmw, builder.create_masked_load
        if errors:
            raise errors[0]

    spawn.__signature__ = signature
    spawn.__annotations__ = dict(kernel.fn.__annotations__)
    executor(spawn, kernel.arg_names, (n_programs,))(*args, **kwargs)
