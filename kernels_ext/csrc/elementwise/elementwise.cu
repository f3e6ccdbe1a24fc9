// add and mul: instantiations of the shared pointwise map kernel.
#include "elementwise.h"

#include "../common/common.cuh"

namespace sk {
namespace {

struct Add {
  template <bool kLow>
  __device__ __forceinline__ static float apply(float a, float b) { return a + b; }
};

struct Mul {
  template <bool kLow>
  __device__ __forceinline__ static float apply(float a, float b) { return a * b; }
};

}  // namespace

cudaError_t launch_binary(BinaryOp op, DType dt, const void* a, const void* b, void* out,
                          int64_t n, cudaStream_t stream) {
  const void* const in[2] = {a, b};
  switch (op) {
    case BinaryOp::kAdd: return launch_map<Add, 2>(dt, in, out, n, stream);
    case BinaryOp::kMul: return launch_map<Mul, 2>(dt, in, out, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sk
