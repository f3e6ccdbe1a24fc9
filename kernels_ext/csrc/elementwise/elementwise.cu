// add and mul: instantiations of the shared pointwise map kernel (op table:
// elementwise/ops.yaml, `impl: map`).
#include "../common/map.cuh"

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
}  // namespace sk

SK_MAP_OP(add, Add, 2)
SK_MAP_OP(mul, Mul, 2)
