// Hand-written implementation of the `impl: custom` gemv op (op table: csrc/gemv/ops.yaml).
// The generated wrapper has checked dtypes, shapes ([M, K], [*B, K] of rank <= 2), x's
// contiguity, the variant's name and the devices, and set the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "../gemv/gemv.h"
#include "binding_utils.h"

namespace sk::impl {

at::Tensor gemv(const at::Tensor& a, const at::Tensor& x, c10::string_view variant) {
  SK_CHECK_VALUE(a.stride(1) == 1 || a.size(1) <= 1, "solbench_kernels::gemv: rows of a must be contiguous (stride ",
                    a.stride(1), ")");
  const bool vector = x.dim() == 1;
  const int64_t batch = vector ? 1 : x.size(0);
  at::Tensor y = vector ? at::empty({a.size(0)}, a.options()) : at::empty({batch, a.size(0)}, a.options());
  if (y.numel() == 0) return y;
  if (a.size(1) == 0) return y.zero_();  // empty dot products
  const GemvArgs g{sk::bind::dtype_of(a, "gemv", "a"), a.data_ptr(), x.data_ptr(), y.data_ptr(), a.size(0),
                   a.size(1), batch, a.stride(0), a.size(1)};
  // auto: the CUDA-core kernel, the variant measured on the H200 (results/h200/dev/families_v1.*);
  // mma is selected by name until a run shows where it is faster.
  // mma where its layout conditions hold, else the CUDA-core kernel (as the table's doc says).
  const bool mma = variant == "mma" && gemv_mma_supports(g);
  sk::bind::check_launch(mma ? launch_gemv_mma(g, sk::bind::current_stream()) : launch_gemv(g, sk::bind::current_stream()),
                         "gemv");
  return y;
}

}  // namespace sk::impl
