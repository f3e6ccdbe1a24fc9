// GEMV for batch 1..8 on the tensor cores: y^T = A x^T as mma.sync m16n8k16 tiles, the batch
// padded to n = 8, the matrix streamed straight from global memory into A fragments.
//
// Why: the CUDA-core kernel (gemv.cu) spends 8 B FMAs, their unpacking and the x unpacking on
// every 16-byte pack of A: at batch 8 that issue load, with the registers it needs (2 blocks per
// SM, 4 packs of A in flight per thread), held it to 0.65 of copy on the H200 (v1 run), and with
// few long rows (M = 4095, K = 16384) it had 128 blocks for 132 SMs (0.43). Here one mma takes
// 512 bytes of A (one 16-byte load per lane) whatever the batch, and the K dimension is split
// across the warps of a block when the rows are few.
//
// Fragments without shared memory: a dot product does not care in which order its K terms are
// summed, so the k slots of the m16n8k16 fragments (mma_sync.cuh) may be mapped to any K
// positions, provided A and x use the same map. Lane (g, t) loads 16 bytes (8 elements) of rows
// g and g + 8 of the tile and of x row g at k = k0 + 32c + 8t (c < kChunks), so the 4 lanes of a
// row read 64 contiguous bytes per load; elements 4j..4j+1 of that chunk fill its k slots
// (2t, 2t+1) and elements 4j+2..4j+3 its slots (2t+8, 2t+9) in mma step j (two steps per chunk).
// Batch rows >= B read nothing (zero fragments); their outputs are not written.
//
// fp32 accumulation in the tensor cores (products of 16-bit values are exact; the sums inside
// an mma are not IEEE-rounded, as in cuBLAS's own kernels), then one fp32 sum over the K slices
// in shared memory and one rounding to the output dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/convert.cuh"
#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "../tile/mma_sync.cuh"
#include "gemv.h"

namespace sk {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kChunks = 4;            // 16-byte chunks per row per lane in one iteration
constexpr int kIterK = 32 * kChunks;  // K covered by one warp iteration (4 lanes x 8 x kChunks)
constexpr int kMaxBatch = 8;          // the mma's n

// MT m16 tiles (16 MT rows) per warp: 2 when the batch is large, so each x chunk (read through
// L1) serves 32 rows. Register caps: MT 1 -> 80 (3 blocks per SM: at 64 it spilled), MT 2 -> 128
// (2 blocks). Either way 24-32 KiB of A per block in flight (8 or 16 loads of 16 bytes a thread).
template <int MT>
constexpr int kMinBlocks = MT == 1 ? 3 : 2;

__device__ __forceinline__ uint4 load16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

template <typename T, int MT>
__global__ void __launch_bounds__(kThreads, kMinBlocks<MT>)
    gemv_mma_kernel(const T* __restrict__ a, const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                    int64_t cols, int64_t lda, int64_t ldx, int batch, int k_warps) {
  __shared__ float partial[kWarps][MT][4][32];  // [warp][tile][accumulator][lane]: conflict-free
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wk = warp % k_warps;  // this warp's K slice (iterations wk, wk + k_warps, ...)
  const int wr = warp / k_warps;  // its row group within the block
  const int row_groups = kWarps / k_warps;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * row_groups + wr) * (16 * MT);
  const T* arow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Rows past the end repeat the last row: loads stay in bounds, results are not written.
      const int64_t r = row0 + 16 * mt + 8 * h + g;
      arow[mt][h] = a + (r < rows ? r : rows - 1) * lda;
    }
  }
  const bool has_x = g < batch;
  const T* xrow = x + (has_x ? g : 0) * ldx;
  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[mt][i] = 0.f;
  }
  const int64_t iters = (cols + kIterK - 1) / kIterK;
  for (int64_t it = wk; it < iters; it += k_warps) {
    uint4 pa[kChunks][MT][2];
    uint4 px[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t k = it * kIterK + 32 * c + 8 * t;
      const bool in = k < cols;  // cols % 8 == 0: a chunk is all in or all out
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) pa[c][mt][h] = in ? load16(arow[mt][h] + k) : make_uint4(0, 0, 0, 0);
      }
      px[c] = in && has_x ? load16(xrow + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint4& lo = pa[c][mt][0];  // row g
        const uint4& hi = pa[c][mt][1];  // row g + 8
        const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y};
        const uint32_t b0[2] = {px[c].x, px[c].y};
        tile::mma_m16n8k16<T>(acc[mt], a0, b0);
        const uint32_t a1[4] = {lo.z, hi.z, lo.w, hi.w};
        const uint32_t b1[2] = {px[c].z, px[c].w};
        tile::mma_m16n8k16<T>(acc[mt], a1, b1);
      }
    }
  }
  if (k_warps > 1) {  // block-uniform: every thread reaches the barrier
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][mt][i][lane] = acc[mt][i];
    }
    __syncthreads();
    if (wk != 0) return;
    for (int j = 1; j < k_warps; ++j) {  // a fixed order: deterministic
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][i] += partial[warp + j][mt][i][lane];
      }
    }
  }
  // acc[mt]: C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1] of tile mt; C[row][n] = y[n][row].
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = 2 * t + (i & 1);
      const int64_t r = row0 + 16 * mt + g + 8 * (i >> 1);
      if (n < batch && r < rows) y[n * rows + r] = from_float<T>(acc[mt][i]);
    }
  }
}

// K slices per row group: as many as keep at least two iterations per warp, at most the warps.
int k_warps_for(int64_t cols) {
  const int64_t iters = ceil_div(cols, kIterK);
  int w = kWarps;
  while (w > 1 && iters < 2 * w) w /= 2;
  return w;
}

template <typename T>
cudaError_t launch_typed(const GemvArgs& g, cudaStream_t stream) {
  const int k_warps = k_warps_for(g.cols);
  const int row_groups = kWarps / k_warps;
  for (int64_t b0 = 0; b0 < g.batch; b0 += kMaxBatch) {
    const int nb = static_cast<int>(g.batch - b0 < kMaxBatch ? g.batch - b0 : kMaxBatch);
    const T* x = static_cast<const T*>(g.x) + b0 * g.ldx;
    T* y = static_cast<T*>(g.y) + b0 * g.rows;
    const T* a = static_cast<const T*>(g.a);
    if (nb >= 4) {
      const int64_t blocks = ceil_div(g.rows, int64_t{32} * row_groups);
      gemv_mma_kernel<T, 2><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          a, x, y, g.rows, g.cols, g.lda, g.ldx, nb, k_warps);
    } else {
      const int64_t blocks = ceil_div(g.rows, int64_t{16} * row_groups);
      gemv_mma_kernel<T, 1><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          a, x, y, g.rows, g.cols, g.lda, g.ldx, nb, k_warps);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

bool gemv_mma_supports(const GemvArgs& g) {
  return g.dtype != DType::kFloat32 && g.cols % 8 == 0 && g.lda % 8 == 0 && g.ldx % 8 == 0 &&
         aligned16(g.a) && aligned16(g.x);
}

cudaError_t launch_gemv_mma(const GemvArgs& g, cudaStream_t stream) {
  if (g.rows < 0 || g.cols < 0 || g.batch < 0) return cudaErrorInvalidValue;
  if (g.rows == 0 || g.batch == 0) return cudaSuccess;
  if (!gemv_mma_supports(g)) return cudaErrorInvalidValue;
  if (ceil_div(g.rows, 16) > 0x7fffffff) return cudaErrorInvalidValue;
  return g.dtype == DType::kBFloat16 ? launch_typed<__nv_bfloat16>(g, stream) : launch_typed<__half>(g, stream);
}

}  // namespace sk
