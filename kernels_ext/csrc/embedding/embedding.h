// Embedding gather: launcher (plain C++).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../common/dtype.h"

namespace sk {

// out[i, :] = table[indices[i], :] for n int64 indices into a table of `vocab` rows of `dim`
// elements (row stride `table_stride` elements, the row contiguous); out is contiguous [n, dim].
// An index outside [0, vocab) is never read through: its output row is filled with NaN and, when
// `status` is not null, recorded there: status[0] = 1 + the largest bad position, status[1] = the
// number of bad indices (the caller zeroes status before the launch).
struct EmbeddingArgs {
  DType dtype;
  const void* table;
  const int64_t* indices;
  void* out;
  int64_t n;
  int64_t vocab;
  int64_t dim;
  int64_t table_stride;
  unsigned long long* status;
  int units = 0;  // 16-byte units a thread moves (1, 2 or 4); 0: by the size (embedding.cu)
};

cudaError_t launch_embedding(const EmbeddingArgs& args, cudaStream_t stream);

// The indices alone, checked against [0, vocab) by `index_check_blocks(n)` blocks, each writing
// partials[2 * block] = its bad indices' count and partials[2 * block + 1] = 1 + the largest
// bad position among them (0: none); nothing needs zeroing first. For check_order "before".
int index_check_blocks(int64_t n);
cudaError_t launch_index_check(const int64_t* indices, int64_t n, int64_t vocab, int64_t* partials,
                               int blocks, cudaStream_t stream);

}  // namespace sk
