// Row softmax over the last dimension.
//
// Rows that fit (up to 1024 threads x 8 packs: 65536 bf16/fp16 or 32768 fp32 elements)
// are read once into registers: max, sum of exp, write; one HBM read and one write
// per element. Longer rows use an online (running max) pass and a second read.
//
// exp(x - m) is computed as exp2f((x - m) * log2e), subtracting first: x - m is exact
// for x near m (and only tiny exps see its rounding), whereas fma(x, log2e, -m*log2e)
// carries the rounding of m*log2e, about |m| * 2^-24 in the exponent (6e-5 relative
// for logits near 1000), which only cancels if every exp of the row, in the sum and in
// the output, uses the same rounded product. exp2f is the accurate (non fast-math)
// function, so fp32 results stay within a few ulp.
#include "../common/op_io.h"
#include "../common/rows.cuh"

namespace sk {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

template <class V, int NV, bool kWarpPerRow>
__global__ void __launch_bounds__(kRowMaxThreads<kWarpPerRow>, kRowMinBlocks<kWarpPerRow>)
    softmax_rows(const typename V::T* __restrict__ x, typename V::T* __restrict__ y, int64_t rows,
                 int cols) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  const auto g = RowGroup<kWarpPerRow>::make();
  if (g.row >= rows) return;
  const int nvec = cols / VEC;
  const int64_t base = g.row * cols;

  RowCache<V, NV> cache;
  cache.load(x + base, g, nvec);

  float m = cache.fold(g, nvec, -INFINITY, [](float a, float v) { return fmaxf(a, v); });
  m = g.template allreduce<MaxOp>(m, smem);

  // Up to 32 floats per thread the exps stay in registers, so each element costs one exp2f
  // (MUFU throughput, not HBM, bounds the short rows: 4096 x 1024 bf16 is 8 M exps in ~6 us).
  // Longer per-thread slices recompute the exp at the write rather than spill.
  constexpr bool kKeepExp = NV * VEC <= 32;
  float e[kKeepExp ? NV : 1][VEC];
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) {
      float f[VEC];
      unpack<T, VEC>(cache.p[j], f);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float v = exp2f((f[i] - m) * kLog2e);
        if constexpr (kKeepExp) e[j][i] = v;
        s += v;
      }
    }
  }
  s = g.template allreduce<SumOp>(s, smem);
  const float inv = 1.0f / s;

#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) {
      float f[VEC];
      if constexpr (kKeepExp) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) f[i] = e[j][i] * inv;
      } else {
        unpack<T, VEC>(cache.p[j], f);
#pragma unroll
        for (int i = 0; i < VEC; ++i) f[i] = exp2f((f[i] - m) * kLog2e) * inv;
      }
      store_pack<T, VEC>(y + base + cache.offset(g, j), pack<T, VEC>(f));
    }
  }
}

// Rows too long for registers: pass 1 keeps a running (max, sum) per thread,
// pass 2 re-reads the row (often from L2) and writes.
template <class V>
__global__ void __launch_bounds__(kStreamThreads)
    softmax_rows_stream(const typename V::T* __restrict__ x, typename V::T* __restrict__ y,
                        int cols) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  const int nvec = cols / VEC;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;

  float m = -INFINITY, s = 0.0f;
  for (int iv = threadIdx.x; iv < nvec; iv += blockDim.x) {
    float f[VEC];
    unpack<T, VEC>(load_pack<T, VEC>(x + base + iv * VEC), f);
    float pm = f[0];
#pragma unroll
    for (int i = 1; i < VEC; ++i) pm = fmaxf(pm, f[i]);
    if (pm > m) {
      s *= exp2f((m - pm) * kLog2e);  // m = -inf: s is 0 and exp2f(-inf) = 0
      m = pm;
    }
    if (m != -INFINITY) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) s += exp2f((f[i] - m) * kLog2e);
    }
  }
  const float row_max = block_allreduce<MaxOp>(m, smem);
  const float mine = (m == -INFINITY) ? 0.0f : s * exp2f((m - row_max) * kLog2e);
  const float total = block_allreduce<SumOp>(mine, smem);
  const float inv = 1.0f / total;

  for (int iv = threadIdx.x; iv < nvec; iv += blockDim.x) {
    float f[VEC];
    unpack<T, VEC>(load_pack<T, VEC>(x + base + iv * VEC), f);
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = exp2f((f[i] - row_max) * kLog2e) * inv;
    store_pack<T, VEC>(y + base + iv * VEC, pack<T, VEC>(f));
  }
}

cudaError_t launch_softmax(DType dt, const void* x, void* y, int64_t rows, int64_t cols,
                           cudaStream_t stream) {
  if (cols < 1 || cols > kMaxRowLength || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const bool vec = rows_vectorizable(dt, cols, {x, y});
  return dispatch_variant(dt, vec, [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    const auto* xp = static_cast<const T*>(x);
    auto* yp = static_cast<T*>(y);
    const RowConfig cfg = plan_rows(rows, cols / V::VEC, V::VEC);
    if (cfg.plan == RowPlan::kStream) {
      softmax_rows_stream<V><<<static_cast<unsigned>(rows), cfg.threads, 0, stream>>>(
          xp, yp, static_cast<int>(cols));
      return cudaGetLastError();
    }
    return dispatch_cached_plan<V>(cfg, [&](auto nv, auto warp) {
      softmax_rows<V, decltype(nv)::value, decltype(warp)::value>
          <<<static_cast<unsigned>(cfg.blocks), cfg.threads, 0, stream>>>(
              xp, yp, rows, static_cast<int>(cols));
      return cudaGetLastError();
    });
  });
}

}  // namespace
}  // namespace sk

namespace sk::ops {
cudaError_t softmax(const RowsIO<1, 1>& io, cudaStream_t stream) {
  return launch_softmax(io.dtype, io.in[0], io.out[0], io.rows, io.cols, stream);
}
}  // namespace sk::ops
