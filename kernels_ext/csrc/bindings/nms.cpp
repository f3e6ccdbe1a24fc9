// Hand-written implementation of nms (its op table entry waits for a data-dependent output
// size: kernels_ext/pending/families.yaml). Checks its own inputs.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sort.h>
#include <c10/cuda/CUDAGuard.h>

#include <tuple>

#include "../nms/nms.h"
#include "binding_utils.h"

namespace sk::impl {

// torchvision.ops.nms(boxes, scores, iou_threshold): indices of the kept boxes (int64) by
// decreasing score. How many are kept is known only on the device, so the call waits for that
// number (as torchvision's does).
at::Tensor nms(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  TORCH_CHECK_TYPE(boxes.scalar_type() == at::kFloat && scores.scalar_type() == at::kFloat,
                   "solbench_kernels::nms: boxes and scores must be float32, got ", sk::bind::dtype_name(boxes),
                   " and ", sk::bind::dtype_name(scores));
  TORCH_CHECK_VALUE(boxes.dim() == 2 && boxes.size(1) == 4,
                    "solbench_kernels::nms: boxes must be [N, 4] (x1, y1, x2, y2), got shape ", boxes.sizes());
  TORCH_CHECK_VALUE(scores.dim() == 1 && scores.size(0) == boxes.size(0), "solbench_kernels::nms: scores must be [",
                    boxes.size(0), "], got shape ", scores.sizes());
  TORCH_CHECK_VALUE(boxes.is_contiguous() && scores.is_contiguous(),
                    "solbench_kernels::nms: boxes and scores must be contiguous (call .contiguous() first)");
  TORCH_CHECK_VALUE(boxes.is_cuda() && scores.device() == boxes.device(), "solbench_kernels::nms: boxes (",
                    boxes.device(), ") and scores (", scores.device(), ") must be on one CUDA device");
  const int64_t n = boxes.size(0);
  TORCH_CHECK_VALUE(n <= kNmsMaxBoxes, "solbench_kernels::nms: at most ", kNmsMaxBoxes, " boxes, got ", n);
  const auto longs = boxes.options().dtype(at::kLong);
  if (n == 0) return at::empty({0}, longs);
  const c10::cuda::CUDAGuard guard(boxes.device());
  // The sort torchvision makes (the same call, so equal scores come out in the same order).
  const at::Tensor order = std::get<1>(scores.sort(0, /*descending=*/true));
  const at::Tensor mask = at::empty({n * nms_words(n)}, longs);
  at::Tensor keep = at::empty({n}, longs);
  const at::Tensor count = at::empty({1}, longs);
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(boxes.data_ptr()) % 16 == 0,
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
