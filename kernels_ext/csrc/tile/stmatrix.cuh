// stmatrix (sm_90): a warp stores 8x8 tiles of 16-bit values from the mma/wgmma fragment layout.
//
// Fragment layout of one 8x8 tile: lane l holds the pair (row l/4, cols 2*(l%4), 2*(l%4)+1) in one
// b32 register (low half = lower column). For .x4, register i of every lane belongs to tile i,
// and lanes 8i..8i+7 give the smem addresses of the 8 rows (16 contiguous bytes each) of tile i.
// .x2 uses lanes 0..15 for the addresses. The wgmma m64nN accumulator of warp w in its
// warpgroup covers rows 16w..16w+15; its n8 block j is two such tiles: (d[4j], d[4j+1]) at rows
// 16w + l/4 and (d[4j+2], d[4j+3]) at rows 16w + 8 + l/4 -- so converting each pair to bf16x2 and
// storing blocks j, j+1 with one .x4 {top j, bottom j, top j+1, bottom j+1} writes 16x16 values.
// ldmatrix (the inverse, sm_75+) lives in mma_sync.cuh; its x4 form is given here too for the
// epilogues that read C-shaped tiles back (residual add), so they need not include mma headers.
#pragma once

#include <cstdint>

#include "arch.cuh"

namespace sk::tile {

__device__ __forceinline__ void stmatrix_x4(uint32_t smem, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
#if SK_TILE_SM90
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void stmatrix_x2(uint32_t smem, uint32_t r0, uint32_t r1) {
#if SK_TILE_SM90
  asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};" ::"r"(smem), "r"(r0),
               "r"(r1)
               : "memory");
#else
  __trap();
#endif
}

// Transposed store: each lane's pair lands in one column of two rows (tile transposed).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t smem, uint32_t r0, uint32_t r1,
                                                  uint32_t r2, uint32_t r3) {
#if SK_TILE_SM90
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void ldmatrix_x4_b16(uint32_t smem, uint32_t& r0, uint32_t& r1,
                                                uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem)
               : "memory");
}

}  // namespace sk::tile
