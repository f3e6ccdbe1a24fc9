// Launchers for the activation family (no PyTorch, no CUDA kernels in this header).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

enum class Activation : int { kRelu = 0, kGeluErf = 1, kGeluTanh = 2, kSilu = 3, kSigmoid = 4 };

// y[i] = act(x[i]) for n contiguous elements.
cudaError_t launch_activation(Activation act, DType dt, const void* x, void* y, int64_t n,
                              cudaStream_t stream);

// out[i] = silu(a[i]) * b[i].
cudaError_t launch_swiglu(DType dt, const void* a, const void* b, void* out, int64_t n,
                          cudaStream_t stream);

}  // namespace sk
