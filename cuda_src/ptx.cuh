// Thin PTX wrappers shared by the kernels: shared-memory addresses, mbarriers, bulk and tensor (TMA)
// copies, thread-block clusters, wgmma ordering, and the sm_80 building blocks (cp.async, ldmatrix,
// mma.sync). Header-free (NVRTC compiles it without include paths). The sm_90 instructions have
// empty bodies when compiled for older targets, whose kernels never call them.
#pragma once

namespace kl {

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// ---- shared-memory addresses ----------------------------------------------------------------
__device__ __forceinline__ u32 smem_u32(const void* p) {
  return (u32)__cvta_generic_to_shared(p);
}

// ---- mbarrier and TMA (sm_90; empty bodies in older targets, whose kernels never call them) ----
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KL_SM90 1
#endif
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
#ifdef KL_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
#ifdef KL_SM90
  u32 done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
#ifdef KL_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
#ifdef KL_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// ---- TMA: one 2-D box from global memory into shared memory, completing on an mbarrier --------
// c0 is the innermost (contiguous) coordinate. Out-of-bounds parts of the box are zero-filled.
__device__ __forceinline__ void tma_load_2d(u32 dst, const void* tmap, int c0, int c1, u32 bar) {
#ifdef KL_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#endif
}
// The 4-D form (c0 innermost): a [.., rows, 1, 1] box of a 4-D tensor map, e.g. (D, S, H, B) of
// attention's operands, so a box stops at its own head's rows (zero fill past them).
__device__ __forceinline__ void tma_load_4d(u32 dst, const void* tmap, int c0, int c1, int c2, int c3, u32 bar) {
#ifdef KL_SM90
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
#endif
}
__device__ __forceinline__ void tma_prefetch_desc(const void* tmap) {
#ifdef KL_SM90
  asm volatile("prefetch.tensormap [%0];" ::"l"(tmap) : "memory");
#endif
}

// ---- TMA store (shared -> global), bulk async-groups, proxy fence, named barriers, stmatrix ----
// The box at (c0, c1) is written from shared memory; parts of the box outside the tensor are not
// written (the clipping that makes ragged M and N tiles safe).
__device__ __forceinline__ void tma_store_2d(const void* tmap, u32 src, int c0, int c1) {
#ifdef KL_SM90
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(tmap), "r"(c0), "r"(c1), "r"(src)
               : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit() {
#ifdef KL_SM90
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
// Waits until at most N of this thread's bulk groups still READ their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#ifdef KL_SM90
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#endif
}
// Waits until at most N of this thread's bulk groups are incomplete (writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
#ifdef KL_SM90
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
#endif
}
// Generic-proxy shared-memory writes (st.shared, stmatrix) -> visible to the async proxy (TMA).
__device__ __forceinline__ void fence_proxy_async_smem() {
#ifdef KL_SM90
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// Barrier ID (1..15; 0 is __syncthreads) among `count` threads (a multiple of 32). A compile-time
// ID lets ptxas reserve only the barriers used.
template <int ID>
__device__ __forceinline__ void named_bar_sync(int count) {
  asm volatile("bar.sync %0, %1;" ::"n"(ID), "r"(count) : "memory");
}
// Arrives on named barrier ID without waiting (its `count` includes the threads that bar.sync on it).
template <int ID>
__device__ __forceinline__ void named_bar_arrive(int count) {
  asm volatile("bar.arrive %0, %1;" ::"n"(ID), "r"(count) : "memory");
}
// Four 8x8 b16 matrices to shared memory: lanes 8i..8i+7 give the row addresses of matrix i;
// register ri holds, in every lane, (row lane/4, columns 2 (lane%4), +1) of matrix i.
__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
#ifdef KL_SM90
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#endif
}

// ---- thread-block clusters (sm_90): rank, cluster-wide barrier, remote mbarrier arrive, multicast --
__device__ __forceinline__ u32 cluster_ctarank() {
  u32 r = 0;
#ifdef KL_SM90
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}
// Every thread of every CTA of the cluster; release/acquire orders shared-memory work across it.
__device__ __forceinline__ void cluster_sync() {
#ifdef KL_SM90
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
#endif
}
// Arrive on the mbarrier at the same shared-memory offset in CTA `rank` of the cluster (the
// default .release.cta semantics: an explicit .release.cluster costs a MEMBAR.GPU per arrive in
// SASS; what it would order here are wgmma reads already completed by wgmma.wait_group).
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 rank) {
#ifdef KL_SM90
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(rank)
      : "memory");
#endif
}
// tma_load_2d into the same shared-memory offset of every CTA in `mask`; each destination CTA's
// mbarrier at offset `bar` receives the bytes that land in that CTA.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const void* tmap, int c0, int c1, u32 bar,
                                                      unsigned short mask) {
#ifdef KL_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
#endif
}

// ---- wgmma ordering (sm_90a) ----------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

// Pins accumulator registers at this point of the program for the compiler: wgmma writes them
// asynchronously, so no read or write of them may be moved across wgmma fences/waits.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Shared-memory matrix descriptor for wgmma with the 128-byte swizzle (layout type 1).
// lbo/sbo in bytes: for a K-major operand sbo = 1024 (8 rows of 128 B), lbo unused (16);
// for an MN-major operand lbo = distance between 64-element MN blocks, sbo = 1024 (8 k-rows).
__device__ __forceinline__ u64 smem_desc_sw128(u32 addr, u32 lbo, u32 sbo) {
  u64 d = (u64)((addr & 0x3FFFF) >> 4);
  d |= (u64)((lbo >> 4) & 0x3FFF) << 16;
  d |= (u64)((sbo >> 4) & 0x3FFF) << 32;
  d |= (u64)1 << 62;
  return d;
}

// ---- sm_80 building blocks: cp.async, ldmatrix, mma.sync --------------------------------------
// 16-byte async copy; src_bytes < 16 zero-fills the rest (0 = pure zero fill, src not read).
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if (BF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}


// ---- bulk copies and split cluster barriers of the softmax smem kernel ------------------------
// The initialised mbarriers are visible to the async proxy (the copy engine) and the cluster.
__device__ __forceinline__ void mbar_fence_init() {
#ifdef KL_SM90
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// One poll of the mbarrier's phase `parity`: true once that phase has completed.
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 ok = 1;
#ifdef KL_SM90
  asm volatile(
      "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
#endif
  return ok != 0;
}
// global -> this CTA's shared memory, `bytes` (a multiple of 16, both addresses 16-byte aligned),
// completing on mbarrier `bar` (complete_tx: the barrier's pending byte count drops by `bytes`).
__device__ __forceinline__ void bulk_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
#ifdef KL_SM90
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}
// Split cluster barrier (every thread of every CTA; .aligned: all threads of a warp execute it together).
__device__ __forceinline__ void cluster_arrive() {
#ifdef KL_SM90
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#ifdef KL_SM90
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

}  // namespace kl
