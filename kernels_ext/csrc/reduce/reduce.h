// The whole-tensor reductions' launcher, called by the hand-written bindings of sum_all
// and max_all (csrc/bindings/reduce.cpp). No PyTorch, no CUDA kernels in this header.
// The row reductions are `impl: rows` table ops: their launchers need no header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

enum class ReduceOp : int { kSum = 0, kMax = 1 };

// Floats of scratch that launch_reduce_all needs (one partial per block of stage 1).
constexpr int kReduceAllMaxPartials = 1024;

// *out = reduce(x[0:n]) (one element of dtype dt); fp32 accumulation. Two kernels:
// per-block partials into workspace (kReduceAllMaxPartials floats), then one block.
// n must be >= 1.
cudaError_t launch_reduce_all(ReduceOp op, DType dt, const void* x, void* out, float* workspace,
                              int64_t n, cudaStream_t stream);

}  // namespace sk
