// softmax, the teaching twin: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)) per row.
//
// One block per row, any row length, any row stride, fp32 / fp16 / bf16 (math in fp32). Three
// sweeps over the row in global memory: its max, the sum of exp(x - max), then the output.
// Subtracting the max first keeps exp() from overflowing (exp(x - max) <= 1) and makes the result
// exact for rows of large values; a row of only -inf gives 0 / 0 = NaN, as torch does.
// The tuned kernels (softmax_*.cu) read each element once from HBM; this one reads it three times
// (the second and third reads mostly hit in L2 for rows that fit there).
#include "common.cuh"

namespace kl {

constexpr int kSimpleThreads = 256;

// Combine one value per thread into one value for the block, with `op` (max or sum): each warp
// combines its 32 values by shuffles, then warp 0 combines the warps' results from shared memory.
template <typename Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[kSimpleThreads / 32];
  __shared__ float result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) partial[warp] = v;
  __syncthreads();  // every warp's value is written before warp 0 reads them
  if (warp == 0) {
    v = lane < kSimpleThreads / 32 ? partial[lane] : identity;
    for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) result = v;
  }
  __syncthreads();  // the result is written before anyone reads it
  const float r = result;
  __syncthreads();  // everyone has read it before a later call overwrites `result` / `partial`
  return r;
}

struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct SumOp { __device__ float operator()(float a, float b) const { return a + b; } };

template <typename T>
__global__ void __launch_bounds__(kSimpleThreads) softmax_simple_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                                        int N, i64 sx, i64 sy) {
  const T* xr = x + blockIdx.x * sx;  // this block's row
  T* yr = y + blockIdx.x * sy;

  float m = KL_NEG_INF;  // 1. the row's max
  for (int c = threadIdx.x; c < N; c += blockDim.x) m = fmaxf(m, to_float(xr[c]));
  m = block_reduce(m, MaxOp(), KL_NEG_INF);
  if (m == KL_NEG_INF) m = 0.f;  // all -inf: exp(-inf - 0) = 0, the sum is 0, the output NaN

  float s = 0.f;  // 2. the sum of exp(x - max)
  for (int c = threadIdx.x; c < N; c += blockDim.x) s += __expf(to_float(xr[c]) - m);
  s = block_reduce(s, SumOp(), 0.f);

  const float inv = 1.f / s;  // 3. the output
  for (int c = threadIdx.x; c < N; c += blockDim.x) yr[c] = from_float<T>(__expf(to_float(xr[c]) - m) * inv);
}

}  // namespace kl
