"""GEMM + epilogue in Helion: out = act(a @ b + bias), fp32 accumulation.

``hl.tile([m, n])`` gives each program an output tile; the inner ``hl.tile(k)`` loop accumulates
``a[tm, tk] @ b[tk, tn]`` into an fp32 tile (``torch.addmm`` on tiles becomes ``tl.dot``). The
epilogue runs on the accumulator before the one store: bias (optional: ``None`` compiles it out)
and the activation (``act`` is a compile-time string: none, relu, or GELU in its tanh form).
Helion masks ragged M, N and K tiles. ``autotune_effort="none"``: Helion's default configuration.
"""
from __future__ import annotations

import torch

import helion
import helion.language as hl


@helion.kernel(autotune_effort="none")
def gemm_epilogue(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                  act: str) -> torch.Tensor:
    m, k = a.size()
    n = b.size(1)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = torch.addmm(acc, a[tm, tk], b[tk, tn])
        if bias is not None:
            acc = acc + bias[tn].to(torch.float32)
        if act == "relu":
            acc = torch.relu(acc)
        elif act == "gelu":
            acc = torch.nn.functional.gelu(acc, approximate="tanh")
        out[tm, tn] = acc.to(out.dtype)
    return out
