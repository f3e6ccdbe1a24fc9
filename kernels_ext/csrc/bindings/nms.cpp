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
namespace {

// The mask and the scan for one score order; status[0] becomes the number kept.
void suppress(const at::Tensor& boxes, const at::Tensor& order, double iou_threshold, const at::Tensor& mask,
              const at::Tensor& keep, const at::Tensor& status) {
  const NmsArgs a{boxes.data_ptr<float>(),
                  order.data_ptr<int64_t>(),
                  boxes.size(0),
                  static_cast<float>(iou_threshold),
                  reinterpret_cast<unsigned long long*>(mask.data_ptr<int64_t>()),
                  keep.data_ptr<int64_t>(),
                  status.data_ptr<int64_t>()};
  sk::bind::check_launch(launch_nms(a, sk::bind::current_stream()), "nms");
}

}  // namespace

at::Tensor nms(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  const int64_t n = boxes.size(0);  // <= kNmsMaxBoxes: the table's requirement
  const auto longs = boxes.options().dtype(at::kLong);
  if (n == 0) return at::empty({0}, longs);
  SK_CHECK_VALUE(reinterpret_cast<uintptr_t>(boxes.data_ptr()) % 16 == 0,
                    "solbench_kernels::nms: boxes must be 16-byte aligned (a fresh tensor is)");
  const at::Tensor mask = at::empty({n * nms_words(n)}, longs);
  at::Tensor keep = at::empty({n}, longs);
  // status: [0] the number kept, [1] whether two scores are equal (the ranking's order is then not
  // necessarily torch's), read in the one wait the call makes anyway.
  const at::Tensor status = at::empty({2}, longs);
  if (n <= kNmsRankSortMax) {
    // One ranking launch instead of torch's sort (whose several launches took more host time than
    // the whole scan at 5,000 boxes on the H200).
    const at::Tensor order = at::empty({n}, longs);
    sk::bind::check_launch(launch_nms_order(scores.data_ptr<float>(), n, order.data_ptr<int64_t>(),
                                            status.data_ptr<int64_t>() + 1, sk::bind::current_stream()),
                           "nms");
    suppress(boxes, order, iou_threshold, mask, keep, status);
    const at::Tensor got = status.cpu();  // waits for the scan
    if (got.data_ptr<int64_t>()[1] == 0) return keep.narrow(0, 0, got.data_ptr<int64_t>()[0]);
  }
  // Equal scores, or many boxes: torchvision's own sort (the same call, so equal scores come out in
  // the same order).
  const at::Tensor order = std::get<1>(scores.sort(0, /*descending=*/true));
  suppress(boxes, order, iou_threshold, mask, keep, status);
  return keep.narrow(0, 0, status[0].item<int64_t>());
}

}  // namespace sk::impl
