// CPU check of the fp8 quantiser's fast division (kernels_ext/csrc/quant/fp8_division.cuh): the
// same host/device functions the kernels call, run on the host against IEEE division, PyTorch's
// clamp and the fp8 rounding (CUDA's host conversion and an independent round-to-nearest-even).
//   nvcc -std=c++17 -O2 -Xcompiler -ffp-contract=off -o /tmp/fp8_division_check \
//        scripts/dev/fp8_division_check.cu && /tmp/fp8_division_check [scales]
// Every bf16 and fp16 bit pattern (both signs, zeros, subnormals, inf, NaN) and random fp32 ones,
// times random scales over [2^-60, 2^60] plus awkward mantissas: each word the fast path does not
// flag must hold PyTorch's four codes; NaN, inf and overflowing elements must be flagged (their
// word takes IEEE division in the kernel); ordinary values must not be. Exit status 1 on a mismatch.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "../../kernels_ext/csrc/quant/fp8_division.cuh"

namespace {

float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

float bf16_value(uint16_t h) { return from_bits(static_cast<uint32_t>(h) << 16); }
float f16_value(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float mag = e == 31 ? (m ? NAN : INFINITY)
                            : (e ? std::ldexp(1.0f + m / 1024.0f, e - 15) : std::ldexp(static_cast<float>(m), -24));
  return (h & 0x8000) ? -mag : mag;
}

// An independent e4m3fn rounding of a magnitude (ties to even, saturating at 448 = 0x7e).
float e4m3_value(int c) {
  const int e = (c >> 3) & 15, m = c & 7;
  return e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp(static_cast<float>(m), -9);
}
int e4m3_rne(float x) {
  if (!(x < 448.0f)) return 0x7e;
  int lo = 0, hi = 0x7e;
  while (lo < hi) { const int mid = (lo + hi + 1) / 2; if (e4m3_value(mid) <= x) lo = mid; else hi = mid - 1; }
  if (lo == 0x7e) return lo;
  const double below = static_cast<double>(x) - e4m3_value(lo), above = e4m3_value(lo + 1) - static_cast<double>(x);
  return below < above ? lo : above < below ? lo + 1 : (lo & 1 ? lo + 1 : lo);
}

// PyTorch: (x.float() / scale).clamp(-448, 448).to(float8_e4m3fn), for non-NaN x.
unsigned torch_code(float x, float s) {
  float q = x / s;
  q = q > 448.f ? 448.f : (q < -448.f ? -448.f : q);
  return __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
}

struct Tally {
  long long words = 0, flagged = 0, wrong = 0, missed = 0, needless = 0;
};

// One word of four elements (values v, raw sign word), as the kernel computes it.
void check_word(const float (&v)[4], unsigned signs, float s, float r, Tally& t) {
  float a[4];
  for (int i = 0; i < 4; ++i) a[i] = std::fabs(v[i]);
  unsigned odd = 0;
  const unsigned word = sk::fp8::e4m3x4_of_magnitudes(a, s, r, odd) | signs;
  ++t.words;
  bool special = false, ordinary = true;
  for (int i = 0; i < 4; ++i) {
    const double q = std::fabs(static_cast<double>(v[i]) / s);
    special |= !std::isfinite(v[i]) || !std::isfinite(static_cast<float>(v[i] / s));
    ordinary &= std::isfinite(v[i]) && q < 1e30 && (q > 1e-30 || v[i] == 0.0f);
  }
  if (sk::fp8::any_odd(odd)) {
    ++t.flagged;
    if (ordinary && t.needless++ < 5) std::printf("flagged an ordinary word: %a %a %a %a / %a\n", v[0], v[1], v[2], v[3], s);
    return;
  }
  if (special && t.missed++ < 5) std::printf("NOT flagged: %a %a %a %a / %a\n", v[0], v[1], v[2], v[3], s);
  for (int i = 0; i < 4; ++i) {
    const unsigned got = (word >> (8 * i)) & 0xffu;
    const unsigned want = torch_code(v[i], s);
    const unsigned rne = (std::signbit(v[i]) ? 0x80u : 0u) | static_cast<unsigned>(e4m3_rne(std::fabs(v[i] / s)));
    if (got != want || got != rne) {
      if (t.wrong++ < 10) std::printf("WRONG x=%a s=%a: fast %02x, PyTorch %02x, RNE %02x\n", v[i], s, got, want, rne);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int n_random = argc > 1 ? std::atoi(argv[1]) : 2000;
  std::mt19937_64 rng(20261201);
  std::vector<float> scales;
  std::uniform_int_distribution<int> exponent(-60, 59);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  for (int i = 0; i < n_random; ++i) scales.push_back(std::ldexp(from_bits(0x3f800000u | mantissa(rng)), exponent(rng)));
  for (int e = -60; e <= 59; e += 7) {
    for (uint32_t m : {0u, 1u, 2u, (1u << 23) - 1, (1u << 23) - 2, 1u << 22, (1u << 22) + 1, (1u << 22) - 1, 0x555555u})
      scales.push_back(std::ldexp(from_bits(0x3f800000u | m), e));
  }
  for (float s : {0x1p-60f, 0x1p60f, 0.002f, 0.02f, 0.0113f, 1e-12f / 448.f, 1.f / 448.f, 1.f, 3.f})
    scales.push_back(s);
  Tally t;
  for (float s : scales) {
    if (!sk::fp8::fast_scale(s)) { std::printf("not a fast scale: %a\n", s); return 1; }
    const float r = sk::fp8::reciprocal(s);
    for (int fmt = 0; fmt < 2; ++fmt) {          // every bf16, then every fp16 pattern
      for (uint32_t h = 0; h < 65536; h += 4) {
        float v[4];
        for (int i = 0; i < 4; ++i) v[i] = fmt ? f16_value(h + i) : bf16_value(h + i);
        const unsigned w0 = h | ((h + 1) << 16), w1 = (h + 2) | ((h + 3) << 16);
        check_word(v, sk::fp8::sign_bytes(w0, w1), s, r, t);
      }
    }
    for (int k = 0; k < 2000; ++k) {             // fp32: random patterns, and values near 1
      uint32_t w[4];
      float v[4];
      for (int i = 0; i < 4; ++i) {
        w[i] = k & 1 ? static_cast<uint32_t>(rng()) : bits_of(std::ldexp(from_bits(0x3f800000u | mantissa(rng)), exponent(rng) / 4) * (rng() & 1 ? -1.f : 1.f));
        v[i] = from_bits(w[i]);
      }
      check_word(v, sk::fp8::sign_bytes(w[0], w[1], w[2], w[3]), s, r, t);
    }
  }
  // Scales that put x / s within a few ulps of an fp8 rounding boundary (a midpoint between two
  // codes), where the quotient's last bit decides the code: s = RN(x / m) and its neighbours.
  long long boundary_words = t.words;
  for (int k = 0; k < 200000; ++k) {
    const int c = static_cast<int>(rng() % 0x7e);                    // midpoint of codes c, c + 1
    const float m = 0.5f * (e4m3_value(c) + e4m3_value(c + 1));
    float v[4];
    for (int i = 0; i < 4; ++i) v[i] = bf16_value(static_cast<uint16_t>((rng() % 0x7f00) | (rng() & 0x8000)));
    const float s0 = std::fabs(v[0]) / m;
    const float s = from_bits(bits_of(s0) + static_cast<uint32_t>(static_cast<int>(rng() % 7) - 3));
    if (!sk::fp8::fast_scale(s)) continue;
    uint32_t h[4];
    for (int i = 0; i < 4; ++i) h[i] = bits_of(v[i]) >> 16;
    check_word(v, sk::fp8::sign_bytes(h[0] | (h[1] << 16), h[2] | (h[3] << 16)), s, sk::fp8::reciprocal(s), t);
  }
  boundary_words = t.words - boundary_words;
  for (float s : {0x1p-61f, 0x1p61f, 0.0f, -1.0f, INFINITY, NAN, 1e-40f}) {
    if (sk::fp8::fast_scale(s)) { std::printf("fast_scale accepted %a\n", s); return 1; }
  }
  std::printf("%lld words near fp8 rounding boundaries; ", boundary_words);
  std::printf("%zu scales, %lld words: %lld flagged (IEEE division), %lld wrong, %lld specials not flagged, "
              "%lld ordinary words flagged\n", scales.size(), t.words, t.flagged, t.wrong, t.missed, t.needless);
  return t.wrong || t.missed ? 1 : 0;
}
