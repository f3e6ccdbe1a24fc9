// FP8 (float8_e4m3fn) quantisation and dequantisation: launchers (plain C++).
//
// The formulas are PyTorch's, so that results match its casts bit for bit given the same scale:
//   q = (x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)     (IEEE fp32 division)
//   y = (q.float() * scale).to(dtype)
// and dynamic scales are scale = amax.clamp(min=1e-12) / 448 with amax = x.abs().amax() (per
// tensor) or .amax(dim=-1) (per row), as fp32 tensors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

// q[i] for n elements of x with the per-tensor scale *scale (a device fp32).
cudaError_t launch_fp8_quant(DType dt, const void* x, const float* scale, uint8_t* q, int64_t n,
                             cudaStream_t stream);

// Per-tensor scale from the tensor's amax (first pass), then q (second pass, which also writes
// *scale_out). amax_bits: one device word the caller zeroes before the launch.
cudaError_t launch_fp8_quant_dynamic(DType dt, const void* x, uint8_t* q, float* scale_out,
                                     unsigned* amax_bits, int64_t n, cudaStream_t stream);

// One scale per row of x [rows, cols] (row-major): scales[r] and q [rows, cols].
cudaError_t launch_fp8_quant_rows(DType dt, const void* x, uint8_t* q, float* scales, int64_t rows,
                                  int64_t cols, cudaStream_t stream);

// y [rows, cols] of dtype dt from q [rows, cols]: scale has one entry (per tensor) or `rows`.
cudaError_t launch_fp8_dequant(DType dt, const uint8_t* q, const float* scale, bool per_row, void* y,
                               int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace sk
