// TMA (the Tensor Memory Accelerator, sm_90): tensor maps on the host, bulk tensor copies on the
// device.
//
// Host: make_tensor_map() encodes a CUtensorMap for a row-major matrix (or a 3-D stack of them).
// The driver function cuTensorMapEncodeTiled is fetched through the runtime
// (cudaGetDriverEntryPointByVersion), so nothing links libcuda directly. Requirements the encoder
// enforces, checked here first so the error names them: the base address 16-byte aligned, every
// row pitch a multiple of 16 bytes, box dims in [1, 256], and with a swizzle the box's inner extent
// at most the swizzle width (128 bytes = 64 bf16 / 128 fp8 elements).
// Device: loads complete on an mbarrier (complete_tx: the full box's bytes, out-of-bounds
// elements included, which TMA fills with zeros -- so a tile hanging over the matrix edge loads
// zeros and contributes nothing to a dot product). Stores clip at the tensor bounds, so partial
// edge tiles need no masking; they are asynchronous "bulk groups": commit, then wait(.read)
// before the smem source is reused and wait() before the kernel ends. Smem written by ordinary
// stores must be fenced with fence_proxy_async() by the writing threads before a barrier and the
// TMA store that reads it.
// The CUtensorMap is passed to kernels as a `const __grid_constant__ CUtensorMap` parameter and
// addressed by its generic address.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "arch.cuh"
#include "ldg.cuh"        // l2_policy_evict_first / _last: the policies tma_load_2d_hint takes
#include "mbarrier.cuh"

namespace sk::tile {

// ------------------------------------------------------------------------------------ host side

struct TensorMapShape {
  // Dimensions innermost first: {cols, rows} or {cols, rows, batches}; strides in bytes for the
  // outer dimensions (rows, batches); box = the smem tile {box cols, box rows(, 1)}.
  int rank = 2;
  uint64_t dims[3] = {1, 1, 1};
  uint64_t strides[2] = {0, 0};
  uint32_t box[3] = {1, 1, 1};
};

inline const char* swizzle_name(CUtensorMapSwizzle s) {
  switch (s) {
    case CU_TENSOR_MAP_SWIZZLE_NONE: return "none";
    case CU_TENSOR_MAP_SWIZZLE_32B: return "32B";
    case CU_TENSOR_MAP_SWIZZLE_64B: return "64B";
    case CU_TENSOR_MAP_SWIZZLE_128B: return "128B";
    default: return "other";
  }
}

inline int swizzle_bytes(CUtensorMapSwizzle s) {
  switch (s) {
    case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B: return 128;
    default: return 0;
  }
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder, looked up once per process (the pointer never changes afterwards).
inline EncodeTiledFn encode_tiled_fn(std::string* error) {
  static const EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) return nullptr;
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  if (fn == nullptr && error != nullptr) {
    *error = "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12+ driver)";
  }
  return fn;
}

// Encodes `map`; returns false with a message naming the violated requirement.
inline bool make_tensor_map(CUtensorMap* map, CUtensorMapDataType dtype, int elem_bytes,
                            const void* base, const TensorMapShape& s, CUtensorMapSwizzle swizzle,
                            std::string* error,
                            CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  auto fail = [&](const std::string& m) {
    if (error != nullptr) *error = m;
    return false;
  };
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) {
    return fail("TMA needs a 16-byte aligned base address");
  }
  for (int i = 0; i + 1 < s.rank; ++i) {
    if (s.strides[i] % 16 != 0) {
      return fail("TMA needs every row pitch to be a multiple of 16 bytes (got " +
                  std::to_string(s.strides[i]) + " bytes)");
    }
  }
  for (int i = 0; i < s.rank; ++i) {
    if (s.box[i] < 1 || s.box[i] > 256) return fail("TMA box dimensions must be in [1, 256]");
    if (s.dims[i] < 1 || s.dims[i] > (uint64_t{1} << 32)) {
      return fail("TMA tensor dimensions must be in [1, 2^32]");
    }
  }
  const int width = swizzle_bytes(swizzle);
  if (width != 0 && s.box[0] * static_cast<uint32_t>(elem_bytes) > static_cast<uint32_t>(width)) {
    return fail(std::string("TMA box rows are wider than the ") + swizzle_name(swizzle) + " swizzle");
  }
  if ((s.box[0] * elem_bytes) % 16 != 0) return fail("TMA box rows must be a multiple of 16 bytes");
  EncodeTiledFn encode = encode_tiled_fn(error);
  if (encode == nullptr) return false;
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, dtype, static_cast<cuuint32_t>(s.rank), const_cast<void*>(base),
                            s.dims, s.strides, s.box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle, promo, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return fail("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r)));
  }
  return true;
}

// A row-major [rows, cols] matrix with row pitch `ld` elements, read/written in boxes of
// box_rows x box_cols.
inline bool make_tensor_map_2d(CUtensorMap* map, CUtensorMapDataType dtype, int elem_bytes,
                               const void* base, uint64_t rows, uint64_t cols, uint64_t ld,
                               uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle,
                               std::string* error) {
  TensorMapShape s;
  s.rank = 2;
  s.dims[0] = cols;
  s.dims[1] = rows;
  s.strides[0] = ld * static_cast<uint64_t>(elem_bytes);
  s.box[0] = box_cols;
  s.box[1] = box_rows;
  return make_tensor_map(map, dtype, elem_bytes, base, s, swizzle, error);
}

// ---------------------------------------------------------------------------------- device side

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
#if SK_TILE_SM90
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

// Box at coordinates (c0 = column, c1 = row) into smem; completes `bytes` on `bar`.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                            int c0, int c1) {
#if SK_TILE_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
#else
  __trap();
#endif
}

// As tma_load_2d, with an L2 eviction-priority hint (a createpolicy value, see l2_policy_*).
__device__ __forceinline__ void tma_load_2d_hint(void* smem_dst, const CUtensorMap* map,
                                                 uint64_t* bar, int c0, int c1, uint64_t policy) {
#if SK_TILE_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

// The same box written into the smem of every CTA in `cta_mask` (bit i = cluster rank i), at
// this CTA's smem offset, each completing on the barrier at this barrier's offset in that CTA.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map,
                                                      uint64_t* bar, int c0, int c1,
                                                      uint16_t cta_mask) {
#if SK_TILE_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                            int c0, int c1, int c2) {
#if SK_TILE_SM90
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_load_3d_multicast(void* smem_dst, const CUtensorMap* map,
                                                      uint64_t* bar, int c0, int c1, int c2,
                                                      uint16_t cta_mask) {
#if SK_TILE_SM90
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
      "h"(cta_mask)
      : "memory");
#else
  __trap();
#endif
}

// Smem box -> global at (c0 = column, c1 = row); clipped at the tensor bounds.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src, int c0,
                                             int c1) {
#if SK_TILE_SM90
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];" ::
                   "l"(reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(smem_src)), "r"(c0), "r"(c1)
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* smem_src, int c0,
                                             int c1, int c2) {
#if SK_TILE_SM90
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(smem_addr(smem_src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  __trap();
#endif
}

// global[box] += smem box (element type of the map; fp32/fp16/bf16 add), clipped like a store.
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, const void* smem_src,
                                                  int c0, int c1) {
#if SK_TILE_SM90
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];" ::
          "l"(reinterpret_cast<uint64_t>(map)),
      "r"(smem_addr(smem_src)), "r"(c0), "r"(c1)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_store_commit() {
#if SK_TILE_SM90
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}

// Wait until at most kPending committed store groups still READ their smem source.
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
#if SK_TILE_SM90
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
#endif
}

// Wait until at most kPending committed store groups are still incomplete (writes done).
template <int kPending>
__device__ __forceinline__ void tma_store_wait() {
#if SK_TILE_SM90
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
#endif
}

// Orders this thread's ordinary smem writes before later async-proxy (TMA, wgmma) reads.
__device__ __forceinline__ void fence_proxy_async() {
#if SK_TILE_SM90
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

}  // namespace sk::tile
