// softmax, persist: ONE read and ONE write of HBM per row, the row held in shared memory, and the
// NEXT row's loads streaming in while the current row is normalised and written.
//
// Persistent grid (the CTAs that fit the SMs at once); CTA b runs rows b, b + gridDim.x, ... A row's
// body (its whole 16-byte vectors) lives in one shared-memory buffer at vector index v (byte 16 v),
// split into kPersistChunks fixed chunks of `per` vectors (the same byte ranges for every row, so a
// row's chunk k only ever overwrites the previous row's chunk k). Two mbarriers per chunk:
//   full[k]   (1 arrival + the chunk's bytes): the bulk copy of chunk k of the current row landed;
//   empty[k]  (blockDim.x arrivals): every thread has read chunk k of the current row in pass 2.
// Per row (iteration it, parity it & 1 of every barrier: each completes exactly one phase a row):
//   pass 1  (max, sum) online, chunk by chunk as the chunks land (full[k]);
//   merge   warp shuffles, one slot per warp in shared memory (double-buffered by parity), one
//           __syncthreads;
//   pass 2  exp(x - max) / sum chunk by chunk, 16-byte stores; after chunk k every thread arrives on
//           empty[k]; thread 0, one chunk behind, waits for empty[k - 1] and issues the NEXT row's
//           chunk k - 1 into the same bytes. So HBM keeps reading while the row is written, and the
//           next row's pass 1 finds most of its chunks landed (no per-row launch, barrier-init or
//           first-byte latency; the cluster kernel's C = 1 CTA loads nothing during its pass 2).
// Any row alignment: the < VEC elements before the first 16-byte boundary (head) and after the last
// whole vector (tail) are held in registers of threads 0 .. VEC - 2, never in shared memory, so the
// buffer's layout does not depend on the row's alignment. Pass 2 stores 16-byte vectors when y's row
// has x's alignment, else element by element. An empty chunk's full[k] phase completes by a plain
// arrival, so the phases stay in step for any N (N < VEC: no body at all).
// sm_80 (no bulk copies / mbarriers): a plain three-sweep loop over global memory (the planner
// never picks this kernel there; the body only keeps the compute_80 build whole).
#include "common.cuh"
#include "ptx.cuh"

namespace kl {

constexpr int kPersistChunks = 8;  // bulk copies per row, each on its own full/empty mbarrier pair

// Issue chunk k of a row whose body (16-byte aligned) starts at `body` and has `nvec` vectors.
__device__ __forceinline__ void persist_issue(int k, int per, int nvec, const void* body, u32 buf, u32 full) {
  const int v0 = k * per, v1 = min(nvec, v0 + per);
  if (v0 < v1) {
    const u32 bytes = (u32)(v1 - v0) * 16u;
    mbar_arrive_expect_tx(full, bytes);
    bulk_g2s(buf + (u32)v0 * 16u, static_cast<const unsigned char*>(body) + (i64)v0 * 16, bytes, full);
  } else {
    mbar_arrive(full);  // nothing to copy: the phase completes now
  }
}

template <typename T>
__global__ void __launch_bounds__(512) KL_CLUSTER_DIMS(1)
    softmax_persist_kernel(const T* __restrict__ x, T* __restrict__ y, i64 M, int N, i64 sx, i64 sy) {
  constexpr int VEC = 16 / sizeof(T);
  typedef typename RawVec<T, VEC>::type R;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = blockDim.x >> 5, nt = blockDim.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char kl_smem_body[];
  __shared__ __align__(8) unsigned long long full[kPersistChunks];
  __shared__ __align__(8) unsigned long long empty[kPersistChunks];
  __shared__ float red_m[2][32];
  __shared__ float red_s[2][32];
  const R* body = reinterpret_cast<const R*>(kl_smem_body);  // vector v of the current row's body
  const u32 buf = smem_u32(kl_smem_body);
  // Fixed chunk geometry: every row has at most N / VEC whole vectors.
  const int per = (N / VEC + kPersistChunks - 1) / kPersistChunks;
  const i64 step = gridDim.x;
  i64 row = blockIdx.x;  // the host launches at most M CTAs
  if (t == 0) {
    for (int k = 0; k < kPersistChunks; ++k) {
      mbar_init(smem_u32(&full[k]), 1);
      mbar_init(smem_u32(&empty[k]), (u32)nt);
    }
    mbar_fence_init();  // the initialised barriers are visible to the async proxy (the copy engine)
    if (row < M) {      // always (grid <= M); a CTA past M must not leave copies in flight at exit
      const T* xr = x + row * sx;
      const int mis = (int)((reinterpret_cast<unsigned long long>(xr) & 15) / sizeof(T));
      const int head = mis ? min(VEC - mis, N) : 0;
      for (int k = 0; k < kPersistChunks; ++k)
        persist_issue(k, per, (N - head) / VEC, xr + head, buf, smem_u32(&full[k]));
    }
  }
  // Barrier: the mbarriers are initialised before any thread polls or arrives on them.
  __syncthreads();

  for (int it = 0; row < M; ++it, row += step) {
    const u32 par = (u32)(it & 1);
    const T* xr = x + row * sx;
    T* yr = y + row * sy;
    const int mis = (int)((reinterpret_cast<unsigned long long>(xr) & 15) / sizeof(T));
    const int head = mis ? min(VEC - mis, N) : 0;  // elements before the first 16-byte boundary
    const int nvec = (N - head) / VEC;              // whole vectors of the body (in shared memory)
    const int tail = head + nvec * VEC;             // first element of the tail (< VEC elements)
    float m = KL_NEG_INF, s = 0.f;
    // Head and tail: one element per thread, kept in a register for pass 2.
    float hv = 0.f, tv = 0.f;
    const bool has_h = t < head, has_t = t < N - tail;
    if (has_h) {
      hv = to_float(xr[t]);
      float f[1] = {hv};
      online_add<1>(m, s, f);
    }
    if (has_t) {
      tv = to_float(xr[tail + t]);
      float f[1] = {tv};
      online_add<1>(m, s, f);
    }
    // Pass 1: chunk by chunk as the copies land.
    for (int k = 0; k < kPersistChunks; ++k) {
      const int v0 = k * per, v1 = min(nvec, v0 + per);
      mbar_wait(smem_u32(&full[k]), par);  // phase `it` of chunk k: this row's bytes arrived
#pragma unroll 4
      for (int v = v0 + t; v < v1; v += nt) {
        const R r = body[v];  // one 16-byte shared-memory access (LDS.128)
        float f[VEC];
        unpack<T, VEC>(r, f);
        online_add<VEC>(m, s, f);
      }
    }
    // Merge: shuffles within each warp, then the warps' states through shared memory. The slots are
    // double-buffered by parity: row it + 2 writes slot `par` again only after every thread has
    // passed row it + 1's barrier, i.e. after it finished reading row it's slots.
    warp_online_merge(m, s);
    if (lane == 0) {
      red_m[par][warp] = m;
      red_s[par][warp] = s;
    }
    // Barrier: every warp's state is written before any thread reads them.
    __syncthreads();
    m = lane < nwarps ? red_m[par][lane] : KL_NEG_INF;
    s = lane < nwarps ? red_s[par][lane] : 0.f;
    warp_online_merge(m, s);  // every thread now holds the row's (m, s), bit-identical

    // Pass 2: normalise, write once; release chunk k to the next row's copy after reading it. A row
    // of only -inf gives 0 * inf = NaN, as the reference does.
    const float inv = 1.f / s;
    const float shift = m == KL_NEG_INF ? 0.f : m;
    const i64 next = row + step;
    const bool more = next < M;
    const T* xn = x + next * sx;  // only dereferenced (by the copy engine) when more
    const int misn = (int)((reinterpret_cast<unsigned long long>(xn) & 15) / sizeof(T));
    const int headn = misn ? min(VEC - misn, N) : 0;
    const int nvecn = (N - headn) / VEC;
    const int ymis = (int)((reinterpret_cast<unsigned long long>(yr) & 15) / sizeof(T));
    if (ymis == mis) {  // y's row has x's alignment: the same head, 16-byte body and tail
      for (int k = 0; k < kPersistChunks; ++k) {
        const int v0 = k * per, v1 = min(nvec, v0 + per);
#pragma unroll 4
        for (int v = v0 + t; v < v1; v += nt) {
          const R r = body[v];
          float f[VEC];
          unpack<T, VEC>(r, f);
#pragma unroll
          for (int e = 0; e < VEC; ++e) f[e] = exp_shifted(f[e], shift) * inv;
          reinterpret_cast<R*>(yr + head)[v] = pack<T, VEC>(f);
        }
        mbar_arrive(smem_u32(&empty[k]));  // this thread is done reading chunk k (release)
        if (t == 0 && more && k > 0) {     // one chunk behind: the others have mostly finished k - 1
          mbar_wait(smem_u32(&empty[k - 1]), par);
          persist_issue(k - 1, per, nvecn, xn + headn, buf, smem_u32(&full[k - 1]));
        }
      }
      if (t == 0 && more) {
        mbar_wait(smem_u32(&empty[kPersistChunks - 1]), par);
        persist_issue(kPersistChunks - 1, per, nvecn, xn + headn, buf, smem_u32(&full[kPersistChunks - 1]));
      }
    } else {  // different alignment (odd strides): element by element, then release every chunk
      const T* sb = reinterpret_cast<const T*>(kl_smem_body);
#pragma unroll 4
      for (int c = head + t; c < tail; c += nt) yr[c] = from_float<T>(exp_shifted(to_float(sb[c - head]), shift) * inv);
      for (int k = 0; k < kPersistChunks; ++k) mbar_arrive(smem_u32(&empty[k]));
      if (t == 0 && more) {
        for (int k = 0; k < kPersistChunks; ++k) {
          mbar_wait(smem_u32(&empty[k]), par);
          persist_issue(k, per, nvecn, xn + headn, buf, smem_u32(&full[k]));
        }
      }
    }
    if (has_h) yr[t] = from_float<T>(exp_shifted(hv, shift) * inv);
    if (has_t) yr[tail + t] = from_float<T>(exp_shifted(tv, shift) * inv);
  }
#else
  // sm_80: CTA per row, three sweeps over global memory (max, sum, write); never planned there.
  __shared__ float red[32];
  for (i64 row = blockIdx.x; row < M; row += gridDim.x) {
    const T* xr = x + row * sx;
    T* yr = y + row * sy;
    float m = KL_NEG_INF;
    for (int c = t; c < N; c += nt) m = fmaxf(m, to_float(xr[c]));
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = warp_max(lane < nwarps ? red[lane] : KL_NEG_INF);
    __syncthreads();  // red is rewritten below
    const float shift = m == KL_NEG_INF ? 0.f : m;
    float s = 0.f;
    for (int c = t; c < N; c += nt) s += exp_shifted(to_float(xr[c]), shift);
    s = warp_sum(s);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    s = warp_sum(lane < nwarps ? red[lane] : 0.f);
    __syncthreads();  // red is rewritten by the next row
    const float inv = 1.f / s;
    for (int c = t; c < N; c += nt) yr[c] = from_float<T>(exp_shifted(to_float(xr[c]), shift) * inv);
  }
#endif
}

}  // namespace kl
