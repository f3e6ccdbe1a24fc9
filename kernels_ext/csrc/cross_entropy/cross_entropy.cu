// Cross-entropy forward in one read of the logits.
//
// A block streams one row (or one chunk of it, when there are too few rows to fill the GPU)
// keeping a running max m and sum s of 2^((x - m) log2 e) per thread, 4 packs in flight per
// iteration; the partial states merge across the block. With one chunk per row the block ends
// with the row's loss; otherwise chunk states go to a workspace and a second kernel merges them.
// Reductions over rows (mean, sum) are finished by one block in a fixed order: deterministic.
// The second kernel is a programmatic dependent launch on sm_90 (tile/grid_dependency.cuh), so
// the kernel boundary between them is not part of the 5.7 us the mean added to the 279.5 us
// per-row pass at 16384 x 32768 bf16 (docs/PERF.md). One launch was tried as well: every row added its loss
// to an exact fixed-point sum with integer atomics and the last row finished (in the history);
// each row block then held its slot for a release atomic's round trip, and the mean cost 11 us
// over the per-row pass instead of 5.7.
//
// Rows need not start 16-byte aligned (odd vocabularies such as 50257): each row is split into
// a scalar head up to the first aligned address, whole packs, and a scalar tail.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/convert.cuh"
#include "../common/grid.cuh"
#include "../common/pack.cuh"
#include "../common/reduce.cuh"
#include "../tile/grid_dependency.cuh"
#include "../tile/online_softmax.cuh"
#include "cross_entropy.h"

namespace sk {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kUnroll = 4;          // packs in flight per thread
constexpr int kMaxThreads = 256;
constexpr int kMinChunkPacks = 512;  // a chunk smaller than this is not worth a block
constexpr int kFinishThreads = 1024;
constexpr int kFinishRows = 8;      // rows per finishing thread with their loads in flight together

// Running log-sum-exp state: sum = sum_i 2^((x_i - max) * log2 e). max = -inf means empty.
struct Lse {
  float max;
  float sum;

  __device__ __forceinline__ static Lse empty() { return {-INFINITY, 0.f}; }

  // Merge another state; NaN in either max propagates (a NaN logit makes the loss NaN).
  __device__ __forceinline__ void merge(float omax, float osum) {
    const float m = (omax > max || omax != omax) ? omax : max;
    if (m == -INFINITY) return;  // both empty
    sum = sum * exp2f((max - m) * kLog2e) + osum * exp2f((omax - m) * kLog2e);
    max = m;
  }

  // Fold N values in with one rescale. The group max ignores NaN (fmaxf, one instruction), but a
  // NaN still reaches the sum through its own exponential, so the loss comes out NaN.
  //
  // bf16 logits arrive at twice fp32's rate per byte (~8 per clock per SM at full bandwidth), so
  // the arithmetic per element is what limits (the H200 v1 run: bf16 0.67-0.79 of copy, fp32
  // 1.01): the max and the sum run as four chains each (not one 32 long), and the
  // exponential is the bare MUFU ex2 (fast_exp2) instead of exp2f, whose subnormal handling costs
  // three more instructions per element. The two differ only where 2^(x - m) < 2^-126, which
  // ex2.ftz flushes to 0: next to the sum's term 1 (the max itself) that changes nothing.
  template <int N>
  __device__ __forceinline__ void add(const float (&x)[N]) {
    constexpr int C = N % 4 == 0 ? 4 : 1;  // independent chains
    float t[C];
#pragma unroll
    for (int c = 0; c < C; ++c) t[c] = x[c];
#pragma unroll
    for (int i = C; i < N; ++i) t[i % C] = fmaxf(t[i % C], x[i]);
    float gm = t[0];
#pragma unroll
    for (int c = 1; c < C; ++c) gm = fmaxf(gm, t[c]);
    const float m = fmaxf(gm, max);
    if (m == -INFINITY) {
      // Only -inf and NaN so far (never on real data): keep the state empty unless a NaN came.
#pragma unroll
      for (int i = 0; i < N; ++i) {
        if (x[i] != x[i]) sum = NAN;
      }
      return;
    }
    float s[C];
#pragma unroll
    for (int c = 0; c < C; ++c) s[c] = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) s[i % C] += tile::fast_exp2((x[i] - m) * kLog2e);
    float total = s[0];
#pragma unroll
    for (int c = 1; c < C; ++c) total += s[c];
    sum = sum * tile::fast_exp2((max - m) * kLog2e) + total;
    max = m;
  }

  __device__ __forceinline__ float lse() const { return max + logf(sum); }
};

// Merge the states of a whole block (blockDim.x a multiple of 32). smem: 64 floats.
__device__ __forceinline__ Lse block_merge(Lse st, float* smem) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, st.max, offset);
    const float os = __shfl_xor_sync(0xffffffffu, st.sum, offset);
    st.merge(om, os);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) {
    smem[warp] = st.max;
    smem[32 + warp] = st.sum;
  }
  __syncthreads();
  Lse r = Lse::empty();
  if (lane < nwarps) r = {smem[lane], smem[32 + lane]};
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, r.max, offset);
    const float os = __shfl_xor_sync(0xffffffffu, r.sum, offset);
    r.merge(om, os);
  }
  return r;
}

struct RowSplit {
  int head;          // scalar elements before the first 16-byte-aligned one
  int64_t packs;     // whole packs after the head
  int tail;          // scalar elements after the packs
};

template <typename T, int VEC>
__device__ __forceinline__ RowSplit split_row(const T* row, int64_t vocab) {
  RowSplit s;
  const unsigned mis = static_cast<unsigned>(reinterpret_cast<uintptr_t>(row) & 15u);
  int64_t head = VEC > 1 && mis ? (16 - mis) / sizeof(T) : 0;
  if (head > vocab) head = vocab;
  s.head = static_cast<int>(head);
  s.packs = (vocab - head) / VEC;
  s.tail = static_cast<int>(vocab - head - s.packs * VEC);
  return s;
}

// Loss of one row from its merged state; 0 when ignored, NaN when the target is out of range.
__device__ __forceinline__ float row_loss(const Lse& st, int64_t target, int64_t vocab,
                                          int64_t ignore_index, float target_logit) {
  if (target == ignore_index) return 0.f;
  if (target < 0 || target >= vocab) return NAN;
  return st.lse() - target_logit;
}

template <typename T>
__device__ __forceinline__ float target_logit(const T* row, int64_t target, int64_t vocab) {
  return target >= 0 && target < vocab ? to_float(row[target]) : 0.f;
}

// Block (row, chunk). chunks == 1: writes the row's loss to `loss` (kNone: the output). Otherwise
// writes the chunk's (max, sum) to parts[row * chunks + chunk].
template <class V>
__global__ void __launch_bounds__(kMaxThreads)
    ce_rows(const typename V::T* __restrict__ logits, const int64_t* __restrict__ target,
            float* __restrict__ loss, float2* __restrict__ parts, int64_t vocab, int chunks,
            int64_t chunk_packs, int64_t ignore_index) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[64];
  tile::launch_dependents();  // the finishing kernel may be placed once every block runs
  const int64_t row = blockIdx.x / chunks;
  const int chunk = static_cast<int>(blockIdx.x - row * chunks);
  const T* x = logits + row * vocab;
  const RowSplit sp = split_row<T, VEC>(x, vocab);
  // The target's logit is one scattered load: issue it first so it overlaps the stream.
  int64_t t = 0;
  float xt = 0.f;
  if (chunks == 1 && threadIdx.x == 0) {
    t = target[row];
    xt = target_logit(x, t, vocab);
  }
  Lse st = Lse::empty();
  if (chunk == 0) {
    // Head and tail: fewer than VEC elements each.
    const int i = threadIdx.x;
    if (i < sp.head) {
      const float v[1] = {to_float(x[i])};
      st.add(v);
    } else if (i < sp.head + sp.tail) {
      const float v[1] = {to_float(x[sp.head + sp.packs * VEC + (i - sp.head)])};
      st.add(v);
    }
  }
  const T* body = x + sp.head;
  const int64_t begin = chunk * chunk_packs;
  const int64_t end = begin + chunk_packs < sp.packs ? begin + chunk_packs : sp.packs;
  for (int64_t base = begin + threadIdx.x; base < end; base += int64_t{kUnroll} * blockDim.x) {
    Pack<T, VEC> p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + int64_t{u} * blockDim.x;
      if (iv < end) p[u] = load_pack<T, VEC>(body + iv * VEC);
    }
    // All packs of the iteration share one rescale: kUnroll * VEC + 1 exponentials.
    float f[kUnroll * VEC];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = base + int64_t{u} * blockDim.x;
      float g[VEC];
      if (iv < end) {
        unpack<T, VEC>(p[u], g);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) g[i] = -INFINITY;
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) f[u * VEC + i] = g[i];
    }
    st.add(f);
  }
  const Lse r = block_merge(st, smem);
  if (threadIdx.x != 0) return;
  if (chunks == 1) {
    loss[row] = row_loss(r, t, vocab, ignore_index, xt);
  } else {
    parts[blockIdx.x] = make_float2(r.max, r.sum);
  }
}

// Merged state of a row split into chunks.
__device__ __forceinline__ Lse merge_parts(const float2* parts, int chunks) {
  Lse st = Lse::empty();
  for (int c = 0; c < chunks; ++c) {
    const float2 p = parts[c];
    st.merge(p.x, p.y);
  }
  return st;
}

// kNone with chunks > 1: one thread per row.
template <typename T>
__global__ void ce_finish_rows(const T* __restrict__ logits, const int64_t* __restrict__ target,
                               const float2* __restrict__ parts, float* __restrict__ loss,
                               int64_t rows, int64_t vocab, int chunks, int64_t ignore_index) {
  tile::wait_for_prior_grids();  // before the first read of ce_rows' partial states
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const int64_t t = target[row];
  const float xt = target_logit(logits + row * vocab, t, vocab);
  loss[row] = row_loss(merge_parts(parts + row * chunks, chunks), t, vocab, ignore_index, xt);
}

// kMean / kSum: one block, rows in a fixed order. From row losses (chunks == 1) or chunk states.
template <typename T>
__global__ void __launch_bounds__(kFinishThreads)
    ce_finish_total(const T* __restrict__ logits, const int64_t* __restrict__ target,
                    const float2* __restrict__ parts, const float* __restrict__ row_losses,
                    float* __restrict__ out, int64_t rows, int64_t vocab, int chunks,
                    int64_t ignore_index, bool mean) {
  __shared__ double total[32];
  __shared__ double counted[32];
  tile::wait_for_prior_grids();  // before the first read of ce_rows' losses or states
  double acc = 0.0, cnt = 0.0;
  // Each thread takes the rows threadIdx.x, + blockDim.x, ... in that order (the same sum every
  // call), kFinishRows at a time with all their loads issued first: one row per step, a target
  // load then a dependent loss load, cost ~0.8 us a step, 13 us for 16k rows, which was the gap
  // between the mean and the per-row losses (results/h200/issue15/families.json).
  const int64_t step = int64_t{blockDim.x};
  for (int64_t base = threadIdx.x; base < rows; base += step * kFinishRows) {
    int64_t t[kFinishRows];
    float loss[kFinishRows];
#pragma unroll
    for (int u = 0; u < kFinishRows; ++u) {
      const int64_t row = base + u * step;
      t[u] = row < rows ? target[row] : ignore_index;
      loss[u] = chunks == 1 && row < rows ? row_losses[row] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kFinishRows; ++u) {
      const int64_t row = base + u * step;
      if (row >= rows || t[u] == ignore_index) continue;
      cnt += 1.0;
      if (chunks == 1) {
        acc += loss[u];
      } else {
        const float xt = target_logit(logits + row * vocab, t[u], vocab);
        acc += row_loss(merge_parts(parts + row * chunks, chunks), t[u], vocab, ignore_index, xt);
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    cnt += __shfl_xor_sync(0xffffffffu, cnt, offset);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    total[warp] = acc;
    counted[warp] = cnt;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double a = 0.0, c = 0.0;
    for (int w = 0; w < (blockDim.x >> 5); ++w) {
      a += total[w];
      c += counted[w];
    }
    out[0] = mean ? static_cast<float>(a / c) : static_cast<float>(a);
  }
}

struct Plan {
  bool vectorized;
  int chunks;
  int64_t chunk_packs;
  int threads;
};

Plan plan_for(const CrossEntropyArgs& a) {
  Plan p{};
  const int vec = vector_width(a.dtype);
  // Rows start 16-byte aligned only when the base is and the row length is whole packs; otherwise
  // each row peels its own head, which needs elements aligned to their size.
  p.vectorized = (reinterpret_cast<uintptr_t>(a.logits) % element_size(a.dtype)) == 0;
  const int64_t packs = p.vectorized ? a.vocab / vec : a.vocab;  // about; head/tail are extra
  // Enough blocks for two waves of 8 blocks per SM; split rows only when there are fewer rows.
  const int64_t target_blocks = int64_t{2} * 8 * sm_count();
  int64_t chunks = 1;
  if (a.rows < target_blocks) {
    chunks = ceil_div(target_blocks, a.rows);
    const int64_t most = ceil_div(packs, kMinChunkPacks);
    if (chunks > most) chunks = most;
    if (chunks > 1024) chunks = 1024;
    if (chunks < 1) chunks = 1;
  }
  p.chunks = static_cast<int>(chunks);
  p.chunk_packs = ceil_div(packs + 1, chunks);  // + 1: the body can be one pack longer than vocab / vec
  p.threads = round_up32(ceil_div(p.chunk_packs, kUnroll));
  if (p.threads > kMaxThreads) p.threads = kMaxThreads;
  if (p.threads < 64) p.threads = 64;  // head + tail < 2 * VEC <= 16 threads, and one warp is too few
  return p;
}

template <class V>
cudaError_t launch_typed(const CrossEntropyArgs& a, const Plan& p, void* workspace,
                         cudaStream_t stream) {
  using T = typename V::T;
  const T* logits = static_cast<const T*>(a.logits);
  float2* parts = p.chunks > 1 ? static_cast<float2*>(workspace) : nullptr;
  float* row_losses = a.reduction == Reduction::kNone ? a.out : static_cast<float*>(workspace);
  const int64_t blocks = a.rows * p.chunks;
  ce_rows<V><<<static_cast<unsigned>(blocks), p.threads, 0, stream>>>(
      logits, a.target, row_losses, parts, a.vocab, p.chunks, p.chunk_packs, a.ignore_index);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  if (a.reduction == Reduction::kNone) {
    if (p.chunks == 1) return cudaSuccess;
    const dim3 grid(static_cast<unsigned>(ceil_div(a.rows, 256)));
    return tile::launch_dependent(ce_finish_rows<T>, grid, dim3(256), 0, stream, logits, a.target,
                                  parts, a.out, a.rows, a.vocab, p.chunks, a.ignore_index);
  }
  return tile::launch_dependent(ce_finish_total<T>, dim3(1), dim3(kFinishThreads), 0, stream,
                                logits, a.target, parts, row_losses, a.out, a.rows, a.vocab,
                                p.chunks, a.ignore_index, a.reduction == Reduction::kMean);
}

}  // namespace

int64_t cross_entropy_workspace_bytes(const CrossEntropyArgs& a) {
  if (a.rows <= 0 || a.vocab <= 0) return 0;
  const Plan p = plan_for(a);
  if (p.chunks > 1) return a.rows * p.chunks * static_cast<int64_t>(sizeof(float2));
  return a.reduction == Reduction::kNone ? 0 : a.rows * static_cast<int64_t>(sizeof(float));
}

cudaError_t launch_cross_entropy(const CrossEntropyArgs& a, void* workspace, cudaStream_t stream) {
  if (a.rows < 0 || a.vocab < 0) return cudaErrorInvalidValue;
  if (a.rows == 0 || a.vocab == 0) return cudaErrorInvalidValue;  // the binding handles empty inputs
  const Plan p = plan_for(a);
  if (a.rows * static_cast<int64_t>(p.chunks) > 0x7fffffff) return cudaErrorInvalidValue;
  return dispatch_variant(a.dtype, p.vectorized, [&](auto v) {
    return launch_typed<decltype(v)>(a, p, workspace, stream);
  });
}

}  // namespace sk
