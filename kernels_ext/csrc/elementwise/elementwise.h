// Launchers for the elementwise family (no PyTorch, no CUDA kernels in this header).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

enum class BinaryOp : int { kAdd = 0, kMul = 1 };

// out[i] = a[i] (+|*) b[i] for n contiguous elements of dtype dt; computed in float,
// rounded once. Any alignment; 16-byte aligned pointers take the 128-bit path.
cudaError_t launch_binary(BinaryOp op, DType dt, const void* a, const void* b, void* out,
                          int64_t n, cudaStream_t stream);

}  // namespace sk
