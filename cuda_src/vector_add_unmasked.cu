// vector_add, unmasked (the algorithm word of every layer's default; cuda:vector_add): out = x + y
// over n elements, fp32 / fp16 / bf16 (fp32 arithmetic, one rounding).
//
// Grid-stride loop over 16-byte vectors: each thread issues UNROLL independent 128-bit loads of x
// and of y before it adds and stores, so several loads are in flight per thread. Any pointer
// alignment works: a scalar head of fewer than VEC elements brings all three pointers to a 16-byte
// boundary when they share the same offset modulo 16; a scalar tail covers n % VEC. When the three
// pointers disagree modulo 16 (e.g. x and y misaligned views, out freshly allocated) the planner
// (dispatch_vector_add.py) launches the VEC = 1 instantiation: scalar, still coalesced.
// The body needs no element mask: every access is a whole 16-byte vector below nvec (one compare
// per vector, no per-element predicate); only the scalar head and tail are masked element by element.
#include "common.cuh"

namespace kl {

template <typename T, int VEC, int UNROLL>
__global__ void __launch_bounds__(256) vector_add_unmasked_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                                         T* __restrict__ out, i64 n, i64 head) {
  typedef typename RawVec<T, VEC>::type R;
  const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 nthreads = (i64)gridDim.x * blockDim.x;
  // scalar head (head < VEC <= 8 elements, so the first threads of the grid take one each)
  if (tid < head) out[tid] = from_float<T>(to_float(x[tid]) + to_float(y[tid]));
  const R* xb = reinterpret_cast<const R*>(x + head);
  const R* yb = reinterpret_cast<const R*>(y + head);
  R* ob = reinterpret_cast<R*>(out + head);
  const i64 nvec = (n - head) / VEC;
  // vector body: thread t of block b covers vectors (b*blockDim*UNROLL + t + u*blockDim), u < UNROLL,
  // so each of the UNROLL warp-wide accesses is contiguous (coalesced) across the warp; all 2*UNROLL
  // loads are issued before the first add
  for (i64 base = (i64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < nvec;
       base += nthreads * UNROLL) {
    R ra[UNROLL], rb[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const i64 v = base + (i64)u * blockDim.x;
      if (v < nvec) {
        ra[u] = xb[v];
        rb[u] = yb[v];
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const i64 v = base + (i64)u * blockDim.x;
      if (v < nvec) {
        float a[VEC], b[VEC];
        unpack<T, VEC>(ra[u], a);
        unpack<T, VEC>(rb[u], b);
#pragma unroll
        for (int e = 0; e < VEC; ++e) a[e] += b[e];
        ob[v] = pack<T, VEC>(a);
      }
    }
  }
  // scalar tail: the last (n - head) % VEC elements
  const i64 t = head + nvec * VEC + tid;
  if (t < n) out[t] = from_float<T>(to_float(x[t]) + to_float(y[t]));
}

}  // namespace kl
