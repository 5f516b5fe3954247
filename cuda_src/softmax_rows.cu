// softmax, rows: persistent, several short rows per CTA (G threads per row), the next rows' loads
// issued before the current rows are reduced.
#include "softmax_common.cuh"

namespace kl {

// ------------------------------------------------------------------------------------------------
// Rows: persistent, several rows per CTA, G threads per row (G = 4 .. 256, a power of two), each
// thread holding CH vectors of VEC elements (CH * VEC = 32 elements; 8 or 16 for very short rows). A CTA of blockDim.x threads
// works on blockDim.x / G rows per step and strides over the rows by gridDim.x * (rows per step);
// the loads of the NEXT step's rows are issued (into a second, packed register buffer) before the
// current rows are reduced, so every thread keeps one row's worth of loads in flight while it
// computes and stores the previous one. The trip count is the same for every thread of the CTA
// (the loop runs over steps; a group whose row is past M computes on -inf padding and stores
// nothing), so full-warp shuffles and __syncthreads are legal inside the loop.
// G <= 32: reductions are xor shuffles inside the G-lane group; G > 32: shuffles, then one slot per
// warp in shared memory, read back by the G / 32 warps of the row's group.
template <typename T, int VEC, int CH>
__device__ __forceinline__ void load_raw_row(const T* __restrict__ row, int n, int t, int g, bool active,
                                             typename RawVec<T, VEC>::type (&r)[CH]) {
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int col = (c * g + t) * VEC;
    if (active && col + VEC <= n) {
      r[c] = *reinterpret_cast<const typename RawVec<T, VEC>::type*>(row + col);
    } else {  // partly or wholly past the row end (or no row): pad with -inf, exp(-inf) = 0
      T* e = reinterpret_cast<T*>(&r[c]);
#pragma unroll
      for (int i = 0; i < VEC; ++i) e[i] = (active && col + i < n) ? row[col + i] : from_float<T>(KL_NEG_INF);
    }
  }
}

template <int G>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = (G < 32 ? G : 32) / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = (G < 32 ? G : 32) / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kRowsThreads = 256;  // threads per CTA of the rows kernel (the launch bound)
// CTAs per SM the register budget of an instance must allow (the launch bound's second argument,
// and the default persistent grid per SM). From ptxas (sm_90a): at 3 (<= 80 registers) the 16-byte
// fp16/bf16 instances and the fp32 ones with G <= 32 (N <= 1024) have 0 spills, the others spill
// 24-320 bytes, so they get 2 (<= 128 registers, 0 spills). The planner
// (dispatch.py, rows_min_blocks) reads the same rule for the persistent grid.
__host__ __device__ constexpr int rows_min_blocks(int elem_size, int vec, int g) {
  return vec > 1 && (elem_size == 2 || g <= 32) ? 3 : 2;
}

template <typename T, int VEC, int CH, int G>
__global__ void __launch_bounds__(kRowsThreads, rows_min_blocks((int)sizeof(T), VEC, G))
    softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                                       i64 M, int N, i64 sx, i64 sy) {
  typedef typename RawVec<T, VEC>::type R;
  static_assert(G >= 1 && G <= kRowsThreads && (G & (G - 1)) == 0, "G: a power of two up to the block size");
  __shared__ float red_m[kRowsThreads / 32];  // G > 32 only: one slot per warp
  __shared__ float red_s[kRowsThreads / 32];
  const int t = threadIdx.x & (G - 1), grp = threadIdx.x / G, warp = threadIdx.x >> 5;
  const int rows = blockDim.x / G;  // rows per step
  const i64 stride = (i64)gridDim.x * rows;
  R cur[CH], nxt[CH];
  i64 base = (i64)blockIdx.x * rows;
  load_raw_row<T, VEC, CH>(x + (base + grp) * sx, N, t, G, base + grp < M, cur);
  for (; base < M; base += stride) {  // same trip count for every thread of the CTA
    const i64 row = base + grp, nrow = row + stride;
    // Next step's row first: its loads are in flight during this step's reductions and stores.
    load_raw_row<T, VEC, CH>(x + nrow * sx, N, t, G, nrow < M, nxt);
    float v[CH][VEC];
#pragma unroll
    for (int c = 0; c < CH; ++c) unpack<T, VEC>(cur[c], v[c]);
    float m = group_max<G>(thread_max<VEC, CH>(v));
    if constexpr (G > 32) {
      constexpr int W = G / 32;  // warps per row
      if ((threadIdx.x & 31) == 0) red_m[warp] = m;
      // Barrier 1: the max partial of every warp is written before any warp of the group reads.
      __syncthreads();
      const int w0 = grp * W;
      m = red_m[w0];
#pragma unroll
      for (int w = 1; w < W; ++w) m = fmaxf(m, red_m[w0 + w]);
    }
    // A row of only -inf (or a padding group past M) has m = -inf: use 0 as the shift so that
    // exp(-inf - 0) = 0 instead of NaN; the sum is then 0 and 1/0 = inf, 0 * inf = NaN, which is
    // what the reference gives for an all -inf row.
    float s = group_sum<G>(thread_exp_sum<VEC, CH>(v, m == KL_NEG_INF ? 0.f : m));
    if constexpr (G > 32) {
      constexpr int W = G / 32;
      if ((threadIdx.x & 31) == 0) red_s[warp] = s;
      // Barrier 2: the sum partials are written before they are read. (The next step's write of
      // red_m comes after this barrier, and every read of red_m of this step came before it; the
      // next write of red_s comes after the next Barrier 1, after every read of red_s below.)
      __syncthreads();
      const int w0 = grp * W;
      s = red_s[w0];
#pragma unroll
      for (int w = 1; w < W; ++w) s += red_s[w0 + w];
    }
    if (row < M) {
      thread_scale<VEC, CH>(v, 1.f / s);
      store_row<T, VEC, CH>(y + row * sy, N, t, G, v);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) cur[c] = nxt[c];
  }
}

}  // namespace kl
