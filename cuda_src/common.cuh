// Shared device helpers of the vector_add and softmax kernels: conversions, 16-byte vectors, warp
// reductions, the online-softmax merge.
//
// Compiled by nvcc (the pybind11 module kl_cuda) AND by NVRTC (the cupy layer compiles the same .cu
// files at run time), so it uses no standard-library header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kl {

typedef long long i64;

// dtype codes shared by the host launchers, the bindings and the Python adapters
enum DType { KL_F32 = 0, KL_F16 = 1, KL_BF16 = 2 };

#define KL_NEG_INF (-__int_as_float(0x7f800000))
#define KL_LOG2E 1.4426950408889634f

// Cluster launch shape is a compile-time kernel attribute, so that both a <<<>>>/cudaLaunchKernel
// launch (kl_cuda) and cupy's cuLaunchKernel launch (NVRTC) form clusters without extra launch
// attributes. sm_80 has no clusters: there the attribute is dropped and the host never picks C > 1.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define KL_CLUSTER_DIMS(c)
#else
#define KL_CLUSTER_DIMS(c) __cluster_dims__(c, 1, 1)
#endif

// -- conversions: all arithmetic in fp32 -------------------------------------------------------
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// -- 16-byte vectors ------------------------------------------------------------------------
// VEC == 1: one scalar access. VEC * sizeof(T) == 16: one 128-bit access (LDG.128 / STG.128);
// the caller guarantees 16-byte alignment of p.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float (&f)[VEC]) {
  if constexpr (VEC == 1) {
    f[0] = to_float(p[0]);
  } else {
    static_assert(sizeof(T) * VEC == 16, "vector accesses are 16 bytes");
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = to_float(e[i]);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const float (&f)[VEC]) {
  if constexpr (VEC == 1) {
    p[0] = from_float<T>(f[0]);
  } else {
    static_assert(sizeof(T) * VEC == 16, "vector accesses are 16 bytes");
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) e[i] = from_float<T>(f[i]);
    *reinterpret_cast<uint4*>(p) = raw;
  }
}

// Load VEC elements at p, which is column `col` of a row of length n; columns >= n read as `pad`.
// The whole vector is read with one 16-byte access when it lies inside the row, else element
// by element (only the last vector of a row whose length is not a multiple of VEC).
template <typename T, int VEC>
__device__ __forceinline__ void load_vec_masked(const T* __restrict__ p, int col, int n, float pad, float (&f)[VEC]) {
  if (col + VEC <= n) {
    load_vec<T, VEC>(p, f);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = (col + i < n) ? to_float(p[i]) : pad;
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec_masked(T* __restrict__ p, int col, int n, const float (&f)[VEC]) {
  if (col + VEC <= n) {
    store_vec<T, VEC>(p, f);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      if (col + i < n) p[i] = from_float<T>(f[i]);
  }
}

// Raw storage of one access (16 bytes, or one element), kept packed until it is used so that
// fp16/bf16 data costs 4 registers per 8 elements while loads are in flight.
template <typename T, int VEC> struct RawVec { typedef uint4 type; };
template <typename T> struct RawVec<T, 1> { typedef T type; };

template <typename T, int VEC>
__device__ __forceinline__ void unpack(const typename RawVec<T, VEC>::type& r, float (&f)[VEC]) {
  const T* e = reinterpret_cast<const T*>(&r);
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = to_float(e[i]);
}

template <typename T, int VEC>
__device__ __forceinline__ typename RawVec<T, VEC>::type pack(const float (&f)[VEC]) {
  typename RawVec<T, VEC>::type r;
  T* e = reinterpret_cast<T*>(&r);
#pragma unroll
  for (int i = 0; i < VEC; ++i) e[i] = from_float<T>(f[i]);
  return r;
}

// -- reductions -------------------------------------------------------------------------------
// Butterfly (xor) shuffles: every lane ends with the warp's result; no barrier needed, the
// shuffle itself exchanges registers among the 32 lanes named by the full mask.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// exp(v - m) for fp32 math: the subtraction first (exact for nearby values), then ex2.approx.
__device__ __forceinline__ float exp_shifted(float v, float m) { return exp2f((v - m) * KL_LOG2E); }

// Online-softmax state (running max m, sum s of exp(x - m)). Merging two states rescales the
// smaller-max sum; an all -inf state (m == -inf, s == 0) is the identity and never makes NaN.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == KL_NEG_INF) return;  // both empty so far
  s = s * exp_shifted(m, mn) + s2 * exp_shifted(m2, mn);
  m = mn;
}

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

__device__ __forceinline__ void warp_online_merge(float& m, float& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_merge(m, s, m2, s2);
  }
}

}  // namespace kl
