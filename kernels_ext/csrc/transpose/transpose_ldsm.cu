// 16-bit transposes whose rows allow no word accesses (odd row lengths of x or y, views starting
// mid-word), with ldmatrix.trans doing the transpose on its way out of shared memory.
//
// Every global access is one element (2 bytes), each warp access 32 neighbouring elements of a
// row, in both phases. What this kernel saves is shared-memory instructions, the queue ncu found
// full in the element path of transpose.cu (MIO throttle, 41% of its stalls at 4095 x 4097): a
// thread packs the 8 elements it loaded into one 16-byte shared store, and one ldmatrix.x4.trans
// hands it the 8 elements it stores. Two shared instructions per 8 elements, against 12 there.
// (torch.compile's Triton kernel for these layouts does the same; our tile order and unchecked
// interior tiles are ours.)
//
// A sub-tile is 32 x 32 elements, 4 warps. Warp w, lane l loads column l of x rows w + 4i
// (i = 0..7) and stores them as 16-byte unit (w, l) of the sub-tile. ldmatrix matrix j of warp w
// takes, as its row rho, unit (rho / 2, 8w + 2j + rho % 2): lane t then receives, in register j,
// element rho = 2 (t % 4) (+1) of column t / 4, i.e. x[t % 4 + 4 (t / 4)][8w + 2j (+1)] =
// x[t][8w + 2j + b], b = 0, 1: column 8w + 2j + b of x, which is row 8w + 2j + b of y, at
// position t. So lane t stores element t of 8 rows of y (scripts/dev/transpose_ldsm_model.py
// checks the whole map).
// Banks: unit (w, l) sits at w * 32 + (l ^ 2w). A store phase (8 lanes) writes 8 units of one
// 128-byte group; an ldmatrix phase reads rows rho whose low unit bits (2j + rho % 2) ^ 2 (rho / 2)
// are 8 distinct values. No conflicts either way.
//
// A block is kRowSubs x kColSubs sub-tiles (kRowSubs * 32 rows of x by kColSubs * 32 columns),
// every load of all of them before the first shared store.
//
// Measured on the H200 (docs/PERF.md, 2026-12-03): 4-14% behind transpose.cu's smem kernel on
// every aligned case, ahead of it on all but the largest odd bf16 shape in the order
// launch_transpose_odd16 picks (odd16_rule.h), which is what the transpose op runs there.
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/divide.cuh"
#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "../tile/ldg.cuh"
#include "../tile/mma_sync.cuh"
#include "odd16_rule.h"
#include "offsets.h"
#include "tile_order.cuh"
#include "transpose.h"

namespace sk {
namespace {

constexpr int kSub = 32;      // rows and columns of x in a sub-tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kPerThread = kSub * kSub / kThreads;  // 8 elements of a sub-tile per thread

template <int kRowSubs, int kColSubs>
struct LdsmShape {
  static constexpr int kRows = kRowSubs * kSub;   // rows of x per block
  static constexpr int kCols = kColSubs * kSub;   // columns of x per block
  static constexpr int kSubs = kRowSubs * kColSubs;
  // 16 blocks of 128 threads fill an SM (32 registers); more loads in flight need more registers.
  // sm_80's ptxas spills the 2 x 2 block at 8 (64 registers) and, with 32-bit offsets, at 6 (80);
  // it gets 5 there. sm_90's ptxas fits
  // the 2 x 1 block in 32 registers, but 16 of those blocks per SM ran 7-16% slower in column
  // order on the large odd shapes than 10 (4095 x 4097: 2,224 against 2,393 GB/s) and level in row
  // order (results/h200/issue15/2026-12-03b/transpose_odd_call1.json).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr int kMinBlocks = kSubs == 1 ? 16 : (kSubs == 2 ? 10 : 5);
#else
  static constexpr int kMinBlocks = kSubs == 1 ? 16 : (kSubs == 2 ? 10 : 8);
#endif
};

// Sub-tile (rs, cs) of the block whose first element is x[r0][c0]; kChecked: the block sticks
// out of the matrix (loads outside read zeros, stores outside are skipped). `rows` is the row
// count the grid walks; y's rows are `y_rows` long. kFlat: x is a batch of matrices of y_rows rows,
// one after another (batch stride = y_rows row strides), walked as one matrix of all their rows,
// so a matrix whose row count is not a multiple of the block's does not leave most of its last
// row of blocks idle (7 x 129 rows: 15 blocks of 64 rows, not 21); row e of the walk is row
// e % y_rows of matrix e / y_rows, and its elements in y are matrix strides apart.
// I: the type of offsets within the block's matrix (or the flattened walk), int32_t where the
// launcher has checked that they fit, so that each address is one 32-bit multiply-add into a
// 64-bit pointer rather than 64-bit arithmetic. On the H200 (results/h200/issue15/2026-12-04,
// ncu and the odd-shape sweep against the 64-bit kernel): 7 x 129 x 1000 321 -> 237 instructions
// per warp (Triton's kernel, half our block, 100), 2.91 against 3.14 us; 1023 x 1025 3.01 against
// 3.42 us; 4095 x 4097 in column order 10.8M -> 6.4M instructions.
// kKeep: x's elements are loaded L1 evict_last with an L2 evict_last policy, as torch.compile's
// Triton kernel for these layouts loads them (its SASS: LDG.E.EL.U16 with a policy descriptor),
// instead of ld.global.nc. With odd rows most 32-byte sectors of x hold elements of two blocks.
template <int kRowSubs, int kColSubs, bool kChecked, bool kFlat, bool kKeep, class I>
__device__ __forceinline__ void ldsm_block(const uint16_t* __restrict__ xb, uint16_t* __restrict__ yb,
                                           I r0, I c0, I rows, I cols, I row_stride, I y_rows,
                                           Divisor by_y_rows, uint4 (*units)[kWarps][32]) {
  constexpr int kSubs = kRowSubs * kColSubs;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint16_t v[kSubs][kPerThread];
  const uint64_t keep = kKeep ? tile::l2_policy_evict_last() : 0;
#pragma unroll
  for (int s = 0; s < kSubs; ++s) {
    const I c = c0 + (s % kColSubs) * kSub + lane;
    const I r = r0 + (s / kColSubs) * kSub + w;
    const uint16_t* p = xb + r * row_stride + c;
    // Rows of x left from r (at most what the block needs), kept in 32 bits for the checks.
    const int left = kChecked && c < cols ? static_cast<int>(rows - r < kSub ? rows - r : kSub) : 0;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (!kChecked || 4 * i < left) {
        v[s][i] = kKeep ? tile::ldg_u16_evict_last(p + 4 * i * row_stride, keep) : __ldg(p + 4 * i * row_stride);
      } else {
        v[s][i] = 0;
      }
    }
  }
#pragma unroll
  for (int s = 0; s < kSubs; ++s) {
    uint4 u;
    u.x = v[s][0] | (static_cast<unsigned>(v[s][1]) << 16);
    u.y = v[s][2] | (static_cast<unsigned>(v[s][3]) << 16);
    u.z = v[s][4] | (static_cast<unsigned>(v[s][5]) << 16);
    u.w = v[s][6] | (static_cast<unsigned>(v[s][7]) << 16);
    units[s][w][lane ^ (2 * w)] = u;
  }
  __syncthreads();
  const int rho = lane & 7, j_of_lane = lane >> 3;
  const int src_w = rho >> 1;
  const int src_l = (8 * w + 2 * j_of_lane + (rho & 1)) ^ (2 * src_w);
#pragma unroll
  for (int s = 0; s < kSubs; ++s) {
    uint32_t got[4];
    tile::ldmatrix_x4_trans(got, tile::smem_u32(&units[s][src_w][src_l]));
    const I yr0 = c0 + (s % kColSubs) * kSub + 8 * w;  // first of this warp's 8 rows of y
    const I e = r0 + (s / kColSubs) * kSub + lane;      // the element of each row
    I at = yr0 * y_rows + e;
    if constexpr (kFlat) {  // the launcher keeps the walk under 2^31 rows
      const I matrix = static_cast<I>(quotient(static_cast<uint32_t>(e), by_y_rows));
      at += matrix * (y_rows * cols - y_rows);
    }
    uint16_t* q = yb + at;
    const int left = kChecked && e < rows ? static_cast<int>(cols - yr0 < 8 ? cols - yr0 : 8) : 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // row 8w + k = 8w + 2j + b of the sub-tile's y rows
      const uint16_t out = static_cast<uint16_t>(k & 1 ? got[k >> 1] >> 16 : got[k >> 1] & 0xffffu);
      if (!kChecked || k < left) q[k * y_rows] = out;
    }
  }
}

// Tile order by `band`: 0 row order and -1 column order from a 3-D grid (x: the fast tile index,
// y: the other, z: batch), no division per block; > 0 bands of that many row tiles from a 1-D grid
// (banded_tile, three 64-bit divisions per block).
// Parameter order: what every block reads before its first load (band, the sizes in I, the batch
// stride) comes right after the pointers, in 32 bytes when I is 32-bit, so that a block's first
// constant-bank miss brings all of it; the banded and flattened walks' values come last. Before,
// `band` sat 0x50 bytes in and was read first. torch.compile's Triton kernel reads only its two
// pointers (its sizes are immediates), and these shapes under one wave trailed it by 0.2-0.35 us.
// On an H100 (results/h100/issue15/2026-12-07/call2 -> call3) the 32 x 32 blocks gained 0.3-0.5 us
// at 1023 x 1025 and 7 x 129 x 1000; the 64 x 32 blocks 0.02-0.22 us, within the calls' noise.
template <int kRowSubs, int kColSubs, bool kFlat, bool kKeep, class I>
__global__ void __launch_bounds__(kThreads, (LdsmShape<kRowSubs, kColSubs>::kMinBlocks))
    transpose_ldsm_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ y, int32_t band, I rows,
                          I cols, I row_stride, I y_rows, int64_t batch_stride, Divisor by_y_rows,
                          int64_t row_tiles, int64_t col_tiles) {
  using S = LdsmShape<kRowSubs, kColSubs>;
  __shared__ uint4 units[S::kSubs][kWarps][32];
  TileCoord t;
  if (band == 0) {
    t = TileCoord{blockIdx.z, blockIdx.y, blockIdx.x};
  } else if (band < 0) {
    t = TileCoord{blockIdx.z, blockIdx.x, blockIdx.y};
  } else {
    t = banded_tile(blockIdx.x, row_tiles, col_tiles, band);
  }
  const uint16_t* xb = x + t.batch * batch_stride;
  uint16_t* yb = y + t.batch * static_cast<int64_t>(rows) * cols;
  const I r0 = static_cast<I>(t.row_tile * S::kRows), c0 = static_cast<I>(t.col_tile * S::kCols);
  if (r0 + S::kRows <= rows && c0 + S::kCols <= cols) {
    ldsm_block<kRowSubs, kColSubs, false, kFlat, kKeep, I>(xb, yb, r0, c0, rows, cols, row_stride, y_rows, by_y_rows, units);
  } else {
    ldsm_block<kRowSubs, kColSubs, true, kFlat, kKeep, I>(xb, yb, r0, c0, rows, cols, row_stride, y_rows, by_y_rows, units);
  }
}

// Whether the batch can be walked as one matrix of all its rows (kFlat above).
bool flattens(const TransposeArgs& a) {
  return a.flatten_batch && a.batch > 1 && a.batch_stride == a.rows * a.row_stride &&
         a.batch * a.rows <= 0x7fffffff;
}

// Whether every offset a block forms within its matrix (or the flattened walk, with its matrix
// gaps in y) fits 32 bits, with a block's overhang to spare.
bool offsets_fit_int32(const TransposeArgs& a, bool flat) {
  const int64_t walk = flat ? a.batch * a.rows : a.rows;
  return transpose_offsets_fit_int32(walk, a.rows, a.cols, a.row_stride, 2 * kSub, flat ? a.batch * a.rows * a.cols : 0);
}

template <int kRowSubs, int kColSubs, bool kFlat, bool kKeep, class I>
cudaError_t launch_shape(const TransposeArgs& a, cudaStream_t stream) {
  using S = LdsmShape<kRowSubs, kColSubs>;
  const int64_t batch = kFlat ? 1 : a.batch;
  const int64_t rows = kFlat ? a.batch * a.rows : a.rows;
  const int64_t row_tiles = ceil_div(rows, S::kRows);
  const int64_t col_tiles = ceil_div(a.cols, S::kCols);
  if (batch * row_tiles * col_tiles > 0x7fffffff) return cudaErrorInvalidValue;
  dim3 blocks(static_cast<unsigned>(batch * row_tiles * col_tiles));
  int64_t band = banded_height(a.band, row_tiles);
  if (a.band <= 1 && row_tiles <= 65535 && batch <= 65535) {
    blocks = dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles), static_cast<unsigned>(batch));
    band = 0;
  } else if (band == row_tiles && col_tiles <= 65535 && batch <= 65535) {
    blocks = dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(col_tiles), static_cast<unsigned>(batch));
    band = -1;  // column order
  }
  // band fits 32 bits: at most row_tiles, and the tile count was checked against 2^31 above.
  transpose_ldsm_kernel<kRowSubs, kColSubs, kFlat, kKeep, I><<<blocks, kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(a.x), static_cast<uint16_t*>(a.y), static_cast<int32_t>(band),
      static_cast<I>(rows), static_cast<I>(a.cols), static_cast<I>(a.row_stride), static_cast<I>(a.rows),
      a.batch_stride, make_divisor(static_cast<uint32_t>(kFlat ? a.rows : 1)), row_tiles, col_tiles);
  return cudaGetLastError();
}

template <int kRowSubs, int kColSubs, bool kFlat, bool kKeep>
cudaError_t launch_indexed(const TransposeArgs& a, cudaStream_t stream) {
  return offsets_fit_int32(a, kFlat) ? launch_shape<kRowSubs, kColSubs, kFlat, kKeep, int32_t>(a, stream)
                                     : launch_shape<kRowSubs, kColSubs, kFlat, kKeep, int64_t>(a, stream);
}

// keep_loads for the blocks of one or two sub-tiles (the op's _el variants); the 2 x 2 block has
// no such variant, and its policy register made sm_80's ptxas spill.
template <int kRowSubs, int kColSubs, bool kFlat>
cudaError_t launch_loads(const TransposeArgs& a, cudaStream_t stream) {
  if constexpr (kRowSubs * kColSubs <= 2) {
    if (a.keep_loads) return launch_indexed<kRowSubs, kColSubs, kFlat, true>(a, stream);
  }
  return launch_indexed<kRowSubs, kColSubs, kFlat, false>(a, stream);
}

template <int kRowSubs, int kColSubs>
cudaError_t launch_either(const TransposeArgs& a, cudaStream_t stream) {
  return flattens(a) ? launch_loads<kRowSubs, kColSubs, true>(a, stream)
                     : launch_loads<kRowSubs, kColSubs, false>(a, stream);
}

}  // namespace

cudaError_t launch_transpose_ldsm(const TransposeArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.rows < 0 || a.cols < 0 || element_size(a.dtype) != 2) return cudaErrorInvalidValue;
  if (a.batch == 0 || a.rows == 0 || a.cols == 0) return cudaSuccess;
  switch (a.ldsm_subs) {
    case 11: return launch_either<1, 1>(a, stream);
    case 12: return launch_either<1, 2>(a, stream);
    case 21: return launch_either<2, 1>(a, stream);
    case 22: return launch_either<2, 2>(a, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_transpose_odd16(TransposeArgs a, cudaStream_t stream) {
  using S = LdsmShape<2, 1>;
  static_assert(S::kRows == kOdd16BlockRows && S::kCols == kOdd16BlockCols, "the rule's block");
  const int64_t wave = static_cast<int64_t>(sm_count()) * S::kMinBlocks;
  const Odd16Plan plan = odd16_plan(a.batch, a.rows, a.cols, wave, a.band);
  a.band = plan.band;
  if (plan.smem) return launch_transpose(a, stream);
  a.ldsm_subs = 21;
  a.flatten_batch = plan.flatten;
  // Evict-last loads were 1-7% faster than ld.global.nc on every odd shape of the sweep, in each
  // block and order (H100, results/h100/issue15/2026-12-07/call1/transpose_odd.json).
  a.keep_loads = true;
  return launch_transpose_ldsm(a, stream);
}

}  // namespace sk
