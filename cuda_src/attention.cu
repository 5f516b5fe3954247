// attention, the teaching twin: O = softmax(Q K^T / sqrt(D) + mask) V per head, flash style.
//
// Q is [B, Hq, Sq, D], K and V [B, Hkv, Sk, D], O [B, Hq, Sq, D], any strides along B, H and S
// (the head dim contiguous), fp16 / bf16 (math in fp32), D 64 or 128. Query head h reads K / V head
// h / group (grouped-query attention). Causal is bottom-right aligned: query i sees key j iff
// j <= i + Sk - Sq.
//
// A CTA takes 16 query rows of one head (4 warps, 4 rows a warp, each lane D/32 elements of a row of
// Q and of O) and walks the keys in tiles of 32: the CTA stages a tile of K and V in shared memory
// (fp32), then each warp runs its rows over the tile one key at a time, the online softmax: the
// score s = q . k (a warp-wide sum), the running max m, the running sum l of exp(s - m) and the
// output o, both rescaled by exp(m_old - m_new) when the max grows. The scale is folded into the
// exponent base: exp(x / sqrt(D)) = 2^(x * log2(e) / sqrt(D)). Nothing of the Sq x Sk scores is
// ever stored; O = o / l at the end. The tuned kernel (attention_tiled.cu) does the same on tensor
// cores, 64 keys at a time.
#include "gemm_common.cuh"

namespace kl {

constexpr int AS_WARPS = 4, AS_ROWS = 4, AS_BN = 32;  // warps a CTA, query rows a warp, keys a tile

template <bool BF16, int D>
__global__ void __launch_bounds__(AS_WARPS * 32)
attention_simple_kernel(const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
                        u16* __restrict__ O, int group, int Sq, int Sk, long long qb, long long qh, long long qs,
                        long long kb, long long kh, long long ks, long long vb, long long vh, long long vs,
                        long long ob, long long oh, long long os, int causal) {
  constexpr int E = D / 32;                  // elements of a row a lane holds
  constexpr int BM = AS_WARPS * AS_ROWS;     // query rows a CTA
  constexpr float SCALE_LOG2 = (D == 64 ? 0.125f : 0.08838834764831845f) * 1.4426950408889634f;
  __shared__ float sK[AS_BN][D], sV[AS_BN][D];
  const int h = blockIdx.y, b = blockIdx.z, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const u16* q = Q + b * qb + h * qh;
  const u16* k = K + b * kb + (h / group) * kh;
  const u16* v = V + b * vb + (h / group) * vh;
  u16* o_head = O + b * ob + h * oh;
  const int m0 = blockIdx.x * BM + warp * AS_ROWS;  // this warp's first row

  float q_r[AS_ROWS][E], o[AS_ROWS][E], m[AS_ROWS], l[AS_ROWS];
#pragma unroll
  for (int r = 0; r < AS_ROWS; ++r) {
    m[r] = __int_as_float(0xff800000);  // -inf
    l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      q_r[r][e] = m0 + r < Sq ? to_f32<BF16>(q[(m0 + r) * qs + lane * E + e]) : 0.f;
      o[r][e] = 0.f;
    }
  }
  // the keys any row of this CTA sees: up to the last row's limit
  const int last = min(blockIdx.x * BM + BM, Sq) - 1;
  const int n_end = causal ? min(Sk, last + 1 + Sk - Sq) : Sk;

  for (int n0 = 0; n0 < n_end; n0 += AS_BN) {
    __syncthreads();  // every warp is done with the previous tile
    for (int c = threadIdx.x; c < AS_BN * D; c += blockDim.x) {
      const int j = c / D, d = c % D;
      const bool in = n0 + j < Sk;
      sK[j][d] = in ? to_f32<BF16>(k[(n0 + j) * ks + d]) : 0.f;
      sV[j][d] = in ? to_f32<BF16>(v[(n0 + j) * vs + d]) : 0.f;
    }
    __syncthreads();  // the tile is in shared memory
#pragma unroll
    for (int r = 0; r < AS_ROWS; ++r) {
      const int i = m0 + r;
      if (i >= Sq) continue;  // the same for the whole warp
      const int lim = causal ? min(Sk, i + 1 + Sk - Sq) : Sk;  // keys [0, lim) are visible to row i
      for (int j = 0; j < AS_BN && n0 + j < lim; ++j) {
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) s += q_r[r][e] * sK[j][lane * E + e];
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        s *= SCALE_LOG2;
        const float m_new = fmaxf(m[r], s);
        const float corr = exp2f(m[r] - m_new), p = exp2f(s - m_new);  // corr = 0 at the first key
        l[r] = l[r] * corr + p;
#pragma unroll
        for (int e = 0; e < E; ++e) o[r][e] = o[r][e] * corr + p * sV[j][lane * E + e];
        m[r] = m_new;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < AS_ROWS; ++r) {
    if (m0 + r >= Sq) continue;
#pragma unroll
    for (int e = 0; e < E; ++e) o_head[(m0 + r) * os + lane * E + e] = from_f32<BF16>(o[r][e] / l[r]);
  }
}

}  // namespace kl
