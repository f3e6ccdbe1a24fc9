// Hand-written implementation of the `impl: custom` embedding op (op table:
// csrc/embedding/ops.yaml). The generated wrapper has checked dtypes, shapes and devices.
//
// Indices are checked on the device: an index outside [0, V) is never read through (its output
// row is NaN). With check=true (the default) a bad index raises IndexError naming one, and the
// call waits for the device to say whether there is one: the price of an error raised at the
// call, since the indices live on the device. check=false skips the wait (CUDA graphs, hot
// loops): bad indices then only show as NaN rows. Two ways to wait (check_order):
//   before (default): a pass over the indices alone, its per-block counts written into pinned
//           memory, then the gather; the host waits only for the counts, while the gather runs
//           (278.8 us against after's 304.5 at 65536 x 4096 bf16 on the H200, results/h200/issue15/,
//           when the counts still went through a copy on the stream).
//   after:  the gather records bad indices in a two-word status, copied to the host after it;
//           the call waits for the whole gather, and the device idles until the host's next launch.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <vector>

#include "../embedding/embedding.h"
#include "binding_utils.h"

namespace sk::impl {
namespace {

// IndexError naming one of `count` bad indices: the one at `last_bad - 1`.
void raise_bad_index(const at::Tensor& table, const at::Tensor& indices, int64_t count,
                                  int64_t last_bad) {
  const int64_t pos = last_bad - 1;
  const int64_t value = indices.reshape({-1})[pos].item<int64_t>();
  SK_CHECK_INDEX(false, "solbench_kernels::embedding: ", count, " of ", indices.numel(),
                 " indices are out of range for a table of ", table.size(0), " rows, e.g. indices.flatten()[",
                 pos, "] = ", value);
}

// check_order "before": the index pass, queued ahead of the gather, writing its counts into `host`;
// the returned event completes when they are there. Pinned memory is mapped into the device's
// address space (UVA), so the pass writes straight into it and the gather follows the pass at once;
// where it is not mapped, the counts go to `partials` on the device and a copy follows on the
// stream, which holds the gather back by the copy's latency.
cudaEvent_t queue_index_check(const at::Tensor& indices, int64_t vocab, const at::Tensor& host, cudaStream_t stream) {
  void* mapped = nullptr;
  const bool direct = cudaHostGetDevicePointer(&mapped, host.data_ptr(), 0) == cudaSuccess;
  if (!direct) (void)cudaGetLastError();   // not sticky: clear it so later launches report their own
  at::Tensor partials = direct ? at::Tensor() : at::empty(host.sizes(), indices.options());
  int64_t* counts = direct ? static_cast<int64_t*>(mapped) : partials.data_ptr<int64_t>();
  sk::bind::check_launch(launch_index_check(indices.data_ptr<int64_t>(), indices.numel(), vocab, counts,
                                            static_cast<int>(host.size(0)), stream),
                         "embedding");
  if (!direct) {
    sk::bind::check_launch(cudaMemcpyAsync(host.data_ptr(), partials.data_ptr(), partials.nbytes(),
                                           cudaMemcpyDeviceToHost, stream),
                           "embedding");
  }
  cudaEvent_t copied = nullptr;
  sk::bind::check_launch(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), "embedding");
  const cudaError_t recorded = cudaEventRecord(copied, stream);
  if (recorded != cudaSuccess) cudaEventDestroy(copied);
  sk::bind::check_launch(recorded, "embedding");
  return copied;
}

}  // namespace

at::Tensor embedding(const at::Tensor& table, const at::Tensor& indices, bool check, c10::string_view check_order,
                     int64_t units) {
  SK_CHECK_VALUE(table.stride(1) == 1 || table.size(1) <= 1,
                    "solbench_kernels::embedding: table rows must be contiguous (stride ", table.stride(1), ")");
  std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end());
  shape.push_back(table.size(1));
  at::Tensor out = at::empty(shape, table.options());
  if (out.numel() == 0) return out;
  const bool before = check && check_order == "before";
  const bool after = check && !before;
  const cudaStream_t stream = sk::bind::current_stream();
  at::Tensor status, host;
  cudaEvent_t copied = nullptr;
  if (after) status = at::zeros({2}, indices.options());
  if (before) {
    const int blocks = index_check_blocks(indices.numel());
    host = at::empty({blocks, 2}, indices.options().device(at::kCPU).pinned_memory(true));
    copied = queue_index_check(indices, table.size(0), host, stream);
  }
  const EmbeddingArgs a{sk::bind::dtype_of(table, "embedding", "table"),
                        table.data_ptr(),
                        indices.data_ptr<int64_t>(),
                        out.data_ptr(),
                        indices.numel(),
                        table.size(0),
                        table.size(1),
                        table.stride(0),
                        after ? reinterpret_cast<unsigned long long*>(status.data_ptr<int64_t>()) : nullptr,
                        static_cast<int>(units)};
  const cudaError_t launched = launch_embedding(a, stream);
  if (before) {
    // The gather is queued behind the pass: waiting for the pass's counts leaves the device busy.
    const cudaError_t waited = cudaEventSynchronize(copied);
    cudaEventDestroy(copied);
    sk::bind::check_launch(launched, "embedding");
    sk::bind::check_launch(waited, "embedding");
    const int64_t* counts = host.data_ptr<int64_t>();
    int64_t count = 0, last_bad = 0;
    for (int64_t b = 0; b < host.size(0); ++b) {
      count += counts[2 * b];
      last_bad = std::max(last_bad, counts[2 * b + 1]);
    }
    if (last_bad != 0) raise_bad_index(table, indices, count, last_bad);
    return out;
  }
  sk::bind::check_launch(launched, "embedding");
  if (after) {
    const at::Tensor got = status.cpu();  // waits for the kernel
    const int64_t last_bad = got.data_ptr<int64_t>()[0];
    if (last_bad != 0) raise_bad_index(table, indices, got.data_ptr<int64_t>()[1], last_bad);
  }
  return out;
}

}  // namespace sk::impl
