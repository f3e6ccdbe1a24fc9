// The order in which a transpose's blocks visit the tiles of one matrix (both transpose kernels).
//
// Row order (band 1) walks each row of tiles left to right: one wave of blocks reads a few whole
// rows of x, contiguous, but writes a sliver of every row of y. For a 32768 x 8192 fp32 matrix
// that is 1 KiB into each of 8192 rows of y 128 KiB apart, and the 2-D transpose ran at 0.83 of
// the copy bandwidth where the batched one, whose wave covers one whole 8 MiB matrix, ran at
// 0.97 (results/h200/issue15/families.json). Bands of `band` row tiles, walked column by column,
// make a wave's region squarer: longer runs in y for shorter runs in x, and fewer pages touched.
//
// Plain C++ as well as CUDA, so the CPU tests can check that every order is a bijection.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SK_TILE_ORDER_FN __host__ __device__ __forceinline__
#else
#define SK_TILE_ORDER_FN inline
#endif

namespace sk {

struct TileCoord {
  int64_t batch;
  int64_t row_tile;
  int64_t col_tile;
};

// Tile `index` of a grid over batch x row_tiles x col_tiles (a matrix after another). Within a
// band of `band` row tiles (the last band may be shorter) consecutive indices go down one column
// of tiles, then on to the next column. band 1 is row order.
SK_TILE_ORDER_FN TileCoord banded_tile(int64_t index, int64_t row_tiles, int64_t col_tiles,
                                       int64_t band) {
  const int64_t per_batch = row_tiles * col_tiles;
  TileCoord t;
  t.batch = index / per_batch;
  const int64_t r = index - t.batch * per_batch;
  const int64_t first_row = r / (band * col_tiles) * band;  // the band's first row tile
  const int64_t height = row_tiles - first_row < band ? row_tiles - first_row : band;
  const int64_t within = r - first_row * col_tiles;
  const int64_t down = within / height;  // one division: the column, then the row from it
  t.col_tile = down;
  t.row_tile = first_row + (within - down * height);
  return t;
}

// A band taller than any matrix: column order (torch.compile's grid order).
constexpr int64_t kColumnOrder = int64_t{1} << 30;

// The band a launch uses: at least 1, and no taller than the matrix (the same order, and no product
// of a caller's huge band with the column count to overflow).
inline int64_t banded_height(int64_t band, int64_t row_tiles) {
  return band < 1 ? 1 : (band > row_tiles ? row_tiles : band);
}

// band 0 (automatic). With 64-word tiles the sweep (scripts/tune/specs/transpose_bands.yaml, H200,
// results/h200/issue15/2026-12-02/) found one case where a band pays: rows of y of 128 KiB and more
// (32768 x 8192 fp32: row order 562.0 us, band 128 528.6 us). With y rows of 16-64 KiB row order was
// best or within 2.6% (bf16 32768 x 8192: 277.8 against 282.3 us), and on 8 KiB rows (the batched
// case) every band was level. The threshold is where those four shapes put it.
constexpr int64_t kAutoBand = 128;
constexpr int64_t kAutoBandMinRowBytes = int64_t{128} << 10;

inline int64_t auto_band(int64_t rows, int64_t element_bytes) {
  return rows * element_bytes >= kAutoBandMinRowBytes ? kAutoBand : 1;
}

}  // namespace sk
