// gemm_epilogue, the teaching twin: C = act(A @ B + bias) with A [M, K], B [K, N], C [M, N] row-major
// (row strides lda, ldb, ldc), bias [N] optional; fp16 / bf16 in and out, fp32 accumulation.
//
// Classic shared-memory tiling: a block of 16 x 16 = 256 threads (thread t is row t / 16, column
// t % 16 of the tile) computes a 16 x 16 tile of C, one element per thread. For each step along K
// the block stages a 16 x 16 tile of A and one of B in shared memory (each thread loads one element
// of each, zero outside the matrices), then every thread accumulates a 16-term dot product from
// shared memory. Each element of A and B is read from
// global memory once per tile that needs it instead of once per output element. The epilogue adds
// the bias and applies the activation to the fp32 sum before the single store of C.
// The tuned kernels (gemm_epilogue_*.cu) use tensor cores; this one uses ordinary FMAs.
#include "gemm_common.cuh"

namespace kl {

constexpr int kTile = 16;

template <bool BF16>
__global__ void __launch_bounds__(kTile * kTile)
    gemm_simple_kernel(const u16* __restrict__ A, const u16* __restrict__ B, const u16* __restrict__ bias,
                       u16* __restrict__ C, int M, int N, int K, long long lda, long long ldb, long long ldc,
                       int act) {
  __shared__ float a_tile[kTile][kTile];
  __shared__ float b_tile[kTile][kTile + 1];  // +1: threads of a warp read a column without bank conflicts
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;

  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    // Stage A[row, k0 + tx] and B[k0 + ty, col]; zeros outside the matrices add nothing.
    a_tile[ty][tx] = (row < M && k0 + tx < K) ? to_f32<BF16>(A[row * lda + k0 + tx]) : 0.0f;
    b_tile[ty][tx] = (k0 + ty < K && col < N) ? to_f32<BF16>(B[(k0 + ty) * ldb + col]) : 0.0f;
    __syncthreads();  // the whole tile is in shared memory before anyone reads it
    for (int k = 0; k < kTile; ++k) acc += a_tile[ty][k] * b_tile[k][tx];
    __syncthreads();  // everyone is done reading before the next step overwrites the tile
  }
  if (row < M && col < N) {
    if (bias != nullptr) acc += to_f32<BF16>(bias[col]);
    C[row * ldc + col] = from_f32<BF16>(apply_act(acc, act));
  }
}

}  // namespace kl
