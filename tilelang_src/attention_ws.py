"""Attention forward for Hopper, the TileLang way: TMA into a pipeline of K / V stages, wgmma,
warp-specialised by the compiler.

The twin's algorithm (``attention.py``: a CTA per block of ``bm`` query rows, the online softmax
over key blocks of ``bn`` in the log2 domain) with what TileLang gives an expert on sm_90a:

- ``T.Pipelined(..., num_stages=stages)`` over the key blocks: TileLang turns the K and V copies
  into TMA loads (bulk tensor copies on mbarriers, issued ``stages - 1`` blocks ahead) and splits
  the CTA into a producer warpgroup that issues them and ``threads`` consumer threads (one
  warpgroup per 64 query rows) that run both ``T.gemm``s as wgmma and the softmax;
- the mask is the scores' initial value: S starts at 0 or -inf and ``T.gemm`` accumulates Q K^T
  onto it, so no second pass over S; keys past Sk and, when causal, past a row's diagonal
  (bottom-right: query i sees key j iff j <= i + Sk - Sq) are -inf. Only edge blocks (the ragged
  last one, those crossing the diagonal) compute it; the others clear S;
- causal: key blocks wholly above the last row's diagonal are never visited, and query blocks are
  taken longest first (the block of the last rows, which sees every key, gets blockIdx 0) so the
  short ones fill the last wave;
- the scale is folded into log2(e) / sqrt(D): the max is taken on raw scores and each weight is
  one FFMA and one ``exp2``; the row's rescale factor is computed once per row, not per element;
- Q arrives by one TMA load, O leaves through shared memory by one TMA store (rows past Sq are
  clipped by the copy: the descriptor knows the tensor's extent).

Sizes and strides are dynamic (``T.dynamic``): one compile per (dtype, D, causal, tile class) serves
every batch, head count and sequence length, [B, H, S, D] and [B, S, H, D] storage alike.
"""
import math

import tilelang.language as T


def attention_ws_kernel(dtype: str, D: int, causal: bool, bm: int, bn: int, stages: int, threads: int):
    B, Hq, Hkv, Sq, Sk = T.dynamic("B Hq Hkv Sq Sk")
    q_b, q_h, q_s, k_b, k_h, k_s = T.dynamic("q_b q_h q_s k_b k_h k_s")
    v_b, v_h, v_s = T.dynamic("v_b v_h v_s")
    f32 = "float32"
    scale = math.log2(math.e) / math.sqrt(D)
    full_row = T.GemmWarpPolicy.FullRow     # each consumer warpgroup owns whole rows of S and O

    @T.prim_func
    def attention_ws(Q: T.StridedTensor((B, Hq, Sq, D), (q_b, q_h, q_s, 1), dtype),
                     K: T.StridedTensor((B, Hkv, Sk, D), (k_b, k_h, k_s, 1), dtype),
                     V: T.StridedTensor((B, Hkv, Sk, D), (v_b, v_h, v_s, 1), dtype),
                     O: T.Tensor((B, Hq, Sq, D), dtype)):
        with T.Kernel(T.ceildiv(Sq, bm), Hq, B, threads=threads) as (bx, h, b):
            Q_s = T.alloc_shared((bm, D), dtype)
            K_s = T.alloc_shared((bn, D), dtype)
            V_s = T.alloc_shared((bn, D), dtype)
            O_s = T.alloc_shared((bm, D), dtype)
            s = T.alloc_fragment((bm, bn), f32)
            p = T.alloc_fragment((bm, bn), dtype)
            acc = T.alloc_fragment((bm, D), f32)
            m = T.alloc_fragment((bm,), f32)
            m_old = T.alloc_fragment((bm,), f32)
            alpha = T.alloc_fragment((bm,), f32)
            l = T.alloc_fragment((bm,), f32)
            l_blk = T.alloc_fragment((bm,), f32)
            qb = T.ceildiv(Sq, bm) - 1 - bx if causal else bx     # longest query blocks first
            kv = T.truncdiv(h, T.truncdiv(Hq, Hkv))   # sizes are >= 0: C division, no floor fix-ups
            T.copy(Q[b, h, qb * bm:(qb + 1) * bm, :], Q_s)
            T.fill(m, -T.infinity(f32))
            T.fill(l, 0.0)
            T.clear(acc)
            blocks = T.ceildiv(Sk, bn)
            if causal:
                blocks = T.min(blocks, T.ceildiv((qb + 1) * bm + Sk - Sq, bn))
            for t in T.Pipelined(blocks, num_stages=stages):
                T.copy(K[b, kv, t * bn:(t + 1) * bn, :], K_s)
                # only the ragged last block and (causal) those crossing the first row's diagonal
                # are masked; a real row's diagonal is below Sk (Sq <= Sk): the causal test covers both
                if (t + 1) * bn - 1 > (qb * bm + Sk - Sq if causal else Sk - 1):
                    for i, j in T.Parallel(bm, bn):
                        seen = t * bn + j <= qb * bm + i + Sk - Sq if causal else t * bn + j < Sk
                        s[i, j] = T.if_then_else(seen, 0, -T.infinity(f32))
                else:
                    T.clear(s)
                T.gemm(Q_s, K_s, s, transpose_B=True, policy=full_row)
                T.copy(m, m_old)
                T.reduce_max(s, m, dim=1, clear=False)
                for i in T.Parallel(bm):
                    alpha[i] = T.exp2((m_old[i] - m[i]) * scale)
                for i, j in T.Parallel(bm, bn):
                    s[i, j] = T.exp2(s[i, j] * scale - m[i] * scale)
                T.reduce_sum(s, l_blk, dim=1)
                for i in T.Parallel(bm):
                    l[i] = l[i] * alpha[i] + l_blk[i]
                T.copy(s, p)
                for i, j in T.Parallel(bm, D):
                    acc[i, j] *= alpha[i]
                T.copy(V[b, kv, t * bn:(t + 1) * bn, :], V_s)
                T.gemm(p, V_s, acc, policy=full_row)
            for i, j in T.Parallel(bm, D):
                acc[i, j] /= l[i]
            T.copy(acc, O_s)
            T.copy(O_s, O[b, h, qb * bm:(qb + 1) * bm, :])

    return attention_ws
