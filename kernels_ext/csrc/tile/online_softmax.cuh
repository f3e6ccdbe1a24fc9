// Online (streaming) softmax over rows of scores that arrive one key tile at a time, for
// scores held in the tensor-core accumulator layout: an mma.sync m16n8 C tile, or one warp's
// share of a wgmma m64nN accumulator (the same layout, 8 columns at a time). A thread holds
// two rows per 16-row fragment (rows g and g + 8, g = lane / 4), each row spread over the 4
// lanes of its quad, so row reductions are a thread-local loop plus two quad shuffles.
//
// Scores are kept raw (unscaled); the softmax scale and log2(e) are folded into one constant
// so each probability costs one FFMA and one MUFU ex2:  p = 2^(s * c - m * c), c = scale *
// log2(e). The running sums stay per thread (each thread's part of its row) and are reduced
// across the quad once, in finalize(): rescaling commutes with that sum.
//
// Empty rows (every key masked, e.g. causal attention with more queries than keys) keep
// max = -inf; the exponent base is then taken as 0 so no -inf - (-inf) NaN appears, their
// probabilities are exactly 0, and finalize() reports inv_sum = 0 (output 0) and lse = -inf.
// The scale must be positive (the running max of the raw scores is then the max of the
// scaled ones); launchers check it.
#pragma once

#include <math_constants.h>

#include <cstdint>

namespace sk::tile {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// 2^x on the MUFU unit (relative error ~2^-22, flushes denormal results to 0; exp2(-inf) = 0):
// far below the rounding of a 16-bit output.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Running max and sum of the 2 * MF rows one thread holds.
template <int MF>
struct OnlineSoftmax {
  static constexpr int kRows = 2 * MF;
  float max[kRows];  // running max of raw scores; -inf until a row sees a key
  float sum[kRows];  // this thread's part of sum_j 2^((s_j - max) * c)
  float scale_log2;  // c = softmax scale * log2(e)

  __device__ __forceinline__ void init(float softmax_scale) {
    scale_log2 = softmax_scale * kLog2e;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      max[r] = -CUDART_INF_F;
      sum[r] = 0.f;
    }
  }

  // One key tile: s[f][j][e] is the score of row 2f + e / 2 (of this thread) and the key of
  // column pair j, in the C layout (masked entries already -inf). Replaces the scores by
  // unnormalised probabilities and returns in `rescale` the factor each row's output
  // accumulators must be multiplied by before this tile's P V is added.
  template <int NT>
  __device__ __forceinline__ void step(float (&s)[MF][NT][4], float (&rescale)[kRows]) {
#pragma unroll
    for (int f = 0; f < MF; ++f) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * f + h;
        float tile_max = s[f][0][2 * h];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          tile_max = fmaxf(tile_max, fmaxf(s[f][j][2 * h], s[f][j][2 * h + 1]));
        }
        const float new_max = fmaxf(max[r], quad_max(tile_max));
        const float base = new_max == -CUDART_INF_F ? 0.f : new_max * scale_log2;
        rescale[r] = fast_exp2(fmaf(max[r], scale_log2, -base));
        max[r] = new_max;
        float row_sum = 0.f;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            s[f][j][e] = fast_exp2(fmaf(s[f][j][e], scale_log2, -base));
            row_sum += s[f][j][e];
          }
        }
        sum[r] = fmaf(sum[r], rescale[r], row_sum);
      }
    }
  }

  // The row totals (reduced over the quad) as 1 / sum (0 for an empty row) and the natural
  // log-sum-exp of the scaled scores, scale * max + ln(sum) (-inf for an empty row).
  __device__ __forceinline__ void finalize(float (&inv_sum)[kRows], float (&lse)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float total = quad_sum(sum[r]);
      const bool empty = !(total > 0.f);
      inv_sum[r] = empty ? 0.f : 1.f / total;
      lse[r] = empty ? -CUDART_INF_F : (max[r] * scale_log2 + log2f(total)) * kLn2;
    }
  }
};

// Multiply each row of accumulators held in the C layout by a per-row factor.
template <int MF, int NT>
__device__ __forceinline__ void scale_rows(float (&acc)[MF][NT][4], const float (&factor)[2 * MF]) {
#pragma unroll
  for (int f = 0; f < MF; ++f) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      acc[f][j][0] *= factor[2 * f];
      acc[f][j][1] *= factor[2 * f];
      acc[f][j][2] *= factor[2 * f + 1];
      acc[f][j][3] *= factor[2 * f + 1];
    }
  }
}

}  // namespace sk::tile
