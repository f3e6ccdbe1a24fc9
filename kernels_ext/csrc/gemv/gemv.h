// Matrix-vector products for decode-time linear layers: launcher (plain C++).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

// y[b, m] = sum_k a[m, k] * x[b, k] for b < batch: a [rows, cols] with row stride lda, x [batch,
// cols] with row stride ldx, y [batch, rows] contiguous. One dtype for all three; fp32 math.
struct GemvArgs {
  DType dtype;
  const void* a;
  const void* x;
  void* y;
  int64_t rows;
  int64_t cols;
  int64_t batch;
  int64_t lda;
  int64_t ldx;
};

cudaError_t launch_gemv(const GemvArgs& args, cudaStream_t stream);

}  // namespace sk
