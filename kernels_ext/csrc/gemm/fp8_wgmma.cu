// fp8_wgmma: float8_e4m3 A and W, per-tensor fp32 scales, bf16 C = (A @ W^T) * scale_a * scale_b.
//
// The kernel is wgmma_gemm.cuh with fp8 k-blocks (128 elements = one 128-byte swizzled row, four
// m64 nWGN k32 steps) and promotion: the tensor core accumulates fp8 products with fewer
// mantissa bits than fp32, so each k-block's product goes into a fresh temporary accumulator
// that is then added into the fp32 result (every 128 of K, as DeepGEMM does), which keeps the
// error at torch._scaled_mm's level however long K is. With BN = 256 the temporary covers one
// 128-column slice at a time (64 + 128 accumulator registers instead of 2 x 128).
#include "gemm.h"
#include "wgmma_gemm.cuh"

namespace sk::gemm {
namespace {

template <int BN, int STAGES, int CLUSTER, int EPI>
using Fp8Tma = WgmmaGemmConfig<fp8_e4m3, __nv_bfloat16, 128, BN, 128, STAGES, CLUSTER, EPI,
                               Epilogue::kTmaStore, false, true>;
using Fp8Direct = WgmmaGemmConfig<fp8_e4m3, __nv_bfloat16, 128, 128, 128, 6, 1, 64,
                                  Epilogue::kDirect, false, true>;

// As hgemm_wgmma (pick_wgmma_config): 128x256 tiles when they fill the SMs, unpaired: timed by
// solbench run (results/h200/issue13/gemm_configs_fixed.json) s4_c1 is 1.045x torch._scaled_mm at
// 4096^3, 0.958x at 8192^3 and 0.995x at 4096x8192x8192; s4_c2 1.009x, 0.959x and 0.978x.
WgmmaConfig pick_fp8_config(const MatmulArgs& a, int sms) {
  if ((a.ldc * 2) % 16 != 0 || reinterpret_cast<uintptr_t>(a.c) % 16 != 0) {
    return WgmmaConfig::kDirectStore;
  }
  const int64_t tiles_m = ceil_div64(a.m, 128);
  if (tiles_m * ceil_div64(a.n, 256) >= sms) {
    return WgmmaConfig::k128x256_s4_c1;
  }
  return tiles_m >= 2 ? WgmmaConfig::k128x128_s6_c2 : WgmmaConfig::k128x128_s6_c1;
}

}  // namespace

Status launch_gemm_fp8(const MatmulArgs& args, const float* scale_a, const float* scale_b,
                       const WgmmaOptions& options, cudaStream_t stream) {
  Status st = require_sm90("fp8_wgmma");
  if (!st.ok()) return st;
  WgmmaConfig c = options.config;
  if (c == WgmmaConfig::kAuto) c = pick_fp8_config(args, sm_count());
  switch (c) {
    case WgmmaConfig::k128x256_s4_c2:
    case WgmmaConfig::k128x256_s3_c2:
      return run_wgmma_gemm<Fp8Tma<256, 4, 2, 128>>(args, scale_a, scale_b, options, stream);
    case WgmmaConfig::k128x256_s4_c1:
    case WgmmaConfig::k128x256_s3_c1:
      return run_wgmma_gemm<Fp8Tma<256, 4, 1, 128>>(args, scale_a, scale_b, options, stream);
    case WgmmaConfig::k128x128_s6_c2:
      return run_wgmma_gemm<Fp8Tma<128, 6, 2, 128>>(args, scale_a, scale_b, options, stream);
    case WgmmaConfig::k128x128_s6_c1:
      return run_wgmma_gemm<Fp8Tma<128, 6, 1, 128>>(args, scale_a, scale_b, options, stream);
    case WgmmaConfig::kDirectStore:
      return run_wgmma_gemm<Fp8Direct>(args, scale_a, scale_b, options, stream);
    case WgmmaConfig::kAuto: break;
  }
  return fail("unknown fp8 tile configuration");
}

}  // namespace sk::gemm
