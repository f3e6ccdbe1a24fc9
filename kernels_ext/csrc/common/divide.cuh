// Division by a divisor fixed for a whole launch, as a multiply and a shift (the round-up method
// of Granlund and Montgomery): the host picks the constants once, and a thread's quotient costs a
// high multiply, an add and a shift instead of the ~20 instructions and extra registers of a
// 32-bit division by a variable.
//
// For divisors 1 <= d < 2^31 and dividends 0 <= n < 2^31: with l = ceil(log2 d) and
// mul = floor(2^32 (2^l - d) / d) + 1 (< 2^32), n / d = (umulhi(mul, n) + n) >> l, and the sum
// stays below 2^32. tests/test_families_cpu.py compiles this header for the host and checks it
// over edge and random cases.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SK_DIVIDE_FN __host__ __device__ __forceinline__
#else
#define SK_DIVIDE_FN inline
#endif

namespace sk {

struct Divisor {
  uint32_t mul = 0;
  uint32_t shift = 0;
};

// d must be in [1, 2^31).
inline Divisor make_divisor(uint32_t d) {
  uint32_t l = 0;
  while ((uint64_t{1} << l) < d) ++l;
  const uint64_t mul = ((uint64_t{1} << 32) * ((uint64_t{1} << l) - d)) / d + 1;
  return Divisor{static_cast<uint32_t>(mul), l};
}

// n / d for n in [0, 2^31).
SK_DIVIDE_FN uint32_t quotient(uint32_t n, Divisor d) {
#if defined(__CUDA_ARCH__)
  const uint32_t hi = __umulhi(d.mul, n);
#else
  const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(d.mul) * n) >> 32);
#endif
  return (hi + n) >> d.shift;
}

}  // namespace sk
