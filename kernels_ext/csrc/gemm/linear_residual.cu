// linear_residual: out = x @ W^T + residual, the add fused into the GEMM's epilogue.
// Hopper runs the wgmma kernel (linear_residual_wgmma.cu); other GPUs the mma.sync kernel
// with its residual epilogue (hgemm_mma.cu).
#include "hgemm_wgmma_configs.cuh"

namespace sk::gemm {
namespace {
bool tma_epilogue_ok(const MatmulArgs& a) {
  return (a.ldc * 2) % 16 == 0 && reinterpret_cast<uintptr_t>(a.c) % 16 == 0 &&
         (a.ldr * 2) % 16 == 0 && reinterpret_cast<uintptr_t>(a.residual) % 16 == 0;
}
}  // namespace

Status launch_linear_residual(DType dt, const MatmulArgs& args, const WgmmaOptions& options,
                              cudaStream_t stream) {
  if (args.residual == nullptr) return fail("linear_residual needs a residual");
  if (device_capability() != 90) return launch_hgemm_mma_residual(dt, args, stream);
  const bool k_ok = (args.lda * 2) % 16 == 0 && (args.ldw * 2) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(args.a) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(args.w) % 16 == 0;
  if (!k_ok) return launch_hgemm_mma_residual(dt, args, stream);   // TMA cannot read these rows
  WgmmaConfig c = options.config;
  if (c == WgmmaConfig::kAuto) {
    const int64_t tiles_m = ceil_div64(args.m, 128);
    if (!tma_epilogue_ok(args)) {
      c = WgmmaConfig::kDirectStore;
    } else if (tiles_m * ceil_div64(args.n, 256) >= sm_count()) {
      // 3 stages (the residual tile shares the staging); unpaired, except for the largest
      // problems with long K. Timed by solbench run beside torch.addmm
      // (results/h200/issue13/linear_residual_configs.json, x addmm, s3_c1 / s3_c2): 4096^3
      // 1.078 / 1.064, 4096x8192x8192 1.107 / 1.089, 8192^3 0.997 / 1.046.
      const int64_t tiles = tiles_m * ceil_div64(args.n, 256);
      c = tiles >= 2048 && args.k > 4096 ? WgmmaConfig::k128x256_s3_c2 : WgmmaConfig::k128x256_s3_c1;
    } else {
      c = WgmmaConfig::k128x128_s6_c1;
    }
  }
  switch (c) {
    case WgmmaConfig::k128x256_s3_c2:
    case WgmmaConfig::k128x256_s4_c2:
      return run_residual_128x256_s3_c2(dt, args, options, stream);
    case WgmmaConfig::k128x256_s3_c1:
    case WgmmaConfig::k128x256_s4_c1:
      return run_residual_128x256_s3_c1(dt, args, options, stream);
    case WgmmaConfig::k128x128_s6_c1:
    case WgmmaConfig::k128x128_s6_c2:
      return run_residual_128x128_s6_c1(dt, args, options, stream);
    case WgmmaConfig::kDirectStore:
      return run_residual_direct(dt, args, options, stream);
    case WgmmaConfig::kAuto: break;
  }
  return fail("unknown linear_residual tile configuration");
}

}  // namespace sk::gemm
