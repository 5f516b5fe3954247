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

}  // namespace kl

#ifndef __CUDACC_RTC__
// ------------------------------------------------------------------------------------------------
// host: plan (validation + choice of path and template instance) and launch
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

SoftmaxPlan softmax_plan(const std::string& path, std::uintptr_t x, std::uintptr_t out, long long M, long long N,
                         long long sx, long long sy, int dtype, int device, int threads, int ept, int cluster) {
  const int es = elem_size(dtype);
  if (path != "auto" && path != "warp" && path != "block" && path != "online")
    bad_arg("path: '" + path + "' is not one of auto, warp, block, online");
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
  if (cluster != 0 && cluster != 1 && cluster != 2 && cluster != 4 && cluster != 8)
    bad_arg("cluster: must be 0 (default), 1, 2, 4 or 8, got " + std::to_string(cluster));
  const DeviceInfo d = device_info(device);

  SoftmaxPlan p;
  const bool aligned = x % 16 == 0 && out % 16 == 0 && (M == 1 || ((sx * es) % 16 == 0 && (sy * es) % 16 == 0));
  p.vec = aligned ? 16 / es : 1;
  p.path = path;
  if (path == "auto") p.path = N <= 1024 ? "warp" : N <= 32768 ? "block" : "online";
  const std::string tn = type_name(dtype);

  if (p.path == "warp") {
    if (N > 1024) bad_arg("N: the warp-per-row path takes N <= 1024, got " + std::to_string(N));
    p.chunks = pow2_at_least((N + 32LL * p.vec - 1) / (32LL * p.vec));
    p.threads = threads ? threads : 128;
    if (p.threads > 256) bad_arg("threads: the warp path takes at most 256 threads (8 rows) per block");
    p.rows_per_block = p.threads / 32;
    p.grid = (M + p.rows_per_block - 1) / p.rows_per_block;
    p.kernel = "softmax_warp_kernel<" + tn + ", " + std::to_string(p.vec) + ", " + std::to_string(p.chunks) + ">";
  } else if (p.path == "block") {
    if (N > 32768) bad_arg("N: the block-per-row path holds at most 32768 columns in registers, got " + std::to_string(N));
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
  } else {  // online
    int c = cluster;
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

template <typename T>
static const void* pick(const SoftmaxPlan& p) {
  constexpr int V = 16 / sizeof(T);
  if (p.path == "warp") return p.vec == 1 ? warp_fn_from<T, 1, 1>(p.chunks) : warp_fn_from<T, V, 1>(p.chunks);
  if (p.path == "block") return p.vec == 1 ? block_fn_from<T, 1, 1>(p.chunks) : block_fn_from<T, V, 1>(p.chunks);
  return p.vec == 1 ? online_fn<T, 1>(p.cluster) : online_fn<T, V>(p.cluster);
}

void softmax(const std::string& path, std::uintptr_t x, std::uintptr_t out, long long M, long long N, long long sx,
             long long sy, int dtype, std::uintptr_t stream, int device, int threads, int ept, int cluster) {
  const SoftmaxPlan p = softmax_plan(path, x, out, M, N, sx, sy, dtype, device, threads, ept, cluster);
  const void* fn = dtype == KL_F32 ? pick<float>(p) : dtype == KL_F16 ? pick<__half>(p) : pick<__nv_bfloat16>(p);
  if (!fn) throw std::logic_error("softmax: no compiled instance for " + p.kernel);
  const void* xp = (const void*)x;
  void* yp = (void*)out;
  i64 m = M, a = sx, b = sy;
  int n = (int)N, seg = (int)p.seg;
  const cudaStream_t s = (cudaStream_t)stream;
  if (p.path == "warp") {
    void* args[] = {&xp, &yp, &m, &n, &a, &b};
    KL_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)p.grid), dim3(p.threads), args, 0, s));
  } else if (p.path == "block") {
    void* args[] = {&xp, &yp, &n, &a, &b};
    KL_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)p.grid), dim3(p.threads), args, 0, s));
  } else {
    void* args[] = {&xp, &yp, &n, &a, &b, &seg};
    KL_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)p.grid), dim3(p.threads), args, 0, s));
  }
  KL_LAUNCH_CHECK(("softmax launch of " + p.kernel).c_str());
}

}  // namespace kl
#endif  // __CUDACC_RTC__
