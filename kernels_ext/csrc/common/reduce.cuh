// Warp and block reductions in float; every thread of the group gets the result.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace sk {

struct SumOp {
  __device__ __forceinline__ static float identity() { return 0.0f; }
  __device__ __forceinline__ static float apply(float a, float b) { return a + b; }
};

// NaN-propagating max, like torch.max / torch.amax.
struct MaxOp {
  __device__ __forceinline__ static float identity() { return -INFINITY; }
  __device__ __forceinline__ static float apply(float a, float b) {
    return (a > b || a != a) ? a : b;
  }
};

template <class Op>
__device__ __forceinline__ float warp_allreduce(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// blockDim.x must be a multiple of 32 and every thread must call this.
// smem: at least 32 floats. Ends with a barrier so smem can be reused at once.
template <class Op>
__device__ __forceinline__ float block_allreduce(float v, float* smem) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = warp_allreduce<Op>(v);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  // Each warp reduces the per-warp partials itself: no second broadcast needed.
  float r = lane < nwarps ? smem[lane] : Op::identity();
  r = warp_allreduce<Op>(r);
  __syncthreads();
  return r;
}

}  // namespace sk
