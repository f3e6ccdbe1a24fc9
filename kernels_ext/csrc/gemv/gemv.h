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

// The CUDA-core kernel (gemv.cu): any dtype, any K.
cudaError_t launch_gemv(const GemvArgs& args, cudaStream_t stream);

// The tensor-core kernel (gemv_mma.cu, sm_80 and later): bf16 / fp16 with K, lda and ldx multiples
// of 8 and 16-byte-aligned a and x (gemv_mma_supports); cudaErrorInvalidValue otherwise.
bool gemv_mma_supports(const GemvArgs& args);
cudaError_t launch_gemv_mma(const GemvArgs& args, cudaStream_t stream);

}  // namespace sk
