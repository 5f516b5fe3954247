// vector_add, the teaching twin: out[i] = x[i] + y[i] for i < n, fp32 / fp16 / bf16.
//
// One element per thread per step of a grid-stride loop: thread t of the grid handles elements
// t, t + gridDim.x * blockDim.x, ... so any grid covers any n. Consecutive threads touch consecutive
// elements, so each warp's loads and stores are coalesced into a few wide memory transactions.
// The sum is computed in fp32 and rounded once to the output type.
#include "common.cuh"

namespace kl {

template <typename T>
__global__ void vector_add_simple_kernel(const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out,
                                         i64 n) {
  const i64 stride = (i64)gridDim.x * blockDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<T>(to_float(x[i]) + to_float(y[i]));
}

}  // namespace kl
