// Shared-memory tile layouts: the swizzles TMA writes and wgmma reads.
//
// A tile is stored as rows of kRowBytes (= the swizzle width: 128, 64 or 32 bytes; 128 bytes = 64
// bf16 or 128 fp8 elements). Within each group of rows spanning one pattern repeat (1024, 512 or
// 256 bytes), the 16-byte chunk index of a byte offset is XORed with bits [7, 7+log2(width/16))
// of that offset: CUTLASS calls it Swizzle<3,4,3> (128B), <2,4,3> (64B), <1,4,3> (32B). TMA
// applies it when the tensor map says CU_TENSOR_MAP_SWIZZLE_{128B,64B,32B}, and wgmma undoes it
// when the descriptor's layout type matches -- provided the tile starts on a pattern-repeat
// boundary (1024 bytes for 128B), so every tile buffer here is aligned to kSwizzleAlign.
// Threads that read or write a swizzled tile themselves (epilogues staging C for a TMA store,
// residual reads) use swizzled_offset(); with 16-byte accesses 8 consecutive rows then hit 8
// different bank groups (no conflicts), where an unswizzled 128-byte row pitch would put them all
// in the same banks.
#pragma once

#include <cstdint>

namespace sk::tile {

constexpr uint32_t kSwizzleAlign = 1024;   // the strictest pattern repeat (128B swizzle)

// log2(width / 16): the number of chunk-index bits XORed for a swizzle width.
template <int kWidthBytes>
__host__ __device__ constexpr int swizzle_bits() {
  static_assert(kWidthBytes == 128 || kWidthBytes == 64 || kWidthBytes == 32 || kWidthBytes == 16,
                "swizzle width is 128, 64 or 32 bytes (16: none)");
  return kWidthBytes == 128 ? 3 : kWidthBytes == 64 ? 2 : kWidthBytes == 32 ? 1 : 0;
}

// The swizzled position of a byte offset inside a tile that starts on a pattern boundary.
template <int kWidthBytes>
__host__ __device__ __forceinline__ constexpr uint32_t swizzle(uint32_t offset) {
  constexpr int kBits = swizzle_bits<kWidthBytes>();
  return offset ^ (((offset >> 7) & ((1u << kBits) - 1u)) << 4);
}

// Byte offset of element (row, col) of a tile with kWidthBytes-wide rows of kElemBytes elements.
template <int kWidthBytes, int kElemBytes>
__host__ __device__ __forceinline__ constexpr uint32_t swizzled_offset(uint32_t row, uint32_t col) {
  return swizzle<kWidthBytes>(row * kWidthBytes + col * kElemBytes);
}

}  // namespace sk::tile
