// Rotary position embedding: launcher (plain C++, no CUDA types beyond the stream).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

// q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim] (the last dim contiguous, the
// other two strided, in elements) turned by cos_sin [tokens, head_dim]: cos in the first half of a
// token's row, sin in the second. Pair i of a head is (x[i], x[i + D/2]) for NeoX and
// (x[2i], x[2i + 1]) for GPT-J; it turns by the angle of cache entry i. The outputs may be the
// inputs themselves (in place). All tensors have one dtype; math is fp32.
struct RopeArgs {
  DType dtype;
  const void* q;
  const void* k;
  const void* cos_sin;
  void* q_out;
  void* k_out;
  int64_t tokens;
  int heads;
  int kv_heads;
  int head_dim;  // even
  int64_t q_stride[2];  // token, head strides of q (elements); likewise for the others
  int64_t k_stride[2];
  int64_t q_out_stride[2];
  int64_t k_out_stride[2];
  int64_t cos_sin_stride;
  bool neox;
};

cudaError_t launch_rope(const RopeArgs& args, cudaStream_t stream);

}  // namespace sk
