// softmax: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)) for every row r of an [M, N]
// tensor; fp32 / fp16 / bf16 in and out, fp32 math. Rows may be strided (row stride sx >= N for x,
// sy >= N for y); columns are contiguous.
//
// Three paths, each a kernel template; the host dispatcher picks by N:
//   softmax_warp_kernel    N <= 1024      one warp per row, the row in the lanes' registers,
//                                         shuffle reductions only (no barrier at all)
//   softmax_block_kernel   N <= 32768     one block per row, the row in registers, warp shuffles
//                                         then a shared-memory exchange between warps
//   softmax_online_kernel  any N          C CTAs per row (a thread-block cluster on sm_90), each
//                                         streams its column segment once computing the running
//                                         max/sum (online rescaling), the C partial states are
//                                         merged through distributed shared memory, then the
//                                         segment is re-read (newest tiles first, while still in
//                                         L2) and written normalised.
//   softmax_split_kernel   N > 32768      persistent cooperative grid, C = ceil(N / 16384) blocks
//                                         per row each holding its chunk in registers, (max, sum)
//                                         partials exchanged through 64-bit slots in global memory
//                                         (path "split"; the route table's choice above 32768)
// VEC = 16 / sizeof(T) (one 128-bit access) when every row of x and y starts 16-byte aligned,
// else VEC = 1 (scalar, still coalesced): the host decides from the pointers and strides.
#include "common.cuh"

#include <cooperative_groups.h>

namespace kl {

// Registers of one thread hold CHUNKS vectors of one row: vector c of thread t covers columns
// (c * NT + t) * VEC ... + VEC - 1, so consecutive threads touch consecutive 16-byte vectors.
template <typename T, int VEC, int CHUNKS>
__device__ __forceinline__ void load_row(const T* __restrict__ row, int n, int t, int nt, float (&v)[CHUNKS][VEC]) {
  const T* p = row + t * VEC;
  const int step = nt * VEC;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) load_vec_masked<T, VEC>(p + c * step, t * VEC + c * step, n, KL_NEG_INF, v[c]);
}

template <typename T, int VEC, int CHUNKS>
__device__ __forceinline__ void store_row(T* __restrict__ row, int n, int t, int nt, const float (&v)[CHUNKS][VEC]) {
  T* p = row + t * VEC;
  const int step = nt * VEC;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) store_vec_masked<T, VEC>(p + c * step, t * VEC + c * step, n, v[c]);
}

template <int VEC, int CHUNKS>
__device__ __forceinline__ float thread_max(const float (&v)[CHUNKS][VEC]) {
  float m = KL_NEG_INF;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) m = fmaxf(m, v[c][e]);
  return m;
}

// v <- exp(v - m) in place; returns this thread's sum. Padding (-inf) becomes exp2(-inf) = 0.
template <int VEC, int CHUNKS>
__device__ __forceinline__ float thread_exp_sum(float (&v)[CHUNKS][VEC], float m) {
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      v[c][e] = exp_shifted(v[c][e], m);
      s += v[c][e];
    }
  return s;
}

template <int VEC, int CHUNKS>
__device__ __forceinline__ void thread_scale(float (&v)[CHUNKS][VEC], float k) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[c][e] *= k;
}

// ------------------------------------------------------------------------------------------------
// Warp per row. blockDim.x = 32 * rows per block; a warp whose row is past M returns as a whole,
// which is safe because nothing below synchronises beyond the warp.
template <typename T, int VEC, int CHUNKS>
__global__ void __launch_bounds__(256) softmax_warp_kernel(const T* __restrict__ x, T* __restrict__ y, i64 M, int N,
                                                           i64 sx, i64 sy) {
  const int lane = threadIdx.x & 31;
  const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= M) return;
  float v[CHUNKS][VEC];
  load_row<T, VEC, CHUNKS>(x + row * sx, N, lane, 32, v);
  const float m = warp_max(thread_max<VEC, CHUNKS>(v));
  const float s = warp_sum(thread_exp_sum<VEC, CHUNKS>(v, m));
  thread_scale<VEC, CHUNKS>(v, 1.f / s);
  store_row<T, VEC, CHUNKS>(y + row * sy, N, lane, 32, v);
}

// ------------------------------------------------------------------------------------------------
// Block per row: blockIdx.x is the row, blockDim.x threads (a multiple of 32, <= 1024) hold it.
// Reduction across the block: each warp reduces with shuffles, lane 0 writes the warp's value to
// shared memory, one barrier, then every warp reads all partials and reduces them again, so every
// thread gets the row's value without a second barrier or a broadcast slot.
template <typename T, int VEC, int CHUNKS>
__global__ void __launch_bounds__(1024) softmax_block_kernel(const T* __restrict__ x, T* __restrict__ y, int N,
                                                             i64 sx, i64 sy) {
  // Separate slots for the max and the sum: a fast warp may write its sum partial while a slow
  // warp still reads the max partials; with one shared array that would need an extra barrier.
  __shared__ float red_max[32];
  __shared__ float red_sum[32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = blockDim.x >> 5;
  const i64 row = blockIdx.x;
  float v[CHUNKS][VEC];
  load_row<T, VEC, CHUNKS>(x + row * sx, N, t, blockDim.x, v);

  float m = warp_max(thread_max<VEC, CHUNKS>(v));
  if (lane == 0) red_max[warp] = m;
  // Barrier 1: every warp's max partial is in red_max before any warp reads the array.
  __syncthreads();
  m = warp_max(lane < nwarps ? red_max[lane] : KL_NEG_INF);

  float s = warp_sum(thread_exp_sum<VEC, CHUNKS>(v, m));
  if (lane == 0) red_sum[warp] = s;
  // Barrier 2: every warp's sum partial is in red_sum before any warp reads the array.
  __syncthreads();
  s = warp_sum(lane < nwarps ? red_sum[lane] : 0.f);

  thread_scale<VEC, CHUNKS>(v, 1.f / s);
  store_row<T, VEC, CHUNKS>(y + row * sy, N, t, blockDim.x, v);
}

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


// ------------------------------------------------------------------------------------------------
// Rows: persistent, several rows per CTA, G threads per row (G = 4 .. 256, a power of two), each
// thread holding CH vectors of VEC elements (CH * VEC = 32 elements). A CTA of blockDim.x threads
// works on blockDim.x / G rows per step and strides over the rows by gridDim.x * (rows per step);
// the loads of the NEXT step's rows are issued (into a second, packed register buffer) before the
// current rows are reduced, so every thread keeps one row's worth of loads in flight while it
// computes and stores the previous one. The trip count is the same for every thread of the CTA
// (the loop runs over steps; a group whose row is past M computes on -inf padding and stores
// nothing), so full-warp shuffles and __syncthreads are legal inside the loop.
// G <= 32: reductions are xor shuffles inside the G-lane group; G > 32: shuffles, then one slot per
// warp in shared memory, read back by the G / 32 warps of the row's group.
template <typename T, int VEC, int CH>
__device__ __forceinline__ void load_raw_row(const T* __restrict__ row, int n, int t, int g, bool active,
                                             typename RawVec<T, VEC>::type (&r)[CH]) {
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int col = (c * g + t) * VEC;
    if (active && col + VEC <= n) {
      r[c] = *reinterpret_cast<const typename RawVec<T, VEC>::type*>(row + col);
    } else {  // partly or wholly past the row end (or no row): pad with -inf, exp(-inf) = 0
      T* e = reinterpret_cast<T*>(&r[c]);
#pragma unroll
      for (int i = 0; i < VEC; ++i) e[i] = (active && col + i < n) ? row[col + i] : from_float<T>(KL_NEG_INF);
    }
  }
}

template <int G>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = (G < 32 ? G : 32) / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = (G < 32 ? G : 32) / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kRowsThreads = 256;  // threads per CTA of the rows kernel (the launch bound)
// CTAs per SM the register budget of an instance must allow (the launch bound's second argument,
// and the default persistent grid per SM). From ptxas (sm_90a): at 3 (<= 80 registers) the 16-byte
// fp16/bf16 instances and the fp32 ones with G <= 32 (N <= 1024) have 0 spills, the others spill
// 24-320 bytes, so they get 2 (<= 128 registers, 0 spills). One rule, mirrored in the host plan and
// in backends/cupy_layer.py.
__host__ __device__ constexpr int rows_min_blocks(int elem_size, int vec, int g) {
  return vec > 1 && (elem_size == 2 || g <= 32) ? 3 : 2;
}

template <typename T, int VEC, int CH, int G>
__global__ void __launch_bounds__(kRowsThreads, rows_min_blocks((int)sizeof(T), VEC, G))
    softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                                       i64 M, int N, i64 sx, i64 sy) {
  typedef typename RawVec<T, VEC>::type R;
  static_assert(G >= 1 && G <= kRowsThreads && (G & (G - 1)) == 0, "G: a power of two up to the block size");
  __shared__ float red_m[kRowsThreads / 32];  // G > 32 only: one slot per warp
  __shared__ float red_s[kRowsThreads / 32];
  const int t = threadIdx.x & (G - 1), grp = threadIdx.x / G, warp = threadIdx.x >> 5;
  const int rows = blockDim.x / G;  // rows per step
  const i64 stride = (i64)gridDim.x * rows;
  R cur[CH], nxt[CH];
  i64 base = (i64)blockIdx.x * rows;
  load_raw_row<T, VEC, CH>(x + (base + grp) * sx, N, t, G, base + grp < M, cur);
  for (; base < M; base += stride) {  // same trip count for every thread of the CTA
    const i64 row = base + grp, nrow = row + stride;
    // Next step's row first: its loads are in flight during this step's reductions and stores.
    load_raw_row<T, VEC, CH>(x + nrow * sx, N, t, G, nrow < M, nxt);
    float v[CH][VEC];
#pragma unroll
    for (int c = 0; c < CH; ++c) unpack<T, VEC>(cur[c], v[c]);
    float m = group_max<G>(thread_max<VEC, CH>(v));
    if constexpr (G > 32) {
      constexpr int W = G / 32;  // warps per row
      if ((threadIdx.x & 31) == 0) red_m[warp] = m;
      // Barrier 1: the max partial of every warp is written before any warp of the group reads.
      __syncthreads();
      const int w0 = grp * W;
      m = red_m[w0];
#pragma unroll
      for (int w = 1; w < W; ++w) m = fmaxf(m, red_m[w0 + w]);
    }
    // A row of only -inf (or a padding group past M) has m = -inf: use 0 as the shift so that
    // exp(-inf - 0) = 0 instead of NaN; the sum is then 0 and 1/0 = inf, 0 * inf = NaN, which is
    // what the reference gives for an all -inf row.
    float s = group_sum<G>(thread_exp_sum<VEC, CH>(v, m == KL_NEG_INF ? 0.f : m));
    if constexpr (G > 32) {
      constexpr int W = G / 32;
      if ((threadIdx.x & 31) == 0) red_s[warp] = s;
      // Barrier 2: the sum partials are written before they are read. (The next step's write of
      // red_m comes after this barrier, and every read of red_m of this step came before it; the
      // next write of red_s comes after the next Barrier 1, after every read of red_s below.)
      __syncthreads();
      const int w0 = grp * W;
      s = red_s[w0];
#pragma unroll
      for (int w = 1; w < W; ++w) s += red_s[w0 + w];
    }
    if (row < M) {
      thread_scale<VEC, CH>(v, 1.f / s);
      store_row<T, VEC, CH>(y + row * sy, N, t, G, v);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) cur[c] = nxt[c];
  }
}

// ------------------------------------------------------------------------------------------------
// Shared-memory-resident cluster softmax: ONE read and ONE write of HBM for long rows.
// Grid: M * C CTAs, launched as 1-D clusters of C CTAs (compile-time __cluster_dims__; C = 16
// needs cudaFuncAttributeNonPortableClusterSizeAllowed, set by the host). CTA of cluster rank k
// owns columns [k * seg, min(N, (k + 1) * seg)) of row blockIdx.x / C and copies them ONCE into
// its dynamic shared memory (the raw T values: seg * sizeof(T) bytes), then
//   pass 1  (max, sum) of its slice from shared memory, online, chunk by chunk as chunks land;
//   merge   warp shuffles, then shared memory across warps, then the C CTA states through
//           distributed shared memory (cluster barrier, mapa via cluster.map_shared_rank);
//   pass 2  exp(x - max) / sum from shared memory, written once to y.
// Loads: rows 16-byte aligned (VEC > 1) on sm_90 use the bulk copy engine (cp.async.bulk, one
// thread issues kSmemChunks copies, each completing on its own mbarrier with its byte count), so
// the whole slice is in flight at once and pass 1 starts on the first chunk; the < 16-byte tail
// of a slice whose byte length is not a multiple of 16 is read with ordinary loads. Unaligned
// rows (VEC = 1), and sm_80, load through registers (coalesced scalar loads, U in flight).
constexpr int kSmemUnroll = 4;
constexpr long long kSmemTargetSlice = 65536;  // default slice: <= 64 KiB -> 3 CTAs per SM on H100/H200
constexpr int kSmemStaticReserve = 1024;       // static shared memory of the kernel, rounded up

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define KL_HAS_BULK 1
constexpr int kSmemChunks = 8;  // bulk copies per slice, each on its own mbarrier
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile(
      "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
// global -> this CTA's shared memory, `bytes` (a multiple of 16, both addresses 16-byte aligned),
// completing on mbarrier `bar` (complete_tx: the barrier's pending byte count drops by `bytes`).
__device__ __forceinline__ void bulk_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
#else
#define KL_HAS_BULK 0
#endif

// Online (max, sum) update with VEC new values: rescale the sum only when the max grows.
template <int VEC>
__device__ __forceinline__ void online_add(float& m, float& s, const float (&f)[VEC]) {
  float tm = f[0];
#pragma unroll
  for (int e = 1; e < VEC; ++e) tm = fmaxf(tm, f[e]);
  if (tm > m) {  // from m = -inf: s = 0 * exp2(-inf) = 0
    s *= exp_shifted(m, tm);
    m = tm;
  }
  if (m != KL_NEG_INF) {  // else every value so far is -inf and adds nothing
#pragma unroll
    for (int e = 0; e < VEC; ++e) s += exp_shifted(f[e], m);
  }
}

template <typename T, int VEC, int C>
__global__ void __launch_bounds__(512) KL_CLUSTER_DIMS(C)
    softmax_smem_kernel(const T* __restrict__ x, T* __restrict__ y, int N, i64 sx, i64 sy, int seg) {
  typedef typename RawVec<T, VEC>::type R;
  extern __shared__ __align__(128) unsigned char kl_smem_slice[];
  T* buf = reinterpret_cast<T*>(kl_smem_slice);  // this CTA's slice, raw T values
  __shared__ float red_m[32];
  __shared__ float red_s[32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = blockDim.x >> 5, nt = blockDim.x;
  const i64 row = blockIdx.x / C;
  const int rank = (int)(blockIdx.x % C);  // == cluster rank: clusters are C consecutive CTAs in x
  const int begin = rank * seg;             // host guarantees C * seg < 2^31
  const int len = begin < N ? (N - begin < seg ? N - begin : seg) : 0;
  const T* xs = x + row * sx + begin;
  T* ys = y + row * sy + begin;
  float m = KL_NEG_INF, s = 0.f;

  bool bulk = false;
#if KL_HAS_BULK
  if constexpr (VEC > 1) {
    bulk = true;
    __shared__ __align__(8) unsigned long long bars[kSmemChunks];
    const int nvec = len / VEC;  // whole 16-byte vectors: the bulk-copied body
    const int per = (nvec + kSmemChunks - 1) / kSmemChunks;
    if (t == 0) {
      for (int k = 0; k < kSmemChunks; ++k) mbar_init(smem_u32(&bars[k]), 1);
      mbar_fence_init();  // the initialised barriers are visible to the copy engine (async proxy)
      for (int k = 0; k < kSmemChunks; ++k) {
        const int v0 = k * per, v1 = min(nvec, v0 + per);
        if (v0 >= v1) break;
        const unsigned bytes = (unsigned)(v1 - v0) * 16u;
        mbar_expect_tx(smem_u32(&bars[k]), bytes);
        bulk_g2s(smem_u32(buf + (i64)v0 * VEC), xs + (i64)v0 * VEC, bytes, smem_u32(&bars[k]));
      }
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
        unpack<T, VEC>(reinterpret_cast<const R*>(buf)[v], f);
        online_add<VEC>(m, s, f);
      }
    }
    if (t < len - nvec * VEC) {  // the < VEC tail elements: ordinary loads, one per thread
      float f[1] = {to_float(xs[nvec * VEC + t])};
      buf[nvec * VEC + t] = xs[nvec * VEC + t];
      online_add<1>(m, s, f);
    }
  }
#endif
  if (!bulk) {  // scalar (or pre-sm_90) load through registers; thread t keeps columns t + j * nt
    for (int c0 = t; c0 < len; c0 += nt * kSmemUnroll) {
      T r[kSmemUnroll];
#pragma unroll
      for (int u = 0; u < kSmemUnroll; ++u)
        if (c0 + u * nt < len) r[u] = xs[c0 + u * nt];
#pragma unroll
      for (int u = 0; u < kSmemUnroll; ++u)
        if (c0 + u * nt < len) {
          buf[c0 + u * nt] = r[u];
          float f[1] = {to_float(r[u])};
          online_add<1>(m, s, f);
        }
    }
  }

  // Merge the CTA's states: shuffles within each warp, then the warps' states via shared memory.
  warp_online_merge(m, s);
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  // Barrier: every warp's state is in red_m/red_s before any warp reads them. It also orders the
  // tail elements written to buf above before pass 2 reads them (from another thread).
  __syncthreads();
  m = lane < nwarps ? red_m[lane] : KL_NEG_INF;
  s = lane < nwarps ? red_s[lane] : 0.f;
  warp_online_merge(m, s);  // every thread now holds this CTA's (m, s)

#if KL_HAS_BULK
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
  if (bulk) {
    const int nvec = len / VEC;
#pragma unroll 4
    for (int v = t; v < nvec; v += nt) {
      float f[VEC];
      unpack<T, VEC>(reinterpret_cast<const R*>(buf)[v], f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) f[e] = exp_shifted(f[e], shift) * inv;
      reinterpret_cast<R*>(ys)[v] = pack<T, VEC>(f);
    }
    if (t < len - nvec * VEC) ys[nvec * VEC + t] = from_float<T>(exp_shifted(to_float(buf[nvec * VEC + t]), shift) * inv);
  } else {
#pragma unroll 4
    for (int c = t; c < len; c += nt) ys[c] = from_float<T>(exp_shifted(to_float(buf[c]), shift) * inv);
  }

#if KL_HAS_BULK
  if constexpr (C > 1) cluster_wait();  // barrier B: see above
#endif
}

// ------------------------------------------------------------------------------------------------
// Split: one read and one write of long rows on a persistent cooperative grid (the CUDA C++
// counterpart of triton_src/softmax.py softmax_split_kernel). Every row is cut into C chunks of
// kSplitChunk columns (NT threads x 16384 / NT values: 512 x 32 or 256 x 64, held in fp32 registers). Unit u = blockIdx.x +
// k * gridDim.x (round k) is chunk u % C of row u / C. A unit loads its chunk, reduces it to
// (m, s) = (max, sum exp(x - m)), publishes the pair as ONE 64-bit word in slot[u] (zeroed on the
// stream before the launch), then warp 0 polls the row's C slots until none is zero, merges them
// into the row's (M, S) and the block writes exp(x - m) * exp(m - M) / S from its registers.
//
// The payload is its own flag: 0 is never a partial (a finite m has s >= 1, its own max giving
// exp(0); m = -inf has the bits of -inf), and a 64-bit relaxed store is seen whole or not at all,
// so no fence and no counter. Polls are ld.relaxed.gpu (served by L2, never a stale L1 line).
// No deadlock: the host launches cooperatively (all gridDim.x blocks resident, or the launch is
// refused) and gridDim.x is a multiple of C, so the C units of a row fall in one round on C
// distinct blocks; by induction every block reaches every round. Bounded spin: after max_spin
// polls a block gives up, writes NaN over its chunk and stops waiting in later rounds (budget 0),
// so a grid that is not resident after all shows as a verification FAIL, not a hang.
// -inf rules: a chunk of only -inf has m = -inf, s = 0 (exponentials against 0, never -inf - -inf)
// and contributes nothing; a row of only -inf has S = 0 and gives NaN, as torch does.
constexpr int kSplitThreads = 512;                          // default NT (256 is the other instance)
constexpr int kSplitChunk = 16384;                           // columns per unit, NT x 16384 / NT values
constexpr int kSplitMinBlocks = 2;                           // launch bound: <= 65536 / (2 NT) registers

__device__ __forceinline__ void slot_store(unsigned long long* p, unsigned long long w) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ unsigned long long slot_load(const unsigned long long* p) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
  return w;
}

template <typename T, int VEC, int NT = kSplitThreads>
__global__ void __launch_bounds__(NT, kSplitMinBlocks)
    softmax_split_kernel(const T* __restrict__ x, T* __restrict__ y, unsigned long long* __restrict__ slots, int N,
                         i64 sx, i64 sy, int C, i64 n_units, int max_spin) {
  constexpr int CH = kSplitChunk / NT / VEC;
  __shared__ float red_max[32];
  __shared__ float red_sum[32];
  __shared__ float row_state[3];  // (M, S, ok) of the current round, written by warp 0
  // blockDim.x == NT (the host launches nothing else): compile-time strides keep the per-thread
  // offsets immediates, so the chunk's registers leave room for the rest (<= 64 / 128 in total).
  constexpr int nt = NT, nwarps = NT / 32;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  int budget = max_spin;  // meaningful in warp 0 only (the poller)
  for (i64 u = blockIdx.x; u < n_units; u += gridDim.x) {
    const i64 row = u / C;
    const int chunk = (int)(u - row * C);
    const int begin = chunk * kSplitChunk;  // a multiple of VEC: 16-byte aligned when rows are
    const int len = N - begin < kSplitChunk ? N - begin : kSplitChunk;
    float v[CH][VEC];
    load_row<T, VEC, CH>(x + row * sx + begin, len, t, nt, v);

    float m = warp_max(thread_max<VEC, CH>(v));
    if (lane == 0) red_max[warp] = m;
    // Barrier 1: every warp's max is in red_max before any warp reads it.
    __syncthreads();
    m = warp_max(lane < nwarps ? red_max[lane] : KL_NEG_INF);
    const float shift = m == KL_NEG_INF ? 0.f : m;  // an all -inf chunk: exp(-inf - 0) = 0, s = 0
    float s = warp_sum(thread_exp_sum<VEC, CH>(v, shift));
    if (lane == 0) red_sum[warp] = s;
    // Barrier 2: every warp's sum is in red_sum before any warp reads it.
    __syncthreads();

    if (warp == 0) {
      s = warp_sum(lane < nwarps ? red_sum[lane] : 0.f);
      unsigned long long* rs = slots + row * C;
      if (lane == 0)
        slot_store(slots + u, ((unsigned long long)__float_as_uint(m) << 32) | __float_as_uint(s));
      bool ok = false;
      for (int polls = 0; polls < budget; ++polls) {
        bool mine = true;
        for (int j = lane; j < C; j += 32) mine = mine && slot_load(rs + j) != 0ull;
        if (__all_sync(0xffffffffu, mine)) {
          ok = true;
          break;
        }
      }
      float gm = KL_NEG_INF, gs = 0.f;
      if (ok) {
        for (int j = lane; j < C; j += 32) {  // fixed order per lane, then a fixed shuffle tree
          const unsigned long long w = slot_load(rs + j);
          online_merge(gm, gs, __uint_as_float((unsigned)(w >> 32)), __uint_as_float((unsigned)w));
        }
        warp_online_merge(gm, gs);
      } else {
        budget = 0;  // timed out: write NaN now and stop waiting in later rounds
      }
      if (lane == 0) {
        row_state[0] = gm;
        row_state[1] = gs;
        row_state[2] = ok ? 1.f : 0.f;
      }
    }
    // Barrier 3: the row's state is in row_state before any warp reads it. (Round k + 1 rewrites
    // red_max / red_sum / row_state only after barriers every thread reaches after these reads.)
    __syncthreads();
    const float M = row_state[0], S = row_state[1];
    const float nan = __int_as_float(0x7fffffff);
    float k;
    if (row_state[2] == 0.f || S == 0.f)
      k = nan;  // timed out, or a row of only -inf (0 / 0 as torch)
    else
      k = m == KL_NEG_INF ? 0.f : exp_shifted(m, M) / S;
    thread_scale<VEC, CH>(v, k);
    store_row<T, VEC, CH>(y + row * sy + begin, len, t, nt, v);
  }
}

}  // namespace kl

#ifndef __CUDACC_RTC__
// ------------------------------------------------------------------------------------------------
// host: plan (validation + choice of path and template instance) and launch
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "launchers.h"

namespace kl {

static const char* type_name(int dtype) {
  return dtype == KL_F32 ? "float" : dtype == KL_F16 ? "__half" : "__nv_bfloat16";
}

static int pow2_at_least(long long v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// ==== the dispatcher of path "auto" (rows cuda:softmax and cupy:softmax) ========================
// ONE table. backends/cupy_layer.py parses it from this file (the lines between the BEGIN and END
// markers), so the C++ and Python dispatchers cannot drift apart. A case goes to the FIRST row
// whose max_n >= N (max_n 0: any N) whose path can take the case:
//   warp  N <= 1024;  block N <= 32768;  rows N <= 8192 (256 threads x 32 elements);
//   smem  the slice fits: ceil(N / C) elements of the row in one CTA's shared memory, C <= 16;
//   online any N.
// To flip from GPU data: edit a row here and rebuild, or, without a rebuild, set the environment
// variable KL_CUDA_SOFTMAX_ROUTE to the same rows as "max_n:path,..." (e.g.
// "1024:rows,4096:rows,32768:block,0:smem"); it is read at every plan, by the C++ and the Python
// dispatcher alike, and an invalid value raises ValueError naming the variable.
struct Route {
  long long max_n;
  const char* path;
};
// KL_SOFTMAX_ROUTES_BEGIN
static const Route kSoftmaxRoutes[] = {
    {1024, "warp"},    // H200 fp32 4096x1024: warp 66.0 %, block 65.7 % of copy; rows: not yet timed
    {32768, "block"},  // block ept 32: 79.1 % (2048) .. 97.3 % (32768); online 72 % at 32768
    {0, "split"},      // H200 run 3, 8192 x 65536 / 131072 / 262144: split 86.5 / 85.5 / 80.5 %, smem
                       // 81.8 / 76.2 / 65.1 %, online 73.5 / 72.3 / 68.3 % of copy
    {0, "online"},     // whatever split declines (a grid that cannot be co-resident)
};
// KL_SOFTMAX_ROUTES_END

static std::vector<std::pair<long long, std::string>> softmax_routes() {
  std::vector<std::pair<long long, std::string>> r;
  const char* env = std::getenv("KL_CUDA_SOFTMAX_ROUTE");
  if (env == nullptr || *env == 0) {
    for (const Route& e : kSoftmaxRoutes) r.emplace_back(e.max_n, e.path);
    return r;
  }
  std::string spec(env), item;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    const std::string num = colon == std::string::npos ? "" : item.substr(0, colon);
    const std::string path = colon == std::string::npos ? "" : item.substr(colon + 1);
    bool digits = !num.empty() && num.size() < 12;
    for (char ch : num) digits = digits && ch >= '0' && ch <= '9';
    if (!digits || (path != "warp" && path != "block" && path != "online" && path != "rows" && path != "smem" &&
                    path != "split"))
      bad_arg("KL_CUDA_SOFTMAX_ROUTE: '" + item + "' is not max_n:path with path warp|block|online|rows|smem|split");
    r.emplace_back(std::stoll(num), path);
  }
  if (r.empty()) bad_arg("KL_CUDA_SOFTMAX_ROUTE: no max_n:path rows in '" + spec + "'");
  return r;
}

static bool known_path(const std::string& p) {
  return p == "auto" || p == "warp" || p == "block" || p == "online" || p == "rows" || p == "smem" ||
         p == "split";
}

// One concrete path for the case; returns "" and fills p, or the reason the path cannot take it.
static std::string plan_path(const std::string& path, SoftmaxPlan& p, long long M, long long N, int es,
                             const std::string& tn, const DeviceInfo& d, int threads, int ept, int cluster,
                             int blocks_per_sm) {
  p.path = path;
  if (path == "warp") {
    if (N > 1024) return "N: the warp-per-row path takes N <= 1024, got " + std::to_string(N);
    p.chunks = pow2_at_least((N + 32LL * p.vec - 1) / (32LL * p.vec));
    p.threads = threads ? threads : 128;
    if (p.threads > 256) bad_arg("threads: the warp path takes at most 256 threads (8 rows) per block");
    p.rows_per_block = p.threads / 32;
    p.grid = (M + p.rows_per_block - 1) / p.rows_per_block;
    p.kernel = "softmax_warp_kernel<" + tn + ", " + std::to_string(p.vec) + ", " + std::to_string(p.chunks) + ">";
  } else if (path == "block") {
    if (N > 32768) return "N: the block-per-row path holds at most 32768 columns in registers, got " + std::to_string(N);
    int e = ept;
    if (!e) e = 32;  // H200: 32 elements per thread was best or within noise for N = 1024 .. 32768
    long long nt = (N + e - 1) / e;
    nt = (nt + 31) / 32 * 32;
    while (nt > 1024 && e < 32) {  // too many threads: more elements per thread
      e *= 2;
      nt = ((N + e - 1) / e + 31) / 32 * 32;
    }
    if (nt > 1024) bad_arg("ept: " + std::to_string(e) + " elements per thread cannot hold N = " + std::to_string(N));
    if (e < p.vec) e = p.vec;
    p.chunks = e / p.vec;
    p.threads = (int)nt;
    if (threads) {
      if ((long long)threads * e < N)
        bad_arg("threads: " + std::to_string(threads) + " x " + std::to_string(e) + " elements per thread < N");
      p.threads = threads;
    }
    p.grid = M;
    p.kernel = "softmax_block_kernel<" + tn + ", " + std::to_string(p.vec) + ", " + std::to_string(p.chunks) + ">";
  } else if (path == "rows") {
    // G threads per row, 32 elements per thread (2 x 32 in registers with the prefetch), 256-thread
    // CTAs holding 256 / G rows per step, a persistent grid of blocks_per_sm CTAs per SM (default:
    // as many as the instance's launch bound guarantees to reside, rows_min_blocks).
    if (N > 32LL * kRowsThreads)
      return "N: the rows path holds a row in at most 256 threads x 32 elements: N <= 8192, got " + std::to_string(N);
    if (ept != 0 && ept != 32) bad_arg("ept: the rows path uses 32 elements per thread, got " + std::to_string(ept));
    if (threads != 0 && threads != kRowsThreads)
      bad_arg("threads: the rows path uses 256 threads per block, got " + std::to_string(threads));
    if (blocks_per_sm < 0 || blocks_per_sm > 32)
      bad_arg("blocks_per_sm: must be 0 (default 2 or 3) .. 32, got " + std::to_string(blocks_per_sm));
    const int per = 32;  // elements per thread
    p.chunks = per / p.vec;
    p.groups = pow2_at_least((N + per - 1) / per);
    if (p.groups < 4) p.groups = 4;
    p.threads = kRowsThreads;
    p.rows_per_block = kRowsThreads / p.groups;
    p.blocks_per_sm = blocks_per_sm ? blocks_per_sm : rows_min_blocks(es, p.vec, p.groups);
    // Balanced persistent grid: the fewest steps the resident CTAs need, then the fewest CTAs that
    // cover the rows in that many steps, so that every CTA runs the same number of steps (a grid of
    // exactly `cap` would leave a last step on a fraction of the CTAs, and of the SMs).
    const long long need = (M + p.rows_per_block - 1) / p.rows_per_block;  // CTA-steps
    const long long cap = (long long)(d.sm_count > 0 ? d.sm_count : 132) * p.blocks_per_sm;
    const long long steps = (need + cap - 1) / cap;
    p.grid = (need + steps - 1) / steps;
    p.kernel = "softmax_rows_kernel<" + tn + ", " + std::to_string(p.vec) + ", " + std::to_string(p.chunks) + ", " +
               std::to_string(p.groups) + ">";
  } else if (path == "smem") {
    // C CTAs per row (a cluster), each holding ceil(N / C) elements in shared memory. Default C:
    // the smallest whose slice is <= 64 KiB (three CTAs per SM, so one CTA's load overlaps
    // another's reduction and store), else the largest cluster (16 on sm_90) if its slice fits.
    if (cluster != 0 && cluster != 1 && cluster != 2 && cluster != 4 && cluster != 8 && cluster != 16)
      bad_arg("cluster: the smem path takes 0 (default), 1, 2, 4, 8 or 16, got " + std::to_string(cluster));
    const int cmax = d.cc_major >= 9 ? 16 : 1;
    if (cluster > cmax) bad_arg("cluster: thread-block clusters need compute capability 9.0 or newer");
    const long long limit = (long long)(d.smem_optin > 0 ? d.smem_optin : 232448) - kSmemStaticReserve;
    auto slice = [&](int c) {
      long long seg = (N + c - 1) / c;
      seg = (seg + p.vec - 1) / p.vec * p.vec;
      return (seg * es + 15) / 16 * 16;
    };
    int c = cluster;
    if (!c) {
      for (int k = 1; k <= cmax && !c; k *= 2)
        if (slice(k) <= kSmemTargetSlice) c = k;
      if (!c && slice(cmax) <= limit) c = cmax;  // longer rows: the smallest slices that fit
      if (!c)
        return "N: a row of " + std::to_string(N * es) + " bytes does not fit " + std::to_string(cmax) +
               " CTAs' shared memory (" + std::to_string(limit) + " bytes each)";
    } else if (slice(c) > limit) {
      return "cluster: " + std::to_string(c) + " CTAs x " + std::to_string(limit) + " bytes of shared memory cannot hold N = " +
             std::to_string(N) + " (" + std::to_string(slice(c)) + " bytes per CTA)";
    }
    p.cluster = c;
    p.threads = threads ? threads : 512;
    if (p.threads > 512) bad_arg("threads: the smem path takes at most 512 threads per block");
    long long seg = (N + c - 1) / c;
    p.seg = (seg + p.vec - 1) / p.vec * p.vec;
    p.smem = slice(c);
    p.grid = M * c;
    p.kernel = "softmax_smem_kernel<" + tn + ", " + std::to_string(p.vec) + ", " + std::to_string(c) + ">";
  } else if (path == "split") {
    // C = ceil(N / 16384) chunks per row, one per block (512 threads x 32 values in registers); a
    // persistent grid of SMs x blocks_per_sm blocks (default: the launch bound's 2), rounded down
    // to a multiple of C. The launcher checks the occupancy API and launches cooperatively.
    if (N <= 2LL * kSplitChunk)
      return "N: the split path takes rows longer than 32768 columns (the block path keeps shorter rows on chip "
             "in one block), got N = " + std::to_string(N);
    if (threads != 0 && threads != 256 && threads != 512)
      bad_arg("threads: the split path takes 256 or 512 threads per block (0: 512), got " + std::to_string(threads));
    const int nt = threads ? threads : kSplitThreads;
    if (ept != 0 && ept != kSplitChunk / nt)
      bad_arg("ept: the split path holds 16384 / threads = " + std::to_string(kSplitChunk / nt) +
              " elements per thread, got " + std::to_string(ept));
    if (cluster > 1) bad_arg("cluster: the split path uses no clusters, got " + std::to_string(cluster));
    if (blocks_per_sm < 0 || blocks_per_sm > 32)
      bad_arg("blocks_per_sm: must be 0 (default 2) .. 32, got " + std::to_string(blocks_per_sm));
    const long long c = (N + kSplitChunk - 1) / kSplitChunk;
    p.blocks_per_sm = blocks_per_sm ? blocks_per_sm : kSplitMinBlocks;
    const long long cap = (long long)(d.sm_count > 0 ? d.sm_count : 132) * p.blocks_per_sm;
    if (c > cap)
      return "N: the split path needs C = " + std::to_string(c) + " co-resident blocks per row (N = " +
             std::to_string(N) + "), the device holds " + std::to_string(cap);
    const long long g = cap / c * c;
    p.parts = (int)c;
    p.chunks = kSplitChunk / nt / p.vec;
    p.threads = nt;
    p.seg = kSplitChunk;
    p.grid = M * c < g ? M * c : g;
    p.kernel = "softmax_split_kernel<" + tn + ", " + std::to_string(p.vec) + ", " + std::to_string(nt) + ">";
  } else {  // online
    int c = cluster;
    if (c == 16) bad_arg("cluster: the online path takes 0 (default), 1, 2, 4 or 8, got 16");
    if (!c) {  // about 64 KiB of row per CTA, at most 8 CTAs per row
      const long long bytes = N * es;
      c = bytes <= 65536 ? 1 : bytes <= 2 * 65536 ? 2 : bytes <= 4 * 65536 ? 4 : 8;
    }
    if (c > 1 && d.cc_major < 9) {
      if (cluster > 1) bad_arg("cluster: thread-block clusters need compute capability 9.0 or newer");
      c = 1;
    }
    p.cluster = c;
    p.threads = threads ? threads : 512;
    if (p.threads > 512) bad_arg("threads: the online path takes at most 512 threads per block");
    long long seg = (N + c - 1) / c;
    seg = (seg + p.vec - 1) / p.vec * p.vec;
    p.seg = seg;
    p.grid = M * c;
    p.kernel = "softmax_online_kernel<" + tn + ", " + std::to_string(p.vec) + ", " + std::to_string(c) + ">";
  }
  return "";
}

SoftmaxPlan softmax_plan(const std::string& path, std::uintptr_t x, std::uintptr_t out, long long M, long long N,
                         long long sx, long long sy, int dtype, int device, int threads, int ept, int cluster,
                         int blocks_per_sm) {
  const int es = elem_size(dtype);
  if (!known_path(path)) bad_arg("path: '" + path + "' is not one of auto, warp, block, online, rows, smem, split");
  if (M < 1) bad_arg("M: must be >= 1, got " + std::to_string(M));
  if (N < 1 || N > 2147483647LL - 64) bad_arg("N: must be in [1, 2^31 - 64), got " + std::to_string(N));
  if (sx < N) bad_arg("sx: row stride of x must be >= N (" + std::to_string(N) + "), got " + std::to_string(sx));
  if (sy < N) bad_arg("sy: row stride of out must be >= N (" + std::to_string(N) + "), got " + std::to_string(sy));
  if (x == 0) bad_arg("x: null device pointer");
  if (out == 0) bad_arg("out: null device pointer");
  if (x % es) bad_arg("x: address not aligned to its element size");
  if (out % es) bad_arg("out: address not aligned to its element size");
  if (threads < 0 || threads > 1024 || threads % 32)
    bad_arg("threads: must be 0 (default) or a multiple of 32 up to 1024, got " + std::to_string(threads));
  if (ept != 0 && ept != 8 && ept != 16 && ept != 32)
    bad_arg("ept: elements per thread must be 0 (default), 8, 16 or 32, got " + std::to_string(ept));
  if (cluster != 0 && cluster != 1 && cluster != 2 && cluster != 4 && cluster != 8 && cluster != 16)
    bad_arg("cluster: must be 0 (default), 1, 2, 4, 8 or 16 (16: smem path), got " + std::to_string(cluster));
  const auto routes = path == "auto" ? softmax_routes() : std::vector<std::pair<long long, std::string>>();
  const DeviceInfo d = device_info(device);

  SoftmaxPlan p;
  const bool aligned = x % 16 == 0 && out % 16 == 0 && (M == 1 || ((sx * es) % 16 == 0 && (sy * es) % 16 == 0));
  p.vec = aligned ? 16 / es : 1;
  const std::string tn = type_name(dtype);
  if (path != "auto") {
    const std::string why = plan_path(path, p, M, N, es, tn, d, threads, ept, cluster, blocks_per_sm);
    if (!why.empty()) bad_arg(why);
  } else {
    std::string why = "no row of the route table takes N = " + std::to_string(N);
    bool ok = false;
    for (const auto& r : routes) {
      if (r.first != 0 && N > r.first) continue;
      SoftmaxPlan q = p;
      const std::string w = plan_path(r.second, q, M, N, es, tn, d, threads, ept, cluster, blocks_per_sm);
      if (w.empty()) {
        p = q;
        ok = true;
        break;
      }
      why = w;
    }
    if (!ok) bad_arg(why);
  }
  if (p.grid > 2147483647LL) bad_arg("M: too many rows for one launch (grid " + std::to_string(p.grid) + ")");
  return p;
}

// -- instance tables: the template instance for (dtype, vec, chunks | cluster) ------------------
template <typename T, int VEC, int CH>
static const void* warp_fn_from(int chunks) {
  if constexpr (CH * VEC * 32 > 1024) {
    return nullptr;
  } else {
    if (chunks == CH) return (const void*)softmax_warp_kernel<T, VEC, CH>;
    return warp_fn_from<T, VEC, CH * 2>(chunks);
  }
}

template <typename T, int VEC, int CH>
static const void* block_fn_from(int chunks) {
  if constexpr (CH * VEC > 32) {
    return nullptr;
  } else {
    if constexpr (CH * VEC >= 8) {
      if (chunks == CH) return (const void*)softmax_block_kernel<T, VEC, CH>;
    }
    return block_fn_from<T, VEC, CH * 2>(chunks);
  }
}

template <typename T, int VEC>
static const void* online_fn(int c) {
  switch (c) {
    case 1: return (const void*)softmax_online_kernel<T, VEC, 1>;
    case 2: return (const void*)softmax_online_kernel<T, VEC, 2>;
    case 4: return (const void*)softmax_online_kernel<T, VEC, 4>;
    case 8: return (const void*)softmax_online_kernel<T, VEC, 8>;
  }
  return nullptr;
}

template <typename T, int VEC>
static const void* smem_fn(int c) {
  switch (c) {
    case 1: return (const void*)softmax_smem_kernel<T, VEC, 1>;
    case 2: return (const void*)softmax_smem_kernel<T, VEC, 2>;
    case 4: return (const void*)softmax_smem_kernel<T, VEC, 4>;
    case 8: return (const void*)softmax_smem_kernel<T, VEC, 8>;
    case 16: return (const void*)softmax_smem_kernel<T, VEC, 16>;
  }
  return nullptr;
}

template <typename T, int VEC, int G>
static const void* rows_fn_from(int g) {
  if constexpr (G > kRowsThreads) {
    return nullptr;
  } else {
    if (g == G) return (const void*)softmax_rows_kernel<T, VEC, 32 / VEC, G>;
    return rows_fn_from<T, VEC, G * 2>(g);
  }
}

template <typename T>
static const void* pick(const SoftmaxPlan& p) {
  constexpr int V = 16 / sizeof(T);
  if (p.path == "split" && p.threads == 256)
    return p.vec == 1 ? (const void*)softmax_split_kernel<T, 1, 256> : (const void*)softmax_split_kernel<T, V, 256>;
  if (p.path == "split")
    return p.vec == 1 ? (const void*)softmax_split_kernel<T, 1> : (const void*)softmax_split_kernel<T, V>;
  if (p.path == "warp") return p.vec == 1 ? warp_fn_from<T, 1, 1>(p.chunks) : warp_fn_from<T, V, 1>(p.chunks);
  if (p.path == "block") return p.vec == 1 ? block_fn_from<T, 1, 1>(p.chunks) : block_fn_from<T, V, 1>(p.chunks);
  if (p.path == "rows") return p.vec == 1 ? rows_fn_from<T, 1, 4>(p.groups) : rows_fn_from<T, V, 4>(p.groups);
  if (p.path == "smem") return p.vec == 1 ? smem_fn<T, 1>(p.cluster) : smem_fn<T, V>(p.cluster);
  return p.vec == 1 ? online_fn<T, 1>(p.cluster) : online_fn<T, V>(p.cluster);
}

// The smem path's function attributes (dynamic shared memory above 48 KiB needs an opt-in, the
// carveout all shared; 16-CTA clusters need the non-portable flag), set once per (instance,
// device, size).
static void smem_attributes(const void* fn, int device, long long bytes, int cluster) {
  static std::mutex mu;
  static std::vector<std::pair<std::pair<const void*, int>, long long>> done;
  std::lock_guard<std::mutex> lock(mu);
  for (auto& e : done)
    if (e.first.first == fn && e.first.second == device && e.second >= bytes) return;
  KL_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  // All of the unified L1/shared array as shared memory, so that 3 CTAs of 64 KiB reside per SM
  // (the driver's default choice may size the carveout for fewer).
  KL_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  if (cluster > 8) KL_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  done.push_back({{fn, device}, bytes});
}

// The split path's slots: M * C 64-bit words per launch, one buffer per device, grown on demand
// and kept (zeroed on the stream before every launch). Concurrent split launches on two streams
// of one device would share it: the harness runs one stream.
static unsigned long long* split_slots(int device, long long n) {
  static std::mutex mu;
  static unsigned long long* buf[64] = {};
  static long long cap[64] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (cap[device] < n) {
    if (buf[device]) KL_CUDA_CHECK(cudaFree(buf[device]));  // synchronising: no launch still uses it
    buf[device] = nullptr;
    cap[device] = 0;
    KL_CUDA_CHECK(cudaMalloc(&buf[device], (size_t)n * sizeof(unsigned long long)));
    cap[device] = n;
  }
  return buf[device];
}

void softmax(const std::string& path, std::uintptr_t x, std::uintptr_t out, long long M, long long N, long long sx,
             long long sy, int dtype, std::uintptr_t stream, int device, int threads, int ept, int cluster,
             int blocks_per_sm, int max_spin) {
  const SoftmaxPlan p = softmax_plan(path, x, out, M, N, sx, sy, dtype, device, threads, ept, cluster, blocks_per_sm);
  const void* fn = dtype == KL_F32 ? pick<float>(p) : dtype == KL_F16 ? pick<__half>(p) : pick<__nv_bfloat16>(p);
  if (!fn) throw std::logic_error("softmax: no compiled instance for " + p.kernel);
  const void* xp = (const void*)x;
  void* yp = (void*)out;
  i64 m = M, a = sx, b = sy;
  int n = (int)N, seg = (int)p.seg;
  const cudaStream_t s = (cudaStream_t)stream;
  if (p.path == "warp" || p.path == "rows") {
    void* args[] = {&xp, &yp, &m, &n, &a, &b};
    KL_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)p.grid), dim3(p.threads), args, 0, s));
  } else if (p.path == "block") {
    void* args[] = {&xp, &yp, &n, &a, &b};
    KL_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)p.grid), dim3(p.threads), args, 0, s));
  } else if (p.path == "split") {
    // Every block must be resident at once (the blocks of a row wait for each other): check the
    // compiled instance's occupancy and refuse a grid that cannot be co-resident, then launch
    // cooperatively (the driver refuses, rather than runs partly resident, a grid too large).
    int coop = 0, occ = 0;
    KL_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
    if (!coop) bad_arg("path: the split path needs cooperative launch, which device " + std::to_string(device) +
                       " does not support");
    KL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, p.threads, 0));
    const DeviceInfo d = device_info(device);
    const long long resident = (long long)occ * d.sm_count;
    if (p.grid > resident)
      bad_arg("blocks_per_sm: the split grid of " + std::to_string(p.grid) + " blocks (" +
              std::to_string(p.blocks_per_sm) + " per SM) cannot be co-resident: " + p.kernel + " fits " +
              std::to_string(occ) + " blocks of " + std::to_string(p.threads) + " threads per SM x " +
              std::to_string(d.sm_count) + " SMs = " + std::to_string(resident) + "; refused, not launched");
    if (max_spin < -1) bad_arg("max_spin: must be -1 (default 2^20 polls) or >= 0, got " + std::to_string(max_spin));
    const long long units = M * p.parts;
    unsigned long long* slots = split_slots(device, units);
    KL_CUDA_CHECK(cudaMemsetAsync(slots, 0, (size_t)units * sizeof(unsigned long long), s));
    int c = p.parts, spin = max_spin < 0 ? (1 << 20) : max_spin;
    i64 nu = units;
    void* args[] = {&xp, &yp, &slots, &n, &a, &b, &c, &nu, &spin};
    KL_CUDA_CHECK(cudaLaunchCooperativeKernel(fn, dim3((unsigned)p.grid), dim3(p.threads), args, 0, s));
  } else if (p.path == "smem") {
    smem_attributes(fn, device, p.smem, p.cluster);
    void* args[] = {&xp, &yp, &n, &a, &b, &seg};
    KL_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)p.grid), dim3(p.threads), args, (size_t)p.smem, s));
  } else {
    void* args[] = {&xp, &yp, &n, &a, &b, &seg};
    KL_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)p.grid), dim3(p.threads), args, 0, s));
  }
  KL_LAUNCH_CHECK(("softmax launch of " + p.kernel).c_str());
}

}  // namespace kl
#endif  // __CUDACC_RTC__
