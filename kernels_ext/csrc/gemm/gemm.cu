// The GEMM family's front door: which variant runs for a dtype, a shape and the device.
//   fp32                           -> sgemm_fp32 (CUDA cores; TF32 is never used)
//   bf16/fp16 on compute 9.0       -> gemm_decode when M <= kDecodeMaxM, else hgemm_wgmma
//                                     (both need K % 8 == 0 for TMA; otherwise hgemm_mma)
//   bf16/fp16 elsewhere (sm_80+)   -> gemm_decode_mma when M <= kDecodeMmaMaxM and K % 8 == 0,
//                                     else hgemm_mma
// fp8 has its own entry (launch_gemm_fp8): it needs scales.
// Why these (results/h200/dev/gemm_v1.txt): on the H200 gemm_decode (split 2) measured 45 us at
// M = 16, N = K = 8192, level with cuBLAS; gemm_decode_mma has not been timed yet, so Hopper
// keeps the measured kernel (specs/ops/gemm_decode.yaml times both). Off Hopper the choice at
// M <= 16 is by construction: hgemm_mma's 128 x 256 tiles would put N / 256 CTAs (32 at
// N = 8192) on the stream of W, gemm_decode_mma puts N / 64 CTAs of 512 threads on it.
#include "gemm.h"

namespace sk::gemm {

namespace {
bool rows_16b_aligned(const MatmulArgs& a) {
  return (a.lda * 2) % 16 == 0 && (a.ldw * 2) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.a) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
}
}  // namespace

const char* pick_gemm_variant(DType dt, const MatmulArgs& args) {
  if (dt == DType::kFloat32) return "sgemm_fp32";
  const bool aligned = rows_16b_aligned(args);
  if (device_capability() == 90 && aligned) {
    return args.m <= kDecodeMaxM ? "gemm_decode" : "hgemm_wgmma";
  }
  if (aligned && args.m <= kDecodeMmaMaxM) return "gemm_decode_mma";
  return "hgemm_mma";
}

Status launch_gemm(DType dt, const MatmulArgs& args, cudaStream_t stream) {
  const std::string v = pick_gemm_variant(dt, args);
  if (v == "sgemm_fp32") return launch_sgemm(args, stream);
  if (v == "gemm_decode") return launch_gemm_decode(dt, args, 0, stream);
  if (v == "gemm_decode_mma") return launch_gemm_decode_mma(dt, args, stream);
  if (v == "hgemm_wgmma") return launch_hgemm_wgmma(dt, args, WgmmaOptions{}, stream);
  return launch_hgemm_mma(dt, args, stream);
}

}  // namespace sk::gemm
