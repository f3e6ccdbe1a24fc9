// Variants (dtype x vector width) and packs: VEC elements moved with one 128-bit (or
// narrower) access. The variant tag's name is what a profiler shows, e.g.
// softmax_rows<bf16x8, 2, false>; dispatch_variant picks the tag for a dtype.
//
// Only CUDA headers here: kernel .cu files must compile without PyTorch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dtype.h"

namespace sk {

// "x8" means one 128-bit access moves 8 elements; "x1" is the scalar fallback used
// when a pointer or the row length does not allow 16-byte accesses.
struct f32x4 { using T = float; static constexpr int VEC = 4; };
struct f32x1 { using T = float; static constexpr int VEC = 1; };
struct bf16x8 { using T = __nv_bfloat16; static constexpr int VEC = 8; };
struct bf16x1 { using T = __nv_bfloat16; static constexpr int VEC = 1; };
struct f16x8 { using T = __half; static constexpr int VEC = 8; };
struct f16x1 { using T = __half; static constexpr int VEC = 1; };

inline int vector_width(DType dt) { return dt == DType::kFloat32 ? 4 : 8; }
inline int element_size(DType dt) { return dt == DType::kFloat32 ? 4 : 2; }

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Calls f(variant_tag) for the dtype, vectorised or scalar.
template <class F>
cudaError_t dispatch_variant(DType dt, bool vectorized, F&& f) {
  switch (dt) {
    case DType::kFloat32: return vectorized ? f(f32x4{}) : f(f32x1{});
    case DType::kBFloat16: return vectorized ? f(bf16x8{}) : f(bf16x1{});
    case DType::kFloat16: return vectorized ? f(f16x8{}) : f(f16x1{});
  }
  return cudaErrorInvalidValue;
}

// Packs: VEC elements in one aligned register group, moved with one access.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <class V>
using PackOf = Pack<typename V::T, V::VEC>;

// Read-only (non-coherent) load of one pack; the pointer must be aligned to the pack size.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack(const T* p) {
  Pack<T, VEC> r;
  constexpr int kBytes = sizeof(T) * VEC;
  if constexpr (kBytes == 16) {
    *reinterpret_cast<uint4*>(&r) = __ldg(reinterpret_cast<const uint4*>(p));
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(&r) = __ldg(reinterpret_cast<const uint2*>(p));
  } else if constexpr (kBytes == 4) {
    *reinterpret_cast<unsigned*>(&r) = __ldg(reinterpret_cast<const unsigned*>(p));
  } else {
    static_assert(kBytes == 2, "unsupported pack size");
    *reinterpret_cast<unsigned short*>(&r) = __ldg(reinterpret_cast<const unsigned short*>(p));
  }
  return r;
}

// Plain (coherent) load: for data this same thread wrote earlier in the kernel.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack_coherent(const T* p) {
  return *reinterpret_cast<const Pack<T, VEC>*>(p);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, VEC>& v) {
  *reinterpret_cast<Pack<T, VEC>*>(p) = v;
}

}  // namespace sk
