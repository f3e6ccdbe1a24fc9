// hgemm_wgmma: the launcher that picks a tile configuration, and the direct-store fallback
// (C written from registers: any N, any alignment of C). The kernel is wgmma_gemm.cuh.
#include <cuda_runtime.h>

#include "hgemm_wgmma_configs.cuh"

namespace sk::gemm {
namespace {
template <class T> using Direct = HgemmDirect<T, false>;

RunFn config_fn(WgmmaConfig c) {
  switch (c) {
    case WgmmaConfig::k128x256_s4_c2: return run_hgemm_128x256_s4_c2;
    case WgmmaConfig::k128x256_s3_c2: return run_hgemm_128x256_s3_c2;
    case WgmmaConfig::k128x256_s4_c1: return run_hgemm_128x256_s4_c1;
    case WgmmaConfig::k128x256_s3_c1: return run_hgemm_128x256_s3_c1;
    case WgmmaConfig::k128x128_s6_c2: return run_hgemm_128x128_s6_c2;
    case WgmmaConfig::k128x128_s6_c1: return run_hgemm_128x128_s6_c1;
    case WgmmaConfig::kDirectStore: return run_hgemm_direct;
    case WgmmaConfig::kAuto: break;
  }
  return nullptr;
}

bool c_allows_tma_store(const MatmulArgs& a) {
  return (a.ldc * 2) % 16 == 0 && reinterpret_cast<uintptr_t>(a.c) % 16 == 0;
}
}  // namespace

Status run_hgemm_direct(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<Direct>(dt, a, o, s);
}

const char* wgmma_config_name(WgmmaConfig c) {
  switch (c) {
    case WgmmaConfig::kAuto: return "auto";
    case WgmmaConfig::k128x256_s4_c2: return "128x256_s4_c2";
    case WgmmaConfig::k128x256_s3_c2: return "128x256_s3_c2";
    case WgmmaConfig::k128x256_s4_c1: return "128x256_s4_c1";
    case WgmmaConfig::k128x256_s3_c1: return "128x256_s3_c1";
    case WgmmaConfig::k128x128_s6_c2: return "128x128_s6_c2";
    case WgmmaConfig::k128x128_s6_c1: return "128x128_s6_c1";
    case WgmmaConfig::kDirectStore: return "direct_store";
  }
  return "unknown";
}

int device_capability() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return 0;
  return major * 10 + minor;
}

Status require_sm90(const char* variant) {
  const int cc = device_capability();
  if (cc == 90) return ok();
  return fail(std::string(variant) + " needs a compute capability 9.0 GPU (H100/H200: wgmma and "
              "TMA, built as sm_90a); this device is " +
              (cc == 0 ? std::string("unknown") : std::to_string(cc / 10) + "." + std::to_string(cc % 10)),
              cudaErrorNotSupported);
}

// The tile configuration for a shape, by how many SMs each choice keeps busy: 128x256 tiles
// (the best ratio of math to shared-memory traffic) when they fill the machine, 128x128 when
// 128x256 would leave SMs idle (on 2-CTA clusters when there are two M-tiles to pair: half the
// L2 reads of W). The big tiles run unpaired, 4 stages for K <= 4096 and 3 beyond: timed by
// solbench run (results/h200/issue13/gemm_configs_fixed.json; x cuBLAS at 4096^3 / 8192^3 /
// 4096x8192x8192): s4_c1 1.005 / 1.005 / 0.990, s3_c1 1.002 / 1.022 / 0.990, s4_c2 1.002 /
// 1.003 / 0.993. (Until the grid memo was keyed per configuration, every unpaired kernel
// launched after a paired one ran on half the SMs at 0.56x, which had made c2 the pick.)
WgmmaConfig pick_wgmma_config(const MatmulArgs& a, int sms) {
  if (!c_allows_tma_store(a)) return WgmmaConfig::kDirectStore;
  const int64_t tiles_m = ceil_div64(a.m, 128);
  const int64_t big = tiles_m * ceil_div64(a.n, 256);
  if (big >= sms) return a.k > 4096 ? WgmmaConfig::k128x256_s3_c1 : WgmmaConfig::k128x256_s4_c1;
  return tiles_m >= 2 ? WgmmaConfig::k128x128_s6_c2 : WgmmaConfig::k128x128_s6_c1;
}

Status launch_hgemm_wgmma(DType dt, const MatmulArgs& args, const WgmmaOptions& options,
                          cudaStream_t stream) {
  Status st = require_sm90("hgemm_wgmma");
  if (!st.ok()) return st;
  WgmmaConfig c = options.config;
  if (c == WgmmaConfig::kAuto) c = pick_wgmma_config(args, sm_count());
  RunFn fn = config_fn(c);
  if (fn == nullptr) return fail("unknown wgmma tile configuration");
  return fn(dt, args, options, stream);
}

}  // namespace sk::gemm
