// Small pieces shared by the CUDA-core and mma.sync GEMM kernels (sgemm_fp32, hgemm_mma):
// 4-byte cp.async with zero-fill, the grouped tile order for 2-D grids, and 16-bit <-> float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace sk::gemm {

// 4 bytes global -> shared through L1 (.ca: the only form for sizes under 16), zero-filled when
// !valid. tile/cp_async.cuh has the 16-byte form.
__device__ __forceinline__ void cp_async_4(uint32_t smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes)
               : "memory");
#endif
}

// The same copy for a source known to be in bounds (no zero-fill operand, no predicate).
__device__ __forceinline__ void cp_async_4_always(uint32_t smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(gmem) : "memory");
#endif
}

// Block b of a grid of tiles_m x tiles_n tiles, in groups of `group` tile rows swept column by
// column: consecutive blocks share A and W panels, so the blocks in flight hit in L2.
__device__ __forceinline__ void grouped_tile(int b, int tiles_m, int tiles_n, int group, int& tm,
                                             int& tn) {
  const int per_group = group * tiles_n;
  const int g = b / per_group;
  const int first = g * group;
  const int rows = min(tiles_m - first, group);
  const int local = b - g * per_group;
  tm = first + local % rows;
  tn = local / rows;
}

template <class T>
__device__ __forceinline__ float elem_to_float(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return __half2float(v);
  }
}

template <class T>
__device__ __forceinline__ T float_to_elem(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return __float2half_rn(v);
  }
}

}  // namespace sk::gemm
