// Launcher for LayerNorm (no PyTorch, no CUDA kernels in this header).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

// y[r, :] = (x[r, :] - mean) * rsqrt(var + eps) * weight + bias, biased variance
// over cols; fp32 math.
cudaError_t launch_layernorm(DType dt, const void* x, const void* weight, const void* bias,
                             void* y, int64_t rows, int64_t cols, float eps, cudaStream_t stream);

}  // namespace sk
