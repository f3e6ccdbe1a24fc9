// The named tile configurations of hgemm_wgmma and linear_residual (WgmmaConfig in gemm.h).
// Each run_* function is defined in one of the hgemm_wgmma_*.cu / linear_residual*.cu files, so
// the kernel instantiations compile in parallel.
#pragma once

#include "gemm.h"
#include "wgmma_gemm.cuh"

namespace sk::gemm {

// <TIn, TOut, BM, BN, WGN, stages, cluster, epilogue columns per pass, epilogue, residual, promote>
template <class T, int BN, int STAGES, int CLUSTER, int EPI, bool RES>
using HgemmTma = WgmmaGemmConfig<T, T, 128, BN, BN, STAGES, CLUSTER, EPI, Epilogue::kTmaStore,
                                 RES, false>;
template <class T, bool RES>
using HgemmDirect = WgmmaGemmConfig<T, T, 128, 128, 128, 6, 1, 64, Epilogue::kDirect, RES, false>;

// Runs config Cfg<T> with T = bf16 or fp16 as `dt` says.
template <template <class> class Cfg>
Status run_hgemm_dtype(DType dt, const MatmulArgs& args, const WgmmaOptions& opt,
                       cudaStream_t stream) {
  if (dt == DType::kBFloat16) {
    return run_wgmma_gemm<Cfg<__nv_bfloat16>>(args, nullptr, nullptr, opt, stream);
  }
  if (dt == DType::kFloat16) return run_wgmma_gemm<Cfg<__half>>(args, nullptr, nullptr, opt, stream);
  return fail("the wgmma GEMM takes bfloat16 or float16 inputs");
}

using RunFn = Status (*)(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);

Status run_hgemm_128x256_s4_c2(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_hgemm_128x256_s3_c2(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_hgemm_128x256_s4_c1(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_hgemm_128x256_s3_c1(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_hgemm_128x128_s6_c2(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_hgemm_128x128_s6_c1(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_hgemm_direct(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);

Status run_residual_128x256_s3_c2(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_residual_128x256_s3_c1(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_residual_128x128_s6_c1(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);
Status run_residual_direct(DType, const MatmulArgs&, const WgmmaOptions&, cudaStream_t);

}  // namespace sk::gemm
