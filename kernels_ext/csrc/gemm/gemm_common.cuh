// Small pieces shared by the CUDA-core and mma.sync GEMM kernels (sgemm_fp32, hgemm_mma):
// the 4-byte cp.async (from tile/), the grouped tile order for 2-D grids, and 16-bit <-> float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../tile/cp_async.cuh"

namespace sk::gemm {

// The 4-byte cp.async forms live with the 16-byte one in tile/cp_async.cuh.
using tile::cp_async_4;
using tile::cp_async_4_always;

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
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return __half2float(v);
  }
}

template <class T>
__device__ __forceinline__ T float_to_elem(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return __float2half_rn(v);
  }
}

}  // namespace sk::gemm
