// attention, warp-specialised (sm_90a): the FlashAttention-3 forward on Hopper. O = softmax(Q K^T /
// sqrt(D) + mask) V per head; Q [B, Hq, Sq, D], K / V [B, Hkv, Sk, D] read through 4-D TMA descriptors
// over (D, S, H, B) (any batch / head / row strides that are multiples of 16 bytes: [B, H, S, D] and
// [B, S, H, D] storage alike), O [B, Hq, Sq, D] written by 16-byte stores; query head h reads K / V head
// h / group; causal is bottom-right aligned (query i sees key j iff j <= i + Sk - Sq).
//
// attention_ws_kernel: a CTA takes BM = 128 query rows of one head (the query blocks with the most
// keys first) with 384 threads in three warpgroups.
//   - warpgroup 0 is the producer: it gives its registers away (setmaxnreg 24) and one thread issues
//     the TMA loads: Q once (its own mbarrier), then every K and V tile of BN = 128 keys into a ring
//     of STAGES slots with the 128-byte swizzle, each slot with a "full" mbarrier for K, one for V
//     (the scores can start before V lands) and an "empty" one the consumers release it on. Tiles a
//     causal block never sees (past its last row's diagonal) are never loaded.
//   - warpgroups 1 and 2 are consumers (setmaxnreg 240), 64 query rows each. Per tile t:
//     S = Q K_t^T on wgmma m64n128k16 from shared memory (both K-major), issued together with
//     O += P_{t-1} V_{t-1} on wgmma m64nDk16 (P from registers, V MN-major), so that the online
//     softmax of S_t (masks only where the tile crosses Sk or the diagonal, exp2 with scale * log2(e)
//     folded) runs while the tensor cores do P V; then O is rescaled and S_t becomes the 16-bit
//     A fragments P_t in registers (the accumulator's fragment is the A operand's: no shared memory).
//   - with `pingpong`, the two warpgroups take turns to issue their wgmmas (FlashAttention-3's
//     ping-pong: one's softmax under the other's MMAs; aw_turn_wait / aw_turn_pass);
//   - the end: O / l into the warpgroup's own rows of the Q tile, then 16-byte stores clipped at Sq.
// Registers a consumer thread: S 64 + O D / 2 fp32 + P 32; shared memory (128 + 2 STAGES 128) D 2 bytes.
// docs/performance.md, "CUDA C++ / attention".
#include "gemm_common.cuh"

namespace kl {
#include "attention_wgmma_ops.cuh"

constexpr int AW_BM = 128;        // query rows a CTA: two consumer warpgroups x 64
constexpr int AW_BN = 128;        // keys a K / V tile
constexpr int AW_THREADS = 384;   // producer warpgroup + two consumer warpgroups

template <int D, int STAGES>
struct AwCfg {
  static constexpr int Q_BYTES = AW_BM * D * 2;      // D / 64 slabs of 128 rows x 128 bytes
  static constexpr int KV_BYTES = AW_BN * D * 2;     // one K (or V) tile: D / 64 slabs of 128 x 128 B
  static constexpr int Q_SLAB = AW_BM * 128, KV_SLAB = AW_BN * 128;
  static constexpr int SMEM = Q_BYTES + 2 * STAGES * KV_BYTES + 8 * (1 + 3 * STAGES) + 1024;
};

// The keys query row i sees: [0, aw_limit(i)).
__device__ __forceinline__ int aw_limit(int i, int Sq, int Sk, int causal) {
  return causal ? min(Sk, i + 1 + Sk - Sq) : Sk;
}

template <int N>
__device__ __forceinline__ void fence_frags(u32 (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

// S = Q K^T for this warpgroup's 64 rows (q: its rows of the Q tile) and one K tile, issued as one
// wgmma group. Both operands K-major with the 128-byte swizzle: k-step kk is 32 bytes into slab kk / 4.
template <bool BF16, int D>
__device__ __forceinline__ void aw_qk(float (&s)[64], u32 q, u32 k) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const u64 da = smem_desc_sw128(q + (kk / 4) * AW_BM * 128 + (kk % 4) * 32, 16, 1024);
    const u64 db = smem_desc_sw128(k + (kk / 4) * AW_BN * 128 + (kk % 4) * 32, 16, 1024);
    if (BF16) wgmma_ss_kk_m64n128k16_bf16(s, da, db, kk > 0);
    else wgmma_ss_kk_m64n128k16_f16(s, da, db, kk > 0);
  }
  wgmma_commit();
  fence_regs(s);
}

// O += P V for one V tile, one wgmma group: P the register A operand (16 keys a step), V MN-major
// (D contiguous): k-step kk is 16 key rows (2 KB) on; the next 64 columns of D one slab (LBO) on.
template <bool BF16, int D>
__device__ __forceinline__ void aw_pv(float (&o)[D / 2], const u32 (&p)[AW_BN / 16][4], u32 v) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < AW_BN / 16; ++kk) {
    const u64 db = smem_desc_sw128(v + kk * 2048, AW_BN * 128, 1024);
    if constexpr (D == 128) {
      if (BF16) wgmma_rs_mn_m64n128k16_bf16(o, p[kk], db);
      else wgmma_rs_mn_m64n128k16_f16(o, p[kk], db);
    } else {
      if (BF16) wgmma_rs_mn_m64n64k16_bf16(o, p[kk], db);
      else wgmma_rs_mn_m64n64k16_f16(o, p[kk], db);
    }
  }
  wgmma_commit();
  fence_regs(o);
}

// The online softmax of one score tile in place: masked where `mask` (the tile crosses Sk or a row's
// diagonal), the new row maxima (a row is the 32 values of a quad of lanes, two shuffles), the
// factors c that rescale the old sums and O, and S -> 2^(S scale log2(e) - m) with the row sums.
// Rows: this lane's row (values 4j, 4j + 1) and the row 8 below (4j + 2, 4j + 3), column 8j + 2 t4 + e.
__device__ __forceinline__ void aw_softmax(float (&s)[64], float (&m)[2], float (&l)[2], float (&c)[2], bool mask,
                                           int n0, int t4, int lim0, int lim1, float scale_log2) {
  if (mask) {
#pragma unroll
    for (int j = 0; j < AW_BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n0 + j * 8 + 2 * t4 + e;
        if (col >= lim0) s[4 * j + e] = __int_as_float(0xff800000);
        if (col >= lim1) s[4 * j + 2 + e] = __int_as_float(0xff800000);
      }
  }
  float mx[2] = {s[0], s[2]};
#pragma unroll
  for (int j = 0; j < AW_BN / 8; ++j) {
    mx[0] = fmaxf(mx[0], fmaxf(s[4 * j], s[4 * j + 1]));
    mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    // every row sees key 0 in tile 0, so m is finite from the first tile on (c = 2^-inf = 0 there);
    // a row fully masked in a later tile keeps its m (c = 1, P = 0)
    const float mn = fmaxf(m[r], mx[r] * scale_log2);
    c[r] = exp2f(m[r] - mn);
    m[r] = mn;
    l[r] *= c[r];
  }
#pragma unroll
  for (int j = 0; j < AW_BN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e / 2;
      s[4 * j + e] = exp2f(fmaf(s[4 * j + e], scale_log2, -m[r]));
      l[r] += s[4 * j + e];  // this lane's share of the row sum; the quad's shares are added at the end
    }
}

// P (fp32, in S's registers) -> the 16-bit A fragments of O += P V: 16-key step kk covers S's 8-column
// groups 2 kk (registers 0, 1: this lane's row, the row 8 below) and 2 kk + 1 (registers 2, 3).
template <bool BF16>
__device__ __forceinline__ void aw_to_frags(const float (&s)[64], u32 (&p)[AW_BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < AW_BN / 16; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[kk][e] = pack2<BF16>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
}

template <int D>
__device__ __forceinline__ void aw_rescale(float (&o)[D / 2], const float (&c)[2]) {
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    o[4 * j] *= c[0];
    o[4 * j + 1] *= c[0];
    o[4 * j + 2] *= c[1];
    o[4 * j + 3] *= c[1];
  }
}

// Byte offset of 16-byte chunk ch (8 columns) of row r in a tile of `rows` rows stored as D / 64 slabs
// of 128-byte rows with the 128-byte swizzle (chunk ^= row % 8), as TMA wrote Q.
__device__ __forceinline__ u32 aw_chunk(int r, int ch, int rows) {
  return (ch / 8) * rows * 128 + r * 128 + (((ch % 8) ^ (r % 8)) << 4);
}

// The producer: Q once, then K and V of every tile the block sees, each into the next ring slot once
// the consumers have released it.
template <int D, int STAGES>
__device__ __forceinline__ void aw_produce(const TmaDesc* tq, const TmaDesc* tk, const TmaDesc* tv, u32 sQ, u32 sK,
                                           u32 sV, u32 bars, int m0, int h, int hk, int b, int tiles) {
  using Cfg = AwCfg<D, STAGES>;
  const u32 bar_q = bars, full_k = bars + 8, full_v = full_k + 8 * STAGES, empty = full_v + 8 * STAGES;
  mbar_arrive_expect_tx(bar_q, Cfg::Q_BYTES);
#pragma unroll
  for (int j = 0; j < D / 64; ++j) tma_load_4d(sQ + j * Cfg::Q_SLAB, tq, 64 * j, m0, h, b, bar_q);
  for (int t = 0; t < tiles; ++t) {
    const int st = t % STAGES;
    mbar_wait(empty + 8 * st, ((t / STAGES) & 1) ^ 1);
    mbar_arrive_expect_tx(full_k + 8 * st, Cfg::KV_BYTES);
#pragma unroll
    for (int j = 0; j < D / 64; ++j)
      tma_load_4d(sK + st * Cfg::KV_BYTES + j * Cfg::KV_SLAB, tk, 64 * j, t * AW_BN, hk, b, full_k + 8 * st);
    mbar_arrive_expect_tx(full_v + 8 * st, Cfg::KV_BYTES);
#pragma unroll
    for (int j = 0; j < D / 64; ++j)
      tma_load_4d(sV + st * Cfg::KV_BYTES + j * Cfg::KV_SLAB, tv, 64 * j, t * AW_BN, hk, b, full_v + 8 * st);
  }
}

// O / l of this warpgroup's 64 rows, rounded, into its rows of the Q tile (its own wgmmas are done
// reading them), then out as 16-byte stores of the rows below Sq.
template <bool BF16, int D>
__device__ __forceinline__ void aw_store(float (&o)[D / 2], float (&l)[2], u32 sQ, unsigned char* smem_base,
                                         u32 smem_base_u32, u16* __restrict__ out, long long os, int m0, int Sq,
                                         int cw) {
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = 1.f / l[r];
  }
  unsigned char* q = smem_base + (sQ - smem_base_u32);
  const int lr = cw * 64 + warp * 16 + g;  // this lane's rows of the tile: lr and lr + 8
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<u32*>(q + aw_chunk(lr + 8 * h, j, AW_BM) + 4 * t4) =
          pack2<BF16>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
  if (cw == 0) named_bar_sync<1>(128);
  else named_bar_sync<2>(128);
#pragma unroll
  for (int i = 0; i < 64 * (D / 8) / 128; ++i) {
    const int c = tid + i * 128, r = cw * 64 + c / (D / 8), ch = c % (D / 8), row = m0 + r;
    if (row < Sq)
      *reinterpret_cast<uint4*>(out + row * os + ch * 8) = *reinterpret_cast<const uint4*>(q + aw_chunk(r, ch, AW_BM));
  }
}

// FlashAttention-3's ping-pong between the two consumer warpgroups (`pingpong` != 0): a warpgroup
// issues its batch of wgmmas only on its turn (named barrier 3 + cw, 256 threads: its 128 wait, the
// other's 128 arrive) and hands the turn over right after, so one warpgroup's softmax runs under the
// other's MMAs. Both warpgroups issue tiles + 1 batches; warpgroup 1 hands warpgroup 0 the first
// turn and skips its own last hand-over, so every bar.sync meets exactly one set of arrivals.
__device__ __forceinline__ void aw_turn_wait(int pingpong, int cw) {
  if (!pingpong) return;
  if (cw == 0) named_bar_sync<3>(256);
  else named_bar_sync<4>(256);
}
__device__ __forceinline__ void aw_turn_pass(int pingpong, int cw, bool last) {
  if (!pingpong) return;
  if (cw == 0) named_bar_arrive<4>(256);
  else if (!last) named_bar_arrive<3>(256);
}

// Grid: (query blocks of 128, Hq, B); 384 threads; dynamic shared memory AwCfg<D, STAGES>::SMEM.
template <bool BF16, int D, int STAGES>
__global__ void __launch_bounds__(AW_THREADS, 1)
attention_ws_kernel(const __grid_constant__ TmaDesc tmQ, const __grid_constant__ TmaDesc tmK,
                    const __grid_constant__ TmaDesc tmV, u16* __restrict__ O, int group, int Sq, int Sk, long long ob,
                    long long oh, long long os, int causal, int pingpong) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = AwCfg<D, STAGES>;
  constexpr float SCALE_LOG2 = (D == 64 ? 0.125f : 0.08838834764831845f) * 1.4426950408889634f;
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzled TMA destinations and wgmma operands want 1024-byte aligned slabs
  const u32 raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
  const u32 sQ = base, sK = sQ + Cfg::Q_BYTES, sV = sK + STAGES * Cfg::KV_BYTES;
  const u32 bars = sV + STAGES * Cfg::KV_BYTES;  // Q, then full K, full V and empty, STAGES each
  const u32 full_k = bars + 8, full_v = full_k + 8 * STAGES, empty = full_v + 8 * STAGES;

  const int h = blockIdx.y, b = blockIdx.z, hk = h / group;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * AW_BM;  // the last query blocks (most keys when causal) first
  const int n_end = aw_limit(min(m0 + AW_BM, Sq) - 1, Sq, Sk, causal);  // the last row sees the most keys
  const int tiles = (n_end + AW_BN - 1) / AW_BN;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    tma_prefetch_desc(&tmQ);
    tma_prefetch_desc(&tmK);
    tma_prefetch_desc(&tmV);
    mbar_init(bars, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_k + 8 * s, 1);  // the producer's arrive.expect_tx; the bytes complete it
      mbar_init(full_v + 8 * s, 1);
      mbar_init(empty + 8 * s, 8);   // lane 0 of each of the 8 consumer warps
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (threadIdx.x == 0) aw_produce<D, STAGES>(&tmQ, &tmK, &tmV, sQ, sK, sV, bars, m0, h, hk, b, tiles);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  const int cw = wg - 1, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, t4 = lane % 4;
  const int row0 = m0 + cw * 64 + warp * 16 + lane / 4;  // this lane's rows: row0 and row0 + 8
  const int lim0 = aw_limit(row0, Sq, Sk, causal), lim1 = aw_limit(row0 + 8, Sq, Sk, causal);
  const int unmasked = aw_limit(m0 + cw * 64, Sq, Sk, causal);  // keys below it: seen by every row here
  const u32 q = sQ + cw * 64 * 128;                              // this warpgroup's rows of Q

  float s[64], o[D / 2], m[2] = {__int_as_float(0xff800000), __int_as_float(0xff800000)}, l[2] = {0.f, 0.f}, c[2];
  u32 p[AW_BN / 16][4];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;

  if (pingpong && cw == 1) named_bar_arrive<3>(256);  // warpgroup 0 issues first
  mbar_wait(bars, 0);
  mbar_wait(full_k, 0);
  aw_turn_wait(pingpong, cw);
  aw_qk<BF16, D>(s, q, sK);
  aw_turn_pass(pingpong, cw, false);
  wgmma_wait<0>();
  fence_regs(s);
  aw_softmax(s, m, l, c, AW_BN > unmasked, 0, t4, lim0, lim1, SCALE_LOG2);
  aw_to_frags<BF16>(s, p);
  for (int t = 1; t < tiles; ++t) {
    const int st = t % STAGES, pt = (t - 1) % STAGES;
    mbar_wait(full_k + 8 * st, (t / STAGES) & 1);
    mbar_wait(full_v + 8 * pt, ((t - 1) / STAGES) & 1);
    aw_turn_wait(pingpong, cw);
    aw_qk<BF16, D>(s, q, sK + st * Cfg::KV_BYTES);
    aw_pv<BF16, D>(o, p, sV + pt * Cfg::KV_BYTES);
    aw_turn_pass(pingpong, cw, false);
    wgmma_wait<1>();  // S_t is done; P_{t-1} V_{t-1} may still run
    fence_regs(s);
    aw_softmax(s, m, l, c, t * AW_BN + AW_BN > unmasked, t * AW_BN, t4, lim0, lim1, SCALE_LOG2);
    wgmma_wait<0>();
    fence_regs(o);
    fence_frags(p);
    if (lane == 0) mbar_arrive(empty + 8 * pt);  // K_{t-1} and V_{t-1} are read
    aw_rescale<D>(o, c);
    aw_to_frags<BF16>(s, p);
  }
  const int lt = (tiles - 1) % STAGES;
  mbar_wait(full_v + 8 * lt, ((tiles - 1) / STAGES) & 1);
  aw_turn_wait(pingpong, cw);
  aw_pv<BF16, D>(o, p, sV + lt * Cfg::KV_BYTES);
  aw_turn_pass(pingpong, cw, true);
  wgmma_wait<0>();
  fence_regs(o);
  fence_frags(p);
  if (lane == 0) mbar_arrive(empty + 8 * lt);
  aw_store<BF16, D>(o, l, sQ, smem_raw, raw, O + b * ob + h * oh, os, m0, Sq, cw);
#endif
}

}  // namespace kl
