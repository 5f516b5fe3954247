// Minimal program for the synccheck report on softmax_smem_kernel<__half, 16> (docs/sanitizer.md):
// does compute-sanitizer's synccheck report "Missing wait" on an mbarrier protocol that is correct
// by construction, and under which launch shapes?
//
// Each CTA: thread 0 initialises one mbarrier (count 1), fences the initialisation, arrives with
// the expected byte count and starts one bulk copy of its slice (global -> shared) completing on
// that barrier; a CTA barrier; every thread waits for phase 0; the CTA sums its slice; cluster
// barrier; thread 0 writes the sum. The host checks every sum. The same protocol as the softmax
// kernel's chunk barriers, with one chunk.
//
//   nvcc -O2 -arch=sm_90a -o /tmp/repro scripts/sanitize_cluster_repro.cu
//   compute-sanitizer --tool synccheck /tmp/repro CLUSTER CTAS DYN_SMEM_BYTES INVAL
//
// CLUSTER: 1, 8 or 16 CTAs a cluster; CTAS: grid size (a multiple of CLUSTER); DYN_SMEM_BYTES: extra
// dynamic shared memory a CTA (a large value leaves one CTA an SM); INVAL: 1 invalidates the
// barrier (mbarrier.inval) before the CTA exits.
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int kSlice = 2000;  // 16-bit elements a CTA, as fp16 9 x 32000 over 16 CTAs
constexpr int kThreads = 128;

template <int C>
__global__ void __cluster_dims__(C, 1, 1) kernel(const unsigned short* x, float* out, int inval) {
  __shared__ __align__(16) unsigned short slice[kSlice];
  __shared__ __align__(8) unsigned long long bar;
  extern __shared__ unsigned char pad[];  // only occupies shared memory (fewer CTAs an SM)
  const unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
  const unsigned dst = (unsigned)__cvta_generic_to_shared(slice);
  const unsigned bytes = kSlice * 2;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(x + (size_t)blockIdx.x * kSlice), "r"(bytes), "r"(b) : "memory");
  }
  __syncthreads();
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(b) : "memory");
  }
  float s = 0.f;
  for (int i = threadIdx.x; i < kSlice; i += kThreads) s += slice[i];
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out + blockIdx.x, s);
  if (pad[0] == 0xAB && threadIdx.x == 9999) out[0] = 0.f;  // keeps pad referenced
  cooperative_groups::this_cluster().sync();
  __syncthreads();
  if (inval && threadIdx.x == 0) asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(b) : "memory");
}

template <int C>
static int run(int ctas, int dyn, int inval) {
  std::vector<unsigned short> h((size_t)ctas * kSlice);
  for (size_t i = 0; i < h.size(); ++i) h[i] = (unsigned short)(i % 7);
  unsigned short* x;
  float* out;
  cudaMalloc(&x, h.size() * 2);
  cudaMalloc(&out, ctas * sizeof(float));
  cudaMemcpy(x, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(out, 0, ctas * sizeof(float));
  if (C > 8) cudaFuncSetAttribute(kernel<C>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (dyn > 48 * 1024) cudaFuncSetAttribute(kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn);
  kernel<C><<<ctas, kThreads, dyn>>>(x, out, inval);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("launch/run error: %s\n", cudaGetErrorString(e));
    return 2;
  }
  std::vector<float> r(ctas);
  cudaMemcpy(r.data(), out, ctas * sizeof(float), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int c = 0; c < ctas; ++c) {
    double want = 0;
    for (int i = 0; i < kSlice; ++i) want += h[(size_t)c * kSlice + i];
    bad += r[c] != (float)want;
  }
  std::printf("cluster=%d ctas=%d dyn_smem=%d inval=%d: %d wrong sums\n", C, ctas, dyn, inval, bad);
  return bad ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s CLUSTER CTAS DYN_SMEM_BYTES INVAL\n", argv[0]);
    return 64;
  }
  const int c = std::atoi(argv[1]), ctas = std::atoi(argv[2]), dyn = std::atoi(argv[3]), inval = std::atoi(argv[4]);
  if (ctas % c) {
    std::fprintf(stderr, "CTAS must be a multiple of CLUSTER\n");
    return 64;
  }
  switch (c) {
    case 1: return run<1>(ctas, dyn, inval);
    case 8: return run<8>(ctas, dyn, inval);
    case 16: return run<16>(ctas, dyn, inval);
    default: std::fprintf(stderr, "CLUSTER: 1, 8 or 16\n"); return 64;
  }
}
