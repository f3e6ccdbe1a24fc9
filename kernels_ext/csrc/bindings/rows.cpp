// CUDA implementations of the row ops: reductions, softmax, RMSNorm, LayerNorm.
// A tensor of any shape is viewed as rows x cols with cols = its last dimension.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <tuple>

#include "../layernorm/layernorm.h"
#include "../reduce/reduce.h"
#include "../rmsnorm/rmsnorm.h"
#include "../softmax/softmax.h"
#include "binding_utils.h"

namespace sk::bind {
namespace {

struct RowShape {
  int64_t rows;
  int64_t cols;
};

RowShape row_shape(const at::Tensor& x, const char* op) {
  const int64_t cols = x.size(-1);
  TORCH_CHECK_VALUE(cols <= kMaxRowLength, "solbench_kernels::", op, ": rows of ", cols,
                    " elements are longer than the supported ", kMaxRowLength);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

at::Tensor row_reduce(const at::Tensor& x, ReduceOp op, const char* name) {
  check_row_input(x, name);
  const DType dt = dtype_of(x, name, "x");
  const RowShape s = row_shape(x, name);
  TORCH_CHECK_VALUE(s.cols > 0 || op == ReduceOp::kSum || s.rows == 0, "solbench_kernels::",
                    name, ": cannot take the max of empty rows");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes().slice(0, x.dim() - 1), x.options());
  if (out.numel() == 0) return out;
  if (s.cols == 0) return out.zero_();  // sum over empty rows
  check_launch(launch_row_reduce(op, dt, x.data_ptr(), out.data_ptr(), s.rows, s.cols,
                                 current_stream()),
               name);
  return out;
}

at::Tensor reduce_all(const at::Tensor& x, ReduceOp op, const char* name) {
  check_cuda_contiguous(x, name, "x");
  const DType dt = dtype_of(x, name, "x");
  TORCH_CHECK_VALUE(x.numel() > 0 || op == ReduceOp::kSum, "solbench_kernels::", name,
                    ": cannot take the max of an empty tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({}, x.options());
  if (x.numel() == 0) return out.zero_();
  at::Tensor workspace = at::empty({kReduceAllMaxPartials}, x.options().dtype(at::kFloat));
  check_launch(launch_reduce_all(op, dt, x.data_ptr(), out.data_ptr(),
                                 workspace.data_ptr<float>(), x.numel(), current_stream()),
               name);
  return out;
}

at::Tensor row_sum(const at::Tensor& x) { return row_reduce(x, ReduceOp::kSum, "row_sum"); }
at::Tensor row_max(const at::Tensor& x) { return row_reduce(x, ReduceOp::kMax, "row_max"); }
at::Tensor sum_all(const at::Tensor& x) { return reduce_all(x, ReduceOp::kSum, "sum_all"); }
at::Tensor max_all(const at::Tensor& x) { return reduce_all(x, ReduceOp::kMax, "max_all"); }

at::Tensor softmax(const at::Tensor& x) {
  check_row_input(x, "softmax");
  const DType dt = dtype_of(x, "softmax", "x");
  const RowShape s = row_shape(x, "softmax");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  if (y.numel() == 0) return y;
  check_launch(launch_softmax(dt, x.data_ptr(), y.data_ptr(), s.rows, s.cols, current_stream()),
               "softmax");
  return y;
}

at::Tensor rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_row_input(x, "rmsnorm");
  const DType dt = dtype_of(x, "rmsnorm", "x");
  check_row_param(x, weight, "rmsnorm", "weight");
  const RowShape s = row_shape(x, "rmsnorm");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  if (y.numel() == 0) return y;
  check_launch(launch_rmsnorm(dt, x.data_ptr(), weight.data_ptr(), y.data_ptr(), s.rows, s.cols,
                              static_cast<float>(eps), current_stream()),
               "rmsnorm");
  return y;
}

std::tuple<at::Tensor, at::Tensor> add_rmsnorm(const at::Tensor& x, const at::Tensor& residual,
                                               const at::Tensor& weight, double eps) {
  check_row_input(x, "add_rmsnorm");
  const DType dt = dtype_of(x, "add_rmsnorm", "x");
  check_like(x, residual, "add_rmsnorm", "residual", true);
  check_row_param(x, weight, "add_rmsnorm", "weight");
  const RowShape s = row_shape(x, "add_rmsnorm");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  at::Tensor h = at::empty_like(x);
  if (y.numel() == 0) return {y, h};
  check_launch(launch_add_rmsnorm(dt, x.data_ptr(), residual.data_ptr(), weight.data_ptr(),
                                  y.data_ptr(), h.data_ptr(), s.rows, s.cols,
                                  static_cast<float>(eps), current_stream()),
               "add_rmsnorm");
  return {y, h};
}

at::Tensor layernorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                     double eps) {
  check_row_input(x, "layernorm");
  const DType dt = dtype_of(x, "layernorm", "x");
  check_row_param(x, weight, "layernorm", "weight");
  check_row_param(x, bias, "layernorm", "bias");
  const RowShape s = row_shape(x, "layernorm");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  if (y.numel() == 0) return y;
  check_launch(launch_layernorm(dt, x.data_ptr(), weight.data_ptr(), bias.data_ptr(),
                                y.data_ptr(), s.rows, s.cols, static_cast<float>(eps),
                                current_stream()),
               "layernorm");
  return y;
}

}  // namespace
}  // namespace sk::bind

TORCH_LIBRARY_IMPL(solbench_kernels, CUDA, m) {
  m.impl("row_sum", &sk::bind::row_sum);
  m.impl("row_max", &sk::bind::row_max);
  m.impl("sum_all", &sk::bind::sum_all);
  m.impl("max_all", &sk::bind::max_all);
  m.impl("softmax", &sk::bind::softmax);
  m.impl("rmsnorm", &sk::bind::rmsnorm);
  m.impl("add_rmsnorm", &sk::bind::add_rmsnorm);
  m.impl("layernorm", &sk::bind::layernorm);
}
