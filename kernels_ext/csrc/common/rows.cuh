// Row kernels: the machinery softmax, the norms and the row reductions share.
//
// A "group" of threads owns one row, either one warp (short rows, several rows per
// block) or the whole block (long rows). plan_rows picks the group and how many packs
// each thread keeps in registers for a shape; dispatch_cached_plan instantiates the
// kernel for that plan; RowCache holds a thread's share of a row as raw packs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "convert.cuh"
#include "dtype.h"
#include "grid.cuh"
#include "pack.cuh"
#include "reduce.cuh"

namespace sk {

// Vector j of a thread is at vector index j * size + rank, so each access instruction is
// coalesced.
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

}  // namespace sk
