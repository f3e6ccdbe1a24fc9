// Hand-written implementation of the `impl: custom` embedding op (op table:
// csrc/embedding/ops.yaml). The generated wrapper has checked dtypes, shapes and devices.
//
// Indices are checked on the device: an index outside [0, V) is never read through (its output
// row is NaN) and is recorded in a two-word status the kernel writes. With check=true (the
// default) the status is copied to the host after the kernel and a bad index raises IndexError
// naming one. That copy waits for the kernel, a synchronisation per call: the price of an error
// raised at the call, since the indices live on the device and no check that raises can avoid
// it. check=false skips the copy and the wait (CUDA graphs, hot loops): bad indices then only show
// as NaN rows.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <vector>

#include "../embedding/embedding.h"
#include "binding_utils.h"

namespace sk::impl {

at::Tensor embedding(const at::Tensor& table, const at::Tensor& indices, bool check) {
  SK_CHECK_VALUE(table.stride(1) == 1 || table.size(1) <= 1,
                    "solbench_kernels::embedding: table rows must be contiguous (stride ", table.stride(1), ")");
  std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end());
  shape.push_back(table.size(1));
  at::Tensor out = at::empty(shape, table.options());
  if (out.numel() == 0) return out;
  at::Tensor status;
  if (check) status = at::zeros({2}, indices.options());
  const EmbeddingArgs a{sk::bind::dtype_of(table, "embedding", "table"),
                        table.data_ptr(),
                        indices.data_ptr<int64_t>(),
                        out.data_ptr(),
                        indices.numel(),
                        table.size(0),
                        table.size(1),
                        table.stride(0),
                        check ? reinterpret_cast<unsigned long long*>(status.data_ptr<int64_t>()) : nullptr};
  sk::bind::check_launch(launch_embedding(a, sk::bind::current_stream()), "embedding");
  if (check) {
    const at::Tensor host = status.cpu();  // waits for the kernel
    const int64_t last_bad = host.data_ptr<int64_t>()[0];
    if (last_bad != 0) {
      const int64_t pos = last_bad - 1;
      const int64_t value = indices.reshape({-1})[pos].item<int64_t>();
      SK_CHECK_INDEX(false, "solbench_kernels::embedding: ", host.data_ptr<int64_t>()[1], " of ",
                        indices.numel(), " indices are out of range for a table of ", table.size(0),
                        " rows, e.g. indices.flatten()[", pos, "] = ", value);
    }
  }
  return out;
}

}  // namespace sk::impl
