// The GEMM family's front door: which variant runs for a dtype, a shape and the device.
//   fp32                           -> sgemm_decode when M <= kDecodeMmaMaxM and its rows are
//                                     16-byte pieces (sgemm_decode_supports), else sgemm_fp32
//                                     (CUDA cores both; TF32 is never used)
//   bf16/fp16 on compute 9.0       -> gemm_decode_mma when M <= kDecodeMmaMaxM, gemm_decode when
//                                     M <= kDecodeMaxM, else hgemm_wgmma (all need K % 8 == 0;
//                                     otherwise hgemm_mma)
//   bf16/fp16 elsewhere (sm_80+)   -> gemm_decode_mma when M <= kDecodeMmaMaxM and K % 8 == 0,
//                                     else hgemm_mma
// fp8 has its own entry (launch_gemm_fp8): it needs scales.
// Why these: on the H200 (specs/ops/gemm_decode.yaml, results/h200/issue13/readonly.json, 2026-12-01)
// gemm_decode_mma beat gemm_decode in all five M <= 16 cases, by 1.03-1.04x on the large ones and
// 1.40x at N = K = 1024 (both still 0.90-0.95x cuBLAS there). Off Hopper the choice at
// M <= 16 is by construction: hgemm_mma's 128 x 256 tiles would put N / 256 CTAs (32 at
// N = 8192) on the stream of W, gemm_decode_mma puts N / 64 CTAs of 512 threads on it.
// fp32 at M <= 16: sgemm_decode ran 1.22-2.5x cuBLAS fp32 in all five gemm_decode cases on the H100,
// where the tiled sgemm ran 0.08-0.33x (results/h100/issue13/2026-12-06c/sdecode/).
#include "gemm.h"

namespace sk::gemm {

namespace {
bool rows_16b_aligned(const MatmulArgs& a) {
  return (a.lda * 2) % 16 == 0 && (a.ldw * 2) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.a) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
}
}  // namespace

const char* pick_gemm_variant(DType dt, const MatmulArgs& args) {
  if (dt == DType::kFloat32) return sgemm_decode_supports(args) ? "sgemm_decode" : "sgemm_fp32";
  const bool aligned = rows_16b_aligned(args);
  if (aligned && args.m <= kDecodeMmaMaxM) return "gemm_decode_mma";
  if (device_capability() == 90 && aligned) {
    return args.m <= kDecodeMaxM ? "gemm_decode" : "hgemm_wgmma";
  }
  return "hgemm_mma";
}

Status launch_gemm(DType dt, const MatmulArgs& args, cudaStream_t stream) {
  const std::string v = pick_gemm_variant(dt, args);
  if (v == "sgemm_fp32") return launch_sgemm(args, stream);
  if (v == "sgemm_decode") return launch_sgemm_decode(args, stream);
  if (v == "gemm_decode") return launch_gemm_decode(dt, args, 0, stream);
  if (v == "gemm_decode_mma") return launch_gemm_decode_mma(dt, args, stream);
  if (v == "hgemm_wgmma") return launch_hgemm_wgmma(dt, args, WgmmaOptions{}, stream);
  return launch_hgemm_mma(dt, args, stream);
}

}  // namespace sk::gemm
