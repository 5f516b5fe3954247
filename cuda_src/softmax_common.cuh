// Shared device helpers of the register-resident softmax kernels (softmax_warp.cu, softmax_block.cu,
// softmax_rows.cu, softmax_split.cu): a row (or a chunk of one) held in registers as CHUNKS
// vectors of VEC elements per thread, and the per-thread max / exp-sum / scale over it.
#pragma once

#include "common.cuh"

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
}  // namespace kl
