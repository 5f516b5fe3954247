// softmax, split: one long row across C co-resident blocks of a persistent cooperative grid that
// exchange (max, sum) through 64-bit slots in global memory; one HBM read and one write.
#include "softmax_common.cuh"

namespace kl {

// ------------------------------------------------------------------------------------------------
// Split: one read and one write of long rows on a persistent cooperative grid (the CUDA C++
// counterpart of triton_src/softmax.py softmax_split_kernel). Every row is cut into C chunks of
// CHUNK columns (NT threads x CHUNK / NT values held in fp32 registers: 16384 as 512 x 32 or 256 x
// 64; the shorter chunks 8192 and 4096 on 256 threads spread a few long rows over more CTAs, one
// CTA a chunk, so that M x C units cover the SMs; dispatch_softmax.py says when). Unit u = blockIdx.x +
// k * gridDim.x (round k) is chunk u % C of row u / C. A unit loads its chunk, reduces it to
// (m, s) = (max, sum exp(x - m)), publishes the pair as ONE 64-bit word in slot[u] (zeroed on the
// stream before the launch), then warp 0 polls the row's C slots until none is zero, merges them
// into the row's (M, S) and the block writes exp(x - m) * exp(m - M) / S from its registers.
//
// The payload is its own flag: 0 is never a partial (a finite m has s >= 1, its own max giving
// exp(0); m = -inf has the bits of -inf), and a 64-bit relaxed store is seen whole or not at all,
// so no fence and no counter. Polls are ld.relaxed.gpu (served by L2, never a stale L1 line).
// No deadlock: the host launches cooperatively (all gridDim.x blocks resident, or the launch is
// refused) and gridDim.x is a multiple of C, so the C units of a row fall in one round on C
// distinct blocks; by induction every block reaches every round. Bounded spin: after max_spin
// polls a block gives up, writes NaN over its chunk and stops waiting in later rounds (budget 0),
// so a grid that is not resident after all shows as a verification FAIL, not a hang.
// -inf rules: a chunk of only -inf has m = -inf, s = 0 (exponentials against 0, never -inf - -inf)
// and contributes nothing; a row of only -inf has S = 0 and gives NaN, as torch does.
constexpr int kSplitThreads = 512;                          // default NT (256 is the other instance)
constexpr int kSplitChunk = 16384;                           // default CHUNK: columns per unit
constexpr int kSplitMinBlocks = 2;                           // launch bound: <= 65536 / (2 NT) registers

__device__ __forceinline__ void slot_store(unsigned long long* p, unsigned long long w) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ unsigned long long slot_load(const unsigned long long* p) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
  return w;
}

template <typename T, int VEC, int NT = kSplitThreads, int CHUNK = kSplitChunk>
__global__ void __launch_bounds__(NT, kSplitMinBlocks)
    softmax_split_kernel(const T* __restrict__ x, T* __restrict__ y, unsigned long long* __restrict__ slots, int N,
                         i64 sx, i64 sy, int C, i64 n_units, int max_spin) {
  static_assert(CHUNK % (NT * VEC) == 0, "CHUNK: whole vectors for every thread");
  constexpr int CH = CHUNK / NT / VEC;
  __shared__ float red_max[32];
  __shared__ float red_sum[32];
  __shared__ float row_state[3];  // (M, S, ok) of the current round, written by warp 0
  // blockDim.x == NT (the host launches nothing else): compile-time strides keep the per-thread
  // offsets immediates, so the chunk's registers leave room for the rest (<= 64 / 128 in total).
  constexpr int nt = NT, nwarps = NT / 32;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  int budget = max_spin;  // meaningful in warp 0 only (the poller)
  for (i64 u = blockIdx.x; u < n_units; u += gridDim.x) {
    const i64 row = u / C;
    const int chunk = (int)(u - row * C);
    const int begin = chunk * CHUNK;  // a multiple of VEC: 16-byte aligned when rows are
    const int len = N - begin < CHUNK ? N - begin : CHUNK;
    float v[CH][VEC];
    load_row<T, VEC, CH>(x + row * sx + begin, len, t, nt, v);

    float m = warp_max(thread_max<VEC, CH>(v));
    if (lane == 0) red_max[warp] = m;
    // Barrier 1: every warp's max is in red_max before any warp reads it.
    __syncthreads();
    m = warp_max(lane < nwarps ? red_max[lane] : KL_NEG_INF);
    const float shift = m == KL_NEG_INF ? 0.f : m;  // an all -inf chunk: exp(-inf - 0) = 0, s = 0
    float s = warp_sum(thread_exp_sum<VEC, CH>(v, shift));
    if (lane == 0) red_sum[warp] = s;
    // Barrier 2: every warp's sum is in red_sum before any warp reads it.
    __syncthreads();

    if (warp == 0) {
      s = warp_sum(lane < nwarps ? red_sum[lane] : 0.f);
      unsigned long long* rs = slots + row * C;
      if (lane == 0)
        slot_store(slots + u, ((unsigned long long)__float_as_uint(m) << 32) | __float_as_uint(s));
      bool ok = false;
      for (int polls = 0; polls < budget; ++polls) {
        bool mine = true;
        for (int j = lane; j < C; j += 32) mine = mine && slot_load(rs + j) != 0ull;
        if (__all_sync(0xffffffffu, mine)) {
          ok = true;
          break;
        }
      }
      float gm = KL_NEG_INF, gs = 0.f;
      if (ok) {
        for (int j = lane; j < C; j += 32) {  // fixed order per lane, then a fixed shuffle tree
          const unsigned long long w = slot_load(rs + j);
          online_merge(gm, gs, __uint_as_float((unsigned)(w >> 32)), __uint_as_float((unsigned)w));
        }
        warp_online_merge(gm, gs);
      } else {
        budget = 0;  // timed out: write NaN now and stop waiting in later rounds
      }
      if (lane == 0) {
        row_state[0] = gm;
        row_state[1] = gs;
        row_state[2] = ok ? 1.f : 0.f;
      }
    }
    // Barrier 3: the row's state is in row_state before any warp reads it. (Round k + 1 rewrites
    // red_max / red_sum / row_state only after barriers every thread reaches after these reads.)
    __syncthreads();
    const float M = row_state[0], S = row_state[1];
    const float nan = __int_as_float(0x7fffffff);
    float k;
    if (row_state[2] == 0.f || S == 0.f)
      k = nan;  // timed out, or a row of only -inf (0 / 0 as torch)
    else
      k = m == KL_NEG_INF ? 0.f : exp_shifted(m, M) / S;
    thread_scale<VEC, CH>(v, k);
    store_row<T, VEC, CH>(y + row * sy + begin, len, t, nt, v);
  }
}

}  // namespace kl
