// hgemm_mma: bf16/fp16 C = A @ W^T (+ R) with mma.sync m16n8k16, for sm_80 and later.
//
// 128 x 256 block tile, 8 warps as 2 x 4, each warp a 64 x 64 tile (4 x 8 mma tiles, 128 fp32
// accumulators per thread). K moves in k-tiles through a 4-stage cp.async ring.
// Both operands are K-contiguous, which is what mma's row.col form wants: A fragments are
// ldmatrix.x4 of [row][k] tiles, W fragments the plain (non-transposed) ldmatrix.x4 of [n][k]
// tiles. Shared-memory rows are one k-tile wide; the 16-byte chunk index is XORed with the row
// bits above it (the 64B / 128B swizzle of tile/swizzle.cuh), so the 8 rows one ldmatrix phase
// reads (and the rows cp.async writes) fall in 8 different bank groups.
// K % 8 != 0 (rows not 16-byte aligned) takes a synchronous element-wise loader instead of
// cp.async; the residual variant adds R in fp32 before the one rounding.
//
// Three k-tilings (MmaConfig):
//   bk32       32-k tiles, 64-byte rows, 96 KiB of stages (the kernel measured on the H200:
//              296 TFLOP/s at 8192^3, 0.44x cuBLAS). Its SASS spends ~100 instructions of copy
//              addressing after every barrier, i.e. every 64 mma per warp, with no mma issued.
//   bk64       64-k tiles, 128-byte rows (128B swizzle), 192 KiB of stages: half the barriers
//              and waits per mma, and tiles wholly inside the matrix copy from per-thread row
//              pointers with immediate offsets (a thread always copies the same 16-byte column
//              of rows 32 apart), without predicates or clamps. 0.57x cuBLAS; Nsight Compute
//              (4096^3): tensor pipe 64% active, stalls on ldmatrix results after the barrier
//              (short scoreboard) and on the LSU queue (lg_throttle) that all 12 copies of a
//              k-tile, issued at once after the barrier, fill.
//   bk64_pipe  bk64's tiles, layout and copies in a software-pipelined main loop: fragments
//              are double-buffered in registers and the next 16-k step's ldmatrix is issued
//              before this step's 32 mma; the barrier moves to the last k-step of a tile (after
//              which the next tile's first fragments are read), and the next k-tile's copies are
//              spread 3 per k-step. Edge tiles keep bk64's predicated all-at-once loader.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

#include "../tile/arch.cuh"
#include "../tile/cp_async.cuh"
#include "../tile/mma_sync.cuh"
#include "../tile/swizzle.cuh"
#include "gemm.h"
#include "gemm_common.cuh"

namespace sk::gemm {
namespace {

constexpr int kBM = 128, kBN = 256, kStages = 4, kThreads = 256;

template <int BK>
struct Tiling {
  static constexpr int kBK = BK;
  static constexpr int kRowBytes = BK * 2;                  // 64 or 128: the swizzle width
  static constexpr int kChunks = kRowBytes / 16;            // 16-byte chunks per row
  static constexpr int kABytes = kBM * kRowBytes;           // per stage: 8 / 16 KiB
  static constexpr int kBBytes = kBN * kRowBytes;           // 16 / 32 KiB
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;  // 96 / 192 KiB
  static constexpr bool kFastInterior = BK == 64;
  static_assert(kSmemBytes <= 232448, "stages exceed the 227 KiB of shared memory per block");

  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return tile::swizzle<kRowBytes>(static_cast<uint32_t>(row * kRowBytes + chunk * 16));
  }
};

struct MmaArgs {
  const void* a;
  const void* w;
  void* c;
  const void* r;
  int m, n, k;
  int64_t lda, ldw, ldc, ldr;
  int tiles_m, tiles_n;
};

// One 16-byte chunk (8 elements) of row `row` of a [rows x K] operand, k from k0, into smem.
template <class T, bool kVec>
__device__ __forceinline__ void load_chunk(uint32_t dst, const T* base, int64_t ld, int row,
                                           int rows, int k0, int k) {
  if constexpr (kVec) {
    const bool valid = row < rows && k0 < k;
    const T* src = base + static_cast<int64_t>(valid ? row : 0) * ld + (valid ? k0 : 0);
    tile::cp_async_16(dst, src, valid);
  } else {
    uint16_t v[8];
    const uint16_t* src = reinterpret_cast<const uint16_t*>(base) + static_cast<int64_t>(row) * ld;
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = (row < rows && k0 + e < k) ? src[k0 + e] : uint16_t{0};
    const uint4 pack = make_uint4(v[0] | (uint32_t(v[1]) << 16), v[2] | (uint32_t(v[3]) << 16),
                                  v[4] | (uint32_t(v[5]) << 16), v[6] | (uint32_t(v[7]) << 16));
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(pack.x), "r"(pack.y),
                 "r"(pack.z), "r"(pack.w)
                 : "memory");
  }
}

// Stage <- k-tile kt of A's and W's block rows, every chunk predicated (edges zero-filled).
template <class T, class Tl, bool kVec>
__device__ __forceinline__ void load_stage(const MmaArgs& p, uint32_t stage, int m0, int n0,
                                           int kt) {
  const int tid = static_cast<int>(threadIdx.x);
  const T* a = static_cast<const T*>(p.a);
  const T* w = static_cast<const T*>(p.w);
#pragma unroll
  for (int i = 0; i < Tl::kABytes / 16 / kThreads; ++i) {
    const int c = tid + i * kThreads, row = c / Tl::kChunks, q = c % Tl::kChunks;
    load_chunk<T, kVec>(stage + Tl::offset(row, q), a, p.lda, m0 + row, p.m, kt * Tl::kBK + 8 * q,
                        p.k);
  }
#pragma unroll
  for (int i = 0; i < Tl::kBBytes / 16 / kThreads; ++i) {
    const int c = tid + i * kThreads, row = c / Tl::kChunks, q = c % Tl::kChunks;
    load_chunk<T, kVec>(stage + Tl::kABytes + Tl::offset(row, q), w, p.ldw, n0 + row, p.n,
                        kt * Tl::kBK + 8 * q, p.k);
  }
}

// The interior copies of the 64-k tiling: chunk c = tid + 256 i of a tile is row c / 8 = tid / 8
// + 32 i, column q = tid % 8 -- the same column for every i, and a swizzled smem offset that is
// a constant plus 32 i rows (the XOR term depends on row % 8 = (tid / 8) % 8 only). So a thread
// keeps one pointer per operand and every copy is [pointer + immediate] -> [smem + immediate].
template <class T, class Tl>
struct InteriorCopies {
  const T* a;        // &A[m0 + tid / 8][8 q]
  const T* w;        // &W[n0 + tid / 8][8 q]
  uint32_t soff;     // smem offset of (tid / 8, q)
  int64_t step_a;    // 32 rows, in elements
  int64_t step_w;

  __device__ __forceinline__ InteriorCopies(const MmaArgs& p, int m0, int n0) {
    const int tid = static_cast<int>(threadIdx.x);
    const int row = tid / Tl::kChunks, q = tid % Tl::kChunks;
    const int ra = min(m0 + row, p.m - 1), rw = min(n0 + row, p.n - 1);   // in bounds to form
    a = static_cast<const T*>(p.a) + static_cast<int64_t>(ra) * p.lda + 8 * q;
    w = static_cast<const T*>(p.w) + static_cast<int64_t>(rw) * p.ldw + 8 * q;
    soff = Tl::offset(row, q);
    step_a = static_cast<int64_t>(kThreads / Tl::kChunks) * p.lda;
    step_w = static_cast<int64_t>(kThreads / Tl::kChunks) * p.ldw;
  }

  __device__ __forceinline__ void load(uint32_t stage, int kt) const {
    constexpr uint32_t kRowStep = (kThreads / Tl::kChunks) * Tl::kRowBytes;   // 32 rows
    const T* pa = a + static_cast<int64_t>(kt) * Tl::kBK;
    const T* pw = w + static_cast<int64_t>(kt) * Tl::kBK;
#pragma unroll
    for (int i = 0; i < Tl::kABytes / 16 / kThreads; ++i) {
      tile::cp_async_16(stage + soff + i * kRowStep, pa, true);
      pa += step_a;
    }
#pragma unroll
    for (int i = 0; i < Tl::kBBytes / 16 / kThreads; ++i) {
      tile::cp_async_16(stage + Tl::kABytes + soff + i * kRowStep, pw, true);
      pw += step_w;
    }
  }

  // Copies [kFirst, kFirst + kCount) of load()'s sequence (A's, then W's), so a pipelined loop
  // can hand the LSU a few at a time instead of the whole tile at once.
  template <int kFirst, int kCount>
  __device__ __forceinline__ void load_part(uint32_t stage, int kt) const {
    constexpr int kACopies = Tl::kABytes / 16 / kThreads;
    constexpr uint32_t kRowStep = (kThreads / Tl::kChunks) * Tl::kRowBytes;
    static_assert(kFirst + kCount <= kACopies + Tl::kBBytes / 16 / kThreads, "past the tile");
    const T* pa = a + static_cast<int64_t>(kt) * Tl::kBK;
    const T* pw = w + static_cast<int64_t>(kt) * Tl::kBK;
#pragma unroll
    for (int j = kFirst; j < kFirst + kCount; ++j) {
      if (j < kACopies) {
        tile::cp_async_16(stage + soff + j * kRowStep, pa + j * step_a, true);
      } else {
        const int i = j - kACopies;
        tile::cp_async_16(stage + Tl::kABytes + soff + i * kRowStep, pw + i * step_w, true);
      }
    }
  }
};

// Calls f(std::integral_constant<int, 0>) ... f(<N - 1>): a k-step loop whose index is a
// constant expression (buffer parities, copy slices and the last-step barrier are compile-time).
template <class F, int... I>
__device__ __forceinline__ void static_for(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}

template <class T, class Tl, bool kVec, bool kResidual, bool kPipe>
__global__ void __launch_bounds__(kThreads, 1) hgemm_mma_kernel(const MmaArgs p) {
  extern __shared__ uint4 smem_u4[];
  const uint32_t smem = tile::smem_addr(smem_u4);
  int tm, tn;
  grouped_tile(static_cast<int>(blockIdx.x), p.tiles_m, p.tiles_n, 8, tm, tn);
  const int m0 = tm * kBM, n0 = tn * kBN;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int wm = warp / 4, wn = warp % 4;   // 64-row x 64-column warp tile
  const int num_kt = (p.k + Tl::kBK - 1) / Tl::kBK;
  // k-tiles below this one are wholly inside the matrix for this block (0: none).
  constexpr bool kFast = Tl::kFastInterior && kVec;
  const int fast_kt = kFast && m0 + kBM <= p.m && n0 + kBN <= p.n ? p.k / Tl::kBK : 0;
  const InteriorCopies<T, Tl> interior(p, m0, n0);
  auto load = [&](uint32_t stage, int kt) {
    if (kFast && kt < fast_kt) {
      interior.load(stage, kt);
    } else {
      load_stage<T, Tl, kVec>(p, stage, m0, n0, kt);
    }
  };

  float acc[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;
    }
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_kt) load(smem + s * Tl::kStageBytes, s);
    tile::cp_async_commit();
  }
  auto mma_step = [&](const uint32_t (&af)[4][4], const uint32_t (&bf)[4][4]) {
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        tile::mma_m16n8k16<T>(acc[mi][nb], af[mi], bf[nb / 2][2 * (nb % 2)],
                              bf[nb / 2][2 * (nb % 2) + 1]);
      }
    }
  };

  if constexpr (!kPipe) {
    for (int kt = 0; kt < num_kt; ++kt) {
      tile::cp_async_wait<kStages - 2>();
      __syncthreads();  // k-tile kt landed for everyone; everyone is done with kt - 1
      const int next = kt + kStages - 1;
      if (next < num_kt) load(smem + (next % kStages) * Tl::kStageBytes, next);
      tile::cp_async_commit();

      const uint32_t sa = smem + (kt % kStages) * Tl::kStageBytes;
      const uint32_t sb = sa + Tl::kABytes;
#pragma unroll
      for (int kk = 0; kk < Tl::kBK / 16; ++kk) {
        uint32_t af[4][4], bf[4][4];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const int row = wm * 64 + mi * 16 + (lane % 16);
          tile::ldmatrix_x4(af[mi], sa + Tl::offset(row, 2 * kk + lane / 16));
        }
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
          const int row = wn * 64 + nj * 16 + (lane % 8) + 8 * (lane / 16);
          tile::ldmatrix_x4(bf[nj], sb + Tl::offset(row, 2 * kk + (lane / 8) % 2));
        }
        mma_step(af, bf);
      }
    }
  } else {
    // Stage reuse: tile j + S - 1 is copied into stage (j - 1) % S while tile j is computed.
    // The last ldmatrix of tile j - 1 (its last k-step's fragments) is issued one k-step before
    // tile j - 1's last-k-step barrier, and all of tile j's copies come after that barrier, so
    // no warp still reads a stage that is being refilled. Copies of tile j are committed as one
    // group before tile j's barrier: at its wait<S - 2>, S - 1 + j + 1 groups are committed,
    // so tiles 0 .. j + 1 have landed -- the tile whose first fragments follow the barrier.
    static_assert(kFast && Tl::kBK == 64, "the pipeline splits the 64-k tiling's interior copies");
    static_assert(kStages >= 3, "stages j - 1, j and j + 1 must be distinct");
    constexpr int kSteps = Tl::kBK / 16;
    constexpr int kCopies = (Tl::kABytes + Tl::kBBytes) / 16 / kThreads;
    constexpr int kCopiesPerStep = kCopies / kSteps;
    static_assert(kCopies % kSteps == 0, "copies do not split evenly over the k-steps");
    static_assert(kSteps % 2 == 0, "a tile's k-step 0 must land in fragment buffer 0");
    // With 128-byte rows, offset(row, 2 kk + h) = offset(row, h) ^ 32 kk (the swizzle XORs the
    // chunk with row % 8, and 2 kk leaves the chunk's bit 0 alone), and 16 rows further is
    // + 2048 with the same row % 8: one address register per operand and k-step, the mi / nj
    // tiles at immediate offsets (bk64 keeps all 32 addresses live).
    const uint32_t a_off = Tl::offset(wm * 64 + (lane % 16), lane / 16);
    const uint32_t b_off = Tl::offset(wn * 64 + (lane % 8) + 8 * (lane / 16), (lane / 8) % 2);
    auto load_frags = [&](uint32_t (&af)[4][4], uint32_t (&bf)[4][4], uint32_t stage, int kk) {
      const uint32_t sa = stage + (a_off ^ (32u * kk));
      const uint32_t sb = stage + Tl::kABytes + (b_off ^ (32u * kk));
#pragma unroll
      for (int i = 0; i < 4; ++i) tile::ldmatrix_x4(af[i], sa + i * 16 * Tl::kRowBytes);
#pragma unroll
      for (int i = 0; i < 4; ++i) tile::ldmatrix_x4(bf[i], sb + i * 16 * Tl::kRowBytes);
    };

    uint32_t af[2][4][4], bf[2][4][4];   // k-step kk in buffer kk % 2 (kSteps is even)
    tile::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile 0 landed
    load_frags(af[0], bf[0], smem, 0);

    // One k-tile; kInterior: the tile copied during it (kt + S - 1) is wholly inside the matrix.
    auto ktile = [&](int kt, auto interior_c) {
      constexpr bool kInterior = decltype(interior_c)::value;
      const uint32_t stage = smem + (kt % kStages) * Tl::kStageBytes;
      const uint32_t stage_next = smem + ((kt + 1) % kStages) * Tl::kStageBytes;
      const int next = kt + kStages - 1;
      const uint32_t fill = smem + (next % kStages) * Tl::kStageBytes;
      static_for(
          [&](auto kk_c) {
            constexpr int kk = decltype(kk_c)::value;
            constexpr int cur = kk % 2, nxt = (kk + 1) % 2;
            // The predicated loader's addressing needs registers: it goes before the next
            // fragments are loaded, while only one buffer is live.
            if constexpr (!kInterior && kk == 0) {
              if (next < num_kt) load_stage<T, Tl, kVec>(p, fill, m0, n0, next);
            }
            if constexpr (kk + 1 < kSteps) load_frags(af[nxt], bf[nxt], stage, kk + 1);
            if constexpr (kInterior) {
              interior.template load_part<kk * kCopiesPerStep, kCopiesPerStep>(fill, next);
            }
            if constexpr (kk + 1 == kSteps) {
              tile::cp_async_commit();
              tile::cp_async_wait<kStages - 2>();
              // Tile kt + 1 landed for everyone, and every warp has loaded its last fragments of
              // tile kt (at k-step kSteps - 2): tile kt + 1's copies may refill kt's stage.
              __syncthreads();
              // After the last tile this reads a stage no copy is writing; the result is unused.
              load_frags(af[nxt], bf[nxt], stage_next, 0);
            }
            mma_step(af[cur], bf[cur]);
          },
          std::make_integer_sequence<int, kSteps>{});
    };
    // Tiles whose refill is interior first, without a branch per k-step; then the rest, whose
    // refills (if any) are at or past fast_kt and so take the predicated loader.
    int kt = 0;
    for (; kt < fast_kt - (kStages - 1); ++kt) ktile(kt, std::true_type{});
    for (; kt < num_kt; ++kt) ktile(kt, std::false_type{});
  }
  tile::cp_async_wait<0>();

  T* c = static_cast<T*>(p.c);
  const T* r = static_cast<const T*>(p.r);
  const bool pairs = p.n % 2 == 0 && p.ldc % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 4 == 0 &&
                     (!kResidual || (p.ldr % 2 == 0 && reinterpret_cast<uintptr_t>(r) % 4 == 0));
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wm * 64 + mi * 16 + g + 8 * h;
      if (row >= p.m) continue;
      T* crow = c + static_cast<int64_t>(row) * p.ldc;
      const T* rrow = kResidual ? r + static_cast<int64_t>(row) * p.ldr : nullptr;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const int col = n0 + wn * 64 + nb * 8 + 2 * t;
        float v0 = acc[mi][nb][2 * h], v1 = acc[mi][nb][2 * h + 1];
        if (pairs) {
          if (col < p.n) {
            if constexpr (kResidual) {
              const uint32_t rv = *reinterpret_cast<const uint32_t*>(rrow + col);
              v0 += elem_to_float(reinterpret_cast<const T*>(&rv)[0]);
              v1 += elem_to_float(reinterpret_cast<const T*>(&rv)[1]);
            }
            *reinterpret_cast<uint32_t*>(crow + col) = tile::pack2<T>(v0, v1);
          }
        } else {
          if (col < p.n) {
            if constexpr (kResidual) v0 += elem_to_float(rrow[col]);
            crow[col] = float_to_elem<T>(v0);
          }
          if (col + 1 < p.n) {
            if constexpr (kResidual) v1 += elem_to_float(rrow[col + 1]);
            crow[col + 1] = float_to_elem<T>(v1);
          }
        }
      }
    }
  }
}

bool rows_vectorizable(const MatmulArgs& g) {
  return g.lda % 8 == 0 && g.ldw % 8 == 0 && reinterpret_cast<uintptr_t>(g.a) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(g.w) % 16 == 0;
}

template <class T, class Tl, bool kVec, bool kResidual, bool kPipe = false>
Status run_mma(const MatmulArgs& g, cudaStream_t stream) {
  MmaArgs p{};
  set_operands(p, g);
  p.r = g.residual;
  p.ldr = g.ldr;
  p.tiles_m = static_cast<int>((g.m + kBM - 1) / kBM);
  p.tiles_n = static_cast<int>((g.n + kBN - 1) / kBN);
  auto kernel = hgemm_mma_kernel<T, Tl, kVec, kResidual, kPipe>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tl::kSmemBytes);
  if (e != cudaSuccess) return from_cuda(e, "cudaFuncSetAttribute(shared memory)");
  const int64_t blocks = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
  if (blocks >= (int64_t{1} << 31)) return fail("hgemm_mma: too many tiles");
  kernel<<<static_cast<unsigned>(blocks), kThreads, Tl::kSmemBytes, stream>>>(p);
  return from_cuda(cudaGetLastError(), "launching hgemm_mma");
}

// The 64-k tiling is built for 16-byte aligned rows only: other rows (K % 8 != 0) take the
// 32-k tiling's synchronous loader.
template <class T, bool kResidual>
Status run_mma_config(const MatmulArgs& g, MmaConfig config, cudaStream_t stream) {
  if (!rows_vectorizable(g)) return run_mma<T, Tiling<32>, false, kResidual>(g, stream);
  if constexpr (!kResidual) {   // the residual epilogue runs the 32-k tiling only
    // auto: bk64_pipe where the 64-k tiling's stages fit in one block's shared memory (not on
    // sm_80's 163 KiB or sm_86/89's 99 KiB): 0.59-0.64x cuBLAS against bk64's 0.50-0.53x and
    // bk32's 0.36-0.40x on the H200 (results/h200/issue13/2026-12-02c/mma_call3.json, gemm.json).
    const bool fits = max_smem_optin() >= Tiling<64>::kSmemBytes;
    const bool named64 = config == MmaConfig::kBk64 || config == MmaConfig::kBk64Pipe;
    if (named64 && !fits) {
      return fail(std::string("gemm_mma config ") + mma_config_name(config) + " needs " +
                      std::to_string(Tiling<64>::kSmemBytes) +
                      " bytes of shared memory per block; this GPU allows " +
                      std::to_string(max_smem_optin()) + " (use bk32 or auto)",
                  cudaErrorNotSupported);
    }
    if (config == MmaConfig::kBk64) return run_mma<T, Tiling<64>, true, false>(g, stream);
    if (config == MmaConfig::kBk64Pipe || (config == MmaConfig::kAuto && fits)) {
      return run_mma<T, Tiling<64>, true, false, true>(g, stream);
    }
  }
  return run_mma<T, Tiling<32>, true, kResidual>(g, stream);
}

Status check_mma_args(const MatmulArgs& g) {
  if (Status st = check_sizes(g); !st.ok()) return st;
  const int cc = device_capability();
  if (cc != 0 && cc < 80) {
    return fail("hgemm_mma needs compute capability 8.0 or later (mma.sync bf16, cp.async)",
                cudaErrorNotSupported);
  }
  return ok();
}

template <bool kResidual>
Status dispatch_mma(DType dt, const MatmulArgs& g, MmaConfig config, cudaStream_t stream) {
  Status st = check_mma_args(g);
  if (!st.ok()) return st;
  if (dt == DType::kBFloat16) return run_mma_config<__nv_bfloat16, kResidual>(g, config, stream);
  if (dt == DType::kFloat16) return run_mma_config<__half, kResidual>(g, config, stream);
  return fail("hgemm_mma takes bfloat16 or float16 inputs");
}

}  // namespace

const char* mma_config_name(MmaConfig c) {
  switch (c) {
    case MmaConfig::kAuto: return "auto";
    case MmaConfig::kBk32: return "bk32";
    case MmaConfig::kBk64: return "bk64";
    case MmaConfig::kBk64Pipe: return "bk64_pipe";
  }
  return "unknown";
}

Status launch_hgemm_mma(DType dt, const MatmulArgs& args, cudaStream_t stream, MmaConfig config) {
  return dispatch_mma<false>(dt, args, config, stream);
}

// linear_residual on GPUs without wgmma, or rows TMA cannot read (see linear_residual.cu).
Status launch_hgemm_mma_residual(DType dt, const MatmulArgs& args, cudaStream_t stream) {
  if (args.residual == nullptr) return fail("linear_residual needs a residual");
  return dispatch_mma<true>(dt, args, MmaConfig::kBk32, stream);
}

}  // namespace sk::gemm
