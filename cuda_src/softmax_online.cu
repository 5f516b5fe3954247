// softmax, online: column tiles streamed with a running (max, sum), C CTAs per row (a thread-block
// cluster on sm_90) merged through distributed shared memory; any N (the fallback of the planner).
#include "softmax_common.cuh"

#include <cooperative_groups.h>

namespace kl {

// ------------------------------------------------------------------------------------------------
// Online, multi-tile, for rows of any length. Grid: M * C CTAs; CTA b works on row b / C, column
// segment [rank * seg, min(N, (rank + 1) * seg)) with rank = b % C (seg is a multiple of VEC so
// every segment starts 16-byte aligned when rows do). With C > 1 the kernel is launched as 1-D
// clusters of C CTAs (compile-time __cluster_dims__), so the C CTAs of a row are co-scheduled on
// one GPC and can read each other's shared memory. Tiles of blockDim.x * VEC * UNROLL columns.
constexpr int kOnlineUnroll = 4;

template <typename T, int VEC, int C>
__global__ void __launch_bounds__(512) KL_CLUSTER_DIMS(C)
    softmax_online_kernel(const T* __restrict__ x, T* __restrict__ y, int N, i64 sx, i64 sy, int seg) {
  constexpr int U = kOnlineUnroll;
  typedef typename RawVec<T, VEC>::type R;
  __shared__ float red_m[32];
  __shared__ float red_s[32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = blockDim.x >> 5;
  const i64 row = blockIdx.x / C;
  const int rank = (int)(blockIdx.x % C);
  const int begin = rank * seg;  // host guarantees C * seg < 2^31
  const int len = begin < N ? (N - begin < seg ? N - begin : seg) : 0;  // this CTA's columns
  const T* xs = x + row * sx + begin;  // segment base: 16-byte aligned when VEC > 1
  T* ys = y + row * sy + begin;
  const int step = blockDim.x * VEC;  // columns between a thread's consecutive vectors
  const int tile = step * U;
  const int ntiles = (len + tile - 1) / tile;

  // Pass 1: running (max, sum) per thread over its columns; U independent vector loads in flight.
  float m = KL_NEG_INF, s = 0.f;
  for (int k = 0; k < ntiles; ++k) {
    const int c0 = k * tile + t * VEC;
    float v[U][VEC];
#pragma unroll
    for (int u = 0; u < U; ++u) load_vec_masked<T, VEC>(xs + c0 + u * step, c0 + u * step, len, KL_NEG_INF, v[u]);
    float tm = KL_NEG_INF;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int e = 0; e < VEC; ++e) tm = fmaxf(tm, v[u][e]);
    const float mn = fmaxf(m, tm);
    if (mn != KL_NEG_INF) {  // else every value so far is -inf: the state stays (-inf, 0)
      float ts = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int e = 0; e < VEC; ++e) ts += exp_shifted(v[u][e], mn);
      s = s * exp_shifted(m, mn) + ts;
      m = mn;
    }
  }

  // Merge the block's states: shuffles within each warp, then the warps' states via shared memory.
  warp_online_merge(m, s);
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  // Barrier 1: all warp states are in red_m/red_s before any warp reads them.
  __syncthreads();
  m = lane < nwarps ? red_m[lane] : KL_NEG_INF;
  s = lane < nwarps ? red_s[lane] : 0.f;
  warp_online_merge(m, s);  // every thread now holds this CTA's (m, s)

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  if constexpr (C > 1) {
    namespace cg = cooperative_groups;
    __shared__ float cta_state[2];  // this CTA's (m, s), read by the other CTAs of the cluster
    cg::cluster_group cluster = cg::this_cluster();
    if (t == 0) {
      cta_state[0] = m;
      cta_state[1] = s;
    }
    // Cluster barrier A (release/acquire across the cluster): every CTA's cta_state is written
    // before any CTA reads a remote one through distributed shared memory.
    cluster.sync();
    float gm = KL_NEG_INF, gs = 0.f;
#pragma unroll
    for (int r = 0; r < C; ++r) {  // fixed rank order: every CTA computes bit-identical (gm, gs)
      const float* st = cluster.map_shared_rank(cta_state, r);
      online_merge(gm, gs, st[0], st[1]);
    }
    m = gm;
    s = gs;
    // Cluster barrier B: no CTA may exit (its shared memory goes away) while another CTA of the
    // cluster may still be reading its cta_state.
    cluster.sync();
  }
#endif

  // Pass 2: re-read the segment, newest tiles first (the likeliest still in L2), write the result.
  const float inv = 1.f / s;
  for (int k = ntiles - 1; k >= 0; --k) {
    const int c0 = k * tile + t * VEC;
    R r[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c0 + u * step + VEC <= len) r[u] = *reinterpret_cast<const R*>(xs + c0 + u * step);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = c0 + u * step;
      if (col < len) {
        float v[VEC];
        if (col + VEC <= len) {
          unpack<T, VEC>(r[u], v);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) v[e] = col + e < len ? to_float(xs[col + e]) : 0.f;
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = exp_shifted(v[e], m) * inv;
        store_vec_masked<T, VEC>(ys + col, col, len, v);
      }
    }
  }
}

}  // namespace kl
