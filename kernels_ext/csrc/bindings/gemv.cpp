// Hand-written implementation of the `impl: custom` gemv op (op table: csrc/gemv/ops.yaml).
// The generated wrapper has checked dtypes, shapes ([M, K], [*B, K] of rank <= 2), x's
// contiguity and the devices, and set the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "../gemv/gemv.h"
#include "binding_utils.h"

namespace sk::impl {

at::Tensor gemv(const at::Tensor& a, const at::Tensor& x) {
  TORCH_CHECK_VALUE(a.stride(1) == 1 || a.size(1) <= 1, "solbench_kernels::gemv: rows of a must be contiguous (stride ",
                    a.stride(1), ")");
  const bool vector = x.dim() == 1;
  const int64_t batch = vector ? 1 : x.size(0);
  at::Tensor y = vector ? at::empty({a.size(0)}, a.options()) : at::empty({batch, a.size(0)}, a.options());
  if (y.numel() == 0) return y;
  if (a.size(1) == 0) return y.zero_();  // empty dot products
  const GemvArgs g{sk::bind::dtype_of(a, "gemv", "a"), a.data_ptr(), x.data_ptr(), y.data_ptr(), a.size(0),
                   a.size(1), batch, a.stride(0), a.size(1)};
  sk::bind::check_launch(launch_gemv(g, sk::bind::current_stream()), "gemv");
  return y;
}

}  // namespace sk::impl
