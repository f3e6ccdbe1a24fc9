// sgemm_fp32: C = A @ W^T in true fp32 on the CUDA cores (no TF32).
//
// 128 x 128 block tile, 256 threads, each thread an 8 x 8 register tile: rows 4 ty + {0..3} and
// BM / 2 + 4 ty + {0..3}, columns 4 tx + {0..3} and 64 + 4 tx + {0..3}, so per k a thread reads
// two float4 of A and two of W from shared memory for 64 FMAs (A reads are warp broadcasts, W
// reads contiguous). That needs the tiles k-major in shared memory ([k][row]) while both operands
// are K-contiguous in global memory, so the copies transpose: 4-byte cp.async, a warp covering
// 8 consecutive k (one 32-byte sector) of 4 rows, which with a row pitch of BM + 4 floats
// (4 mod 32) lands its 32 words in 32 different banks. A 3-stage cp.async ring overlaps the loads
// of tile k + 2 with the math on tile k. 4-byte copies also make any K and any row pitch work
// (zero-filled past the edges), with one kernel.
//
// Block shapes (SgemmShape): 128 x 128 tiles of 256 threads, two blocks per SM (bk16, bk32), or
// 64 x 128 tiles of 128 threads, four blocks per SM, two stages (bm64): the same 8 x 8 thread
// tile and 16 warps per SM. On an H100 (docs/PERF.md, 2026-12-06) bm64's barriers stalled less
// (0.40 against 0.49 cycles per instruction) but four blocks at different points of the ~40 KB
// unrolled loop missed the instruction cache (0.55 against 0.07), so it is slower once the SMs
// are full and faster where its grid has more blocks than a 128 x 128 grid that leaves SMs empty.
//
// Loaders (SgemmConfig):
//   bk16  16-k tiles, every copy predicated and its source clamped (the kernel measured on the
//         H200: 42.1 TFLOP/s at 8192^3, 0.82x cuBLAS; its SASS issues ~220 non-FMA
//         instructions per 1024 FMAs, mostly copy addressing, which caps it near 82%)
//   bk32  32-k tiles: each row pointer serves two copies (k and k + 16, an immediate offset)
//         and tiles wholly inside the matrix copy without predicates or clamps, so the
//         overhead per FMA halves. Two blocks per SM still fit (2 x 99 KiB).
//   bm64  bk32's copies on the 64 x 128 block, two stages (50 KiB per block). Slower than bk32
//         once the SMs are full, faster where the 128 x 128 grid leaves SMs empty: auto's rule,
//         sgemm_rule.h, has the measurements.
#include <cuda_runtime.h>

#include "../tile/arch.cuh"
#include "../tile/cp_async.cuh"
#include "gemm.h"
#include "gemm_common.cuh"
#include "sgemm_rule.h"

namespace sk::gemm {
namespace {

// A block shape: kThreads threads as (kThreads / 16) x 16, each an 8 x 8 tile, over BM = kThreads / 2
// rows of A and 128 rows of W; kStages k-tiles of Loader::kBK in flight.
template <int kThreads_, int kStages_>
struct SgemmShape {
  static constexpr int kThreads = kThreads_;
  static constexpr int kStages = kStages_;
  static constexpr int kBM = kThreads / 2, kBN = 128;
  static constexpr int kPitchA = kBM + 4, kPitchW = kBN + 4;   // floats per k-row of a tile
  static constexpr int kRowStep = kThreads / 16;               // rows between a thread's copies
  static constexpr int kCopiesA = kBM / kRowStep, kCopiesW = kBN / kRowStep;   // per 16 k
  static constexpr int kMinBlocks = 64 * 1024 / (128 * kThreads);             // <= 128 registers
};

using Square = SgemmShape<256, 3>;   // 128 x 128, two blocks per SM
using Half = SgemmShape<128, 2>;     // 64 x 128, four blocks per SM

struct SgemmArgs : GemmOperands<float, float> {
  int tiles_m, tiles_n;
};

// The copies a thread makes for every 16 k of a tile: one k offset (kk) and rows kRowStep apart
// (element e = tid + kThreads i of the [rows x 16] tile has kk = e % 8 + 8 ((e / 32) % 2) -- the
// same for every i -- and row = (e / 8) % 4 + 4 (e / 64) = row0 + kRowStep i).
template <class S>
struct CopyPattern {
  const float* a;       // &A[m0 + row0][kk], row clamped into the matrix
  const float* w;       // &W[n0 + row0][kk]
  uint32_t smem_a;      // byte offset of [kk][row0] in a stage's A tile
  uint32_t smem_w;      // and in its W tile (after A's)
  uint32_t rows_a;      // bit i: row row0 + kRowStep i of A exists
  uint32_t rows_w;
  int kk;

  __device__ __forceinline__ CopyPattern(const SgemmArgs& p, int m0, int n0, int bk) {
    const int tid = static_cast<int>(threadIdx.x);
    kk = tid % 8 + 8 * ((tid / 32) % 2);
    const int row0 = (tid / 8) % 4 + 4 * (tid / 64);
    rows_a = rows_w = 0;
#pragma unroll
    for (int i = 0; i < S::kCopiesA; ++i) rows_a |= (m0 + row0 + S::kRowStep * i < p.m ? 1u : 0u) << i;
#pragma unroll
    for (int i = 0; i < S::kCopiesW; ++i) rows_w |= (n0 + row0 + S::kRowStep * i < p.n ? 1u : 0u) << i;
    a = p.a + static_cast<int64_t>(min(m0 + row0, p.m - 1)) * p.lda + kk;
    w = p.w + static_cast<int64_t>(min(n0 + row0, p.n - 1)) * p.ldw + kk;
    smem_a = static_cast<uint32_t>((kk * S::kPitchA + row0) * 4);
    smem_w = static_cast<uint32_t>((bk * S::kPitchA + kk * S::kPitchW + row0) * 4);
  }

  // The predicated copies of 16 k at k-offset koff0 (stage byte offsets: half * 16 k-rows in);
  // elements past the matrix edges are zero.
  __device__ __forceinline__ void copy16(const SgemmArgs& p, uint32_t stage, int koff0, int half) const {
    const bool in_k = koff0 + kk < p.k;
    const int koff = in_k ? koff0 : 0;
    constexpr uint32_t kStep = S::kRowStep * 4;
    const uint32_t sa = stage + smem_a + half * 16 * S::kPitchA * 4;
    const uint32_t sw = stage + smem_w + half * 16 * S::kPitchW * 4;
    const float* pa = a + koff;
    const float* pw = w + koff;
    const int64_t step_a = S::kRowStep * p.lda, step_w = S::kRowStep * p.ldw;
#pragma unroll
    for (int i = 0; i < S::kCopiesA; ++i) {
      const bool v = in_k && ((rows_a >> i) & 1u);
      tile::cp_async_4(sa + kStep * i, v ? pa : p.a, v);
      pa += step_a;
    }
#pragma unroll
    for (int i = 0; i < S::kCopiesW; ++i) {
      const bool v = in_k && ((rows_w >> i) & 1u);
      tile::cp_async_4(sw + kStep * i, v ? pw : p.w, v);
      pw += step_w;
    }
  }
};

// bk16: stage <- k-tile kt, transposed to [k][row], every copy predicated.
template <class S>
struct Loader16 {
  static constexpr int kBK = 16;
  CopyPattern<S> c;

  __device__ __forceinline__ Loader16(const SgemmArgs& p, int m0, int n0) : c(p, m0, n0, kBK) {}

  __device__ __forceinline__ void load(const SgemmArgs& p, uint32_t stage, int kt) const {
    c.copy16(p, stage, kt * kBK, 0);
  }
};

// bk32: the bk16 pattern at k = kk and kk + 16 from the same row pointers (an immediate offset).
// A tile with all its rows of both operands inside the matrix and the k-tile inside K copies
// without predicates or clamps; the others take the predicated path.
template <class S>
struct Loader32 {
  static constexpr int kBK = 32;
  CopyPattern<S> c;
  bool interior;

  __device__ __forceinline__ Loader32(const SgemmArgs& p, int m0, int n0)
      : c(p, m0, n0, kBK), interior(m0 + S::kBM <= p.m && n0 + S::kBN <= p.n) {}

  __device__ __forceinline__ void load(const SgemmArgs& p, uint32_t stage, int kt) const {
    if (interior && (kt + 1) * kBK <= p.k) {
      constexpr uint32_t kStep = S::kRowStep * 4;
      constexpr uint32_t kHalfA = 16 * S::kPitchA * 4, kHalfW = 16 * S::kPitchW * 4;
      const uint32_t sa = stage + c.smem_a, sw = stage + c.smem_w;
      const int64_t step_a = S::kRowStep * p.lda, step_w = S::kRowStep * p.ldw;
      const float* pa = c.a + kt * kBK;
      const float* pw = c.w + kt * kBK;
#pragma unroll
      for (int i = 0; i < S::kCopiesA; ++i) {
        tile::cp_async_4_always(sa + kStep * i, pa);
        tile::cp_async_4_always(sa + kStep * i + kHalfA, pa + 16);
        pa += step_a;
      }
#pragma unroll
      for (int i = 0; i < S::kCopiesW; ++i) {
        tile::cp_async_4_always(sw + kStep * i, pw);
        tile::cp_async_4_always(sw + kStep * i + kHalfW, pw + 16);
        pw += step_w;
      }
      return;
    }
    c.copy16(p, stage, kt * kBK, 0);
    c.copy16(p, stage, kt * kBK + 16, 1);
  }
};

template <class S, class Loader>
constexpr int stage_floats() {
  return Loader::kBK * (S::kPitchA + S::kPitchW);
}

// Square bk16: 50,688 bytes; Square bk32: 101,376 (2 blocks/SM); Half bk32: 51,200 (4 blocks/SM).
template <class S, class Loader>
constexpr int smem_bytes() {
  return S::kStages * stage_floats<S, Loader>() * 4;
}

template <class S, class Loader>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks) sgemm_fp32_kernel(const SgemmArgs p) {
  constexpr int kBK = Loader::kBK;
  constexpr int kStages = S::kStages;
  constexpr int kStageFloats = stage_floats<S, Loader>();
  constexpr int kHalfM = S::kBM / 2;
  extern __shared__ float4 smem_f4[];
  float* smem = reinterpret_cast<float*>(smem_f4);
  int tm, tn;
  grouped_tile(static_cast<int>(blockIdx.x), p.tiles_m, p.tiles_n, 8, tm, tn);
  const int m0 = tm * S::kBM, n0 = tn * S::kBN;
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  const int num_kt = (p.k + kBK - 1) / kBK;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  }

  const Loader loader(p, m0, n0);
  const uint32_t smem_base = tile::smem_addr(smem);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_kt) loader.load(p, smem_base + s * kStageFloats * 4, s);
    tile::cp_async_commit();
  }
  for (int kt = 0; kt < num_kt; ++kt) {
    tile::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt landed for everyone; everyone is done with tile kt - 1
    const int next = kt + kStages - 1;
    if (next < num_kt) loader.load(p, smem_base + (next % kStages) * kStageFloats * 4, next);
    tile::cp_async_commit();

    const float* sa = smem + (kt % kStages) * kStageFloats;
    const float* sw = sa + kBK * S::kPitchA;
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      float a[8], b[8];
      *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(sa + k * S::kPitchA + 4 * ty);
      *reinterpret_cast<float4*>(&a[4]) =
          *reinterpret_cast<const float4*>(sa + k * S::kPitchA + kHalfM + 4 * ty);
      *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(sw + k * S::kPitchW + 4 * tx);
      *reinterpret_cast<float4*>(&b[4]) =
          *reinterpret_cast<const float4*>(sw + k * S::kPitchW + 64 + 4 * tx);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
  }
  tile::cp_async_wait<0>();

  const bool vec = p.n % 4 == 0 && p.ldc % 4 == 0 && reinterpret_cast<uintptr_t>(p.c) % 16 == 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = m0 + (i < 4 ? 4 * ty + i : kHalfM + 4 * ty + i - 4);
    if (row >= p.m) continue;
    float* crow = p.c + static_cast<int64_t>(row) * p.ldc;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = n0 + 64 * h + 4 * tx;
      const float* v = &acc[i][4 * h];
      if (vec) {
        if (col < p.n) *reinterpret_cast<float4*>(crow + col) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (col + q < p.n) crow[col + q] = v[q];
        }
      }
    }
  }
}

}  // namespace

namespace {

template <class S, class Loader>
Status run_sgemm(SgemmArgs p, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<S, Loader>();
  auto kernel = sgemm_fp32_kernel<S, Loader>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (e != cudaSuccess) return from_cuda(e, "cudaFuncSetAttribute(shared memory)");
  p.tiles_m = static_cast<int>((p.m + S::kBM - 1) / S::kBM);
  p.tiles_n = static_cast<int>((p.n + S::kBN - 1) / S::kBN);
  const int64_t blocks = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
  if (blocks >= (int64_t{1} << 31)) return fail("sgemm_fp32: too many tiles");
  kernel<<<static_cast<unsigned>(blocks), S::kThreads, kSmem, stream>>>(p);
  return from_cuda(cudaGetLastError(), "launching sgemm_fp32");
}

}  // namespace

const char* sgemm_config_name(SgemmConfig c) {
  switch (c) {
    case SgemmConfig::kAuto: return "auto";
    case SgemmConfig::kBk16: return "bk16";
    case SgemmConfig::kBk32: return "bk32";
    case SgemmConfig::kBm64: return "bm64";
  }
  return "unknown";
}

Status launch_sgemm(const MatmulArgs& g, cudaStream_t stream, SgemmConfig config) {
  if (Status st = check_sizes(g); !st.ok()) return st;
  const int cc = device_capability();
  if (cc != 0 && cc < 80) {
    return fail("sgemm_fp32 streams tiles with cp.async: compute capability 8.0 or later",
                cudaErrorNotSupported);
  }
  SgemmArgs p{};
  set_operands(p, g);
  // auto: bk32 (0.84-0.85x cuBLAS fp32 against bk16's 0.82x, results/h200/issue13/gemm.json), or
  // bm64 where the 128 x 128 grid leaves SMs empty (sgemm_rule.h).
  if (config == SgemmConfig::kAuto && sgemm_prefers_bm64(g.m, g.n, sm_count())) config = SgemmConfig::kBm64;
  switch (config) {
    case SgemmConfig::kBk16: return run_sgemm<Square, Loader16<Square>>(p, stream);
    case SgemmConfig::kBm64: return run_sgemm<Half, Loader32<Half>>(p, stream);
    default: return run_sgemm<Square, Loader32<Square>>(p, stream);
  }
}

}  // namespace sk::gemm
