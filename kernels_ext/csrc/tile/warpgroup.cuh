// Warpgroups (4 consecutive warps, 128 threads: the unit that issues wgmma) and their helpers.
//
// Register reallocation: setmaxnreg moves registers between warpgroups (producers give theirs
// to the math warpgroups). It is honoured only when the kernel has a register cap at entry:
// __launch_bounds__(threads, 1) and every warpgroup's role one branch of a single if/else; ptxas
// says "C7508 ... ignored" otherwise. The counts must be multiples of 8 in [24, 256], and the sum
// over the block must stay within the 64K registers of an SM.
// Named barriers: id 0 is __syncthreads; kernels here use ids from kFirstFreeBarrier up, one per
// warpgroup (or group of warpgroups) that syncs among itself without stalling the producer.
#pragma once

#include <cstdint>

#include "arch.cuh"

namespace sk::tile {

constexpr int kWarpgroupThreads = 128;
constexpr int kFirstFreeBarrier = 1;

// The warpgroup index of this thread, as a warp-uniform value (broadcast from lane 0 so the
// compiler keeps it in a uniform register and role branches do not diverge).
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}

__device__ __forceinline__ int warp_in_warpgroup() {
  return __shfl_sync(0xffffffffu, (static_cast<int>(threadIdx.x) / 32) % 4, 0);
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
#if SK_TILE_SM90A
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
#endif
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
#if SK_TILE_SM90A
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
#endif
}

// bar.sync on a named barrier among `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Arrive without waiting (the other side calls named_barrier_sync with the same count).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// One lane of the warp, the same for every call (lane 0 of the active mask).
__device__ __forceinline__ bool elect_one_lane() {
  return (threadIdx.x % 32) == 0;
}

}  // namespace sk::tile
