// Histogram of integers: launcher (plain C++).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sk {

enum class IntType : int { kUInt8 = 0, kInt32 = 1 };

constexpr int kHistogramMaxBins = 8192;

// counts[b] += number of x[i] == b for b in [0, bins); other values are ignored. x is n
// contiguous elements; counts (int64, bins entries) must be zeroed by the caller.
struct HistogramArgs {
  IntType type;
  const void* x;
  int64_t n;
  int bins;  // 1 .. kHistogramMaxBins
  int64_t* counts;
};

cudaError_t launch_histogram(const HistogramArgs& args, cudaStream_t stream);

}  // namespace sk
