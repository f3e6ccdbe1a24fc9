// Embedding gather: a map over (index, pack) units.
//
// Unit u copies pack (u mod packs_per_row) of output row (u / packs_per_row); a thread issues
// kUnroll units' index loads, then their table loads, then their stores, so several 16-byte loads
// are in flight whatever the row length. Threads of a warp mostly share an index (a broadcast
// load from L1). Bounds are checked on the device, per unit: a bad index reads nothing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/convert.cuh"
#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "embedding.h"

namespace sk {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> nan_pack() {
  float f[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = NAN;
  return pack<T, VEC>(f);
}

// Index: uint32_t when every unit number fits (a 64-bit division costs ~70 instructions).
template <class V, typename Index>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(const typename V::T* __restrict__ table, const int64_t* __restrict__ indices,
                     typename V::T* __restrict__ out, Index total, Index packs_per_row,
                     int64_t vocab, int64_t table_stride, unsigned long long* status) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  constexpr int64_t kTile = int64_t{kThreads} * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x; base < total;
       base += static_cast<int64_t>(gridDim.x) * kTile) {
    int64_t row[kUnroll], col[kUnroll], idx[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t unit = base + int64_t{u} * kThreads;
      const Index r = static_cast<Index>(unit) / packs_per_row;
      row[u] = r;
      col[u] = static_cast<Index>(unit) - r * packs_per_row;
      idx[u] = unit < total ? __ldg(indices + row[u]) : -1;  // -1: no load below
    }
    Pack<T, VEC> p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (idx[u] >= 0 && idx[u] < vocab) {
        p[u] = load_pack<T, VEC>(table + idx[u] * table_stride + col[u] * VEC);
      } else {
        p[u] = nan_pack<T, VEC>();
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t unit = base + int64_t{u} * kThreads;
      if (unit >= total) continue;
      store_pack<T, VEC>(out + row[u] * packs_per_row * VEC + col[u] * VEC, p[u]);
      // Recorded once per bad index, by the unit that copies its first pack.
      if (status != nullptr && col[u] == 0 && !(idx[u] >= 0 && idx[u] < vocab)) {
        atomicMax(status, static_cast<unsigned long long>(row[u]) + 1ull);
        atomicAdd(status + 1, 1ull);
      }
    }
  }
}

}  // namespace

cudaError_t launch_embedding(const EmbeddingArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.vocab < 0 || a.dim < 0) return cudaErrorInvalidValue;
  if (a.n == 0 || a.dim == 0) return cudaSuccess;
  const int vec = vector_width(a.dtype);
  const bool vectorized = a.dim % vec == 0 && a.table_stride % vec == 0 && aligned16(a.table) &&
                          aligned16(a.out);
  return dispatch_variant(a.dtype, vectorized, [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    const int64_t packs_per_row = a.dim / V::VEC;
    const int64_t total = a.n * packs_per_row;
    int64_t blocks = ceil_div(total, int64_t{kThreads} * kUnroll);
    if (blocks > 0x7fffffff) blocks = 0x7fffffff;
    const auto* table = static_cast<const T*>(a.table);
    auto* out = static_cast<T*>(a.out);
    const unsigned grid = static_cast<unsigned>(blocks);
    // Unit numbers stay below total + kTile: 32-bit arithmetic when that fits.
    if (total + int64_t{kThreads} * kUnroll < (int64_t{1} << 32)) {
      embedding_kernel<V, uint32_t><<<grid, kThreads, 0, stream>>>(
          table, a.indices, out, static_cast<uint32_t>(total),
          static_cast<uint32_t>(packs_per_row), a.vocab, a.table_stride, a.status);
    } else {
      embedding_kernel<V, int64_t><<<grid, kThreads, 0, stream>>>(
          table, a.indices, out, total, packs_per_row, a.vocab, a.table_stride, a.status);
    }
    return cudaGetLastError();
  });
}

}  // namespace sk
