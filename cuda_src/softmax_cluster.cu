// softmax, cluster: a long row over a thread-block cluster of C CTAs (C = 2 .. 16), each CTA's
// share of the row held in its threads' REGISTERS, one exponential per element, the (max, sum)
// partials exchanged through distributed shared memory (the `cluster` algorithm word of every
// layer; beside softmax_smem.cu, which stages each slice raw in shared memory and exponentiates
// every element twice).
//
// Grid: M * C CTAs of 256 threads in 1-D clusters of C (compile-time __cluster_dims__; C = 16 needs
// the non-portable cluster size, which the host allows). A row is read as the 16-byte vectors from
// the 16-byte boundary at or before its first element: vector j holds columns
// [j * VEC - phase, j * VEC - phase + VEC), phase = the row start's elements past the boundary, so
// a row at any alignment (an odd length, a strided view) still moves in 128-bit loads; elements of
// a vector outside [0, N) lie in the same 16-byte granule as row elements (inside the allocation)
// and are replaced by -inf in registers. Thread t of cluster rank r holds vectors
// (k * C + r) * 256 + t, k < K: a warp's loads are adjacent and the C CTAs' shares of a row equal.
//   1. all K loads issued before the first use (raw 16-byte vectors in registers);
//   2. the thread's max m_t, e = exp(x - m_t) kept in fp32 registers, s_t = sum of e; warp
//      butterflies merge the (m, s) pairs and lane 0 writes its warp's pair to shared memory;
//   3. cluster barrier (arrive.release / wait.acquire); every warp reads the C x 8 pairs through
//      distributed shared memory in a fixed order and merges them in a fixed butterfly, so every
//      thread of every CTA holds the same (M, S); a second cluster barrier is arrived here and
//      waited at the end, so no CTA exits while a peer still reads its pairs;
//   4. y = e * exp(m_t - M) / S from registers: 16-byte stores where y's row has x's phase and the
//      vector lies inside the row, element stores otherwise.
// One HBM read and one write per element. A thread whose values are all -inf contributes nothing;
// a row of only -inf gives 0 * (1 / 0) = NaN, as the reference does.
#include "common.cuh"
#include "ptx.cuh"

#include <cooperative_groups.h>

namespace kl {

constexpr int kClusterThreads = 256;  // threads a CTA (the launch bound; dispatch_softmax.py)

template <typename T, int K, int C>
__global__ void __launch_bounds__(kClusterThreads, 2) KL_CLUSTER_DIMS(C)
    softmax_cluster_kernel(const T* __restrict__ x, T* __restrict__ y, int N, i64 sx, i64 sy) {
  constexpr int VEC = 16 / sizeof(T), NT = kClusterThreads, W = NT / 32;
  typedef typename RawVec<T, VEC>::type R;
  __shared__ float2 part[W];  // this CTA's (max, sum) a warp, read by every CTA of the cluster
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const i64 row = blockIdx.x / C;
  const int rank = (int)(blockIdx.x % C);  // == cluster rank: clusters are C consecutive CTAs in x
  const T* xr = x + row * sx;
  T* yr = y + row * sy;
  const int phase = (int)((reinterpret_cast<unsigned long long>(xr) & 15) / sizeof(T));
  const R* xv = reinterpret_cast<const R*>(xr - phase);

  // 1. every vector of the thread in flight at once
  R raw[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = (k * C + rank) * NT + t;
    if (j * VEC - phase < N) raw[k] = xv[j];
  }
  // 2. one exponential per element, relative to the thread's own max
  float v[K][VEC];
  float mt = KL_NEG_INF;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c0 = ((k * C + rank) * NT + t) * VEC - phase;
    unpack<T, VEC>(raw[k], v[k]);
    if (c0 < 0 || c0 + VEC > N) {  // the row's first or last vector, or none of the row
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (c0 + e < 0 || c0 + e >= N) v[k][e] = KL_NEG_INF;
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) mt = fmaxf(mt, v[k][e]);
  }
  const float shift = mt == KL_NEG_INF ? 0.f : mt;  // all -inf: e = 0, no (-inf) - (-inf)
  float st = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      v[k][e] = exp_shifted(v[k][e], shift);
      st += v[k][e];
    }
  float m = mt, s = st;
  warp_online_merge(m, s);
  if (lane == 0) part[warp] = float2{m, s};

  // 3. the cluster's C x W pairs, merged alike in every warp of every CTA
  float gm = KL_NEG_INF, gs = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  // Cluster barrier A (arrive.release / wait.acquire): every CTA's pairs are written before any
  // CTA reads a remote one.
  cluster_arrive();
  cluster_wait();
  for (int i = lane; i < C * W; i += 32) {  // lane i: pairs i, i + 32, ... (rank-major)
    const float2 p = *cluster.map_shared_rank(&part[i % W], i / W);
    online_merge(gm, gs, p.x, p.y);
  }
  warp_online_merge(gm, gs);
  // Cluster barrier B, split: arrive now (this CTA has read its peers' pairs: the merge consumed
  // them, so no release is needed), wait at the end.
  cluster_arrive_relaxed();
#endif

  // 4. normalise from the registers, write once
  const float scale = (mt == KL_NEG_INF ? 0.f : exp_shifted(mt, gm)) * (1.f / gs);
  const int yphase = (int)((reinterpret_cast<unsigned long long>(yr) & 15) / sizeof(T));
  R* yv = reinterpret_cast<R*>(yr - yphase);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = (k * C + rank) * NT + t;
    const int c0 = j * VEC - phase;
    if (c0 >= N) continue;
    float f[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] = v[k][e] * scale;
    if (yphase == phase && c0 >= 0 && c0 + VEC <= N) {
      yv[j] = pack<T, VEC>(f);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (c0 + e >= 0 && c0 + e < N) yr[c0 + e] = from_float<T>(f[e]);
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cluster_wait();  // barrier B: see above
#endif
}

}  // namespace kl
