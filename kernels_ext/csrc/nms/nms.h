// Non-maximum suppression: launchers (plain C++). The score sort happens before (the binding
// sorts with torch, the same sort torchvision uses, so ties resolve identically).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sk {

constexpr int kNmsBoxesPerWord = 64;
constexpr int64_t kNmsMaxBoxes = 65536;  // the scan keeps one bit per box in shared memory

inline int64_t nms_words(int64_t n) { return (n + kNmsBoxesPerWord - 1) / kNmsBoxesPerWord; }

// boxes [n, 4] fp32 (x1, y1, x2, y2; rows 16-byte aligned), order [n] int64: box indices by
// decreasing score. Writes keep[0 .. *count) (original indices, by decreasing score) and *count.
// mask: n * nms_words(n) uint64 of scratch.
struct NmsArgs {
  const float* boxes;
  const int64_t* order;
  int64_t n;
  float iou_threshold;
  unsigned long long* mask;
  int64_t* keep;
  int64_t* count;
};

cudaError_t launch_nms(const NmsArgs& args, cudaStream_t stream);

}  // namespace sk
