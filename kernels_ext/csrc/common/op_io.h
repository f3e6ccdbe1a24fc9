// What the generated bindings hand to the launcher of an op table entry with
// `impl: map` or `impl: rows` (kernels_ext/codegen.py writes the calls; README.md, "The
// op table", has the launcher signatures). Plain C++: no CUDA, no PyTorch.
//
// By the time a launcher sees one of these, the table's declared checks have passed:
// dtypes, shapes, contiguity and device are what the entry says.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace sk {

// out[i] = f(in[0][i], ..., in[NIN - 1][i]) for n contiguous elements of one dtype.
template <int NIN>
struct MapIO {
  DType dtype;
  const void* in[NIN];
  void* out;
  int64_t n;
};

// An op over rows x cols (cols = the last dim of the first tensor argument, rows = the
// product of its other dims): the op's tensor arguments and outputs, each in table order;
// an absent optional tensor is nullptr.
template <int NIN, int NOUT>
struct RowsIO {
  DType dtype;
  const void* in[NIN];
  void* out[NOUT];
  int64_t rows;
  int64_t cols;
};

}  // namespace sk
