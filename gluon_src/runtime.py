"""Launch machinery of the tuned kernels (the twins launch the tutorial way, ``kernel[grid](...)``).

``Spec`` is one launch, fully specified (kernel, grid, every argument by name, compile options):
what ``bind`` binds on the GPU and what the adapter's ``compile_only`` compiles for sm_90a without
one. ``bind`` compiles once (``warmup``: the specialisation ``kernel[grid]`` would pick from these
very tensors) and returns a zero-argument launch that calls the compiled kernel's launcher on
torch's current stream.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch


class Spec(NamedTuple):
    kernel: object
    grid: tuple
    args: dict
    options: dict


class Plan(NamedTuple):
    """What a default runs: the variant, its configuration, the bound launch."""
    variant: str
    config: dict
    launch: object


def bind(spec: Spec, device: torch.device) -> Callable[[], None]:
    kernel, args = spec.kernel, spec.args
    grid = tuple(int(g) for g in spec.grid) + (1,) * (3 - len(spec.grid))
    missing = [n for n in kernel.arg_names if n not in args]
    if missing:
        raise TypeError(f"bind: no value for {', '.join(missing)} of {kernel.__name__}")
    compiled = kernel.warmup(grid=grid, **args, **spec.options)
    if hasattr(compiled, "result"):   # asynchronous compile mode
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
    launch.grid = list(grid)
    return launch


def bind_all(specs, device: torch.device) -> Callable[[], None]:
    """One zero-argument launch of several specs in order (e.g. split-K's two kernels)."""
    launches = [bind(s, device) for s in specs]
    if len(launches) == 1:
        return launches[0]

    def launch():
        for f in launches:
            f()
    launch.compiled = launches[0].compiled
    launch.grid = launches[0].grid
    return launch
