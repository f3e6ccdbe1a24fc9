// The pointwise map kernel: out[i] = Op(in0[i] [, in1[i] ...]), and SK_MAP_OP, which
// turns a functor into the launcher an op table entry with `impl: map` calls.
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
//   elements a pack) 8 per thread at 1024 threads, ~20% faster than 1 per thread;
// - a tensor one wave of 256-thread, one-pack tiles covers (1024 x 1024 and smaller) runs
//   fastest with that tile whatever the op (MapTileOneWave).
// The n % VEC tail is done by the first threads of block 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "arch.cuh"
#include "convert.cuh"
#include "dtype.h"
#include "grid.cuh"
#include "op_io.h"
#include "pack.cuh"

namespace sk {

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
// Any op on a tensor that one wave of these tiles covers (1024 x 1024 fp32: 1,024 blocks for
// 132 x 8 slots): half the blocks of MapTileCheap to launch and retire, every op 0-7% faster
// there than its size-blind tile (scripts/tune/kernel_tiles.cu small, L2 flushed,
// results/h200/issue15/2026-12-03).
using MapTileOneWave = MapTile<256, 1, 2048>;

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

// The measured tile for the op, dtype and size.
template <class Op, class V, int NIN>
cudaError_t launch_map_measured(const MapArgs<typename V::T, NIN>& args, cudaStream_t stream) {
  using One = MapTileOneWave;
  const int64_t packs = args.n / V::VEC;
  const int64_t sms = sm_count();
  const int64_t one_wave = sms * (One::kResident / One::kThreads);
  if (ceil_div(packs, int64_t{One::kThreads}) <= one_wave) {
    return launch_map_tile<Op, V, NIN, One>(args, stream);
  }
  if constexpr (!IsCostly<Op>::value) {
    return launch_map_tile<Op, V, NIN, MapTileCheap>(args, stream);
  } else if constexpr (sizeof(typename V::T) == 4) {
    return launch_map_tile<Op, V, NIN, MapTileCostly32>(args, stream);
  } else {
    using Big = MapTileCostly16;
    const int64_t wave = sms * (Big::kResident / Big::kThreads);
    if (ceil_div(packs, int64_t{Big::kThreads} * Big::kPacks) >= wave) {
      return launch_map_tile<Op, V, NIN, Big>(args, stream);
    }
    return launch_map_tile<Op, V, NIN, MapTileCostly16Small>(args, stream);
  }
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
    } else {
      return launch_map_measured<Op, V, NIN>(args, stream);
    }
  });
}

// The launcher of an `impl: map` op: the generated binding has checked the inputs (one
// shape, one dtype, contiguous, one device) and allocated the output.
template <class Op, int NIN>
cudaError_t launch_map_op(const MapIO<NIN>& io, cudaStream_t stream) {
  return launch_map<Op, NIN>(io.dtype, io.in, io.out, io.n, stream);
}

}  // namespace sk

// Defines the launcher of the table op NAME (`impl: map`, NIN tensor arguments) from the
// functor OP: cudaError_t sk::ops::NAME(const sk::MapIO<NIN>&, cudaStream_t), the
// function the generated binding declares and calls. Use it at global scope, after OP.
#define SK_MAP_OP(NAME, OP, NIN)                                          \
  namespace sk::ops {                                                    \
  cudaError_t NAME(const ::sk::MapIO<NIN>& io, cudaStream_t stream) {    \
    return ::sk::launch_map_op<OP, NIN>(io, stream);                     \
  }                                                                      \
  }
