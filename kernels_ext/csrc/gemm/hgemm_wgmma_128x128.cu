// hgemm_wgmma 128x128 tiles (mid-sized problems: twice the tiles of 128x256, so more SMs busy).
#include "hgemm_wgmma_configs.cuh"

namespace sk::gemm {
namespace {
template <class T> using C2 = HgemmTma<T, 128, 6, 2, 128, false>;
template <class T> using C1 = HgemmTma<T, 128, 6, 1, 128, false>;
}  // namespace

Status run_hgemm_128x128_s6_c2(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<C2>(dt, a, o, s);
}
Status run_hgemm_128x128_s6_c1(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<C1>(dt, a, o, s);
}

}  // namespace sk::gemm
