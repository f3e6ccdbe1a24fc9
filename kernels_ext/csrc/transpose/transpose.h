// Transpose of the last two dims into a new contiguous tensor: launcher (plain C++).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

// y[b][j][i] = x[b][i][j] for x of shape [batch, rows, cols] with element strides
// (batch_stride, row_stride, 1); y is contiguous [batch, cols, rows].
struct TransposeArgs {
  DType dtype;
  const void* x;
  void* y;
  int64_t batch;
  int64_t rows;
  int64_t cols;
  int64_t batch_stride;
  int64_t row_stride;
  int64_t band = 1;  // row tiles per band of the tile order (tile_order.cuh); 1: row order
  // word-rows of the smem kernel's tile: 32 or 64 (by 64 columns); 16: 16-bit only, a 32 x 32
  // tile of 128 threads, whole tiles only (elsewhere by the size); 0: by the size (transpose.cu:
  // the 32 x 32 tile where it applies and its grid is one wave, else 32 or 64 word-rows)
  int tile_words = 0;
  int ldsm_subs = 11;  // the ldsm kernel's block in 32 x 32 sub-tiles, rows then columns: 11, 12, 21, 22
  // ldsm: walk a batch of matrices stored one after another as one matrix of all their rows
  bool flatten_batch = false;
  // ldsm: load x L1 and L2 evict_last (as torch.compile's Triton kernel does) instead of ld.global.nc
  bool keep_loads = false;
};

// The tiled kernel through shared memory (transpose.cu): any layout whose rows are contiguous.
cudaError_t launch_transpose(const TransposeArgs& args, cudaStream_t stream);

// Whether the smem kernel's word path takes this layout (fp32: 8-byte pairs of columns; 16-bit:
// 4-byte pairs of columns and rows of y of even length). Where it does not, that kernel moves one
// element per shared access.
bool transpose_words_fit(const TransposeArgs& args);

// The 16-bit kernel (transpose_ldsm.cu): ldmatrix.trans through shared memory, one element per
// global access; any 16-bit layout with contiguous rows. On the H200 it trailed the smem kernel on
// every aligned case and led it on the odd ones (docs/PERF.md, 2026-12-03).
cudaError_t launch_transpose_ldsm(const TransposeArgs& args, cudaStream_t stream);

// The automatic choice for the 16-bit layouts the word path does not take: the rule of
// odd16_rule.h (mostly ldsm in 64 x 32 blocks, loads evict_last). `band` > 0 keeps the caller's order.
cudaError_t launch_transpose_odd16(TransposeArgs args, cudaStream_t stream);

// The in-register kernel (transpose_regs.cu): 16-byte-aligned x and y, rows, columns and strides
// multiples of the 16-byte vector width (transpose_regs_supports); cudaErrorInvalidValue otherwise.
bool transpose_regs_supports(const TransposeArgs& args);
cudaError_t launch_transpose_regs(const TransposeArgs& args, cudaStream_t stream);

}  // namespace sk
