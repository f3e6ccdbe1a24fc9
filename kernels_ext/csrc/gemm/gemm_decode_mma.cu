// gemm_decode_mma: C[M, N] = A[M, K] @ W[N, K]^T for small M (M <= kDecodeMmaMaxM = 16:
// decode), sm_80 and later. The work is reading W once (N * K * 2 bytes: 128 MiB at
// N = K = 8192), so the kernel is laid out around HBM, not the tensor cores:
//   - W never goes through shared memory: every lane streams 16-byte pieces of W rows straight
//     into registers (tile::ldg_stream_16_if: no L1 allocation, evict-first in L2, a 256-byte
//     L2 prefetch), kDepth chunks ahead for each of its row groups, so one 512-thread CTA per SM
//     keeps ~128 KiB of W in flight, each row read in 512-byte runs. (gemm_decode's TMA ring
//     reads 128-byte pieces of 128 rows per stage and measured 2.98 TB/s on the H200; the
//     row-streaming gemv kernels reach 3.5-4.0 TB/s.)
//   - the math is mma.sync m16n8k16 with A = x (16 tokens x k16) and B = W^T (k16 x 8 rows of
//     W). A dot product does not care in which order k is summed as long as A and B agree, so
//     lane (g, t) = (lane / 4, lane % 4) loads the 8 consecutive elements k0 + 8t .. k0 + 8t + 7
//     of W row g and of x rows g and g + 8 (one 16-byte load each), which feed two k16 steps:
//       step s: b = {w[2s], w[2s+1]},  a = {xg[2s], xg8[2s], xg[2s+1], xg8[2s+1]}  (b32 words)
//     i.e. the fragment's logical k (2t, 2t+1) of step s is physical k0 + 8t + 4s + (0, 1) and
//     logical (2t+8, 2t+9) is k0 + 8t + 4s + (2, 3), for A and B alike (mma_sync.cuh has the
//     fragment layouts). No shuffles, no ldmatrix, no shared memory in the main loop.
//   - x (M x K: 256 KiB at M = 16, K = 8192) is re-read by every CTA through L1 (tile::ldg_16_if);
//     each x fragment serves two n8 row groups. One m16 tile of tokens: M <= 16 (a second tile
//     would need registers the 512-thread CTA does not have; M = 17..64 is gemm_decode's).
//   - CTA = 16 warps over 64 rows of W: 4 row warps (16 rows each) x 4 K-splits; the splits'
//     partial sums are added through shared memory in a fixed order (deterministic) and written
//     once in the output dtype: N / 64 CTAs, no split across CTAs, no workspace, one kernel.
//     The registers allow one such CTA per SM, so when N / 64 CTAs would leave more than half
//     the SMs idle (N = 4096: 64 CTAs), CTAs take 32 rows as 2 row warps x 8 K-splits.
// Rows past N read row N - 1 (in bounds) and are not written; tokens past M and k past K are
// zeros in registers (never loaded). Needs K % 8 == 0 and 16-byte aligned A and W rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "../tile/ldg.cuh"
#include "../tile/mma_sync.cuh"
#include "gemm.h"
#include "gemm_common.cuh"

namespace sk::gemm {
namespace {

constexpr int kThreads = 512;
constexpr int kGroups = 2;                      // n8 row groups per warp (sharing x fragments)
constexpr int kChunk = 32;                      // k per chunk: one 16-byte piece per lane per row

// kRowWarps warps side by side over rows (16 rows each), kKSplit over K.
template <int kRowWarps>
struct CtaShape {
  static constexpr int kKSplit = kThreads / 32 / kRowWarps;
  static constexpr int kRows = kRowWarps * kGroups * 8;   // W rows per CTA: 64 or 32
};

// In flight per thread: kDepth chunks of W per row group (the HBM stream: 8 x 2 x 16 B = 256 B,
// 128 KiB per CTA), kXDepth chunks of x (L1/L2 hits: a short ring suffices). Sized so the
// whole thread fits the 128 registers a 512-thread CTA gets (ptxas: 126, no spills).
constexpr int kDepth = 8;
constexpr int kXDepth = 2;
static_assert(kDepth % kXDepth == 0, "the x ring's slots repeat within the W ring's");

struct DecodeMmaArgs {
  const void* a;
  const void* w;
  void* c;
  int m, n, k;
  int64_t lda, ldw, ldc;
  int chunks;     // ceil(K / kChunk)
  int per_split;  // chunks per K-split
};

template <class T, int kRowWarps>
__global__ void __launch_bounds__(kThreads, 1) gemm_decode_mma_kernel(const DecodeMmaArgs p) {
  constexpr int D = kDepth;
  constexpr int XD = kXDepth;
  constexpr int kKSplit = CtaShape<kRowWarps>::kKSplit;
  constexpr int kRows = CtaShape<kRowWarps>::kRows;
  __shared__ float red[kKSplit][16][kRows];   // 16 KiB either way

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int rw = warp % kRowWarps, q = warp / kRowWarps;
  const int row0 = static_cast<int>(blockIdx.x) * kRows + rw * kGroups * 8;
  const int c_begin = min(q * p.per_split, p.chunks);
  const int c_end = min(c_begin + p.per_split, p.chunks);
  const int kofs = 8 * t;   // this lane's first element within a chunk

  // Row pointers at this lane's piece of chunk c_begin, advanced by D chunks per round.
  const T* wp[kGroups];
#pragma unroll
  for (int r = 0; r < kGroups; ++r) {
    const int row = min(row0 + 8 * r + g, p.n - 1);
    wp[r] = static_cast<const T*>(p.w) + static_cast<int64_t>(row) * p.ldw +
            static_cast<int64_t>(c_begin) * kChunk + kofs;
  }
  const T* xp[2];    // x rows g and g + 8 (tokens)
  bool xlive[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int token = 8 * h + g;
    xlive[h] = token < p.m;
    xp[h] = static_cast<const T*>(p.a) + static_cast<int64_t>(xlive[h] ? token : 0) * p.lda +
            static_cast<int64_t>(c_begin) * kChunk + kofs;
  }
  // This lane's piece of chunk c_begin + i exists when it starts before the split's end and
  // before K (K % 8 == 0: a piece is wholly in or wholly out): i * kChunk < lim.
  const int lim = min(c_end * kChunk, p.k) - c_begin * kChunk - kofs;
  const uint64_t once = tile::l2_policy_evict_first();
  // Chunk i (counted from c_begin), at offset j from the pointers' current chunk: offsets are
  // compile-time constants, so every load is [base + immediate].
  auto load_w = [&](uint4 (&dst)[kGroups], int i, int j) {
    const bool ok = i * kChunk < lim;
#pragma unroll
    for (int r = 0; r < kGroups; ++r) dst[r] = tile::ldg_stream_16_if(wp[r] + j * kChunk, once, ok);
  };
  auto load_x = [&](uint4 (&dst)[2], int i, int j) {
    const bool ok = i * kChunk < lim;
#pragma unroll
    for (int h = 0; h < 2; ++h) dst[h] = tile::ldg_16_if(xp[h] + j * kChunk, ok && xlive[h]);
  };

  float acc[kGroups][4];
#pragma unroll
  for (int r = 0; r < kGroups; ++r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[r][i] = 0.0f;
  }
  uint4 wq[D][kGroups];
  uint4 xq[XD][2];
#pragma unroll
  for (int u = 0; u < D; ++u) load_w(wq[u], u, u);
#pragma unroll
  for (int u = 0; u < XD; ++u) load_x(xq[u], u, u);

  // Chunk i0 + u sits in W slot u and x slot u % XD; once used, a slot is refilled with the
  // chunk D (XD) further on. Slots past the split hold zeros: the last round needs no tests.
  const int n_chunks = c_end - c_begin;
  for (int i0 = 0; i0 < n_chunks; i0 += D) {
#pragma unroll
    for (int u = 0; u < D; ++u) {
      const uint4& xg = xq[u % XD][0];
      const uint4& xg8 = xq[u % XD][1];
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t a[4] = {s == 0 ? xg.x : xg.z, s == 0 ? xg8.x : xg8.z,
                               s == 0 ? xg.y : xg.w, s == 0 ? xg8.y : xg8.w};
#pragma unroll
        for (int r = 0; r < kGroups; ++r) {
          const uint4& wv = wq[u][r];
          const uint32_t b[2] = {s == 0 ? wv.x : wv.z, s == 0 ? wv.y : wv.w};
          tile::mma_m16n8k16<T>(acc[r], a, b);
        }
      }
      load_w(wq[u], i0 + u + D, u + D);
      load_x(xq[u % XD], i0 + u + XD, u + XD);
    }
#pragma unroll
    for (int r = 0; r < kGroups; ++r) wp[r] += D * kChunk;
    xp[0] += D * kChunk;
    xp[1] += D * kChunk;
  }

  // D fragment: acc[r][0..1] = (token g, rows 2t, 2t + 1 of group r), acc[r][2..3] = token
  // g + 8. Partials by K-split, then summed in split order.
#pragma unroll
  for (int r = 0; r < kGroups; ++r) {
    const int rl = rw * kGroups * 8 + 8 * r + 2 * t;
    red[q][g][rl] = acc[r][0];
    red[q][g][rl + 1] = acc[r][1];
    red[q][g + 8][rl] = acc[r][2];
    red[q][g + 8][rl + 1] = acc[r][3];
  }
  __syncthreads();
  T* c = static_cast<T*>(p.c);
  for (int e = static_cast<int>(threadIdx.x); e < 16 * kRows; e += kThreads) {
    const int token = e / kRows, rl = e % kRows;
    const int n = static_cast<int>(blockIdx.x) * kRows + rl;
    if (token >= p.m || n >= p.n) continue;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < kKSplit; ++s) sum += red[s][token][rl];
    c[static_cast<int64_t>(token) * p.ldc + n] = float_to_elem<T>(sum);
  }
}

template <class T, int kRowWarps>
Status run_decode_mma(const MatmulArgs& g, cudaStream_t stream) {
  constexpr int kKSplit = CtaShape<kRowWarps>::kKSplit;
  constexpr int kRows = CtaShape<kRowWarps>::kRows;
  DecodeMmaArgs p{};
  p.a = g.a;
  p.w = g.w;
  p.c = g.c;
  p.m = static_cast<int>(g.m);
  p.n = static_cast<int>(g.n);
  p.k = static_cast<int>(g.k);
  p.lda = g.lda;
  p.ldw = g.ldw;
  p.ldc = g.ldc;
  p.chunks = static_cast<int>((g.k + kChunk - 1) / kChunk);
  p.per_split = (p.chunks + kKSplit - 1) / kKSplit;
  const int64_t blocks = (g.n + kRows - 1) / kRows;
  gemm_decode_mma_kernel<T, kRowWarps><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  return from_cuda(cudaGetLastError(), "launching gemm_decode_mma");
}

// 64-row CTAs unless they would leave more than half the SMs without one.
template <class T>
Status run_decode_mma_shape(const MatmulArgs& g, cudaStream_t stream) {
  const int sms = sm_count();
  if (sms > 0 && (g.n + 63) / 64 <= sms / 2) return run_decode_mma<T, 2>(g, stream);
  return run_decode_mma<T, 4>(g, stream);
}

}  // namespace

Status launch_gemm_decode_mma(DType dt, const MatmulArgs& args, cudaStream_t stream) {
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
  if (dt == DType::kBFloat16) return run_decode_mma_shape<__nv_bfloat16>(args, stream);
  if (dt == DType::kFloat16) return run_decode_mma_shape<__half>(args, stream);
  return fail("gemm_decode_mma takes bfloat16 or float16 inputs");
}

}  // namespace sk::gemm
