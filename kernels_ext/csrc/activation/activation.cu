// Activations on the shared pointwise map kernel (op table: activation/ops.yaml, `impl: map`).
//
// Accuracy policy (no --use_fast_math in this library): float32 outputs use the
// accurate libdevice expf and erff; their one division, by 1 + exp(-z) >= 1, is
// x * MUFU reciprocal (__fdividef, <= 2 ulp: silu/sigmoid stay within 5e-7 relative
// of float64). The IEEE division's slow-path call made the fp32 kernels spill at 64
// registers with 8 packs in flight, for no accuracy that matters. 16-bit outputs (kLow)
// use MUFU-based exp / reciprocal and a short erf formula whose error (< 2e-7
// absolute on erf) is far below half an fp16/bf16 ulp; there the accurate functions
// would make a bf16 activation compute-bound on an H200 (about 30 instructions per
// element is all the memory system leaves).
#include "../common/map.cuh"

namespace sk {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;   // 1/sqrt(2)
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluTanhCubic = 0.044715f;

template <bool kLow>
__device__ __forceinline__ float exp_f(float z) {
  if constexpr (kLow) {
    return __expf(z);
  } else {
    return expf(z);
  }
}

// x / (1 + exp(-z)) without cancellation for either sign of z. __fdividef returns 0
// when the divisor exceeds 2^126 (z < -87.3), where the true value is below 1e-36;
// -inf / inf stays NaN, as in torch.
template <bool kLow>
__device__ __forceinline__ float over_one_plus_exp_neg(float x, float z) {
  return __fdividef(x, 1.0f + exp_f<kLow>(-z));
}

template <bool kLow>
__device__ __forceinline__ float sigmoid_f(float z) {
  return over_one_plus_exp_neg<kLow>(1.0f, z);
}

// x * sigmoid(x), written as one quotient so x * 0 never turns into NaN for finite x.
template <bool kLow>
__device__ __forceinline__ float silu_f(float x) {
  return over_one_plus_exp_neg<kLow>(x, x);
}

// Standard normal CDF for 16-bit outputs: erfc by Abramowitz & Stegun 7.1.26
// (|error| <= 1.5e-7), evaluated on |x| so no 1 - erf cancellation for x < 0.
__device__ __forceinline__ float normcdf_low(float x) {
  const float z = fabsf(x) * kSqrtHalf;
  const float t = __fdividef(1.0f, fmaf(0.3275911f, z, 1.0f));
  float poly = fmaf(t, 1.061405429f, -1.453152027f);
  poly = fmaf(t, poly, 1.421413741f);
  poly = fmaf(t, poly, -0.284496736f);
  poly = fmaf(t, poly, 0.254829592f);
  const float half_erfc = 0.5f * t * poly * __expf(-z * z);
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

struct Relu {
  // x < 0 ? 0 : x keeps NaN as NaN (fmaxf would return 0), like torch.relu.
  template <bool kLow>
  __device__ __forceinline__ static float apply(float x) { return x < 0.0f ? 0.0f : x; }
};

struct GeluErf {
  static constexpr bool kCostly = true;  // erf: see MapTile in common/map.cuh
  template <bool kLow>
  __device__ __forceinline__ static float apply(float x) {
    if constexpr (kLow) {
      return x * normcdf_low(x);
    } else {
      return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
    }
  }
};

// 0.5 x (1 + tanh(u)) == x * sigmoid(2u): same function, no cancellation for x < 0.
struct GeluTanh {
  template <bool kLow>
  __device__ __forceinline__ static float apply(float x) {
    const float u = kSqrt2OverPi * fmaf(kGeluTanhCubic * x, x * x, x);
    return over_one_plus_exp_neg<kLow>(x, 2.0f * u);
  }
};

struct Silu {
  template <bool kLow>
  __device__ __forceinline__ static float apply(float x) { return silu_f<kLow>(x); }
};

struct Sigmoid {
  template <bool kLow>
  __device__ __forceinline__ static float apply(float x) { return sigmoid_f<kLow>(x); }
};

struct SwiGlu {
  template <bool kLow>
  __device__ __forceinline__ static float apply(float a, float b) { return silu_f<kLow>(a) * b; }
};

}  // namespace
}  // namespace sk

SK_MAP_OP(relu, Relu, 1)

namespace sk::ops {
// approximate: the index of the table's choice, 0 'none' (erf), 1 'tanh'.
cudaError_t gelu(const MapIO<1>& io, int approximate, cudaStream_t stream) {
  return approximate == 0 ? launch_map_op<GeluErf, 1>(io, stream)
                          : launch_map_op<GeluTanh, 1>(io, stream);
}
}  // namespace sk::ops

SK_MAP_OP(silu, Silu, 1)
SK_MAP_OP(sigmoid, Sigmoid, 1)
SK_MAP_OP(swiglu, SwiGlu, 2)
