// Probe for the transpose family (issue 15): why the 2-D transpose of 1 GiB (32768 x 8192 fp32)
// reaches 0.83 of the copy bandwidth where the batched one (64 x 2048 x 1024) reaches 0.97, and
// what the small cases (2 MiB) lose to torch.compile. From the repo root:
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//        -o /tmp/transpose_probe scripts/tune/transpose_probe.cu \
//        kernels_ext/csrc/transpose/transpose_regs.cu && /tmp/transpose_probe [out.jsonl] [--quick]
//
// It compiles the library's smem kernel by #including transpose.cu (no copy) and links
// transpose_regs.cu as its own unit (the two files' file-local constants clash in one unit); both
// are timed through their launchers. Every timed launch follows a read of 1 GiB (the L2 then
// holds clean lines of another buffer), one launch per event pair, median of the reps. Every
// result is checked bit for bit against a plain one-element-per-thread reference transpose
// (copies: against x); `bad` is the count of wrong elements (-1: not checked).
//
// The experimental kernel `xpose` (below) is the library's smem scheme (words of 32 bits, 16-bit
// pairs of rows byte-permuted, pitch kWR + 1, half-warps alternating) generalised over:
//   tile      kWR word-rows x kCols columns of x (y row segments of 4 kWR bytes: 128 B .. 256 B)
//   threads   32 x kTY per tile, kGroups tiles per block (named barriers per group)
//   hints     loads: __ldg | ld.global.nc.L1::no_allocate.L2::cache_hint(evict_first).L2::256B
//             stores: plain | st.global.cs | st.global.L2::cache_hint(evict_first)
//   order     band (the library's tile_order, int64 divisions) | grid3 (blockIdx = tile, no
//             division) | persistent cyclic | persistent chunked column-major (each block walks
//             down a column strip of tiles: its y rows stay the same, few pages per SM) |
//             super-tiles (st_r x st_c tiles, column-major inside)
//   ldy       the row stride of y (padding: separates power-of-two strides from page count)
//   copy      a control: the same loads, stored back in x's layout (no transpose)
#include "../../kernels_ext/csrc/transpose/transpose.cu"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../../kernels_ext/csrc/tile/ldg.cuh"
#include "bench_common.cuh"

namespace probe {

constexpr double kCopyGBs = 4248.0;  // the measured copy bandwidth the harness scores against

// ---------------------------------------------------------------------------------------------
// Helpers: flush, reference, checks, ceilings.


template <typename U>  // U: an unsigned type of the element's size
__global__ void reference(const U* x, U* y, int64_t batch, int64_t rows, int64_t cols, int64_t ldy) {
  const int64_t n = batch * rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i % rows, c = (i / rows) % cols, b = i / (rows * cols);
    y[b * cols * ldy + c * ldy + r] = x[(b * rows + r) * cols + c];
  }
}

// Elements (b, c, r) of y and want (both with row stride ldy) that differ, bit for bit.
template <typename U>
__global__ void compare(const U* y, const U* want, int64_t batch, int64_t rows, int64_t cols, int64_t ldy,
                        unsigned long long* bad) {
  const int64_t n = batch * rows * cols;
  unsigned long long mine = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i % rows, bc = i / rows;
    const int64_t at = bc * ldy + r;
    mine += y[at] != want[at];
  }
  if (mine) atomicAdd(bad, mine);
}

// The ceiling: a grid-stride copy, kU 16-byte packs in flight per thread.
template <int kU, bool kCs>
__global__ void __launch_bounds__(256) vcopy(const uint4* __restrict__ s, uint4* __restrict__ d, int64_t n) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += step * kU) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) v[u] = sk::tile::ldg_16_if(s + i + u * step, i + u * step < n);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (i + u * step < n) {
        if constexpr (kCs) __stcs(d + i + u * step, v[u]);
        else d[i + u * step] = v[u];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The experimental kernel.

enum Load { kLdg = 0, kLdStream = 1 };
enum Store { kSt = 0, kStCs = 1, kStEvictFirst = 2 };
enum Sched { kBand = 0, kGrid3 = 1, kPersistCyclic = 2, kPersistChunk = 3, kSuper = 4 };

template <int kCols_, int kWR_, int kTY_, int kGroups_ = 1, int kLoad_ = kLdg, int kStore_ = kSt,
          bool kCopy_ = false, int kMinB_ = 1>
struct Cfg {
  static constexpr int kCols = kCols_, kWR = kWR_, kTY = kTY_, kGroups = kGroups_;
  static constexpr int kLoad = kLoad_, kStore = kStore_, kMinB = kMinB_;
  static constexpr bool kCopy = kCopy_;
  static constexpr int kGroupThreads = 32 * kTY, kThreads = kGroupThreads * kGroups;
  static_assert(kCols % 64 == 0 && kWR % 32 == 0 && kWR % kTY == 0 && kCols % kTY == 0, "tile");
  static_assert(kThreads <= 1024 && kGroups <= 15, "block");
  static_assert(kGroups * kCols * (kWR + 1) * 4 <= 48 * 1024, "static shared memory");
};

struct KP {
  const void* x;
  void* y;
  int64_t batch, rows, cols, ldy;  // x contiguous [batch][rows][cols]; y [batch][cols][ldy]
  int64_t row_tiles, col_tiles, tiles;
  int sched, band, st_r, st_c;
};

template <int kLoad>
__device__ __forceinline__ unsigned ld4(const void* p, uint64_t pol) {
  if constexpr (kLoad == kLdg) {
    return __ldg(reinterpret_cast<const unsigned*>(p));
  } else {
    unsigned v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.u32 %0, [%1], %2;"
                 : "=r"(v) : "l"(p), "l"(pol));
    return v;
  }
}

template <int kLoad>
__device__ __forceinline__ uint2 ld8(const void* p, uint64_t pol) {
  if constexpr (kLoad == kLdg) {
    return __ldg(reinterpret_cast<const uint2*>(p));
  } else {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v2.u32 {%0, %1}, [%2], %3;"
                 : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(pol));
    return v;
  }
}

template <int kStore>
__device__ __forceinline__ void st4(void* p, unsigned v, uint64_t pol) {
  if constexpr (kStore == kSt) {
    *reinterpret_cast<unsigned*>(p) = v;
  } else if constexpr (kStore == kStCs) {
    __stcs(reinterpret_cast<unsigned*>(p), v);
  } else {
    asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;" ::"l"(p), "r"(v), "l"(pol) : "memory");
  }
}

template <int kGroups>
__device__ __forceinline__ void group_sync(int grp, int n) {
  if constexpr (kGroups == 1) {
    __syncthreads();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(grp + 1), "r"(n) : "memory");
  }
}

// Tile `idx` in the order kS (not grid3).
template <int kS>
__device__ __forceinline__ void tile_coord(const KP& k, int64_t idx, int64_t& b, int64_t& rt, int64_t& ct) {
  if constexpr (kS == kPersistChunk) {  // column-major within each matrix
    const int64_t per = k.row_tiles * k.col_tiles;
    b = idx / per;
    const int64_t rem = idx - b * per;
    ct = rem / k.row_tiles;
    rt = rem - ct * k.row_tiles;
  } else if constexpr (kS == kSuper) {  // super-tiles row-major, column-major inside
    const int64_t per = k.row_tiles * k.col_tiles;
    b = idx / per;
    const int64_t rem = idx - b * per;
    const int64_t sz = (int64_t)k.st_r * k.st_c, nsc = k.col_tiles / k.st_c;
    const int64_t s = rem / sz, w = rem - s * sz;
    const int64_t sr = s / nsc, sc = s - sr * nsc;
    ct = sc * k.st_c + w / k.st_r;
    rt = sr * k.st_r + w % k.st_r;
  } else {  // band (the library's order)
    const sk::TileCoord c = sk::banded_tile(idx, k.row_tiles, k.col_tiles, k.band);
    b = c.batch;
    rt = c.row_tile;
    ct = c.col_tile;
  }
}

template <typename T, class C, bool kPersist>
__device__ __forceinline__ void do_tile(const KP& k, unsigned (&sm)[C::kCols][C::kWR + 1], int64_t b, int64_t rt,
                                        int64_t ct, int grp, int tx, int ty, uint64_t pol) {
  constexpr int RPW = 4 / sizeof(T);
  constexpr int kLI = C::kWR / C::kTY;  // word-rows loaded per thread
  constexpr int kCC = C::kCols / 64;    // 64-column chunks
  const T* xb = static_cast<const T*>(k.x) + b * k.rows * k.cols;
  T* yb = static_cast<T*>(k.y) + b * k.cols * k.ldy;
  const int64_t row0 = rt * (C::kWR * RPW), col0 = ct * C::kCols;
  unsigned w[kLI][kCC][2];
#pragma unroll
  for (int i = 0; i < kLI; ++i) {
    const int64_t r = row0 + (int64_t)(ty + i * C::kTY) * RPW;
#pragma unroll
    for (int j = 0; j < kCC; ++j) {
      const T* p = xb + r * k.cols + col0 + 64 * j + 2 * tx;
      if constexpr (sizeof(T) == 4) {
        const uint2 v = ld8<C::kLoad>(p, pol);
        w[i][j][0] = v.x;
        w[i][j][1] = v.y;
      } else {
        w[i][j][0] = ld4<C::kLoad>(p, pol);
        w[i][j][1] = ld4<C::kLoad>(p + k.cols, pol);
      }
    }
  }
  if constexpr (C::kCopy) {  // control: back where they came from, y in x's layout
#pragma unroll
    for (int i = 0; i < kLI; ++i) {
      const int64_t r = row0 + (int64_t)(ty + i * C::kTY) * RPW;
#pragma unroll
      for (int j = 0; j < kCC; ++j) {
        T* p = yb + r * k.cols + col0 + 64 * j + 2 * tx;
        if constexpr (sizeof(T) == 4) {
          *reinterpret_cast<uint2*>(p) = make_uint2(w[i][j][0], w[i][j][1]);
        } else {
          *reinterpret_cast<unsigned*>(p) = w[i][j][0];
          *reinterpret_cast<unsigned*>(p + k.cols) = w[i][j][1];
        }
      }
    }
    return;
  } else {
    const int s = (tx >> 4) & 1;
#pragma unroll
    for (int i = 0; i < kLI; ++i) {
      const int p = ty + i * C::kTY;
#pragma unroll
      for (int j = 0; j < kCC; ++j) {
        unsigned w0 = w[i][j][0], w1 = w[i][j][1];
        if constexpr (sizeof(T) == 2) {
          const unsigned a = w0, bb = w1;
          w0 = __byte_perm(a, bb, 0x5410);
          w1 = __byte_perm(a, bb, 0x7632);
        }
        const int cr = 64 * j + 2 * tx;
        sm[cr + s][p] = s ? w1 : w0;
        sm[cr + 1 - s][p] = s ? w0 : w1;
      }
    }
    group_sync<C::kGroups>(grp, C::kGroupThreads);
    constexpr int kSI = C::kCols / C::kTY;  // y rows stored per thread
    constexpr int kSW = C::kWR / 32;        // 128-byte pieces of one y row segment
#pragma unroll
    for (int i = 0; i < kSI; ++i) {
      const int c = ty + i * C::kTY;
      T* out = yb + (col0 + c) * k.ldy + row0;
#pragma unroll
      for (int q = 0; q < kSW; ++q) st4<C::kStore>(out + (tx + 32 * q) * RPW, sm[c][tx + 32 * q], pol);
    }
    if constexpr (kPersist) group_sync<C::kGroups>(grp, C::kGroupThreads);  // sm is reused
  }
}

template <typename T, class C, int kS>
__global__ void __launch_bounds__(C::kThreads, C::kMinB) xpose(const KP k) {
  __shared__ unsigned sm[C::kGroups][C::kCols][C::kWR + 1];
  const int grp = threadIdx.x / C::kGroupThreads;
  const int lt = threadIdx.x - grp * C::kGroupThreads;
  const int tx = lt & 31, ty = lt >> 5;
  uint64_t pol = 0;
  if constexpr (C::kLoad == kLdStream || C::kStore == kStEvictFirst) pol = sk::tile::l2_policy_evict_first();
  if constexpr (kS == kGrid3) {
    do_tile<T, C, false>(k, sm[grp], blockIdx.z, (int64_t)blockIdx.y * C::kGroups + grp, blockIdx.x, grp, tx, ty, pol);
    return;
  }
  int64_t b, rt, ct;
  if constexpr (kS == kPersistCyclic) {
    for (int64_t idx = (int64_t)blockIdx.x * C::kGroups + grp; idx < k.tiles; idx += (int64_t)gridDim.x * C::kGroups) {
      tile_coord<kS>(k, idx, b, rt, ct);
      do_tile<T, C, true>(k, sm[grp], b, rt, ct, grp, tx, ty, pol);
    }
    return;
  }
  if constexpr (kS == kPersistChunk) {
    const int64_t lo = k.tiles * blockIdx.x / gridDim.x, hi = k.tiles * (blockIdx.x + 1) / gridDim.x;
    if (lo + grp >= hi) return;
    tile_coord<kS>(k, lo + grp, b, rt, ct);  // then stepped down the column: no division per tile
    for (int64_t idx = lo + grp; idx < hi; idx += C::kGroups) {
      do_tile<T, C, true>(k, sm[grp], b, rt, ct, grp, tx, ty, pol);
      rt += C::kGroups;
      while (rt >= k.row_tiles) {
        rt -= k.row_tiles;
        if (++ct == k.col_tiles) ct = 0, ++b;
      }
    }
    return;
  }
  if constexpr (kS == kBand || kS == kSuper) {  // a block per kGroups tiles
    const int64_t idx = (int64_t)blockIdx.x * C::kGroups + grp;
    if (idx >= k.tiles) return;
    tile_coord<kS>(k, idx, b, rt, ct);
    do_tile<T, C, false>(k, sm[grp], b, rt, ct, grp, tx, ty, pol);
  }
}

struct Launched {
  bool ok = false;
  int occ = 0;  // blocks per SM
  int64_t grid = 0;
  int threads = 0;
};

int g_sms = 132;

template <typename T, class C, int kS>
Launched launch_xpose(const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t ldy, int band = 1,
                      int st_r = 1, int st_c = 1) {
  constexpr int sched = kS;
  Launched L;
  constexpr int kTileRows = C::kWR * (4 / sizeof(T));
  if (rows % kTileRows || cols % C::kCols || ldy < rows || ldy % 2) return L;
  KP k{x, y, batch, rows, cols, ldy, rows / kTileRows, cols / C::kCols, 0, sched, band, st_r, st_c};
  k.tiles = batch * k.row_tiles * k.col_tiles;
  k.band = (int)sk::banded_height(band, k.row_tiles);
  static int occ = -1;  // per instantiation, off the timed path
  if (occ < 0) CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, xpose<T, C, kS>, C::kThreads, 0));
  L.occ = occ;
  L.threads = C::kThreads;
  dim3 grid;
  if (sched == kGrid3) {
    if (k.row_tiles % C::kGroups || k.row_tiles / C::kGroups > 65535 || batch > 65535) return L;
    grid = dim3((unsigned)k.col_tiles, (unsigned)(k.row_tiles / C::kGroups), (unsigned)batch);
    L.grid = (int64_t)grid.x * grid.y * grid.z;
  } else if (sched == kPersistCyclic || sched == kPersistChunk) {
    L.grid = std::min<int64_t>((int64_t)L.occ * g_sms, sk::ceil_div(k.tiles, C::kGroups));
    grid = dim3((unsigned)L.grid);
  } else {
    if (sched == kSuper && (k.row_tiles % st_r || k.col_tiles % st_c)) return L;
    L.grid = sk::ceil_div(k.tiles, C::kGroups);
    if (L.grid > 0x7fffffff) return L;
    grid = dim3((unsigned)L.grid);
  }
  L.ok = true;
  xpose<T, C, kS><<<grid, C::kThreads>>>(k);
  return L;
}

// ---------------------------------------------------------------------------------------------
// The runs.

FILE* g_out = nullptr;
uint4* g_flush = nullptr;
int64_t g_flush_packs = 0;
unsigned* g_sink = nullptr;
unsigned long long* g_bad = nullptr;
int g_reps_big = 25, g_reps_small = 60;
int64_t g_y_cap = 0;  // bytes of y and ref

struct Ctx {
  const char* dtype;
  int elem;
  int64_t batch, rows, cols, ldy;
  const void* x;
  void* y;
  void* ref;
  int64_t ref_key[5] = {-1, -1, -1, -1, -1};
  double bytes() const { return 2.0 * batch * rows * cols * elem; }
  int64_t y_bytes() const { return batch * cols * ldy * elem; }
  bool big() const { return bytes() > (64 << 20); }
};

template <class F>
float median_us(F&& launch, int reps) {
  auto flush = [&] { tune_common::read_all<<<g_sms * 8, 512>>>(g_flush, g_flush_packs, g_sink); };
  return 1000.0f * tune_common::median_ms(flush, launch, reps);
}

template <typename U>
int64_t count_bad(const void* y, const void* want, int64_t batch, int64_t rows, int64_t cols, int64_t ldy) {
  CHECK(cudaMemset(g_bad, 0, sizeof(*g_bad)));
  compare<U><<<g_sms * 8, 256>>>(static_cast<const U*>(y), static_cast<const U*>(want), batch, rows, cols, ldy, g_bad);
  unsigned long long h = 0;
  CHECK(cudaMemcpy(&h, g_bad, sizeof(h), cudaMemcpyDeviceToHost));
  return (int64_t)h;
}

int64_t check(const Ctx& c, int kind) {  // 1: transpose vs the reference; 2: copy vs x
  CHECK(cudaDeviceSynchronize());
  if (kind == 0) return -1;
  const bool t = kind == 1;
  const void* want = t ? c.ref : c.x;
  // a copy compares x's layout: "rows" = cols, "cols" = rows of the flat [batch*rows, cols] view
  const int64_t b = c.batch, r = t ? c.rows : c.cols, n = t ? c.cols : c.rows, l = t ? c.ldy : c.cols;
  return c.elem == 4 ? count_bad<unsigned>(c.y, want, b, r, n, l) : count_bad<unsigned short>(c.y, want, b, r, n, l);
}

void ensure_ref(Ctx& c) {
  const int64_t key[5] = {c.elem, c.batch, c.rows, c.cols, c.ldy};
  if (std::equal(key, key + 5, c.ref_key)) return;
  CHECK(cudaMemset(c.ref, 0, c.y_bytes()));
  if (c.elem == 4)
    reference<unsigned><<<g_sms * 16, 256>>>(static_cast<const unsigned*>(c.x), static_cast<unsigned*>(c.ref), c.batch,
                                             c.rows, c.cols, c.ldy);
  else
    reference<unsigned short><<<g_sms * 16, 256>>>(static_cast<const unsigned short*>(c.x),
                                                   static_cast<unsigned short*>(c.ref), c.batch, c.rows, c.cols, c.ldy);
  CHECK(cudaDeviceSynchronize());
  std::copy(key, key + 5, c.ref_key);
}

void report(const Ctx& c, const std::string& name, float us, int64_t bad, const Launched& L) {
  const double gbs = c.bytes() / (us * 1e-6) / 1e9;
  char shape[64];
  std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)c.batch, (long long)c.rows, (long long)c.cols);
  std::printf("%-5s %-16s ldy+%-5lld %-44s %9.2f us %6.0f GB/s SOL %.3f occ %2d grid %7lld %s\n", c.dtype, shape,
              (long long)(c.ldy - c.rows), name.c_str(), us, gbs, gbs / kCopyGBs, L.occ, (long long)L.grid,
              bad > 0 ? "WRONG" : bad < 0 ? "(unchecked)" : "ok");
  if (g_out) {
    std::fprintf(g_out,
                 "{\"variant\": \"%s\", \"dtype\": \"%s\", \"batch\": %lld, \"rows\": %lld, \"cols\": %lld, "
                 "\"ldy_pad\": %lld, \"us\": %.3f, \"gbs\": %.1f, \"sol\": %.4f, \"bad\": %lld, \"occ\": %d, "
                 "\"grid\": %lld, \"threads\": %d}\n",
                 name.c_str(), c.dtype, (long long)c.batch, (long long)c.rows, (long long)c.cols,
                 (long long)(c.ldy - c.rows), us, gbs, gbs / kCopyGBs, (long long)bad, L.occ, (long long)L.grid,
                 L.threads);
    std::fflush(g_out);
  }
}

// One variant: a launch for the check (y poisoned first), then the timing.
template <class F>
void run(Ctx& c, const std::string& name, int kind, F&& launch) {
  if (c.y_bytes() > g_y_cap) return;
  if (kind == 1) ensure_ref(c);
  CHECK(cudaMemset(c.y, 0xff, c.y_bytes()));
  const Launched L = launch();
  if (!L.ok) return;  // this shape does not fit the variant
  CHECK(cudaGetLastError());
  const int64_t bad = check(c, kind);
  const float us = median_us([&] { (void)launch(); }, c.big() ? g_reps_big : g_reps_small);
  report(c, name, us, bad, L);
}

template <typename T>
sk::DType dtype_of() {
  return sizeof(T) == 4 ? sk::DType::kFloat32 : sk::DType::kBFloat16;
}

template <typename T>
void library(Ctx& c, int band) {
  sk::TransposeArgs a{dtype_of<T>(), c.x, c.y, c.batch, c.rows, c.cols, c.rows * c.cols, c.cols, band};
  run(c, "lib smem band" + std::to_string(band), 1, [&] {
    Launched L;
    L.ok = sk::launch_transpose(a, nullptr) == cudaSuccess;
    return L;
  });
  if (band == 1 && sk::transpose_regs_supports(a)) {
    run(c, "lib regs", 1, [&] {
      Launched L;
      L.ok = sk::launch_transpose_regs(a, nullptr) == cudaSuccess;
      return L;
    });
  }
}

void ceilings(Ctx& c) {
  const int64_t n = c.batch * c.rows * c.cols * c.elem;
  run(c, "copy cudaMemcpyAsync", 2, [&] {
    Launched L;
    L.ok = cudaMemcpyAsync(c.y, c.x, n, cudaMemcpyDeviceToDevice, nullptr) == cudaSuccess;
    return L;
  });
  run(c, "copy v16 x4/thread", 2, [&] {
    Launched L{true, 8, g_sms * 8, 256};
    vcopy<4, false><<<g_sms * 8, 256>>>(static_cast<const uint4*>(c.x), static_cast<uint4*>(c.y), n / 16);
    return L;
  });
  run(c, "copy v16 x4/thread st.cs", 2, [&] {
    Launched L{true, 8, g_sms * 8, 256};
    vcopy<4, true><<<g_sms * 8, 256>>>(static_cast<const uint4*>(c.x), static_cast<uint4*>(c.y), n / 16);
    return L;
  });
}

template <typename T, class C, int kS>
void xp(Ctx& c, const char* name, int band = 1, int st_r = 1, int st_c = 1) {
  const int kind = C::kCopy ? 2 : 1;
  run(c, name, kind, [&] {
    return launch_xpose<T, C, kS>(c.x, c.y, c.batch, c.rows, c.cols, c.ldy, band, st_r, st_c);
  });
}

// The large cases: 1 GiB fp32 / 512 MiB bf16 (2-D both ways, batched).
template <typename T>
void large(Ctx& c) {
  using B = Cfg<64, 32, 8, 1, kLdg, kSt, false, 8>;  // the library's tile and launch bounds
  c.ldy = c.rows;
  ceilings(c);
  library<T>(c, 1);
  library<T>(c, 64);
  xp<T, B, kGrid3>(c, "x 32x64 grid3 (= lib smem)");
  xp<T, Cfg<64, 32, 8, 1, kLdg, kSt, true, 8>, kGrid3>(c, "CONTROL tile copy 32x64 (no transpose)");
  // larger tiles: 256-byte y row segments, more loads in flight per thread
  xp<T, Cfg<64, 64, 8>, kGrid3>(c, "x 64x64 grid3");
  xp<T, Cfg<64, 64, 16>, kGrid3>(c, "x 64x64 ty16 grid3");
  xp<T, Cfg<64, 32, 4>, kGrid3>(c, "x 32x64 ty4 (2x loads/thread)");
  xp<T, Cfg<128, 32, 8>, kGrid3>(c, "x 32x128 grid3");
  xp<T, Cfg<128, 64, 8>, kGrid3>(c, "x 64x128 grid3");
  // cache hints
  xp<T, Cfg<64, 32, 8, 1, kLdStream, kSt, false, 8>, kGrid3>(c, "x 32x64 ld.nc evict_first 256B");
  xp<T, Cfg<64, 32, 8, 1, kLdg, kStCs, false, 8>, kGrid3>(c, "x 32x64 st.cs");
  xp<T, Cfg<64, 32, 8, 1, kLdg, kStEvictFirst, false, 8>, kGrid3>(c, "x 32x64 st evict_first");
  xp<T, Cfg<64, 32, 8, 1, kLdStream, kStCs, false, 8>, kGrid3>(c, "x 32x64 ld.nc ef + st.cs");
  xp<T, Cfg<64, 64, 8, 1, kLdStream, kStCs>, kGrid3>(c, "x 64x64 ld.nc ef + st.cs");
  // orders: persistent, column strips per block (few y pages per SM), super-tiles
  xp<T, B, kPersistCyclic>(c, "x 32x64 persistent cyclic");
  xp<T, B, kPersistChunk>(c, "x 32x64 persistent chunk-col g1");
  xp<T, Cfg<64, 32, 8, 2, kLdg, kSt, false, 4>, kPersistChunk>(c, "x 32x64 persistent chunk-col g2");
  xp<T, Cfg<64, 32, 8, 4, kLdg, kSt, false, 2>, kPersistChunk>(c, "x 32x64 persistent chunk-col g4");
  xp<T, Cfg<64, 64, 8, 1>, kPersistChunk>(c, "x 64x64 persistent chunk-col g1");
  xp<T, Cfg<64, 64, 8, 2, kLdg, kSt, false, 3>, kPersistChunk>(c, "x 64x64 persistent chunk-col g2");
  xp<T, Cfg<64, 32, 8, 4, kLdStream, kStCs, false, 2>, kPersistChunk>(c, "x 32x64 persist chunk-col g4 ld.nc+st.cs");
  xp<T, B, kSuper>(c, "x 32x64 super 64rt x 8ct", 1, 64, 8);
  xp<T, B, kSuper>(c, "x 32x64 super 16rt x 16ct", 1, 16, 16);
  xp<T, B, kSuper>(c, "x 32x64 super 128rt x 4ct", 1, 128, 4);
  // padded y rows: the same pages, no power-of-two stride
  for (int64_t pad_bytes : {128, 4096}) {
    c.ldy = c.rows + pad_bytes / c.elem;
    const std::string p = " ldy+" + std::to_string(pad_bytes) + "B";
    xp<T, B, kGrid3>(c, ("x 32x64 grid3" + p).c_str());
    xp<T, Cfg<64, 64, 8>, kGrid3>(c, ("x 64x64 grid3" + p).c_str());
    xp<T, Cfg<64, 32, 8, 4, kLdg, kSt, false, 2>, kPersistChunk>(c, ("x 32x64 persist chunk-col g4" + p).c_str());
  }
  c.ldy = c.rows;
}

// A slab of the 2-D case, 2048 x 8192 fp32 (64 MiB), written into y with the row stride of the
// whole 32768-row output (sparse over 1 GiB: ~512 pages), padded, or compact (8 KiB rows).
void slab(Ctx& c) {
  using B = Cfg<64, 32, 8, 1, kLdg, kSt, false, 8>;
  for (int64_t ldy : {int64_t{2048}, int64_t{32768}, int64_t{32768 + 32}, int64_t{32768 + 1024}}) {
    c.ldy = ldy;
    xp<float, B, kGrid3>(c, ("slab x 32x64 grid3 ldy=" + std::to_string(ldy)).c_str());
    xp<float, Cfg<64, 32, 8, 4, kLdg, kSt, false, 2>, kPersistChunk>(c, ("slab x 32x64 chunk-col g4 ldy=" + std::to_string(ldy)).c_str());
  }
  c.ldy = c.rows;
}

// The small cases: 2-4 MiB, latency-bound (one wave or less).
template <typename T>
void small(Ctx& c) {
  c.ldy = c.rows;
  ceilings(c);
  library<T>(c, 1);
  using B = Cfg<64, 32, 8, 1, kLdg, kSt, false, 8>;
  xp<T, B, kBand>(c, "x 32x64 band (lib order, int64 divisions)");
  xp<T, B, kGrid3>(c, "x 32x64 grid3 (no division)");
  xp<T, Cfg<64, 32, 4>, kGrid3>(c, "x 32x64 ty4 (128 thr, 2x loads/thread)");
  xp<T, Cfg<64, 32, 16>, kGrid3>(c, "x 32x64 ty16 (512 thr)");
  xp<T, Cfg<64, 32, 32>, kGrid3>(c, "x 32x64 ty32 (1024 thr, 1 row/thread)");
  xp<T, Cfg<64, 64, 8>, kGrid3>(c, "x 64x64 grid3 (half the blocks)");
  xp<T, Cfg<64, 64, 16>, kGrid3>(c, "x 64x64 ty16 grid3");
  xp<T, Cfg<128, 32, 8>, kGrid3>(c, "x 32x128 grid3 (half the blocks)");
  xp<T, Cfg<128, 64, 16>, kGrid3>(c, "x 64x128 ty16 grid3 (quarter)");
  xp<T, Cfg<64, 32, 8, 1, kLdStream, kSt, false, 8>, kGrid3>(c, "x 32x64 grid3 ld.nc 256B");
  xp<T, Cfg<64, 32, 8, 2, kLdg, kSt, false, 4>, kGrid3>(c, "x 32x64 grid3 g2 (2 tiles/block)");
  xp<T, Cfg<64, 32, 8, 4, kLdg, kSt, false, 2>, kGrid3>(c, "x 32x64 grid3 g4 (4 tiles/block)");
  xp<T, B, kPersistCyclic>(c, "x 32x64 persistent cyclic");
}

}  // namespace probe

int main(int argc, char** argv) {
  using namespace probe;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else g_out = std::fopen(argv[i], "w");
  }
  if (quick) g_reps_big = 7, g_reps_small = 15;
  g_sms = sk::sm_count();
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MiB; SOL against %.0f GB/s\n", prop.name, g_sms, prop.l2CacheSize >> 20, kCopyGBs);
  g_flush_packs = (int64_t{1} << 30) / 16;
  CHECK(cudaMalloc(&g_flush, g_flush_packs * 16));
  CHECK(cudaMemset(g_flush, 1, g_flush_packs * 16));
  CHECK(cudaMalloc(&g_sink, 4));
  CHECK(cudaMalloc(&g_bad, sizeof(*g_bad)));
  const int64_t kElems = int64_t{32768} * 8192;
  const int64_t kYBytes = int64_t{32768} * (8192 + 1024) * 4;  // the largest padded y (8192 x 32768, +4 KiB)
  void *x, *y, *ref;
  CHECK(cudaMalloc(&x, kElems * 4));
  CHECK(cudaMalloc(&y, kYBytes));
  CHECK(cudaMalloc(&ref, kYBytes));
  g_y_cap = kYBytes;
  struct Shape {
    int64_t b, m, n;
  };
  const Shape big[] = {{1, 32768, 8192}, {1, 8192, 32768}, {64, 2048, 1024}};
  const Shape little[] = {{1, 1024, 1024}, {16, 256, 256}};
  for (int e : {4, 2}) {
    if (e == 4) tune_common::fill<<<2048, 256>>>(static_cast<float*>(x), kElems, 7, -1.0f, 1.0f);
    else tune_common::fill<<<2048, 256>>>(static_cast<__nv_bfloat16*>(x), kElems, 7, -1.0f, 1.0f);
    CHECK(cudaDeviceSynchronize());
    for (const Shape& s : big) {
      Ctx c{e == 4 ? "fp32" : "bf16", e, s.b, s.m, s.n, s.m, x, y, ref};
      if (e == 4) large<float>(c);
      else large<__nv_bfloat16>(c);
      std::printf("\n");
    }
    if (e == 4) {
      Ctx c{"fp32", 4, 1, 2048, 8192, 2048, x, y, ref};
      slab(c);
      std::printf("\n");
    }
    for (const Shape& s : little) {
      Ctx c{e == 4 ? "fp32" : "bf16", e, s.b, s.m, s.n, s.m, x, y, ref};
      if (e == 4) small<float>(c);
      else small<__nv_bfloat16>(c);
      std::printf("\n");
    }
  }
  if (g_out) std::fclose(g_out);
  return 0;
}
