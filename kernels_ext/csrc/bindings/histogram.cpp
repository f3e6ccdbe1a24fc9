// Hand-written implementation of the `impl: custom` histogram op (op table:
// csrc/histogram/ops.yaml). The generated wrapper has checked the dtype (uint8, int32), the
// contiguity, bins in [1, 8192] and the device, and set the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>

#include "../histogram/histogram.h"
#include "binding_utils.h"

namespace sk::impl {

// counts[b] = number of elements of x equal to b for b in [0, bins); other values are ignored:
// torch.bincount(x, minlength=bins) when every value is in range.
at::Tensor histogram(const at::Tensor& x, int64_t bins) {
  at::Tensor counts = at::zeros({bins}, x.options().dtype(at::kLong));
  if (x.numel() == 0) return counts;
  const IntType type = x.scalar_type() == at::kByte ? IntType::kUInt8 : IntType::kInt32;
  const HistogramArgs a{type, x.data_ptr(), x.numel(), static_cast<int>(bins), counts.data_ptr<int64_t>()};
  sk::bind::check_launch(launch_histogram(a, sk::bind::current_stream()), "histogram");
  return counts;
}

}  // namespace sk::impl
