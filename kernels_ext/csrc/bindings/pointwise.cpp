// CUDA implementations of the elementwise and activation ops.
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "../activation/activation.h"
#include "../elementwise/elementwise.h"
#include "binding_utils.h"

namespace sk::bind {
namespace {

at::Tensor binary(const at::Tensor& a, const at::Tensor& b, BinaryOp op, const char* name) {
  check_cuda_contiguous(a, name, "a");
  const DType dt = dtype_of(a, name, "a");
  check_like(a, b, name, "b", true);
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty_like(a);
  check_launch(launch_binary(op, dt, a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(),
                             current_stream()),
               name);
  return out;
}

at::Tensor unary(const at::Tensor& x, Activation act, const char* name) {
  check_cuda_contiguous(x, name, "x");
  const DType dt = dtype_of(x, name, "x");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  check_launch(launch_activation(act, dt, x.data_ptr(), y.data_ptr(), x.numel(), current_stream()),
               name);
  return y;
}

at::Tensor add(const at::Tensor& a, const at::Tensor& b) { return binary(a, b, BinaryOp::kAdd, "add"); }
at::Tensor mul(const at::Tensor& a, const at::Tensor& b) { return binary(a, b, BinaryOp::kMul, "mul"); }
at::Tensor relu(const at::Tensor& x) { return unary(x, Activation::kRelu, "relu"); }
at::Tensor silu(const at::Tensor& x) { return unary(x, Activation::kSilu, "silu"); }
at::Tensor sigmoid(const at::Tensor& x) { return unary(x, Activation::kSigmoid, "sigmoid"); }

at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
  if (approximate == "none") return unary(x, Activation::kGeluErf, "gelu");
  if (approximate == "tanh") return unary(x, Activation::kGeluTanh, "gelu");
  TORCH_CHECK_VALUE(false, "solbench_kernels::gelu: approximate must be 'none' or 'tanh', got '",
                    std::string(approximate), "'");
  return x;  // unreachable
}

at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b) {
  check_cuda_contiguous(a, "swiglu", "a");
  const DType dt = dtype_of(a, "swiglu", "a");
  check_like(a, b, "swiglu", "b", true);
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty_like(a);
  check_launch(launch_swiglu(dt, a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(),
                             current_stream()),
               "swiglu");
  return out;
}

}  // namespace
}  // namespace sk::bind

TORCH_LIBRARY_IMPL(solbench_kernels, CUDA, m) {
  m.impl("add", &sk::bind::add);
  m.impl("mul", &sk::bind::mul);
  m.impl("relu", &sk::bind::relu);
  m.impl("gelu", &sk::bind::gelu);
  m.impl("silu", &sk::bind::silu);
  m.impl("sigmoid", &sk::bind::sigmoid);
  m.impl("swiglu", &sk::bind::swiglu);
}
