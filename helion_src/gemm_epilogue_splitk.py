"""GEMM + epilogue, split-K, in Helion: for few rows (decode-like M), where the (M, N) tiles alone
are fewer than the SMs and each would stream a long strip of B by itself.

``hl.tile([m, n, k])`` also tiles K: each program sums one K chunk of one output tile (the
configuration's third block size is the chunk, the fourth the K step inside it) and adds it into an
fp32 workspace with ``hl.atomic_add``. The epilogue needs the whole sum, so it is a second kernel:
workspace + bias, activation, store in the output dtype; it takes each sum with an atomic exchange
that leaves a zero, so the workspace is ready for the next call (zeroed once when allocated) and
no memset runs between calls.
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
        hl.atomic_add(ws, [tm, tn], acc)
    return ws


@helion.kernel(autotune_effort="none", static_shapes=False)
def splitk_epilogue(ws: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, act: str) -> torch.Tensor:
    for tm, tn in hl.tile(out.size()):
        # take the sum and leave a zero in one atomic exchange per element: a load then a store
        # of zeros could be done by different threads of the program with no barrier between
        acc = hl.atomic_xchg(ws, [tm, tn], hl.zeros([tm, tn], dtype=torch.float32))
        if bias is not None:
            acc = acc + bias[tn].to(torch.float32)
        if act == "relu":
            acc = torch.relu(acc)
        elif act == "gelu":
            acc = torch.nn.functional.gelu(acc, approximate="tanh")
        out[tm, tn] = acc.to(out.dtype)
    return out
