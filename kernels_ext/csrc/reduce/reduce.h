// Launchers for the reduction family (no PyTorch, no CUDA kernels in this header).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

enum class ReduceOp : int { kSum = 0, kMax = 1 };

// out[r] = reduce(x[r, 0:cols]) for rows x cols contiguous; fp32 accumulation,
// result rounded to dt. max propagates NaN. cols must be >= 1.
cudaError_t launch_row_reduce(ReduceOp op, DType dt, const void* x, void* out, int64_t rows,
                              int64_t cols, cudaStream_t stream);

// Floats of scratch that launch_reduce_all needs (one partial per block of stage 1).
constexpr int kReduceAllMaxPartials = 1024;

// *out = reduce(x[0:n]) (one element of dtype dt); fp32 accumulation. Two kernels:
// per-block partials into workspace (kReduceAllMaxPartials floats), then one block.
// n must be >= 1.
cudaError_t launch_reduce_all(ReduceOp op, DType dt, const void* x, void* out, float* workspace,
                              int64_t n, cudaStream_t stream);

}  // namespace sk
