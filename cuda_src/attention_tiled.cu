// attention, tiled (sm_80+): the FlashAttention-2 forward on mma.sync tensor cores, K / V tiles by
// cp.async (no TMA), so any stride whose rows start on 16 bytes. O = softmax(Q K^T / sqrt(D) + mask) V
// per head; Q [B, Hq, Sq, D], K / V [B, Hkv, Sk, D], O [B, Hq, Sq, D]; query head h reads K / V head
// h / group; causal is bottom-right aligned (query i sees key j iff j <= i + Sk - Sq).
#include "gemm_common.cuh"

namespace kl {

constexpr int AT_BN = 64;  // keys a K / V tile

// Element offset of 16-byte chunk c of row `row` in a tile of D-element rows: chunk ^= row % 8, so the
// 8 row addresses of one ldmatrix matrix (8 consecutive rows, one logical chunk) hit 8 distinct bank
// groups, and so do the 16-byte cp.async stores.
template <int D>
__device__ __forceinline__ int at_off(int row, int c) {
  return row * D + ((c ^ (row & 7)) << 3);
}

// Rows [r0, r0 + ROWS) of a head (row stride ld elements) into a swizzled shared-memory tile by
// 16-byte cp.async; rows at or past S are zero-filled (a copy of 0 source bytes reads nothing).
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void at_load_tile(u16* tile, const u16* __restrict__ g, long long ld, int r0, int S) {
  constexpr int CH = D / 8;
  static_assert(ROWS * CH % THREADS == 0, "a tile is a whole number of chunks a thread");
#pragma unroll
  for (int i = 0; i < ROWS * CH / THREADS; ++i) {
    const int c = threadIdx.x + i * THREADS, row = c / CH, ch = c % CH;
    const bool in = r0 + row < S;
    cp_async_16(smem_u32(tile + at_off<D>(row, ch)), in ? (const void*)(g + (r0 + row) * ld + ch * 8) : (const void*)g,
                in ? 16 : 0);
  }
}

// The keys query row i sees: [0, at_limit(i)).
__device__ __forceinline__ int at_limit(int i, int Sq, int Sk, int causal) {
  return causal ? min(Sk, i + 1 + Sk - Sq) : Sk;
}

// attention_tiled_kernel: a CTA takes BM = 16 x WARPS query rows of one head, each warp 16 of them
// (one m16 row of MMA tiles), and walks the keys in tiles of 64 up to the last row's limit (causal
// tiles above the diagonal are never visited; the blocks with the most keys are launched first).
// Q is staged once and kept in registers as MMA A fragments; K and V tiles are double-buffered in
// shared memory (the copy of tile t + 1 runs under the MMAs of tile t). Per tile a warp computes
// S = Q K^T (16 x 64, fp32, ldmatrix of K's rows as the col-major B operand), masks only tiles that
// cross some row's limit, updates the row max m and sum l (each row lives in a quad of 4 lanes:
// two shuffles), computes P = 2^(S * log2(e) / sqrt(D) - m) straight into the A fragments of the
// second product (the C layout of two 8-key tiles is the A layout of one 16-key step) and
// accumulates O += P V (ldmatrix.trans of V's rows). O / l goes out through the warp's rows of the Q
// tile as 16-byte stores. Grid: (query blocks, Hq, B).
template <bool BF16, int D, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, 1)
attention_tiled_kernel(const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
                       u16* __restrict__ O, int group, int Sq, int Sk, long long qb, long long qh, long long qs,
                       long long kb, long long kh, long long ks, long long vb, long long vh, long long vs,
                       long long ob, long long oh, long long os, int causal) {
  constexpr int BM = 16 * WARPS, BN = AT_BN, THREADS = WARPS * 32;
  constexpr int KD = D / 16, NT = BN / 8, DT = D / 8;  // 16-deep steps over D, 8-key tiles, 8-wide O tiles
  constexpr float SCALE_LOG2 = (D == 64 ? 0.125f : 0.08838834764831845f) * 1.4426950408889634f;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  u16* sQ = reinterpret_cast<u16*>(smem_raw);  // [BM][D], later the O tile
  u16* sK = sQ + BM * D;                       // [2][BN][D]
  u16* sV = sK + 2 * BN * D;                   // [2][BN][D]

  const int h = blockIdx.y, b = blockIdx.z, hk = h / group;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * BM;  // the last query blocks (most keys when causal) first
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t4 = lane % 4;
  const u16* q = Q + b * qb + h * qh;
  const u16* k = K + b * kb + hk * kh;
  const u16* v = V + b * vb + hk * vh;
  const int n_end = at_limit(min(m0 + BM, Sq) - 1, Sq, Sk, causal);  // the last row sees the most keys
  const int tiles = (n_end + BN - 1) / BN;
  const int unmasked = at_limit(m0, Sq, Sk, causal);  // keys below this are visible to every row here
  const int row0 = m0 + warp * 16 + g;                // this lane's rows: row0 and row0 + 8
  const int lim0 = at_limit(row0, Sq, Sk, causal), lim1 = at_limit(row0 + 8, Sq, Sk, causal);

  at_load_tile<D, BM, THREADS>(sQ, q, qs, m0, Sq);
  at_load_tile<D, BN, THREADS>(sK, k, ks, 0, Sk);
  at_load_tile<D, BN, THREADS>(sV, v, vs, 0, Sk);
  cp_async_commit();

  u32 qf[KD][4];
  float o[DT][4], m[2] = {__int_as_float(0xff800000), __int_as_float(0xff800000)}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<0>();  // this thread's copies of tile t (and Q) have landed
    // every thread's copies are visible, and every warp is done with tile t - 1, whose stage the
    // copy of tile t + 1 overwrites
    __syncthreads();
    if (t + 1 < tiles) {
      const int st = (t + 1) % 2;
      at_load_tile<D, BN, THREADS>(sK + st * BN * D, k, ks, (t + 1) * BN, Sk);
      at_load_tile<D, BN, THREADS>(sV + st * BN * D, v, vs, (t + 1) * BN, Sk);
    }
    cp_async_commit();
    if (t == 0) {
#pragma unroll
      for (int kk = 0; kk < KD; ++kk)
        ldmatrix_x4(smem_u32(sQ + at_off<D>(warp * 16 + lane % 16, kk * 2 + lane / 16)), qf[kk][0], qf[kk][1],
                    qf[kk][2], qf[kk][3]);
    }
    const u16* tK = sK + (t % 2) * BN * D;
    const u16* tV = sV + (t % 2) * BN * D;

    // S = Q K^T: K's rows (keys) are the columns of B; one ldmatrix_x4 gives two 8-key tiles' B
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
#pragma unroll
      for (int jp = 0; jp < NT / 2; ++jp) {
        u32 b0, b1, b2, b3;
        ldmatrix_x4(smem_u32(tK + at_off<D>(jp * 16 + (lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2)), b0, b1,
                    b2, b3);
        mma_16816<BF16>(s[2 * jp], qf[kk], b0, b1);
        mma_16816<BF16>(s[2 * jp + 1], qf[kk], b2, b3);
      }

    const int n0 = t * BN;
    if (n0 + BN > unmasked) {  // a tile crossing some row's limit (the diagonal, the ragged end)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n0 + j * 8 + 2 * t4 + e;
          if (col >= lim0) s[j][e] = __int_as_float(0xff800000);
          if (col >= lim1) s[j][2 + e] = __int_as_float(0xff800000);
        }
    }

    // online softmax: rows row0 (values 0, 1) and row0 + 8 (values 2, 3), each over a quad of lanes
    float mx0 = s[0][0], mx1 = s[0][2];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
      mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off *= 2) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    // every row sees key 0 in tile 0, so m is finite from the first tile on (corr = 2^-inf = 0 there)
    const float mn0 = fmaxf(m[0], mx0 * SCALE_LOG2), mn1 = fmaxf(m[1], mx1 * SCALE_LOG2);
    const float c0 = exp2f(m[0] - mn0), c1 = exp2f(m[1] - mn1);
    m[0] = mn0;
    m[1] = mn1;
    l[0] *= c0;
    l[1] *= c1;
#pragma unroll
    for (int j = 0; j < DT; ++j) {
      o[j][0] *= c0;
      o[j][1] *= c0;
      o[j][2] *= c1;
      o[j][3] *= c1;
    }
    u32 pf[BN / 16][4];  // P as the A fragments of O += P V, 16 keys a step
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float p0 = exp2f(fmaf(s[j][0], SCALE_LOG2, -mn0)), p1 = exp2f(fmaf(s[j][1], SCALE_LOG2, -mn0));
      const float p2 = exp2f(fmaf(s[j][2], SCALE_LOG2, -mn1)), p3 = exp2f(fmaf(s[j][3], SCALE_LOG2, -mn1));
      l[0] += p0 + p1;  // this lane's share of the row sums; the quad's shares are added at the end
      l[1] += p2 + p3;
      pf[j / 2][(j % 2) * 2] = pack2<BF16>(p0, p1);
      pf[j / 2][(j % 2) * 2 + 1] = pack2<BF16>(p2, p3);
    }

    // O += P V: V's rows (keys) are B's rows; ldmatrix.trans gives two 8-wide O tiles' B
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int dp = 0; dp < DT / 2; ++dp) {
        u32 b0, b1, b2, b3;
        ldmatrix_x4_trans(smem_u32(tV + at_off<D>(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, dp * 2 + lane / 16)), b0,
                          b1, b2, b3);
        mma_16816<BF16>(o[2 * dp], pf[kk], b0, b1);
        mma_16816<BF16>(o[2 * dp + 1], pf[kk], b2, b3);
      }
  }
  cp_async_wait<0>();

  // O / l, rounded, into this warp's 16 rows of the Q tile (only this warp read them), then out as
  // 16-byte stores of whole rows
#pragma unroll
  for (int off = 1; off < 4; off *= 2) {
    l[0] += __shfl_xor_sync(0xffffffffu, l[0], off);
    l[1] += __shfl_xor_sync(0xffffffffu, l[1], off);
  }
  const float inv0 = 1.f / l[0], inv1 = 1.f / l[1];
  const int wr = warp * 16 + g;
#pragma unroll
  for (int j = 0; j < DT; ++j) {
    *reinterpret_cast<u32*>(sQ + at_off<D>(wr, j) + 2 * t4) = pack2<BF16>(o[j][0] * inv0, o[j][1] * inv0);
    *reinterpret_cast<u32*>(sQ + at_off<D>(wr + 8, j) + 2 * t4) = pack2<BF16>(o[j][2] * inv1, o[j][3] * inv1);
  }
  __syncwarp();
  u16* out = O + b * ob + h * oh;
#pragma unroll
  for (int i = 0; i < 16 * DT / 32; ++i) {
    const int c = lane + i * 32, r = c / DT, ch = c % DT, row = m0 + warp * 16 + r;
    if (row < Sq)
      *reinterpret_cast<uint4*>(out + row * os + ch * 8) =
          *reinterpret_cast<const uint4*>(sQ + at_off<D>(warp * 16 + r, ch));
  }
}

}  // namespace kl
