// GEMV for batch 1..8: a stream over the matrix, the vectors read through L1.
//
// A group of L lanes (L = 32, or 16 / 8 for short rows) owns kRows consecutive rows of A. Lane l
// walks the row's packs l, l + L, ...: for each it loads the kRows packs of A and the `B` packs
// of x at that column, and accumulates kRows x B dot products in fp32. Reading x once for kRows
// rows keeps its L1 traffic at B / kRows times that of A (x is small and stays in L1/L2). The
// group's partial sums are added with xor shuffles, and one lane writes the kRows x B outputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/convert.cuh"
#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "gemv.h"

namespace sk {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 4;
constexpr int kMaxBatch = 8;
// Two blocks per SM (a 128-register cap): batch 8 keeps 32 accumulators, 4 + 8 packs and 32
// unpacked values live. Left to itself ptxas aimed batch 5 at 80 registers and spilled.
constexpr int kMinBlocks = 2;
// Column steps per loop iteration: as many as the batch leaves registers for.
template <int B>
constexpr int kUnrollFor = B == 1 ? 4 : (B <= 4 ? 2 : 1);

template <class V, int B, int L>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    gemv_kernel(const typename V::T* __restrict__ a, const typename V::T* __restrict__ x,
                typename V::T* __restrict__ y, int64_t rows, int nvec, int64_t lda, int64_t ldx,
                int64_t groups) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  constexpr int kGroupsPerBlock = kThreads / L;
  const int lane = threadIdx.x % L;
  const int64_t group = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + threadIdx.x / L;
  // A group past the end stays for the shuffles (they name every lane of the warp, and a warp
  // holds 32 / L groups) but loads nothing and writes nothing.
  const bool live = group < groups;
  const int64_t row0 = live ? group * kRows : 0;
  const int packs = live ? nvec : 0;
  const T* arow[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    // Rows past the end repeat the last row: loads stay in bounds, results are not written.
    const int64_t row = row0 + r < rows ? row0 + r : rows - 1;
    arow[r] = a + row * lda;
  }
  float acc[kRows][B];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.f;
  }
  // Small batches unroll the column loop so several packs per row are in flight (a 4096 x 4096
  // matrix has only 1024 groups of 4 rows: without it, 16 KiB in flight per SM).
  constexpr int U = kUnrollFor<B>;
  for (int j0 = lane; j0 < packs; j0 += L * U) {
    Pack<T, VEC> pa[U][kRows];
    Pack<T, VEC> px[U][B];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * L;
      if (j < packs) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) pa[u][r] = load_pack<T, VEC>(arow[r] + j * VEC);
#pragma unroll
        for (int b = 0; b < B; ++b) px[u][b] = load_pack<T, VEC>(x + b * ldx + j * VEC);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u * L >= packs) break;
      float af[kRows][VEC];
#pragma unroll
      for (int r = 0; r < kRows; ++r) unpack<T, VEC>(pa[u][r], af[r]);
#pragma unroll
      for (int b = 0; b < B; ++b) {
        float xf[VEC];
        unpack<T, VEC>(px[u][b], xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) acc[r][b] = fmaf(af[r][i], xf[i], acc[r][b]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
#pragma unroll
      for (int offset = L / 2; offset > 0; offset >>= 1) {
        acc[r][b] += __shfl_xor_sync(0xffffffffu, acc[r][b], offset);
      }
    }
  }
  if (!live || lane != 0) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (row0 + r >= rows) break;
#pragma unroll
    for (int b = 0; b < B; ++b) y[b * rows + row0 + r] = from_float<T>(acc[r][b]);
  }
}

// Groups narrower than a warp for short rows, so lanes are not left without packs.
template <class V, int B>
cudaError_t launch_lanes(const GemvArgs& g, const typename V::T* x, typename V::T* y,
                         cudaStream_t stream) {
  using T = typename V::T;
  const int nvec = static_cast<int>(g.cols / V::VEC);
  const int64_t groups = ceil_div(g.rows, kRows);
  auto go = [&](auto lanes) {
    constexpr int L = decltype(lanes)::value;
    const int64_t blocks = ceil_div(groups, kThreads / L);
    gemv_kernel<V, B, L><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const T*>(g.a), x, y, g.rows, nvec, g.lda, g.ldx, groups);
    return cudaGetLastError();
  };
  if (nvec >= 64) return go(std::integral_constant<int, 32>{});
  if (nvec >= 32) return go(std::integral_constant<int, 16>{});
  return go(std::integral_constant<int, 8>{});
}

template <class V>
cudaError_t launch_batch(const GemvArgs& g, int64_t b0, int nb, cudaStream_t stream) {
  using T = typename V::T;
  const T* x = static_cast<const T*>(g.x) + b0 * g.ldx;
  T* y = static_cast<T*>(g.y) + b0 * g.rows;
  switch (nb) {
    case 1: return launch_lanes<V, 1>(g, x, y, stream);
    case 2: return launch_lanes<V, 2>(g, x, y, stream);
    case 3: return launch_lanes<V, 3>(g, x, y, stream);
    case 4: return launch_lanes<V, 4>(g, x, y, stream);
    case 5: return launch_lanes<V, 5>(g, x, y, stream);
    case 6: return launch_lanes<V, 6>(g, x, y, stream);
    case 7: return launch_lanes<V, 7>(g, x, y, stream);
    case 8: return launch_lanes<V, 8>(g, x, y, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_gemv(const GemvArgs& g, cudaStream_t stream) {
  if (g.rows < 0 || g.cols < 0 || g.batch < 0) return cudaErrorInvalidValue;
  if (g.rows == 0 || g.batch == 0) return cudaSuccess;
  if (g.cols > 0x7fffffff) return cudaErrorInvalidValue;
  const int vec = vector_width(g.dtype);
  const bool vectorized = g.cols % vec == 0 && g.lda % vec == 0 && g.ldx % vec == 0 &&
                          aligned16(g.a) && aligned16(g.x);
  return dispatch_variant(g.dtype, vectorized, [&](auto v) {
    // Batches beyond kMaxBatch: further passes over A, kMaxBatch vectors at a time.
    for (int64_t b0 = 0; b0 < g.batch; b0 += kMaxBatch) {
      const int nb = static_cast<int>(g.batch - b0 < kMaxBatch ? g.batch - b0 : kMaxBatch);
      const cudaError_t err = launch_batch<decltype(v)>(g, b0, nb, stream);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  });
}

}  // namespace sk
