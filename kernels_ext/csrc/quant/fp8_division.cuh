// The quantiser's division x / scale, IEEE-rounded, in three instructions per element, and the
// assembly of fp8 e4m3 bytes around it. Host and device code: scripts/dev/fp8_division_check.cu
// runs these same functions on a CPU against a / s and a reference rounding.
//
// x / scale must be IEEE-rounded (PyTorch divides, and the fp8 code of a value near a rounding
// boundary depends on its last bit). __fdiv_rn costs a reciprocal on the MUFU unit, two Newton
// steps, the quotient, its correction and a special-case check per element; with the clamp, the
// NaN fix and the packing that made bf16 quantisation issue-bound (the H200 v1 run: 0.57-0.71 of
// copy; fp32, with half the elements per byte, 0.75-0.9). One scale serves many elements, so its
// reciprocal r = RN(1 / s) is computed once, and each quotient costs three instructions:
//   q0 = RN(a r),  e = a - q0 s (exact, one FMA),  q = RN(q0 + e r)  (Markstein's correction),
// which is RN(a / s) whenever r = RN(1 / s), q0 is within one ulp of a / s and the residual e does
// not underflow. It runs on magnitudes a = |x| (the signs are put into the fp8 bytes afterwards, so
// zeros keep theirs), and only for scales in [2^-60, 2^60] (other scales take the exact path for
// every element). Where its conditions fail, the byte says so or does not matter:
//   - a < 2^-100 (the residual may underflow): a / s < 2^-40, whose fp8 code is 0 whatever the
//     quotient's last bits, and the computed quotient stays that tiny;
//   - overflow (a r = inf), a = inf and a = NaN make the quotient NaN (code 0x7f); a tiny quotient
//     rounded below zero gives a code with bit 7 set: a word with such a byte is flagged and the
//     caller quantises its elements by IEEE division instead;
//   - a quotient above 448 (inf included) saturates in the cvt (.satfinite) as the clamp would.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>

namespace sk::fp8 {

constexpr float kFastScaleLow = 0x1p-60f;
constexpr float kFastScaleHigh = 0x1p60f;

__host__ __device__ __forceinline__ bool fast_scale(float s) {
  return s >= kFastScaleLow && s <= kFastScaleHigh;  // false for NaN
}

// RN(1 / s), computed once per scale.
__host__ __device__ __forceinline__ float reciprocal(float s) {
#ifdef __CUDA_ARCH__
  return __frcp_rn(s);
#else
  return 1.0f / s;
#endif
}

// RN(a / s) for a >= 2^-100 and s a fast scale (r = reciprocal(s)); see the top of the file.
__host__ __device__ __forceinline__ float div_markstein(float a, float s, float r) {
#ifdef __CUDA_ARCH__
  const float q0 = __fmul_rn(a, r);  // never contracted into the FMA below
  const float e = __fmaf_rn(-q0, s, a);
  return __fmaf_rn(e, r, q0);
#else
  volatile float q0 = a * r;
  const float e = std::fmaf(-q0, s, a);
  return std::fmaf(e, r, q0);
#endif
}

__host__ __device__ __forceinline__ unsigned byte_perm(unsigned x, unsigned y, unsigned sel) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, sel);
#else
  const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
#endif
}

// Four magnitudes (>= 0 or NaN) divided by s into four e4m3 codes, element i in byte i. `odd`
// collects bit 7 of every byte that is 0x7f (NaN) or has bit 7 set (below zero): the fast path
// cannot vouch for that word.
__host__ __device__ __forceinline__ unsigned e4m3x4_of_magnitudes(const float (&a)[4], float s, float r,
                                                                   unsigned& odd) {
  const unsigned lo = __nv_cvt_float2_to_fp8x2(
      make_float2(div_markstein(a[0], s, r), div_markstein(a[1], s, r)), __NV_SATFINITE, __NV_E4M3);
  const unsigned hi = __nv_cvt_float2_to_fp8x2(
      make_float2(div_markstein(a[2], s, r), div_markstein(a[3], s, r)), __NV_SATFINITE, __NV_E4M3);
  const unsigned mag = byte_perm(lo, hi, 0x5410);
  odd |= ((mag & 0x7f7f7f7fu) + 0x01010101u) | mag;  // no carries: every byte is <= 0x7f + 1
  return mag;
}

__host__ __device__ __forceinline__ bool any_odd(unsigned odd) { return (odd & 0x80808080u) != 0; }

// Bit 7 of byte i = the sign of element i: from two words of four 16-bit elements, or from
// four fp32 words.
__host__ __device__ __forceinline__ unsigned sign_bytes(unsigned w0, unsigned w1) {
  return byte_perm(w0, w1, 0x7531) & 0x80808080u;  // the high byte of every 16-bit element
}

__host__ __device__ __forceinline__ unsigned sign_bytes(unsigned w0, unsigned w1, unsigned w2,
                                                        unsigned w3) {
  const unsigned lo = byte_perm(w0, w1, 0x0073);
  const unsigned hi = byte_perm(w2, w3, 0x0073);
  return byte_perm(lo, hi, 0x5410) & 0x80808080u;
}

}  // namespace sk::fp8
