// LayerNorm over the last dimension (weight and bias).
// Cached rows: each thread takes the mean and squared deviations (M2) of its own
// values in registers (two-pass, no cancellation), then one reduction merges the
// (count, mean, M2) triples (Chan et al.): one block-level reduction per row, not two
// (mean, then variance) with their four barriers. Streamed rows: sums shifted by the
// row's first element (cancellation limited to the spread of the row), then a second
// read.
#include "layernorm.h"

#include "../common/common.cuh"

namespace sk {
namespace {

template <typename T>
struct LnArgs {
  const T* x;
  const T* weight;
  const T* bias;
  T* y;
  int64_t rows;
  int cols;
  float eps;
};

// Count, mean and sum of squared deviations from the mean of a set of values.
struct MeanM2 {
  float n;
  float mean;
  float m2;
};

// Merges two sets: no difference of large sums, so the variance stays accurate however
// far the mean is from 0. Counts are exact in float (cached rows hold <= 65536).
__device__ __forceinline__ MeanM2 combine(const MeanM2& a, const MeanM2& b) {
  const float n = a.n + b.n;
  const float wb = n > 0.0f ? b.n / n : 0.0f;
  const float delta = b.mean - a.mean;
  return {n, fmaf(delta, wb, a.mean), a.m2 + b.m2 + delta * delta * (a.n * wb)};
}

// Every lane gets the same bits: both partners of a shuffle combine (lower lane, upper
// lane) in that order, as combine() is not exactly commutative in floating point.
__device__ __forceinline__ MeanM2 warp_allreduce_stats(MeanM2 s) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MeanM2 o{__shfl_xor_sync(0xffffffffu, s.n, offset),
                   __shfl_xor_sync(0xffffffffu, s.mean, offset),
                   __shfl_xor_sync(0xffffffffu, s.m2, offset)};
    s = (lane & offset) ? combine(o, s) : combine(s, o);
  }
  return s;
}

// One barrier. smem: 96 floats, not written again by the caller (no trailing barrier).
__device__ __forceinline__ MeanM2 block_allreduce_stats(MeanM2 s, float* smem) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  s = warp_allreduce_stats(s);
  if (lane == 0) {
    smem[warp] = s.n;
    smem[32 + warp] = s.mean;
    smem[64 + warp] = s.m2;
  }
  __syncthreads();
  const MeanM2 r = lane < nwarps ? MeanM2{smem[lane], smem[32 + lane], smem[64 + lane]}
                                 : MeanM2{0.0f, 0.0f, 0.0f};
  return warp_allreduce_stats(r);
}

template <class V>
__device__ __forceinline__ void write_normalized(const LnArgs<typename V::T>& a, int64_t base,
                                                 int off, float (&f)[V::VEC],
                                                 const PackOf<V>& wp, const PackOf<V>& bp,
                                                 float mean, float rstd) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  float w[VEC], b[VEC];
  unpack<T, VEC>(wp, w);
  unpack<T, VEC>(bp, b);
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = fmaf((f[i] - mean) * rstd, w[i], b[i]);
  store_pack<T, VEC>(a.y + base + off, pack<T, VEC>(f));
}

template <class V>
__device__ __forceinline__ void write_normalized(const LnArgs<typename V::T>& a, int64_t base,
                                                 int off, float (&f)[V::VEC], float mean,
                                                 float rstd) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  write_normalized<V>(a, base, off, f, load_pack<T, VEC>(a.weight + off),
                      load_pack<T, VEC>(a.bias + off), mean, rstd);
}

template <class V, int NV, bool kWarpPerRow>
__global__ void __launch_bounds__(kRowMaxThreads<kWarpPerRow>, kRowMinBlocks<kWarpPerRow>) layernorm_rows(LnArgs<typename V::T> a) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  // Few packs per thread: load weight and bias with x, so their latency overlaps the
  // row's instead of following the reduction (more packs would cost too many registers).
  constexpr bool kPrefetchAffine = NV <= 2;
  __shared__ float smem[96];
  const auto g = RowGroup<kWarpPerRow>::make();
  if (g.row >= a.rows) return;
  const int nvec = a.cols / VEC;
  const int64_t base = g.row * a.cols;

  RowCache<V, NV> cache;
  cache.load(a.x + base, g, nvec);
  PackOf<V> wp[kPrefetchAffine ? NV : 1], bp[kPrefetchAffine ? NV : 1];
  if constexpr (kPrefetchAffine) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      if (cache.valid(g, j, nvec)) {
        wp[j] = load_pack<T, VEC>(a.weight + cache.offset(g, j));
        bp[j] = load_pack<T, VEC>(a.bias + cache.offset(g, j));
      }
    }
  }

  // This thread's count, mean and M2 (two passes over its registers).
  int count = 0;
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) {
      float f[VEC];
      unpack<T, VEC>(cache.p[j], f);
      count += VEC;
#pragma unroll
      for (int i = 0; i < VEC; ++i) s += f[i];
    }
  }
  const float local_mean = count > 0 ? s / static_cast<float>(count) : 0.0f;
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) {
      float f[VEC];
      unpack<T, VEC>(cache.p[j], f);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float d = f[i] - local_mean;
        sq = fmaf(d, d, sq);
      }
    }
  }
  MeanM2 st{static_cast<float>(count), local_mean, sq};
  if constexpr (kWarpPerRow) {
    st = warp_allreduce_stats(st);
  } else {
    st = block_allreduce_stats(st, smem);
  }
  const float mean = st.mean;
  const float rstd = rsqrtf(st.m2 / static_cast<float>(a.cols) + a.eps);

#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) {
      float f[VEC];
      unpack<T, VEC>(cache.p[j], f);
      if constexpr (kPrefetchAffine) {
        write_normalized<V>(a, base, cache.offset(g, j), f, wp[j], bp[j], mean, rstd);
      } else {
        write_normalized<V>(a, base, cache.offset(g, j), f, mean, rstd);
      }
    }
  }
}

template <class V>
__global__ void __launch_bounds__(kStreamThreads) layernorm_rows_stream(LnArgs<typename V::T> a) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  const int nvec = a.cols / VEC;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * a.cols;
  const float inv_n = 1.0f / static_cast<float>(a.cols);
  const float shift = to_float(a.x[base]);

  float s = 0.0f, sq = 0.0f;
  for (int iv = threadIdx.x; iv < nvec; iv += blockDim.x) {
    float f[VEC];
    unpack<T, VEC>(load_pack<T, VEC>(a.x + base + iv * VEC), f);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float d = f[i] - shift;
      s += d;
      sq = fmaf(d, d, sq);
    }
  }
  const float mean_d = block_allreduce<SumOp>(s, smem) * inv_n;
  const float var =
      fmaxf(block_allreduce<SumOp>(sq, smem) * inv_n - mean_d * mean_d, 0.0f);
  const float mean = shift + mean_d;
  const float rstd = rsqrtf(var + a.eps);

  for (int iv = threadIdx.x; iv < nvec; iv += blockDim.x) {
    float f[VEC];
    unpack<T, VEC>(load_pack<T, VEC>(a.x + base + iv * VEC), f);
    write_normalized<V>(a, base, iv * VEC, f, mean, rstd);
  }
}

}  // namespace

cudaError_t launch_layernorm(DType dt, const void* x, const void* weight, const void* bias,
                             void* y, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (cols < 1 || cols > kMaxRowLength || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const bool vec = rows_vectorizable(dt, cols, {x, weight, bias, y});
  return dispatch_variant(dt, vec, [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    LnArgs<T> args{static_cast<const T*>(x), static_cast<const T*>(weight),
                   static_cast<const T*>(bias), static_cast<T*>(y), rows,
                   static_cast<int>(cols), eps};
    const RowConfig cfg = plan_rows(rows, cols / V::VEC, V::VEC);
    if (cfg.plan == RowPlan::kStream) {
      layernorm_rows_stream<V><<<static_cast<unsigned>(rows), cfg.threads, 0, stream>>>(args);
      return cudaGetLastError();
    }
    return dispatch_cached_plan<V>(cfg, [&](auto nv, auto warp) {
      layernorm_rows<V, decltype(nv)::value, decltype(warp)::value>
          <<<static_cast<unsigned>(cfg.blocks), cfg.threads, 0, stream>>>(args);
      return cudaGetLastError();
    });
  });
}

}  // namespace sk
