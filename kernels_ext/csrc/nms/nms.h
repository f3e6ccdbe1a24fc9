// Non-maximum suppression: launchers (plain C++). The score order comes first: launch_nms_order
// up to kNmsRankSortMax boxes without equal scores, else torch's sort (the one torchvision uses).
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

// order[0 .. n): box indices by decreasing score (the float order of a radix sort: -0 below +0,
// NaN above all), in one launch of n^2 comparisons, for n <= kNmsRankSortMax, where that beats the
// several launches of torch's sort. *ties is set to 1 when two scores are equal: their order is
// then whatever torch's sort gives (torchvision sorts with it, and its algorithms, picked by size,
// order equal keys differently), so the caller redoes the order with torch's sort.
constexpr int64_t kNmsRankSortMax = 16384;
cudaError_t launch_nms_order(const float* scores, int64_t n, int64_t* order, int64_t* ties,
                             cudaStream_t stream);

}  // namespace sk
