// Sum and max over the last dimension, and over the whole tensor; fp32 accumulation.
// Memory-bound: each element is read once, each packs-in-flight loop keeps
// kUnroll independent 128-bit loads per thread.
#include "reduce.h"

#include "../common/grid.cuh"
#include "../common/op_io.h"
#include "../common/rows.cuh"

namespace sk {
namespace {

constexpr int kUnroll = 4;
constexpr int kRowBlockMaxThreads = 512;
constexpr int kAllThreads = 512;
constexpr int kAllBlocksPerSm = 4;  // 4 x 512 threads: a full SM
constexpr int kFinalThreads = 1024;

// Folds kUnroll packs per step of a strided walk over packs [first, nvec).
template <class V, class Op, typename Index>
__device__ __forceinline__ float reduce_strided(const typename V::T* x, Index first, Index nvec,
                                                Index step, float acc) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  for (Index base = first; base < nvec; base += step * kUnroll) {
    Pack<T, VEC> p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const Index iv = base + u * step;
      if (iv < nvec) p[u] = load_pack<T, VEC>(x + iv * VEC);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const Index iv = base + u * step;
      if (iv < nvec) {
        float f[VEC];
        unpack<T, VEC>(p[u], f);
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc = Op::apply(acc, f[i]);
      }
    }
  }
  return acc;
}

// One warp (short rows) or one block (long rows) per row.
template <class V, class Op, bool kWarpPerRow>
__global__ void __launch_bounds__(kRowBlockMaxThreads)
    row_reduce(const typename V::T* __restrict__ x, typename V::T* __restrict__ out, int64_t rows,
               int cols) {
  __shared__ float smem[32];
  const auto g = RowGroup<kWarpPerRow>::make();
  if (g.row >= rows) return;  // whole warps only (warp mode) or never (block mode)
  const int nvec = cols / V::VEC;
  const auto* row = x + g.row * cols;
  float acc = reduce_strided<V, Op, int>(row, g.rank, nvec, g.size, Op::identity());
  acc = g.template allreduce<Op>(acc, smem);
  if (g.rank == 0) out[g.row] = from_float<typename V::T>(acc);
}

template <class V, class Op>
__global__ void __launch_bounds__(kAllThreads)
    reduce_all_partial(const typename V::T* __restrict__ x, float* __restrict__ partials,
                       int64_t n) {
  __shared__ float smem[32];
  const int64_t nvec = n / V::VEC;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // Each block walks its own contiguous-per-step slab: step = all threads of the grid.
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  float acc = Op::identity();
  for (int64_t base = first; base < nvec; base += nthreads * kUnroll) {
    Pack<typename V::T, V::VEC> p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + static_cast<int64_t>(u) * blockDim.x;
      if (iv < nvec) p[u] = load_pack<typename V::T, V::VEC>(x + iv * V::VEC);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + static_cast<int64_t>(u) * blockDim.x;
      if (iv < nvec) {
        float f[V::VEC];
        unpack<typename V::T, V::VEC>(p[u], f);
#pragma unroll
        for (int i = 0; i < V::VEC; ++i) acc = Op::apply(acc, f[i]);
      }
    }
  }
  const int64_t t = nvec * V::VEC + tid;  // the n % VEC tail
  if (t < n) acc = Op::apply(acc, to_float(x[t]));
  acc = block_allreduce<Op>(acc, smem);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <typename T, class Op>
__global__ void __launch_bounds__(kFinalThreads)
    reduce_all_final(const float* __restrict__ partials, int count, T* __restrict__ out) {
  __shared__ float smem[32];
  float acc = Op::identity();
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc = Op::apply(acc, partials[i]);
  acc = block_allreduce<Op>(acc, smem);
  if (threadIdx.x == 0) *out = from_float<T>(acc);
}

template <class Op>
cudaError_t row_reduce_impl(DType dt, const void* x, void* out, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  const bool vec = rows_vectorizable(dt, cols, {x});
  return dispatch_variant(dt, vec, [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    const int64_t nvec = cols / V::VEC;
    const auto* xp = static_cast<const T*>(x);
    auto* op = static_cast<T*>(out);
    if (cols <= 1024) {
      const int64_t blocks = ceil_div(rows, kWarpRowsPerBlock);
      row_reduce<V, Op, true><<<static_cast<unsigned>(blocks), 32 * kWarpRowsPerBlock, 0, stream>>>(
          xp, op, rows, static_cast<int>(cols));
    } else {
      // Enough threads that each has about kUnroll packs, up to 512.
      int64_t threads = round_up32(ceil_div(nvec, kUnroll));
      if (threads > kRowBlockMaxThreads) threads = kRowBlockMaxThreads;
      row_reduce<V, Op, false><<<static_cast<unsigned>(rows), static_cast<unsigned>(threads), 0,
                                 stream>>>(xp, op, rows, static_cast<int>(cols));
    }
    return cudaGetLastError();
  });
}

template <class Op>
cudaError_t reduce_all_impl(DType dt, const void* x, void* out, float* workspace, int64_t n,
                            cudaStream_t stream) {
  return dispatch_variant(dt, aligned16(x), [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    const int64_t nvec = n / V::VEC;
    int64_t blocks = ceil_div(nvec, static_cast<int64_t>(kAllThreads) * kUnroll);
    const int64_t cap = static_cast<int64_t>(sm_count()) * kAllBlocksPerSm;
    if (blocks > cap) blocks = cap;
    if (blocks > kReduceAllMaxPartials) blocks = kReduceAllMaxPartials;
    if (blocks < 1) blocks = 1;
    reduce_all_partial<V, Op><<<static_cast<unsigned>(blocks), kAllThreads, 0, stream>>>(
        static_cast<const T*>(x), workspace, n);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    reduce_all_final<T, Op><<<1, kFinalThreads, 0, stream>>>(workspace, static_cast<int>(blocks),
                                                             static_cast<T*>(out));
    return cudaGetLastError();
  });
}

cudaError_t launch_row_reduce(ReduceOp op, DType dt, const void* x, void* out, int64_t rows,
                              int64_t cols, cudaStream_t stream) {
  if (cols < 1 || cols > kMaxRowLength || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  switch (op) {
    case ReduceOp::kSum: return row_reduce_impl<SumOp>(dt, x, out, rows, cols, stream);
    case ReduceOp::kMax: return row_reduce_impl<MaxOp>(dt, x, out, rows, cols, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_reduce_all(ReduceOp op, DType dt, const void* x, void* out, float* workspace,
                              int64_t n, cudaStream_t stream) {
  if (n < 1) return cudaErrorInvalidValue;
  switch (op) {
    case ReduceOp::kSum: return reduce_all_impl<SumOp>(dt, x, out, workspace, n, stream);
    case ReduceOp::kMax: return reduce_all_impl<MaxOp>(dt, x, out, workspace, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sk

namespace sk::ops {
cudaError_t row_sum(const RowsIO<1, 1>& io, cudaStream_t stream) {
  // Rows of no elements sum to 0 (all-zero bytes in every dtype); max has no such value,
  // and the op table rejects max over empty rows.
  if (io.cols == 0) {
    return cudaMemsetAsync(io.out[0], 0, io.rows * element_size(io.dtype), stream);
  }
  return launch_row_reduce(ReduceOp::kSum, io.dtype, io.in[0], io.out[0], io.rows, io.cols,
                           stream);
}

cudaError_t row_max(const RowsIO<1, 1>& io, cudaStream_t stream) {
  return launch_row_reduce(ReduceOp::kMax, io.dtype, io.in[0], io.out[0], io.rows, io.cols,
                           stream);
}
}  // namespace sk::ops
