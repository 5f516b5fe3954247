// softmax, warp per row: rows of N <= 1024 held in one warp's registers (32 lanes x CHUNKS vectors
// of VEC elements), max and sum by butterfly shuffles only: no shared memory, no barrier. VEC = 16 /
// sizeof(T) (one 128-bit access) when every row of x and y starts 16-byte aligned, else 1.
#include "softmax_common.cuh"

namespace kl {

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

}  // namespace kl
