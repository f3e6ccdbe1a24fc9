// Embedding gather: a map over (index, pack) units.
//
// Unit u copies pack (u mod packs_per_row) of output row (u / packs_per_row); a thread issues
// kUnroll units' index loads, then their table loads, then their stores, so several 16-byte loads
// are in flight whatever the row length. Threads of a warp mostly share an index (a broadcast
// load from L1). Bounds are checked on the device, per unit: a bad index reads nothing.
//
// index_check_kernel is the pass over the indices alone that check_order "before" runs ahead of
// the gather: each block writes its own (count, 1 + largest position) of bad indices, so nothing
// needs zeroing first and the host adds a few hundred words.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../common/convert.cuh"
#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "embedding.h"

namespace sk {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxUnits = 4;  // units per thread in flight, for large gathers

template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> nan_pack() {
  float f[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = NAN;
  return pack<T, VEC>(f);
}

// Index: uint32_t when every unit number fits (a 64-bit division costs ~70 instructions).
// kUnroll: units per thread (embedding.h: EmbeddingArgs::units).
template <class V, typename Index, int kUnroll>
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

constexpr int kCheckUnroll = 4;

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const unsigned long long o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

__global__ void __launch_bounds__(kThreads)
    index_check_kernel(const int64_t* __restrict__ indices, int64_t n, int64_t vocab,
                       int64_t* __restrict__ partials) {
  __shared__ unsigned long long count_s, last_s;
  if (threadIdx.x == 0) count_s = 0, last_s = 0;
  __syncthreads();
  unsigned long long count = 0, last = 0;  // last: 1 + the largest bad position, 0 for none
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * kCheckUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kCheckUnroll + threadIdx.x;
       base < n; base += stride) {
    int64_t v[kCheckUnroll];
#pragma unroll
    for (int u = 0; u < kCheckUnroll; ++u) {  // all loads first: kCheckUnroll in flight
      const int64_t i = base + int64_t{u} * kThreads;
      v[u] = i < n ? __ldg(indices + i) : 0;
    }
#pragma unroll
    for (int u = 0; u < kCheckUnroll; ++u) {
      const int64_t i = base + int64_t{u} * kThreads;
      if (i < n && !(v[u] >= 0 && v[u] < vocab)) {
        ++count;
        last = static_cast<unsigned long long>(i) + 1ull;  // i grows with u and with the loop
      }
    }
  }
  count = warp_sum(count);
  last = warp_max(last);
  if ((threadIdx.x & 31) == 0 && count != 0) {
    atomicAdd(&count_s, count);
    atomicMax(&last_s, last);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = static_cast<int64_t>(count_s);
    partials[2 * blockIdx.x + 1] = static_cast<int64_t>(last_s);
  }
}

// Units per thread: kMaxUnits, except 2 for fp32 where a grid of kMaxUnits would not fill one
// wave of resident blocks (8 of 256 threads per SM). Measured on the H200 with
// scripts/tune/specs/embedding_units.yaml: at T = 4096 fp32, 2 units ran 3.3-4% faster than 4 in two
// runs; bf16 ran fastest with 4 at every size; 1 unit was the slowest everywhere.
int auto_units(int64_t total, int element_bytes) {
  const int64_t wave = int64_t{8} * sm_count();
  const bool under_a_wave = ceil_div(total, int64_t{kThreads} * kMaxUnits) < wave;
  return element_bytes == 4 && under_a_wave ? 2 : kMaxUnits;
}

template <class V, int kUnroll>
cudaError_t launch_units(const EmbeddingArgs& a, int64_t total, cudaStream_t stream) {
  using T = typename V::T;
  const int64_t packs_per_row = a.dim / V::VEC;
  int64_t blocks = ceil_div(total, int64_t{kThreads} * kUnroll);
  if (blocks > 0x7fffffff) blocks = 0x7fffffff;
  const auto* table = static_cast<const T*>(a.table);
  auto* out = static_cast<T*>(a.out);
  const unsigned grid = static_cast<unsigned>(blocks);
  // Unit numbers stay below total + kTile: 32-bit arithmetic when that fits.
  if (total + int64_t{kThreads} * kUnroll < (int64_t{1} << 32)) {
    embedding_kernel<V, uint32_t, kUnroll><<<grid, kThreads, 0, stream>>>(
        table, a.indices, out, static_cast<uint32_t>(total), static_cast<uint32_t>(packs_per_row),
        a.vocab, a.table_stride, a.status);
  } else {
    embedding_kernel<V, int64_t, kUnroll><<<grid, kThreads, 0, stream>>>(
        table, a.indices, out, total, packs_per_row, a.vocab, a.table_stride, a.status);
  }
  return cudaGetLastError();
}

template <class V>
cudaError_t launch_packed(const EmbeddingArgs& a, cudaStream_t stream) {
  const int64_t total = a.n * (a.dim / V::VEC);
  switch (a.units != 0 ? a.units : auto_units(total, static_cast<int>(sizeof(typename V::T)))) {
    case 1: return launch_units<V, 1>(a, total, stream);
    case 2: return launch_units<V, 2>(a, total, stream);
    case 4: return launch_units<V, 4>(a, total, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_embedding(const EmbeddingArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.vocab < 0 || a.dim < 0) return cudaErrorInvalidValue;
  if (a.n == 0 || a.dim == 0) return cudaSuccess;
  const int vec = vector_width(a.dtype);
  const bool vectorized = a.dim % vec == 0 && a.table_stride % vec == 0 && aligned16(a.table) &&
                          aligned16(a.out);
  return dispatch_variant(a.dtype, vectorized, [&](auto v) { return launch_packed<decltype(v)>(a, stream); });
}

int index_check_blocks(int64_t n) {
  // Two blocks per SM at most (a pass over n * 8 bytes); fewer where that gives a thread less
  // than kCheckUnroll indices.
  const int64_t wanted = ceil_div(n, int64_t{kThreads} * kCheckUnroll);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, 2 * sm_count())));
}

cudaError_t launch_index_check(const int64_t* indices, int64_t n, int64_t vocab, int64_t* partials,
                               int blocks, cudaStream_t stream) {
  if (n < 0 || vocab < 0 || blocks < 1) return cudaErrorInvalidValue;
  index_check_kernel<<<blocks, kThreads, 0, stream>>>(indices, n, vocab, partials);
  return cudaGetLastError();
}

}  // namespace sk
