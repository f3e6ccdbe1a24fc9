// Tuning bench for the kernel library's launch choices, on the GPU present.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//        -o /tmp/kernel_tiles scripts/tune/kernel_tiles.cu && /tmp/kernel_tiles [out.jsonl [small]]
//
// It compiles the library's own kernel sources (no copies) and times, per op and
// dtype, each candidate: map-kernel tiles (threads per block, packs in flight per
// thread, resident threads per SM; "auto" is the library's own choice) and, for the row kernels, packs per
// thread (so threads per row).
// Bandwidth counts each input read once and the output written once. Not the
// harness: no eager baseline, no correctness checks (the GPU tests do those).
// A second argument `small` times only the 1024 x 1024 maps (under one wave of blocks, where
// eager's and Inductor's shapes beat ours by 4-5%), each launch after a 256 MiB read that
// leaves the L2 holding another buffer, as `solbench run` does, with more tile shapes.
#include <algorithm>
#include <type_traits>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "../../kernels_ext/csrc/activation/activation.cu"
#include "../../kernels_ext/csrc/elementwise/elementwise.cu"
#include "../../kernels_ext/csrc/layernorm/layernorm.cu"
#include "../../kernels_ext/csrc/rmsnorm/rmsnorm.cu"
#include "../../kernels_ext/csrc/softmax/softmax.cu"

// Named (not anonymous): nvcc's host stubs cannot tell two anonymous namespaces apart.
namespace tune {

using namespace sk;

struct Identity {
  template <bool kLow>
  __device__ __forceinline__ static float apply(float x) { return x; }
};

// Values in [-4, 4).
template <typename T>
void fill(T* p, int64_t n, uint32_t seed, int blocks) {
  tune_common::fill<T><<<blocks, 256>>>(p, n, seed, -4.0f, 4.0f);
}

FILE* g_out = nullptr;  // the bench's one output file, set once in main
// Set once in main for the `small` mode: a buffer whose read before each launch clears the L2.
const uint4* g_flush = nullptr;
int64_t g_flush_packs = 0;
unsigned* g_sink = nullptr;

// Median of reps single-launch times (ms), after warmups.
template <class F>
float time_ms(F&& launch, int reps) {
  if (g_flush == nullptr) return tune_common::median_ms([] {}, launch, reps);
  const auto flush = [] { tune_common::read_all<<<132 * 8, 512>>>(g_flush, g_flush_packs, g_sink); };
  return tune_common::median_ms(flush, launch, reps);
}

void report(const char* op, const char* dtype, long rows, long cols, const char* variant,
            double bytes, float ms) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-10s %-5s %6ldx%-6ld %-34s %9.1f us %7.0f GB/s\n", op, dtype, rows, cols, variant,
              ms * 1e3, gbs);
  if (g_out) {
    std::fprintf(g_out,
                 "{\"op\":\"%s\",\"dtype\":\"%s\",\"rows\":%ld,\"cols\":%ld,\"variant\":\"%s\","
                 "\"us\":%.3f,\"gbs\":%.1f}\n",
                 op, dtype, rows, cols, variant, ms * 1e3, gbs);
  }
}

struct Buffers {
  void* a;
  void* b;
  void* out;
  void* w;
  void* bias;
};

template <class Op, int NIN, class Tile, class V>
void bench_map_tile(const char* op, const Buffers& buf, long rows, long cols, int reps) {
  using T = typename V::T;
  const int64_t n = (int64_t)rows * cols;
  const void* const in[2] = {buf.a, buf.b};
  const void* const (&inn)[NIN] = *reinterpret_cast<const void* const(*)[NIN]>(&in);
  const DType dt = sizeof(T) == 4 ? DType::kFloat32 : DType::kBFloat16;
  const auto launch = [&] {
    const cudaError_t e = launch_map<Op, NIN, Tile>(dt, inn, buf.out, n, 0);
    CHECK(e);
  };
  const float ms = time_ms(launch, reps);
  char name[64];
  if constexpr (std::is_void_v<Tile>) {
    std::snprintf(name, sizeof name, "map auto");
  } else {
    std::snprintf(name, sizeof name, "map t%d p%d r%d", Tile::kThreads, Tile::kPacks,
                  Tile::kResident);
  }
  report(op, sizeof(T) == 4 ? "f32" : "bf16", rows, cols, name, (NIN + 1.0) * n * sizeof(T), ms);
}

template <class Op, int NIN, class V>
void bench_map(const char* op, const Buffers& buf, long rows, long cols, int reps) {
  bench_map_tile<Op, NIN, void, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<128, 1, 2048>, V>(op, buf, rows, cols, reps);  // cheap
  bench_map_tile<Op, NIN, MapTile<128, 2, 2048>, V>(op, buf, rows, cols, reps);  // costly fp32
  bench_map_tile<Op, NIN, MapTile<256, 8 / NIN, 1024>, V>(op, buf, rows, cols, reps);  // costly 16-bit
  bench_map_tile<Op, NIN, MapTile<128, 4 / NIN, 1024>, V>(op, buf, rows, cols, reps);  // its small size
  bench_map_tile<Op, NIN, MapTile<256, 1, 2048>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<512, 8 / NIN, 1024>, V>(op, buf, rows, cols, reps);
}

// The small mode's shapes: threads x packs per thread, at full occupancy unless packs are many.
template <class Op, int NIN, class V>
void bench_map_small(const char* op, const Buffers& buf, long rows, long cols, int reps) {
  bench_map_tile<Op, NIN, void, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<64, 1, 2048>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<128, 1, 2048>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<256, 1, 2048>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<64, 2, 2048>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<128, 2, 2048>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<256, 2, 2048>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<128, 4, 2048>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<128, 4, 1024>, V>(op, buf, rows, cols, reps);
  bench_map_tile<Op, NIN, MapTile<256, 8, 1024>, V>(op, buf, rows, cols, reps);
}

template <class V>
void bench_small(const Buffers& buf, int reps) {
  bench_map_small<GeluErf, 1, V>("gelu", buf, 1024, 1024, reps);
  bench_map_small<Silu, 1, V>("silu", buf, 1024, 1024, reps);
  bench_map_small<SwiGlu, 2, V>("swiglu", buf, 1024, 1024, reps);
  bench_map_small<Add, 2, V>("add", buf, 1024, 1024, reps);
}

// Block-per-row kernels with NV packs per thread (the library uses 4, or 8 for rows
// too long for 1024 threads x 4 packs).
template <class V, int NV>
void bench_rows_nv(const Buffers& buf, long rows, long cols, int reps) {
  using T = typename V::T;
  const char* dt = sizeof(T) == 4 ? "f32" : "bf16";
  const int nvec = cols / V::VEC;
  const int threads = round_up32(ceil_div(nvec, NV));
  if (threads > 1024) return;
  const double bytes = 2.0 * rows * cols * sizeof(T);
  const auto* x = static_cast<const T*>(buf.a);
  auto* y = static_cast<T*>(buf.out);
  char name[64];
  std::snprintf(name, sizeof name, "block nv%d t%d", NV, threads);
  float ms = time_ms([&] {
    softmax_rows<V, NV, false><<<rows, threads>>>(x, y, rows, (int)cols);
  }, reps);
  report("softmax", dt, rows, cols, name, bytes, ms);
  LnArgs<T> la{x, static_cast<const T*>(buf.w), static_cast<const T*>(buf.bias), y, rows, (int)cols, 1e-5f};
  ms = time_ms([&] { layernorm_rows<V, NV, false><<<rows, threads>>>(la); }, reps);
  report("layernorm", dt, rows, cols, name, bytes, ms);
  RmsArgs<T> ra{};
  ra.x = x;
  ra.weight = static_cast<const T*>(buf.w);
  ra.y = y;
  ra.rows = rows;
  ra.cols = (int)cols;
  ra.eps = 1e-6f;
  ms = time_ms([&] { rmsnorm_rows<V, NV, false, false><<<rows, threads>>>(ra); }, reps);
  report("rmsnorm", dt, rows, cols, name, bytes, ms);
}

template <class V>
void bench_rows(const Buffers& buf, long rows, long cols, int reps) {
  bench_rows_nv<V, 2>(buf, rows, cols, reps);
  bench_rows_nv<V, 4>(buf, rows, cols, reps);
  bench_rows_nv<V, 8>(buf, rows, cols, reps);
}

template <class V>
void bench_all(const Buffers& buf, int reps_big, int reps_small) {
  const long R = 32768, C = 8192;
  bench_map<Identity, 1, V>("copy", buf, R, C, reps_big);
  bench_map<Add, 2, V>("add", buf, R, C, reps_big);
  bench_map<GeluErf, 1, V>("gelu", buf, R, C, reps_big);
  bench_map<GeluTanh, 1, V>("gelu_tanh", buf, R, C, reps_big);
  bench_map<Silu, 1, V>("silu", buf, R, C, reps_big);
  bench_map<SwiGlu, 2, V>("swiglu", buf, R, C, reps_big);
  bench_map<GeluErf, 1, V>("gelu", buf, 1024, 1024, reps_small);
  bench_map<Silu, 1, V>("silu", buf, 1024, 1024, reps_small);
  bench_map<Add, 2, V>("add", buf, 1024, 1024, reps_small);
  bench_rows<V>(buf, R, C, reps_big);
  bench_rows<V>(buf, 8192, 4096, reps_small);
}

}  // namespace tune

using namespace tune;

int main(int argc, char** argv) {
  if (argc > 1) g_out = std::fopen(argv[1], "w");
  const bool small = argc > 2 && std::string(argv[2]) == "small";
  const int64_t n = small ? 1024LL * 1024 : 32768LL * 8192;
  Buffers buf{};
  CHECK(cudaMalloc(&buf.a, n * 4));
  CHECK(cudaMalloc(&buf.b, n * 4));
  CHECK(cudaMalloc(&buf.out, n * 4));
  CHECK(cudaMalloc(&buf.w, 8192 * 4));
  CHECK(cudaMalloc(&buf.bias, 8192 * 4));
  fill<float>((float*)buf.a, n, 1, 1024);
  fill<float>((float*)buf.b, n, 2, 1024);
  fill<float>((float*)buf.w, 8192, 3, 32);
  fill<float>((float*)buf.bias, 8192, 4, 32);
  CHECK(cudaDeviceSynchronize());
  if (small) {
    g_flush_packs = (int64_t{256} << 20) / 16;
    uint4* flush = nullptr;
    CHECK(cudaMalloc(&flush, g_flush_packs * 16));
    CHECK(cudaMemset(flush, 1, g_flush_packs * 16));
    CHECK(cudaMalloc(&g_sink, sizeof(unsigned)));
    g_flush = flush;
    bench_small<f32x4>(buf, 200);
    fill<__nv_bfloat16>((__nv_bfloat16*)buf.a, n, 1, 1024);
    fill<__nv_bfloat16>((__nv_bfloat16*)buf.b, n, 2, 1024);
    CHECK(cudaDeviceSynchronize());
    bench_small<bf16x8>(buf, 200);
    if (g_out) std::fclose(g_out);
    return 0;
  }
  bench_all<f32x4>(buf, 15, 50);
  fill<__nv_bfloat16>((__nv_bfloat16*)buf.a, n, 1, 1024);
  fill<__nv_bfloat16>((__nv_bfloat16*)buf.b, n, 2, 1024);
  fill<__nv_bfloat16>((__nv_bfloat16*)buf.w, 8192, 3, 32);
  fill<__nv_bfloat16>((__nv_bfloat16*)buf.bias, 8192, 4, 32);
  CHECK(cudaDeviceSynchronize());
  bench_all<bf16x8>(buf, 15, 50);
  if (g_out) std::fclose(g_out);
  return 0;
}
