// Hand-written implementations of the `impl: custom` fp8 ops (op table: csrc/quant/ops.yaml).
// The generated wrappers have checked dtypes, shapes, the scale's size, contiguity and devices
// and set the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <tuple>

#include "../quant/quant.h"
#include "binding_utils.h"

namespace sk::impl {
namespace {

at::TensorOptions fp8_options(const at::Tensor& x) { return x.options().dtype(at::kFloat8_e4m3fn); }

uint8_t* bytes_of(const at::Tensor& q) { return static_cast<uint8_t*>(q.data_ptr()); }
const uint8_t* const_bytes_of(const at::Tensor& q) { return static_cast<const uint8_t*>(q.const_data_ptr()); }

}  // namespace

at::Tensor fp8_quant(const at::Tensor& x, const at::Tensor& scale) {
  at::Tensor q = at::empty(x.sizes(), fp8_options(x));
  if (x.numel() == 0) return q;
  sk::bind::check_launch(launch_fp8_quant(sk::bind::dtype_of(x, "fp8_quant", "x"), x.data_ptr(),
                                          scale.data_ptr<float>(), bytes_of(q), x.numel(),
                                          sk::bind::current_stream()),
                         "fp8_quant");
  return q;
}

std::tuple<at::Tensor, at::Tensor> fp8_quant_dynamic(const at::Tensor& x) {
  at::Tensor q = at::empty(x.sizes(), fp8_options(x));
  at::Tensor scale = at::empty({}, x.options().dtype(at::kFloat));
  const at::Tensor amax_bits = at::zeros({1}, x.options().dtype(at::kInt));
  sk::bind::check_launch(
      launch_fp8_quant_dynamic(sk::bind::dtype_of(x, "fp8_quant_dynamic", "x"), x.data_ptr(), bytes_of(q),
                               scale.data_ptr<float>(), reinterpret_cast<unsigned*>(amax_bits.data_ptr<int>()),
                               x.numel(), sk::bind::current_stream()),
      "fp8_quant_dynamic");
  return {q, scale};
}

std::tuple<at::Tensor, at::Tensor> fp8_quant_rows(const at::Tensor& x) {
  at::Tensor q = at::empty(x.sizes(), fp8_options(x));
  at::Tensor scales = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
  if (x.numel() == 0) return {q, scales};
  const int64_t cols = x.size(-1);
  sk::bind::check_launch(launch_fp8_quant_rows(sk::bind::dtype_of(x, "fp8_quant_rows", "x"), x.data_ptr(),
                                               bytes_of(q), scales.data_ptr<float>(), x.numel() / cols, cols,
                                               sk::bind::current_stream()),
                         "fp8_quant_rows");
  return {q, scales};
}

at::Tensor fp8_dequant(const at::Tensor& q, const at::Tensor& scale) {
  at::Tensor y = at::empty(q.sizes(), q.options().dtype(at::kBFloat16));
  if (q.numel() == 0) return y;
  const int64_t cols = q.size(-1);
  // One scale: per tensor (also when q has a single row); otherwise one per row (the table
  // checked that there are as many as rows).
  const bool per_row = scale.numel() != 1;
  sk::bind::check_launch(launch_fp8_dequant(DType::kBFloat16, const_bytes_of(q), scale.data_ptr<float>(), per_row,
                                            y.data_ptr(), q.numel() / cols, cols, sk::bind::current_stream()),
                         "fp8_dequant");
  return y;
}

}  // namespace sk::impl
