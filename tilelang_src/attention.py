"""Attention forward, the TileLang way, shortest form: O = softmax(Q K^T / sqrt(D) + mask) V per head.

A CTA owns BM query rows of one (batch, head), copied once into shared memory, and walks the keys
in blocks of BN: ``T.gemm`` makes the scores S = Q K^T of the block in an fp32 fragment, the online
softmax keeps a running max ``m`` and sum ``l`` per row (when a block raises the max, ``l`` and
the output accumulator are rescaled by 2^(old m - new m)), and ``T.gemm`` adds P V with P cast to
the input dtype. One division by ``l`` at the end; the scores never reach global memory.

Scores are taken in the log2 domain: S is multiplied by log2(e) / sqrt(D) once, so each
exponential is one ``exp2``. Keys past Sk and, when causal, keys after a row's diagonal (the
problem's bottom-right mask: query i sees key j iff j <= i + Sk - Sq) get -inf, weight 0; key 0
is visible to every row, so the first block gives each row a finite max. Query head h reads K / V
head h // (Hq / Hkv) (grouped-query attention). Sizes and strides are dynamic (one compile per
dtype, head dim and mask), loads are guarded element copies (no TMA, no pipelining hints).
"""
import math

import tilelang.language as T

BM, BN = 64, 64
THREADS = 128


def attention_kernel(dtype: str, D: int, causal: bool):
    B, Hq, Hkv, Sq, Sk = T.dynamic("B Hq Hkv Sq Sk")
    q_b, q_h, q_s, k_b, k_h, k_s = T.dynamic("q_b q_h q_s k_b k_h k_s")
    v_b, v_h, v_s = T.dynamic("v_b v_h v_s")
    f32 = "float32"
    scale = math.log2(math.e) / math.sqrt(D)

    @T.prim_func
    def attention(Q: T.StridedTensor((B, Hq, Sq, D), (q_b, q_h, q_s, 1), dtype),
                  K: T.StridedTensor((B, Hkv, Sk, D), (k_b, k_h, k_s, 1), dtype),
                  V: T.StridedTensor((B, Hkv, Sk, D), (v_b, v_h, v_s, 1), dtype),
                  O: T.Tensor((B, Hq, Sq, D), dtype)):
        with T.Kernel(T.ceildiv(Sq, BM), Hq, B, threads=THREADS) as (qb, h, b):
            Q_s = T.alloc_shared((BM, D), dtype)
            K_s = T.alloc_shared((BN, D), dtype)
            V_s = T.alloc_shared((BN, D), dtype)
            s = T.alloc_fragment((BM, BN), f32)
            p = T.alloc_fragment((BM, BN), dtype)
            acc = T.alloc_fragment((BM, D), f32)
            m = T.alloc_fragment((BM,), f32)
            m_old = T.alloc_fragment((BM,), f32)
            l = T.alloc_fragment((BM,), f32)
            l_blk = T.alloc_fragment((BM,), f32)
            kv = T.truncdiv(h, T.truncdiv(Hq, Hkv))   # sizes are >= 0: C division, no floor fix-ups
            T.copy(Q[b, h, qb * BM:(qb + 1) * BM, :], Q_s, disable_tma=True)
            T.fill(m, -T.infinity(f32))
            T.fill(l, 0.0)
            T.clear(acc)
            # causal: no key past the last row's diagonal
            end = T.min(Sk, (qb + 1) * BM + Sk - Sq) if causal else Sk
            for t in T.serial(T.ceildiv(end, BN)):
                T.copy(K[b, kv, t * BN:(t + 1) * BN, :], K_s, disable_tma=True)
                T.copy(V[b, kv, t * BN:(t + 1) * BN, :], V_s, disable_tma=True)
                T.clear(s)
                T.gemm(Q_s, K_s, s, transpose_B=True)
                for i, j in T.Parallel(BM, BN):
                    seen = t * BN + j < Sk
                    if causal:
                        seen = seen and t * BN + j <= qb * BM + i + Sk - Sq
                    s[i, j] = T.if_then_else(seen, s[i, j] * scale, -T.infinity(f32))
                T.copy(m, m_old)
                T.reduce_max(s, m, dim=1, clear=False)
                for i, j in T.Parallel(BM, BN):
                    s[i, j] = T.exp2(s[i, j] - m[i])
                T.reduce_sum(s, l_blk, dim=1)
                for i in T.Parallel(BM):
                    l[i] = l[i] * T.exp2(m_old[i] - m[i]) + l_blk[i]
                for i, j in T.Parallel(BM, D):
                    acc[i, j] *= T.exp2(m_old[i] - m[i])
                T.copy(s, p)
                T.gemm(p, V_s, acc)
            for i, j in T.Parallel(BM, D):
                acc[i, j] /= l[i]
            T.copy(acc, O[b, h, qb * BM:(qb + 1) * BM, :])

    return attention
