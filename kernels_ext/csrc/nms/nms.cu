// NMS in two kernels, all on the GPU.
//
// 1. Suppression mask: block (r, c) of 64 threads compares the 64 boxes of rank block r with those
//    of block c >= r (boxes gathered through the score order, so no sorted copy is made) and writes
//    word mask[i][c]: bit j set when box c * 64 + j ranks below box i and overlaps it by IoU >
//    threshold. The IoU is written as torchvision writes it, in the same order of operations, so
//    the decisions (and the kept boxes) agree with torchvision.ops.nms.
// 2. Scan: one block walks the rank blocks in order. Warp 0 settles block c: the boxes not yet
//    suppressed, taken in rank order, each keep itself and suppress what its diagonal word marks
//    (a loop over kept boxes only). Then the whole block ORs the kept boxes' mask words into the
//    suppressed set of every later block. torchvision instead copies the mask to the host and
//    loops there.
#include <cuda_runtime.h>

#include <cstdint>

#include "nms.h"

namespace sk {
namespace {

constexpr int kWord = kNmsBoxesPerWord;
constexpr int kScanThreads = 1024;

__device__ __forceinline__ bool overlaps(const float4 a, const float4 b, float threshold) {
  const float left = fmaxf(a.x, b.x), right = fminf(a.z, b.z);
  const float top = fmaxf(a.y, b.y), bottom = fminf(a.w, b.w);
  const float width = fmaxf(right - left, 0.f), height = fmaxf(bottom - top, 0.f);
  const float inter = width * height;
  const float area_a = (a.z - a.x) * (a.w - a.y);
  const float area_b = (b.z - b.x) * (b.w - b.y);
  return inter / (area_a + area_b - inter) > threshold;
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
  for (int j = rb == cb ? threadIdx.x + 1 : 0; j < cols; ++j) {
    if (overlaps(box, col_boxes[j], threshold)) bits |= 1ull << j;
  }
  mask[static_cast<int64_t>(i) * words + cb] = bits;
}

__global__ void __launch_bounds__(kScanThreads)
    nms_scan(const unsigned long long* __restrict__ mask, const int64_t* __restrict__ order, int n,
             int words, int64_t* __restrict__ keep, int64_t* __restrict__ count) {
  extern __shared__ unsigned long long removed[];  // words
  __shared__ int kept_rows[kWord];
  __shared__ int kept_in_block;
  __shared__ int kept_total;
  for (int w = threadIdx.x; w < words; w += blockDim.x) removed[w] = 0;
  if (threadIdx.x == 0) kept_total = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int cb = 0; cb < words; ++cb) {
    if (threadIdx.x < 32) {
      // Diagonal words of this block's 64 boxes: lane l holds rows l and l + 32.
      const int r0 = cb * kWord + lane, r1 = r0 + 32;
      const unsigned long long d0 = r0 < n ? mask[static_cast<int64_t>(r0) * words + cb] : 0;
      const unsigned long long d1 = r1 < n ? mask[static_cast<int64_t>(r1) * words + cb] : 0;
      const int valid = min(n - cb * kWord, kWord);
      unsigned long long alive = ~removed[cb] & (valid == kWord ? ~0ull : (1ull << valid) - 1);
      unsigned long long kept = 0;
      while (alive) {  // the same on every lane: the loop is warp-uniform
        const int b = __ffsll(static_cast<long long>(alive)) - 1;
        const unsigned long long s0 = __shfl_sync(0xffffffffu, d0, b & 31);
        const unsigned long long s1 = __shfl_sync(0xffffffffu, d1, b & 31);
        kept |= 1ull << b;
        alive &= ~((b < 32 ? s0 : s1) | (1ull << b));
      }
      const int base = kept_total;
      const int nk = __popcll(kept);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int b = lane + 32 * h;
        if ((kept >> b) & 1ull) {
          const int rank = __popcll(kept & ((1ull << b) - 1));
          keep[base + rank] = order[cb * kWord + b];
          kept_rows[rank] = cb * kWord + b;
        }
      }
      __syncwarp();
      if (lane == 0) {
        kept_in_block = nk;
        kept_total = base + nk;
      }
    }
    __syncthreads();
    // Every later block loses what the kept boxes overlap: kept row k, word cb + 1 + w.
    const int nk = kept_in_block;
    const int later = words - cb - 1;
    for (int t = threadIdx.x; t < nk * later; t += blockDim.x) {
      const int k = t / later;
      const int w = cb + 1 + (t - k * later);
      const unsigned long long m = mask[static_cast<int64_t>(kept_rows[k]) * words + w];
      if (m) atomicOr(&removed[w], m);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *count = kept_total;
}

}  // namespace

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
