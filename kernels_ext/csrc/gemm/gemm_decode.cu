// gemm_decode: C[M, N] = A[M, K] @ W[N, K]^T for small M (decode: a few tokens against a large
// weight). The work is reading W once (N*K*2 bytes; 128 MiB at N = K = 8192), so the kernel is
// built to keep HBM busy, not the tensor cores:
//   - swap A and B: wgmma computes D = W_tile * A^T, so W's 64-row slabs are the "M" side (m64)
//     and the problem's M (padded to MP = 16, 32 or 64) is the wgmma's N; C^T comes out in
//     registers and is written transposed.
//   - one CTA = one math warpgroup + one producer warp; 128 rows of W per CTA, streamed through
//     a 6-stage TMA ring of [128 x 64] W boxes plus the matching [MP x 64] A boxes (A is tiny and
//     stays in L2).
//   - split-K over a cluster of S CTAs (S = 1, 2, 4 or 8): CTA rank r of the cluster takes the
//     r-th K range, so ceil(N / 128) * S CTAs stream W in parallel; the S partial tiles are then
//     summed through distributed shared memory (each CTA sums a 1/S slice of the tile from all
//     peers' smem) and written once in the output dtype. No workspace, no second kernel.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "../tile/cluster.cuh"
#include "../tile/mbarrier.cuh"
#include "../tile/tma.cuh"
#include "../tile/wgmma.cuh"
#include "gemm.h"
#include "wgmma_gemm.cuh"

namespace sk::gemm {
namespace {

constexpr int kDecodeRows = 128;       // W rows per CTA (two m64 wgmma halves)
constexpr int kDecodeStages = 6;
constexpr int kDecodeThreads = 160;    // warps 0-3: the math warpgroup; warp 4: the producer

template <class T, int MP>
struct DecodeCfg {
  static constexpr int kWBytes = kDecodeRows * 128;   // one [128 x 64] W box
  static constexpr int kABytes = MP * 128;            // one [MP x 64] A box
  static constexpr int kStageBytes = kWBytes + kABytes;
  static constexpr int kReduceBytes = kDecodeRows * MP * 4;
  static constexpr int kRingBytes = kDecodeStages * kStageBytes;
  static constexpr int kSmemBytes =
      1024 + (kRingBytes > kReduceBytes ? kRingBytes : kReduceBytes) + 8 * 2 * kDecodeStages;
  static_assert(kStageBytes % 1024 == 0, "stages must keep 1024-byte alignment");
};

struct DecodeArgs {
  int m, n, num_kb;
  void* c;
  int64_t ldc;
};

template <class T, int MP>
__global__ void __launch_bounds__(kDecodeThreads, 2)
    gemm_decode_kernel(const __grid_constant__ CUtensorMap map_w,
                       const __grid_constant__ CUtensorMap map_a, const DecodeArgs p) {
#if SK_TILE_SM90A
  using Cfg = DecodeCfg<T, MP>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((tile::kSwizzleAlign - (tile::smem_addr(smem_raw) % tile::kSwizzleAlign)) %
                              tile::kSwizzleAlign);
  const int ring = Cfg::kRingBytes > Cfg::kReduceBytes ? Cfg::kRingBytes : Cfg::kReduceBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + ring);
  uint64_t* empty = full + kDecodeStages;
  float* red = reinterpret_cast<float*>(smem);   // [MP][128] partials, after the ring is drained

  const uint32_t rank = tile::cluster_ctarank();
  uint32_t split = 1;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(split));
  const int row0 = static_cast<int>(blockIdx.x / split) * kDecodeRows;   // first W row (n)
  const int per = (p.num_kb + static_cast<int>(split) - 1) / static_cast<int>(split);
  const int kb0 = static_cast<int>(rank) * per;
  const int kb1 = min(p.num_kb, kb0 + per);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kDecodeStages; ++s) {
      tile::mbar_init(&full[s], 1);
      tile::mbar_init(&empty[s], 4);   // one arrival per math warp
    }
    tile::mbar_fence_init();
  }
  __syncthreads();

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (warp == 4) {
    if (lane == 0) {
      tile::tma_prefetch_descriptor(&map_w);
      tile::tma_prefetch_descriptor(&map_a);
      const uint64_t stream_once = tile::l2_policy_evict_first();   // W is read exactly once
      int stage = 0;
      uint32_t phase = 0;
      for (int kb = kb0; kb < kb1; ++kb) {
        tile::mbar_wait(&empty[stage], phase ^ 1u);
        tile::mbar_arrive_expect_tx(&full[stage], Cfg::kStageBytes);
        uint8_t* st = smem + stage * Cfg::kStageBytes;
        tile::tma_load_2d_hint(st, &map_w, &full[stage], kb * 64, row0, stream_once);
        tile::tma_load_2d(st + Cfg::kWBytes, &map_a, &full[stage], kb * 64, 0);
        if (++stage == kDecodeStages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
  } else {
    float acc[2][MP / 2];   // per m64 half: the wgmma accumulator of D[64 x MP]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < MP / 2; ++i) acc[h][i] = 0.0f;
    }
    int stage = 0;
    uint32_t phase = 0;
    for (int kb = kb0; kb < kb1; ++kb) {
      tile::mbar_wait(&full[stage], phase);
      const uint8_t* st = smem + stage * Cfg::kStageBytes;
      const uint64_t db = tile::desc_k_major<128>(st + Cfg::kWBytes);
#pragma unroll
      for (int h = 0; h < 2; ++h) tile::fence_accumulators(acc[h]);
      tile::wgmma_fence();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint64_t da = tile::desc_k_major<128>(st + h * 64 * 128);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          tile::wgmma_ss<T, MP>(acc[h], tile::desc_advance(da, 32 * kk),
                                tile::desc_advance(db, 32 * kk), 1);
        }
      }
      tile::wgmma_commit();
      tile::wgmma_wait<0>();
#pragma unroll
      for (int h = 0; h < 2; ++h) tile::fence_accumulators(acc[h]);
      if (lane == 0) tile::mbar_arrive(&empty[stage]);
      if (++stage == kDecodeStages) {
        stage = 0;
        phase ^= 1u;
      }
    }
    // Partials to smem as red[m][n_local] (D = C^T: lane's rows are n, its columns m).
    __syncwarp();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < MP / 8; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int n_local = h * 64 + warp * 16 + lane / 4 + 8 * (q >> 1);
          const int m = 8 * j + 2 * (lane % 4) + (q & 1);
          red[m * kDecodeRows + n_local] = acc[h][4 * j + q];
        }
      }
    }
  }
  // Every CTA's partial is in its smem (the ring is drained: all loads were consumed).
  tile::cluster_sync();

  // CTA `rank` sums rows [rank * slice, (rank + 1) * slice) of the tile over the cluster.
  const int slice = kDecodeRows / static_cast<int>(split);
  T* c = static_cast<T*>(p.c);
  const uint32_t red_base = tile::smem_addr(red);
  for (int e = static_cast<int>(threadIdx.x); e < slice * MP; e += kDecodeThreads) {
    const int m = e / slice;
    const int n_local = static_cast<int>(rank) * slice + e % slice;
    const int n = row0 + n_local;
    if (m >= p.m || n >= p.n) continue;
    const uint32_t off = red_base + static_cast<uint32_t>((m * kDecodeRows + n_local) * 4);
    float sum = 0.0f;
    for (uint32_t q = 0; q < split; ++q) {
      uint32_t remote;
      float v;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(off), "r"(q));
      asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
      sum += v;
    }
    c[static_cast<int64_t>(m) * p.ldc + n] = from_float<T>(sum);
  }
  // Peers read this CTA's smem above: nobody leaves before everyone has finished reading.
  tile::cluster_sync();
#endif
}

template <class T, int MP>
Status run_decode(const MatmulArgs& g, int split, cudaStream_t stream) {
  using Cfg = DecodeCfg<T, MP>;
  CUtensorMap map_w, map_a;
  std::memset(&map_w, 0, sizeof(map_w));
  std::memset(&map_a, 0, sizeof(map_a));
  std::string err;
  if (!tile::make_tensor_map_2d(&map_w, ElemTraits<T>::kTma, 2, g.w, g.n, g.k, g.ldw, kDecodeRows,
                                64, CU_TENSOR_MAP_SWIZZLE_128B, &err)) {
    return fail("W: " + err);
  }
  if (!tile::make_tensor_map_2d(&map_a, ElemTraits<T>::kTma, 2, g.a, g.m, g.k, g.lda, MP, 64,
                                CU_TENSOR_MAP_SWIZZLE_128B, &err)) {
    return fail("A: " + err);
  }
  DecodeArgs p{};
  p.m = static_cast<int>(g.m);
  p.n = static_cast<int>(g.n);
  p.num_kb = static_cast<int>(ceil_div64(g.k, 64));
  p.c = g.c;
  p.ldc = g.ldc;
  auto kernel = gemm_decode_kernel<T, MP>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (e != cudaSuccess) return from_cuda(e, "cudaFuncSetAttribute(shared memory)");
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ceil_div64(g.n, kDecodeRows) * split), 1, 1);
  cfg.blockDim = dim3(kDecodeThreads, 1, 1);
  cfg.dynamicSmemBytes = Cfg::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(split);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  e = cudaLaunchKernelEx(&cfg, kernel, map_w, map_a, p);
  return from_cuda(e, "launching gemm_decode");
}

template <class T>
Status run_decode_dtype(const MatmulArgs& g, int split, cudaStream_t stream) {
  if (g.m <= 16) return run_decode<T, 16>(g, split, stream);
  if (g.m <= 32) return run_decode<T, 32>(g, split, stream);
  return run_decode<T, 64>(g, split, stream);
}

// The largest split that keeps to one CTA per SM (row_blocks * split <= SMs), without K ranges
// under 4 k-blocks. Measured on the H200 at N = K = 8192 (results/h200/dev/gemm_v1.txt): split 2
// (128 CTAs, one per SM) 45 us at M = 16, split 4 (256 CTAs, two per SM) 53 us, split 8 51 us;
// the same order at M = 1 and M = 64. Two CTAs per SM double the rows in flight and halve the
// bytes each row gets per visit, and HBM serves long runs of a row better than many short ones.
int pick_split(const MatmulArgs& g, int sms) {
  const int64_t row_blocks = ceil_div64(g.n, kDecodeRows);
  const int64_t num_kb = ceil_div64(g.k, 64);
  int split = 1;
  while (split < 8 && row_blocks * split * 2 <= sms && num_kb / (split * 2) >= 4) split *= 2;
  return split;
}

}  // namespace

Status launch_gemm_decode(DType dt, const MatmulArgs& args, int split_k, cudaStream_t stream) {
  Status st = require_sm90("gemm_decode");
  if (!st.ok()) return st;
  st = check_wgmma_args(args, 2, false, false);
  if (!st.ok()) return st;
  if (args.m > kDecodeMaxM) {
    return fail("gemm_decode handles M <= " + std::to_string(kDecodeMaxM) + " (got M = " +
                std::to_string(args.m) + ")");
  }
  if (split_k != 0 && split_k != 1 && split_k != 2 && split_k != 4 && split_k != 8) {
    return fail("gemm_decode: split_k must be 0 (automatic), 1, 2, 4 or 8");
  }
  const int split = split_k != 0 ? split_k : pick_split(args, sm_count());
  if (dt == DType::kBFloat16) return run_decode_dtype<__nv_bfloat16>(args, split, stream);
  if (dt == DType::kFloat16) return run_decode_dtype<__half>(args, split, stream);
  return fail("gemm_decode takes bfloat16 or float16 inputs");
}

}  // namespace sk::gemm
