// vector_add: out = x + y over n elements, fp32 / fp16 / bf16 (fp32 arithmetic, one rounding).
//
// Grid-stride loop over 16-byte vectors: each thread issues UNROLL independent 128-bit loads of x
// and of y before it adds and stores, so several loads are in flight per thread. Any pointer
// alignment works: a scalar head of fewer than VEC elements brings all three pointers to a 16-byte
// boundary when they share the same offset modulo 16; a scalar tail covers n % VEC. When the three
// pointers disagree modulo 16 (e.g. x and y misaligned views, out freshly allocated) the host
// launches the VEC = 1 instantiation: scalar, still coalesced.
#include "common.cuh"

namespace kl {

template <typename T, int VEC, int UNROLL>
__global__ void __launch_bounds__(256) vector_add_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                                         T* __restrict__ out, i64 n, i64 head) {
  typedef typename RawVec<T, VEC>::type R;
  const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 nthreads = (i64)gridDim.x * blockDim.x;
  // scalar head (head < VEC <= 8 elements, so the first threads of the grid take one each)
  if (tid < head) out[tid] = from_float<T>(to_float(x[tid]) + to_float(y[tid]));
  const R* xb = reinterpret_cast<const R*>(x + head);
  const R* yb = reinterpret_cast<const R*>(y + head);
  R* ob = reinterpret_cast<R*>(out + head);
  const i64 nvec = (n - head) / VEC;
  // vector body: thread t of block b covers vectors (b*blockDim*UNROLL + t + u*blockDim), u < UNROLL,
  // so each of the UNROLL warp-wide accesses is contiguous (coalesced) across the warp; all 2*UNROLL
  // loads are issued before the first add
  for (i64 base = (i64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < nvec;
       base += nthreads * UNROLL) {
    R ra[UNROLL], rb[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const i64 v = base + (i64)u * blockDim.x;
      if (v < nvec) {
        ra[u] = xb[v];
        rb[u] = yb[v];
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const i64 v = base + (i64)u * blockDim.x;
      if (v < nvec) {
        float a[VEC], b[VEC];
        unpack<T, VEC>(ra[u], a);
        unpack<T, VEC>(rb[u], b);
#pragma unroll
        for (int e = 0; e < VEC; ++e) a[e] += b[e];
        ob[v] = pack<T, VEC>(a);
      }
    }
  }
  // scalar tail: the last (n - head) % VEC elements
  const i64 t = head + nvec * VEC + tid;
  if (t < n) out[t] = from_float<T>(to_float(x[t]) + to_float(y[t]));
}

}  // namespace kl

#ifndef __CUDACC_RTC__
// ------------------------------------------------------------------------------------------------
// host launcher
#include <mutex>

#include "launchers.h"

namespace kl {

constexpr int kVecAddUnroll = 4;

DeviceInfo device_info(int device) {
  static std::mutex mu;
  static DeviceInfo cache[64];
  if (device < 0 || device >= 64) bad_arg("device: index " + std::to_string(device) + " out of range");
  int count = 0;
  KL_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device >= count)
    bad_arg("device: index " + std::to_string(device) + " but only " + std::to_string(count) + " CUDA device(s)");
  int cur = -1;
  KL_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) KL_CUDA_CHECK(cudaSetDevice(device));
  std::lock_guard<std::mutex> lock(mu);
  DeviceInfo& d = cache[device];
  if (d.sm_count == 0) {
    KL_CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    KL_CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    KL_CUDA_CHECK(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    KL_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device));
  }
  return d;
}

static void check_ptr(std::uintptr_t p, const char* name, int esize) {
  if (p == 0) bad_arg(std::string(name) + ": null device pointer");
  if (p % esize) bad_arg(std::string(name) + ": address not aligned to its element size (" + std::to_string(esize) + " bytes)");
}

template <typename T>
static const void* vector_add_fn(int vec);

// Blocks of `block` threads of this instance resident per SM (occupancy), cached per instance.
static int resident_blocks(int dtype, int vec, int block) {
  static std::mutex mu;
  static int cache[3][2][9] = {};
  const void* fn = dtype == KL_F32 ? vector_add_fn<float>(vec)
                 : dtype == KL_F16 ? vector_add_fn<__half>(vec)
                                   : vector_add_fn<__nv_bfloat16>(vec);
  std::lock_guard<std::mutex> lock(mu);
  int& nb = cache[dtype][vec == 1 ? 0 : 1][block / 32];
  if (nb == 0) {
    KL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, fn, block, 0));
    if (nb < 1) nb = 1;
  }
  return nb;
}

VectorAddPlan vector_add_plan(std::uintptr_t x, std::uintptr_t y, std::uintptr_t out, long long n, int dtype,
                              int device, long long grid, int block) {
  const int es = elem_size(dtype);
  if (n < 0) bad_arg("n: must be >= 0, got " + std::to_string(n));
  if (grid < 0) bad_arg("grid: must be >= 0 (0 = default), got " + std::to_string(grid));
  if (block != 0 && (block < 32 || block > 256 || block % 32))
    bad_arg("block: must be 0 (default) or a multiple of 32 in [32, 256], got " + std::to_string(block));
  VectorAddPlan p;
  p.unroll = kVecAddUnroll;
  p.block = block ? block : 256;
  if (n == 0) { p.grid = 0; return p; }
  check_ptr(x, "x", es);
  check_ptr(y, "y", es);
  check_ptr(out, "out", es);
  const DeviceInfo d = device_info(device);
  const bool same = (x % 16 == out % 16) && (y % 16 == out % 16);
  p.vec = same ? 16 / es : 1;
  p.head = same ? (long long)(((16 - out % 16) % 16) / es) : 0;
  if (p.head > n) p.head = n;
  const long long nvec = (n - p.head) / p.vec;
  const long long per_block = (long long)p.block * p.unroll;
  long long full = (nvec + per_block - 1) / per_block;
  if (full < 1) full = 1;
  // default: one pass over the data (each thread one iteration) up to 1024 waves of resident blocks,
  // grid-stride beyond. H200, N = 2^28 fp32: one full grid 102 % of the copy ceiling, a one-wave
  // grid-stride grid (396 blocks) 96 %: fewer loop iterations and address updates per element.
  const long long cap = (long long)d.sm_count * resident_blocks(dtype, p.vec, p.block) * 1024;
  p.grid = grid ? grid : (full < cap ? full : cap);
  if (p.grid > 2147483647LL) bad_arg("grid: too large");
  // the head and the tail are done by the first threads of the grid: make sure there are enough
  const long long need = (long long)p.vec;  // head < vec and tail < vec
  if (p.grid * p.block < need) p.grid = (need + p.block - 1) / p.block;
  return p;
}

template <typename T>
static const void* vector_add_fn(int vec) {
  constexpr int V = 16 / sizeof(T);
  return vec == 1 ? (const void*)vector_add_kernel<T, 1, kVecAddUnroll> : (const void*)vector_add_kernel<T, V, kVecAddUnroll>;
}

void vector_add(std::uintptr_t x, std::uintptr_t y, std::uintptr_t out, long long n, int dtype,
                std::uintptr_t stream, int device, long long grid, int block) {
  const VectorAddPlan p = vector_add_plan(x, y, out, n, dtype, device, grid, block);
  if (n == 0) return;
  const void* fn = dtype == KL_F32 ? vector_add_fn<float>(p.vec)
                 : dtype == KL_F16 ? vector_add_fn<__half>(p.vec)
                                   : vector_add_fn<__nv_bfloat16>(p.vec);
  const void* xp = (const void*)x;
  const void* yp = (const void*)y;
  void* op = (void*)out;
  i64 nn = n, head = p.head;
  void* args[] = {&xp, &yp, &op, &nn, &head};
  KL_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)p.grid), dim3(p.block), args, 0, (cudaStream_t)stream));
  KL_LAUNCH_CHECK("vector_add_kernel launch");
}

}  // namespace kl
#endif  // __CUDACC_RTC__
