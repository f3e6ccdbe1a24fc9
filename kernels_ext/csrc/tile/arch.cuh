// Architecture guards for the tile building blocks (sm_90 / sm_90a device code), and the one
// address helper every shared-memory instruction wrapper needs.
//
// CI and the A100 build compile every .cu for sm_80 too, so Hopper-only instructions must vanish
// there. Kernel bodies test SK_TILE_SM90A (wgmma, setmaxnreg: the "a" target) or SK_TILE_SM90
// (TMA, clusters, mbarrier tx-counts: plain sm_90); the helpers in tile/ compile to __trap() on
// older targets so a kernel that forgets its guard fails loudly at run time instead of silently.
// Host code (tensor maps, launchers) is unaffected: it checks the device's capability itself.
#pragma once

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define SK_TILE_SM90 1
#else
#define SK_TILE_SM90 0
#endif

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SK_TILE_SM90A 1
#else
#define SK_TILE_SM90A 0
#endif

#include <cstdint>

namespace sk::tile {

// The 32-bit shared-window address of a generic pointer into shared memory (what .shared
// instructions, descriptors and mbarriers take).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace sk::tile
