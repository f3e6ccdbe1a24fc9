// NMS in two kernels, all on the GPU.
//
// 1. Suppression mask: block (r, c) of 64 threads compares the 64 boxes of rank block r with those
//    of block c >= r (boxes gathered through the score order, so no sorted copy is made) and writes
//    word mask[i][c]: bit j set when box c * 64 + j ranks below box i and overlaps it by IoU >
//    threshold. The IoU is written as torchvision writes it, in the same order of operations, so
//    the decisions (and the kept boxes) agree with torchvision.ops.nms.
// 2. Scan: one block walks the rank blocks in order, one step per block and one barrier per
//    step. In step c warp 0 settles block c in rounds of ballots (settle_block), from words it
//    loaded in step c - 1: the block's diagonal words and its words of block c + 1, so it also
//    applies block c's suppressions of block c + 1 itself, from registers. Meanwhile the other
//    warps OR block c - 1's kept rows into every block from c + 1 on. A step costs about one L2
//    latency; the first version paid two, plus one serial turn per kept box. torchvision instead
//    copies the mask to the host and loops there.
#include <cuda_runtime.h>

#include <cstdint>

#include "nms.h"

namespace sk {
namespace {

constexpr int kWord = kNmsBoxesPerWord;
constexpr int kScanThreads = 1024;
// A scan step gives every later word at least one thread.
static_assert(kNmsMaxBoxes / kWord <= kScanThreads, "nms_scan: more words than threads");

__device__ __forceinline__ bool overlaps(const float4 a, const float4 b, float threshold) {
  const float left = fmaxf(a.x, b.x), right = fminf(a.z, b.z);
  const float top = fmaxf(a.y, b.y), bottom = fminf(a.w, b.w);
  const float width = fmaxf(right - left, 0.f), height = fmaxf(bottom - top, 0.f);
  const float inter = width * height;
  const float area_a = (a.z - a.x) * (a.w - a.y);
  const float area_b = (b.z - b.x) * (b.w - b.y);
  return inter / (area_a + area_b - inter) > threshold;
}

// Scores as unsigned keys whose order is the float order of a radix sort (cub's): negative
// floats reversed, the sign bit set on the rest, so -0 ranks below +0. Every NaN is the largest
// key (torch sorts NaN as the largest value); several NaNs rank by index.
__device__ __forceinline__ unsigned sort_key(float f) {
  const unsigned u = __float_as_uint(f);
  if (f != f) return 0xffffffffu;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// order[rank] = i, rank = the boxes with a higher key (a descending sort; equal keys by index).
// CTA: the 32 boxes of lane l, each warp counting over its share of the others; n^2 comparisons,
// for n <= kNmsRankSortMax. Any two equal keys set *ties: then the order of equal scores is
// torch's sort's, which differs between its algorithms, and the caller sorts with torch instead.
constexpr int kOrderWarps = 32;

__global__ void __launch_bounds__(32 * kOrderWarps)
    nms_order(const float* __restrict__ scores, int n, int64_t* __restrict__ order,
              int64_t* __restrict__ ties) {
  __shared__ int partial[kOrderWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int i = blockIdx.x * 32 + lane;
  const unsigned key = i < n ? sort_key(scores[i]) : 0u;
  const int per_warp = (n + kOrderWarps - 1) / kOrderWarps;
  const int j0 = warp * per_warp, j1 = min(n, j0 + per_warp);
  int rank = 0, equal = 0;
#pragma unroll 4
  for (int j = j0; j < j1; ++j) {
    const unsigned other = sort_key(__ldg(scores + j));  // the same j on every lane: one broadcast
    rank += other > key || (other == key && j < i);
    equal += other == key && j != i;
  }
  partial[warp][lane] = rank;
  if (__any_sync(~0u, i < n && equal != 0) && lane == 0) *ties = 1;
  __syncthreads();
  if (warp == 0 && i < n) {
    int total = 0;
#pragma unroll 8
    for (int w = 0; w < kOrderWarps; ++w) total += partial[w][lane];
    order[total] = i;
  }
}

__global__ void __launch_bounds__(kWord)
    nms_mask(const float4* __restrict__ boxes, const int64_t* __restrict__ order, int n, int words,
             float threshold, unsigned long long* __restrict__ mask) {
  const int rb = blockIdx.y, cb = blockIdx.x;
  if (rb > cb) return;  // only later-ranked boxes can be suppressed
  const int rows = min(n - rb * kWord, kWord), cols = min(n - cb * kWord, kWord);
  __shared__ float4 col_boxes[kWord];
  if (threadIdx.x < cols) col_boxes[threadIdx.x] = boxes[order[cb * kWord + threadIdx.x]];
  __syncthreads();
  if (threadIdx.x >= rows) return;
  const int i = rb * kWord + threadIdx.x;
  const float4 box = boxes[order[i]];
  unsigned long long bits = 0;
  if (rb == cb) {
    // The diagonal word holds both directions: bit j < i is the test "j suppresses i", made with
    // the arguments in the order row j's thread uses, so both bits of a pair are one decision.
    for (int j = 0; j < threadIdx.x; ++j) {
      if (overlaps(col_boxes[j], box, threshold)) bits |= 1ull << j;
    }
  }
  for (int j = rb == cb ? threadIdx.x + 1 : 0; j < cols; ++j) {
    if (overlaps(box, col_boxes[j], threshold)) bits |= 1ull << j;
  }
  mask[static_cast<int64_t>(i) * words + cb] = bits;
}

// Settles the 64 boxes of one rank block on warp 0, in rounds rather than box by box. `alive`:
// the boxes no earlier block suppressed; lane l holds the diagonal words of rows l and l + 32.
// A round keeps every undecided box with no undecided earlier neighbour (the first undecided box
// always qualifies) and drops every undecided box next to one kept in it. That is the greedy
// order's answer: a box is kept exactly when no earlier kept box overlaps it. Rounds = the
// longest chain of overlaps, not the number of boxes.
__device__ __forceinline__ unsigned long long settle_block(unsigned long long alive,
                                                           unsigned long long d0,
                                                           unsigned long long d1, int lane) {
  const unsigned long long before0 = (1ull << lane) - 1;
  const unsigned long long before1 = (1ull << (lane + 32)) - 1;
  unsigned long long undecided = alive, kept = 0;
  while (undecided) {  // warp-uniform: every lane holds the same masks
    const bool in0 = (undecided >> lane) & 1ull, in1 = (undecided >> (lane + 32)) & 1ull;
    const bool keep0 = in0 && !(d0 & undecided & before0);
    const bool keep1 = in1 && !(d1 & undecided & before1);
    const unsigned long long now = static_cast<unsigned long long>(__ballot_sync(~0u, keep0)) |
                                   static_cast<unsigned long long>(__ballot_sync(~0u, keep1)) << 32;
    const unsigned long long gone =
        static_cast<unsigned long long>(__ballot_sync(~0u, in0 && (d0 & now))) |
        static_cast<unsigned long long>(__ballot_sync(~0u, in1 && (d1 & now))) << 32;
    kept |= now;
    undecided &= ~(now | gone);
  }
  return kept;
}

// What warp 0 needs of a rank block, loaded one step ahead: per lane, rows l and l + 32 of the
// block, their diagonal words (d), their words of the next block (e) and their box indices.
struct BlockRows {
  unsigned long long d0 = 0, d1 = 0, e0 = 0, e1 = 0;
  int64_t o0 = 0, o1 = 0;
};

__device__ __forceinline__ BlockRows block_rows(const unsigned long long* __restrict__ mask,
                                                const int64_t* __restrict__ order, int n, int words,
                                                int cb, int lane) {
  BlockRows r;
  if (cb >= words) return r;
  const int r0 = cb * kWord + lane, r1 = r0 + 32;
  const bool next = cb + 1 < words;
  if (r0 < n) {
    const unsigned long long* row = mask + static_cast<int64_t>(r0) * words + cb;
    r.d0 = row[0];
    r.e0 = next ? row[1] : 0;
    r.o0 = order[r0];
  }
  if (r1 < n) {
    const unsigned long long* row = mask + static_cast<int64_t>(r1) * words + cb;
    r.d1 = row[0];
    r.e1 = next ? row[1] : 0;
    r.o1 = order[r1];
  }
  return r;
}

__device__ __forceinline__ unsigned long long warp_or(unsigned long long v) {
  const unsigned lo = __reduce_or_sync(~0u, static_cast<unsigned>(v));
  const unsigned hi = __reduce_or_sync(~0u, static_cast<unsigned>(v >> 32));
  return static_cast<unsigned long long>(hi) << 32 | lo;
}

struct ScanState {
  unsigned long long* removed;  // [words]: boxes suppressed by kept boxes of earlier blocks
  int* kept_rows;               // [2][kWord]: the kept rows of the last two blocks, by step parity
  int* kept_count;              // [2]
  int* kept_total;
};

// Step cb, warp 0: settle block cb, write its kept indices, and add its suppressions of block cb + 1
// (from the e words, in registers: the next step's settling waits on no load).
__device__ __forceinline__ void settle_step(const ScanState& st, const BlockRows& b, int cb, int n,
                                            int words, int64_t* __restrict__ keep, int lane) {
  const int row0 = cb * kWord;
  const int valid = min(n - row0, kWord);
  const unsigned long long alive = ~st.removed[cb] & (valid == kWord ? ~0ull : (1ull << valid) - 1);
  const unsigned long long kept = settle_block(alive, b.d0, b.d1, lane);
  const int base = *st.kept_total;
  int* rows = st.kept_rows + (cb & 1) * kWord;
  const bool k0 = (kept >> lane) & 1ull, k1 = (kept >> (lane + 32)) & 1ull;
  const int rank0 = __popcll(kept & ((1ull << lane) - 1));
  const int rank1 = __popcll(kept & ((1ull << (lane + 32)) - 1));
  if (k0) keep[base + rank0] = b.o0, rows[rank0] = lane;
  if (k1) keep[base + rank1] = b.o1, rows[rank1] = lane + 32;
  const unsigned long long next = warp_or((k0 ? b.e0 : 0) | (k1 ? b.e1 : 0));
  if (lane == 0) {
    if (next && cb + 1 < words) atomicOr(&st.removed[cb + 1], next);
    st.kept_count[cb & 1] = __popcll(kept);
    *st.kept_total = base + __popcll(kept);
  }
}

// Step cb, the other warps: block cb - 1's kept rows suppress in every block from cb + 1 on (block
// cb took its share from warp 0 in step cb - 1). Neighbouring threads read neighbouring words of a
// row, and this step's settling runs meanwhile.
__device__ __forceinline__ void suppress_later(const ScanState& st,
                                               const unsigned long long* __restrict__ mask, int cb,
                                               int words, int thread, int threads) {
  if (cb < 1) return;
  const int later = words - cb - 1;
  const int nk = st.kept_count[(cb - 1) & 1];
  const int* rows = st.kept_rows + ((cb - 1) & 1) * kWord;
  const int64_t row0 = static_cast<int64_t>(cb - 1) * kWord;
  for (int t = thread; t < nk * later; t += threads) {
    const int k = t / later;
    const int w = cb + 1 + (t - k * later);
    const unsigned long long m = mask[(row0 + rows[k]) * words + w];
    if (m) atomicOr(&st.removed[w], m);
  }
}

__global__ void __launch_bounds__(kScanThreads)
    nms_scan(const unsigned long long* __restrict__ mask, const int64_t* __restrict__ order, int n,
             int words, int64_t* __restrict__ keep, int64_t* __restrict__ count) {
  extern __shared__ unsigned long long removed[];  // words
  __shared__ int kept_rows[2 * kWord];
  __shared__ int kept_count[2];
  __shared__ int kept_total;
  for (int w = threadIdx.x; w < words; w += blockDim.x) removed[w] = 0;
  if (threadIdx.x == 0) kept_total = 0;
  const ScanState st{removed, kept_rows, kept_count, &kept_total};
  const int lane = threadIdx.x & 31;
  const bool settler = threadIdx.x < 32;
  // Two register sets, so that a step's prefetch for the next is never moved (and waited for).
  BlockRows even, odd;
  if (settler) even = block_rows(mask, order, n, words, 0, lane);
  __syncthreads();
  // Step c settles block c from one set and loads block c + 1 into the other. Step `words` only
  // lets the last block suppress (nothing: no block is later) and ends the loop.
  auto step = [&](int c, BlockRows& use, BlockRows& load) {
    if (settler) {
      if (c < words) {
        const BlockRows current = use;
        load = block_rows(mask, order, n, words, c + 1, lane);
        settle_step(st, current, c, n, words, keep, lane);
      }
    } else {
      suppress_later(st, mask, c, words, threadIdx.x - 32, kScanThreads - 32);
    }
    __syncthreads();
  };
  for (int c = 0; c <= words; c += 2) {
    step(c, even, odd);
    if (c + 1 <= words) step(c + 1, odd, even);
  }
  if (threadIdx.x == 0) *count = kept_total;
}

}  // namespace

cudaError_t launch_nms_order(const float* scores, int64_t n, int64_t* order, int64_t* ties,
                             cudaStream_t stream) {
  if (n < 0 || n > kNmsRankSortMax) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(ties, 0, sizeof(int64_t), stream);
  if (err != cudaSuccess || n == 0) return err;
  const unsigned blocks = static_cast<unsigned>((n + 31) / 32);
  nms_order<<<blocks, 32 * kOrderWarps, 0, stream>>>(scores, static_cast<int>(n), order, ties);
  return cudaGetLastError();
}

cudaError_t launch_nms(const NmsArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.n > kNmsMaxBoxes) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaMemsetAsync(a.count, 0, sizeof(int64_t), stream);
  const int n = static_cast<int>(a.n);
  const int words = static_cast<int>(nms_words(a.n));
  const dim3 grid(words, words);
  nms_mask<<<grid, kWord, 0, stream>>>(reinterpret_cast<const float4*>(a.boxes), a.order, n, words,
                                       a.iou_threshold, a.mask);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const size_t smem = sizeof(unsigned long long) * words;
  nms_scan<<<1, kScanThreads, smem, stream>>>(a.mask, a.order, n, words, a.keep, a.count);
  return cudaGetLastError();
}

}  // namespace sk
