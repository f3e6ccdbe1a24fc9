// Whether a transpose block's offsets fit 32 bits (the ldsm kernel's; plain C++, so the CPU tests
// check it against the largest offset a block forms). The smem kernel keeps 64-bit offsets: its
// 32-bit build (smem_i32, commit 5b7e8fb) was no faster on an H100 and was taken out.
#pragma once

#include <cstdint>

namespace sk {

// Whether every offset a transpose block forms within one matrix of x or y fits 32 bits, edge
// blocks' masked ones included: `walk_rows` rows of x are walked (a flattened batch's all), a block
// sticks out of the matrix by less than `overhang` rows and columns, and `extra_y` is the further
// span of y a flattened walk's matrix gaps add.
inline bool transpose_offsets_fit_int32(int64_t walk_rows, int64_t rows, int64_t cols, int64_t row_stride,
                                        int64_t overhang, int64_t extra_y = 0) {
  constexpr int64_t kLimit = 0x7fffffff;
  const int64_t x_span = (walk_rows + overhang) * row_stride + cols + overhang;
  const int64_t y_span = (cols + overhang) * rows + walk_rows + overhang + extra_y;
  return row_stride <= kLimit && rows <= kLimit && cols <= kLimit && x_span <= kLimit && y_span <= kLimit;
}

}  // namespace sk
