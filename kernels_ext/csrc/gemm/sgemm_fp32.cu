// sgemm_fp32: C = A @ W^T in true fp32 on the CUDA cores (no TF32).
//
// Every variant: 128 x 128 block tile, 256 threads, each thread an 8 x 8 register tile, so per k
// a thread reads two float4 of A and two of W from shared memory for 64 FMAs. That needs the
// tiles k-major in shared memory ([k][row], row pitch 132 floats) while both operands are
// K-contiguous in global memory, so every loader transposes on the way in. The three loaders
// differ in how (SgemmConfig):
//
//   bk16  4-byte cp.async, 16-k tiles, a 3-stage ring overlapping the loads of tile k + 2 with
//         the math on tile k; a warp copies 8 consecutive k (one 32-byte sector) of 4 rows,
//         which with the 132 pitch lands its 32 words in 32 banks. Every copy predicated and
//         its source clamped, so any K and any row pitch work with one kernel (zero-filled
//         past the edges). Measured on the H200: 42.1 TFLOP/s at 8192^3, 0.82x cuBLAS; its
//         SASS issues 203 non-FMA instructions per 1024 FMAs, mostly copy addressing (one
//         instruction, and address arithmetic, per element), which caps it near 82%.
//   bk32  the same copies over 32-k tiles: each row pointer serves two copies (k and k + 16, an
//         immediate offset) and tiles wholly inside the matrix copy without predicates or
//         clamps, so the overhead per FMA halves; 0.845x cuBLAS (43 TFLOP/s). Two blocks per
//         SM still fit (2 x 99 KiB). The automatic choice.
//   ldg   register-staged, 16-k tiles, two stages: 16-byte ld.global.nc along K (4 per thread
//         per tile instead of 16 cp.async of 4 bytes) into registers while the FMAs run on the
//         other stage, then 16 scalar st.shared that transpose; one barrier per tile. Warps own
//         32 x 64 of C (lanes 4 x 8), so a warp's fragment reads touch 96 distinct floats per k
//         instead of the 16 x 128 layout's 144 (4 wavefronts per k instead of 6), and the
//         fragments of k + 1 are read while k's FMAs run. SASS (sm_90a, CUDA 13.0): 116 non-FMA
//         instructions per 1024 FMAs in the main loop, 64 of them fragment reads (bk16: 203;
//         bk32: ~110 on interior tiles, per README.md). Needs K % 4 == 0, 16-byte aligned
//         A and W and row pitches % 4 == 0; otherwise sgemm(config="ldg") runs bk32, whose
//         4-byte copies take any layout. Not measured on a GPU yet, so not the automatic choice.
#include <cuda_runtime.h>

#include <type_traits>

#include "../tile/arch.cuh"
#include "../tile/cp_async.cuh"
#include "../tile/ldg.cuh"
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

// ------------------------------------------------------------------ ldg: register-staged loads
//
// Copy roles (global -> registers -> shared). A 128 x 16 tile of one operand is 512 float4 along
// K: each thread loads rows lrow and lrow + 64 at k = 4 kq .. 4 kq + 3, with
//   kq = lane / 16 + 2 (warp % 2),  lrow = lane % 16 + 16 (warp / 2),
// so one warp instruction reads 16 rows x 32 bytes (one full sector per row when the row starts
// on 32 bytes). The four floats of a float4 go to k-rows 4 kq + j of the [k][row] tile, a scalar
// st.shared each (the transposition puts them 132 floats apart, so no vector store can take
// them). Bank of a warp's store j: (4 kq + j) * 132 + lrow = 16 kq + 4 j + lrow (mod 32), and with
// kq = lane / 16 + 2 c that is const + 16 (lane / 16) + lane % 16: the 32 lanes hit 32 different
// banks, conflict-free. (The obvious 8 rows x 4 float4 per warp, 64 bytes of each row, would
// collide 2-way: 16 kq mod 32 repeats for kq = 0, 2; a pitch that fixes it, 130 or 134, would
// misalign the float4 fragment reads; hence 16 rows x 2 float4.)
//
// Math roles. Warp w owns rows 32 (w / 2) .. + 31 and columns 64 (w % 2) .. + 63 of the block's C;
// lane (ly, lx) = (lane / 8, lane % 8) owns rows 4 ly + {0..3} and 16 + 4 ly + {0..3} of those,
// columns 4 lx + {0..3} and 32 + 4 lx + {0..3}. Per k a warp's A read is 4 distinct float4 (64
// contiguous bytes, each a broadcast to 8 lanes) and its W read 8 distinct float4 (128 contiguous
// bytes): one shared-memory wavefront each, no conflicts. C stores: 4 rows x 128 contiguous bytes
// per warp instruction.
//
// Pipeline (two stages, one barrier per tile): while the FMAs of tile kt run on stage kt % 2,
// tile kt + 1 passes through 8 staging registers into stage (kt + 1) % 2, A's half loaded at
// k = 0 and stored at k = 7, W's loaded at k = 8 and stored at k = 15 (both staged at once, 16
// registers, spilled next to 64 accumulators and two fragment sets). ptxas issues each
// load ~2.5 k-steps after where it is written (register pressure), so each has ~4.5 k-steps,
// ~290 FMAs per warp, to land; the split points are the knob to tune on the GPU. After the last
// k's stores comes the barrier, then k = 0 of the new stage is read before the last k's FMAs.
// Stage (kt + 1) % 2 was last read in tile kt - 1, before that tile's barrier, so no store
// overwrites what another warp still reads; the barrier orders the stores before anyone's
// reads of the new stage.
namespace ldg {

constexpr int kBK = 16;
constexpr int kStageFloats = 2 * kBK * kPitch;   // A's [16][132] then W's; 2 stages: 33,792 bytes

// The fast path's preconditions: every float4 lies wholly inside K or wholly past it and is
// 16-byte aligned.
bool fits(const SgemmArgs& p) {
  return p.k % 4 == 0 && p.lda % 4 == 0 && p.ldw % 4 == 0 &&
         reinterpret_cast<uintptr_t>(p.a) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
}

}  // namespace ldg

__global__ void __launch_bounds__(kThreads, 2) sgemm_fp32_ldg_kernel(const SgemmArgs p) {
  using ldg::kBK;
  using ldg::kStageFloats;
  __shared__ __align__(16) float smem[2 * kStageFloats];
  int tm, tn;
  grouped_tile(static_cast<int>(blockIdx.x), p.tiles_m, p.tiles_n, 8, tm, tn);
  const int m0 = tm * kBM, n0 = tn * kBN;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int num_kt = (p.k + kBK - 1) / kBK;

  // Copy roles. Rows and k past the matrix are read as zeros (predicated loads: no access). The
  // pointer of row lrow is clamped into the tensor; that of lrow + 64 is formed from it (64 rows
  // on) at each load, and is only dereferenced where that row exists.
  const int kq = lane / 16 + 2 * (warp % 2);
  const int lrow = lane % 16 + 16 * (warp / 2);
  const float* ga = p.a + static_cast<int64_t>(min(m0 + lrow, p.m - 1)) * p.lda + 4 * kq;
  const float* gw = p.w + static_cast<int64_t>(min(n0 + lrow, p.n - 1)) * p.ldw + 4 * kq;
  const int st_off = 4 * kq * kPitch + lrow;   // [4 kq][lrow] of a stage's A tile

  // Math roles.
  const int ly = lane / 8, lx = lane % 8;
  const int fa_off = 32 * (warp / 2) + 4 * ly;                   // A fragment: + 0, + 16
  const int fw_off = kBK * kPitch + 64 * (warp % 2) + 4 * lx;    // W fragment: + 0, + 32

  // The next k-tile of one operand -> the staged registers, zeros past M, N or K (K % 4 == 0:
  // a float4 is wholly in or out), and the row pointer on to the tile after. One predicated
  // path for every tile: a uniform branch to unpredicated loads for interior tiles (as bk32
  // does) spilled 12-24 bytes, the two paths' address registers on top of the tiles'.
  uint4 staged[2];
  auto load = [&](const float*& g, int64_t ld, int rows_left, int kt, bool live) {
    const bool in_k = live && kt * kBK + 4 * kq < p.k;
    staged[0] = tile::ldg_16_if(g, in_k && lrow < rows_left);
    staged[1] = tile::ldg_16_if(g + 64 * ld, in_k && lrow + 64 < rows_left);
    g += kBK;
  };
  // The staged registers -> one operand's tile of a stage, transposed (immediate offsets).
  auto store = [&](float* tile_base) {
    float* s = tile_base + st_off;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      s[64 * i + 0 * kPitch] = __uint_as_float(staged[i].x);
      s[64 * i + 1 * kPitch] = __uint_as_float(staged[i].y);
      s[64 * i + 2 * kPitch] = __uint_as_float(staged[i].z);
      s[64 * i + 3 * kPitch] = __uint_as_float(staged[i].w);
    }
  };

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  }
  float fa[2][8], fw[2][8];   // fragments of k (in use) and k + 1 (being read)
  auto frag = [&](const float* stage, int k, float (&a)[8], float (&b)[8]) {
    const float* s = stage + k * kPitch;
    *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(s + fa_off);
    *reinterpret_cast<float4*>(&a[4]) = *reinterpret_cast<const float4*>(s + fa_off + 16);
    *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(s + fw_off);
    *reinterpret_cast<float4*>(&b[4]) = *reinterpret_cast<const float4*>(s + fw_off + 32);
  };

  load(ga, p.lda, p.m - m0, 0, true);
  store(smem);
  load(gw, p.ldw, p.n - n0, 0, true);
  store(smem + kBK * kPitch);
  __syncthreads();
  frag(smem, 0, fa[0], fw[0]);
  // One k-tile on stage `cur`, a compile-time 0 or 1 (the loop below runs tiles in pairs): every
  // shared address is then an immediate offset from a few registers, ~20 instructions per 1024
  // FMAs fewer than stage bases computed per tile. Straight-line code: the last tile's loads
  // are predicated off (zeros) and its stores and fragment read go to the other stage, which
  // nobody reads any more. Under `if (more)` the compiler merged the k = 0 load into the k = 7
  // store's block (same condition), which left no FMAs to hide its latency.
  auto tile_step = [&](auto cur, int kt) {
    constexpr int kCur = decltype(cur)::value;
    const float* stage = smem + kCur * kStageFloats;
    float* next = smem + (1 - kCur) * kStageFloats;
    const bool more = kt + 1 < num_kt;
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      // The next tile, one operand at a time through the 8 staging registers (see the top).
      if (k == 0) load(ga, p.lda, p.m - m0, kt + 1, more);
      if (k == kBK / 2 - 1) store(next);
      if (k == kBK / 2) load(gw, p.ldw, p.n - n0, kt + 1, more);
      if (k == kBK - 1) {
        store(next + kBK * kPitch);
        __syncthreads();   // the stores above are visible; every warp has left `stage`
        frag(next, 0, fa[0], fw[0]);
      } else {
        frag(stage, k + 1, fa[(k + 1) % 2], fw[(k + 1) % 2]);
      }
      const float* a = fa[k % 2];
      const float* b = fw[k % 2];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
  };
  for (int kt = 0; kt < num_kt; kt += 2) {
    tile_step(std::integral_constant<int, 0>{}, kt);
    if (kt + 1 < num_kt) tile_step(std::integral_constant<int, 1>{}, kt + 1);
  }

  const bool vec = p.n % 4 == 0 && p.ldc % 4 == 0 && reinterpret_cast<uintptr_t>(p.c) % 16 == 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = m0 + 32 * (warp / 2) + 4 * ly + (i < 4 ? i : 16 + i - 4);
    if (row >= p.m) continue;
    float* crow = p.c + static_cast<int64_t>(row) * p.ldc;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = n0 + 64 * (warp % 2) + 32 * h + 4 * lx;
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

Status run_sgemm_ldg(const SgemmArgs& p, cudaStream_t stream) {
  const int64_t blocks = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
  sgemm_fp32_ldg_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  return from_cuda(cudaGetLastError(), "launching sgemm_fp32 (ldg)");
}

}  // namespace

const char* sgemm_config_name(SgemmConfig c) {
  switch (c) {
    case SgemmConfig::kAuto: return "auto";
    case SgemmConfig::kBk16: return "bk16";
    case SgemmConfig::kBk32: return "bk32";
    case SgemmConfig::kLdg: return "ldg";
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
  // ldg's 16-byte loads need K % 4 == 0 and aligned operands; the rest runs bk32 (any layout).
  if (config == SgemmConfig::kLdg && ldg::fits(p)) return run_sgemm_ldg(p, stream);
  return run_sgemm<Loader32>(p, stream);
}

}  // namespace sk::gemm
