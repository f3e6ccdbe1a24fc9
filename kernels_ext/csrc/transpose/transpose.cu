// Tiled transpose through shared memory, in 32-bit words and without bank conflicts.
//
// A tile is 64 columns of x by 64 word-rows (large tensors: each row of y gets 256 contiguous
// bytes per tile; 32 word-rows ran the 1 GiB 2-D case at 0.83 of the copy bandwidth in fp32 and
// 0.88 in bf16, 64 at 0.89 / 0.91: scripts/tune/transpose_probe.cu, results/h200/issue15/) or by
// 32 word-rows (tensors whose 64-word grid is under two waves of resident blocks). Small 16-bit
// tensors whose dims are multiples of 32 take a 32 x 32 tile of 128 threads instead
// (transpose_small16_kernel, below).
// A word holds one fp32 element, or two 16-bit elements from neighbouring rows of x:
// (x[2p][c], x[2p+1][c]) is exactly two neighbouring elements of row c of y. Built that way (a
// byte permute of two 32-bit loads, one per row), the 16-bit transpose becomes a transpose of
// words, and both global phases move 128 contiguous bytes per warp instruction: loads along rows
// of x, stores along rows of y.
//
// Shared memory is word[64][words + 1]. Stores into it go to column p of rows 2tx and 2tx+1; with
// the row pitch = 1 mod 32 their banks are (2tx + p) and (2tx + 1 + p). Half-warp 0 writes its
// even row first and half-warp 1 its odd row first, so every store instruction touches 32
// distinct banks; reads of row c at columns tx and tx + 32 hit bank (c + tx): distinct too.
//
// Tiles that stick out of the matrix, and layouts whose rows do not allow the 32-bit (fp32:
// 64-bit) accesses (16-bit rows of odd length, misaligned views), take the element path
// (element_tile): one element per access through the same shared memory, bounds-checked only in
// edge tiles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/grid.cuh"
#include "tile_order.cuh"
#include "transpose.h"

namespace sk {
namespace {

constexpr int kTileCols = 64;  // columns of x in a tile (rows of y)
constexpr int kThreadsX = 32;
constexpr int kThreadsY = 8;

// A tile of kWords word-rows: 64 (256-byte segments of y rows) for the large cases; 32 where the
// 64-word grid would be under two waves of resident blocks (small tensors: twice the blocks, each
// thread half the loads, so less of the one DRAM round trip such a call is waits in one thread).
template <typename T, int kWords>
struct Layout {
  static constexpr int kRowsPerWord = 4 / sizeof(T);
  static constexpr int kTileRows = kWords * kRowsPerWord;        // rows of x in a tile
  static constexpr int kPitch = kWords + 1;                       // words per row of the tile
  static constexpr int kLoadIters = kWords / kThreadsY;           // word-rows per thread
  static constexpr int kStoreIters = kTileCols / kThreadsY;       // y rows per thread
  static constexpr int kWordSegments = kWords / kThreadsX;        // words of a y row per thread
  static constexpr int kElemSegments = kTileRows / kThreadsX;     // elements of a y row per thread
  // 64 words: 6 blocks of 256 threads per SM (at most 42 registers) keep 8 row loads per thread
  // in flight, 96 KiB per SM, in 100 KiB of shared memory; 32 words: 8 blocks, the SM's limit.
  static constexpr int kMinBlocks = kWords == 64 ? 6 : 8;
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

// The word path: a whole tile whose rows allow the 32-bit (fp32: 64-bit) loads and stores.
template <typename T, int kWords>
__device__ __forceinline__ void word_tile(const T* xb, T* yb, const Tile& t, int64_t rows,
                                          int64_t row_stride, unsigned (*tile)[kWords + 1]) {
  using L = Layout<T, kWords>;
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  unsigned w[L::kLoadIters][2];
#pragma unroll
  for (int i = 0; i < L::kLoadIters; ++i) {
    const int64_t r = t.row0 + static_cast<int64_t>(ty + i * kThreadsY) * L::kRowsPerWord;
    load_words<T>(xb + r * row_stride + t.col0 + 2 * tx, row_stride, w[i][0], w[i][1]);
  }
  const int s = (tx >> 4) & 1;  // the half-warp that writes its odd row first
#pragma unroll
  for (int i = 0; i < L::kLoadIters; ++i) {
    const int p = ty + i * kThreadsY;
    tile[2 * tx + s][p] = s ? w[i][1] : w[i][0];
    tile[2 * tx + 1 - s][p] = s ? w[i][0] : w[i][1];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < L::kStoreIters; ++i) {
    const int c = ty + i * kThreadsY;
#pragma unroll
    for (int q = 0; q < L::kWordSegments; ++q) {
      const int word = tx + q * kThreadsX;
      T* out = yb + (t.col0 + c) * rows + t.row0 + word * L::kRowsPerWord;
      *reinterpret_cast<unsigned*>(out) = tile[c][word];
    }
  }
}

// The element path, for edge tiles and for layouts the word path cannot take (16-bit rows of odd
// length, misaligned views): one element per global access, but each warp access is 32
// neighbouring elements (64 or 128 contiguous bytes) in both phases. The words of the shared tile
// are those of the word path: element r of column c of x is half r % kRowsPerWord of
// tile[c][r / kRowsPerWord]. A thread assembles its words in registers, every load before any
// store to shared memory (a load through a generic pointer may alias the tile, so interleaved they
// would run one DRAM round trip at a time), then stores word p of row tx + 32j: bank
// (tx + p) mod 32, distinct across the warp. Reads of row c at elements tx + 32k pair up in a word
// (a broadcast) over 16 or 32 banks. kChecked: the tile sticks out of the matrix.
template <typename T, int kWords, bool kChecked>
__device__ __forceinline__ void element_tile(const T* xb, T* yb, const Tile& t, int64_t rows,
                                             int64_t cols, int64_t row_stride,
                                             unsigned (*tile)[kWords + 1]) {
  using L = Layout<T, kWords>;
  using Bits = std::conditional_t<sizeof(T) == 4, unsigned, unsigned short>;
  constexpr int kCols = kTileCols / kThreadsX;  // columns per thread
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const Bits* xbits = reinterpret_cast<const Bits*>(xb);
  unsigned w[L::kLoadIters][kCols];
#pragma unroll
  for (int i = 0; i < L::kLoadIters; ++i) {
    const int64_t r0 = t.row0 + static_cast<int64_t>(ty + i * kThreadsY) * L::kRowsPerWord;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int64_t c = t.col0 + tx + j * kThreadsX;
      unsigned word = 0;
#pragma unroll
      for (int h = 0; h < L::kRowsPerWord; ++h) {
        if (!kChecked || (r0 + h < rows && c < cols)) {
          word |= static_cast<unsigned>(__ldg(xbits + (r0 + h) * row_stride + c)) << (16 * h);
        }
      }
      w[i][j] = word;
    }
  }
#pragma unroll
  for (int i = 0; i < L::kLoadIters; ++i) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) tile[tx + j * kThreadsX][ty + i * kThreadsY] = w[i][j];
  }
  __syncthreads();
  // Elements tx + 32k of row c: each warp store is 32 neighbouring elements. (One 32-bit shared
  // load per word with its halves stored one by one, every other element per warp store, halves
  // the shared loads that ncu found queued (MIO throttle, 41% of the stalls at 4095 x 4097), but
  // ran 3-4% slower: results/h200/issue15/2026-12-02b/.)
  const T* elems = reinterpret_cast<const T*>(&tile[0][0]);
  constexpr int kPitchElems = L::kPitch * L::kRowsPerWord;
#pragma unroll
  for (int i = 0; i < L::kStoreIters; ++i) {
    const int c = ty + i * kThreadsY;
    if (kChecked && t.col0 + c >= cols) continue;
#pragma unroll
    for (int k = 0; k < L::kElemSegments; ++k) {
      const int e = tx + k * kThreadsX;
      if (!kChecked || t.row0 + e < rows) yb[(t.col0 + c) * rows + t.row0 + e] = elems[c * kPitchElems + e];
    }
  }
}

// Blocks per SM the kernel is compiled for. sm_80's ptxas spills the 16-bit element path of the
// 64-word tile at 6 (42 registers: its 32 loads in flight hold 32 registers), so it gets 5 there;
// sm_90a fits it in 40 with no spills, and that build is the one measured.
template <typename T, int kWords, bool kWordPath>
constexpr int min_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if (!kWordPath && kWords == 64 && sizeof(T) == 2) return Layout<T, kWords>::kMinBlocks - 1;
#endif
  return Layout<T, kWords>::kMinBlocks;
}

template <typename T, int kWords, bool kWordPath>
__global__ void __launch_bounds__(kThreadsX * kThreadsY, (min_blocks<T, kWords, kWordPath>()))
    transpose_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols,
                     int64_t batch_stride, int64_t row_stride, int64_t row_tiles, int64_t col_tiles,
                     int64_t band) {
  using L = Layout<T, kWords>;
  __shared__ unsigned tile[kTileCols][L::kPitch];
  const Tile t = tile_of(row_tiles, col_tiles, band, L::kTileRows);
  const T* xb = x + t.batch * batch_stride;
  T* yb = y + t.batch * cols * rows;
  const bool full = t.row0 + L::kTileRows <= rows && t.col0 + kTileCols <= cols;
  if (full && kWordPath) {
    word_tile<T, kWords>(xb, yb, t, rows, row_stride, tile);
  } else if (full) {
    element_tile<T, kWords, false>(xb, yb, t, rows, cols, row_stride, tile);
  } else {
    element_tile<T, kWords, true>(xb, yb, t, rows, cols, row_stride, tile);
  }
}

// Small 16-bit transposes: a tile of 32 x 32 elements (16 word-rows by 32 columns) per block of
// 128 threads, 4 word loads and 4 word stores per thread. Under one wave the 64-column tiles give
// each SM one or two big blocks whose barrier waits for the slowest of 2,048 loads; this tile
// gives it eight small ones that pass their barriers independently (torch.compile's Triton kernel
// at 1024^2 bf16 runs this tile: 1,024 blocks of 128 threads).
// Lane l of half-warp g (0..7) loads the column pair 2l, 2l+1 of word-rows g and g + 8 (each a
// pair of rows, as in word_tile). Shared memory is word[32][17]: the two half-warps of a warp hold
// word-rows p and p + 1, so their stores to row 2l (bank 2l + p) and to row 2l + 1 (2l + 17 + p)
// fall on banks of opposite parity, 32 distinct either way. Half-warp h of warp w then stores rows
// c = 16h + w + 4j of y (16 words, 64 bytes each): banks 17c + l, which are 16h + 17(w + 4j) + l
// mod 32, so the two halves take disjoint sets of 16 (scripts/dev/transpose_small16_model.py
// checks the map and the banks).
constexpr int kSmallTile = 32;
constexpr int kSmallThreads = 128;
constexpr int kSmallWords = kSmallTile / 2;
constexpr int kSmallBlocksPerSm = 16;  // 2,048 threads: the SM's limit (20 registers, 2 KiB each)

template <typename T>
__global__ void __launch_bounds__(kSmallThreads, kSmallBlocksPerSm)
    transpose_small16_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols,
                             int64_t batch_stride, int64_t row_stride) {
  static_assert(sizeof(T) == 2, "the small tile pairs rows of 16-bit elements into words");
  __shared__ unsigned tile[kSmallTile][kSmallWords + 1];
  const int t = threadIdx.x;
  const int l = t & 15;
  const int g = t >> 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kSmallTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kSmallTile;
  const T* xb = x + blockIdx.z * batch_stride;
  T* yb = y + blockIdx.z * cols * rows;
  unsigned w[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = row0 + 2 * (g + 8 * i);
    load_words<T>(xb + r * row_stride + col0 + 2 * l, row_stride, w[i][0], w[i][1]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    tile[2 * l][g + 8 * i] = w[i][0];
    tile[2 * l + 1][g + 8 * i] = w[i][1];
  }
  __syncthreads();
  const int h = g & 1;
  const int warp = t >> 5;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = 16 * h + warp + 4 * j;
    *reinterpret_cast<unsigned*>(yb + (col0 + c) * rows + row0 + 2 * l) = tile[c][l];
  }
}

bool aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

struct Grid {
  dim3 blocks;
  int64_t row_tiles;
  int64_t col_tiles;
  int64_t band;  // 0: the 3-D grid in row order
};

// Row order takes the 3-D grid (band 0 in the kernel) wherever it fits the grid's limits.
Grid grid_of(const TransposeArgs& a, int tile_rows) {
  Grid g;
  g.row_tiles = ceil_div(a.rows, tile_rows);
  g.col_tiles = ceil_div(a.cols, kTileCols);
  const bool grid3 = a.band <= 1 && g.row_tiles <= 65535 && a.batch <= 65535;
  g.blocks = grid3 ? dim3(static_cast<unsigned>(g.col_tiles), static_cast<unsigned>(g.row_tiles),
                          static_cast<unsigned>(a.batch))
                   : dim3(static_cast<unsigned>(a.batch * g.row_tiles * g.col_tiles));
  g.band = grid3 ? 0 : banded_height(a.band, g.row_tiles);
  return g;
}

template <typename T, int kWords>
cudaError_t launch_tiles(const TransposeArgs& a, bool word_path, cudaStream_t stream) {
  const Grid g = grid_of(a, Layout<T, kWords>::kTileRows);
  if (a.batch * g.row_tiles * g.col_tiles > 0x7fffffff) return cudaErrorInvalidValue;
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const dim3 block(kThreadsX, kThreadsY);
  if (word_path) {
    transpose_kernel<T, kWords, true><<<g.blocks, block, 0, stream>>>(
        x, y, a.rows, a.cols, a.batch_stride, a.row_stride, g.row_tiles, g.col_tiles, g.band);
  } else {
    transpose_kernel<T, kWords, false><<<g.blocks, block, 0, stream>>>(
        x, y, a.rows, a.cols, a.batch_stride, a.row_stride, g.row_tiles, g.col_tiles, g.band);
  }
  return cudaGetLastError();
}

// The small tile takes whole tiles only, in row order from the 3-D grid, on the word path.
bool small16_fits(const TransposeArgs& a, bool word_path) {
  return a.dtype != DType::kFloat32 && word_path && a.rows % kSmallTile == 0 &&
         a.cols % kSmallTile == 0 && a.rows / kSmallTile <= 65535 && a.batch <= 65535 && a.band <= 1;
}

template <typename T>
cudaError_t launch_small16(const TransposeArgs& a, cudaStream_t stream) {
  const dim3 blocks(static_cast<unsigned>(a.cols / kSmallTile), static_cast<unsigned>(a.rows / kSmallTile),
                    static_cast<unsigned>(a.batch));
  transpose_small16_kernel<T><<<blocks, kSmallThreads, 0, stream>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows, a.cols, a.batch_stride, a.row_stride);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const TransposeArgs& a, cudaStream_t stream) {
  const bool word_path = transpose_words_fit(a);
  int words = a.tile_words;
  if (words == 16) {
    if constexpr (sizeof(T) == 2) {
      if (small16_fits(a, word_path)) return launch_small16<T>(a, stream);
    }
    words = 0;  // where the small tile does not apply: the automatic tile
  }
  if (words == 0) {
    if constexpr (sizeof(T) == 2) {
      // The 32 x 32 tile where its grid fits one wave of resident blocks. Measured on an H100
      // (scripts/tune/specs/transpose_small.yaml, two runs, results/h100/issue15/2026-12-08/call1/):
      // 2-9% faster than the 64-column tiles from 256 to 2,048 of its tiles (1024^2 bf16: 2.52-2.54
      // against 2.73-2.74 us), level at 1,024 tiles over a batch of 16 (16 x 256^2), and 1-2% slower
      // at 4,096 (2048^2), two waves.
      const int64_t small_tiles = a.batch * (a.rows / kSmallTile) * (a.cols / kSmallTile);
      if (small16_fits(a, word_path) && small_tiles <= int64_t{kSmallBlocksPerSm} * sm_count()) {
        return launch_small16<T>(a, stream);
      }
    }
    // 32 word-rows where the 64-word grid is under two waves of resident blocks. Measured on the
    // H200 (scripts/tune/specs/transpose_tiles.yaml, three runs, results/h200/issue15/2026-12-02b/):
    // 32 was 1-37% faster from 128 to 1,024 tiles of 64 (fp32 2048^2: 8.9 against 9.3 us), within
    // 1.3% at 2,048, and 64 was 3-17% faster from 2,080 up (4095 x 4097, 4096^2 fp32).
    const int64_t tiles64 = a.batch * ceil_div(a.rows, Layout<T, 64>::kTileRows) * ceil_div(a.cols, kTileCols);
    words = tiles64 < 2 * int64_t{Layout<T, 64>::kMinBlocks} * sm_count() ? 32 : 64;
  }
  if (words == 32) return launch_tiles<T, 32>(a, word_path, stream);
  if (words == 64) return launch_tiles<T, 64>(a, word_path, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

bool transpose_words_fit(const TransposeArgs& a) {
  // fp32 reads 8-byte pairs of columns; 16-bit reads 4-byte pairs of columns from two rows and
  // writes 4-byte pairs of columns of y, whose rows then need an even length.
  const bool strides_even = a.row_stride % 2 == 0 && (a.batch == 1 || a.batch_stride % 2 == 0);
  return a.dtype == DType::kFloat32
             ? aligned(a.x, 8) && strides_even
             : aligned(a.x, 4) && aligned(a.y, 4) && strides_even && a.rows % 2 == 0;
}

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
