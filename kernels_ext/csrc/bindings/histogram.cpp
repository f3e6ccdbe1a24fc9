// Hand-written implementation of histogram (its op table entry waits for output shapes that
// depend on an int argument: kernels_ext/pending/families.yaml). Checks its own inputs.
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>

#include "../histogram/histogram.h"
#include "binding_utils.h"

namespace sk::impl {

// counts[b] = number of elements of x equal to b for b in [0, bins); other values are ignored:
// torch.bincount(x, minlength=bins) when every value is in range. x: uint8 or int32, contiguous.
at::Tensor histogram(const at::Tensor& x, int64_t bins) {
  TORCH_CHECK_VALUE(x.is_cuda(), "solbench_kernels::histogram: x is on ", x.device(), "; a CUDA tensor is required");
  TORCH_CHECK_VALUE(x.is_contiguous(), "solbench_kernels::histogram: x must be contiguous (call .contiguous() first)");
  IntType type = IntType::kInt32;
  if (x.scalar_type() == at::kByte) {
    type = IntType::kUInt8;
  } else {
    TORCH_CHECK_TYPE(x.scalar_type() == at::kInt, "solbench_kernels::histogram: x has dtype ",
                     sk::bind::dtype_name(x), "; supported: uint8, int32");
  }
  TORCH_CHECK_VALUE(bins >= 1 && bins <= kHistogramMaxBins, "solbench_kernels::histogram: bins must be in [1, ",
                    kHistogramMaxBins, "], got ", bins);
  at::Tensor counts = at::zeros({bins}, x.options().dtype(at::kLong));
  if (x.numel() == 0) return counts;
  const HistogramArgs a{type, x.data_ptr(), x.numel(), static_cast<int>(bins), counts.data_ptr<int64_t>()};
  sk::bind::check_launch(launch_histogram(a, sk::bind::current_stream()), "histogram");
  return counts;
}

}  // namespace sk::impl
