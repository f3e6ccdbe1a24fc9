// sgemm_fp32: C = A @ W^T in true fp32 on the CUDA cores (no TF32).
//
// 128 x 128 block tile, 256 threads, each thread an 8 x 8 register tile: rows 4 ty + {0..3} and
// 64 + 4 ty + {0..3}, columns likewise with tx, so per k a thread reads two float4 of A and two
// of W from shared memory for 64 FMAs (A reads are warp broadcasts, W reads contiguous).
// That needs the tiles k-major in shared memory ([k][row]) while both operands are
// K-contiguous in global memory, so the copies transpose: 4-byte cp.async, a warp covering
// 8 consecutive k (one 32-byte sector) of 4 rows, which with a row pitch of 132 floats lands
// its 32 words in 32 different banks. A 3-stage cp.async ring overlaps the loads of tile k + 2
// with the math on tile k. 4-byte copies also make any K and any row pitch work (zero-filled
// past the edges), with one kernel.
//
// Two loaders (SgemmConfig):
//   bk16  16-k tiles, every copy predicated and its source clamped (the kernel measured on the
//         H200: 42.1 TFLOP/s at 8192^3, 0.82x cuBLAS; its SASS issues ~220 non-FMA
//         instructions per 1024 FMAs, mostly copy addressing, which caps it near 82%)
//   bk32  32-k tiles: each row pointer serves two copies (k and k + 16, an immediate offset)
//         and tiles wholly inside the matrix copy without predicates or clamps, so the
//         overhead per FMA halves. Two blocks per SM still fit (2 x 99 KiB).
#include <cuda_runtime.h>

#include "../tile/arch.cuh"
#include "../tile/cp_async.cuh"
#include "gemm.h"
#include "gemm_common.cuh"

namespace sk::gemm {
namespace {

constexpr int kBM = 128, kBN = 128, kStages = 3, kThreads = 256;
constexpr int kPitch = kBM + 4;                        // floats per k-row of a tile

struct SgemmArgs {
  const float* a;
  const float* w;
  float* c;
  int m, n, k;
  int64_t lda, ldw, ldc;
  int tiles_m, tiles_n;
};

// The copies a thread makes for every 16 k of a tile: one k offset (kk) and 8 rows 16 apart per
// operand (element e = tid + 256 i of the [128 x 16] tile has kk = e % 8 + 8 ((e / 32) % 2) --
// the same for every i -- and row = (e / 8) % 4 + 4 (e / 64) = row0 + 16 i).
struct CopyPattern {
  const float* a;       // &A[m0 + row0][kk], row clamped into the matrix
  const float* w;       // &W[n0 + row0][kk]
  uint32_t smem_off;    // byte offset of [kk][row0] in a stage
  uint32_t rows_a;      // bit i: row row0 + 16 i of A exists
  uint32_t rows_w;
  int kk;

  __device__ __forceinline__ CopyPattern(const SgemmArgs& p, int m0, int n0) {
    const int tid = static_cast<int>(threadIdx.x);
    kk = tid % 8 + 8 * ((tid / 32) % 2);
    const int row0 = (tid / 8) % 4 + 4 * (tid / 64);
    rows_a = rows_w = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      rows_a |= (m0 + row0 + 16 * i < p.m ? 1u : 0u) << i;
      rows_w |= (n0 + row0 + 16 * i < p.n ? 1u : 0u) << i;
    }
    a = p.a + static_cast<int64_t>(min(m0 + row0, p.m - 1)) * p.lda + kk;
    w = p.w + static_cast<int64_t>(min(n0 + row0, p.n - 1)) * p.ldw + kk;
    smem_off = static_cast<uint32_t>((kk * kPitch + row0) * 4);
  }
};

// bk16: stage <- k-tile kt, transposed to [k][row]; elements past the matrix edges are zero.
struct Loader16 {
  static constexpr int kBK = 16;
  CopyPattern c;

  __device__ __forceinline__ Loader16(const SgemmArgs& p, int m0, int n0) : c(p, m0, n0) {}

  __device__ __forceinline__ void load(const SgemmArgs& p, uint32_t stage, int kt) const {
    const int k = kt * kBK + c.kk;
    const bool in_k = k < p.k;
    const int koff = in_k ? kt * kBK : 0;
    const uint32_t sa = stage + c.smem_off, sw = stage + kBK * kPitch * 4 + c.smem_off;
    const float* pa = c.a + koff;
    const float* pw = c.w + koff;
    const int64_t step_a = 16 * p.lda, step_w = 16 * p.ldw;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool va = in_k && ((c.rows_a >> i) & 1u), vw = in_k && ((c.rows_w >> i) & 1u);
      cp_async_4(sa + 64 * i, va ? pa : p.a, va);
      cp_async_4(sw + 64 * i, vw ? pw : p.w, vw);
      pa += step_a;
      pw += step_w;
    }
  }
};

// bk32: the bk16 pattern at k = kk and kk + 16 from the same row pointers (an immediate offset).
// A tile with all 128 rows of both operands inside the matrix and the k-tile inside K copies
// without predicates or clamps; the others take the predicated path.
struct Loader32 {
  static constexpr int kBK = 32;
  CopyPattern c;
  bool interior;

  __device__ __forceinline__ Loader32(const SgemmArgs& p, int m0, int n0)
      : c(p, m0, n0), interior(m0 + kBM <= p.m && n0 + kBN <= p.n) {}

  __device__ __forceinline__ void load(const SgemmArgs& p, uint32_t stage, int kt) const {
    const uint32_t sa = stage + c.smem_off, sw = stage + kBK * kPitch * 4 + c.smem_off;
    constexpr uint32_t kHalf = 16 * kPitch * 4;   // smem bytes from k-row kk to kk + 16
    const int64_t step_a = 16 * p.lda, step_w = 16 * p.ldw;
    if (interior && (kt + 1) * kBK <= p.k) {
      const float* pa = c.a + kt * kBK;
      const float* pw = c.w + kt * kBK;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        cp_async_4_always(sa + 64 * i, pa);
        cp_async_4_always(sa + 64 * i + kHalf, pa + 16);
        cp_async_4_always(sw + 64 * i, pw);
        cp_async_4_always(sw + 64 * i + kHalf, pw + 16);
        pa += step_a;
        pw += step_w;
      }
      return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = kt * kBK + 16 * h + c.kk;
      const bool in_k = k < p.k;
      const int koff = in_k ? kt * kBK + 16 * h : 0;
      const float* pa = c.a + koff;
      const float* pw = c.w + koff;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const bool va = in_k && ((c.rows_a >> i) & 1u), vw = in_k && ((c.rows_w >> i) & 1u);
        cp_async_4(sa + h * kHalf + 64 * i, va ? pa : p.a, va);
        cp_async_4(sw + h * kHalf + 64 * i, vw ? pw : p.w, vw);
        pa += step_a;
        pw += step_w;
      }
    }
  }
};

template <class Loader>
constexpr int smem_bytes() {
  return kStages * 2 * Loader::kBK * kPitch * 4;   // bk16: 50,688; bk32: 101,376 (2 blocks/SM)
}

template <class Loader>
__global__ void __launch_bounds__(kThreads, 2) sgemm_fp32_kernel(const SgemmArgs p) {
  constexpr int kBK = Loader::kBK;
  constexpr int kTileFloats = 2 * kBK * kPitch;   // one stage: A then W
  extern __shared__ float4 smem_f4[];
  float* smem = reinterpret_cast<float*>(smem_f4);
  int tm, tn;
  grouped_tile(static_cast<int>(blockIdx.x), p.tiles_m, p.tiles_n, 8, tm, tn);
  const int m0 = tm * kBM, n0 = tn * kBN;
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
    if (s < num_kt) loader.load(p, smem_base + s * kTileFloats * 4, s);
    tile::cp_async_commit();
  }
  for (int kt = 0; kt < num_kt; ++kt) {
    tile::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt landed for everyone; everyone is done with tile kt - 1
    const int next = kt + kStages - 1;
    if (next < num_kt) loader.load(p, smem_base + (next % kStages) * kTileFloats * 4, next);
    tile::cp_async_commit();

    const float* sa = smem + (kt % kStages) * kTileFloats;
    const float* sw = sa + kBK * kPitch;
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      float a[8], b[8];
      *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(sa + k * kPitch + 4 * ty);
      *reinterpret_cast<float4*>(&a[4]) =
          *reinterpret_cast<const float4*>(sa + k * kPitch + 64 + 4 * ty);
      *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(sw + k * kPitch + 4 * tx);
      *reinterpret_cast<float4*>(&b[4]) =
          *reinterpret_cast<const float4*>(sw + k * kPitch + 64 + 4 * tx);
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
    const int row = m0 + (i < 4 ? 4 * ty + i : 64 + 4 * ty + i - 4);
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

template <class Loader>
Status run_sgemm(const SgemmArgs& p, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<Loader>();
  auto kernel = sgemm_fp32_kernel<Loader>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (e != cudaSuccess) return from_cuda(e, "cudaFuncSetAttribute(shared memory)");
  const int64_t blocks = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
  kernel<<<static_cast<unsigned>(blocks), kThreads, kSmem, stream>>>(p);
  return from_cuda(cudaGetLastError(), "launching sgemm_fp32");
}

}  // namespace

const char* sgemm_config_name(SgemmConfig c) {
  switch (c) {
    case SgemmConfig::kAuto: return "auto";
    case SgemmConfig::kBk16: return "bk16";
    case SgemmConfig::kBk32: return "bk32";
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
  p.a = static_cast<const float*>(g.a);
  p.w = static_cast<const float*>(g.w);
  p.c = static_cast<float*>(g.c);
  p.m = static_cast<int>(g.m);
  p.n = static_cast<int>(g.n);
  p.k = static_cast<int>(g.k);
  p.lda = g.lda;
  p.ldw = g.ldw;
  p.ldc = g.ldc;
  p.tiles_m = static_cast<int>((g.m + kBM - 1) / kBM);
  p.tiles_n = static_cast<int>((g.n + kBN - 1) / kBN);
  const int64_t blocks = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
  if (blocks >= (int64_t{1} << 31)) return fail("sgemm_fp32: too many tiles");
  // auto: bk32, 0.84-0.85x cuBLAS fp32 vs bk16's 0.82x (results/h200/issue13/gemm.json).
  if (config == SgemmConfig::kBk16) return run_sgemm<Loader16>(p, stream);
  return run_sgemm<Loader32>(p, stream);
}

}  // namespace sk::gemm
