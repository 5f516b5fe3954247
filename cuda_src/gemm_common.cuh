// Device helpers of the GEMM kernels (gemm_epilogue*.cu): 16-bit element conversions, the fused
// epilogue (bias + activation on the fp32 accumulator), the encoded TMA descriptor type and the
// grouped tile order of the persistent kernels. The PTX wrappers are in ptx.cuh.
//
// Header-free on purpose: no <cuda_bf16.h>/<cuda_fp16.h>, so that NVRTC compiles the same
// source without include paths. 16-bit values travel as unsigned short bit patterns and are
// converted with PTX cvt instructions (round to nearest even).
#pragma once

#include "ptx.cuh"

namespace kl {


// ACT_GELU_EXP2: the same tanh-form GELU by one ex2.approx and one fast division (dispatch_gemm's
// GEMM["gelu_exp2"]) instead of libm's tanhf
enum Act { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2, ACT_GELU_EXP2 = 3 };

// ---- 16-bit <-> fp32 ------------------------------------------------------------------------
template <bool BF16>
__device__ __forceinline__ float to_f32(u16 v) {
  if (BF16) return __uint_as_float(((u32)v) << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
}

template <bool BF16>
__device__ __forceinline__ u16 from_f32(float f) {
  u16 v;
  if (BF16) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f));
  else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
  return v;
}

// (lo, hi) -> one 32-bit word holding two 16-bit values, lo at the lower address.
template <bool BF16>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 v;
  if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));
  return v;
}

// ---- the epilogue: applied to fp32 accumulators before the single store ---------------------
__device__ __forceinline__ float apply_act(float x, int act) {
  if (act == ACT_RELU) return fmaxf(x, 0.0f);
  if (act == ACT_GELU) {
    // tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x)));
  }
  if (act == ACT_GELU_EXP2) {
    // 0.5 x (1 + tanh(u)) = x - x / (1 + exp(2u)), exp(2u) = 2^(x (c1 + c2 x^2)) with
    // c1 = 2 sqrt(2/pi) log2(e), c2 = 0.044715 c1; exp overflow gives x - x * 0 = x, underflow x - x = 0
    const float c1 = 2.302208198144325f, c2 = 0.1029432395800235f;
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * (c1 + c2 * x * x)));
    return x - __fdividef(x, 1.0f + e);
  }
  return x;
}

// Bias + activation for a column pair (col, col+1) of one row, then store. `pair_ok` says a
// 4-byte store at c[col] is aligned; masked against M (by the caller) and N here.
template <bool BF16>
__device__ __forceinline__ void store_pair(u16* __restrict__ crow, int col, int N, float v0, float v1,
                                           float b0, float b1, int act, bool pair_ok) {
  v0 = apply_act(v0 + b0, act);
  v1 = apply_act(v1 + b1, act);
  if (pair_ok && col + 1 < N) {
    *reinterpret_cast<u32*>(crow + col) = pack2<BF16>(v0, v1);
  } else {
    if (col < N) crow[col] = from_f32<BF16>(v0);
    if (col + 1 < N) crow[col + 1] = from_f32<BF16>(v1);
  }
}

template <bool BF16>
__device__ __forceinline__ void load_bias_pair(const u16* __restrict__ bias, int col, int N, float& b0,
                                               float& b1) {
  b0 = 0.0f;
  b1 = 0.0f;
  if (bias != nullptr) {
    if (col < N) b0 = to_f32<BF16>(__ldg(bias + col));
    if (col + 1 < N) b1 = to_f32<BF16>(__ldg(bias + col + 1));
  }
}


// ---- persistent Hopper kernels: TMA descriptor and tile order ----------------------------------
struct alignas(64) TmaDesc {  // an encoded CUtensorMap (128 bytes, opaque to the kernel)
  u64 opaque[16];
};

// Tile t of the persistent schedule -> (tile_m, tile_n): groups of `group_m` M-tiles sweep N
// together so that the CTAs in flight share A rows and B columns in L2.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int group_m, int& tm, int& tn) {
  const int per_group = group_m * tiles_n;
  const int g = t / per_group;
  const int first_m = g * group_m;
  const int rows = min(tiles_m - first_m, group_m);
  const int r = t - g * per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

}  // namespace kl
