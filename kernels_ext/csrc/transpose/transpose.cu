// Tiled transpose through shared memory, in 32-bit words and without bank conflicts.
//
// The tile is 64 word-rows by 64 columns of x, so each row of y gets 256 contiguous bytes per
// tile. (32 word-rows ran the 1 GiB 2-D case at 0.83 of the copy bandwidth in fp32 and 0.88 in
// bf16; 64 ran it at 0.89 / 0.91: scripts/tune/transpose_probe.cu, results/h200/issue15/.)
// A word holds one fp32 element, or two 16-bit elements from neighbouring rows of x:
// (x[2p][c], x[2p+1][c]) is exactly two neighbouring elements of row c of y. Built that way (a
// byte permute of two 32-bit loads, one per row), the 16-bit transpose becomes a transpose of
// words, and both global phases move 128 contiguous bytes per warp instruction: loads along rows
// of x, stores along rows of y.
//
// Shared memory is word[64][65]. Stores into it go to column p of rows 2tx and 2tx+1; with the
// row pitch 65 (= 1 mod 32) their banks are (2tx + p) and (2tx + 1 + p). Half-warp 0 writes its
// even row first and half-warp 1 its odd row first, so every store instruction touches 32
// distinct banks; reads of row c at columns tx and tx + 32 hit bank (c + tx): distinct too.
//
// Tiles that stick out of the matrix, and layouts whose rows do not allow the 32-bit (fp32:
// 64-bit) loads, take the scalar path of the same kernel: one element at a time, bounds-checked,
// through the same shared-memory layout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/grid.cuh"
#include "tile_order.cuh"
#include "transpose.h"

namespace sk {
namespace {

constexpr int kTileWords = 64;  // word-rows of a tile
constexpr int kTileCols = 64;   // columns of x in a tile (rows of y)
constexpr int kPitch = kTileWords + 1;
constexpr int kThreadsX = 32;
constexpr int kThreadsY = 8;
// 6 blocks of 256 threads per SM (at most 42 registers): each thread keeps its 8 row loads in
// flight, 96 KiB per SM, and the 6 tiles take 100 KiB of shared memory.
constexpr int kMinBlocks = 6;
constexpr int kWordHalves = kTileWords / kThreadsX;  // words of a y row segment per thread

template <typename T>
struct Layout {
  static constexpr int kRowsPerWord = 4 / sizeof(T);
  static constexpr int kTileRows = kTileWords * kRowsPerWord;  // rows of x in a tile
};

struct Tile {
  int64_t batch;
  int64_t row0;  // first row of x
  int64_t col0;  // first column of x
};

// band 0: row order from a 3-D grid (x: column tile, y: row tile, z: batch), no division, which
// is what small transposes notice (0.5 us of 4 in the probe); else banded_tile of a 1-D grid.
__device__ __forceinline__ Tile tile_of(int64_t row_tiles, int64_t col_tiles, int64_t band,
                                        int tile_rows) {
  if (band == 0) {
    return Tile{blockIdx.z, static_cast<int64_t>(blockIdx.y) * tile_rows,
                static_cast<int64_t>(blockIdx.x) * kTileCols};
  }
  const TileCoord c = banded_tile(blockIdx.x, row_tiles, col_tiles, band);
  return Tile{c.batch, c.row_tile * tile_rows, c.col_tile * kTileCols};
}

// Words (x[r][c], x[r][c+1]) as they belong in rows c and c+1 of the transposed tile.
template <typename T>
__device__ __forceinline__ void load_words(const T* row, int64_t row_stride, unsigned& w0,
                                           unsigned& w1) {
  if constexpr (sizeof(T) == 4) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(row));
    w0 = v.x;
    w1 = v.y;
  } else {
    const unsigned a = __ldg(reinterpret_cast<const unsigned*>(row));               // x[r][c], x[r][c+1]
    const unsigned b = __ldg(reinterpret_cast<const unsigned*>(row + row_stride));  // x[r+1][c], ...
    w0 = __byte_perm(a, b, 0x5410);  // x[r][c],   x[r+1][c]
    w1 = __byte_perm(a, b, 0x7632);  // x[r][c+1], x[r+1][c+1]
  }
}

template <typename T, bool kWordPath>
__global__ void __launch_bounds__(kThreadsX * kThreadsY, kMinBlocks)
    transpose_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols,
                     int64_t batch_stride, int64_t row_stride, int64_t row_tiles, int64_t col_tiles,
                     int64_t band) {
  using L = Layout<T>;
  constexpr int RPW = L::kRowsPerWord;
  constexpr int kLoadIters = kTileWords / kThreadsY;
  constexpr int kStoreIters = kTileCols / kThreadsY;
  __shared__ unsigned tile[kTileCols][kPitch];
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const Tile t = tile_of(row_tiles, col_tiles, band, L::kTileRows);
  const T* xb = x + t.batch * batch_stride;
  T* yb = y + t.batch * cols * rows;
  const bool full = kWordPath && t.row0 + L::kTileRows <= rows && t.col0 + kTileCols <= cols;
  if (full) {
    unsigned w[kLoadIters][2];
#pragma unroll
    for (int i = 0; i < kLoadIters; ++i) {
      const int64_t r = t.row0 + static_cast<int64_t>(ty + i * kThreadsY) * RPW;
      load_words<T>(xb + r * row_stride + t.col0 + 2 * tx, row_stride, w[i][0], w[i][1]);
    }
    const int s = (tx >> 4) & 1;  // the half-warp that writes its odd row first
#pragma unroll
    for (int i = 0; i < kLoadIters; ++i) {
      const int p = ty + i * kThreadsY;
      tile[2 * tx + s][p] = s ? w[i][1] : w[i][0];
      tile[2 * tx + 1 - s][p] = s ? w[i][0] : w[i][1];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kStoreIters; ++i) {
      const int c = ty + i * kThreadsY;
#pragma unroll
      for (int q = 0; q < kWordHalves; ++q) {
        const int word = tx + q * kThreadsX;
        T* out = yb + (t.col0 + c) * rows + t.row0 + word * RPW;
        *reinterpret_cast<unsigned*>(out) = tile[c][word];
      }
    }
    return;
  }
  // Scalar path: element (r, c) of x lives in half (r % RPW) of word [c][r / RPW].
  T* elems = reinterpret_cast<T*>(&tile[0][0]);
#pragma unroll
  for (int i = 0; i < kLoadIters; ++i) {
    const int p = ty + i * kThreadsY;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t c = t.col0 + 2 * tx + j;
#pragma unroll
      for (int h = 0; h < RPW; ++h) {
        const int64_t r = t.row0 + static_cast<int64_t>(p) * RPW + h;
        if (r < rows && c < cols) elems[((2 * tx + j) * kPitch + p) * RPW + h] = xb[r * row_stride + c];
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kStoreIters; ++i) {
    const int c = ty + i * kThreadsY;
    if (t.col0 + c >= cols) continue;
#pragma unroll
    for (int q = 0; q < kWordHalves; ++q) {
      const int word = tx + q * kThreadsX;
#pragma unroll
      for (int h = 0; h < RPW; ++h) {
        const int64_t r = t.row0 + static_cast<int64_t>(word) * RPW + h;
        if (r < rows) yb[(t.col0 + c) * rows + r] = elems[(c * kPitch + word) * RPW + h];
      }
    }
  }
}

bool aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

template <typename T>
cudaError_t launch_typed(const TransposeArgs& a, cudaStream_t stream) {
  using L = Layout<T>;
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t row_tiles = ceil_div(a.rows, L::kTileRows);
  const int64_t col_tiles = ceil_div(a.cols, kTileCols);
  const int64_t tiles = a.batch * row_tiles * col_tiles;
  if (tiles > 0x7fffffff) return cudaErrorInvalidValue;
  // Word path: fp32 reads 8-byte pairs of columns; 16-bit reads 4-byte pairs of columns from two
  // rows and writes 4-byte pairs of columns of y, whose rows then need an even length.
  const bool strides_even = a.row_stride % 2 == 0 && (a.batch == 1 || a.batch_stride % 2 == 0);
  const bool word_path = sizeof(T) == 4
                             ? aligned(x, 8) && strides_even
                             : aligned(x, 4) && aligned(y, 4) && strides_even && a.rows % 2 == 0;
  const dim3 block(kThreadsX, kThreadsY);
  // Row order takes the 3-D grid (band 0 in the kernel) wherever it fits the grid's limits.
  const bool grid3 = a.band <= 1 && row_tiles <= 65535 && a.batch <= 65535;
  const dim3 grid = grid3 ? dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles),
                                 static_cast<unsigned>(a.batch))
                          : dim3(static_cast<unsigned>(tiles));
  const int64_t band = grid3 ? 0 : banded_height(a.band, row_tiles);
  if (word_path) {
    transpose_kernel<T, true><<<grid, block, 0, stream>>>(x, y, a.rows, a.cols, a.batch_stride,
                                                          a.row_stride, row_tiles, col_tiles, band);
  } else {
    transpose_kernel<T, false><<<grid, block, 0, stream>>>(x, y, a.rows, a.cols, a.batch_stride,
                                                           a.row_stride, row_tiles, col_tiles, band);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_transpose(const TransposeArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.rows < 0 || a.cols < 0) return cudaErrorInvalidValue;
  if (a.batch == 0 || a.rows == 0 || a.cols == 0) return cudaSuccess;
  switch (a.dtype) {
    case DType::kFloat32: return launch_typed<float>(a, stream);
    case DType::kBFloat16: return launch_typed<__nv_bfloat16>(a, stream);
    case DType::kFloat16: return launch_typed<__half>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sk
