// Launchers for RMSNorm (no PyTorch, no CUDA kernels in this header).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

// y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight; fp32 math.
cudaError_t launch_rmsnorm(DType dt, const void* x, const void* weight, void* y, int64_t rows,
                           int64_t cols, float eps, cudaStream_t stream);

// h = x + residual (written to h_out), y = rmsnorm(h) * weight. The sum of squares
// uses h in fp32; y normalises h as stored (rounded to dt), like the unfused pair.
cudaError_t launch_add_rmsnorm(DType dt, const void* x, const void* residual, const void* weight,
                               void* y, void* h_out, int64_t rows, int64_t cols, float eps,
                               cudaStream_t stream);

}  // namespace sk
