// Histogram with privatised shared-memory counters.
//
// Each block keeps R copies of the histogram in shared memory, interleaved so that lane l counts
// into copy l % R at word bin * R + l % R: a warp's increments of one bin then hit R different
// words in R different banks, and with R = 32 (bins <= 256) no two lanes ever share a word or a
// bank whatever the data. Larger histograms get fewer copies (32 KiB of counters per block).
// Skew is handled by warp aggregation: when every active lane's 16-byte pack holds one value and
// the lanes agree (all data in one bin), the warp's leader adds the whole warp's count with one
// atomic instead of 32 x (16 or 4) contended ones. At the end each block adds its copies into the
// global int64 counts (one atomic per nonzero bin).
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/grid.cuh"
#include "histogram.h"

namespace sk {
namespace {

constexpr int kThreads = 512;
// 1536 threads and 3 x 32 KiB of counters per SM: the 42-register cap holds two packs and a
// pack's 16 byte values without spilling (at 2048 threads, 32 registers, it spilled).
constexpr int kBlocksPerSm = 3;
constexpr int kCounterWords = 8192;    // 32 KiB of counters per block
constexpr int kUnroll = 2;             // packs in flight per thread

template <typename T>
struct Values {
  static constexpr int kPerPack = 16 / sizeof(T);
};

// The kPerPack values of a 16-byte pack.
template <typename T>
__device__ __forceinline__ void values_of(const uint4& w, unsigned (&v)[Values<T>::kPerPack]) {
  const unsigned words[4] = {w.x, w.y, w.z, w.w};
  if constexpr (sizeof(T) == 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = (words[i / 4] >> (8 * (i % 4))) & 0xffu;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = words[i];  // as unsigned: negative values fail v < bins
  }
}

template <typename T>
__device__ __forceinline__ bool pack_is_uniform(const uint4& w) {
  if constexpr (sizeof(T) == 1) {
    const unsigned b = (w.x & 0xffu) * 0x01010101u;
    return w.x == b && w.y == b && w.z == b && w.w == b;
  } else {
    return w.x == w.y && w.x == w.z && w.x == w.w;
  }
}

template <typename T>
__device__ __forceinline__ unsigned scalar_value(const T* x, int64_t i) {
  if constexpr (sizeof(T) == 1) {
    return __ldg(reinterpret_cast<const unsigned char*>(x) + i);
  } else {
    return static_cast<unsigned>(__ldg(reinterpret_cast<const int*>(x) + i));
  }
}

// uint8 values with every byte a bin (bins >= 256, so R = 32): the 16 counts of a pack without a
// range check, each address one shift and one LOP3 from the packed word (byte offset
// v * 128 + 4 * copy, the two parts in disjoint bits), then the atomic: 3 instructions a value
// instead of ~5. At 16 values per clock per SM for full bandwidth (uint8 is 4x int32's rate per
// byte) the count's instructions are what limits (the H200 v1 run: uint8 0.35, int32 0.94).
__device__ __forceinline__ void count_all_bytes(unsigned* h, const uint4& w, unsigned copy_bytes) {
  static_assert(sizeof(unsigned) == 4, "32-bit counters");
  char* base = reinterpret_cast<char*>(h);
  const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned v = words[i];
    const unsigned off[4] = {((v << 7) & 0x7f80u) | copy_bytes, ((v >> 1) & 0x7f80u) | copy_bytes,
                             ((v >> 9) & 0x7f80u) | copy_bytes, ((v >> 17) & 0x7f80u) | copy_bytes};
#pragma unroll
    for (int k = 0; k < 4; ++k) atomicAdd(reinterpret_cast<unsigned*>(base + off[k]), 1u);
  }
}

template <typename T, int R, bool kAllBytes>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    histogram_kernel(const T* __restrict__ x, int64_t n, int head, int64_t packs, int bins,
                     unsigned long long* __restrict__ counts) {
  static_assert(!kAllBytes || (sizeof(T) == 1 && R == 32), "every byte a bin: uint8, 32 copies");
  constexpr int VPP = Values<T>::kPerPack;
  __shared__ unsigned h[kCounterWords];
  const int lane = threadIdx.x & 31;
  const int copy = lane % R;
  for (int i = threadIdx.x; i < bins * R; i += kThreads) h[i] = 0;
  __syncthreads();
  const unsigned ubins = static_cast<unsigned>(bins);
  auto count = [&](unsigned v) {
    if (v < ubins) atomicAdd(&h[v * R + copy], 1u);
  };
  // Head (before the first 16-byte-aligned element) and tail: block 0, one element per thread.
  const int64_t tail_begin = head + packs * VPP;
  if (blockIdx.x == 0) {
    if (threadIdx.x < head) count(scalar_value(x, threadIdx.x));
    if (tail_begin + threadIdx.x < n) count(scalar_value(x, tail_begin + threadIdx.x));
  }
  const uint4* body = reinterpret_cast<const uint4*>(x + head);
  // Warp-uniform loop: a warp takes 32 * kUnroll consecutive packs per step, so its votes see
  // every lane (inactive lanes vote "agree").
  const int64_t warp_id = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) >> 5;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * kThreads) >> 5;
  for (int64_t base = warp_id * 32 * kUnroll; base < packs; base += warps * 32 * kUnroll) {
    uint4 w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + u * 32 + lane;
      if (iv < packs) w[u] = __ldg(body + iv);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t first = base + u * 32;  // the same for the whole warp
      if (first >= packs) break;
      const int64_t iv = first + lane;
      const bool active = iv < packs;  // lane 0 always is
      unsigned v[VPP];
      values_of<T>(active ? w[u] : make_uint4(0, 0, 0, 0), v);
      const unsigned lead = __shfl_sync(0xffffffffu, v[0], 0);
      const bool agree = !active || (pack_is_uniform<T>(w[u]) && v[0] == lead);
      if (__all_sync(0xffffffffu, agree)) {
        if (lane == 0 && lead < ubins) {
          const unsigned lanes = static_cast<unsigned>(packs - first < 32 ? packs - first : 32);
          atomicAdd(&h[lead * R + copy], lanes * VPP);
        }
      } else if (active) {
        if constexpr (kAllBytes) {
          count_all_bytes(h, w[u], static_cast<unsigned>(copy) * 4u);
        } else {
#pragma unroll
          for (int i = 0; i < VPP; ++i) count(v[i]);
        }
      }
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += kThreads) {
    unsigned long long total = 0;
#pragma unroll
    for (int c = 0; c < R; ++c) total += h[b * R + c];
    if (total) atomicAdd(counts + b, total);
  }
}

template <typename T>
cudaError_t launch_typed(const HistogramArgs& a, cudaStream_t stream) {
  const T* x = static_cast<const T*>(a.x);
  constexpr int VPP = Values<T>::kPerPack;
  const unsigned mis = static_cast<unsigned>(reinterpret_cast<uintptr_t>(x) & 15u);
  int64_t head = mis ? (16 - mis) / sizeof(T) : 0;
  if (mis % sizeof(T)) return cudaErrorMisalignedAddress;
  if (head > a.n) head = a.n;
  const int64_t packs = (a.n - head) / VPP;
  const int64_t per_block = int64_t{kThreads} * kUnroll;  // packs one block takes per step
  int64_t blocks = ceil_div(packs, per_block);
  const int64_t resident = int64_t{kBlocksPerSm} * sm_count();
  if (blocks > resident) blocks = resident;
  if (blocks < 1) blocks = 1;
  auto* counts = reinterpret_cast<unsigned long long*>(a.counts);
  const unsigned grid = static_cast<unsigned>(blocks);
  const int h = static_cast<int>(head);
  // Copies: as many as fit in kCounterWords, at most 32 (one per lane).
  // uint8 counts beyond bin 255 stay 0: with bins >= 256 every byte is a bin (256 of them).
  if constexpr (sizeof(T) == 1) {
    if (a.bins >= 256) {
      histogram_kernel<T, 32, true><<<grid, kThreads, 0, stream>>>(x, a.n, h, packs, 256, counts);
      return cudaGetLastError();
    }
  }
  if (a.bins <= kCounterWords / 32) {
    histogram_kernel<T, 32, false><<<grid, kThreads, 0, stream>>>(x, a.n, h, packs, a.bins, counts);
  } else if (a.bins <= kCounterWords / 8) {
    histogram_kernel<T, 8, false><<<grid, kThreads, 0, stream>>>(x, a.n, h, packs, a.bins, counts);
  } else if (a.bins <= kCounterWords / 2) {
    histogram_kernel<T, 2, false><<<grid, kThreads, 0, stream>>>(x, a.n, h, packs, a.bins, counts);
  } else {
    histogram_kernel<T, 1, false><<<grid, kThreads, 0, stream>>>(x, a.n, h, packs, a.bins, counts);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_histogram(const HistogramArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.bins < 1 || a.bins > kHistogramMaxBins) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  switch (a.type) {
    case IntType::kUInt8: return launch_typed<uint8_t>(a, stream);
    case IntType::kInt32: return launch_typed<int32_t>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sk
