// mbarrier: the shared-memory barriers that TMA loads complete on (sm_90 for tx-counts).
//
// A barrier has an expected arrival count (set at init) and a transaction byte count. A phase
// completes when every expected thread has arrived AND the bytes announced with expect_tx have
// all landed (TMA decrements the count as it writes). Waiters name the phase by its parity:
//   - a fresh barrier is in phase 0; try_wait(parity = 1) on it succeeds at once (the "previous"
//     phase counts as complete). Producers therefore wait on `empty` barriers with parity
//     (round & 1) ^ 1 and consumers on `full` barriers with parity (round & 1), where
//     round = iteration / stages.
//   - the byte count may go transiently negative (a peer CTA's multicast can land before the
//     local expect_tx); the phase still waits for the arrival.
// Cluster use: a consumer releases a stage that a peer's multicast writes into by arriving on the
// PEER's barrier (arrive_cluster); after init, fence_init() + a cluster barrier make the
// barriers visible to the peers before any of them is used.
#pragma once

#include <cstdint>

#include "arch.cuh"

namespace sk::tile {

// One thread initialises; `count` = arrivals per phase.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

// Makes initialised barriers visible to other CTAs of the cluster and to the async proxy (TMA).
__device__ __forceinline__ void mbar_fence_init() {
#if SK_TILE_SM90
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar))
               : "memory");
}

// Arrive once and announce `bytes` more to land in this phase (the producer's call per stage).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if SK_TILE_SM90
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(
                   smem_addr(bar)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Announce bytes without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
#if SK_TILE_SM90
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Arrive on the barrier at the same smem offset in CTA `cta_rank` of this cluster (may be self).
// Relaxed: it orders nothing, which is all a consumer releasing a stage needs -- its reads of
// the stage (wgmma, async proxy) are complete once wgmma_wait returns, and it wrote nothing the
// producer reads. (A .release.cluster arrive costs a GPU-wide MEMBAR per call in SASS.)
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
#if SK_TILE_SM90
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [remote];\n}" ::"r"(smem_addr(bar)),
      "r"(cta_rank)
      : "memory");
#else
  __trap();
#endif
}

// True once the phase with this parity has completed (returns after a hardware-bounded wait).
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
#if SK_TILE_SM90
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
#else
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
#endif
  return done != 0;
}

// Spin until the phase with this parity has completed (acquire: its data is visible after).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

}  // namespace sk::tile
