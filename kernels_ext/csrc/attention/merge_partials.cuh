// Merging the partial results of a row's key splits (flash-decoding's second step), shared by
// split-KV decoding's combine kernel (decode.cu) and the persistent prefill's split tail
// (flash_wgmma.cu). A partial is an fp32 output normalised by its own softmax sum plus its
// log-sum-exp; with m the largest LSE and w_i = exp(lse_i - m), the row is
// o = sum w_i o_i / sum w_i and lse = m + log(sum w_i). A row whose partials are all empty (every
// key masked: lse -inf) gets o = 0 and lse = -inf.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>

#include "../tile/mma_sync.cuh"  // pack2

namespace sk::attn {

inline constexpr int kMaxPartials = 256;     // per row; the merge stages their LSEs in smem
inline constexpr int kCombineThreads = 128;  // a merging block

template <int D>
struct MergeSmem {
  static constexpr int kVecs = D / 4;
  static constexpr int kGroups = kCombineThreads / kVecs;
  static_assert(kCombineThreads % kVecs == 0 && kGroups * kVecs == kCombineThreads, "groups");
  float lse[kMaxPartials];
  float4 acc[kGroups][kVecs];
};

// One row, by all kCombineThreads threads of the block: o_part [np][D] and lse_part [np] in,
// D elements of T to `out` and (when lse_out is not null) the row's LSE out. The threads form
// G = 128 / (D / 4) groups of D / 4 (one float4 column each); group g takes partials g, g + G,
// ... with four loads in flight per thread (the reads are L2 hits the first kernel just wrote,
// so latency, not bandwidth, is what a serial walk would cost), then the groups' sums meet in
// shared memory. Ends with a barrier, so the block may merge its next row at once.
template <class T, int D>
__device__ __forceinline__ void merge_partials(const float* o_part, const float* lse_part, int np,
                                               T* out, float* lse_out, MergeSmem<D>& sm) {
  constexpr int kVecs = MergeSmem<D>::kVecs;
  constexpr int kGroups = MergeSmem<D>::kGroups;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int g = tid / kVecs;
  const int c = tid % kVecs;
  for (int i = tid; i < np; i += kCombineThreads) sm.lse[i] = lse_part[i];
  __syncthreads();
  // Every warp reduces the (at most 256) LSEs itself: no second barrier needed.
  float m = -CUDART_INF_F;
  for (int i = lane; i < np; i += 32) m = fmaxf(m, sm.lse[i]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  const bool empty = m == -CUDART_INF_F;
  float total = 0.f;
  for (int i = lane; i < np; i += 32) total += empty ? 0.f : expf(sm.lse[i] - m);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);

  // Partials that saw no key hold zeros (finite) and get weight 0: no read needs skipping. The
  // loads of a batch are issued before any of their weights is computed, so that they are in
  // flight together.
  const float* col = o_part + 4 * c;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  auto add = [&](float4 x, float lse_i) {
    const float w = expf(lse_i - m);
    acc.x = fmaf(w, x.x, acc.x), acc.y = fmaf(w, x.y, acc.y);
    acc.z = fmaf(w, x.z, acc.z), acc.w = fmaf(w, x.w, acc.w);
  };
  if (!empty) {  // block-uniform
    constexpr int kBatch = 4;
    int i = g;
    for (; i + (kBatch - 1) * kGroups < np; i += kBatch * kGroups) {
      float4 x[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        x[u] = *reinterpret_cast<const float4*>(col + static_cast<int64_t>(i + u * kGroups) * D);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) add(x[u], sm.lse[i + u * kGroups]);
    }
    for (; i < np; i += kGroups) add(*reinterpret_cast<const float4*>(col + static_cast<int64_t>(i) * D), sm.lse[i]);
  }
  sm.acc[g][c] = acc;
  __syncthreads();
  if (tid < kVecs) {
    float4 sum = sm.acc[0][tid];
#pragma unroll
    for (int j = 1; j < kGroups; ++j) {
      const float4 x = sm.acc[j][tid];
      sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    uint2 packed;
    packed.x = tile::pack2<T>(sum.x * inv, sum.y * inv);
    packed.y = tile::pack2<T>(sum.z * inv, sum.w * inv);
    *reinterpret_cast<uint2*>(out + 4 * tid) = packed;
    if (lse_out != nullptr && tid == 0) *lse_out = total > 0.f ? m + logf(total) : -CUDART_INF_F;
  }
  __syncthreads();  // sm.lse and sm.acc are rewritten for the next row
}

}  // namespace sk::attn
