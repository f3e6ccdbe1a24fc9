// Cross-entropy forward in one read of the logits, in one launch whatever the reduction.
//
// A block streams one row (or one chunk of it, when there are too few rows to fill the GPU)
// keeping a running max m and sum s of 2^((x - m) log2 e) per thread, 4 packs in flight per
// iteration; the partial states merge across the block. A chunk's block publishes its state and
// counts itself in on the row; the row's last chunk merges the states in a fixed order.
//
// The mean and the sum finish in the same kernel: a second launch to reduce the row losses cost
// 5.7 us over the 279.5 us per-row pass at 16384 x 32768 bf16, and a tree of "last block of the
// group sums the group" levels costs a fence, an atomic and a load per level. Each row instead
// adds its loss to an exact fixed-point accumulator (Totals) with integer atomics, which commute:
// the words hold the same bits whatever order the blocks finish in, so the result is bit-identical
// run to run, and it is the exact sum of the fp32 row losses, rounded through double. The row
// that finishes last (a 64-bit counter whose high half counts the non-ignored rows) reads the
// accumulator, writes the result and zeroes it. Memory ordering: a row's additions precede its
// release increment of the counter, and the last row fences (acquire) after its own before it
// reads.
//
// The counters must be zero when the kernel starts, and it leaves them zero: the caller keeps one
// buffer per stream and zeroes it once (cross_entropy.h). Were this kernel ever launched as a
// programmatic dependent (PDL), it would have to wait for the prior grid before its first atomic.
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
#include "../tile/online_softmax.cuh"
#include "cross_entropy.h"

namespace sk {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kUnroll = 4;          // packs in flight per thread
constexpr int kMaxThreads = 256;
constexpr int kMinChunkPacks = 512;  // a chunk smaller than this is not worth a block
constexpr int kBlocksPerSm = 16;    // the grid to aim for: two waves of 8 blocks per SM

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

// Merge the states of a warp; every lane gets the same state (merge is commutative).
__device__ __forceinline__ Lse warp_merge(Lse st) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, st.max, offset);
    const float os = __shfl_xor_sync(0xffffffffu, st.sum, offset);
    st.merge(om, os);
  }
  return st;
}

// Merge the states of a whole block (blockDim.x a multiple of 32); every warp gets the result.
// smem: 64 floats.
__device__ __forceinline__ Lse block_merge(Lse st, float* smem) {
  st = warp_merge(st);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) {
    smem[warp] = st.max;
    smem[32 + warp] = st.sum;
  }
  __syncthreads();
  Lse r = Lse::empty();
  if (lane < nwarps) r = {smem[lane], smem[32 + lane]};
  return warp_merge(r);
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

// Exact fixed-point sum of fp32 values. A float is m * 2^(p - 149) with a 24-bit integer m and p
// in [0, 253] (p = 0 for subnormals), so m << (p % 32) splits into two digits below 2^32 that go
// to words p / 32 and p / 32 + 1. Up to 2^31 rows of such digits cannot overflow a signed 64-bit
// word, and integer additions commute, so the words are the same whatever order rows add in.
// NaN and infinities, which have no fixed-point value, set bits of `special` instead.
constexpr int kDigits = 9;           // words 0..8 cover 2^-149 .. 2^128
constexpr int kTotalsBytes = 128;    // sizeof(Totals) rounded up; the row counters follow

struct Totals {
  unsigned long long rows;      // low half: rows finished; high half: rows counted (not ignored)
  unsigned long long special;   // bit 0: NaN, bit 1: +inf, bit 2: -inf
  unsigned long long digit[kDigits];
};
static_assert(sizeof(Totals) <= kTotalsBytes, "Totals must fit its slot");

constexpr unsigned long long kNanBit = 1, kPosInfBit = 2, kNegInfBit = 4;

__device__ __forceinline__ void deposit(Totals* t, float v) {
  const unsigned bits = __float_as_uint(v);
  const unsigned e = (bits >> 23) & 0xffu, frac = bits & 0x7fffffu;
  const bool negative = bits >> 31;
  if (e == 0xffu) {
    atomicOr(&t->special, frac ? kNanBit : negative ? kNegInfBit : kPosInfBit);
    return;
  }
  const unsigned m = e ? frac | 0x800000u : frac;
  if (m == 0) return;  // +-0 adds nothing
  const unsigned p = e ? e - 1 : 0;
  const unsigned long long x = static_cast<unsigned long long>(m) << (p & 31);
  unsigned long long lo = x & 0xffffffffull, hi = x >> 32;
  if (negative) lo = 0ull - lo, hi = 0ull - hi;  // two's complement: the words are signed
  if (lo) atomicAdd(&t->digit[p >> 5], lo);
  if (hi) atomicAdd(&t->digit[(p >> 5) + 1], hi);
}

// The sum held by the words (then zeroed for the next launch), as a double. The words are exact
// integers, so this is the same bits every run, and within an ulp or two of double, far below the
// fp32 result's.
__device__ double take_total(Totals* t, unsigned long long* special) {
  long long w[kDigits];
#pragma unroll
  for (int k = 0; k < kDigits; ++k) w[k] = static_cast<long long>(atomicExch(&t->digit[k], 0ull));
  *special = atomicExch(&t->special, 0ull);
  // Carries up, so words 0..7 become digits in [0, 2^32) and only the top word carries a sign.
#pragma unroll
  for (int k = 0; k + 1 < kDigits; ++k) {
    const long long carry = w[k] >> 32;  // arithmetic shift: floor division
    w[k] &= 0xffffffffll;
    w[k + 1] += carry;
  }
  double total = 0.0;
#pragma unroll
  for (int k = kDigits - 1; k >= 0; --k) total += ldexp(static_cast<double>(w[k]), 32 * k - 149);
  return total;
}

// Release increments: the caller's earlier writes (deposits, a chunk's state) are visible to
// whoever reads the counter after it. The one that finds itself last then acquires with a fence, so
// the others (which do not read anything) skip the acquire's invalidation of their SM's L1.
__device__ __forceinline__ unsigned long long fetch_add_release(unsigned long long* p,
                                                                unsigned long long v) {
  unsigned long long old;
  asm volatile("atom.release.gpu.add.u64 %0, [%1], %2;"
               : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}

__device__ __forceinline__ unsigned fetch_add_release(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.release.gpu.add.u32 %0, [%1], %2;"
               : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// A row's loss into the mean or the sum; the row that finishes last writes out[0]. One thread.
// Every row's increment reads the counter after all earlier ones, so the last row's fence orders
// every deposit before its reads of the words.
__device__ void add_row_to_total(Totals* t, float loss, bool counted, unsigned rows, bool mean,
                                 float* out) {
  if (counted) deposit(t, loss);
  const unsigned long long before =
      fetch_add_release(&t->rows, (counted ? 1ull << 32 : 0ull) | 1ull);
  if (static_cast<unsigned>(before) + 1 != rows) return;
  __threadfence();  // acquire
  const double n = static_cast<double>((before >> 32) + (counted ? 1 : 0));
  unsigned long long special;
  const double total = take_total(t, &special);
  atomicExch(&t->rows, 0ull);
  float r = static_cast<float>(mean ? total / n : total);  // no row counted: 0 / 0 = NaN
  if ((special & kNanBit) || (special & (kPosInfBit | kNegInfBit)) == (kPosInfBit | kNegInfBit)) {
    r = NAN;
  } else if (special) {
    r = special & kPosInfBit ? INFINITY : -INFINITY;
  }
  out[0] = r;
}

// Block (row, chunk). kNone writes out[row]; kMean / kSum add the row to `totals` and the last row
// writes out[0]. chunks > 1: each chunk's block writes its (max, sum) to parts[row * chunks +
// chunk] and counts itself in row_done[row]; the last one merges the row. Warp 0 finishes.
template <class V>
__global__ void __launch_bounds__(kMaxThreads)
    ce_rows(const typename V::T* __restrict__ logits, const int64_t* __restrict__ target,
            float* __restrict__ out, float2* __restrict__ parts, Totals* __restrict__ totals,
            unsigned* __restrict__ row_done, int64_t vocab, unsigned rows, int chunks,
            int64_t chunk_packs, int64_t ignore_index, Reduction reduction) {
  using T = typename V::T;
  constexpr int VEC = V::VEC;
  __shared__ float smem[64];
  const int64_t row = blockIdx.x / chunks;
  const int chunk = static_cast<int>(blockIdx.x - row * chunks);
  const T* x = logits + row * vocab;
  const RowSplit sp = split_row<T, VEC>(x, vocab);
  // The target's logit is one scattered load: issue it first so it overlaps the stream. Every
  // chunk loads it, as any may be the row's last.
  int64_t t = 0;
  float xt = 0.f;
  if (threadIdx.x == 0) {
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
  Lse r = block_merge(st, smem);
  if (threadIdx.x >= 32) return;
  if (chunks > 1) {
    int last = 0;
    if (threadIdx.x == 0) {
      parts[blockIdx.x] = make_float2(r.max, r.sum);
      last = fetch_add_release(&row_done[row], 1u) == static_cast<unsigned>(chunks - 1);
      if (last) {
        __threadfence();  // acquire: the other chunks' states
        atomicExch(&row_done[row], 0u);
      }
    }
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    // The barrier orders lane 0's acquire before the other lanes' loads; __ldcg reads at L2, past
    // an L1 that is not coherent with the other SMs' stores.
    __syncwarp();
    const float2* row_parts = parts + row * chunks;
    r = Lse::empty();
    for (int c = threadIdx.x; c < chunks; c += 32) {
      const float2 q = __ldcg(row_parts + c);
      r.merge(q.x, q.y);
    }
    r = warp_merge(r);  // a fixed order: the same state every run
  }
  if (threadIdx.x != 0) return;
  const float loss = row_loss(r, t, vocab, ignore_index, xt);
  if (reduction == Reduction::kNone) {
    out[row] = loss;
  } else {
    add_row_to_total(totals, loss, t != ignore_index, rows, reduction == Reduction::kMean, out);
  }
}

struct Plan {
  bool vectorized;
  int chunks;
  int64_t chunk_packs;
  int threads;
};

int64_t target_blocks() { return int64_t{kBlocksPerSm} * sm_count(); }

Plan plan_for(const CrossEntropyArgs& a) {
  Plan p{};
  const int vec = vector_width(a.dtype);
  // Rows start 16-byte aligned only when the base is and the row length is whole packs; otherwise
  // each row peels its own head, which needs elements aligned to their size.
  p.vectorized = (reinterpret_cast<uintptr_t>(a.logits) % element_size(a.dtype)) == 0;
  const int64_t packs = p.vectorized ? a.vocab / vec : a.vocab;  // about; head/tail are extra
  // Split rows only when there are fewer than target_blocks(): cross_entropy_counter_bytes sizes
  // row_done for that many.
  const int64_t blocks = target_blocks();
  int64_t chunks = 1;
  if (a.rows < blocks) {
    chunks = ceil_div(blocks, a.rows);
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
cudaError_t launch_typed(const CrossEntropyArgs& a, const Plan& p, void* workspace, void* counters,
                         cudaStream_t stream) {
  using T = typename V::T;
  float2* parts = p.chunks > 1 ? static_cast<float2*>(workspace) : nullptr;
  Totals* totals = static_cast<Totals*>(counters);
  unsigned* row_done = reinterpret_cast<unsigned*>(static_cast<char*>(counters) + kTotalsBytes);
  const int64_t blocks = a.rows * p.chunks;
  ce_rows<V><<<static_cast<unsigned>(blocks), p.threads, 0, stream>>>(
      static_cast<const T*>(a.logits), a.target, a.out, parts, totals, row_done, a.vocab,
      static_cast<unsigned>(a.rows), p.chunks, p.chunk_packs, a.ignore_index, a.reduction);
  return cudaGetLastError();
}

}  // namespace

int64_t cross_entropy_workspace_bytes(const CrossEntropyArgs& a) {
  if (a.rows <= 0 || a.vocab <= 0) return 0;
  const Plan p = plan_for(a);
  return p.chunks > 1 ? a.rows * p.chunks * static_cast<int64_t>(sizeof(float2)) : 0;
}

int64_t cross_entropy_counter_bytes() {
  return kTotalsBytes + target_blocks() * static_cast<int64_t>(sizeof(unsigned));
}

cudaError_t launch_cross_entropy(const CrossEntropyArgs& a, void* workspace, void* counters,
                                 cudaStream_t stream) {
  if (a.rows < 0 || a.vocab < 0) return cudaErrorInvalidValue;
  if (a.rows == 0 || a.vocab == 0) return cudaErrorInvalidValue;  // the binding handles empty inputs
  const Plan p = plan_for(a);
  if (a.rows * static_cast<int64_t>(p.chunks) > 0x7fffffff) return cudaErrorInvalidValue;
  if (counters == nullptr || (reinterpret_cast<uintptr_t>(counters) & 7u) != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.chunks > 1 && workspace == nullptr) return cudaErrorInvalidValue;
  return dispatch_variant(a.dtype, p.vectorized, [&](auto v) {
    return launch_typed<decltype(v)>(a, p, workspace, counters, stream);
  });
}

}  // namespace sk
