"""GEMM + epilogue, split-K, in Helion: for few output tiles (few rows), where the (M, N) tiles
alone leave SMs idle and each would stream a long strip of K by itself.

``hl.tile([m, n, k])`` also tiles K: each program sums one K chunk of one output tile (the
configuration's third block size is the chunk, the fourth the K step inside it) and stores its fp32
partial sum in its own slice of the workspace, ``ws[chunk.id]`` (shape [chunks, M, N]): no atomics,
so the result does not depend on the order in which programs finish. The epilogue needs the whole
sum, so it is a second kernel: the chunks' partial sums added in a fixed order, + bias, activation,
store in the output dtype.
"""
from __future__ import annotations

import torch

import helion
import helion.language as hl


@helion.kernel(autotune_effort="none", static_shapes=False)
def gemm_partial_sums(a: torch.Tensor, b: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    m, k = a.size()
    n = b.size(1)
    for tm, tn, chunk in hl.tile([m, n, k]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(chunk.begin, chunk.end):
            acc = torch.addmm(acc, a[tm, tk], b[tk, tn])
        ws[chunk.id, tm, tn] = acc
    return ws


@helion.kernel(autotune_effort="none", static_shapes=False)
def splitk_epilogue(ws: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, act: str) -> torch.Tensor:
    for tm, tn in hl.tile(out.size()):
        acc = torch.sum(ws[:, tm, tn], dim=0)
        if bias is not None:
            acc = acc + bias[tn].to(torch.float32)
        if act == "relu":
            acc = torch.relu(acc)
        elif act == "gelu":
            acc = torch.nn.functional.gelu(acc, approximate="tanh")
        out[tm, tn] = acc.to(out.dtype)
    return out
