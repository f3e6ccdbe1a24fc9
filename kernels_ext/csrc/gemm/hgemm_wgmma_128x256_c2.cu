// hgemm_wgmma 128x256 tiles on 2-CTA clusters (W's tile multicast to the pair).
#include "hgemm_wgmma_configs.cuh"

namespace sk::gemm {
namespace {
template <class T> using S4 = HgemmTma<T, 256, 4, 2, 128, false>;
template <class T> using S3 = HgemmTma<T, 256, 3, 2, 256, false>;
}  // namespace

Status run_hgemm_128x256_s4_c2(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<S4>(dt, a, o, s);
}
Status run_hgemm_128x256_s3_c2(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<S3>(dt, a, o, s);
}

}  // namespace sk::gemm
