// Hand-written implementations of the `impl: custom` rope ops (op table: csrc/rope/ops.yaml).
// The generated wrappers have checked dtypes, shapes ([T, H, D], [T, KH, D], [T, D], D even) and
// devices and set the device; what the table cannot say is checked here: the last dims must be
// contiguous (the other strides are free) and, in place, no two elements may share memory.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <tuple>

#include "../rope/rope.h"
#include "binding_utils.h"

namespace sk::impl {
namespace {

void check_rows(const at::Tensor& t, const char* op, const char* name) {
  SK_CHECK_VALUE(t.stride(-1) == 1 || t.size(-1) <= 1, "solbench_kernels::", op, ": ", name,
                    " must be contiguous in its last dim (stride ", t.stride(-1), ")");
}

void run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos_sin, const at::Tensor& q_out,
         const at::Tensor& k_out, bool neox, const char* op) {
  check_rows(q, op, "q");
  check_rows(k, op, "k");
  check_rows(cos_sin, op, "cos_sin");
  if (q.numel() == 0 && k.numel() == 0) return;
  SK_CHECK_VALUE(q.size(1) + k.size(1) < (int64_t{1} << 24), "solbench_kernels::", op,
                    ": too many heads (", q.size(1), " + ", k.size(1), ")");
  RopeArgs a{};
  a.dtype = sk::bind::dtype_of(q, op, "q");
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.cos_sin = cos_sin.data_ptr();
  a.q_out = q_out.data_ptr();
  a.k_out = k_out.data_ptr();
  a.tokens = q.size(0);
  a.heads = static_cast<int>(q.size(1));
  a.kv_heads = static_cast<int>(k.size(1));
  a.head_dim = static_cast<int>(q.size(2));
  // A dim of size 1 is never stepped over: its stride (whatever a view left there) reads as 0,
  // so it cannot turn the vectorised kernel off.
  auto stride = [](const at::Tensor& t, int d) { return t.size(d) == 1 ? int64_t{0} : t.stride(d); };
  a.q_stride[0] = stride(q, 0), a.q_stride[1] = stride(q, 1);
  a.k_stride[0] = stride(k, 0), a.k_stride[1] = stride(k, 1);
  a.q_out_stride[0] = stride(q_out, 0), a.q_out_stride[1] = stride(q_out, 1);
  a.k_out_stride[0] = stride(k_out, 0), a.k_out_stride[1] = stride(k_out, 1);
  a.cos_sin_stride = stride(cos_sin, 0);
  a.neox = neox;
  sk::bind::check_launch(launch_rope(a, sk::bind::current_stream()), op);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos_sin,
                                        bool neox) {
  at::Tensor q_out = at::empty(q.sizes(), q.options());
  at::Tensor k_out = at::empty(k.sizes(), k.options());
  run(q, k, cos_sin, q_out, k_out, neox, "rope");
  return {q_out, k_out};
}

void rope_inplace(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos_sin, bool neox) {
  // Each element is read and then written by one thread: safe only when no two elements share
  // memory (an expanded view would be turned twice) and the cache is not overwritten.
  at::assert_no_internal_overlap(q);
  at::assert_no_internal_overlap(k);
  at::assert_no_overlap(q, k);
  at::assert_no_overlap(q, cos_sin);
  at::assert_no_overlap(k, cos_sin);
  run(q, k, cos_sin, q, k, neox, "rope_inplace");
}

}  // namespace sk::impl
