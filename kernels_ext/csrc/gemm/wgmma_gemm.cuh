// The Hopper GEMM kernel template shared by hgemm_wgmma, fp8_wgmma and linear_residual:
// C[M,N] = A[M,K] @ W[N,K]^T (+ R), fp32 accumulation, one CTA = one producer warpgroup and
// kConsumers = BM/64 math warpgroups (384 threads for BM = 128).
//
//   producer (warpgroup 0, one thread, 40 registers): for every tile this CTA owns, for every
//     k-block: wait until the ring stage is empty, announce its bytes on the stage's `full`
//     barrier, TMA-load the A box [BM x 128 bytes] and the W box [BN x 128 bytes] (with a
//     2-CTA cluster, each CTA loads half of W's box and multicasts it to both).
//   consumers (warpgroups 1.., 232 registers): consumer c owns rows 64c..64c+63 of the tile and
//     all BN columns: per k-block, 4 wgmma k-steps (m64 n{WG_N} k16 for 16-bit types, k32 for
//     fp8), then release the stage once its batch is complete (one arrival per warp on the
//     `empty` barrier of every CTA of the cluster; see kMmaInFlight for when). fp8 promotes:
//     each k-block's product goes into a temporary
//     accumulator that is added into the fp32 result (the tensor core's fp8 accumulation keeps
//     fewer mantissa bits), in BN/WG_N column slices so the temporary stays small.
//   epilogue: registers -> bf16/fp16 -> stmatrix into a 128B-swizzled staging tile -> TMA store
//     (clipped at the matrix edge), in passes of EPI_COLS columns; or direct global stores
//     (any N). linear_residual TMA-loads R's tile into the staging buffer while the mainloop
//     runs, and adds it in fp32 before rounding.
//
// The grid is persistent: one CTA per SM (cluster pairs), walking a grouped tile order so that
// the CTAs in flight share A and W panels in L2. Both CTAs of a cluster walk the same
// sequence (their tiles differ in M), so their pipelines stay in lock-step.
//
// Pipeline invariants (mbarrier parities, see tile/mbarrier.cuh): stage s of round r is
// full[s] phase r and empty[s] phase r; the producer waits empty with parity (r & 1) ^ 1, the
// consumers full with parity r & 1. empty[s] expects kConsumers * 4 * kCluster arrivals.
// full[s] expects 1 arrival (the local producer's arrive_expect_tx of the whole stage) plus
// kStageBytes of TMA transactions, from both CTAs' multicasts when clustered.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../tile/cluster.cuh"
#include "../tile/mbarrier.cuh"
#include "../tile/stmatrix.cuh"
#include "../tile/swizzle.cuh"
#include "../tile/tma.cuh"
#include "../tile/warpgroup.cuh"
#include "../tile/wgmma.cuh"
#include "gemm.h"

namespace sk::gemm {

using fp8_e4m3 = __nv_fp8_e4m3;

// ------------------------------------------------------------------------------ element types

template <class T>
struct ElemTraits;
template <>
struct ElemTraits<__nv_bfloat16> {
  static constexpr CUtensorMapDataType kTma = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  static constexpr int kBytes = 2;
};
template <>
struct ElemTraits<__half> {
  static constexpr CUtensorMapDataType kTma = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  static constexpr int kBytes = 2;
};
template <>
struct ElemTraits<fp8_e4m3> {
  static constexpr CUtensorMapDataType kTma = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  static constexpr int kBytes = 1;
};

// Two floats -> one b32 of two 16-bit values (lo in the low half), round to nearest even.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
  } else {
    return __half22float2(*reinterpret_cast<__half2*>(&v));
  }
}

template <class T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return __half2float(v);
  }
}

template <class T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return __float2half_rn(v);
  }
}

// ---------------------------------------------------------------------------- configuration

enum class Epilogue { kTmaStore, kDirect };

template <class TIn_, class TOut_, int BM_, int BN_, int WGN_, int STAGES_, int CLUSTER_,
          int EPI_COLS_, Epilogue EPI_, bool RESIDUAL_, bool PROMOTE_>
struct WgmmaGemmConfig {
  using TIn = TIn_;
  using TOut = TOut_;
  static constexpr int BM = BM_;
  static constexpr int BN = BN_;
  static constexpr int WGN = WGN_;            // N of one wgmma instruction
  static constexpr int kStages = STAGES_;
  static constexpr int kCluster = CLUSTER_;
  static constexpr int kEpiCols = EPI_COLS_;  // columns staged per epilogue pass
  static constexpr Epilogue kEpilogue = EPI_;
  static constexpr bool kResidual = RESIDUAL_;
  static constexpr bool kPromote = PROMOTE_;  // fp8: promote each k-block into fp32

  static constexpr int kInBytes = ElemTraits<TIn>::kBytes;
  static constexpr int kBK = 128 / kInBytes;  // k-block: one 128-byte swizzled row per operand row
  static constexpr int kKSteps = 4;           // wgmma k-steps per k-block (32 bytes each)
  static constexpr int kConsumers = BM / 64;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kSlices = BN / WGN;    // wgmma column slices per consumer
  static constexpr int kAccPerSlice = WGN / 2;
  static constexpr int kAcc = BN / 2;         // fp32 accumulators per thread

  static constexpr int kABytes = BM * 128;    // one stage of A
  static constexpr int kBBytes = BN * 128;    // one stage of W
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kPasses = kEpilogue == Epilogue::kTmaStore ? BN / kEpiCols : 0;
  static constexpr int kBoxesPerPass = kEpiCols / 64;
  static constexpr int kStagingPerConsumer =
      kEpilogue == Epilogue::kTmaStore ? 64 * kEpiCols * 2 : 0;
  static constexpr int kStagingBytes = kStagingPerConsumer * kConsumers;
  static constexpr int kBarrierBytes = 8 * (2 * kStages + kConsumers);
  static constexpr int kSmemBytes =
      1024 /* alignment slack */ + kStages * kStageBytes + kStagingBytes + kBarrierBytes;

  // wgmma batches a consumer leaves in flight before releasing a stage: with 4+ stages one
  // (the tensor core always has the next k-block queued; the stage goes back one k-block
  // later), with 3 none (the stage goes back at once, so two stages stay ahead of the math;
  // the other consumer warpgroup's batch covers the wait).
  static constexpr int kMmaInFlight = kStages >= 4 ? 1 : 0;

  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;   // 128 * 40 + 256 * 232 <= 64K registers

  static_assert(BM == 128, "BM is 128: two math warpgroups of 64 rows");
  static_assert(BN % WGN == 0 && WGN % 16 == 0 && WGN <= 256, "BN must be a multiple of WGN");
  static_assert(kPromote || WGN == BN, "without promotion one wgmma spans the tile's columns");
  static_assert(!kPromote || std::is_same_v<TIn, fp8_e4m3>, "promotion is for fp8");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
  static_assert((BN / kCluster) % 8 == 0, "each CTA's share of W's box is whole swizzle atoms");
  static_assert(kEpilogue == Epilogue::kDirect || (BN % kEpiCols == 0 && kEpiCols % 64 == 0),
                "epilogue passes are whole 64-column boxes");
  static_assert(!kResidual || kEpilogue == Epilogue::kDirect || kPasses == 1,
                "the residual is prefetched into a single-pass staging tile");
  static_assert(kSmemBytes <= 232448, "shared memory per block exceeds the 227 KiB of sm_90");
  static_assert(std::is_same_v<TOut, __nv_bfloat16> || std::is_same_v<TOut, __half>,
                "outputs are bf16 or fp16");
};

struct KernelArgs {
  int m, n, k;
  int num_kb;          // k-blocks
  int tiles_n;         // BN-wide column tiles
  int cluster_rows;    // ceil(tiles_m / kCluster): rows of cluster tiles
  int group;           // cluster rows per group of the tile order
  int total;           // cluster tiles
  void* c;             // direct epilogue
  int64_t ldc;
  const void* r;
  int64_t ldr;
  const float* scale_a;  // fp8 only
  const float* scale_b;
};

// The grouped ("swizzled") tile order: tiles sweep `group` cluster rows x all columns, column by
// column, so the CTAs in flight read few A panels and few W panels at a time.
__device__ __forceinline__ void tile_coords(const KernelArgs& p, int t, int& cluster_row,
                                            int& col) {
  const int per_group = p.group * p.tiles_n;
  const int g = t / per_group;
  const int first = g * p.group;
  const int rows = min(p.cluster_rows - first, p.group);
  const int local = t - g * per_group;
  cluster_row = first + local % rows;
  col = local / rows;
}

// ------------------------------------------------------------------------------------ kernel

template <class Cfg>
__device__ __forceinline__ void producer_loop(const CUtensorMap* map_a, const CUtensorMap* map_b,
                                              const KernelArgs& p, uint8_t* sA, uint8_t* sB,
                                              uint64_t* full, uint64_t* empty, uint32_t rank,
                                              int cluster, int clusters) {
  tile::tma_prefetch_descriptor(map_a);
  tile::tma_prefetch_descriptor(map_b);
  constexpr int kBRowsPerCta = Cfg::BN / Cfg::kCluster;
  int stage = 0;
  uint32_t phase = 0;
  for (int t = cluster; t < p.total; t += clusters) {
    int crow, col;
    tile_coords(p, t, crow, col);
    const int m0 = (crow * Cfg::kCluster + static_cast<int>(rank)) * Cfg::BM;
    const int n0 = col * Cfg::BN;
    // The second CTA of a pair can own a tile wholly below the matrix (odd M-tile count): it
    // still loads and multicasts its half of W for its peer, but no A (its results are
    // discarded), so the stage then expects W's bytes only.
    const bool a_rows = m0 < p.m;
    const uint32_t bytes = a_rows ? Cfg::kStageBytes : Cfg::kStageBytes - Cfg::kABytes;
    for (int kb = 0; kb < p.num_kb; ++kb) {
      tile::mbar_wait(&empty[stage], phase ^ 1u);
      tile::mbar_arrive_expect_tx(&full[stage], bytes);
      const int k0 = kb * Cfg::kBK;
      if (a_rows) tile::tma_load_2d(sA + stage * Cfg::kABytes, map_a, &full[stage], k0, m0);
      if constexpr (Cfg::kCluster == 1) {
        tile::tma_load_2d(sB + stage * Cfg::kBBytes, map_b, &full[stage], k0, n0);
      } else {
        tile::tma_load_2d_multicast(sB + stage * Cfg::kBBytes + rank * kBRowsPerCta * 128, map_b,
                                    &full[stage], k0, n0 + static_cast<int>(rank) * kBRowsPerCta,
                                    static_cast<uint16_t>((1u << Cfg::kCluster) - 1u));
      }
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1u;
      }
    }
  }
}

// One warp's arrival on stage s's empty barrier of every CTA in the cluster.
template <class Cfg>
__device__ __forceinline__ void release_stage(uint64_t* empty, int s, int lane) {
  if constexpr (Cfg::kCluster == 1) {
    if (lane == 0) tile::mbar_arrive(&empty[s]);
  } else {
    if (lane < Cfg::kCluster) tile::mbar_arrive_cluster(&empty[s], static_cast<uint32_t>(lane));
  }
}

// The residual tile of consumer c (64 rows x BN) into its staging buffer, completing on res_bar.
template <class Cfg>
__device__ __forceinline__ void prefetch_residual(const CUtensorMap* map_r, uint8_t* staging,
                                                  uint64_t* res_bar, int m0, int n0) {
  tile::tma_store_wait_read<0>();  // the previous tile's store has finished reading the staging
  tile::mbar_arrive_expect_tx(res_bar, Cfg::kStagingPerConsumer);
#pragma unroll
  for (int b = 0; b < Cfg::kBoxesPerPass; ++b) {
    tile::tma_load_2d(staging + b * 8192, map_r, res_bar, n0 + b * 64, m0);
  }
}

// Registers -> staging (stmatrix, 128B swizzle) -> TMA store, in kPasses passes of kEpiCols.
template <class Cfg>
__device__ __forceinline__ void epilogue_tma(float (&acc)[Cfg::kAcc], const CUtensorMap* map_c,
                                             uint8_t* staging, uint64_t* res_bar,
                                             uint32_t res_parity, int m0, int n0, int c, int t128,
                                             float scale) {
  using TOut = typename Cfg::TOut;
  const int warp = t128 / 32, lane = t128 % 32;
  const int mi = lane / 8;                                  // which 8x8 matrix this lane addresses
  const uint32_t row = warp * 16 + (mi & 1) * 8 + (lane & 7);
  const uint32_t base = tile::smem_addr(staging);
  const int bar_id = tile::kFirstFreeBarrier + c;
#pragma unroll
  for (int pass = 0; pass < Cfg::kPasses; ++pass) {
    if constexpr (Cfg::kResidual) {
      tile::mbar_wait(res_bar, res_parity);   // prefetched during the mainloop
    } else {
      if (t128 == 0) tile::tma_store_wait_read<0>();
      tile::named_barrier_sync(bar_id, 128);
    }
#pragma unroll
    for (int jp = 0; jp < Cfg::kEpiCols / 16; ++jp) {
      const int j = pass * (Cfg::kEpiCols / 8) + 2 * jp;    // first of two n8 blocks
      const uint32_t col = static_cast<uint32_t>((2 * jp + (mi >> 1)) * 8);
      const uint32_t addr = base + (col / 64) * 8192 + tile::swizzled_offset<128, 2>(row, col % 64);
      float v[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[i] = acc[4 * j + i] * scale;
        v[4 + i] = acc[4 * (j + 1) + i] * scale;
      }
      if constexpr (Cfg::kResidual) {
        uint32_t q[4];
        tile::ldmatrix_x4_b16(addr, q[0], q[1], q[2], q[3]);
        // q[0] = top of block j, q[1] = bottom of j, q[2] = top of j+1, q[3] = bottom of j+1
        const float2 r0 = unpack2<TOut>(q[0]), r1 = unpack2<TOut>(q[1]);
        const float2 r2 = unpack2<TOut>(q[2]), r3 = unpack2<TOut>(q[3]);
        v[0] += r0.x; v[1] += r0.y; v[2] += r1.x; v[3] += r1.y;
        v[4] += r2.x; v[5] += r2.y; v[6] += r3.x; v[7] += r3.y;
      }
      tile::stmatrix_x4(addr, pack2<TOut>(v[0], v[1]), pack2<TOut>(v[2], v[3]),
                        pack2<TOut>(v[4], v[5]), pack2<TOut>(v[6], v[7]));
    }
    tile::fence_proxy_async();
    tile::named_barrier_sync(bar_id, 128);
    if (t128 == 0) {
#pragma unroll
      for (int b = 0; b < Cfg::kBoxesPerPass; ++b) {
        tile::tma_store_2d(map_c, staging + b * 8192, n0 + pass * Cfg::kEpiCols + b * 64, m0);
      }
      tile::tma_store_commit();
    }
  }
}

// Registers -> global, masked at the matrix edge; 4-byte pair stores where N and C allow.
template <class Cfg>
__device__ __forceinline__ void epilogue_direct(const float (&acc)[Cfg::kAcc], const KernelArgs& p,
                                                int m0, int n0, int t128, float scale) {
  using TOut = typename Cfg::TOut;
  TOut* c = static_cast<TOut*>(p.c);
  const TOut* r = static_cast<const TOut*>(p.r);
  const int warp = t128 / 32, lane = t128 % 32;
  const bool pairs = (p.n % 2 == 0) && (p.ldc % 2 == 0) &&
                     (reinterpret_cast<uintptr_t>(c) % 4 == 0) &&
                     (!Cfg::kResidual ||
                      ((p.ldr % 2 == 0) && (reinterpret_cast<uintptr_t>(r) % 4 == 0)));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = m0 + warp * 16 + lane / 4 + 8 * h;
    if (row >= p.m) continue;
    TOut* crow = c + static_cast<int64_t>(row) * p.ldc;
    const TOut* rrow = Cfg::kResidual ? r + static_cast<int64_t>(row) * p.ldr : nullptr;
#pragma unroll
    for (int j = 0; j < Cfg::BN / 8; ++j) {
      const int col = n0 + 8 * j + 2 * (lane % 4);
      float v0 = acc[4 * j + 2 * h] * scale, v1 = acc[4 * j + 2 * h + 1] * scale;
      if (pairs) {
        if (col < p.n) {
          if constexpr (Cfg::kResidual) {
            const float2 rv = unpack2<TOut>(*reinterpret_cast<const uint32_t*>(rrow + col));
            v0 += rv.x;
            v1 += rv.y;
          }
          *reinterpret_cast<uint32_t*>(crow + col) = pack2<TOut>(v0, v1);
        }
      } else {
        if (col < p.n) {
          if constexpr (Cfg::kResidual) v0 += to_float(rrow[col]);
          crow[col] = from_float<TOut>(v0);
        }
        if (col + 1 < p.n) {
          if constexpr (Cfg::kResidual) v1 += to_float(rrow[col + 1]);
          crow[col + 1] = from_float<TOut>(v1);
        }
      }
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void consumer_loop(const CUtensorMap* map_c, const CUtensorMap* map_r,
                                              const KernelArgs& p, uint8_t* sA, uint8_t* sB,
                                              uint8_t* sC, uint64_t* full, uint64_t* empty,
                                              uint64_t* res_full, uint32_t rank, int cluster,
                                              int clusters, int c) {
  using TIn = typename Cfg::TIn;
  const int t128 = static_cast<int>(threadIdx.x) % 128;
  const int lane = t128 % 32;
  uint8_t* staging = sC + c * Cfg::kStagingPerConsumer;
  if (t128 == 0 && Cfg::kEpilogue == Epilogue::kTmaStore) {
    tile::tma_prefetch_descriptor(map_c);
    if (Cfg::kResidual) tile::tma_prefetch_descriptor(map_r);
  }
  // fp8's per-tensor scales (device scalars, read once; a missing one is 1).
  const float scale = (p.scale_a != nullptr ? __ldg(p.scale_a) : 1.0f) *
                      (p.scale_b != nullptr ? __ldg(p.scale_b) : 1.0f);

  float acc[Cfg::kAcc];
  float tmp[Cfg::kPromote ? Cfg::kAccPerSlice : 1];
  int stage = 0;
  uint32_t phase = 0;
  uint32_t res_parity = 0;   // phase of res_full[c]: one per residual tile actually loaded
  const int prefetch_kb = p.num_kb > 1 ? 1 : 0;
  for (int t = cluster; t < p.total; t += clusters) {
    int crow, col;
    tile_coords(p, t, crow, col);
    const int m0 = (crow * Cfg::kCluster + static_cast<int>(rank)) * Cfg::BM + c * 64;
    const int n0 = col * Cfg::BN;
    // Rows wholly below the matrix: the mainloop still runs (the stages must be consumed and
    // released in step with the producer), the residual and the epilogue are skipped.
    const bool live = m0 < p.m;
    if constexpr (Cfg::kPromote) {
#pragma unroll
      for (int i = 0; i < Cfg::kAcc; ++i) acc[i] = 0.0f;
    }
    int prev = 0;
    for (int kb = 0; kb < p.num_kb; ++kb) {
      tile::mbar_wait(&full[stage], phase);
      const uint64_t da = tile::desc_k_major<128>(sA + stage * Cfg::kABytes + c * 64 * 128);
      const uint64_t db = tile::desc_k_major<128>(sB + stage * Cfg::kBBytes);
      if constexpr (!Cfg::kPromote) {
        tile::fence_accumulators(acc);
        tile::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
          tile::wgmma_ss<TIn, Cfg::BN>(acc, tile::desc_advance(da, 32 * kk),
                                 tile::desc_advance(db, 32 * kk), (kb > 0 || kk > 0) ? 1 : 0);
        }
        tile::wgmma_commit();
        tile::fence_accumulators(acc);
        tile::wgmma_wait<Cfg::kMmaInFlight>();
        if constexpr (Cfg::kMmaInFlight == 0) {
          release_stage<Cfg>(empty, stage, lane);
        } else if (kb > 0) {
          release_stage<Cfg>(empty, prev, lane);   // the previous k-block's batch is complete
        }
      } else {
#pragma unroll
        for (int sl = 0; sl < Cfg::kSlices; ++sl) {
          tile::fence_accumulators(tmp);
          tile::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
            tile::wgmma_ss<TIn, Cfg::WGN>(tmp, tile::desc_advance(da, 32 * kk),
                                    tile::desc_advance(db, sl * Cfg::WGN * 128 + 32 * kk),
                                    kk > 0 ? 1 : 0);
          }
          tile::wgmma_commit();
          tile::wgmma_wait<0>();
          tile::fence_accumulators(tmp);
          if (sl == Cfg::kSlices - 1) release_stage<Cfg>(empty, stage, lane);
#pragma unroll
          for (int i = 0; i < Cfg::kAccPerSlice; ++i) acc[sl * Cfg::kAccPerSlice + i] += tmp[i];
        }
      }
      if constexpr (Cfg::kResidual && Cfg::kEpilogue == Epilogue::kTmaStore) {
        if (live && kb == prefetch_kb && t128 == 0) {
          prefetch_residual<Cfg>(map_r, staging, &res_full[c], m0, n0);
        }
      }
      prev = stage;
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1u;
      }
    }
    if constexpr (!Cfg::kPromote) {
      tile::wgmma_wait<0>();
      tile::fence_accumulators(acc);
      if constexpr (Cfg::kMmaInFlight > 0) release_stage<Cfg>(empty, prev, lane);
    }
    if (!live) continue;
    if constexpr (Cfg::kEpilogue == Epilogue::kTmaStore) {
      epilogue_tma<Cfg>(acc, map_c, staging, &res_full[c], res_parity, m0, n0, c, t128, scale);
      res_parity ^= 1u;
    } else {
      epilogue_direct<Cfg>(acc, p, m0, n0, t128, scale);
    }
  }
  if (Cfg::kEpilogue == Epilogue::kTmaStore && t128 == 0) tile::tma_store_wait<0>();
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                      const __grid_constant__ CUtensorMap map_b,
                      const __grid_constant__ CUtensorMap map_c,
                      const __grid_constant__ CUtensorMap map_r, const KernelArgs p) {
#if SK_TILE_SM90A
  extern __shared__ uint8_t smem_raw[];
  // Swizzled tiles must start on 1024-byte boundaries (the 128B pattern repeat).
  uint8_t* smem = smem_raw + ((tile::kSwizzleAlign - (tile::smem_addr(smem_raw) % tile::kSwizzleAlign)) %
                              tile::kSwizzleAlign);
  uint8_t* sA = smem;
  uint8_t* sB = sA + Cfg::kStages * Cfg::kABytes;
  uint8_t* sC = sB + Cfg::kStages * Cfg::kBBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(sC + Cfg::kStagingBytes);
  uint64_t* empty = full + Cfg::kStages;
  uint64_t* res_full = empty + Cfg::kStages;

  const uint32_t rank = Cfg::kCluster > 1 ? tile::cluster_ctarank() : 0u;
  const int cluster = Cfg::kCluster > 1 ? static_cast<int>(tile::cluster_id_x())
                                        : static_cast<int>(blockIdx.x);
  const int clusters = Cfg::kCluster > 1 ? static_cast<int>(tile::num_clusters_x())
                                         : static_cast<int>(gridDim.x);
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      tile::mbar_init(&full[s], 1);
      tile::mbar_init(&empty[s], Cfg::kConsumers * 4 * Cfg::kCluster);
    }
    for (int c = 0; c < Cfg::kConsumers; ++c) tile::mbar_init(&res_full[c], 1);
    tile::mbar_fence_init();
  }
  if constexpr (Cfg::kCluster > 1) {
    tile::cluster_sync();   // peers' barriers are initialised before any multicast targets them
  } else {
    __syncthreads();
  }

  const int wg = tile::warpgroup_index();
  if (wg == 0) {
    tile::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      producer_loop<Cfg>(&map_a, &map_b, p, sA, sB, full, empty, rank, cluster, clusters);
    }
  } else {
    tile::setmaxnreg_inc<Cfg::kConsumerRegs>();
    consumer_loop<Cfg>(&map_c, &map_r, p, sA, sB, sC, full, empty, res_full, rank, cluster,
                       clusters, wg - 1);
  }
  if constexpr (Cfg::kCluster > 1) {
    // No CTA leaves while its peer may still multicast into it or arrive on its barriers.
    tile::cluster_sync();
  }
#endif
}

// ------------------------------------------------------------------------------------- host

inline int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How many clusters of this kernel fit on the device at once: the persistent grid's size. Not
// always SMs / cluster size: a cluster's CTAs must share a GPC, and a GPC with an odd number of
// usable SMs leaves one idle -- a grid larger than what fits would run its last clusters as a
// second, nearly empty wave. The answer is a property of the device and the kernel, so it is
// memoised per device (0 = not asked yet), in one table per configuration: keyed on Cfg, not on
// the kernel's type, which every configuration shares (same parameters). Keyed on the type, the
// first configuration a process launched fixed every later one's grid: after a 2-CTA kernel
// (66 clusters), an unpaired one ran 66 CTAs on 132 SMs at 0.56x; after an unpaired one, a
// 2-CTA grid asked for 264 CTAs and ran as two waves (issue 13, scripts/tune/gemm_timing_probe.py).
template <class Cfg, class Kernel>
int resident_clusters(Kernel kernel, const cudaLaunchConfig_t* cfg, int cluster) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> memo[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (dev < kMaxDevices && memo[dev].load() > 0) return memo[dev].load();
  const int sms = sm_count();
  int n = sms / cluster;   // the fallback when the occupancy query is unavailable
  if (cluster > 1) {
    cudaLaunchConfig_t probe = *cfg;
    probe.gridDim = dim3(static_cast<unsigned>(n * cluster), 1, 1);
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, kernel, &probe) == cudaSuccess && fit > 0) {
      n = fit < n ? fit : n;
    } else {
      (void)cudaGetLastError();   // the query's failure is not the launch's
    }
  }
  if (dev < kMaxDevices && n > 0) memo[dev].store(n);
  return n;
}

// Host-side checks shared by the wgmma launchers: sizes fit the kernel's int indexing and TMA's
// 16-byte row-pitch rule (named in the message so the caller can say what to change).
inline Status check_wgmma_args(const MatmulArgs& g, int in_bytes, bool needs_c_map,
                               bool needs_r_map) {
  if (Status st = check_sizes(g); !st.ok()) return st;
  if ((g.lda * in_bytes) % 16 != 0 || (g.ldw * in_bytes) % 16 != 0) {
    return fail("TMA needs 16-byte aligned rows: K * element size (" + std::to_string(in_bytes) +
                " bytes) must be a multiple of 16, i.e. K % " + std::to_string(16 / in_bytes) +
                " == 0 (got K = " + std::to_string(g.k) + ")");
  }
  if (reinterpret_cast<uintptr_t>(g.a) % 16 != 0 || reinterpret_cast<uintptr_t>(g.w) % 16 != 0) {
    return fail("TMA needs 16-byte aligned A and W base addresses");
  }
  if (needs_c_map && ((g.ldc * 2) % 16 != 0 || reinterpret_cast<uintptr_t>(g.c) % 16 != 0)) {
    return fail("the TMA-store epilogue needs N % 8 == 0 and a 16-byte aligned C");
  }
  if (needs_r_map && ((g.ldr * 2) % 16 != 0 || reinterpret_cast<uintptr_t>(g.residual) % 16 != 0)) {
    return fail("the TMA residual load needs N % 8 == 0 and a 16-byte aligned residual");
  }
  return ok();
}

template <class Cfg>
Status run_wgmma_gemm(const MatmulArgs& g, const float* scale_a, const float* scale_b,
                      const WgmmaOptions& opt, cudaStream_t stream) {
  using TIn = typename Cfg::TIn;
  using TOut = typename Cfg::TOut;
  constexpr bool kTmaStore = Cfg::kEpilogue == Epilogue::kTmaStore;
  Status st = check_wgmma_args(g, Cfg::kInBytes, kTmaStore, kTmaStore && Cfg::kResidual);
  if (!st.ok()) return st;

  CUtensorMap map_a, map_b, map_c, map_r;
  std::memset(&map_a, 0, sizeof(map_a));
  std::memset(&map_b, 0, sizeof(map_b));
  std::memset(&map_c, 0, sizeof(map_c));
  std::memset(&map_r, 0, sizeof(map_r));
  std::string err;
  if (!tile::make_tensor_map_2d(&map_a, ElemTraits<TIn>::kTma, Cfg::kInBytes, g.a, g.m, g.k, g.lda,
                                Cfg::BM, Cfg::kBK, CU_TENSOR_MAP_SWIZZLE_128B, &err)) {
    return fail("A: " + err);
  }
  if (!tile::make_tensor_map_2d(&map_b, ElemTraits<TIn>::kTma, Cfg::kInBytes, g.w, g.n, g.k, g.ldw,
                                Cfg::BN / Cfg::kCluster, Cfg::kBK, CU_TENSOR_MAP_SWIZZLE_128B,
                                &err)) {
    return fail("W: " + err);
  }
  if constexpr (kTmaStore) {
    if (!tile::make_tensor_map_2d(&map_c, ElemTraits<TOut>::kTma, 2, g.c, g.m, g.n, g.ldc, 64, 64,
                                  CU_TENSOR_MAP_SWIZZLE_128B, &err)) {
      return fail("C: " + err);
    }
    if constexpr (Cfg::kResidual) {
      if (!tile::make_tensor_map_2d(&map_r, ElemTraits<TOut>::kTma, 2, g.residual, g.m, g.n,
                                    g.ldr, 64, 64, CU_TENSOR_MAP_SWIZZLE_128B, &err)) {
        return fail("residual: " + err);
      }
    }
  }

  KernelArgs p{};
  p.m = static_cast<int>(g.m);
  p.n = static_cast<int>(g.n);
  p.k = static_cast<int>(g.k);
  p.num_kb = static_cast<int>(ceil_div64(g.k, Cfg::kBK));
  p.tiles_n = static_cast<int>(ceil_div64(g.n, Cfg::BN));
  const int tiles_m = static_cast<int>(ceil_div64(g.m, Cfg::BM));
  p.cluster_rows = (tiles_m + Cfg::kCluster - 1) / Cfg::kCluster;
  p.group = opt.group_m > 0 ? opt.group_m : 16 / Cfg::kCluster;
  p.group = p.group < p.cluster_rows ? p.group : p.cluster_rows;
  p.total = p.cluster_rows * p.tiles_n;
  p.c = g.c;
  p.ldc = g.ldc;
  p.r = g.residual;
  p.ldr = g.ldr;
  p.scale_a = scale_a;
  p.scale_b = scale_b;

  auto kernel = wgmma_gemm_kernel<Cfg>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::kSmemBytes);
  if (e != cudaSuccess) return from_cuda(e, "cudaFuncSetAttribute(shared memory)");

  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(Cfg::kThreads, 1, 1);
  cfg.dynamicSmemBytes = Cfg::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = Cfg::kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = Cfg::kCluster > 1 ? 1 : 0;
  int clusters = resident_clusters<Cfg>(kernel, &cfg, Cfg::kCluster);
  if (clusters <= 0) return fail("cannot query the device's multiprocessor count", cudaErrorNoDevice);
  if (opt.max_ctas > 0) clusters = std::max(1, opt.max_ctas / Cfg::kCluster);
  if (clusters > p.total) clusters = p.total;
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * Cfg::kCluster), 1, 1);
  e = cudaLaunchKernelEx(&cfg, kernel, map_a, map_b, map_c, map_r, p);
  return from_cuda(e, "launching the wgmma GEMM kernel");
}

}  // namespace sk::gemm
