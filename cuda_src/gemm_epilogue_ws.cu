// gemm_epilogue, warp-specialised (sm_90a): C = act(A @ B + bias) by a persistent kernel whose
// producer warpgroup feeds a TMA ring and whose two consumer warpgroups share one 128 x BN tile
// (BN = 128, 192 or 256).
//
// gemm_ws_kernel: warpgroup 0 is the producer: one thread issues TMA box loads of A (K-major) and B
// (N-major, i.e. row-major [K, N]) into a multi-stage shared-memory ring with the 128-byte swizzle,
// each stage guarded by a "full" and an "empty" mbarrier. Warpgroups 1 and 2 are consumers: each
// owns 64 rows of the 128 x BN tile and issues wgmma.mma_async m64nBNk16 straight from shared memory
// (B through the transposed, MN-major descriptor), keeps one wgmma group in flight, releases stages,
// and runs the epilogue from its accumulator registers. setmaxnreg moves registers from the producer
// to the consumers. TMA needs 16-byte aligned row strides and base addresses of A and B.
//
// Split-K (splits > 1): work unit u is K range u / tiles of tile u % tiles; a unit stores its fp32
// partial tile into the workspace ws[split][M][ldw] instead of C, and gemm_splitk_reduce_kernel
// (gemm_epilogue_splitk.cu) sums the partials and applies bias + activation once (the planner
// launches it right after, on the same stream). With few output tiles (small M) this fills the SMs that one tile per CTA would not.
#include "gemm_common.cuh"

namespace kl {
#include "gemm_wgmma_ops.cuh"

constexpr int WG_BM = 128;     // tile rows: two consumer warpgroups x 64
constexpr int WG_BK = 64;      // 64 x 2 bytes = one 128-byte swizzle row
constexpr int WG_THREADS = 384;  // producer warpgroup + two consumer warpgroups

template <int BN>
struct WgCfg {
  // as many 16 KB A + BN / 64 x 8 KB B stages as 227 KB hold: 4 at 256 columns, 5 at 192, 6 at 128
  static constexpr int STAGES = BN == 256 ? 4 : BN == 192 ? 5 : 6;
  static constexpr int A_BYTES = WG_BM * WG_BK * 2;  // 16 KB
  static constexpr int B_SUB = WG_BK * 64 * 2;       // one 64-column slab of B: 8 KB
  static constexpr int B_BYTES = (BN / 64) * B_SUB;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int SMEM = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;  // + barriers + align slack
};
template <bool BF16, int BN>
__device__ __forceinline__ void wgmma_tile_k16(float (&acc)[BN / 2], u64 da, u64 db) {
  if constexpr (BN == 256) {
    if (BF16) wgmma_m64n256k16_bf16(acc, da, db, 1);
    else wgmma_m64n256k16_f16(acc, da, db, 1);
  } else if constexpr (BN == 192) {
    if (BF16) wgmma_m64n192k16_bf16(acc, da, db, 1);
    else wgmma_m64n192k16_f16(acc, da, db, 1);
  } else {
    if (BF16) wgmma_m64n128k16_bf16(acc, da, db, 1);
    else wgmma_m64n128k16_f16(acc, da, db, 1);
  }
}

template <bool BF16, int BN>
__global__ void __launch_bounds__(WG_THREADS, 1)
gemm_ws_kernel(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
               const u16* __restrict__ bias, u16* __restrict__ C, int M, int N, int K, long long ldc, int act,
               int tiles_m, int tiles_n, int group_m, int pair_ok, int splits, int kt_per_split,
               float* __restrict__ ws, long long ldw) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = WgCfg<BN>;
  constexpr int STAGES = Cfg::STAGES;
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzled TMA destinations and wgmma operands want 1024-byte aligned stages.
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 sA = base;                              // STAGES x A_BYTES
  const u32 sB = base + STAGES * Cfg::A_BYTES;      // STAGES x B_BYTES
  const u32 bar_full = sB + STAGES * Cfg::B_BYTES;  // STAGES x 8 bytes
  const u32 bar_empty = bar_full + STAGES * 8;      // STAGES x 8 bytes

  const int wg = threadIdx.x / 128;
  const int num_tiles = tiles_m * tiles_n;
  const int num_units = num_tiles * splits;
  const int k_tiles = (K + WG_BK - 1) / WG_BK;

  if (threadIdx.x == 0) {
    tma_prefetch_desc(&tmA);
    tma_prefetch_desc(&tmB);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_full + 8 * s, 1);  // the producer's arrive.expect_tx; the bytes complete it
      mbar_init(bar_empty + 8 * s, 8);  // lane 0 of each of the 8 consumer warps
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------- producer warpgroup: one thread issues every TMA load ----------------------
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      int stage = 0;
      u32 phase = 0;
      for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
        const int split = u / num_tiles, t = u - split * num_tiles;
        const int kt0 = split * kt_per_split, kt1 = min(k_tiles, kt0 + kt_per_split);
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, group_m, tm, tn);
        const int n0 = tn * BN;
        // 64-column slabs of B that hold any column < N; slabs entirely past N are skipped (their
        // stale shared memory only feeds accumulator columns the epilogue never stores).
        const int slabs = min(BN / 64, (N - n0 + 63) / 64);
        const u32 bytes = Cfg::A_BYTES + slabs * Cfg::B_SUB;
        for (int kt = kt0; kt < kt1; ++kt) {
          mbar_wait(bar_empty + 8 * stage, phase ^ 1);
          mbar_arrive_expect_tx(bar_full + 8 * stage, bytes);
          tma_load_2d(sA + stage * Cfg::A_BYTES, &tmA, kt * WG_BK, tm * WG_BM, bar_full + 8 * stage);
          for (int j = 0; j < slabs; ++j)
            tma_load_2d(sB + stage * Cfg::B_BYTES + j * Cfg::B_SUB, &tmB, n0 + 64 * j, kt * WG_BK,
                        bar_full + 8 * stage);
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    // ---------------- consumer warpgroups: wgmma + fused epilogue --------------------------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int cw = wg - 1;  // rows cw*64 .. cw*64+63 of the tile
    const int lane = threadIdx.x % 32;
    const int warp = (threadIdx.x % 128) / 32;
    int stage = 0;
    u32 phase = 0;
    for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
      const int split = u / num_tiles, t = u - split * num_tiles;
      const int nk = max(0, min(k_tiles, (split + 1) * kt_per_split) - split * kt_per_split);
      int tm, tn;
      tile_coords(t, tiles_m, tiles_n, group_m, tm, tn);
      float acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      fence_regs(acc);

      int prev = 0;
      for (int kt = 0; kt < nk; ++kt) {
        mbar_wait(bar_full + 8 * stage, phase);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; ++kk) {
          // A: K-major, 128-byte rows; step 16 elements (32 bytes) along K inside the swizzle row.
          const u64 da = smem_desc_sw128(sA + stage * Cfg::A_BYTES + cw * 64 * 128 + kk * 32, 16, 1024);
          // B: MN-major slabs of 64 columns x 64 k-rows; next slab at +8 KB (LBO), next 8 k-rows
          // at +1 KB (SBO); step 16 k-rows (2 KB) per k16.
          const u64 db = smem_desc_sw128(sB + stage * Cfg::B_BYTES + kk * 2048, Cfg::B_SUB, 1024);
          wgmma_tile_k16<BF16, BN>(acc, da, db);
        }
        wgmma_commit();
        fence_regs(acc);
        if (kt > 0) {  // the previous stage's wgmma group is done once at most one is pending
          wgmma_wait<1>();
          if (lane == 0) mbar_arrive(bar_empty + 8 * prev);
        }
        prev = stage;
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
      fence_regs(acc);
      if (nk > 0 && lane == 0) mbar_arrive(bar_empty + 8 * prev);

      // Epilogue straight from the accumulator fragment: thread holds rows r and r + 8, column
      // pairs (8 j + 2 (lane % 4), +1) for j < BN / 8.
      const int r = tm * WG_BM + cw * 64 + warp * 16 + lane / 4;
      const int cbase = tn * BN + 2 * (lane % 4);
      if (splits > 1) {  // fp32 partial tile; ldw is a multiple of 4, so (col, col + 1) is one float2
        float* w0 = ws + ((long long)split * M + r) * ldw;
        float* w1 = w0 + 8 * ldw;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int col = cbase + 8 * j;
          if (col < N) {
            if (r < M) *reinterpret_cast<float2*>(w0 + col) = make_float2(acc[4 * j], acc[4 * j + 1]);
            if (r + 8 < M) *reinterpret_cast<float2*>(w1 + col) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
          }
        }
        continue;
      }
      u16* row0 = C + (long long)r * ldc;
      u16* row1 = row0 + 8 * ldc;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = cbase + 8 * j;
        if (col < N) {
          float b0, b1;
          load_bias_pair<BF16>(bias, col, N, b0, b1);
          if (r < M) store_pair<BF16>(row0, col, N, acc[4 * j], acc[4 * j + 1], b0, b1, act, pair_ok);
          if (r + 8 < M) store_pair<BF16>(row1, col, N, acc[4 * j + 2], acc[4 * j + 3], b0, b1, act, pair_ok);
        }
      }
    }
  }
#endif
}

// Staging copies for TMA: dst[r, c] = src[r, c] (16-bit) for r < rows, c < cols, into a workspace
// whose row stride ldd is a multiple of 8 elements and whose base is 16-byte aligned, so that TMA
// (16-byte strides) can read an operand whose own rows it cannot (N = 50257, K = 777). Up to two
// copies in one launch (blockIdx.y picks A's or B's); each thread moves one 16-byte chunk of a dst
// row at a time: 8 independent 2-byte loads from the source (any alignment), one 16-byte store
// (the chunk's columns past `cols` get zeros; TMA never reads them: its box clips at `cols`).
// The planner keeps rows x chunks a row below 2^31, so the chunk index divides in 32 bits.
__global__ void __launch_bounds__(256) gemm_stage_rows_kernel(const u16* __restrict__ src0, long long lds0,
                                                               u16* __restrict__ dst0, long long ldd0, int rows0,
                                                               int cols0, const u16* __restrict__ src1,
                                                               long long lds1, u16* __restrict__ dst1,
                                                               long long ldd1, int rows1, int cols1) {
  const bool second = blockIdx.y == 1;
  const u16* __restrict__ src = second ? src1 : src0;
  u16* __restrict__ dst = second ? dst1 : dst0;
  const long long lds = second ? lds1 : lds0, ldd = second ? ldd1 : ldd0;
  const int cols = second ? cols1 : cols0;
  const unsigned cpr = (unsigned)(cols + 7) / 8u;  // 16-byte chunks a row
  const unsigned chunks = (unsigned)(second ? rows1 : rows0) * cpr;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += gridDim.x * blockDim.x) {
    const unsigned r = i / cpr;
    const int c0 = 8 * (int)(i - r * cpr);
    const u16* s = src + (long long)r * lds + c0;
    u16 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = c0 + u < cols ? s[u] : (u16)0;
    *reinterpret_cast<uint4*>(dst + (long long)r * ldd + c0) =
        make_uint4(v[0] | (u32)v[1] << 16, v[2] | (u32)v[3] << 16, v[4] | (u32)v[5] << 16, v[6] | (u32)v[7] << 16);
  }
}

}  // namespace kl
