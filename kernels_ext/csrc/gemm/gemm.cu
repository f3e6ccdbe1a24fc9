// The GEMM family's front door: which variant runs for a dtype, a shape and the device.
//   fp32                           -> sgemm_fp32 (CUDA cores; TF32 is never used)
//   bf16/fp16 on compute 9.0       -> gemm_decode when M <= kDecodeMaxM, else hgemm_wgmma
//                                     (both need K % 8 == 0 for TMA; otherwise hgemm_mma)
//   bf16/fp16 elsewhere (sm_80+)   -> hgemm_mma
// fp8 has its own entry (launch_gemm_fp8): it needs scales.
#include "gemm.h"

namespace sk::gemm {

namespace {
bool tma_rows_ok(const MatmulArgs& a) {
  return (a.lda * 2) % 16 == 0 && (a.ldw * 2) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.a) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
}
}  // namespace

const char* pick_gemm_variant(DType dt, const MatmulArgs& args) {
  if (dt == DType::kFloat32) return "sgemm_fp32";
  if (device_capability() == 90 && tma_rows_ok(args)) {
    return args.m <= kDecodeMaxM ? "gemm_decode" : "hgemm_wgmma";
  }
  return "hgemm_mma";
}

Status launch_gemm(DType dt, const MatmulArgs& args, cudaStream_t stream) {
  const std::string v = pick_gemm_variant(dt, args);
  if (v == "sgemm_fp32") return launch_sgemm(args, stream);
  if (v == "gemm_decode") return launch_gemm_decode(dt, args, 0, stream);
  if (v == "hgemm_wgmma") return launch_hgemm_wgmma(dt, args, WgmmaOptions{}, stream);
  return launch_hgemm_mma(dt, args, stream);
}

}  // namespace sk::gemm
