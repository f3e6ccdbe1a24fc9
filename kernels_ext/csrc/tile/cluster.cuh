// Thread-block clusters (sm_90): rank within the cluster, the cluster-wide barrier and loads
// from a peer CTA's shared memory (distributed shared memory).
//
// Distributed shared memory rule: a CTA must not exit while a peer may still write into its
// shared memory (TMA multicast) or arrive on its barriers; kernels end with cluster_sync().
#pragma once

#include <cuda_runtime.h>

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

// The address in the cluster's shared window of `smem_addr` (a shared::cta address of this CTA)
// as it lies in CTA `rank` of the cluster: every CTA of a kernel has the same layout.
__device__ __forceinline__ uint32_t cluster_peer_addr(uint32_t smem_addr, uint32_t rank) {
  uint32_t remote = smem_addr;
#if SK_TILE_SM90
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr), "r"(rank));
#endif
  return remote;
}

__device__ __forceinline__ float ld_cluster_f32(uint32_t cluster_addr) {
  float v = 0.f;
#if SK_TILE_SM90
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_addr) : "memory");
#endif
  return v;
}

// 16 bytes; cluster_addr 16-byte aligned.
__device__ __forceinline__ float4 ld_cluster_f32x4(uint32_t cluster_addr) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if SK_TILE_SM90
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(cluster_addr)
               : "memory");
#endif
  return v;
}

}  // namespace sk::tile
