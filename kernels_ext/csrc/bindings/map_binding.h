// The generic binding of `impl: map` ops: allocate the output like the first input, hand
// the launcher a MapIO, report its error. The generated wrapper has already run the op
// table's checks (one shape, one dtype, contiguous, one CUDA device) and set the device.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <array>

#include "../common/op_io.h"
#include "binding_utils.h"

namespace sk::bind {

template <int NIN, class Launch>
at::Tensor run_map(const char* op, const std::array<const at::Tensor*, NIN>& in,
                   Launch&& launch) {
  const at::Tensor& first = *in[0];
  at::Tensor out = at::empty(first.sizes(), first.options());
  if (out.numel() == 0) return out;
  MapIO<NIN> io{};
  io.dtype = dtype_of(first, op, "the first input");
  for (int k = 0; k < NIN; ++k) io.in[k] = in[k]->data_ptr();
  io.out = out.data_ptr();
  io.n = out.numel();
  check_launch(launch(io, current_stream()), op);
  return out;
}

}  // namespace sk::bind
