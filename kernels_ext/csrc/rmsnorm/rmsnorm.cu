// RMSNorm and fused residual-add + RMSNorm over the last dimension.
// Same structure as softmax: rows that fit stay in registers (one read of x
// [and residual], one write of y [and h]); longer rows take a second read.
#include "../common/op_io.h"
#include "../common/rows.cuh"

namespace sk {
namespace {

template <typename T>
struct RmsArgs {
  const T* x;
  const T* residual;  // nullptr unless kResidual
  const T* weight;
  T* y;
  T* h_out;           // nullptr unless kResidual
  int64_t rows;
  int cols;
  float eps;
};

template <class V, int NV, bool kWarpPerRow, bool kResidual>
__global__ void __launch_bounds__(kRowMaxThreads<kWarpPerRow>, kRowMinBlocks<kWarpPerRow>) rmsnorm_rows(RmsArgs<typename V::T> a) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  const auto g = RowGroup<kWarpPerRow>::make();
  if (g.row >= a.rows) return;
  const int nvec = a.cols / VEC;
  const int64_t base = g.row * a.cols;

  RowCache<V, NV> cache;
  cache.load(a.x + base, g, nvec);
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) {
      float f[VEC];
      unpack<T, VEC>(cache.p[j], f);
      if constexpr (kResidual) {
        float r[VEC];
        unpack<T, VEC>(load_pack<T, VEC>(a.residual + base + cache.offset(g, j)), r);
#pragma unroll
        for (int i = 0; i < VEC; ++i) f[i] += r[i];
        cache.p[j] = pack<T, VEC>(f);
        store_pack<T, VEC>(a.h_out + base + cache.offset(g, j), cache.p[j]);
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) ss = fmaf(f[i], f[i], ss);
    }
  }
  ss = g.template allreduce<SumOp>(ss, smem);
  const float rstd = rsqrtf(ss / static_cast<float>(a.cols) + a.eps);

#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) {
      float f[VEC], w[VEC];
      unpack<T, VEC>(cache.p[j], f);
      unpack<T, VEC>(load_pack<T, VEC>(a.weight + cache.offset(g, j)), w);
#pragma unroll
      for (int i = 0; i < VEC; ++i) f[i] = f[i] * rstd * w[i];
      store_pack<T, VEC>(a.y + base + cache.offset(g, j), pack<T, VEC>(f));
    }
  }
}

template <class V, bool kResidual>
__global__ void __launch_bounds__(kStreamThreads) rmsnorm_rows_stream(RmsArgs<typename V::T> a) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  const int nvec = a.cols / VEC;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * a.cols;

  float ss = 0.0f;
  for (int iv = threadIdx.x; iv < nvec; iv += blockDim.x) {
    float f[VEC];
    unpack<T, VEC>(load_pack<T, VEC>(a.x + base + iv * VEC), f);
    if constexpr (kResidual) {
      float r[VEC];
      unpack<T, VEC>(load_pack<T, VEC>(a.residual + base + iv * VEC), r);
#pragma unroll
      for (int i = 0; i < VEC; ++i) f[i] += r[i];
      store_pack<T, VEC>(a.h_out + base + iv * VEC, pack<T, VEC>(f));
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) ss = fmaf(f[i], f[i], ss);
  }
  ss = block_allreduce<SumOp>(ss, smem);
  const float rstd = rsqrtf(ss / static_cast<float>(a.cols) + a.eps);

  for (int iv = threadIdx.x; iv < nvec; iv += blockDim.x) {
    float f[VEC], w[VEC];
    if constexpr (kResidual) {
      // This thread wrote these elements of h above: coherent load, not the nc path.
      unpack<T, VEC>(load_pack_coherent<T, VEC>(a.h_out + base + iv * VEC), f);
    } else {
      unpack<T, VEC>(load_pack<T, VEC>(a.x + base + iv * VEC), f);
    }
    unpack<T, VEC>(load_pack<T, VEC>(a.weight + iv * VEC), w);
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = f[i] * rstd * w[i];
    store_pack<T, VEC>(a.y + base + iv * VEC, pack<T, VEC>(f));
  }
}

template <bool kResidual>
cudaError_t rmsnorm_impl(DType dt, const void* x, const void* residual, const void* weight,
                         void* y, void* h_out, int64_t rows, int64_t cols, float eps,
                         cudaStream_t stream) {
  if (cols < 1 || cols > kMaxRowLength || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const bool vec = rows_vectorizable(dt, cols, {x, residual, weight, y, h_out});
  return dispatch_variant(dt, vec, [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    RmsArgs<T> args{static_cast<const T*>(x), static_cast<const T*>(residual),
                    static_cast<const T*>(weight), static_cast<T*>(y), static_cast<T*>(h_out),
                    rows, static_cast<int>(cols), eps};
    const RowConfig cfg = plan_rows(rows, cols / V::VEC, V::VEC);
    if (cfg.plan == RowPlan::kStream) {
      rmsnorm_rows_stream<V, kResidual>
          <<<static_cast<unsigned>(rows), cfg.threads, 0, stream>>>(args);
      return cudaGetLastError();
    }
    return dispatch_cached_plan<V>(cfg, [&](auto nv, auto warp) {
      rmsnorm_rows<V, decltype(nv)::value, decltype(warp)::value, kResidual>
          <<<static_cast<unsigned>(cfg.blocks), cfg.threads, 0, stream>>>(args);
      return cudaGetLastError();
    });
  });
}

}  // namespace
}  // namespace sk

namespace sk::ops {
// in: x, weight; out: y.
cudaError_t rmsnorm(const RowsIO<2, 1>& io, float eps, cudaStream_t stream) {
  return rmsnorm_impl<false>(io.dtype, io.in[0], nullptr, io.in[1], io.out[0], nullptr, io.rows,
                             io.cols, eps, stream);
}

// in: x, residual, weight; out: y, h = x + residual. The sum of squares uses h in fp32;
// y normalises h as stored (rounded to the dtype), like the unfused pair.
cudaError_t add_rmsnorm(const RowsIO<3, 2>& io, float eps, cudaStream_t stream) {
  return rmsnorm_impl<true>(io.dtype, io.in[0], io.in[1], io.in[2], io.out[0], io.out[1],
                            io.rows, io.cols, eps, stream);
}
}  // namespace sk::ops
