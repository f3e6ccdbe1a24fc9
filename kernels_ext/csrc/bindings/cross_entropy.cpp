// Hand-written implementations of the `impl: custom` cross-entropy ops (op table:
// csrc/cross_entropy/ops.yaml). The generated wrappers have checked dtypes, shapes ([N, V],
// [N], V > 0), contiguity and devices and set the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <cmath>

#include "../cross_entropy/cross_entropy.h"
#include "binding_utils.h"

namespace sk::impl {
namespace {

at::Tensor run(const at::Tensor& logits, const at::Tensor& target, int64_t ignore_index, Reduction red,
               const char* op) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const auto fp32 = logits.options().dtype(at::kFloat);
  if (rows == 0) {  // the mean of nothing is NaN, like PyTorch's
    if (red == Reduction::kNone) return at::empty({0}, fp32);
    return at::full({}, red == Reduction::kMean ? NAN : 0.0, fp32);
  }
  at::Tensor out = red == Reduction::kNone ? at::empty({rows}, fp32) : at::empty({}, fp32);
  const CrossEntropyArgs a{sk::bind::dtype_of(logits, op, "logits"),
                           logits.data_ptr(),
                           target.data_ptr<int64_t>(),
                           out.data_ptr<float>(),
                           rows,
                           vocab,
                           ignore_index,
                           red};
  const int64_t ws_bytes = cross_entropy_workspace_bytes(a);
  const at::Tensor ws = at::empty({ws_bytes > 0 ? ws_bytes : 1}, logits.options().dtype(at::kByte));
  sk::bind::check_launch(launch_cross_entropy(a, ws.data_ptr(), sk::bind::current_stream()), op);
  return out;
}

}  // namespace

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& target, int64_t ignore_index,
                         c10::string_view reduction) {
  const Reduction red = reduction == "sum" ? Reduction::kSum : Reduction::kMean;  // choices checked
  return run(logits, target, ignore_index, red, "cross_entropy");
}

at::Tensor cross_entropy_rows(const at::Tensor& logits, const at::Tensor& target, int64_t ignore_index) {
  return run(logits, target, ignore_index, Reduction::kNone, "cross_entropy_rows");
}

}  // namespace sk::impl
