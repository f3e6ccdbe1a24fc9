// FP8 e4m3fn quantisation and dequantisation (formulas in quant.h).
//
// Elementwise passes are maps over units of VEC elements (one 16-byte pack of 16/32-bit values,
// VEC bytes of fp8), kUnroll units in flight per thread, one tile per block. The per-tensor
// dynamic scale needs the amax of the whole tensor before any element can be quantised, so it
// takes two passes: an amax reduction (block maxima merged with an atomic max on the bit
// patterns, which order like the values for non-negative floats, NaN above +inf), then the
// quantisation, which derives the scale from the amax itself. Per-row scales keep each row in
// registers (the row plans of rows.cuh): one read, one write.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../common/convert.cuh"
#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "../common/reduce.cuh"
#include "../common/rows.cuh"
#include "fp8_division.cuh"
#include "quant.h"

namespace sk {
namespace {

constexpr float kFp8Max = 448.f;
constexpr float kMinAmax = 1e-12f;
constexpr int kThreads = 256;
constexpr int kUnroll = 2;
constexpr int kAmaxBlocksPerSm = 4;

// torch's cast after the clamp: round to nearest even (the hardware cvt, exact for |v| <= 448);
// NaN survives the clamp and becomes 0x7f with its sign, as c10's conversion writes it.
__device__ __forceinline__ float clamp_fp8(float v) {
  return v > kFp8Max ? kFp8Max : (v < -kFp8Max ? -kFp8Max : v);  // NaN stays NaN
}

__device__ __forceinline__ unsigned fix_nan(unsigned byte, float v) {
  return v != v ? 0x7fu | ((__float_as_uint(v) >> 24) & 0x80u) : byte;
}

__device__ __forceinline__ unsigned fp8x2(float a, float b) {
  const float ca = clamp_fp8(a), cb = clamp_fp8(b);
  const unsigned pair = __nv_cvt_float2_to_fp8x2(make_float2(ca, cb), __NV_SATFINITE, __NV_E4M3);
  return fix_nan(pair & 0xffu, ca) | (fix_nan(pair >> 8, cb) << 8);
}

__device__ __forceinline__ float scale_from_amax(float amax) {
  const float a = amax < kMinAmax ? kMinAmax : amax;  // clamp(min=...) keeps NaN
  return __fdiv_rn(a, kFp8Max);
}

// VEC values (VEC even, or 1) quantised with one scale into VEC bytes of `out`.
template <int VEC>
__device__ __forceinline__ void store_fp8(uint8_t* out, const float (&f)[VEC], float scale) {
  if constexpr (VEC == 1) {
    const float c = clamp_fp8(__fdiv_rn(f[0], scale));
    out[0] = static_cast<uint8_t>(fix_nan(__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3), c));
  } else {
    unsigned words[VEC / 4 > 0 ? VEC / 4 : 1] = {};
#pragma unroll
    for (int i = 0; i < VEC; i += 2) {
      const unsigned pair = fp8x2(__fdiv_rn(f[i], scale), __fdiv_rn(f[i + 1], scale));
      words[i / 4] |= pair << (8 * (i % 4));
    }
    if constexpr (VEC == 8) {
      *reinterpret_cast<uint2*>(out) = make_uint2(words[0], words[1]);
    } else if constexpr (VEC == 4) {
      *reinterpret_cast<unsigned*>(out) = words[0];
    } else {
      static_assert(VEC == 2, "unsupported width");
      *reinterpret_cast<unsigned short*>(out) = static_cast<unsigned short>(words[0]);
    }
  }
}

// ---------------------------------------------------------------- the division, fast
// (fp8_division.cuh: why, and why it is exact)

// The pack quantised into VEC bytes of `out` by the fast division (r = RN(1 / s), s a fast
// scale); false, with nothing written, when a byte shows the fast path cannot vouch for it.
template <typename T, int VEC>
__device__ __forceinline__ bool store_fp8_fast(uint8_t* out, const Pack<T, VEC>& p, float s,
                                               float r) {
  static_assert(VEC % 4 == 0, "whole words of fp8 bytes");
  constexpr int kWords = static_cast<int>(sizeof(Pack<T, VEC>) / 4);
  const auto* pw = reinterpret_cast<const unsigned*>(p.v);
  Pack<T, VEC> m;  // magnitudes: the sign bits cleared
  auto* mw = reinterpret_cast<unsigned*>(m.v);
#pragma unroll
  for (int i = 0; i < kWords; ++i) mw[i] = pw[i] & (sizeof(T) == 2 ? 0x7fff7fffu : 0x7fffffffu);
  float a[VEC];
  unpack<T, VEC>(m, a);
  unsigned words[VEC / 4];
  unsigned odd = 0;
#pragma unroll
  for (int w = 0; w < VEC / 4; ++w) {
    const float four[4] = {a[4 * w], a[4 * w + 1], a[4 * w + 2], a[4 * w + 3]};
    const unsigned signs = sizeof(T) == 2
                               ? fp8::sign_bytes(pw[2 * w], pw[2 * w + 1])
                               : fp8::sign_bytes(pw[4 * w], pw[4 * w + 1], pw[4 * w + 2], pw[4 * w + 3]);
    words[w] = fp8::e4m3x4_of_magnitudes(four, s, r, odd) | signs;
  }
  if (fp8::any_odd(odd)) return false;
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint2*>(out) = make_uint2(words[0], words[1]);
  } else {
    static_assert(VEC == 4, "unsupported width");
    *reinterpret_cast<unsigned*>(out) = words[0];
  }
  return true;
}

// A pack into VEC bytes: the fast division when it can vouch for every byte, else IEEE division.
template <typename T, int VEC>
__device__ __forceinline__ void quantise_pack(uint8_t* out, const Pack<T, VEC>& p, float scale,
                                              bool fast, float r) {
  if constexpr (VEC % 4 == 0) {
    if (fast && store_fp8_fast<T, VEC>(out, p, scale, r)) return;  // the common case
  }
  float f[VEC];
  unpack<T, VEC>(p, f);
  store_fp8<VEC>(out, f, scale);
}

// ---------------------------------------------------------------- elementwise quantisation

// The kUnroll packs of a thread's units from `base` (units at or past nvec left alone).
template <typename T, int VEC>
__device__ __forceinline__ void load_units(const T* __restrict__ x, int64_t base, int64_t nvec,
                                           Pack<T, VEC> (&p)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t iv = base + int64_t{u} * kThreads;
    if (iv < nvec) p[u] = load_pack<T, VEC>(x + iv * VEC);
  }
}

enum class ScaleFrom { kTensor, kAmax };

template <class V, ScaleFrom kFrom>
__global__ void __launch_bounds__(kThreads)
    quant_kernel(const typename V::T* __restrict__ x, const void* scale_src, float* scale_out,
                 uint8_t* __restrict__ q, int64_t n) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  constexpr int64_t kTile = int64_t{kThreads} * kUnroll;
  const int64_t nvec = n / VEC;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kTile;
  int64_t base = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  // The first packs are loaded before the scale is read: the scale's reciprocal branches, and
  // loads behind a branch wait for it, which put a second DRAM round trip into small calls.
  Pack<T, VEC> p[kUnroll];
  load_units<T, VEC>(x, base, nvec, p);
  float scale;
  if constexpr (kFrom == ScaleFrom::kTensor) {
    scale = __ldg(static_cast<const float*>(scale_src));
  } else {
    // The amax pass ran before on this stream; plain load (written by another kernel).
    scale = scale_from_amax(__uint_as_float(*static_cast<const unsigned*>(scale_src)));
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = scale;
  }
  const bool fast = fp8::fast_scale(scale);
  const float r = fp8::reciprocal(scale);
  for (; base < nvec; base += step) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + int64_t{u} * kThreads;
      if (iv < nvec) quantise_pack<T, VEC>(q + iv * VEC, p[u], scale, fast, r);
    }
    load_units<T, VEC>(x, base + step, nvec, p);
  }
  if (blockIdx.x == 0) {  // the n % VEC tail
    const int64_t t = nvec * VEC + threadIdx.x;
    if (t < n) {
      const float f[1] = {to_float(x[t])};
      store_fp8<1>(q + t, f, scale);
    }
  }
}

template <class V>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const typename V::T* __restrict__ x, unsigned* amax_bits, int64_t n) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  float m = 0.f;
  const int64_t nvec = n / VEC;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
       base < nvec; base += stride) {
    Pack<T, VEC> p[kUnroll];
    load_units<T, VEC>(x, base, nvec, p);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + int64_t{u} * kThreads;
      if (iv < nvec) {
        float f[VEC];
        unpack<T, VEC>(p[u], f);
#pragma unroll
        for (int i = 0; i < VEC; ++i) m = MaxOp::apply(m, fabsf(f[i]));
      }
    }
  }
  if (blockIdx.x == 0) {
    const int64_t t = nvec * VEC + threadIdx.x;
    if (t < n) m = MaxOp::apply(m, fabsf(to_float(x[t])));
  }
  m = block_allreduce<MaxOp>(m, smem);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

int64_t map_blocks(int64_t n, int vec) {
  int64_t blocks = ceil_div(n / vec, int64_t{kThreads} * kUnroll);
  if (blocks < 1) blocks = 1;  // the tail alone
  return blocks > 0x7fffffff ? 0x7fffffff : blocks;
}

bool vectorizable(const void* x, const void* q, int vec) {
  // q + iv * VEC must be aligned to VEC bytes: a 16-byte-aligned base guarantees it.
  return aligned16(x) && aligned16(q) && vec > 1;
}

// ---------------------------------------------------------------- per-row scales

template <class V, int NV, bool kWarpPerRow>
__global__ void __launch_bounds__(kRowMaxThreads<kWarpPerRow>, kRowMinBlocks<kWarpPerRow>)
    quant_rows_cached(const typename V::T* __restrict__ x, uint8_t* __restrict__ q,
                      float* __restrict__ scales, int64_t rows, int cols) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  const auto g = RowGroup<kWarpPerRow>::make();
  if (kWarpPerRow && g.row >= rows) return;  // a whole warp: no block barrier in warp mode
  const int nvec = cols / VEC;
  const T* xr = x + g.row * cols;
  RowCache<V, NV> cache;
  cache.load(xr, g, nvec);
  float m = cache.fold(g, nvec, 0.f, [](float acc, float v) { return MaxOp::apply(acc, fabsf(v)); });
  m = g.template allreduce<MaxOp>(m, smem);
  const float scale = scale_from_amax(m);
  const bool fast = fp8::fast_scale(scale);
  const float r = fp8::reciprocal(scale);
  uint8_t* qr = q + g.row * cols;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (cache.valid(g, j, nvec)) quantise_pack<T, VEC>(qr + cache.offset(g, j), cache.p[j], scale, fast, r);
  }
  if (g.rank == 0) scales[g.row] = scale;
}

// Rows too long for registers: amax over the row, then a second read (from L2) to quantise.
template <class V>
__global__ void __launch_bounds__(kStreamThreads)
    quant_rows_stream(const typename V::T* __restrict__ x, uint8_t* __restrict__ q,
                      float* __restrict__ scales, int cols) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  const int nvec = cols / VEC;
  float m = 0.f;
  for (int j = threadIdx.x; j < nvec; j += blockDim.x) {
    float f[VEC];
    unpack<T, VEC>(load_pack<T, VEC>(xr + j * VEC), f);
#pragma unroll
    for (int i = 0; i < VEC; ++i) m = MaxOp::apply(m, fabsf(f[i]));
  }
  m = block_allreduce<MaxOp>(m, smem);
  const float scale = scale_from_amax(m);
  const bool fast = fp8::fast_scale(scale);
  const float r = fp8::reciprocal(scale);
  uint8_t* qr = q + row * cols;
  for (int j = threadIdx.x; j < nvec; j += blockDim.x) {
    quantise_pack<T, VEC>(qr + j * VEC, load_pack<T, VEC>(xr + j * VEC), scale, fast, r);
  }
  if (threadIdx.x == 0) scales[row] = scale;
}

// ---------------------------------------------------------------- dequantisation

// VEC fp8 e4m3 bytes moved as one word (VEC = 8, 4 or 1) and decoded into floats.
template <int VEC>
struct FP8Units {
  using Word = std::conditional_t<VEC == 8, uint2, std::conditional_t<VEC == 4, unsigned, uint8_t>>;
  static __device__ __forceinline__ Word load(const uint8_t* src) {
    return __ldg(reinterpret_cast<const Word*>(src));
  }
  static __device__ __forceinline__ void decode(Word w, float (&f)[VEC]) {
    if constexpr (VEC == 1) {
      f[0] = __half2float(__half(__nv_cvt_fp8_to_halfraw(w, __NV_E4M3)));
    } else {
      unsigned short pairs[VEC / 2];
      if constexpr (VEC == 8) {
        pairs[0] = w.x & 0xffff, pairs[1] = w.x >> 16, pairs[2] = w.y & 0xffff, pairs[3] = w.y >> 16;
      } else {
        pairs[0] = w & 0xffff, pairs[1] = w >> 16;
      }
#pragma unroll
      for (int i = 0; i < VEC / 2; ++i) {
        const float2 h = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3)));
        f[2 * i] = h.x;
        f[2 * i + 1] = h.y;
      }
    }
  }
};

// Units of VEC fp8 bytes -> one pack of T. Per-row scales look up the unit's row.
template <class V, bool kPerRow>
__global__ void __launch_bounds__(kThreads)
    dequant_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale,
                   typename V::T* __restrict__ y, int64_t n, int64_t cols) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  constexpr int64_t kTile = int64_t{kThreads} * kUnroll;
  using Raw = FP8Units<VEC>;
  const int64_t nvec = n / VEC;  // per-row: cols % VEC == 0, so units never straddle rows
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x; base < nvec;
       base += static_cast<int64_t>(gridDim.x) * kTile) {
    // Every unit's bytes (and row scale) are loaded before any is stored: a store through a
    // generic pointer ahead of the next load would make the units one DRAM round trip each.
    typename Raw::Word raw[kUnroll];
    float s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + int64_t{u} * kThreads;
      if (iv < nvec) {
        raw[u] = Raw::load(q + iv * VEC);
        if constexpr (kPerRow) s[u] = __ldg(scale + (iv * VEC) / cols);
      }
    }
    const float tensor_scale = kPerRow ? 0.f : __ldg(scale);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + int64_t{u} * kThreads;
      if (iv >= nvec) continue;
      float f[VEC];
      Raw::decode(raw[u], f);
      const float su = kPerRow ? s[u] : tensor_scale;
#pragma unroll
      for (int i = 0; i < VEC; ++i) f[i] = __fmul_rn(f[i], su);
      store_pack<T, VEC>(y + iv * VEC, pack<T, VEC>(f));
    }
  }
  if (blockIdx.x == 0) {
    const int64_t t = nvec * VEC + threadIdx.x;
    if (t < n) {
      float v[1];
      FP8Units<1>::decode(__ldg(q + t), v);
      y[t] = from_float<T>(__fmul_rn(v[0], __ldg(kPerRow ? scale + t / cols : scale)));
    }
  }
}

}  // namespace

cudaError_t launch_fp8_quant(DType dt, const void* x, const float* scale, uint8_t* q, int64_t n,
                             cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return dispatch_variant(dt, vectorizable(x, q, vector_width(dt)), [&](auto v) {
    using V = decltype(v);
    quant_kernel<V, ScaleFrom::kTensor><<<static_cast<unsigned>(map_blocks(n, V::VEC)), kThreads, 0,
                                          stream>>>(static_cast<const typename V::T*>(x), scale,
                                                    nullptr, q, n);
    return cudaGetLastError();
  });
}

cudaError_t launch_fp8_quant_dynamic(DType dt, const void* x, uint8_t* q, float* scale_out,
                                     unsigned* amax_bits, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaErrorInvalidValue;  // amax of nothing: the binding refuses it
  return dispatch_variant(dt, vectorizable(x, q, vector_width(dt)), [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    const T* xp = static_cast<const T*>(x);
    int64_t amax_blocks = ceil_div(n / V::VEC, int64_t{kThreads} * kUnroll);
    const int64_t resident = int64_t{kAmaxBlocksPerSm} * sm_count();
    if (amax_blocks > resident) amax_blocks = resident;
    if (amax_blocks < 1) amax_blocks = 1;
    amax_kernel<V><<<static_cast<unsigned>(amax_blocks), kThreads, 0, stream>>>(xp, amax_bits, n);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    quant_kernel<V, ScaleFrom::kAmax><<<static_cast<unsigned>(map_blocks(n, V::VEC)), kThreads, 0,
                                        stream>>>(xp, amax_bits, scale_out, q, n);
    return cudaGetLastError();
  });
}

cudaError_t launch_fp8_quant_rows(DType dt, const void* x, uint8_t* q, float* scales, int64_t rows,
                                  int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols <= 0 || cols > kMaxRowLength) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const bool vec = rows_vectorizable(dt, cols, {x, q});
  return dispatch_variant(dt, vec, [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    const T* xp = static_cast<const T*>(x);
    const RowConfig cfg = plan_rows(rows, cols / V::VEC, V::VEC);
    if (cfg.plan == RowPlan::kStream) {
      quant_rows_stream<V><<<static_cast<unsigned>(rows), cfg.threads, 0, stream>>>(
          xp, q, scales, static_cast<int>(cols));
      return cudaGetLastError();
    }
    return dispatch_cached_plan<V>(cfg, [&](auto nv, auto warp) {
      quant_rows_cached<V, decltype(nv)::value, decltype(warp)::value>
          <<<static_cast<unsigned>(cfg.blocks), cfg.threads, 0, stream>>>(
              xp, q, scales, rows, static_cast<int>(cols));
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_fp8_dequant(DType dt, const uint8_t* q, const float* scale, bool per_row, void* y,
                               int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  const int vw = vector_width(dt);
  // Per-row units must not straddle rows: whole packs per row.
  const bool vec = aligned16(q) && aligned16(y) && (!per_row || cols % vw == 0);
  return dispatch_variant(dt, vec, [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    const unsigned grid = static_cast<unsigned>(map_blocks(n, V::VEC));
    if (per_row) {
      dequant_kernel<V, true><<<grid, kThreads, 0, stream>>>(q, scale, static_cast<T*>(y), n, cols);
    } else {
      dequant_kernel<V, false><<<grid, kThreads, 0, stream>>>(q, scale, static_cast<T*>(y), n, cols);
    }
    return cudaGetLastError();
  });
}

}  // namespace sk
