// gemm_epilogue, tiled (sm_80+): mma.sync tensor cores fed by ldmatrix from a cp.async ring; any
// shape, stride and alignment (unaligned operands load through bounds-checked element gathers).
#include "gemm_common.cuh"

namespace kl {

// gemm_tiled_kernel: BM x 128 x 32 tiles (BM = 128, 64 or 32: few rows waste fewer tensor-core
// cycles on padding), 8 warps (2 x 4, each BM/2 x 32), mma.sync m16n8k16 fed by ldmatrix (.trans for
// B) from XOR-swizzled shared memory, a 4-stage cp.async ring with zero fill for ragged tiles. Grid:
// (N tiles, M tiles, K splits); the epilogue applies bias + activation to the fp32 accumulators and
// stores column pairs (4-byte stores when pair_ok: ldc even and C 4-byte aligned).
//
// Split-K (ws != nullptr): CTA z runs k-tiles [z * kt_per_split, min(k_tiles, (z + 1) * kt_per_split))
// and stores its raw fp32 accumulators (no bias, no activation) to ws[z][M][ldw];
// gemm_splitk_reduce_kernel (gemm_epilogue_ws.cu) then sums the splits in split order and applies
// bias + activation once. Few output tiles (small M, few N tiles) thus still give every SM several
// CTAs streaming B.
constexpr int MM_BN = 128, MM_BK = 32, MM_STAGES = 4, MM_THREADS = 256;
constexpr int MM_B_ELEMS = MM_BK * MM_BN;  // per stage
template <int BM>
struct TiledCfg {
  static_assert(BM == 128 || BM == 64 || BM == 32, "BM: 128, 64 or 32");
  static constexpr int A_ELEMS = BM * MM_BK;  // per stage
  static constexpr int MI = BM / 32;          // 16-row mma tiles per warp (2 warps along M)
  static constexpr int SMEM = MM_STAGES * (A_ELEMS + MM_B_ELEMS) * 2;  // 64 KB at BM = 128
};

// Swizzled element offsets of 16-byte chunks: A rows are 64 B (4 chunks), chunk ^= (row/2)%4;
// B rows are 256 B (16 chunks), chunk ^= row%8. Both make the 8 row addresses of an ldmatrix
// (and the 8 chunks of a quarter-warp's 16-byte stores) hit distinct bank groups.
__device__ __forceinline__ int a_off(int row, int kc) { return row * MM_BK + ((kc ^ ((row >> 1) & 3)) << 3); }
__device__ __forceinline__ int b_off(int row, int nc) { return row * MM_BN + ((nc ^ (row & 7)) << 3); }

// One k-tile of A and B into shared-memory stage `st`. VA (VB): A's (B's) rows and base are 16-byte
// aligned and K % 8 == 0 (N % 8 == 0), so a 16-byte chunk is wholly inside or wholly outside:
// 16-byte cp.async with zero fill; otherwise bounds-checked element loads, stored as 16-byte chunks.
template <int BM, bool VA, bool VB>
__device__ __forceinline__ void mm_load_tile(u16* sA, u16* sB, const u16* __restrict__ A,
                                             const u16* __restrict__ B, int M, int N, int K, long long lda,
                                             long long ldb, int m0, int n0, int k0) {
#pragma unroll
  for (int i = 0; i < (BM * 4 + MM_THREADS - 1) / MM_THREADS; ++i) {  // A: BM rows x 4 chunks
    const int c = threadIdx.x + i * MM_THREADS;
    if (c >= BM * 4) break;  // BM = 32: half the threads load A
    const int row = c >> 2, kc = c & 3;
    const int gm = m0 + row, gk = k0 + kc * 8;
    u16* dst = sA + a_off(row, kc);
    if (VA) {
      const bool ok = gm < M && gk < K;
      cp_async_16(smem_u32(dst), ok ? (const void*)(A + (long long)gm * lda + gk) : (const void*)A, ok ? 16 : 0);
    } else {
      u16 v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = (gm < M && gk + e < K) ? A[(long long)gm * lda + gk + e] : (u16)0;
      *reinterpret_cast<uint4*>(dst) = make_uint4(v[0] | (u32)v[1] << 16, v[2] | (u32)v[3] << 16,
                                                  v[4] | (u32)v[5] << 16, v[6] | (u32)v[7] << 16);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // B: 32 rows x 16 chunks = 512 chunks, 2 per thread
    const int c = threadIdx.x + i * MM_THREADS;
    const int row = c >> 4, nc = c & 15;
    const int gk = k0 + row, gn = n0 + nc * 8;
    u16* dst = sB + b_off(row, nc);
    if (VB) {
      const bool ok = gk < K && gn < N;
      cp_async_16(smem_u32(dst), ok ? (const void*)(B + (long long)gk * ldb + gn) : (const void*)B, ok ? 16 : 0);
    } else {
      u16 v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = (gk < K && gn + e < N) ? B[(long long)gk * ldb + gn + e] : (u16)0;
      *reinterpret_cast<uint4*>(dst) = make_uint4(v[0] | (u32)v[1] << 16, v[2] | (u32)v[3] << 16,
                                                  v[4] | (u32)v[5] << 16, v[6] | (u32)v[7] << 16);
    }
  }
}

template <bool BF16, int BM, bool VA, bool VB>
__global__ void __launch_bounds__(MM_THREADS)
gemm_tiled_kernel(const u16* __restrict__ A, const u16* __restrict__ B, const u16* __restrict__ bias,
                u16* __restrict__ C, int M, int N, int K, long long lda, long long ldb, long long ldc, int act,
                int pair_ok, int kt_per_split, float* __restrict__ ws, long long ldw) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  u16* sA = reinterpret_cast<u16*>(smem_raw);
  using Cfg = TiledCfg<BM>;
  constexpr int MI = Cfg::MI, WM = BM / 2;
  u16* sB = sA + MM_STAGES * Cfg::A_ELEMS;

  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * MM_BN;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / 4, wn = warp % 4;  // warp tile: rows wm*WM .. +WM-1, cols wn*32 .. +31
  const int k_tiles = (K + MM_BK - 1) / MM_BK;
  // This CTA's k-tiles [k_begin, k_end) (kt_per_split <= 0: all of them). Empty when a split lies
  // past K (the planner avoids it): the CTA then stores zero partials, which the reduction adds.
  const int kps = kt_per_split > 0 ? kt_per_split : k_tiles;
  const int k_begin = min(k_tiles, (int)blockIdx.z * kps);
  const int k_end = min(k_tiles, k_begin + kps);

  float acc[MI][4][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // Prologue: STAGES-1 tiles in flight. One commit group per tile, empty groups included, so
  // that wait_group<STAGES-2> below always means "tile kt has landed". Stages are numbered from
  // k_begin: k-tile kt lives in stage (kt - k_begin) % STAGES.
#pragma unroll
  for (int s = 0; s < MM_STAGES - 1; ++s) {
    if (k_begin + s < k_end)
      mm_load_tile<BM, VA, VB>(sA + s * Cfg::A_ELEMS, sB + s * MM_B_ELEMS, A, B, M, N, K, lda, ldb, m0, n0,
                               (k_begin + s) * MM_BK);
    cp_async_commit();
  }

  for (int kt = k_begin; kt < k_end; ++kt) {
    const int i = kt - k_begin;  // groups committed so far: STAGES-1 + i; group i holds tile kt
    cp_async_wait<MM_STAGES - 2>();
    // Barrier: (1) every thread's copies of tile kt are visible; (2) every warp has finished
    // reading stage (i-1) % STAGES, which the load below overwrites.
    __syncthreads();
    const int nt = kt + MM_STAGES - 1;
    if (nt < k_end) {
      const int s = (i + MM_STAGES - 1) % MM_STAGES;
      mm_load_tile<BM, VA, VB>(sA + s * Cfg::A_ELEMS, sB + s * MM_B_ELEMS, A, B, M, N, K, lda, ldb, m0, n0,
                               nt * MM_BK);
    }
    cp_async_commit();

    const u16* tA = sA + (i % MM_STAGES) * Cfg::A_ELEMS;
    const u16* tB = sB + (i % MM_STAGES) * MM_B_ELEMS;
#pragma unroll
    for (int ks = 0; ks < MM_BK / 16; ++ks) {
      u32 a[MI][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int row = wm * WM + mi * 16 + (lane & 15);
        ldmatrix_x4(smem_u32(tA + a_off(row, ks * 2 + (lane >> 4))), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        const int krow = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int nc = (wn * 32 + nj * 16) / 8 + (lane >> 4);
        ldmatrix_x4_trans(smem_u32(tB + b_off(krow, nc)), b[2 * nj][0], b[2 * nj][1], b[2 * nj + 1][0],
                          b[2 * nj + 1][1]);
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_16816<BF16>(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
  }
  cp_async_wait<0>();

  // Epilogue from the mma.sync accumulator fragment: c0,c1 at (row, col..col+1), c2,c3 at row+8.
  if (ws != nullptr) {
    // Split-K partial: raw fp32 sums into plane z. ldw % 4 == 0 and col is even, so (col, col+1)
    // is one 8-byte aligned float2 when both are inside N.
    float* wz = ws + (long long)blockIdx.z * M * ldw;
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int col = n0 + wn * 32 + ni * 8 + 2 * (lane & 3);
      if (col >= N) continue;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = m0 + wm * WM + mi * 16 + (lane >> 2);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (r + 8 * h >= M) continue;
          float* w = wz + (long long)(r + 8 * h) * ldw + col;
          if (col + 1 < N) *reinterpret_cast<float2*>(w) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
          else *w = acc[mi][ni][2 * h];
        }
      }
    }
    return;
  }
#pragma unroll
  for (int ni = 0; ni < 4; ++ni) {
    const int col = n0 + wn * 32 + ni * 8 + 2 * (lane & 3);
    if (col >= N) continue;
    float b0, b1;
    load_bias_pair<BF16>(bias, col, N, b0, b1);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const int r = m0 + wm * WM + mi * 16 + (lane >> 2);
      if (r < M) store_pair<BF16>(C + (long long)r * ldc, col, N, acc[mi][ni][0], acc[mi][ni][1], b0, b1, act, pair_ok);
      if (r + 8 < M)
        store_pair<BF16>(C + (long long)(r + 8) * ldc, col, N, acc[mi][ni][2], acc[mi][ni][3], b0, b1, act, pair_ok);
    }
  }
}


}  // namespace kl
