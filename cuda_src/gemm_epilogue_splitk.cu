// gemm_epilogue, splitk: K split over CTAs into fp32 partials, then ONE reduction that applies bias
// + activation (the `splitk` algorithm word). The partials come from the split-K mode of a main
// kernel: the warp-specialised kernel (gemm_epilogue_ws.cu, cuda:gemm_epilogue_splitk) or, at small
// M, the tiled mma.sync kernel (gemm_epilogue_tiled.cu); each writes ws[split][M][ldw] (fp32, ldw a
// multiple of 4) instead of C, and the planner launches this kernel right after on the same stream.
#include "gemm_common.cuh"

namespace kl {

// Split-K fixup: C[r, c] = act(sum over s of ws[s][r][c] + bias[c]), one element per thread per
// grid-stride step (consecutive threads on consecutive columns: coalesced). The partials are summed
// in split order, so the result does not depend on which unit finished first.
template <bool BF16>
__global__ void __launch_bounds__(256) gemm_splitk_reduce_kernel(const float* __restrict__ ws, int splits, int M,
                                                                  int N, long long ldw,
                                                                  const u16* __restrict__ bias,
                                                                  u16* __restrict__ C, long long ldc, int act) {
  const long long total = (long long)M * N;
  const long long plane = (long long)M * ldw;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const int r = (int)(i / N), c = (int)(i - (long long)r * N);
    const float* p = ws + (long long)r * ldw + c;
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += p[s * plane];
    if (bias != nullptr) v += to_f32<BF16>(bias[c]);
    C[(long long)r * ldc + c] = from_f32<BF16>(apply_act(v, act));
  }
}

}  // namespace kl
