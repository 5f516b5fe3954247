"""Attention forward, ``tma``: the twin's algorithm as a Helion expert sets it up for Hopper.

What changes against the twin (``attention.py``), and why:
- Static shapes: the kernel is compiled for the case's sizes and strides. Where Sq and Sk are
  multiples of the tiles (every model shape), Helion then proves every tile whole and generates
  no mask at all in the non-causal loop and no row masks anywhere; the TMA descriptors get
  constant shapes.
- The configuration comes from the planner (``dispatch_attention.py``, by rules over the case's
  facts): 128 or 64 query rows, key tiles, warps, K / V stages by shared memory, and
  ``indexing="tensor_descriptor"`` - Q, K, V and O move by TMA, K / V software-pipelined over the
  stages while the two ``hl.dot`` (wgmma) and the softmax of the tile before run.
- No explicit mask without causal: the loop runs to Sk, and over a ragged last tile Helion masks
  the max and the sum itself while the rows past Sk read as zero (TMA), so they add nothing to
  P V. With causal, one ``torch.where`` on every visited tile (the diagonal), as a loop whose end
  depends on the query tile is never proved whole: an unmasked bulk loop would not lose Helion's
  own masks (they would cost as much) and would lose TMA (Helion keeps pointer loads where a
  loop ends short of the tensor and the loaded values past its end matter).
- The scale folded into the exp2 argument: the max is taken on the raw scores and scaled once a
  row, the scores are scaled and shifted in one multiply-add.
- Launch order (``loop_orders`` in the configuration): the query tiles of one head next to each
  other, then the heads of one K / V group, so that programs running together share their K / V
  tiles in L2.

The causal mask broadcasts the tile indices with ``unsqueeze`` (a ``[rows, 1]`` column against a
``[1, keys]`` row), not by slicing them (``tm.index[:, None]``). Helion 1.4 gives a slice's ``:``
a reduction dimension and matches its extent against the existing ones with a guarding ``==``: at
D = 64 the query tile's block size symbol met the head dim's 64 and was specialised to it, so the
query tile became the head dim's extent - Q / O tiles of 64 rows under a 128-row configuration
and the running max and sum shaped by the head dim, which Triton rejected (``CompilationError``)
on causal D = 64 cases. Helion 1.5 compares without guarding; ``unsqueeze`` allocates no such
dimension on either, and the generated code at D = 128 is the same as before. The fix is checked
on the CPU (both Helion versions generate code that compiles for sm_90 on the failing shapes) and
awaits a GPU run, as does the kernel.
"""
from __future__ import annotations

import math

import torch

import helion
import helion.language as hl

LOG2E = 1.4426950408889634


@helion.kernel(autotune_effort="none", static_shapes=True)
def attention_tma(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  causal: hl.constexpr) -> torch.Tensor:
    B, Hq, Sq, D = q.size()
    Hkv, Sk = k.size(1), k.size(2)
    D = hl.specialize(D)
    qk_scale = LOG2E / math.sqrt(D)
    for tb, th, tm in hl.tile([B, Hq, Sq], block_size=[1, 1, None]):
        b, h, hk = tb.begin, th.begin, th.begin // (Hq // Hkv)
        m = hl.full([tm, 1], float("-inf"), dtype=torch.float32)
        l = hl.zeros([tm, 1], dtype=torch.float32)
        acc = hl.zeros([tm, D], dtype=torch.float32)
        qb = q[b, h, tm, :]
        if causal:  # statements: Helion 1.4 rejects `x if c else y` (IfExp)
            end = tm.end + (Sk - Sq)
        else:
            end = Sk
        for tn in hl.tile(0, end):
            s = hl.dot(qb, k[b, hk, tn, :].T, out_dtype=torch.float32)
            if causal:
                s = torch.where(tn.index.unsqueeze(0) <= tm.index.unsqueeze(1) + (Sk - Sq), s, float("-inf"))
            m_new = torch.maximum(m, torch.amax(s, 1, keepdim=True) * qk_scale)
            p = torch.exp2(s * qk_scale - m_new)
            alpha = torch.exp2(m - m_new)
            l = l * alpha + torch.sum(p, 1, keepdim=True)
            acc = hl.dot(p.to(v.dtype), v[b, hk, tn, :], acc=acc * alpha)
            m = m_new
        out[b, h, tm, :] = (acc / l).to(out.dtype)
    return out
