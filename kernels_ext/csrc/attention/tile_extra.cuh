// Small additions to the tile/ building blocks that flash_wgmma needs and tile/ lacks (to be
// merged into tile/wgmma.cuh by its owner):
//  - fence_fragments(): the register-operand counterpart of tile::fence_accumulators() for the
//    b32 A fragments an RS wgmma reads asynchronously (P in attention). Placed after the
//    wgmma_wait that retires the wgmma, it keeps the compiler from reusing or overwriting those
//    registers while the tensor core may still read them.
//  - wgmma_ss / wgmma_rs: one name for the bf16 and fp16 wrappers, chosen by element type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../tile/wgmma.cuh"

namespace sk::attn {

template <int kRows>
__device__ __forceinline__ void fence_fragments(uint32_t (&a)[kRows][4]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
  }
}

template <class T, int N, int TransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    tile::wgmma_bf16_ss<N, 0, TransB>(d, desc_a, desc_b, scale_d);
  } else {
    tile::wgmma_f16_ss<N, 0, TransB>(d, desc_a, desc_b, scale_d);
  }
}

template <class T, int N, int TransB = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                         int scale_d) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    tile::wgmma_bf16_rs<N, TransB>(d, a, desc_b, scale_d);
  } else {
    tile::wgmma_f16_rs<N, TransB>(d, a, desc_b, scale_d);
  }
}

}  // namespace sk::attn
