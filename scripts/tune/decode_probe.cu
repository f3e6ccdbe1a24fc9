// Probe for the decode GEMM (C[M, N] = A[M, K] @ W[N, K]^T, M <= 16): which layout of
// gemm_decode_mma's CTA streams W fastest, and what limits it. From the repo root:
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lcublas \
//        -o /tmp/decode_probe scripts/tune/decode_probe.cu kernels_ext/csrc/gemv/gemv.cu \
//        kernels_ext/csrc/gemv/gemv_mma.cu && /tmp/decode_probe [out.jsonl]
//
// It compiles the library's own kernel source (no copy) and times, per case, each CTA shape
// (kernels_ext/csrc/gemm/gemm_decode_mma.cu, DecodeShape), cuBLAS's bf16 GEMM on the same
// buffers, the gemv family's two kernels where M <= 8, and a plain read of W (the stream's ceiling at this size). Every timed launch follows
// a read of 1 GiB (the L2 holds clean lines of another buffer: no write-backs charged to the
// call), one launch per event pair, median of the reps. "w-only" runs a shape with M = 0: W is
// streamed and multiplied, x is never loaded, nothing is written -- the cost of x's traffic.
// Each shape's C is checked against a plain fp32 dot-product kernel's (max |diff| / max |C|).
// cuBLAS is timed where its header is installed (link with -lcublas); else it is left out.
#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#define PROBE_CUBLAS 1
#endif

#include <algorithm>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "../../kernels_ext/csrc/gemm/gemm_decode_mma.cu"
#include "bench_common.cuh"
#include "../../kernels_ext/csrc/gemv/gemv.h"

int sk::gemm::device_capability() { return 90; }

namespace probe {

// The stream's ceiling: kU 16-byte loads in flight per thread, grid-stride over a fixed grid, each
// load as `kHow` says (tile::StreamLoad: the decode kernel's hints, or fewer).
template <int kU, sk::tile::StreamLoad kHow>
__global__ void __launch_bounds__(256) read_stream(const uint4* __restrict__ p, int64_t n, unsigned* sink) {
  const uint64_t once = sk::tile::l2_policy_evict_first();
  unsigned acc = 0;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += step * kU) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) v[u] = sk::tile::ldg_stream_16_as_if<kHow>(p + i + u * step, once, i + u * step < n);
#pragma unroll
    for (int u = 0; u < kU; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

// The other shape of a plain read: one short block per `row_packs` packs (as kernels_ext's row_sum
// reads a row: every load of a thread issued at once, then the block ends), so the block scheduler
// balances the SMs; row_sum read 128 MiB in 31.0 us where the fixed grid above took 34.4.
template <int kU, sk::tile::StreamLoad kHow>
__global__ void __launch_bounds__(256) read_rows(const uint4* __restrict__ p, int64_t row_packs, unsigned* sink) {
  const uint64_t once = sk::tile::l2_policy_evict_first();
  const uint4* row = p + blockIdx.x * row_packs;
  unsigned acc = 0;
  for (int64_t i = threadIdx.x; i < row_packs; i += (int64_t)blockDim.x * kU) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t j = i + (int64_t)u * blockDim.x;
      v[u] = sk::tile::ldg_stream_16_as_if<kHow>(row + j, once, j < row_packs);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

// The reference: one thread per output, fp32 sums.
__global__ void reference(const __nv_bfloat16* a, const __nv_bfloat16* w, __nv_bfloat16* c, int m, int n, int k) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= (int64_t)m * n) return;
  const int row = static_cast<int>(i / n), col = static_cast<int>(i % n);
  float s = 0;
  for (int j = 0; j < k; ++j) s += __bfloat162float(a[(int64_t)row * k + j]) * __bfloat162float(w[(int64_t)col * k + j]);
  c[i] = __float2bfloat16(s);
}

struct Bufs {
  uint4* flush = nullptr;
  int64_t flush_packs = 0;
  unsigned* sink = nullptr;
};

template <class F>
float median_us(const Bufs& b, F&& launch, int reps) {
  auto flush = [&] { tune_common::read_all<<<132 * 8, 512>>>(b.flush, b.flush_packs, b.sink); };
  return 1000.0f * tune_common::median_ms(flush, launch, reps);
}

FILE* g_out = nullptr;

void report(const char* what, int m, int n, int k, float us, double bytes, double err) {
  const double gbs = bytes / (us * 1e-6) / 1e9;
  std::printf("%-34s M=%-2d N=%-5d K=%-5d %8.1f us %7.0f GB/s  SOL %.3f  err %.1e\n", what, m, n, k, us, gbs,
              gbs / 4800.0, err);
  if (g_out) {
    std::fprintf(g_out, "{\"variant\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"us\": %.3f, \"gbs\": %.1f, \"err\": %.3e}\n",
                 what, m, n, k, us, gbs, err);
    std::fflush(g_out);
  }
}

double max_rel_diff(const __nv_bfloat16* got, const __nv_bfloat16* want, int64_t n) {
  std::vector<__nv_bfloat16> a(n), b(n);
  CHECK(cudaMemcpy(a.data(), got, n * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(b.data(), want, n * 2, cudaMemcpyDeviceToHost));
  double d = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    d = std::max(d, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return scale > 0 ? d / scale : d;
}

struct Case {
  int m, n, k;
};

template <class S>
void shape(const char* name, const Bufs& b, const sk::gemm::MatmulArgs& g, const __nv_bfloat16* ref, __nv_bfloat16* c,
           double bytes, int reps) {
  using sk::gemm::run_decode_mma;
  CHECK(cudaMemset(c, 0, g.m * g.n * 2));
  if (!run_decode_mma<__nv_bfloat16, S>(g, nullptr).ok()) std::exit(2);
  CHECK(cudaDeviceSynchronize());
  const double err = max_rel_diff(c, ref, g.m * g.n);
  const float us = median_us(b, [&] { (void)run_decode_mma<__nv_bfloat16, S>(g, nullptr); }, reps);
  report(name, g.m, g.n, g.k, us, bytes, err);
  sk::gemm::MatmulArgs w_only = g;
  w_only.m = 0;   // run_decode_mma takes M as given: no x loads, no stores
  const float us0 = median_us(b, [&] { (void)run_decode_mma<__nv_bfloat16, S>(w_only, nullptr); }, reps);
  report((std::string(name) + " w-only").c_str(), g.m, g.n, g.k, us0, double(g.n) * g.k * 2, 0.0);
}

void run_case(const Case& cs, const Bufs& b, int reps) {
  const int64_t M = cs.m, N = cs.n, K = cs.k;
  __nv_bfloat16 *a, *w, *c, *ref;
  CHECK(cudaMalloc(&a, M * K * 2));
  CHECK(cudaMalloc(&w, N * K * 2));
  CHECK(cudaMalloc(&c, M * N * 2));
  CHECK(cudaMalloc(&ref, M * N * 2));
  tune_common::fill<<<1024, 256>>>(a, M * K, 1, -1.0f, 1.0f);
  tune_common::fill<<<1024, 256>>>(w, N * K, 2, -1.0f, 1.0f);
  CHECK(cudaDeviceSynchronize());
  const double bytes = double(N) * K * 2 + double(M) * K * 2 + double(M) * N * 2;
  reference<<<static_cast<unsigned>((M * N + 255) / 256), 256>>>(a, w, ref, cs.m, cs.n, cs.k);
  CHECK(cudaDeviceSynchronize());
#ifdef PROBE_CUBLAS
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) std::exit(3);
  const float one = 1.0f, zero = 0.0f;
  // Row-major C[M, N] = A W^T is column-major C^T[N, M] = W (K x N col-major, transposed) x A^T.
  auto cublas = [&] {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, w, CUDA_R_16BF, (int)K, a, CUDA_R_16BF,
                 (int)K, &zero, c, CUDA_R_16BF, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  cublas();
  CHECK(cudaDeviceSynchronize());
  const double cerr = max_rel_diff(c, ref, M * N);
  report("cublas", cs.m, cs.n, cs.k, median_us(b, cublas, reps), bytes, cerr);
  cublasDestroy(h);
#endif
  const int64_t packs = N * K * 2 / 16;
  using sk::tile::StreamLoad;
  auto reads = [&](auto how, const char* tag) {
    constexpr StreamLoad kHow = decltype(how)::value;
    const std::string t(tag);
    report(("read W grid 1056x256 x4 " + t).c_str(), cs.m, cs.n, cs.k,
           median_us(b, [&] { read_stream<4, kHow><<<132 * 8, 256>>>(reinterpret_cast<const uint4*>(w), packs, b.sink); }, reps),
           double(N) * K * 2, 0.0);
    const int64_t row_packs = K * 2 / 16;   // one block per row of W: 256 threads, 4 packs each at K = 8192
    report(("read W row blocks x4 " + t).c_str(), cs.m, cs.n, cs.k,
           median_us(b, [&] { read_rows<4, kHow><<<(unsigned)N, 256>>>(reinterpret_cast<const uint4*>(w), row_packs, b.sink); }, reps),
           double(N) * K * 2, 0.0);
  };
  reads(std::integral_constant<StreamLoad, StreamLoad::kEvictFirst256>{}, "evict-first+256B");
  reads(std::integral_constant<StreamLoad, StreamLoad::kPrefetch256>{}, "256B");
  reads(std::integral_constant<StreamLoad, StreamLoad::kNoAllocate>{}, "no-allocate");
  reads(std::integral_constant<StreamLoad, StreamLoad::kReadOnly>{}, "read-only (__ldg)");

  sk::gemm::MatmulArgs g{};
  g.a = a;
  g.w = w;
  g.c = c;
  g.m = M;
  g.n = N;
  g.k = K;
  g.lda = K;
  g.ldw = K;
  g.ldc = N;
  using sk::gemm::DecodeShape;
  constexpr StreamLoad kEF = StreamLoad::kEvictFirst256, kPF = StreamLoad::kPrefetch256,
                       kNA = StreamLoad::kNoAllocate, kRO = StreamLoad::kReadOnly;
  // The library's Rows32 and Rows16, then the same CTAs loading W 8 lanes to a row (128 contiguous
  // bytes per row per instruction, shuffled into the mma's layout) under each load (16 lanes to a row,
  // or 8 with 4 chunks in flight, spill at 128 registers).
  shape<DecodeShape<8, 2, 2, 4, false, kEF>>("Rows32 (s8 rw2 g2 d4) evict-first+256B", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 1, 2, 4, false, kEF>>("Rows16 (s8 rw1 g2 d4) evict-first+256B", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 2, 2, 2, false, kNA, 8>>("Rows32 lanes8 d2 no-allocate", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 2, 2, 2, false, kRO, 8>>("Rows32 lanes8 d2 read-only", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 1, 2, 2, false, kNA, 8>>("Rows16 lanes8 d2 no-allocate", b, g, ref, c, bytes, reps);
  // K-splits interleaved: the 4 (8) warps of a row group read neighbouring pieces, so a row gets 256
  // (lanes8: 512) contiguous bytes per step across the warps.
  shape<DecodeShape<8, 2, 2, 4, true, kNA>>("Rows32 interleaved no-allocate", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 2, 2, 4, true, kEF>>("Rows32 interleaved evict-first+256B", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 2, 2, 2, true, kNA, 8>>("Rows32 lanes8 d2 interleaved no-allocate", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 2, 2, 2, true, kRO, 8>>("Rows32 lanes8 d2 interleaved read-only", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 1, 2, 2, true, kNA, 8>>("Rows16 lanes8 d2 interleaved no-allocate", b, g, ref, c, bytes, reps);
  shape<DecodeShape<8, 1, 2, 4, true, kNA>>("Rows16 interleaved no-allocate", b, g, ref, c, bytes, reps);
  if (cs.m <= 8) {   // the gemv family's kernels on the same product (y = x a^T, a = W, x = A)
    const sk::GemvArgs gv{sk::DType::kBFloat16, w, a, c, N, K, M, K, K};
    for (int mma = 0; mma < 2; ++mma) {
      auto launch = [&] { (void)(mma ? sk::launch_gemv_mma(gv, nullptr) : sk::launch_gemv(gv, nullptr)); };
      CHECK(cudaMemset(c, 0, M * N * 2));
      launch();
      CHECK(cudaDeviceSynchronize());
      report(mma ? "gemv mma" : "gemv simt", cs.m, cs.n, cs.k, median_us(b, launch, reps), bytes, max_rel_diff(c, ref, M * N));
    }
  }
  std::printf("\n");
  cudaFree(a);
  cudaFree(w);
  cudaFree(c);
  cudaFree(ref);
}

}  // namespace probe

int main(int argc, char** argv) {
  using namespace probe;
  if (argc > 1) g_out = std::fopen(argv[1], "w");
  Bufs b;
  b.flush_packs = (int64_t{1} << 30) / 16;
  CHECK(cudaMalloc(&b.flush, b.flush_packs * 16));
  CHECK(cudaMemset(b.flush, 1, b.flush_packs * 16));
  CHECK(cudaMalloc(&b.sink, 4));
  const Case cases[] = {{16, 8192, 8192}, {16, 16384, 8192}, {16, 4096, 14336}, {1, 8192, 8192}};
  for (const Case& cs : cases) run_case(cs, b, 40);
  if (g_out) std::fclose(g_out);
  return 0;
}
