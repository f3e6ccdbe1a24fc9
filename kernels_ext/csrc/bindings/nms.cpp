// Hand-written implementation of the `impl: custom` nms op (op table: csrc/nms/ops.yaml). The
// generated wrapper has checked dtypes (float32), shapes ([N, 4], [N], N <= 65536), contiguity
// and the device, and set the device; the 16-byte alignment of the boxes is checked here.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sort.h>

#include <tuple>

#include "../nms/nms.h"
#include "binding_utils.h"

namespace sk::impl {

// torchvision.ops.nms(boxes, scores, iou_threshold): indices of the kept boxes (int64) by
// decreasing score. How many are kept is known only on the device, so the call waits for that
// number (as torchvision's does).
at::Tensor nms(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  const int64_t n = boxes.size(0);  // <= kNmsMaxBoxes: the table's requirement
  const auto longs = boxes.options().dtype(at::kLong);
  if (n == 0) return at::empty({0}, longs);
  // The sort torchvision makes (the same call, so equal scores come out in the same order).
  const at::Tensor order = std::get<1>(scores.sort(0, /*descending=*/true));
  const at::Tensor mask = at::empty({n * nms_words(n)}, longs);
  at::Tensor keep = at::empty({n}, longs);
  const at::Tensor count = at::empty({1}, longs);
  SK_CHECK_VALUE(reinterpret_cast<uintptr_t>(boxes.data_ptr()) % 16 == 0,
                    "solbench_kernels::nms: boxes must be 16-byte aligned (a fresh tensor is)");
  const NmsArgs a{boxes.data_ptr<float>(),
                  order.data_ptr<int64_t>(),
                  n,
                  static_cast<float>(iou_threshold),
                  reinterpret_cast<unsigned long long*>(mask.data_ptr<int64_t>()),
                  keep.data_ptr<int64_t>(),
                  count.data_ptr<int64_t>()};
  sk::bind::check_launch(launch_nms(a, sk::bind::current_stream()), "nms");
  return keep.narrow(0, 0, count.item<int64_t>());
}

}  // namespace sk::impl
