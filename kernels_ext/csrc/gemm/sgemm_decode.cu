// sgemm_decode: C[M, N] = A[M, K] @ W[N, K]^T in fp32 on the CUDA cores for small M (M <=
// kDecodeMmaMaxM = 16: decode). At M = 16, N = K = 8192, W is 256 MiB read once and the 2.1
// GFLOP of FMAs would take about 60% of the FP32 pipes for as long as HBM takes to deliver W; the
// 128 x 128 sgemm tiles put 64 CTAs on it and run at a sixth of cuBLAS (H100, 2026-12-06).
// The layout follows gemm_decode_mma (the 16-bit kernel), with FMAs for the mma:
//   - W streams straight into registers: lane (g, t) = (lane / 8, lane % 8) loads 16 bytes (4 k)
//     at k0 + 4t of row g of each of its G row groups, so one load instruction reads 4 rows x 128
//     contiguous bytes (tile::ldg_stream_16_as_if: L1::no_allocate, the chosen L2 hints), D
//     chunks of 32 k ahead per group: G x D x 16 bytes per thread in flight, 64 KiB per SM.
//   - Every W value meets all the tokens in the lane that loaded it: the lane keeps G x T partial
//     sums (T tokens: M rounded up to 1, 2, 4, 8 or 16) and needs x[token][k0 + 4t .. + 3] for each
//     token. Those come from shared memory: each warp copies its chunks of x (T x 32 floats, 128
//     bytes per token) into its own ring of XD slots with cp.async, XD - 1 chunks ahead, and reads
//     them back as 16-byte words (8 distinct words per instruction, the 4 row lanes share them:
//     one wavefront). One x word feeds 4 G FMAs. Only the warp reads its ring, so __syncwarp is
//     the only barrier in the loop.
//   - CTA = 8 warps: kRowWarps side by side over rows, 8 / kRowWarps K-splits (as in
//     gemm_decode_mma). A warp's sums are added over its 8 k lanes by xor shuffles, then the
//     K-splits through shared memory in split order: deterministic, one kernel, no workspace.
//   - The grid and the CTA height (halved where full-height CTAs would leave SMs idle) come from
//     decode_rule.h, as for gemm_decode_mma.
// Rows past a CTA's rows read its last row and are not written; tokens past M and k past K are
// zeros (copies zero-filled, loads predicated off). Needs K % 4 == 0 and 16-byte aligned A and W
// rows (a piece is wholly inside or outside K).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../tile/cp_async.cuh"
#include "../tile/ldg.cuh"
#include "decode_rule.h"
#include "gemm.h"

namespace sk::gemm {
namespace {

constexpr int kLanesPerRow = 8;                  // 8 x 16 bytes: 128 contiguous bytes of a row
constexpr int kRowsPerLoad = 32 / kLanesPerRow;  // rows one load instruction covers
constexpr int kChunk = 4 * kLanesPerRow;         // k per chunk
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kXDepth = 3;                       // x ring slots per warp (2 chunks in flight)
constexpr int kSdecodePrefetch = 0;              // L2 prefetch distance (chunks) when none is asked

// kRowWarps warps over rows, kGroups row groups (of kRowsPerLoad rows) per lane, kDepth chunks of
// W in flight per group.
// kMinBlocks CTAs resident per SM (2: 128 registers a thread; 1: 255).
template <int kRowWarps_, int kGroups_, int kDepth_, int kMinBlocks_>
struct SdecodeShape {
  static constexpr int kRowWarps = kRowWarps_;
  static constexpr int kGroups = kGroups_;
  static constexpr int kDepth = kDepth_;
  static constexpr int kKSplit = kWarps / kRowWarps;
  static constexpr int kRows = kRowWarps * kGroups * kRowsPerLoad;  // W rows per CTA
  static constexpr int kMinBlocks = kMinBlocks_;
  static_assert(kWarps % kRowWarps == 0, "the warps divide into row warps x K-splits");
};

struct SdecodeArgs : GemmOperands<float, float> {
  int chunks;     // ceil(K / kChunk)
  int per_split;  // chunks per K-split
  int ctas;       // CTA b takes rows [b n / ctas, (b + 1) n / ctas)
  int prefetch;   // chunks of W asked of L2 ahead of the register loads (0: none)
};

__device__ __forceinline__ int row_begin(const SdecodeArgs& p, int b) {
  return static_cast<int>(static_cast<int64_t>(b) * p.n / p.ctas);
}

__device__ __forceinline__ float4 as_float4(uint4 v) {
  return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                     __uint_as_float(v.w));
}

// The x ring and, after the main loop, the K-split partials (red[split][token][row]) share one
// static buffer: 8 warps x 3 slots x 16 tokens x 128 bytes is 48 KiB at T = 16.
template <int T>
constexpr int kXSlotFloats = T * kChunk;
template <int T>
constexpr int kRingFloats = kWarps * kXDepth * kXSlotFloats<T>;

template <int T, class S>
__global__ void __launch_bounds__(kThreads, S::kMinBlocks) sgemm_decode_kernel(const SdecodeArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int G = S::kGroups;
  constexpr int D = S::kDepth;
  constexpr int kRows = S::kRows;
  static_assert(S::kKSplit * T * kRows <= kRingFloats<T>, "the partials fit in the x ring");
  __shared__ __align__(16) float ring[kRingFloats<T>];

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / kLanesPerRow, t = lane % kLanesPerRow;
  const int rw = warp % S::kRowWarps, q = warp / S::kRowWarps;
  const int cta_row = row_begin(p, static_cast<int>(blockIdx.x));
  const int cta_rows = row_begin(p, static_cast<int>(blockIdx.x) + 1) - cta_row;
  const int slot0 = rw * G * kRowsPerLoad;   // this row warp's first row slot in the CTA
  const int base = min(q * p.per_split, p.chunks);
  const int n_chunks = min(base + p.per_split, p.chunks) - base;
  // A piece at chunk i (of the split) and offset `o` within it exists when i * kChunk + o < lim.
  const int lim = min((base + n_chunks) * kChunk, p.k) - base * kChunk;

  // Group r's row is row 0's plus r kRowsPerLoad rows (clamped to the CTA's last row: at most the
  // last groups of the last CTA are clamped, and those are only read, never written).
  const float* wp = p.w + static_cast<int64_t>(cta_row + min(slot0 + g, cta_rows - 1)) * p.ldw +
                    static_cast<int64_t>(base) * kChunk + 4 * t;
  int group_ofs[G];   // elements from wp to group r's row (32-bit: the CTA spans few rows)
#pragma unroll
  for (int r = 0; r < G; ++r) {
    const int row = min(slot0 + kRowsPerLoad * r + g, cta_rows - 1);
    group_ofs[r] = (row - min(slot0 + g, cta_rows - 1)) * static_cast<int>(p.ldw);
  }
  const uint64_t once = tile::l2_policy_evict_first();
  // L2 prefetch: lane l < 4 G asks for the line of the warp's row l, p.prefetch chunks ahead.
  constexpr int kWarpRows = G * kRowsPerLoad;
  const float* pfp = p.w + static_cast<int64_t>(cta_row + min(slot0 + lane % kWarpRows, cta_rows - 1)) * p.ldw +
                     static_cast<int64_t>(base) * kChunk;
  const bool pf_lane = lane < kWarpRows && p.prefetch > 0;
  auto prefetch_w = [&](int i) { tile::prefetch_l2_if(pfp + i * kChunk, pf_lane && i * kChunk < lim); };
  auto load_w = [&](uint4 (&dst)[G], int i, int j) {
    const bool ok = i * kChunk + 4 * t < lim;
#pragma unroll
    for (int r = 0; r < G; ++r) {
      dst[r] = tile::ldg_stream_16_as_if<tile::StreamLoad::kEvictFirst256>(
          wp + group_ofs[r] + j * kChunk, once, ok);
    }
  };

  // This warp's ring; the copy of chunk i: piece e = lane + 32 s is token e / 8 = g + 4 s, k 4 t.
  float* xring = ring + warp * kXDepth * kXSlotFloats<T>;
  const uint32_t xring_s = static_cast<uint32_t>(__cvta_generic_to_shared(xring));
  const float* xp = p.a + static_cast<int64_t>(g) * p.lda + static_cast<int64_t>(base) * kChunk + 4 * t;
  const int64_t x_step = kRowsPerLoad * p.lda;   // from token g + 4 s to g + 4 (s + 1)
  auto copy_x = [&](int i, int slot) {
    constexpr int kPieces = T * kLanesPerRow;
    const bool k_ok = i * kChunk + 4 * t < lim;
#pragma unroll
    for (int s = 0; s < (kPieces + 31) / 32; ++s) {
      if (kPieces < 32 && lane + 32 * s >= kPieces) break;
      const bool ok = k_ok && g + kRowsPerLoad * s < p.m;
      const float* src = ok ? xp + s * x_step + i * kChunk : p.a;
      const uint32_t dst = xring_s + 4u * static_cast<uint32_t>(slot * kXSlotFloats<T> + 4 * (lane + 32 * s));
      tile::cp_async_16(dst, src, ok);
    }
    tile::cp_async_commit();
  };

  float acc[G][T];
#pragma unroll
  for (int r = 0; r < G; ++r) {
#pragma unroll
    for (int tk = 0; tk < T; ++tk) acc[r][tk] = 0.0f;
  }
  uint4 wq[D][G];
#pragma unroll
  for (int u = 0; u < D; ++u) load_w(wq[u], u, u);
  for (int i = D; i < D + p.prefetch; ++i) prefetch_w(i);
#pragma unroll
  for (int s = 0; s < kXDepth - 1; ++s) copy_x(s, s);

  // Chunk i0 + u sits in W slot u (refilled with chunk i0 + u + D once used) and x slot (i0 + u) %
  // kXDepth. Chunks past the split are zeros in both: the last round needs no tests.
  int xs = 0;   // x slot of the chunk being computed
  for (int i0 = 0; i0 < n_chunks; i0 += D) {
#pragma unroll
    for (int u = 0; u < D; ++u) {
      const int i = i0 + u;
      tile::cp_async_wait<kXDepth - 2>();
      __syncwarp();   // chunk i's copies visible to the warp; every lane is done with chunk i - 1
      copy_x(i + kXDepth - 1, xs == 0 ? kXDepth - 1 : xs - 1);
      prefetch_w(i + D + p.prefetch);
      const float* xv = xring + xs * kXSlotFloats<T> + 4 * t;
#pragma unroll
      for (int tk = 0; tk < T; ++tk) {
        const float4 x4 = *reinterpret_cast<const float4*>(xv + tk * kChunk);
#pragma unroll
        for (int r = 0; r < G; ++r) {
          const float4 w4 = as_float4(wq[u][r]);
          float a = acc[r][tk];
          a = fmaf(w4.x, x4.x, a);
          a = fmaf(w4.y, x4.y, a);
          a = fmaf(w4.z, x4.z, a);
          acc[r][tk] = fmaf(w4.w, x4.w, a);
        }
      }
      load_w(wq[u], i + D, u + D);
      xs = xs == kXDepth - 1 ? 0 : xs + 1;
    }
    wp += D * kChunk;
  }
  tile::cp_async_wait<0>();

  // Sum over the row's 8 k lanes, then the K-splits in split order through the (now free) ring.
#pragma unroll
  for (int r = 0; r < G; ++r) {
#pragma unroll
    for (int tk = 0; tk < T; ++tk) {
#pragma unroll
      for (int off = kLanesPerRow / 2; off > 0; off >>= 1) {
        acc[r][tk] += __shfl_xor_sync(0xffffffffu, acc[r][tk], off);
      }
    }
  }
  __syncthreads();   // every warp is out of its ring
  float* red = ring;   // [kKSplit][T][kRows]
  if (t == 0) {
#pragma unroll
    for (int r = 0; r < G; ++r) {
#pragma unroll
      for (int tk = 0; tk < T; ++tk) red[(q * T + tk) * kRows + slot0 + kRowsPerLoad * r + g] = acc[r][tk];
    }
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < T * kRows; e += kThreads) {
    const int token = e / kRows, rl = e % kRows;
    if (token >= p.m || rl >= cta_rows) continue;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < S::kKSplit; ++s) sum += red[(s * T + token) * kRows + rl];
    p.c[static_cast<int64_t>(token) * p.ldc + cta_row + rl] = sum;
  }
#endif
}

template <int T, class S>
Status run_shape(const MatmulArgs& g, const DecodeOptions& opt, int sms, cudaStream_t stream) {
  SdecodeArgs p{};
  set_operands(p, g);
  p.chunks = static_cast<int>((g.k + kChunk - 1) / kChunk);
  p.per_split = (p.chunks + S::kKSplit - 1) / S::kKSplit;
  p.ctas = static_cast<int>(decode_ctas(g.n, S::kRows, S::kMinBlocks, opt.grid, sms));
  p.prefetch = decode_prefetch_chunks(opt, kSdecodePrefetch);
  sgemm_decode_kernel<T, S><<<static_cast<unsigned>(p.ctas), kThreads, 0, stream>>>(p);
  return from_cuda(cudaGetLastError(), "launching sgemm_decode");
}

// Thread tiles (registers decide: 128 per thread for two CTAs per SM; nvcc 13.0, sm_90a):
//   rows4: 4 row groups, so one x word feeds 16 FMAs; with 16 tokens its 64 sums leave room for
//          one chunk of W per group (64 bytes in flight per thread), two for T <= 4;
//   rows2: 2 row groups (8 FMAs per x word), two chunks of W in flight per group, four for T <= 4.
// Deeper rings at T = 16 spilled (rows4 with 2 chunks: 372 bytes; rows2 with 4: 72 bytes).
// 32-row CTAs are 2 row warps x 4 K-splits (rows4) or 4 x 2 (rows2); 16-row CTAs 1 x 8 or 2 x 4.
//   rows4_d3: one CTA per SM (255 registers), so 3 chunks of W per group stay in flight at every
//          T; 64-row CTAs (32-row where 64-row ones would leave SMs idle).
// auto (sdecode_auto_config, decode_rule.h): rows4 at 1 and 2 tokens, rows4_d3 at 4 and 8, tf32x3
// at 16: on an H100 (stage sdecode, results/h100/issue13/2026-12-07b/call2) it ran M = 16 at
// N = K = 8192 in 95.8 us where rows4 took 111.4 (1.16x; 1.11x at N = 4096, K = 14336, 1.14x at
// N = 16384, 1.05x at N = K = 1024), its inf/NaN path passing test_sgemm_decode_keeps_ieee_specials
// (call1). Before that, tf32x3 (stage tf3, results/h100/issue13/2026-12-07/call1/tf3) ran M = 16
// at N = K = 8192 in 100.8 us on an H100 where rows4 took 116.2 (1.15x; 1.13x at N = 4096,
// K = 14336 and 1.15x at N = 16384), its error
// 2.5e-7 against rows4's 2.9e-7 and cuBLAS fp32's 5.8e-7; at M = 4 and 8 it was level with rows4_d3
// (96.7 / 97.2 us against 95.5 / 100.6 the day before), at M = 1 6% slower than rows4 (96.2 against
// 90.8). Timed by solbench run (scripts/tune/specs/sdecode_depth.yaml;
// results/h100/issue13/2026-12-06c/sdepth, results/h200/issue13/2026-12-06/sdepth): at N = K = 8192
// rows4_d3 ran M = 4 and 8 in 95.8 and 100.2 us on the H100 where rows4 took 109.2 and 106.8, and
// level on the H200 (72.9 / 77.2 against 74.9 / 77.2); at M = 16 it was 5-16% slower on both,
// at M = 1 7% on the H100. Also measured and taken out: rows4 with 2 or 4 chunks and rows2 with 8, one
// CTA per SM (no faster anywhere; in commit 760bc39); 8 row groups a warp, one CTA per SM (half the
// copies of x per byte of W: 9% slower at M = 16 on the H200); x copied through L1, cp.async.ca (no
// change, to 1%).
// Also taken out: rows4_xlast, rows4 with x's copies marking their L2 lines evict_last, to test
// whether x's lines were the 13 us the L2 flush cost rows4 at M = 16 (110.8 against 97.7 us unflushed
// on an H100): no faster than rows4 with or without the flush
// (results/h100/issue13/2026-12-07/call1/tf3; in commit 2d77a30).
template <int T, int G, int D, int kPerSm>
Status run_tile(const MatmulArgs& g, const DecodeOptions& opt, cudaStream_t stream) {
  const int sms = sm_count();
  constexpr int kCtaRows = 64 / kPerSm;
  constexpr int kRowWarps = kCtaRows / (G * kRowsPerLoad);
  if (decode_halves_rows(g.n, kCtaRows, kPerSm, sms)) {
    return run_shape<T, SdecodeShape<kRowWarps / 2, G, D, kPerSm>>(g, opt, sms, stream);
  }
  return run_shape<T, SdecodeShape<kRowWarps, G, D, kPerSm>>(g, opt, sms, stream);
}

template <int T>
Status run_tokens(const MatmulArgs& g, SdecodeConfig config, const DecodeOptions& opt, cudaStream_t stream) {
  switch (config) {
    case SdecodeConfig::kRows2: return run_tile<T, 2, (T <= 4 ? 4 : 2), 2>(g, opt, stream);
    case SdecodeConfig::kRows4D3: return run_tile<T, 4, 3, 1>(g, opt, stream);
    default: return run_tile<T, 4, (T <= 4 ? 2 : 1), 2>(g, opt, stream);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* sdecode_config_name(SdecodeConfig c) {
  switch (c) {
    case SdecodeConfig::kAuto: return "auto";
    case SdecodeConfig::kRows4: return "rows4";
    case SdecodeConfig::kRows2: return "rows2";
    case SdecodeConfig::kRows4D3: return "rows4_d3";
    case SdecodeConfig::kTf32x3: return "tf32x3";
  }
  return "unknown";
}

bool sgemm_decode_supports(const MatmulArgs& args) {
  // A CTA's row offsets are 32-bit (32 rows x ldw elements).
  return args.m >= 1 && args.m <= kDecodeMmaMaxM && args.k % 4 == 0 && args.lda % 4 == 0 &&
         args.ldw % 4 == 0 && args.ldw < (int64_t{1} << 26) && aligned16(args.a) && aligned16(args.w);
}

Status launch_sgemm_decode(const MatmulArgs& args, cudaStream_t stream, SdecodeConfig config,
                           DecodeOptions opt) {
  if (Status st = check_sizes(args); !st.ok()) return st;
  if (args.m > kDecodeMmaMaxM) {
    return fail("sgemm_decode handles M <= " + std::to_string(kDecodeMmaMaxM) + " (got M = " +
                std::to_string(args.m) + ")");
  }
  if (!sgemm_decode_supports(args)) {
    return fail("sgemm_decode reads 16-byte pieces of rows: K must be a multiple of 4 for "
                "float32 inputs (got K = " + std::to_string(args.k) +
                ") and A and W 16-byte aligned, K below 2^26");
  }
  const int cc = device_capability();
  if (cc != 0 && cc < 80) {
    return fail("sgemm_decode needs compute capability 8.0 or later (cp.async)", cudaErrorNotSupported);
  }
  if (config == SdecodeConfig::kAuto) config = sdecode_auto_config(sgemm_decode_tokens(args.m));
  if (config == SdecodeConfig::kTf32x3) return launch_decode_mma_tf32x3(args, stream, opt);
  switch (sgemm_decode_tokens(args.m)) {
    case 1: return run_tokens<1>(args, config, opt, stream);
    case 2: return run_tokens<2>(args, config, opt, stream);
    case 4: return run_tokens<4>(args, config, opt, stream);
    case 8: return run_tokens<8>(args, config, opt, stream);
    default: return run_tokens<16>(args, config, opt, stream);
  }
}

}  // namespace sk::gemm
