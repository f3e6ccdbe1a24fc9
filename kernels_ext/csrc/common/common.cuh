// Building blocks shared by every kernel family: variants (dtype x vector width),
// 128-bit loads/stores, float conversions, warp/block reductions, the row-kernel
// plan (warp / block / streaming) and the pointwise "map" kernel.
//
// Only CUDA headers here: kernel .cu files must compile without PyTorch.
// PyTorch's extension build defines __CUDA_NO_HALF_OPERATORS__ and friends, so all
// conversions below go through explicit intrinsics, never operator overloads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "dtype.h"

namespace sk {

// ---------------------------------------------------------------------------
// Variants. The tag's name is what a profiler shows, e.g. softmax_rows<bf16x8, 2, false>.
// "x8" means one 128-bit access moves 8 elements; "x1" is the scalar fallback used
// when a pointer or the row length does not allow 16-byte accesses.
struct f32x4 { using T = float; static constexpr int VEC = 4; };
struct f32x1 { using T = float; static constexpr int VEC = 1; };
struct bf16x8 { using T = __nv_bfloat16; static constexpr int VEC = 8; };
struct bf16x1 { using T = __nv_bfloat16; static constexpr int VEC = 1; };
struct f16x8 { using T = __half; static constexpr int VEC = 8; };
struct f16x1 { using T = __half; static constexpr int VEC = 1; };

inline int vector_width(DType dt) { return dt == DType::kFloat32 ? 4 : 8; }
inline int element_size(DType dt) { return dt == DType::kFloat32 ? 4 : 2; }

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Calls f(variant_tag) for the dtype, vectorised or scalar.
template <class F>
cudaError_t dispatch_variant(DType dt, bool vectorized, F&& f) {
  switch (dt) {
    case DType::kFloat32: return vectorized ? f(f32x4{}) : f(f32x1{});
    case DType::kBFloat16: return vectorized ? f(bf16x8{}) : f(bf16x1{});
    case DType::kFloat16: return vectorized ? f(f16x8{}) : f(f16x1{});
  }
  return cudaErrorInvalidValue;
}

inline int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 132;
  return sms > 0 ? sms : 132;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int round_up32(int64_t a) { return static_cast<int>(ceil_div(a, 32) * 32); }

// ---------------------------------------------------------------------------
// Packs: VEC elements in one aligned register group, moved with one access.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <class V>
using PackOf = Pack<typename V::T, V::VEC>;

// Read-only (non-coherent) load of one pack; the pointer must be aligned to the pack size.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack(const T* p) {
  Pack<T, VEC> r;
  constexpr int kBytes = sizeof(T) * VEC;
  if constexpr (kBytes == 16) {
    *reinterpret_cast<uint4*>(&r) = __ldg(reinterpret_cast<const uint4*>(p));
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(&r) = __ldg(reinterpret_cast<const uint2*>(p));
  } else if constexpr (kBytes == 4) {
    *reinterpret_cast<unsigned*>(&r) = __ldg(reinterpret_cast<const unsigned*>(p));
  } else {
    static_assert(kBytes == 2, "unsupported pack size");
    *reinterpret_cast<unsigned short*>(&r) = __ldg(reinterpret_cast<const unsigned short*>(p));
  }
  return r;
}

// Plain (coherent) load: for data this same thread wrote earlier in the kernel.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack_coherent(const T* p) {
  return *reinterpret_cast<const Pack<T, VEC>*>(p);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, VEC>& v) {
  *reinterpret_cast<Pack<T, VEC>*>(p) = v;
}

// ---------------------------------------------------------------------------
// Conversions (float is the compute type of every kernel).
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

template <typename T, int VEC>
__device__ __forceinline__ void unpack(const Pack<T, VEC>& p, float (&f)[VEC]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
    // bf16 is the top half of a float: one shift or mask per element, on 32-bit words
    // (the intrinsic goes through 16-bit moves and costs registers).
    const auto* w = reinterpret_cast<const unsigned*>(p.v);
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = to_float(p.v[i]);
  }
}

// Round VEC floats into a pack; 16-bit types convert two at a time (one cvt per pair).
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> pack(const float (&f)[VEC]) {
  Pack<T, VEC> p;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
    auto* p2 = reinterpret_cast<__nv_bfloat162*>(p.v);
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) p2[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  } else if constexpr (std::is_same_v<T, __half> && VEC % 2 == 0) {
    auto* p2 = reinterpret_cast<__half2*>(p.v);
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) p2[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p.v[i] = from_float<T>(f[i]);
  }
  return p;
}

// ---------------------------------------------------------------------------
// Reductions. All in float; every thread of the group gets the result.
struct SumOp {
  __device__ __forceinline__ static float identity() { return 0.0f; }
  __device__ __forceinline__ static float apply(float a, float b) { return a + b; }
};

// NaN-propagating max, like torch.max / torch.amax.
struct MaxOp {
  __device__ __forceinline__ static float identity() { return -INFINITY; }
  __device__ __forceinline__ static float apply(float a, float b) {
    return (a > b || a != a) ? a : b;
  }
};

template <class Op>
__device__ __forceinline__ float warp_allreduce(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// blockDim.x must be a multiple of 32 and every thread must call this.
// smem: at least 32 floats. Ends with a barrier so smem can be reused at once.
template <class Op>
__device__ __forceinline__ float block_allreduce(float v, float* smem) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = warp_allreduce<Op>(v);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  // Each warp reduces the per-warp partials itself: no second broadcast needed.
  float r = lane < nwarps ? smem[lane] : Op::identity();
  r = warp_allreduce<Op>(r);
  __syncthreads();
  return r;
}

// ---------------------------------------------------------------------------
// Row kernels: a "group" of threads owns one row, either one warp (short rows,
// several rows per block) or the whole block (long rows). Vector j of a thread
// is at vector index j * size + rank, so each access instruction is coalesced.
template <bool kWarpPerRow>
struct RowGroup {
  int rank;
  int size;
  int64_t row;

  __device__ __forceinline__ static RowGroup make() {
    RowGroup g;
    if constexpr (kWarpPerRow) {
      g.rank = threadIdx.x & 31;
      g.size = 32;
      g.row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    } else {
      g.rank = threadIdx.x;
      g.size = blockDim.x;
      g.row = blockIdx.x;
    }
    return g;
  }

  template <class Op>
  __device__ __forceinline__ float allreduce(float v, float* smem) const {
    if constexpr (kWarpPerRow) {
      return warp_allreduce<Op>(v);
    } else {
      return block_allreduce<Op>(v, smem);
    }
  }
};

constexpr int kWarpRowsPerBlock = 4;  // warp-per-row kernels: 128 threads, 4 rows
constexpr int kMaxBlockThreads = 1024;
constexpr int kStreamThreads = 512;   // rows too long to keep in registers

// Launch bounds of the cached row kernels (registers: <= 80 in warp mode, <= 64 in
// block mode, which may run 1024 threads). Without an explicit minimum ptxas aimed the
// 128-thread warp-mode kernels at 2048 threads/SM (32 registers) and spilled the cache.
template <bool kWarpPerRow>
constexpr int kRowMaxThreads = kWarpPerRow ? 32 * kWarpRowsPerBlock : kMaxBlockThreads;
template <bool kWarpPerRow>
constexpr int kRowMinBlocks = kWarpPerRow ? 6 : 1;

enum class RowPlan { kWarp, kBlock, kStream };

struct RowConfig {
  RowPlan plan;
  int nv;        // packs each thread keeps in registers (kWarp / kBlock)
  int threads;   // block size
  int64_t blocks;
};

// Picks how a row of nvec packs (of vec elements each) is processed.
// Cached plans keep the row in registers: one read, one write per element.
inline RowConfig plan_rows(int64_t rows, int64_t nvec, int vec) {
  RowConfig c{};
  // Short rows: one warp per row, up to 8 packs (4 scalars) per thread, <= 1024 elements.
  const int max_warp_nv = vec > 1 ? 8 : 4;
  if (nvec <= 32 * max_warp_nv && nvec * vec <= 1024) {
    int nv = 1;
    while (nv * 32 < nvec) nv *= 2;
    c.plan = RowPlan::kWarp;
    c.nv = nv;
    c.threads = 32 * kWarpRowsPerBlock;
    c.blocks = ceil_div(rows, kWarpRowsPerBlock);
    return c;
  }
  c.blocks = rows;
  // Four 16-byte packs per thread: an 8192-wide bf16 row then takes 256 threads, and
  // 8 such blocks per SM overlap their load / reduce / write phases. At 2 packs and
  // 512 threads the same rows ran 9% slower (4 blocks per SM, costlier block-wide
  // reductions); fp32 rows of 8192 ran the same with 4 or 8 packs
  // (scripts/tune/kernel_tiles.cu, results/h200/tiles.jsonl).
  if (vec > 1 && ceil_div(nvec, 4) <= kMaxBlockThreads) {
    c.plan = RowPlan::kBlock;
    c.nv = 4;
    c.threads = round_up32(ceil_div(nvec, 4));
    return c;
  }
  if (ceil_div(nvec, 8) <= kMaxBlockThreads) {
    c.plan = RowPlan::kBlock;
    c.nv = 8;
    c.threads = round_up32(ceil_div(nvec, 8));
    return c;
  }
  c.plan = RowPlan::kStream;
  c.nv = 0;
  c.threads = kStreamThreads;
  return c;
}

template <int N>
using IntC = std::integral_constant<int, N>;

// Calls f(IntC<NV>, std::bool_constant<kWarpPerRow>) for the cached plans; the set of
// instantiations is kept small (block NV 4 or 8; scalar variants: warp NV <= 4, block NV = 8).
template <class V, class F>
cudaError_t dispatch_cached_plan(const RowConfig& c, F&& f) {
  if (c.plan == RowPlan::kWarp) {
    switch (c.nv) {
      case 1: return f(IntC<1>{}, std::true_type{});
      case 2: return f(IntC<2>{}, std::true_type{});
      case 4: return f(IntC<4>{}, std::true_type{});
    }
    if constexpr (V::VEC > 1) {
      if (c.nv == 8) return f(IntC<8>{}, std::true_type{});
    }
  } else if (c.plan == RowPlan::kBlock) {
    if constexpr (V::VEC > 1) {
      switch (c.nv) {
        case 4: return f(IntC<4>{}, std::false_type{});
        case 8: return f(IntC<8>{}, std::false_type{});
      }
    } else {
      if (c.nv == 8) return f(IntC<8>{}, std::false_type{});
    }
  }
  return cudaErrorInvalidValue;
}

// Row kernels vectorise when every pointer is 16-byte aligned and rows are whole packs.
inline bool rows_vectorizable(DType dt, int64_t cols, std::initializer_list<const void*> ptrs) {
  if (cols % vector_width(dt) != 0) return false;
  for (const void* p : ptrs) {
    if (p != nullptr && !aligned16(p)) return false;
  }
  return true;
}

// A row kept in registers as raw packs (converted to float on use, so a 1024-thread
// block holding 8 packs per thread still fits in 64 registers).
template <class V, int NV>
struct RowCache {
  using T = typename V::T;
  static constexpr int VEC = V::VEC;
  Pack<T, VEC> p[NV];

  template <class G>
  __device__ __forceinline__ static bool valid(const G& g, int j, int nvec) {
    return j * g.size + g.rank < nvec;
  }
  template <class G>
  __device__ __forceinline__ static int offset(const G& g, int j) {
    return (j * g.size + g.rank) * VEC;
  }

  template <class G>
  __device__ __forceinline__ void load(const T* row, const G& g, int nvec) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      if (valid(g, j, nvec)) p[j] = load_pack<T, VEC>(row + offset(g, j));
    }
  }

  // acc = f(acc, x) over this thread's cached elements, in order (the row statistics of
  // softmax and the norms: max, sum, sum of squared deviations).
  template <class G, class F>
  __device__ __forceinline__ float fold(const G& g, int nvec, float acc, F f) const {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      if (valid(g, j, nvec)) {
        float x[VEC];
        unpack<T, VEC>(p[j], x);
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc = f(acc, x[i]);
      }
    }
    return acc;
  }
};

// ---------------------------------------------------------------------------
// Pointwise map: out[i] = Op(in0[i] [, in1[i]]).
//
// A MapTile is the work of one block: kThreads threads, each loading kPacks packs per
// input (all issued before any is used) and writing kPacks packs; kResident threads
// per SM set the register cap (65536 / kResident). One tile per block, as many blocks
// as tiles. Measured on the H200 (scripts/tune/kernel_tiles.cu, results/h200/tiles*):
// - one tile per block ran 7-13% faster than a grid-stride loop over one resident
//   wave; L2 streaming hints and coherent loads changed nothing;
// - cheap ops run fastest with the smallest tiles at full occupancy (one pack per input
//   per thread, 128-thread blocks, 2048 threads per SM: 3-4% over 8 packs at 1024);
// - ops whose arithmetic per pack is long (Op::kCostly: erf GELU) need independent
//   packs in flight to hide it: fp32 2 per thread at full occupancy; 16-bit (8
//   elements a pack) 8 per thread at 1024 threads, ~20% faster than 1 per thread.
// The n % VEC tail is done by the first threads of block 0.
//
// The most threads one SM holds, for the architecture being compiled (compute
// capability 7.5: 1024; 8.6, 8.7, 8.9, 12.x: 1536; 8.0, 9.0, 10.x: 2048), so a tile's
// register cap is one the SM can honour (ptxas ignores a larger one, with a warning).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
constexpr int kMaxThreadsPerSm = 1024;
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || \
                                 __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
constexpr int kMaxThreadsPerSm = 1536;
#else
constexpr int kMaxThreadsPerSm = 2048;
#endif

template <int Threads, int Packs, int ResidentThreads>
struct MapTile {
  static constexpr int kThreads = Threads;
  static constexpr int kPacks = Packs;
  static constexpr int kResident = ResidentThreads;
  static constexpr int kMinBlocks =
      (ResidentThreads < kMaxThreadsPerSm ? ResidentThreads : kMaxThreadsPerSm) / Threads;
  static_assert(kMinBlocks >= 1, "a block cannot exceed the resident threads");
};

using MapTileCheap = MapTile<128, 1, 2048>;
using MapTileCostly32 = MapTile<128, 2, 2048>;
using MapTileCostly16 = MapTile<256, 8, 1024>;
// 16-bit costly ops on tensors that would not fill one wave of MapTileCostly16
// (1024 x 1024 bf16: 64 blocks for 132 SMs): quarter-size tiles, 15% faster there.
using MapTileCostly16Small = MapTile<128, 4, 1024>;

// Op::kCostly, false when an op does not say.
template <class Op, class = void>
struct IsCostly : std::false_type {};
template <class Op>
struct IsCostly<Op, std::void_t<decltype(Op::kCostly)>> : std::bool_constant<Op::kCostly> {};

template <typename T, int NIN>
struct MapArgs {
  const T* in[NIN];
  T* out;
  int64_t n;
};

// Op::apply<kLowPrecision>(float...) -> float. kLowPrecision is true for 16-bit
// outputs, where an op may use a cheaper approximation whose error is far below
// one output ulp.
template <class Op, class V, int NIN>
__device__ __forceinline__ float map_apply(const float (&a)[NIN]) {
  constexpr bool kLow = sizeof(typename V::T) < 4;
  if constexpr (NIN == 1) {
    return Op::template apply<kLow>(a[0]);
  } else {
    return Op::template apply<kLow>(a[0], a[1]);
  }
}

// One tile: kPacks packs per input at base + u * kThreads, loaded first, then mapped.
template <class Op, class V, int NIN, class Tile>
__device__ __forceinline__ void map_tile(const MapArgs<typename V::T, NIN>& args, int64_t base,
                                         int64_t nvec) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  constexpr int U = Tile::kPacks;
  Pack<T, VEC> in[U][NIN];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t iv = base + static_cast<int64_t>(u) * Tile::kThreads;
    if (iv < nvec) {
#pragma unroll
      for (int k = 0; k < NIN; ++k) in[u][k] = load_pack<T, VEC>(args.in[k] + iv * VEC);
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t iv = base + static_cast<int64_t>(u) * Tile::kThreads;
    if (iv < nvec) {
      float f[NIN][VEC];
#pragma unroll
      for (int k = 0; k < NIN; ++k) unpack<T, VEC>(in[u][k], f[k]);
      float r[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        float a[NIN];
#pragma unroll
        for (int k = 0; k < NIN; ++k) a[k] = f[k][i];
        r[i] = map_apply<Op, V, NIN>(a);
      }
      store_pack<T, VEC>(args.out + iv * VEC, pack<T, VEC>(r));
    }
  }
}

template <class Op, class V, int NIN, class Tile>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    map_kernel(MapArgs<typename V::T, NIN> args) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  constexpr int64_t kTile = static_cast<int64_t>(Tile::kThreads) * Tile::kPacks;
  const int64_t nvec = args.n / VEC;
  // One pass, unless the tensor has more than 2^31 - 1 tiles (the grid's limit).
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x; base < nvec;
       base += static_cast<int64_t>(gridDim.x) * kTile) {
    map_tile<Op, V, NIN, Tile>(args, base, nvec);
  }
  if (blockIdx.x == 0) {
    const int64_t t = nvec * VEC + threadIdx.x;  // n % VEC < kThreads elements
    if (t < args.n) {
      float a[NIN];
#pragma unroll
      for (int k = 0; k < NIN; ++k) a[k] = to_float(args.in[k][t]);
      args.out[t] = from_float<T>(map_apply<Op, V, NIN>(a));
    }
  }
}

template <class Op, class V, int NIN, class Tile>
cudaError_t launch_map_tile(const MapArgs<typename V::T, NIN>& args, cudaStream_t stream) {
  constexpr int64_t kTile = static_cast<int64_t>(Tile::kThreads) * Tile::kPacks;
  int64_t blocks = ceil_div(args.n / V::VEC, kTile);
  if (blocks < 1) blocks = 1;  // the scalar tail alone
  if (blocks > 0x7fffffff) blocks = 0x7fffffff;
  map_kernel<Op, V, NIN, Tile><<<static_cast<unsigned>(blocks), Tile::kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

// Tile = void picks the measured tile for the op, dtype and size; the tuning bench
// passes its own.
template <class Op, int NIN, class Tile = void>
cudaError_t launch_map(DType dt, const void* const (&in)[NIN], void* out, int64_t n,
                       cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  bool vectorized = aligned16(out);
  for (int k = 0; k < NIN; ++k) vectorized = vectorized && aligned16(in[k]);
  return dispatch_variant(dt, vectorized, [&](auto v) {
    using V = decltype(v);
    using T = typename V::T;
    MapArgs<T, NIN> args;
    for (int k = 0; k < NIN; ++k) args.in[k] = static_cast<const T*>(in[k]);
    args.out = static_cast<T*>(out);
    args.n = n;
    if constexpr (!std::is_void_v<Tile>) {
      return launch_map_tile<Op, V, NIN, Tile>(args, stream);
    } else if constexpr (!IsCostly<Op>::value) {
      return launch_map_tile<Op, V, NIN, MapTileCheap>(args, stream);
    } else if constexpr (sizeof(T) == 4) {
      return launch_map_tile<Op, V, NIN, MapTileCostly32>(args, stream);
    } else {
      using Big = MapTileCostly16;
      const int64_t wave = static_cast<int64_t>(sm_count()) * (Big::kResident / Big::kThreads);
      const int64_t tiles = ceil_div(n / V::VEC, int64_t{Big::kThreads} * Big::kPacks);
      if (tiles >= wave) return launch_map_tile<Op, V, NIN, Big>(args, stream);
      return launch_map_tile<Op, V, NIN, MapTileCostly16Small>(args, stream);
    }
  });
}

}  // namespace sk
