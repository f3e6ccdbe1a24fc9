// gemm_decode_mma: C[M, N] = A[M, K] @ W[N, K]^T for small M (M <= kDecodeMmaMaxM = 16:
// decode), sm_80 and later. The work is reading W once (N * K * 2 bytes: 128 MiB at
// N = K = 8192), so the kernel is laid out around HBM, not the tensor cores:
//   - W never goes through shared memory: every lane streams 16-byte pieces of W rows straight
//     into registers (tile::ldg_stream_16_if: no L1 allocation, evict-first in L2, a 256-byte
//     L2 prefetch), kDepth chunks ahead for each of its row groups, each row read in 256-byte
//     runs, two 256-thread CTAs per SM keeping 64 KiB of W in flight. (gemm_decode's TMA ring
//     reads 128-byte pieces of 128 rows per stage and measured 2.98 TB/s on the H200; the
//     row-streaming gemv kernels reach 3.5-4.0 TB/s.)
//   - the math is mma.sync m16n8k16 with A = x (16 tokens x k16) and B = W^T (k16 x 8 rows of
//     W). A dot product does not care in which order k is summed as long as A and B agree, so
//     lane (g, t) = (lane / 4, lane % 4) loads the 8 consecutive elements k0 + 8t .. k0 + 8t + 7
//     of W row g and of x rows g and g + 8 (one 16-byte load each), which feed two k16 steps:
//       step s: b = {w[2s], w[2s+1]},  a = {xg[2s], xg8[2s], xg[2s+1], xg8[2s+1]}  (b32 words)
//     i.e. the fragment's logical k (2t, 2t+1) of step s is physical k0 + 8t + 4s + (0, 1) and
//     logical (2t+8, 2t+9) is k0 + 8t + 4s + (2, 3), for A and B alike (mma_sync.cuh has the
//     fragment layouts). No ldmatrix, no shared memory in the main loop. A shape may instead load
//     W 8 lanes to a row (kRowLanes: 128 contiguous bytes per row per instruction) and shuffle
//     each lane its row's pieces (gather_row); Rows16 does, with no L2 hints.
//   - x (M x K: 256 KiB at M = 16, K = 8192) is re-read by every CTA through L1 (tile::ldg_16_if);
//     each x fragment serves two n8 row groups. One m16 tile of tokens: M <= 16 (a second tile
//     would need registers the 128-register threads do not have; M = 17..64 is gemm_decode's).
//   - CTA = 8 warps over up to 32 rows of W: 2 row warps (16 rows each) x 4 K-splits; the
//     splits' partial sums are added through shared memory in a fixed order (deterministic) and
//     written once in the output dtype: no split across CTAs, no workspace, one kernel. When
//     N / 32 CTAs would fill under three quarters of the SMs' two slots (N = 4096: 128 CTAs),
//     CTAs take 16 rows as 1 row warp x 8 K-splits. DecodeShape names the layouts.
//   - The grid (DecodeGrid): CTA b takes rows [b N / G, (b + 1) N / G) of G CTAs, so the rows
//     are spread evenly whatever G is. `tiles` is G = ceil(N / rows per CTA); `waves` rounds G
//     up to whole waves of resident CTAs (two per SM), so that no SM streams more of W than
//     another: at N = K = 8192, 256 CTAs of 32 rows leave 8 of the H200's 264 slots empty and
//     124 SMs carry 64 rows where 62.1 would do; 264 CTAs of 31-32 rows do not.
//   - T = float is sgemm_decode's `tf32x3`: the same layout with 4 floats per 16-byte piece, two
//     m16n8k8 TF32 steps per piece where 16-bit types take two m16n8k16 ones (the k permutation
//     is the same: words 2s and 2s + 1 of the piece), each fp32 product as three TF32 ones
//     (tile::mma_m16n8k8_tf32x3): about 30 instructions per 16 bytes of W at 16 tokens where the
//     CUDA-core kernel issues 64 FMAs and 4 shared-memory reads (docs/PERF.md, 2026-12-06).
// Row slots past a CTA's rows read its last row and are not written; tokens past M and k past K
// are zeros in registers (never loaded). Needs K a multiple of a 16-byte piece (8 16-bit
// elements, 4 floats) and 16-byte aligned A and W rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "../common/reduce.cuh"
#include "../tile/ldg.cuh"
#include "../tile/mma_sync.cuh"
#include "gemm.h"
#include "gemm_common.cuh"

namespace sk::gemm {
namespace {

// Elements of T in one 16-byte piece; k of one mma pair: one piece for each of a row's 4 lanes
// (32 k of a 16-bit type, 16 of float: two m16n8k8 tf32 steps instead of two m16n8k16 ones).
template <class T>
constexpr int kPer16 = 16 / static_cast<int>(sizeof(T));
template <class T>
constexpr int kSubChunk = 4 * kPer16<T>;

// A CTA's layout: kWarps warps, kRowWarps of them side by side over rows (kGroups n8 row groups
// each, sharing every x fragment), kWarps / kRowWarps over K. In flight per thread: kDepth chunks
// of W per row group (the HBM stream), kXDepth of x (L1/L2 hits: a short ring suffices).
// kInterleave: K-split q takes chunks q, q + kKSplit, ... (the splits of a row read neighbouring
// 64-byte pieces) instead of one contiguous quarter of the row each.
// kLoad: how W is loaded (tile::StreamLoad; the full hint set unless a shape names another).
// kRowLanes: lanes that load one row of W in one instruction (16 bytes each). 4 is the mma's own
// layout (lane (g, t) reads row g: 8 rows x 64 bytes per instruction); 8 or 16 read 4 rows x 128
// or 2 rows x 256 contiguous bytes, and shuffles then hand each lane its row's pieces
// (gather_row). A chunk is then kRowLanes / 4 sub-chunks of 32 k.
template <int kWarps_, int kRowWarps_, int kGroups_, int kDepth_, bool kInterleave_ = false,
          tile::StreamLoad kLoad_ = tile::StreamLoad::kEvictFirst256, int kRowLanes_ = 4>
struct DecodeShape {
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowWarps = kRowWarps_;
  static constexpr int kGroups = kGroups_;
  static constexpr int kDepth = kDepth_;
  static constexpr int kXDepth = 2;
  static constexpr bool kInterleave = kInterleave_;
  static constexpr tile::StreamLoad kLoad = kLoad_;
  static constexpr int kRowLanes = kRowLanes_;
  static constexpr int kSubChunks = kRowLanes / 4;             // per chunk; also W loads per group
  template <class T>
  static constexpr int kChunkOf = kSubChunk<T> * kSubChunks;   // k per chunk
  static_assert(kRowLanes == 4 || kRowLanes == 8 || kRowLanes == 16, "4, 8 or 16 lanes per row");
  static constexpr int kKSplit = kWarps / kRowWarps;
  static constexpr int kRows = kRowWarps * kGroups * 8;   // W rows per CTA
  // One CTA per SM at 512 threads (128 registers), two at 256.
  static constexpr int kMinBlocks = kThreads >= 512 ? 1 : 2;
  static_assert(kWarps % kRowWarps == 0, "the warps divide into row warps x K-splits");
  static_assert(kDepth % kXDepth == 0, "the x ring's slots repeat within the W ring's");
  static_assert(kKSplit * 16 * kRows * 4 <= 32 * 1024, "the K-split partials fit 32 KiB");
};

// The library's shapes (scripts/tune/decode_probe.cu and solbench run on the H200,
// results/h200/issue13/2026-12-01_s6/):
//  - Rows32: 256-thread CTAs, two per SM, 2 row warps x 4 K-splits, 4 chunks of W in flight per
//    row group (16 B x 2 groups x 4 = 128 B per thread, 64 KiB per SM). Fewer bytes in flight than
//    the 512-thread, 8-deep CTA the kernel had first (128 KiB per SM) ran faster: 35.5 against
//    38.0 us at M = 16, N = K = 8192; 67.1 against 69.5 at N = 16384 (probe).
//  - Rows16: the same CTA over 16 rows (1 row warp x 8 K-splits), when N / 32 CTAs would fill under
//    three quarters of the SMs' two slots (N = 4096, K = 14336: 0.95x cuBLAS under solbench run; a
//    512-thread 32-row CTA of 16 K-splits, faster in the probe, ran 0.91x there). Since 2026-12-02 it
//    loads W 8 lanes to a row (4 rows x 128 contiguous bytes per instruction, shuffled into the
//    mma's layout), 2 chunks of 64 k in flight (the same bytes), no L2 hints: 32.9 against 34.0 us
//    at N = 4096, K = 14336 in two probe runs (cuBLAS 33.8-34.3; results/h200/issue13/2026-12-02d/).
//    The same change made Rows32 no faster (36.3-36.4 against 36.1-36.2 us at N = K = 8192), nor
//    did 128-byte rows with K-splits interleaved, so Rows32 keeps the mma's layout and the hints.
using Rows32 = DecodeShape<8, 2, 2, 4>;
using Rows16 = DecodeShape<8, 1, 2, 2, false, tile::StreamLoad::kNoAllocate, 8>;
// tf32x3's 16-row CTA keeps Rows32's lane layout: Rows16's row shuffles, with the split operands
// and a piece's accumulator, need more than 128 registers (16 bytes spilled, nvcc 13.0, sm_90a).
using Rows16F = DecodeShape<8, 1, 2, 4>;
constexpr int kDecodeMmaPrefetch = 0;   // L2 prefetch distance (chunks) when none is asked

struct DecodeMmaArgs : GemmOperands<void, void> {
  int chunks;     // ceil(K / kChunk)
  int per_split;  // chunks per K-split (contiguous splits)
  int ctas;       // the grid: CTA b takes rows [b n / ctas, (b + 1) n / ctas), at most kRows
  int prefetch;   // chunks of W asked of L2 ahead of the register loads (0: none)
};

// CTA b's first row (b = ctas: n). b * n in 64 bits: with 16-row CTAs it passes 2^31 from N = 185,364.
__device__ __forceinline__ int decode_row_begin(const DecodeMmaArgs& p, int b) {
  return static_cast<int>(static_cast<int64_t>(b) * p.n / p.ctas);
}

// Row g's piece of sub-chunk q for lane (g, t) = (lane / 4, lane % 4), from a chunk loaded kRowLanes
// lanes to a row: load i holds row P i + lane / R at k = 8 (lane % R), P = 32 / R rows per load,
// so the piece is in load g / P of lane R (g % P) + 4 q + t. One shuffle per load, the right one
// kept (R = 4: the loads are the mma's layout already, no shuffle).
template <int R>
__device__ __forceinline__ uint4 gather_row(const uint4 (&v)[R / 4], int q, int lane) {
  if constexpr (R == 4) {
    (void)q, (void)lane;
    return v[0];
  } else {
    constexpr int P = 32 / R;
    const int g = lane / 4, t = lane % 4;
    const int src = R * (g % P) + 4 * q + t;
    uint4 out = v[0];
#pragma unroll
    for (int i = 0; i < R / 4; ++i) {
      uint4 x;
      x.x = __shfl_sync(0xffffffffu, v[i].x, src);
      x.y = __shfl_sync(0xffffffffu, v[i].y, src);
      x.z = __shfl_sync(0xffffffffu, v[i].z, src);
      x.w = __shfl_sync(0xffffffffu, v[i].w, src);
      if (g / P == i) out = x;
    }
    return out;
  }
}

// tf32x3's exact path: the CTA's outputs (rows [row0, row0 + rows), every token) in fp32 FMAs, a
// warp per row. Taken only when a partial sum came out inf or NaN: an inf (or a value that rounds
// to inf as TF32) in x or W gives a NaN lo part (inf - inf), and the three products cannot tell an
// inf from an overflow, so the CTA redoes its rows the way IEEE fp32 (and cuBLAS) would.
__device__ __forceinline__ void decode_rows_exact_fp32(const DecodeMmaArgs& p, int row0, int rows) {
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const float* x = static_cast<const float*>(p.a);
  float* c = static_cast<float*>(p.c);
  for (int r = warp; r < rows; r += warps) {
    const float* w = static_cast<const float*>(p.w) + static_cast<int64_t>(row0 + r) * p.ldw;
    for (int token = 0; token < p.m; ++token) {
      const float* xt = x + static_cast<int64_t>(token) * p.lda;
      float sum = 0.0f;
      for (int k = lane; k < p.k; k += 32) sum = fmaf(xt[k], w[k], sum);
      sum = warp_allreduce<SumOp>(sum);
      if (lane == 0) c[static_cast<int64_t>(token) * p.ldc + row0 + r] = sum;
    }
  }
}

template <class T, class S>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks) gemm_decode_mma_kernel(const DecodeMmaArgs p) {
  constexpr int D = S::kDepth;
  constexpr int XD = S::kXDepth;
  constexpr int G = S::kGroups;
  constexpr int kKSplit = S::kKSplit;
  constexpr int kRows = S::kRows;
  constexpr int R = S::kRowLanes;
  constexpr int I = S::kSubChunks;
  constexpr int kChunk = S::template kChunkOf<T>;
  constexpr int kStride = S::kInterleave ? kKSplit : 1;   // chunks between a split's neighbours
  __shared__ float red[kKSplit][16][kRows];

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int rw = warp % S::kRowWarps, q = warp / S::kRowWarps;
  const int cta_row = decode_row_begin(p, static_cast<int>(blockIdx.x));
  const int cta_rows = decode_row_begin(p, static_cast<int>(blockIdx.x) + 1) - cta_row;
  const int slot0 = rw * G * 8;   // this row warp's first row slot in the CTA
  // This split's chunks: base, base + kStride, ... (n_chunks of them).
  const int base = S::kInterleave ? q : min(q * p.per_split, p.chunks);
  const int c_end = S::kInterleave ? p.chunks : min(base + p.per_split, p.chunks);
  const int n_chunks = S::kInterleave ? (p.chunks - q + kKSplit - 1) / kKSplit : c_end - base;
  const int wofs = kPer16<T> * (lane % R);   // this lane's first element of W within a chunk
  const int xofs = kPer16<T> * t;            // and of x within a sub-chunk

  // Row pointers at this lane's pieces of chunk `base` (load i of group r: row 8 r + P i + lane / R
  // of the row warp's), advanced by D chunks of the split per round.
  // A slot past the CTA's rows reads its last row again: within one load instruction where the
  // CTA has 24 or more rows (the same addresses, one request), an L2 hit elsewhere. Predicating
  // those loads off instead cost Rows16 its registers (128 and 60 bytes of spills, nvcc 13.0).
  const T* wp[G][I];
#pragma unroll
  for (int r = 0; r < G; ++r) {
#pragma unroll
    for (int i = 0; i < I; ++i) {
      const int row = cta_row + min(slot0 + 8 * r + (32 / R) * i + lane / R, cta_rows - 1);
      wp[r][i] = static_cast<const T*>(p.w) + static_cast<int64_t>(row) * p.ldw +
                 static_cast<int64_t>(base) * kChunk + wofs;
    }
  }
  const T* xp[2];    // x rows g and g + 8 (tokens)
  bool xlive[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int token = 8 * h + g;
    xlive[h] = token < p.m;
    xp[h] = static_cast<const T*>(p.a) + static_cast<int64_t>(xlive[h] ? token : 0) * p.lda +
            static_cast<int64_t>(base) * kChunk + xofs;
  }
  // A piece of the split's chunk i exists when it starts before the split's end and before K
  // (K a multiple of kPer16: a piece is wholly in or wholly out): i * kStride * kChunk + its offset < lim.
  const int lim = min(c_end * kChunk, p.k) - base * kChunk;
  const uint64_t once = tile::l2_policy_evict_first();
  // L2 prefetch: lane l < 8 G asks for the line of the row warp's row l, p.prefetch chunks ahead
  // of the register loads (a chunk of 64 bytes shares its line with a neighbour: asked twice).
  constexpr int kWarpRows = 8 * G;
  const T* pfp = static_cast<const T*>(p.w) +
                 static_cast<int64_t>(cta_row + min(slot0 + lane % kWarpRows, cta_rows - 1)) * p.ldw +
                 static_cast<int64_t>(base) * kChunk;
  const bool pf_lane = lane < kWarpRows && p.prefetch > 0;
  auto prefetch_w = [&](int i) {
    tile::prefetch_l2_if(pfp + i * kStride * kChunk, pf_lane && i * kStride * kChunk < lim);
  };
  // The split's chunk i, at offset j (chunks of the split) from the pointers' current chunk:
  // offsets are compile-time constants, so every load is [base + immediate].
  auto load_w = [&](uint4 (&dst)[G][I], int i, int j) {
    const bool ok = i * kStride * kChunk + wofs < lim;
#pragma unroll
    for (int r = 0; r < G; ++r) {
#pragma unroll
      for (int l = 0; l < I; ++l) {
        dst[r][l] = tile::ldg_stream_16_as_if<S::kLoad>(wp[r][l] + j * kStride * kChunk, once, ok);
      }
    }
  };
  auto load_x = [&](uint4 (&dst)[I][2], int i, int j) {
#pragma unroll
    for (int sc = 0; sc < I; ++sc) {
      const bool ok = i * kStride * kChunk + kSubChunk<T> * sc + xofs < lim;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        dst[sc][h] = tile::ldg_16_if(xp[h] + j * kStride * kChunk + kSubChunk<T> * sc, ok && xlive[h]);
      }
    }
  };

  float acc[G][4];
#pragma unroll
  for (int r = 0; r < G; ++r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[r][i] = 0.0f;
  }
  uint4 wq[D][G][I];
  uint4 xq[XD][I][2];
#pragma unroll
  for (int u = 0; u < D; ++u) load_w(wq[u], u, u);
#pragma unroll
  for (int u = 0; u < XD; ++u) load_x(xq[u], u, u);
  for (int i = D; i < D + p.prefetch; ++i) prefetch_w(i);

  // Chunk i0 + u sits in W slot u and x slot u % XD; once used, a slot is refilled with the
  // chunk D (XD) further on. Slots past the split hold zeros: the last round needs no tests.
  for (int i0 = 0; i0 < n_chunks; i0 += D) {
#pragma unroll
    for (int u = 0; u < D; ++u) {
#pragma unroll
      for (int sc = 0; sc < I; ++sc) {
        const uint4& xg = xq[u % XD][sc][0];
        const uint4& xg8 = xq[u % XD][sc][1];
        // Step s's A fragment: 16-bit pairs (k 2t, 2t + 1 and 2t + 8, 2t + 9 of the step), or for
        // float single k (t and t + 4); either way words 2s and 2s + 1 of the piece.
        uint32_t a[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          a[s][0] = s == 0 ? xg.x : xg.z;
          a[s][1] = s == 0 ? xg8.x : xg8.z;
          a[s][2] = s == 0 ? xg.y : xg.w;
          a[s][3] = s == 0 ? xg8.y : xg8.w;
        }
        [[maybe_unused]] uint32_t a_lo[2][4];
        if constexpr (std::is_same_v<T, float>) {
#pragma unroll
          for (int s = 0; s < 2; ++s) tile::tf32_split(a[s], a_lo[s]);   // each x word feeds G groups
        }
#pragma unroll
        for (int r = 0; r < G; ++r) {
          const uint4 wv = gather_row<R>(wq[u][r], sc, lane);
          // float: the piece's six TF32 products go into a fresh accumulator, added to acc with
          // round-to-nearest FADDs. The mma rounds its sums toward zero, so six per 16 k straight
          // into a K-long sum biased it: 7.2e-6 normwise at K = 8192 on an H100 against cuBLAS
          // fp32's 5.7e-7 (the error model, scripts/dev/tf32x3_error_model.py: 1.9e-5 and 2.5e-7).
          [[maybe_unused]] float piece[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            uint32_t b[2] = {s == 0 ? wv.x : wv.z, s == 0 ? wv.y : wv.w};
            if constexpr (std::is_same_v<T, float>) {
              uint32_t b_lo[2];
              tile::tf32_split(b, b_lo);
              tile::mma_m16n8k8_tf32x3(piece, a[s], a_lo[s], b, b_lo);
            } else {
              tile::mma_m16n8k16<T>(acc[r], a[s], b);
            }
          }
          if constexpr (std::is_same_v<T, float>) {
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][i] += piece[i];
          }
        }
      }
      load_w(wq[u], i0 + u + D, u + D);
      load_x(xq[u % XD], i0 + u + XD, u + XD);
      prefetch_w(i0 + u + D + p.prefetch);
    }
#pragma unroll
    for (int r = 0; r < G; ++r) {
#pragma unroll
      for (int i = 0; i < I; ++i) wp[r][i] += D * kStride * kChunk;
    }
    xp[0] += D * kStride * kChunk;
    xp[1] += D * kStride * kChunk;
  }

  // D fragment: acc[r][0..1] = (token g, rows 2t, 2t + 1 of group r), acc[r][2..3] = token
  // g + 8. Partials by K-split, then summed in split order.
#pragma unroll
  for (int r = 0; r < G; ++r) {
    const int rl = rw * G * 8 + 8 * r + 2 * t;
    red[q][g][rl] = acc[r][0];
    red[q][g][rl + 1] = acc[r][1];
    red[q][g + 8][rl] = acc[r][2];
    red[q][g + 8][rl + 1] = acc[r][3];
  }
  __syncthreads();
  if constexpr (std::is_same_v<T, float>) {
    // tf32x3: an inf or NaN in any of the CTA's partial sums (what an inf or NaN input leaves)
    // sends the whole CTA to the exact path; the loop below, the one every type runs, is
    // untouched. Pad slots are checked too: a pad row repeats a real row, a pad token is zeros
    // times the same W, so they flag nothing the real ones would not.
    bool finite = true;
    for (int e = static_cast<int>(threadIdx.x); e < kKSplit * 16 * kRows; e += S::kThreads) {
      finite = finite && isfinite((&red[0][0][0])[e]);
    }
    if (__syncthreads_or(!finite)) {
      decode_rows_exact_fp32(p, cta_row, cta_rows);
      return;
    }
  }
  T* c = static_cast<T*>(p.c);
  for (int e = static_cast<int>(threadIdx.x); e < 16 * kRows; e += S::kThreads) {
    const int token = e / kRows, rl = e % kRows;
    const int n = cta_row + rl;
    if (token >= p.m || rl >= cta_rows) continue;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < kKSplit; ++s) sum += red[s][token][rl];
    c[static_cast<int64_t>(token) * p.ldc + n] = float_to_elem<T>(sum);
  }
}

// `ctas` 0: one per row tile (what the probe's shapes run).
template <class T, class S>
Status run_decode_mma(const MatmulArgs& g, cudaStream_t stream, int64_t ctas = 0, int prefetch = 0) {
  DecodeMmaArgs p{};
  set_operands(p, g);
  constexpr int kChunk = S::template kChunkOf<T>;
  p.chunks = static_cast<int>((g.k + kChunk - 1) / kChunk);
  p.per_split = (p.chunks + S::kKSplit - 1) / S::kKSplit;
  p.ctas = static_cast<int>(ctas > 0 ? ctas : (g.n + S::kRows - 1) / S::kRows);
  p.prefetch = prefetch;
  gemm_decode_mma_kernel<T, S><<<static_cast<unsigned>(p.ctas), S::kThreads, 0, stream>>>(p);
  return from_cuda(cudaGetLastError(), std::is_same_v<T, float> ? "launching sgemm_decode (tf32x3)"
                                                                 : "launching gemm_decode_mma");
}

// 32-row CTAs unless they would fill under three quarters of the SMs' two CTA slots.
template <class T>
Status run_decode_mma_shape(const MatmulArgs& g, cudaStream_t stream, const DecodeOptions& opt) {
  const int sms = sm_count();
  const int prefetch = decode_prefetch_chunks(opt, kDecodeMmaPrefetch);
  if (decode_prefers_rows16(g.n, sms)) {
    using R16 = std::conditional_t<std::is_same_v<T, float>, Rows16F, Rows16>;
    return run_decode_mma<T, R16>(g, stream, decode_ctas(g.n, R16::kRows, R16::kMinBlocks, opt.grid, sms),
                                  prefetch);
  }
  return run_decode_mma<T, Rows32>(g, stream, decode_ctas(g.n, Rows32::kRows, Rows32::kMinBlocks, opt.grid, sms),
                                   prefetch);
}

}  // namespace

const char* decode_grid_name(DecodeGrid g) {
  switch (g) {
    case DecodeGrid::kAuto: return "auto";
    case DecodeGrid::kTiles: return "tiles";
    case DecodeGrid::kWaves: return "waves";
  }
  return "unknown";
}

Status launch_gemm_decode_mma(DType dt, const MatmulArgs& args, cudaStream_t stream, DecodeOptions opt) {
  if (Status st = check_sizes(args); !st.ok()) return st;
  if (args.m > kDecodeMmaMaxM) {
    return fail("gemm_decode_mma handles M <= " + std::to_string(kDecodeMmaMaxM) + " (got M = " +
                std::to_string(args.m) + ")");
  }
  if (args.lda % 8 != 0 || args.ldw % 8 != 0 || reinterpret_cast<uintptr_t>(args.a) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(args.w) % 16 != 0) {
    return fail("gemm_decode_mma reads 16-byte pieces of rows: K must be a multiple of 8 for "
                "16-bit inputs (got K = " + std::to_string(args.k) +
                ") and A and W 16-byte aligned");
  }
  const int cc = device_capability();
  if (cc != 0 && cc < 80) {
    return fail("gemm_decode_mma needs compute capability 8.0 or later (mma.sync bf16)",
                cudaErrorNotSupported);
  }
  if (dt == DType::kBFloat16) return run_decode_mma_shape<__nv_bfloat16>(args, stream, opt);
  if (dt == DType::kFloat16) return run_decode_mma_shape<__half>(args, stream, opt);
  return fail("gemm_decode_mma takes bfloat16 or float16 inputs");
}

Status launch_decode_mma_tf32x3(const MatmulArgs& args, cudaStream_t stream, DecodeOptions opt) {
  // sgemm_decode has checked M, K, the strides and the alignment (the same 16-byte pieces).
  return run_decode_mma_shape<float>(args, stream, opt);
}

}  // namespace sk::gemm
