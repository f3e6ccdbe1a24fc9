// Rotary position embedding of q and k in one launch.
//
// Work unit: NP neighbouring pairs of one head of one token. NeoX pairs are (x[i], x[i + D/2]), so a
// unit is two packs of NP elements (one from each half) plus NP cos and NP sin values; GPT-J pairs
// are neighbours, so a unit is one pack of 2 * NP elements plus NP cos and NP sin values. Vectorised
// units move 16-byte packs of x (NeoX NP = VEC, GPT-J NP = VEC / 2); the scalar variant (NP = 1)
// runs when a pointer, a stride or D/2 does not allow them. Units are numbered pair-block fastest,
// then head, then token, so the units of a warp share a token and its cache row is read once per
// warp (a broadcast), not once per head.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/convert.cuh"
#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "rope.h"

namespace sk {
namespace {

constexpr int kThreads = 128;
constexpr int kUnits = 2;  // units per thread, their loads all issued before any math
// 8 blocks of 128 threads per SM: a 64-register cap for two units' raw packs; 1024 threads x
// 2 units x 64 bytes in flight per SM.
constexpr int kMinBlocks = 8;

// N elements into a pack: one access when vectorised, element by element otherwise.
template <typename T, int N, bool kVec, bool kReadOnly>
__device__ __forceinline__ Pack<T, N> load_n(const T* p) {
  if constexpr (kVec) {
    return kReadOnly ? load_pack<T, N>(p) : load_pack_coherent<T, N>(p);
  } else {
    Pack<T, N> r;
#pragma unroll
    for (int i = 0; i < N; ++i) r.v[i] = kReadOnly ? __ldg(p + i) : p[i];
    return r;
  }
}

template <typename T, int N, bool kVec>
__device__ __forceinline__ void store_n(T* p, const float (&f)[N]) {
  if constexpr (kVec) {
    store_pack<T, N>(p, pack<T, N>(f));
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = from_float<T>(f[i]);
  }
}

template <typename T, int N>
__device__ __forceinline__ void to_floats(const Pack<T, N>& p, float (&f)[N]) {
  if constexpr (N > 1) {
    unpack<T, N>(p, f);
  } else {
    f[0] = to_float(p.v[0]);
  }
}

struct Heads {
  const void* in;
  void* out;
  int64_t in_stride[2];
  int64_t out_stride[2];
};

template <typename T>
struct Params {
  Heads q, k;
  const T* cos_sin;
  int64_t cs_stride;
  int heads;        // of q; heads beyond are k's
  int half;         // D / 2
  int units;        // units per head
  int per_token;    // units per token (all heads of q and k)
};

// a' = a cos - b sin, b' = b cos + a sin: fp32, one rounding to T at the store.
__device__ __forceinline__ void turn(float a, float b, float c, float s, float& ra, float& rb) {
  ra = fmaf(a, c, -b * s);
  rb = fmaf(b, c, a * s);
}

// One unit's raw data: NeoX x0 / x1 are the packs of the two halves; GPT-J x0 holds the NP pairs.
template <class V, bool kNeox>
struct Unit {
  using T = typename V::T;
  static constexpr bool kVec = V::VEC > 1;
  static constexpr int NP = kNeox ? V::VEC : (V::VEC > 1 ? V::VEC / 2 : 1);
  static constexpr int NX = kNeox ? NP : 2 * NP;
  Pack<T, NX> x0;
  Pack<T, NP> x1, c, s;
  T* y;
  int i0;

  template <typename Index>
  __device__ __forceinline__ void load(const Params<T>& p, Index u) {
    const Index t = u / p.per_token;
    const int r = static_cast<int>(u - t * p.per_token);
    int h = r / p.units;
    i0 = (r - h * p.units) * NP;  // first pair of the unit
    // Field by field: a reference to one of the two parameter structs would copy both to the stack.
    const bool is_q = h < p.heads;
    if (!is_q) h -= p.heads;
    const int64_t tt = static_cast<int64_t>(t);
    const T* x = static_cast<const T*>(is_q ? p.q.in : p.k.in) +
                 tt * (is_q ? p.q.in_stride[0] : p.k.in_stride[0]) +
                 h * (is_q ? p.q.in_stride[1] : p.k.in_stride[1]);
    y = static_cast<T*>(is_q ? p.q.out : p.k.out) + tt * (is_q ? p.q.out_stride[0] : p.k.out_stride[0]) +
        h * (is_q ? p.q.out_stride[1] : p.k.out_stride[1]);
    const T* cs = p.cos_sin + tt * p.cs_stride;
    // x may be the output itself (in place): coherent loads; the cache is read-only.
    x0 = load_n<T, NX, kVec, false>(x + (kNeox ? i0 : 2 * i0));
    if constexpr (kNeox) x1 = load_n<T, NP, kVec, false>(x + p.half + i0);
    c = load_n<T, NP, kVec, true>(cs + i0);
    s = load_n<T, NP, kVec, true>(cs + p.half + i0);
  }

  __device__ __forceinline__ void turn_and_store(int half) const {
    float cf[NP], sf[NP];
    to_floats<T, NP>(c, cf);
    to_floats<T, NP>(s, sf);
    if constexpr (kNeox) {
      float a[NP], b[NP], ra[NP], rb[NP];
      to_floats<T, NP>(x0, a);
      to_floats<T, NP>(x1, b);
#pragma unroll
      for (int i = 0; i < NP; ++i) turn(a[i], b[i], cf[i], sf[i], ra[i], rb[i]);
      store_n<T, NP, kVec>(y + i0, ra);
      store_n<T, NP, kVec>(y + half + i0, rb);
    } else {
      float v[NX], r2[NX];
      to_floats<T, NX>(x0, v);
#pragma unroll
      for (int i = 0; i < NP; ++i) turn(v[2 * i], v[2 * i + 1], cf[i], sf[i], r2[2 * i], r2[2 * i + 1]);
      store_n<T, NX, kVec>(y + 2 * i0, r2);
    }
  }
};

template <class V, bool kNeox, typename Index>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    rope_kernel(Params<typename V::T> p, Index total) {
  constexpr Index kTile = static_cast<Index>(kThreads) * kUnits;
  for (Index base = static_cast<Index>(blockIdx.x) * kTile + threadIdx.x; base < total;
       base += static_cast<Index>(gridDim.x) * kTile) {
    Unit<V, kNeox> units[kUnits];
#pragma unroll
    for (int j = 0; j < kUnits; ++j) {
      const Index u = base + static_cast<Index>(j) * kThreads;
      if (u < total) units[j].load(p, u);
    }
#pragma unroll
    for (int j = 0; j < kUnits; ++j) {
      if (base + static_cast<Index>(j) * kThreads < total) units[j].turn_and_store(p.half);
    }
  }
}

bool strides_ok(const int64_t (&st)[2], int vec) { return st[0] % vec == 0 && st[1] % vec == 0; }

template <class V, bool kNeox>
cudaError_t launch_typed(const RopeArgs& a, cudaStream_t stream) {
  using T = typename V::T;
  constexpr int NP = Unit<V, kNeox>::NP;
  Params<T> p;
  p.q = {a.q, a.q_out, {a.q_stride[0], a.q_stride[1]}, {a.q_out_stride[0], a.q_out_stride[1]}};
  p.k = {a.k, a.k_out, {a.k_stride[0], a.k_stride[1]}, {a.k_out_stride[0], a.k_out_stride[1]}};
  p.cos_sin = static_cast<const T*>(a.cos_sin);
  p.cs_stride = a.cos_sin_stride;
  p.heads = a.heads;
  p.half = a.head_dim / 2;
  p.units = p.half / NP;
  p.per_token = (a.heads + a.kv_heads) * p.units;
  const int64_t total = a.tokens * p.per_token;
  if (total <= 0) return cudaSuccess;
  const int64_t blocks = ceil_div(total, int64_t{kThreads} * kUnits);
  const unsigned grid = static_cast<unsigned>(blocks < 0x7fffffff ? blocks : 0x7fffffff);
  // 32-bit unit numbers when they and the loop's last step fit (a 64-bit division is ~70 instructions).
  if (total < (int64_t{1} << 31)) {
    rope_kernel<V, kNeox, uint32_t><<<grid, kThreads, 0, stream>>>(p, static_cast<uint32_t>(total));
  } else {
    rope_kernel<V, kNeox, int64_t><<<grid, kThreads, 0, stream>>>(p, total);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rope(const RopeArgs& a, cudaStream_t stream) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.heads < 0 || a.kv_heads < 0 || a.tokens < 0) {
    return cudaErrorInvalidValue;
  }
  if (static_cast<int64_t>(a.heads + a.kv_heads) * (a.head_dim / 2) >= (int64_t{1} << 31)) {
    return cudaErrorInvalidValue;  // units of one token are counted in int
  }
  const int vec = vector_width(a.dtype);
  const int half = a.head_dim / 2;
  // NeoX packs start at i0 and D/2 + i0 (i0 a multiple of VEC); GPT-J packs of x at 2 * i0 and
  // half packs of the cache at i0 and D/2 + i0 (i0 a multiple of VEC / 2).
  const bool shape_ok = a.neox ? half % vec == 0 : a.head_dim % vec == 0;
  const bool vectorized = shape_ok && aligned16(a.q) && aligned16(a.k) && aligned16(a.q_out) &&
                          aligned16(a.k_out) && aligned16(a.cos_sin) && strides_ok(a.q_stride, vec) &&
                          strides_ok(a.k_stride, vec) && strides_ok(a.q_out_stride, vec) &&
                          strides_ok(a.k_out_stride, vec) && a.cos_sin_stride % vec == 0;
  return dispatch_variant(a.dtype, vectorized, [&](auto v) {
    using V = decltype(v);
    return a.neox ? launch_typed<V, true>(a, stream) : launch_typed<V, false>(a, stream);
  });
}

}  // namespace sk
