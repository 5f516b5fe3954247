// softmax, smem: ONE read and ONE write of HBM for long rows, the row staged raw in shared memory
// (the `smem` algorithm word of every layer): a CTA a row (C = 1) while the row fits one CTA's
// shared memory, else a thread-block cluster of C CTAs a row whose slices are staged each in its
// CTA's shared memory, the C (max, sum) states merged through distributed shared memory.
//
// Grid: M * C CTAs, launched as 1-D clusters of C CTAs (compile-time __cluster_dims__; C = 1 runs
// no cluster barrier and no distributed shared memory; C = 16 needs the non-portable cluster size allowed, which the host sets once). The CTA of
// cluster rank k owns columns [k * seg, min(N, (k + 1) * seg)) of row blockIdx.x / C and copies
// them ONCE into its dynamic shared memory (the raw T values), then
//   pass 1  (max, sum) of its slice, online, chunk by chunk as the chunks land;
//   merge   warp shuffles, then shared memory across warps, then (C > 1) the C CTA states through
//           distributed shared memory (cluster barrier, cluster.map_shared_rank);
//   pass 2  exp(x - max) / sum from shared memory, written once to y.
//
// Any row alignment: a slice whose start is not 16-byte aligned is copied as a scalar head (fewer
// than VEC elements, up to the first 16-byte boundary), a body of whole 16-byte vectors by the bulk
// copy engine (cp.async.bulk, sm_90: one thread issues kSmemChunks copies, each completing on its own
// mbarrier, so pass 1 starts on the first chunk), and a scalar tail. In shared memory the slice
// starts `mis` elements into the buffer, so the body lands 16-byte aligned there too. Pass 2 stores
// 16-byte vectors when y's slice has the same alignment as x's (contiguous rows of equal stride),
// else element by element. sm_80 (no bulk copies, no clusters) loads through registers.
#include "common.cuh"
#include "ptx.cuh"

#include <cooperative_groups.h>

namespace kl {

constexpr int kSmemUnroll = 4;   // register path: loads in flight per thread
constexpr int kSmemChunks = 8;   // bulk copies per slice, each on its own mbarrier

// Vector v (16 bytes) of the 16-byte aligned shared-memory array p, read with ONE 16-byte access
// into registers (LDS.128). Binding unpack's reference straight to shared memory instead made the
// compiler read element by element (8 x LDS.U16 for bf16, lanes 16 bytes apart: 4-way bank
// conflicts, 32 shared-memory wavefronts per warp per vector instead of 4; see
// docs/performance.md, "CUDA C++ / softmax").
template <typename R, typename T>
__device__ __forceinline__ R lds_vec(const T* p, int v) {
  const R r = reinterpret_cast<const R*>(p)[v];
  return r;
}

template <typename T, int C>
__global__ void __launch_bounds__(512) KL_CLUSTER_DIMS(C)
    softmax_smem_kernel(const T* __restrict__ x, T* __restrict__ y, int N, i64 sx, i64 sy, int seg) {
  constexpr int VEC = 16 / sizeof(T);
  typedef typename RawVec<T, VEC>::type R;
  extern __shared__ __align__(128) unsigned char kl_smem_slice[];
  __shared__ float red_m[32];
  __shared__ float red_s[32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = blockDim.x >> 5, nt = blockDim.x;
  const i64 row = blockIdx.x / C;
  const int rank = (int)(blockIdx.x % C);  // == cluster rank: clusters are C consecutive CTAs in x
  const int begin = rank * seg;             // host guarantees C * seg < 2^31
  const int len = begin < N ? (N - begin < seg ? N - begin : seg) : 0;
  const T* xs = x + row * sx + begin;
  T* ys = y + row * sy + begin;
  // Alignment of this slice: `mis` elements past a 16-byte boundary; `head` elements up to the next.
  const int mis = (int)((reinterpret_cast<unsigned long long>(xs) & 15) / sizeof(T));
  const int head = mis ? min(VEC - mis, len) : 0;
  const int nvec = (len - head) / VEC;  // whole 16-byte vectors of the body
  const int tail = head + nvec * VEC;    // first element of the scalar tail
  T* sl = reinterpret_cast<T*>(kl_smem_slice) + mis;  // sl[j] holds xs[j]; sl + head is 16-byte aligned
  float m = KL_NEG_INF, s = 0.f;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(8) unsigned long long bars[kSmemChunks];
  const int per = (nvec + kSmemChunks - 1) / kSmemChunks;  // vectors per bulk copy
  if (t == 0) {
    for (int k = 0; k < kSmemChunks; ++k) mbar_init(smem_u32(&bars[k]), 1);
    mbar_fence_init();  // the initialised barriers are visible to the copy engine (async proxy)
    for (int k = 0; k < kSmemChunks; ++k) {
      const int v0 = k * per, v1 = min(nvec, v0 + per);
      if (v0 >= v1) break;
      const unsigned bytes = (unsigned)(v1 - v0) * 16u;
      mbar_arrive_expect_tx(smem_u32(&bars[k]), bytes);
      bulk_g2s(smem_u32(sl + head + v0 * VEC), xs + head + v0 * VEC, bytes, smem_u32(&bars[k]));
    }
  }
  // The < VEC head and tail elements: ordinary loads, one per thread, while the copies fly.
  if (t < head) {
    sl[t] = xs[t];
    float f[1] = {to_float(sl[t])};
    online_add<1>(m, s, f);
  }
  if (t < len - tail) {
    sl[tail + t] = xs[tail + t];
    float f[1] = {to_float(sl[tail + t])};
    online_add<1>(m, s, f);
  }
  // Barrier: the mbarriers are initialised before any thread polls them.
  __syncthreads();
  for (int k = 0; k < kSmemChunks; ++k) {
    const int v0 = k * per, v1 = min(nvec, v0 + per);
    if (v0 >= v1) break;
    while (!mbar_try_wait(smem_u32(&bars[k]), 0)) {
    }  // chunk k has landed (phase 0 completed: its bytes arrived)
#pragma unroll 4
    for (int v = v0 + t; v < v1; v += nt) {
      float f[VEC];
      unpack<T, VEC>(lds_vec<R>(sl + head, v), f);
      online_add<VEC>(m, s, f);
    }
  }
#else
  // sm_80: through registers, coalesced scalar loads, kSmemUnroll in flight per thread.
  for (int c0 = t; c0 < len; c0 += nt * kSmemUnroll) {
    T r[kSmemUnroll];
#pragma unroll
    for (int u = 0; u < kSmemUnroll; ++u)
      if (c0 + u * nt < len) r[u] = xs[c0 + u * nt];
#pragma unroll
    for (int u = 0; u < kSmemUnroll; ++u)
      if (c0 + u * nt < len) {
        sl[c0 + u * nt] = r[u];
        float f[1] = {to_float(r[u])};
        online_add<1>(m, s, f);
      }
  }
#endif

  // Merge the CTA's states: shuffles within each warp, then the warps' states via shared memory.
  warp_online_merge(m, s);
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  // Barrier: every warp's state is in red_m/red_s before any warp reads them. It also orders the
  // scalar elements written to sl above before pass 2 reads them (from another thread).
  __syncthreads();
  m = lane < nwarps ? red_m[lane] : KL_NEG_INF;
  s = lane < nwarps ? red_s[lane] : 0.f;
  warp_online_merge(m, s);  // every thread now holds this CTA's (m, s)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (C > 1) {
    namespace cg = cooperative_groups;
    __shared__ float cta_state[2];  // this CTA's (m, s), read by the other CTAs of the cluster
    cg::cluster_group cluster = cg::this_cluster();
    if (t == 0) {
      cta_state[0] = m;
      cta_state[1] = s;
    }
    // Cluster barrier A (arrive.release / wait.acquire): every CTA's cta_state is written before
    // any CTA reads a remote one through distributed shared memory.
    cluster_arrive();
    cluster_wait();
    float gm = KL_NEG_INF, gs = 0.f;
#pragma unroll
    for (int r = 0; r < C; ++r) {  // fixed rank order: every CTA computes bit-identical (gm, gs)
      const float* st = cluster.map_shared_rank(cta_state, r);
      online_merge(gm, gs, st[0], st[1]);
    }
    m = gm;
    s = gs;
    // Cluster barrier B, split: arrive now (this CTA has finished reading remote states), wait at
    // the end (no CTA exits, freeing the cta_state others read, before all have read). Pass 2 runs
    // in between, so the barrier's latency is hidden.
    cluster_arrive();
  }
#endif

  // Pass 2: normalise from shared memory, write once. A row of only -inf gives 0 * inf = NaN, as
  // the reference does.
  const float inv = 1.f / s;
  const float shift = m == KL_NEG_INF ? 0.f : m;
  const int ymis = (int)((reinterpret_cast<unsigned long long>(ys) & 15) / sizeof(T));
  if (ymis == mis) {  // y's slice has x's alignment: the same head, 16-byte body and tail
#pragma unroll 4
    for (int v = t; v < nvec; v += nt) {
      float f[VEC];
      unpack<T, VEC>(lds_vec<R>(sl + head, v), f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) f[e] = exp_shifted(f[e], shift) * inv;
      reinterpret_cast<R*>(ys + head)[v] = pack<T, VEC>(f);
    }
    if (t < head) ys[t] = from_float<T>(exp_shifted(to_float(sl[t]), shift) * inv);
    if (t < len - tail) ys[tail + t] = from_float<T>(exp_shifted(to_float(sl[tail + t]), shift) * inv);
  } else {
#pragma unroll 4
    for (int c = t; c < len; c += nt) ys[c] = from_float<T>(exp_shifted(to_float(sl[c]), shift) * inv);
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (C > 1) cluster_wait();  // barrier B: see above
#endif
}

}  // namespace kl
