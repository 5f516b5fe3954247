// Host API of gemm_epilogue.cu, for gemm_bindings.cpp (plain C++: no CUDA headers needed).
//
// C[M, N] = act(A[M, K] @ B[K, N] + bias[N]); A, B, C row-major with unit inner stride and row
// strides lda, ldb, ldc in elements; fp16 or bf16 in and out, fp32 accumulation.
// Errors: std::invalid_argument (bad argument, the message names it; pybind11 -> ValueError) and
// std::runtime_error (a CUDA call or launch failed; the message carries CUDA's text).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace klgemm {

// dtype codes as the rest of kl_cuda uses them (0 = float32 is not a GEMM input here)
enum DType { DTYPE_F16 = 1, DTYPE_BF16 = 2 };

struct GemmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;  // may be null when has_bias == 0
  void* c = nullptr;
  int64_t M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int dtype = DTYPE_BF16;  // DType
  int act = 0;             // 0 none, 1 relu, 2 gelu (tanh approximation)
  int has_bias = 1;
  void* stream = nullptr;  // cudaStream_t
  int device = -1;         // CUDA device the pointers live on (-1: the current one)
};

// Tuning knobs of the Hopper kernel (defaults are the shipped configuration).
struct WgmmaConfig {
  int tile_n = 256;  // 256 (4-stage ring) or 128 (6-stage ring); tile_m is 128
  int group_m = 8;   // tile rasterisation: groups of group_m M-tiles walk N together (L2 reuse)
  int max_ctas = 0;  // persistent grid size; 0 = one CTA per multiprocessor
};

// Empty string when the Hopper path (TMA + wgmma, sm_90a) can run these arguments on the current
// device; otherwise the reason it cannot.
std::string gemm_wgmma_unsupported(const GemmArgs& args);

// Tuning knobs of the ping-pong Hopper kernel (128 x 128 tile per consumer warpgroup, 5 stages).
struct PingpongConfig {
  int group_m = 8;    // as WgmmaConfig::group_m
  int max_ctas = 0;   // persistent grid size; 0 = one CTA per multiprocessor (pairs: as many as fit)
  int cluster_m = 1;  // 1, or 2: clusters of 2 CTAs on vertically adjacent tiles, B multicast to both
};

// Empty string when the ping-pong kernel can run these arguments: the Hopper path's conditions,
// plus a 16-byte aligned c with ldc % 8 == 0 (its epilogue is a TMA store).
std::string gemm_pingpong_unsupported(const GemmArgs& args);

void gemm_epilogue_wgmma(const GemmArgs& args, const WgmmaConfig& cfg = WgmmaConfig());
void gemm_epilogue_pingpong(const GemmArgs& args, const PingpongConfig& cfg = PingpongConfig());
void gemm_epilogue_mma(const GemmArgs& args);
// Picks a Hopper kernel when it can run (`hopper`: "wgmma" = cooperative, "pingpong", or
// "pingpong_c2" = ping-pong in 2x1 clusters; a ping-pong request falls back to the cooperative
// kernel, then to the portable one), else the portable one. Returns the path taken.
std::string gemm_epilogue_auto(const GemmArgs& args, const std::string& hopper = "wgmma");

// Resource facts of the compiled kernels as the runtime sees them (cudaFuncGetAttributes).
struct KernelAttrs {
  std::string name;   // e.g. "gemm_wgmma_kernel<bf16,256>"
  int registers = 0;  // per thread (before setmaxnreg moves them between warpgroups)
  int local_bytes = 0;  // local memory per thread: stack frame / spills
  int static_smem = 0;
  int dynamic_smem = 0;  // what the launcher asks for
  int ptx_version = 0, binary_version = 0;
};
std::vector<KernelAttrs> gemm_kernel_attributes(int device);

}  // namespace klgemm
