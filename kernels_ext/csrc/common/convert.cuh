// Conversions between the storage types and float, the compute type of every kernel,
// one element at a time or a whole pack at a time.
//
// PyTorch's extension build defines __CUDA_NO_HALF_OPERATORS__ and friends, so every
// conversion goes through an explicit intrinsic, never an operator overload.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "pack.cuh"

namespace sk {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

template <typename T, int VEC>
__device__ __forceinline__ void unpack(const Pack<T, VEC>& p, float (&f)[VEC]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
    // bf16 is the top half of a float: one shift or mask per element, on 32-bit words
    // (the intrinsic goes through 16-bit moves and costs registers).
    const auto* w = reinterpret_cast<const unsigned*>(p.v);
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = to_float(p.v[i]);
  }
}

// Round VEC floats into a pack; 16-bit types convert two at a time (one cvt per pair).
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> pack(const float (&f)[VEC]) {
  Pack<T, VEC> p;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
    auto* p2 = reinterpret_cast<__nv_bfloat162*>(p.v);
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) p2[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  } else if constexpr (std::is_same_v<T, __half> && VEC % 2 == 0) {
    auto* p2 = reinterpret_cast<__half2*>(p.v);
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) p2[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p.v[i] = from_float<T>(f[i]);
  }
  return p;
}

}  // namespace sk
