// softmax, block per row: rows of N <= 32768 held in one block's registers (blockDim.x threads x
// CHUNKS vectors of VEC elements), warp shuffles then one shared-memory exchange between warps.
#include "softmax_common.cuh"

namespace kl {

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

}  // namespace kl
