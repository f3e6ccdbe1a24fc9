// sgemm's automatic block shape. Plain C++, so the CPU tests check the rule on the shapes it was
// read from.
//
// Measured on an H100 (132 SMs; results/h100/issue13/2026-12-06b, solbench run --ops gemm
// --dtypes float32, two calls), TFLOP/s, cuBLAS fp32 beside:
//   1024^3: 128 x 128 blocks (bk32) 18.5-18.7, 64 x 128 blocks (bm64) 25.6-25.8, cuBLAS 34.6-34.8.
//     64 blocks of 256 threads leave over half the SMs empty; 128 of 128 threads fill most of them.
//   4096^3 and larger: bk32 43.1-43.4, bm64 40.4-41.5 (0.85x against 0.79-0.81x cuBLAS). With the
//     SMs full, bm64's 50% more tile loads per FMA and its instruction-cache misses (four blocks
//     per SM at different points of a ~40 KB loop; ncu: no_instruction 0.56 stalls per
//     instruction against 0.06) cost more than its cheaper barriers save (0.40 against 0.49).
//   M = 16, N = K = 8192: both grids are the same 64 blocks (one row tile), bm64's of half the
//     threads: bk32 301-302 GB/s, bm64 269-281.
// So bm64 where the 128 x 128 grid would not give every SM a block and the 64 x 128 one has more
// blocks; else bk32.
#pragma once

#include <cstdint>

namespace sk::gemm {

// Whether sgemm's automatic choice is the 64 x 128 block (bm64) rather than 128 x 128 (bk32).
inline bool sgemm_prefers_bm64(int64_t m, int64_t n, int sms) {
  const int64_t col_tiles = (n + 127) / 128;
  const int64_t square_tiles = ((m + 127) / 128) * col_tiles;
  const int64_t half_tiles = ((m + 63) / 64) * col_tiles;
  return sms > 0 && square_tiles <= sms && half_tiles > square_tiles;
}

}  // namespace sk::gemm
