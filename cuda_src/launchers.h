// Host launchers of the CUDA C++ kernels: plain C++ types only (no CUDA or libtorch headers), so
// bindings.cpp compiles with the host compiler alone. Pointers are raw device addresses, sizes and
// strides are in elements, `stream` is a cudaStream_t handle as an integer (0 = legacy default),
// `device` the CUDA device index the pointers live on. Every launcher validates its arguments
// (std::invalid_argument -> Python ValueError naming the argument) and checks every CUDA call and
// launch (std::runtime_error -> Python RuntimeError with CUDA's message).
//
// GEMM engineer: add your launcher declarations below the marked line; bindings for them go in
// cuda_src/gemm_bindings.cpp as `void bind_gemm_epilogue(pybind11::module_& m)`, which bindings.cpp
// calls when CMake defines KL_HAVE_GEMM (that is, when cuda_src/gemm_bindings.cpp exists).
#pragma once

#include <cstdint>
#include <string>

namespace kl {

// -- vector_add ---------------------------------------------------------------------------------
struct VectorAddPlan {
  int vec = 1;          // elements per 16-byte access in the body (1: all scalar, pointers disagree)
  long long head = 0;   // scalar elements before the 16-byte aligned body
  int unroll = 4;       // independent vector loads per input per thread per iteration
  int block = 256;
  long long grid = 1;
};

VectorAddPlan vector_add_plan(std::uintptr_t x, std::uintptr_t y, std::uintptr_t out, long long n, int dtype,
                              int device, long long grid, int block);
void vector_add(std::uintptr_t x, std::uintptr_t y, std::uintptr_t out, long long n, int dtype,
                std::uintptr_t stream, int device, long long grid, int block);

// -- softmax ------------------------------------------------------------------------------------
// path: "warp" (N <= 1024, one warp per row), "block" (N <= 32768, one block per row, row in
// registers), "online" (any N: column tiles with running max/sum, cluster of C CTAs per row on
// sm_90), "rows" (N <= 8192: persistent, several rows per CTA, G threads per row, next row
// prefetched), "smem" (a cluster of C <= 16 CTAs per row, each slice held in shared memory: one
// HBM read + one write), "split" (N > 32768: persistent cooperative grid, C = ceil(N / 16384)
// blocks per row exchange (max, sum) through 64-bit slots; max_spin bounds the wait, after which
// a block writes NaN), "auto" (the route table in softmax.cu picks by N).
struct SoftmaxPlan {
  std::string path;     // the concrete path: warp | block | online
  int vec = 1;          // elements per access: 16 / sizeof(T) when every row is 16-byte aligned, else 1
  int chunks = 1;       // warp/block: vector accesses per thread per row
  int threads = 128;    // threads per block
  int rows_per_block = 1;
  int cluster = 1;      // online: CTAs per row (a thread-block cluster when > 1)
  long long seg = 0;    // online, smem: columns per CTA
  int groups = 0;       // rows: threads per row (G)
  int blocks_per_sm = 0;  // rows: persistent CTAs per SM
  long long smem = 0;   // smem: dynamic shared memory bytes per CTA (the slice)
  int parts = 0;        // split: chunks (co-resident blocks) per row, C
  long long grid = 1;
  std::string kernel;   // the template instantiation, e.g. softmax_warp_kernel<float, 4, 8>
};

SoftmaxPlan softmax_plan(const std::string& path, std::uintptr_t x, std::uintptr_t out, long long M, long long N,
                         long long sx, long long sy, int dtype, int device, int threads, int ept, int cluster,
                         int blocks_per_sm = 0);
void softmax(const std::string& path, std::uintptr_t x, std::uintptr_t out, long long M, long long N, long long sx,
             long long sy, int dtype, std::uintptr_t stream, int device, int threads, int ept, int cluster,
             int blocks_per_sm = 0, int max_spin = -1);

// ---- GEMM engineer: gemm_epilogue launcher declarations go below this line ----

}  // namespace kl
