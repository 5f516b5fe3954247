// gemm_epilogue, ping-pong (sm_90a): two consumer warpgroups on alternating 128 x 128 tiles, so one's
// epilogue (stmatrix -> shared memory -> TMA store) overlaps the other's wgmma mainloop.
#include "gemm_common.cuh"

namespace kl {
#include "gemm_wgmma_ops.cuh"

// gemm_pingpong_kernel (sm_90a): persistent, 384 threads. Warpgroup 0 is the producer (one thread
// issues TMA loads, setmaxnreg.dec 40). Consumer warpgroups 1 and 2 each own a WHOLE 128 x 128
// output tile (two m64n128k16 wgmma per k16 step, 128 fp32 accumulators per thread) and take the
// CTA's tiles in turn: local tiles 0, 2, 4, ... go to consumer 0 and 1, 3, 5, ... to consumer 1.
// The producer fills one shared 5-stage ring in that same order, and a "turn" mbarrier per
// consumer hands the tensor cores from one consumer's mainloop to the other's, so while one runs
// its mainloop the other runs its epilogue (bias + activation on the accumulators, stmatrix into
// its own 128-byte-swizzled 32 KB staging buffer, one TMA store of two 128 x 64 boxes that the
// copy engine clips at M and N). Tensor cores stay busy through the epilogues.
//
// CM = 2: clusters of 2 CTAs on vertically adjacent tiles (same 128 columns of B). Each CTA loads
// its own A box and ONE of the two 64-column slabs of B, multicast into both CTAs' shared memory
// (half the L2 -> SM traffic for B). A ring slot is then written by both CTAs, so its "empty"
// mbarrier counts the consumer warps of both (4 local + 4 remote arrivals, each consumer warp
// arriving on both CTAs' barrier), and both CTAs meet at a cluster barrier before exit (no remote arrival or
// multicast may reach a CTA that has retired). The pair walks the same tile sequence, so ring
// slots and phases agree between them. With an odd number of M-tiles, the second CTA of the last
// pair has no rows: it skips its A load and its store but still loads its B slab and consumes.
//
// Shared memory: 5 x (16 KB A + 16 KB B) ring + 2 x 32 KB C staging + barriers = 225 KB.
constexpr int PP_BM = 128, PP_BN = 128, PP_BK = 64;
constexpr int PP_STAGES = 5;
constexpr int PP_THREADS = 384;
constexpr int PP_A_BYTES = PP_BM * PP_BK * 2;        // 16 KB
constexpr int PP_B_SUB = PP_BK * 64 * 2;             // one 64-column slab of B: 8 KB
constexpr int PP_B_BYTES = (PP_BN / 64) * PP_B_SUB;  // 16 KB
constexpr int PP_C_HALF = PP_BM * 64 * 2;            // one 128 x 64 box of C: 16 KB
constexpr int PP_C_BYTES = 2 * PP_C_HALF;            // per consumer: 32 KB
constexpr int PP_SMEM = PP_STAGES * (PP_A_BYTES + PP_B_BYTES) + 2 * PP_C_BYTES + (2 * PP_STAGES + 2) * 8 + 1024;

// Moves a ring position (stage, phase) forward by n slots.
__device__ __forceinline__ void ring_advance(int& stage, u32& phase, int n, int stages) {
  const int s = stage + n;
  phase ^= (u32)((s / stages) & 1);
  stage = s % stages;
}

// A consumer warp is done reading ring slot `bar`'s stage: tell this CTA's producer and, in a
// cluster pair, the partner's producer (whose multicast also writes this CTA's slot).
template <int CM>
__device__ __forceinline__ void release_slot(u32 bar, u32 rank) {
  if (CM == 2) {
    mbar_arrive(bar);
    mbar_arrive_cluster(bar, rank ^ 1u);
  } else {
    mbar_arrive(bar);
  }
}

// Barrier among the 128 threads of consumer warpgroup w only (hardware barriers 1 and 2).
__device__ __forceinline__ void consumer_bar_sync(int w) {
  if (w == 0) named_bar_sync<1>(128);
  else named_bar_sync<2>(128);
}

template <bool BF16>
__device__ __forceinline__ void wgmma_n128_k16(float (&acc)[64], u64 da, u64 db) {
  if (BF16) wgmma_m64n128k16_bf16(acc, da, db, 1);
  else wgmma_m64n128k16_f16(acc, da, db, 1);
}

// Bias + activation on one accumulator slab (64 rows x 128 columns of the tile, fragment layout of
// wgmma m64n128), packed to 16 bits and written with stmatrix into the swizzled staging buffer.
// Row `row` of a 128 x 64 box lives at row * 128 bytes; its 16-byte chunk c at (c ^ (row % 8)):
// the 128-byte swizzle TMA expects, and conflict-free for stmatrix (8 rows -> 8 distinct chunks).
template <bool BF16, int ACT>
__device__ __forceinline__ void pp_stage_slab(const float (&acc)[64], const float (&bz)[32], u32 sC, int slab,
                                              int warp, int lane) {
  constexpr int act = ACT;  // compile time: the chosen activation's code only, no per-element branch
  const int mat = lane >> 3;                                   // which of the 4 matrices this lane addresses
  const int row = slab * 64 + warp * 16 + (lane & 7) + (mat & 1) * 8;
  const u32 row_base = sC + row * 128;
#pragma unroll
  for (int jj = 0; jj < 8; ++jj) {  // column groups j = 2 jj and 2 jj + 1 (8 columns each)
    u32 r[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * jj + h;
      const float b0 = bz[2 * j], b1 = bz[2 * j + 1];
      r[2 * h] = pack2<BF16>(apply_act(acc[4 * j] + b0, act), apply_act(acc[4 * j + 1] + b1, act));
      r[2 * h + 1] = pack2<BF16>(apply_act(acc[4 * j + 2] + b0, act), apply_act(acc[4 * j + 3] + b1, act));
    }
    const int chunk = 2 * jj + (mat >> 1);  // 0..15 across the 128 columns
    const u32 addr = row_base + (chunk >> 3) * PP_C_HALF + ((((chunk & 7) ^ (row & 7))) << 4);
    stmatrix_x4(addr, r[0], r[1], r[2], r[3]);
  }
}

// One element of the staged 128 x 128 tile (two 128 x 64 boxes, 128-byte swizzle as above).
__device__ __forceinline__ u16 pp_staged(u32 sC, int row, int col) {
  const int chunk = col >> 3;
  const u32 addr = sC + (chunk >> 3) * PP_C_HALF + row * 128 + ((((chunk & 7) ^ (row & 7))) << 4) + (col & 7) * 2;
  u16 v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr));
  return v;
}

// The staged tile to C by plain stores, for a C whose rows TMA cannot write (ldc not a multiple of 8,
// e.g. N = 2047): each row segment of the tile is written in the 16-byte chunks of C's own address
// space (the chunk boundaries of an odd-strided row fall anywhere in the tile), so every full chunk
// is one 16-byte store and only a row's edge chunks go element by element. 16 threads a row, 8 rows
// a pass: thread q of a row takes the chunk starting at segment element 8 q - sh (sh: elements from
// the 16-byte boundary before the segment to its start); thread 0 also takes the last sh elements.
__device__ __forceinline__ void pp_store_rows(u32 sC, u16* __restrict__ C, long long ldc, int M, int N, int m0,
                                              int n0, int tid) {
  const int q = tid & 15;
  const int ncols = min(PP_BN, N - n0);
#pragma unroll 1
  for (int row = tid >> 4; row < PP_BM && m0 + row < M; row += 8) {
    u16* crow = C + (long long)(m0 + row) * ldc + n0;
    const int sh = (int)((reinterpret_cast<unsigned long long>(crow) >> 1) & 7);
    const int e0 = 8 * q - sh;
    if (e0 >= 0 && e0 + 8 <= ncols) {
      u32 w[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) w[u] = pp_staged(sC, row, e0 + 2 * u) | (u32)pp_staged(sC, row, e0 + 2 * u + 1) << 16;
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(crow + e0), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                   "r"(w[3]) : "memory");
    } else {
      for (int e = max(e0, 0); e < min(e0 + 8, ncols); ++e) crow[e] = pp_staged(sC, row, e);
    }
    if (q == 0) {
      for (int e = PP_BN - sh; e < ncols; ++e) crow[e] = pp_staged(sC, row, e);
    }
  }
}

template <bool BF16, int CM>
__global__ void __launch_bounds__(PP_THREADS, 1)
gemm_pingpong_kernel(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
                     const __grid_constant__ TmaDesc tmC, const u16* __restrict__ bias, int M, int N, int K, int act,
                     int tiles_m, int tiles_n, int group_m, u16* __restrict__ C, long long ldc, int c_tma) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(CM == 1 || CM == 2, "cluster size along M: 1 or 2");
  extern __shared__ unsigned char smem_raw[];
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // swizzled boxes want 1 KB alignment
  const u32 sA = base;                                       // PP_STAGES x 16 KB
  const u32 sB = sA + PP_STAGES * PP_A_BYTES;                // PP_STAGES x 16 KB
  const u32 sC = sB + PP_STAGES * PP_B_BYTES;                // 2 consumers x 32 KB
  const u32 bar_full = sC + 2 * PP_C_BYTES;                  // PP_STAGES x 8 bytes
  const u32 bar_empty = bar_full + PP_STAGES * 8;            // PP_STAGES x 8 bytes
  const u32 bar_turn = bar_empty + PP_STAGES * 8;            // 2 x 8 bytes: "consumer w may issue wgmma"

  const int wg = threadIdx.x / 128;
  // Scheduling unit: a "cluster tile" of CM vertically adjacent 128 x 128 tiles; CTA `rank` of the
  // cluster takes M-tile CM * tmc + rank. Clusters are CM consecutive blocks (1-D grid).
  const u32 rank = CM == 2 ? cluster_ctarank() : 0u;
  const int unit = (int)blockIdx.x / CM, units = (int)gridDim.x / CM;
  const int tiles_mc = (tiles_m + CM - 1) / CM;
  const int group_mc = max(1, group_m / CM);
  const int num_tiles = tiles_mc * tiles_n;
  const int k_tiles = (K + PP_BK - 1) / PP_BK;

  if (threadIdx.x == 0) {
    tma_prefetch_desc(&tmA);
    tma_prefetch_desc(&tmB);
    if (c_tma) tma_prefetch_desc(&tmC);
    for (int s = 0; s < PP_STAGES; ++s) {
      mbar_init(bar_full + 8 * s, 1);        // producer's arrive.expect_tx; the TMA bytes complete it
      mbar_init(bar_empty + 8 * s, 4 * CM);  // lane 0 of each warp of the consumer that read the slot, per CTA
    }
    mbar_init(bar_turn, 1);      // arrived by one thread of consumer 1 after its mainloop
    mbar_init(bar_turn + 8, 1);  // arrived by one thread of consumer 0 after its mainloop
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (CM == 2) cluster_sync();  // the partner's barriers are initialised before any multicast/arrive
  else __syncthreads();

  if (wg == 0) {
    // ---------------- producer: the CTA's tiles in order, each k-tile into the next ring slot --
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      int stage = 0;
      u32 phase = 0;
      for (int t = unit; t < num_tiles; t += units) {
        int tmc, tn;
        tile_coords(t, tiles_mc, tiles_n, group_mc, tmc, tn);
        const int tm = tmc * CM + (int)rank;
        const bool has_rows = tm < tiles_m;  // false only for CTA 1 of a pair past the last M-tile
        const int n0 = tn * PP_BN;
        const int slabs = min(PP_BN / 64, (N - n0 + 63) / 64);  // B slabs wholly past N are skipped
        const u32 bytes = (has_rows ? PP_A_BYTES : 0) + slabs * PP_B_SUB;
        for (int kt = 0; kt < k_tiles; ++kt) {
          const u32 full = bar_full + 8 * stage;
          mbar_wait(bar_empty + 8 * stage, phase ^ 1);  // CM = 2: also the partner's consumers
          mbar_arrive_expect_tx(full, bytes);
          if (has_rows) tma_load_2d(sA + stage * PP_A_BYTES, &tmA, kt * PP_BK, tm * PP_BM, full);
          if (CM == 1) {
            for (int j = 0; j < slabs; ++j)
              tma_load_2d(sB + stage * PP_B_BYTES + j * PP_B_SUB, &tmB, n0 + 64 * j, kt * PP_BK, full);
          } else if ((int)rank < slabs) {  // my slab of B, into both CTAs of the pair
            tma_load_2d_multicast(sB + stage * PP_B_BYTES + rank * PP_B_SUB, &tmB, n0 + 64 * (int)rank, kt * PP_BK,
                                  full, (unsigned short)0x3);
          }
          ring_advance(stage, phase, 1, PP_STAGES);
        }
      }
    }
  } else {
    // ---------------- consumers: whole tiles, alternating --------------------------------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int w = wg - 1;
    const int tid = threadIdx.x % 128;
    const int lane = threadIdx.x % 32;
    const int warp = tid / 32;
    const u32 my_turn = bar_turn + 8 * w, their_turn = bar_turn + 8 * (1 - w);
    const u32 sCw = sC + w * PP_C_BYTES;
    // Ring position of this consumer's first tile: consumer 1 starts after consumer 0's first tile.
    int stage = 0;
    u32 phase = 0, turn_phase = 0;
    if (w == 1) ring_advance(stage, phase, k_tiles, PP_STAGES);
    bool first = true;

    for (int t = unit + w * units; t < num_tiles; t += 2 * units) {
      int tmc, tn;
      tile_coords(t, tiles_mc, tiles_n, group_mc, tmc, tn);
      const int tm = tmc * CM + (int)rank;
      const int n0 = tn * PP_BN;
      // The other consumer has a tile after this one (its next local tile): it waits for our turn hand-off.
      const bool hand_off = t + units < num_tiles;

      float acc0[64], acc1[64];  // rows 0..63 and 64..127 of the tile
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        acc0[i] = 0.0f;
        acc1[i] = 0.0f;
      }
      fence_regs(acc0);
      fence_regs(acc1);

      // Wait for the tensor cores: consumer 0's first tile goes at once; every other mainloop
      // follows the other consumer's previous mainloop.
      if (!(w == 0 && first)) {
        mbar_wait(my_turn, turn_phase);
        turn_phase ^= 1;
      }
      first = false;

      int prev = 0;
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(bar_full + 8 * stage, phase);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < PP_BK / 16; ++kk) {
          const u32 a_st = sA + stage * PP_A_BYTES + kk * 32;  // K-major A, 16 k = 32 bytes
          const u64 da0 = smem_desc_sw128(a_st, 16, 1024);
          const u64 da1 = smem_desc_sw128(a_st + 64 * 128, 16, 1024);  // rows 64..127: +8 KB
          const u64 db = smem_desc_sw128(sB + stage * PP_B_BYTES + kk * 2048, PP_B_SUB, 1024);
          wgmma_n128_k16<BF16>(acc0, da0, db);
          wgmma_n128_k16<BF16>(acc1, da1, db);
        }
        wgmma_commit();
        fence_regs(acc0);
        fence_regs(acc1);
        if (kt > 0) {  // the previous k-tile's group is complete once at most one is pending
          wgmma_wait<1>();
          fence_regs(acc0);
          fence_regs(acc1);
          if (lane == 0) release_slot<CM>(bar_empty + 8 * prev, rank);
        }
        prev = stage;
        ring_advance(stage, phase, 1, PP_STAGES);
      }
      // Every wgmma of this tile is issued: hand the tensor cores to the other consumer.
      if (hand_off && tid == 0) mbar_arrive(their_turn);
      wgmma_wait<0>();
      fence_regs(acc0);
      fence_regs(acc1);
      if (k_tiles > 0 && lane == 0) release_slot<CM>(bar_empty + 8 * prev, rank);
      ring_advance(stage, phase, k_tiles, PP_STAGES);  // skip the other consumer's next tile

      // ---- epilogue (overlaps the other consumer's mainloop) ----
      // bias for this thread's columns n0 + 8 j + 2 (lane % 4) + {0, 1}, j < 16 (0 past N).
      float bz[32];
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int col = n0 + 8 * j + 2 * (lane & 3);
        float b0 = 0.0f, b1 = 0.0f;
        if (bias != nullptr && col < N) {
          b0 = to_f32<BF16>(__ldg(bias + col));
          if (col + 1 < N) b1 = to_f32<BF16>(__ldg(bias + col + 1));
        }
        bz[2 * j] = b0;
        bz[2 * j + 1] = b1;
      }
      // The staging buffer is free once this consumer's previous TMA store has read it.
      if (tid == 0) bulk_wait_read<0>();
      consumer_bar_sync(w);
      if (act == ACT_RELU) {
        pp_stage_slab<BF16, ACT_RELU>(acc0, bz, sCw, 0, warp, lane);
        pp_stage_slab<BF16, ACT_RELU>(acc1, bz, sCw, 1, warp, lane);
      } else if (act == ACT_GELU) {
        pp_stage_slab<BF16, ACT_GELU>(acc0, bz, sCw, 0, warp, lane);
        pp_stage_slab<BF16, ACT_GELU>(acc1, bz, sCw, 1, warp, lane);
      } else if (act == ACT_GELU_EXP2) {
        pp_stage_slab<BF16, ACT_GELU_EXP2>(acc0, bz, sCw, 0, warp, lane);
        pp_stage_slab<BF16, ACT_GELU_EXP2>(acc1, bz, sCw, 1, warp, lane);
      } else {
        pp_stage_slab<BF16, ACT_NONE>(acc0, bz, sCw, 0, warp, lane);
        pp_stage_slab<BF16, ACT_NONE>(acc1, bz, sCw, 1, warp, lane);
      }
      if (c_tma) {
        fence_proxy_async_smem();  // each writer: its stmatrix data -> visible to the TMA engine
        consumer_bar_sync(w);
        if (tid == 0 && tm < tiles_m) {
          tma_store_2d(&tmC, sCw, n0, tm * PP_BM);
          if (n0 + 64 < N) tma_store_2d(&tmC, sCw + PP_C_HALF, n0 + 64, tm * PP_BM);
          bulk_commit();
        }
      } else {  // rows TMA cannot write: this warpgroup's own stores (its next staging waits at the barrier above)
        consumer_bar_sync(w);
        if (tm < tiles_m) pp_store_rows(sCw, C, ldc, M, N, tm * PP_BM, n0, tid);
      }
    }
    if (tid == 0) bulk_wait<0>();  // stores complete before the CTA (and its shared memory) retires
  }
  // A cluster partner may still arrive on this CTA's barriers or multicast into its ring: meet
  // before either retires. (All 384 threads of both CTAs get here: no early returns above.)
  if (CM == 2) cluster_sync();
#endif
}


}  // namespace kl
