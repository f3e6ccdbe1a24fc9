// hgemm_wgmma 128x256 tiles, one CTA per cluster (M too small to pair tiles, or the sweep).
#include "hgemm_wgmma_configs.cuh"

namespace sk::gemm {
namespace {
template <class T> using S4 = HgemmTma<T, 256, 4, 1, 128, false>;
template <class T> using S3 = HgemmTma<T, 256, 3, 1, 256, false>;
}  // namespace

Status run_hgemm_128x256_s4_c1(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<S4>(dt, a, o, s);
}
Status run_hgemm_128x256_s3_c1(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<S3>(dt, a, o, s);
}

}  // namespace sk::gemm
