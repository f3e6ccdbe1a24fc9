// wgmma (sm_90a): shared-memory matrix descriptors, the mma_async wrappers, and their fences.
//
// Shapes: one instruction is D[64 x N] (+)= A[64 x K] * B[K x N], K = 16 for bf16/fp16 and 32 for
// e4m3, issued by a whole warpgroup (128 threads). The wrappers are in wgmma_ops.cuh (generated):
//   wgmma_{bf16,f16}_ss<N, TransA, TransB>(d, desc_a, desc_b, scale_d)
//   wgmma_{bf16,f16}_rs<N, TransB>(d, a_regs, desc_b, scale_d)
//   wgmma_e4m3_ss<N>(d, desc_a, desc_b, scale_d), wgmma_e4m3_rs<N>(d, a_regs, desc_b, scale_d)
// with N in {8, 16, 24, 32, 48, ..., 240, 256} and float d[N/2] per thread; wgmma_ss<T, N> and
// wgmma_rs<T, N> pick the wrapper by element type (__nv_bfloat16, __half, __nv_fp8_e4m3).
//
// Accumulator layout (fp32 D, per thread): warp w of the warpgroup owns rows 16w..16w+15; lane l
// has, for each n8 block j = 0..N/8-1,
//   d[4j+0], d[4j+1] = D[16w + l/4    ][8j + 2(l%4) + {0,1}]
//   d[4j+2], d[4j+3] = D[16w + l/4 + 8][8j + 2(l%4) + {0,1}]
// The A fragment of the _rs forms (m64k16, 16-bit) has the same shape per warp as mma.sync's
// m16k16 A operand: a[0] = A[r][c..c+1], a[1] = A[r+8][c..c+1], a[2] = A[r][c+8..c+9],
// a[3] = A[r+8][c+8..c+9] with r = 16w + l/4, c = 2(l%4) -- so a converted accumulator of a
// previous wgmma (P in attention) is an A operand without shuffles: for k-block t of A, take
// n8 blocks 2t and 2t+1 of the accumulator.
//
// Descriptors (make_smem_desc): start address, LBO and SBO in 16-byte units, the swizzle mode in
// bits 62-63 (1 = 128B, 2 = 64B, 3 = 32B, 0 = none), base offset 0 (tiles start on a swizzle
// pattern boundary: see swizzle.cuh). Canonical layouts, T = 16 bytes:
//   K-major (rows of the M or N dimension, K contiguous), swizzled: rows of `width` bytes,
//     8-row groups `SBO` apart (8 * width when rows are packed); LBO unused (1). One wgmma reads
//     K = 32 bytes of each row, so the k-th k-step of a tile starts `32 * k` bytes into the row:
//     advance the descriptor's start address (desc_advance) -- valid while 32 * k < width.
//   MN-major (the M or N dimension contiguous, e.g. V[seq][d] as B with N = d), swizzled: blocks
//     of width/elem MN-elements x 8 K-rows; SBO = bytes between 8-K-row groups (8 * width when
//     packed), LBO = bytes between consecutive width-wide MN blocks (e.g. rows_in_tile * width
//     when TMA wrote the tile as [MN blocks][rows][width]). Use TransA/TransB = 1 for that operand.
//   No swizzle (interleaved) K-major: 8x16-byte core matrices; LBO = bytes between core matrices
//     along K, SBO = bytes between 8-row groups.
//
// Ordering: wgmma_fence() before the first wgmma of a batch whenever registers it reads or
// writes (accumulators, A fragments) were touched by ordinary instructions since the last
// wait; chaining wgmmas of the same shape on one accumulator needs no fence between them.
// wgmma_commit() closes a batch; wgmma_wait<n>() blocks until at most n batches are pending --
// only then may accumulators be read or the smem operands be overwritten.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "arch.cuh"
#include "mbarrier.cuh"
#include "wgmma_ops.cuh"

namespace sk::tile {

enum class SmemSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

template <int kWidthBytes>
__host__ __device__ constexpr SmemSwizzle swizzle_mode() {
  static_assert(kWidthBytes == 128 || kWidthBytes == 64 || kWidthBytes == 32 || kWidthBytes == 0,
                "swizzle width is 128, 64, 32 (or 0: none)");
  return kWidthBytes == 128  ? SmemSwizzle::k128B
         : kWidthBytes == 64 ? SmemSwizzle::k64B
         : kWidthBytes == 32 ? SmemSwizzle::k32B
                             : SmemSwizzle::kNone;
}

__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                                   uint32_t sbo_bytes, SmemSwizzle swizzle) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32;
  d |= static_cast<uint64_t>(swizzle) << 62;
  return d;
}

// K-major tile of packed rows `kWidthBytes` wide (what TMA writes with the same swizzle and a box
// kWidthBytes wide), starting at `tile` (aligned to the pattern repeat).
template <int kWidthBytes>
__device__ __forceinline__ uint64_t desc_k_major(const void* tile) {
  static_assert(kWidthBytes == 128 || kWidthBytes == 64 || kWidthBytes == 32,
                "K-major swizzled tiles are 128, 64 or 32 bytes wide");
  return make_smem_desc(smem_addr(tile), 16, 8 * kWidthBytes, swizzle_mode<kWidthBytes>());
}

// MN-major tile: 8-K-row groups packed (SBO = 8 * width), MN blocks `mn_block_stride` bytes apart.
template <int kWidthBytes>
__device__ __forceinline__ uint64_t desc_mn_major(const void* tile, uint32_t mn_block_stride) {
  static_assert(kWidthBytes == 128 || kWidthBytes == 64 || kWidthBytes == 32,
                "MN-major swizzled tiles are 128, 64 or 32 bytes wide");
  return make_smem_desc(smem_addr(tile), mn_block_stride, 8 * kWidthBytes,
                        swizzle_mode<kWidthBytes>());
}

// The descriptor of the same layout starting `bytes` further on (bytes a multiple of 16).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + static_cast<uint64_t>(bytes >> 4);
}

__device__ __forceinline__ void wgmma_fence() {
#if SK_TILE_SM90A
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if SK_TILE_SM90A
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if SK_TILE_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
#endif
}

// Keeps the compiler from moving accesses of accumulator registers across wgmma fences/waits
// (it does not know the asynchronous wgmma still writes them).
template <int kCount>
__device__ __forceinline__ void fence_accumulators(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for the b32 A fragments an _rs wgmma reads asynchronously: placed after the
// wgmma_wait that retires it, the compiler neither reuses nor rewrites those registers early.
template <int kRows>
__device__ __forceinline__ void fence_fragments(uint32_t (&a)[kRows][4]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
  }
}

// One name for the wrappers of every input type (the transposes exist for 16-bit types only).
template <class T, int N, int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    wgmma_bf16_ss<N, TransA, TransB>(d, desc_a, desc_b, scale_d);
  } else if constexpr (std::is_same_v<T, __half>) {
    wgmma_f16_ss<N, TransA, TransB>(d, desc_a, desc_b, scale_d);
  } else {
    static_assert(std::is_same_v<T, __nv_fp8_e4m3> && TransA == 0 && TransB == 0,
                  "wgmma_ss: bf16, fp16, or K-major e4m3");
    wgmma_e4m3_ss<N>(d, desc_a, desc_b, scale_d);
  }
}

template <class T, int N, int TransB = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                         int scale_d) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    wgmma_bf16_rs<N, TransB>(d, a, desc_b, scale_d);
  } else if constexpr (std::is_same_v<T, __half>) {
    wgmma_f16_rs<N, TransB>(d, a, desc_b, scale_d);
  } else {
    static_assert(std::is_same_v<T, __nv_fp8_e4m3> && TransB == 0,
                  "wgmma_rs: bf16, fp16, or K-major e4m3");
    wgmma_e4m3_rs<N>(d, a, desc_b, scale_d);
  }
}

}  // namespace sk::tile
