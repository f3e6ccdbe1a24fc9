// Thread-block clusters (sm_90): rank within the cluster and the cluster-wide barrier.
//
// Distributed shared memory rule: a CTA must not exit while a peer may still write into its
// shared memory (TMA multicast) or arrive on its barriers; kernels end with cluster_sync().
#pragma once

#include <cstdint>

#include "arch.cuh"

namespace sk::tile {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r = 0;
#if SK_TILE_SM90
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// Index of this cluster in the grid (x dimension; kernels here launch 1-D grids).
__device__ __forceinline__ uint32_t cluster_id_x() {
  uint32_t r = 0;
#if SK_TILE_SM90
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
#endif
  return r;
}

__device__ __forceinline__ uint32_t num_clusters_x() {
  uint32_t r = 1;
#if SK_TILE_SM90
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
#endif
  return r;
}

// Every (non-exited) thread of every CTA in the cluster; release/acquire ordering of the
// memory operations before and after.
__device__ __forceinline__ void cluster_sync() {
#if SK_TILE_SM90
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" :::
                   "memory");
#else
  __trap();
#endif
}

}  // namespace sk::tile
