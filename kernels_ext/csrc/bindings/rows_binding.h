// The generic binding of `impl: rows` ops: the first tensor argument is viewed as rows x
// cols (cols = its last dim); the launcher gets every tensor argument and every output
// (allocated by the generated wrapper from the table's output rules) in a RowsIO. The op
// table's checks have run: shapes, dtypes, contiguity, one CUDA device, cols <= 2^31 - 1.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/accumulate.h>

#include <array>

#include "../common/op_io.h"
#include "binding_utils.h"

namespace sk::bind {

template <int NIN, int NOUT, class Launch>
void run_rows(const char* op, const std::array<const at::Tensor*, NIN>& in,
              const std::array<at::Tensor*, NOUT>& out, Launch&& launch) {
  bool empty = true;
  for (const at::Tensor* o : out) empty = empty && o->numel() == 0;
  if (empty) return;
  const at::Tensor& first = *in[0];
  RowsIO<NIN, NOUT> io{};
  io.dtype = dtype_of(first, op, "the first input");
  for (int k = 0; k < NIN; ++k) io.in[k] = in[k] != nullptr ? in[k]->data_ptr() : nullptr;
  for (int k = 0; k < NOUT; ++k) io.out[k] = out[k]->data_ptr();
  io.cols = first.size(-1);
  io.rows = c10::multiply_integers(first.sizes().slice(0, first.dim() - 1));
  check_launch(launch(io, current_stream()), op);
}

}  // namespace sk::bind
