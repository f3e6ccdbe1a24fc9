// Cross-entropy forward (fused log-softmax + NLL): launcher (plain C++).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

enum class Reduction : int { kNone = 0, kMean = 1, kSum = 2 };

// loss[r] = logsumexp(logits[r, :]) - logits[r, target[r]] for logits [rows, vocab] (row-major,
// contiguous), int64 targets; rows whose target is ignore_index give 0 and do not count; a target
// outside [0, vocab) gives NaN (never an out-of-bounds read). kNone writes loss [rows] (fp32);
// kMean / kSum write one fp32 (mean over the counted rows: NaN when none counts, like PyTorch).
struct CrossEntropyArgs {
  DType dtype;
  const void* logits;
  const int64_t* target;
  float* out;
  int64_t rows;
  int64_t vocab;
  int64_t ignore_index;
  Reduction reduction;
};

// Scratch the launcher needs, in bytes (0 for some shapes); the caller allocates it on the device.
int64_t cross_entropy_workspace_bytes(const CrossEntropyArgs& args);

cudaError_t launch_cross_entropy(const CrossEntropyArgs& args, void* workspace, cudaStream_t stream);

}  // namespace sk
