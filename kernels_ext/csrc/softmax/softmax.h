// Launcher for row softmax (no PyTorch, no CUDA kernels in this header).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

// y[r, :] = softmax(x[r, :]) over cols for rows x cols contiguous; fp32 math.
cudaError_t launch_softmax(DType dt, const void* x, void* y, int64_t rows, int64_t cols,
                           cudaStream_t stream);

}  // namespace sk
