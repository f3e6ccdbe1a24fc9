// LayerNorm over the last dimension (weight and bias).
// Cached rows: mean, then variance from the centred values held in registers
// (two-pass, no cancellation). Streamed rows: sums shifted by the row's first
// element (cancellation limited to the spread of the row), then a second read.
#include "../common/op_io.h"
#include "../common/rows.cuh"

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

template <class V>
__device__ __forceinline__ void write_normalized(const LnArgs<typename V::T>& a, int64_t base,
                                                 int off, float (&f)[V::VEC], float mean,
                                                 float rstd) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  float w[VEC], b[VEC];
  unpack<T, VEC>(load_pack<T, VEC>(a.weight + off), w);
  unpack<T, VEC>(load_pack<T, VEC>(a.bias + off), b);
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = fmaf((f[i] - mean) * rstd, w[i], b[i]);
  store_pack<T, VEC>(a.y + base + off, pack<T, VEC>(f));
}

// Warp mode: 8 blocks of 128 threads per SM (64 registers), not rows.cuh's 6. At 6 ptxas gave
// the fp32 kernel of 1024-wide rows (8 packs per lane) 77 registers: 6 blocks per SM, so the
// 4096 x 1024 case's 1024 blocks took 1.3 waves of 792, and torch.compile was 13% faster there
// (results/h200/kernels_v3.json). At 64 registers it does not spill and 1056 blocks fit at once.
template <bool kWarpPerRow>
constexpr int kLayerNormMinBlocks = kWarpPerRow ? 8 : kRowMinBlocks<kWarpPerRow>;

template <class V, int NV, bool kWarpPerRow>
__global__ void __launch_bounds__(kRowMaxThreads<kWarpPerRow>, kLayerNormMinBlocks<kWarpPerRow>) layernorm_rows(LnArgs<typename V::T> a) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  const auto g = RowGroup<kWarpPerRow>::make();
  if (g.row >= a.rows) return;
  const int nvec = a.cols / VEC;
  const int64_t base = g.row * a.cols;
  const float inv_n = 1.0f / static_cast<float>(a.cols);

  RowCache<V, NV> cache;
  cache.load(a.x + base, g, nvec);

  const float s = cache.fold(g, nvec, 0.0f, [](float a, float v) { return a + v; });
  const float mean = g.template allreduce<SumOp>(s, smem) * inv_n;

  float sq = cache.fold(g, nvec, 0.0f, [mean](float a, float v) {
    const float d = v - mean;
    return fmaf(d, d, a);
  });
  const float var = g.template allreduce<SumOp>(sq, smem) * inv_n;
  const float rstd = rsqrtf(var + a.eps);

#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) {
      float f[VEC];
      unpack<T, VEC>(cache.p[j], f);
      write_normalized<V>(a, base, cache.offset(g, j), f, mean, rstd);
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

}  // namespace
}  // namespace sk

namespace sk::ops {
// in: x, weight, bias; out: y.
cudaError_t layernorm(const RowsIO<3, 1>& io, float eps, cudaStream_t stream) {
  return launch_layernorm(io.dtype, io.in[0], io.in[1], io.in[2], io.out[0], io.rows, io.cols,
                          eps, stream);
}
}  // namespace sk::ops
