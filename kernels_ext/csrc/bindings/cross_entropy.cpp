// Hand-written implementations of the `impl: custom` cross-entropy ops (op table:
// csrc/cross_entropy/ops.yaml). The generated wrappers have checked dtypes, shapes ([N, V],
// [N], V > 0), contiguity and devices and set the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "../cross_entropy/cross_entropy.h"
#include "binding_utils.h"

namespace sk::impl {
namespace {

// The counters launch_cross_entropy needs zero on entry and leaves zero (cross_entropy.h). Launches
// on one stream never overlap, so one buffer per device and stream, zeroed once at its first call,
// serves them all: a fill per call would be a second launch, which is what the mean must not cost.
// A capture gets a zeroed buffer of its own each call instead (the graph replays the fill): a
// buffer zeroed inside a capture is zero only once the graph runs, so it cannot serve eager calls,
// and a cached one could be in use by eager calls while the graph replays on another stream.
at::Tensor counters(const at::Tensor& like, cudaStream_t stream) {
  const int64_t bytes = cross_entropy_counter_bytes();
  const auto opts = like.options().dtype(at::kByte);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; treat an unknown status as a capture
    capture = cudaStreamCaptureStatusActive;
  }
  if (capture != cudaStreamCaptureStatusNone) return at::zeros({bytes}, opts);
  static std::mutex mutex;
  static auto* cache = new std::map<std::pair<int, cudaStream_t>, at::Tensor>();  // never freed
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& buffer = (*cache)[{like.get_device(), stream}];
  if (!buffer.defined() || buffer.numel() < bytes) buffer = at::zeros({bytes}, opts);
  return buffer;
}

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
  at::Tensor ws;  // most shapes need none
  if (ws_bytes > 0) ws = at::empty({ws_bytes}, logits.options().dtype(at::kByte));
  const cudaStream_t stream = sk::bind::current_stream();
  const at::Tensor cnt = counters(logits, stream);
  sk::bind::check_launch(
      launch_cross_entropy(a, ws_bytes > 0 ? ws.data_ptr() : nullptr, cnt.data_ptr(), stream), op);
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
