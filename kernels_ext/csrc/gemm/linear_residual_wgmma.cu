// linear_residual on Hopper: out = x @ W^T + residual in one wgmma kernel. The residual tile is
// TMA-loaded into the epilogue's staging buffer while the mainloop runs (issued after the
// tile's first k-block) and added in fp32 before the one rounding to bf16/fp16; nothing
// intermediate reaches global memory. Single-pass staging, so 3 stages at BN = 256.
#include "hgemm_wgmma_configs.cuh"

namespace sk::gemm {
namespace {
template <class T> using R256c2 = HgemmTma<T, 256, 3, 2, 256, true>;
template <class T> using R256c1 = HgemmTma<T, 256, 3, 1, 256, true>;
template <class T> using R128c1 = HgemmTma<T, 128, 6, 1, 128, true>;
template <class T> using RDirect = HgemmDirect<T, true>;
}  // namespace

Status run_residual_128x256_s3_c2(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<R256c2>(dt, a, o, s);
}
Status run_residual_128x256_s3_c1(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<R256c1>(dt, a, o, s);
}
Status run_residual_128x128_s6_c1(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<R128c1>(dt, a, o, s);
}
Status run_residual_direct(DType dt, const MatmulArgs& a, const WgmmaOptions& o, cudaStream_t s) {
  return run_hgemm_dtype<RDirect>(dt, a, o, s);
}

}  // namespace sk::gemm
