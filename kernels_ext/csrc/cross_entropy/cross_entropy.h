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
// kMean / kSum write one fp32 (mean over the counted rows: NaN when none counts, like PyTorch),
// from the exact sum of the fp32 row losses: the same bits every run.
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

// Scratch the launcher needs, in bytes (0 for most shapes; any contents); the caller allocates it
// on the device.
int64_t cross_entropy_workspace_bytes(const CrossEntropyArgs& args);

// Counters for every shape on the current device, in bytes (8-byte aligned). They must be zero when
// a launch starts, and the kernel leaves them zero when it completes: a caller zeroes a buffer once
// and keeps it for every launch ordered after that on one stream. Two launches that may run at the
// same time (other streams) need two buffers.
int64_t cross_entropy_counter_bytes();

// One kernel launch for every reduction (mean and sum included).
cudaError_t launch_cross_entropy(const CrossEntropyArgs& args, void* workspace, void* counters,
                                 cudaStream_t stream);

}  // namespace sk
