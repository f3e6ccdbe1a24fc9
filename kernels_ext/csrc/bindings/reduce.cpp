// Hand-written implementations of the `impl: custom` reduction ops (op table:
// csrc/reduce/ops.yaml). The generated wrappers have checked the inputs (dtype,
// contiguity, CUDA, max_all: not empty) and set the device before calling these.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "../reduce/reduce.h"
#include "binding_utils.h"

namespace sk::impl {
namespace {

at::Tensor reduce_all(const at::Tensor& x, ReduceOp op, const char* name) {
  at::Tensor out = at::empty({}, x.options());
  if (x.numel() == 0) return out.zero_();  // the sum of nothing; max_all refuses empty input
  at::Tensor workspace = at::empty({kReduceAllMaxPartials}, x.options().dtype(at::kFloat));
  sk::bind::check_launch(
      launch_reduce_all(op, sk::bind::dtype_of(x, name, "x"), x.data_ptr(), out.data_ptr(),
                        workspace.data_ptr<float>(), x.numel(), sk::bind::current_stream()),
      name);
  return out;
}

}  // namespace

at::Tensor sum_all(const at::Tensor& x) {
  return reduce_all(x, ReduceOp::kSum, "sum_all");
}

at::Tensor max_all(const at::Tensor& x) {
  return reduce_all(x, ReduceOp::kMax, "max_all");
}

}  // namespace sk::impl
