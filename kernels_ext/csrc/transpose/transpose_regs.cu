// Transpose in registers: each thread moves VEC x VEC blocks (VEC elements = 16 bytes), loading
// VEC rows of x with one 16-byte load each and storing VEC rows of y with one 16-byte store each;
// no shared memory, no barrier.
//
// The block's transpose: fp32 (VEC 4) is only a renaming of the loaded words. 16-bit (VEC 8):
// word k of x row r holds columns 2k, 2k+1; word m of y row c must hold x rows 2m, 2m+1 of column
// c, i.e. the low halves (c = 2k) or the high halves (c = 2k + 1) of word k of x rows 2m and 2m+1:
// one byte permute each, 32 per 8 x 8 block, and the rest is renaming.
//
// Lanes: p = lane % 4 picks the 16-byte column chunk, q = lane / 4 the VEC-row group, so a load
// instruction reads 64 contiguous bytes of 8 rows of x (two whole sectors each) and a store
// instruction writes 128 contiguous bytes of 4 rows of y (8 lanes x 16 bytes each). fp32 threads
// take two blocks, 32 rows apart, so every thread has eight 16-byte loads in flight (bf16: one
// block, eight loads). A warp covers 64 rows x 4 VEC columns; a block of 8 warps 64 x 32 VEC.
//
// Only for layouts where every block is whole and aligned: 16-byte-aligned x and y, rows, columns
// and the strides multiples of VEC (launch_transpose_regs says when; the tiled kernel does the
// rest).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "tile_order.cuh"
#include "transpose.h"

namespace sk {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileRows = 64;  // rows of x per block (8 row groups x 8, or 2 x 8 x 4 for fp32)
// 4 blocks of 256 threads per SM (64 registers; at 5 blocks, 48, the 16-bit kernel spilled):
// 1024 threads x 8 loads of 16 bytes, 128 KiB in flight per SM.
constexpr int kMinBlocks = 4;

template <int ElemBytes>
struct Shape {
  static constexpr int VEC = 16 / ElemBytes;
  static constexpr int kBlocks = ElemBytes == 4 ? 2 : 1;  // VEC x VEC blocks per thread
  static constexpr int kTileCols = kWarps * 4 * VEC;      // columns of x per block
};

// y rows c0 + j (j < VEC) of one block, from its x rows (words of 4 bytes).
__device__ __forceinline__ void transpose_block(const uint4 (&in)[4], uint4 (&out)[4]) {
  // fp32: out[j] = column j of the 4 rows.
  out[0] = make_uint4(in[0].x, in[1].x, in[2].x, in[3].x);
  out[1] = make_uint4(in[0].y, in[1].y, in[2].y, in[3].y);
  out[2] = make_uint4(in[0].z, in[1].z, in[2].z, in[3].z);
  out[3] = make_uint4(in[0].w, in[1].w, in[2].w, in[3].w);
}

__device__ __forceinline__ unsigned word(const uint4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;  // k is a compile-time constant
}

__device__ __forceinline__ void transpose_block(const uint4 (&in)[8], uint4 (&out)[8]) {
  // 16-bit: y row c = 2k + h, word m = half h of word k of x rows 2m and 2m + 1.
  unsigned w[8][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const unsigned a = word(in[2 * m], k), b = word(in[2 * m + 1], k);
      w[2 * k][m] = __byte_perm(a, b, 0x5410);      // low halves: column 2k
      w[2 * k + 1][m] = __byte_perm(a, b, 0x7632);  // high halves: column 2k + 1
    }
  }
#pragma unroll
  for (int c = 0; c < 8; ++c) out[c] = make_uint4(w[c][0], w[c][1], w[c][2], w[c][3]);
}

template <int ElemBytes>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    transpose_regs_kernel(const uint8_t* __restrict__ x, uint8_t* __restrict__ y, int64_t rows,
                          int64_t cols, int64_t batch_stride, int64_t row_stride, int64_t row_tiles,
                          int64_t col_tiles, int64_t band) {
  using S = Shape<ElemBytes>;
  constexpr int VEC = S::VEC;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p = lane & 3, q = lane >> 2;
  const TileCoord tile = banded_tile(blockIdx.x, row_tiles, col_tiles, band);
  const int64_t b = tile.batch;
  const int64_t tr = tile.row_tile;
  const int64_t c0 = tile.col_tile * S::kTileCols + (warp * 4 + p) * VEC;  // column of x
  if (c0 >= cols) return;  // cols % VEC == 0: a block is all in or all out
  const uint8_t* xb = x + b * batch_stride * ElemBytes;
  uint8_t* yb = y + b * rows * cols * ElemBytes;
  uint4 in[S::kBlocks][VEC];
  bool live[S::kBlocks];
#pragma unroll
  for (int u = 0; u < S::kBlocks; ++u) {
    const int64_t r0 = tr * kTileRows + (u * 8 + q) * VEC;  // u: the fp32 thread's second block
    live[u] = r0 < rows;                                    // rows % VEC == 0 likewise
    if (live[u]) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        in[u][i] = __ldg(reinterpret_cast<const uint4*>(xb + ((r0 + i) * row_stride + c0) * ElemBytes));
      }
    }
  }
#pragma unroll
  for (int u = 0; u < S::kBlocks; ++u) {
    if (!live[u]) continue;
    const int64_t r0 = tr * kTileRows + (u * 8 + q) * VEC;
    uint4 out[VEC];
    transpose_block(in[u], out);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      *reinterpret_cast<uint4*>(yb + ((c0 + j) * rows + r0) * ElemBytes) = out[j];
    }
  }
}

template <int ElemBytes>
cudaError_t launch_bytes(const TransposeArgs& a, cudaStream_t stream) {
  using S = Shape<ElemBytes>;
  const int64_t row_tiles = ceil_div(a.rows, kTileRows);
  const int64_t col_tiles = ceil_div(a.cols, S::kTileCols);
  const int64_t tiles = a.batch * row_tiles * col_tiles;
  if (tiles > 0x7fffffff) return cudaErrorInvalidValue;
  transpose_regs_kernel<ElemBytes><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(a.x), static_cast<uint8_t*>(a.y), a.rows, a.cols, a.batch_stride,
      a.row_stride, row_tiles, col_tiles, banded_height(a.band, row_tiles));
  return cudaGetLastError();
}

}  // namespace

bool transpose_regs_supports(const TransposeArgs& a) {
  const int vec = vector_width(a.dtype);
  return aligned16(a.x) && aligned16(a.y) && a.rows % vec == 0 && a.cols % vec == 0 &&
         a.row_stride % vec == 0 && (a.batch == 1 || a.batch_stride % vec == 0);
}

cudaError_t launch_transpose_regs(const TransposeArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.rows < 0 || a.cols < 0) return cudaErrorInvalidValue;
  if (a.batch == 0 || a.rows == 0 || a.cols == 0) return cudaSuccess;
  if (!transpose_regs_supports(a)) return cudaErrorInvalidValue;
  return element_size(a.dtype) == 4 ? launch_bytes<4>(a, stream) : launch_bytes<2>(a, stream);
}

}  // namespace sk
