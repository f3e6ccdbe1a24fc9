// The automatic choice for the 16-bit transposes the smem kernel's word path does not take (odd
// row lengths, views starting mid-word): which kernel, whether a batch is walked as one matrix,
// and the tile order. Plain C++, so the CPU tests check the rule on the shapes it was read from.
//
// From the H200's odd-shape sweep (scripts/tune/specs/transpose_odd.yaml,
// results/h200/issue15/2026-12-03b/transpose_odd_call1.json; GB/s of the pick against the best
// other option in brackets):
//  - ldsm in 64 x 32 blocks everywhere but the largest shape, where the smem kernel in column
//    order was ahead (8191 x 8193: 2,872 against ldsm's 2,591 GB/s). That is one measured shape
//    above the threshold; 4095 x 4097 (a quarter of it) and below went to ldsm.
//  - Column order where rows of y start off 128-byte lines (x's row count not a multiple of 64),
//    the matrix has 8 or more row tiles and the grid is more than one wave: 4095 x 4097 2,393
//    against 1,909 in row order, 3000 x 5001 2,487 against 2,398, 32 x 511 x 1023 2,403 against
//    2,213. Consecutive blocks then write consecutive stretches of a row of y, so the sectors a
//    misaligned row start splits between two blocks complete while still in L2. With 2 row tiles
//    (16 x 100 x 4097) column order lost 18%, with aligned rows (4096 x 4097) 4%, and under one
//    wave (1023 x 1025, 7 x 129 x 1000) 8-21%.
//  - The batch walked as one matrix (the ldsm kernel's kFlat) where per-matrix blocks would leave
//    an eighth or more of their rows idle and the grid is beyond one wave: 64 x 33 x 1023 1,667
//    against 1,169, 16 x 100 x 4097 2,561 against 2,491. Under one wave the extra blocks are free
//    parallelism (7 x 129 x 1000: flattened 1,075 against 1,188).
// Rechecked on an H100 with evict-last loads, which auto's ldsm blocks use since 2026-12-07
// (results/h100/issue15/2026-12-07/call1): every choice above still held (3000 x 5001 columns
// 27.69 against rows 31.91 us; 4095 x 4097 35.40 against 43.30; 64 x 33 x 1023 flattened 5.42
// against 5.48; 8191 x 8193 smem 130.3 against ldsm's best 148.9).
#pragma once

#include <cstdint>

#include "tile_order.cuh"

namespace sk {

constexpr int64_t kOdd16BlockRows = 64;  // ldsm_64x32
constexpr int64_t kOdd16BlockCols = 32;
constexpr int64_t kOdd16SmemElements = int64_t{1} << 25;  // 64 MiB of bf16 each way

struct Odd16Plan {
  bool smem = false;     // the smem kernel (transpose.cu) instead of ldsm
  bool flatten = false;  // ldsm walks a batch stored matrix after matrix as one matrix
  int64_t band = 1;      // tile order (tile_order.cuh): 1 row order, kColumnOrder columns
};

// `wave`: the 64 x 32 blocks resident on the device at once. `band` > 0 is the caller's order.
inline Odd16Plan odd16_plan(int64_t batch, int64_t rows, int64_t cols, int64_t wave, int64_t band) {
  Odd16Plan plan;
  const int64_t row_tiles = (rows + kOdd16BlockRows - 1) / kOdd16BlockRows;
  const int64_t blocks = batch * row_tiles * ((cols + kOdd16BlockCols - 1) / kOdd16BlockCols);
  const bool beyond_wave = blocks > wave;
  const int64_t idle_rows = row_tiles * kOdd16BlockRows - rows;
  if (batch * rows * cols >= kOdd16SmemElements) {
    plan.smem = true;
    plan.band = kColumnOrder;
  } else if (batch > 1 && beyond_wave && 8 * idle_rows >= row_tiles * kOdd16BlockRows) {
    plan.flatten = true;
  } else if (rows % kOdd16BlockRows != 0 && row_tiles >= 8 && beyond_wave) {
    plan.band = kColumnOrder;
  }
  if (band > 0) plan.band = band;
  return plan;
}

}  // namespace sk
