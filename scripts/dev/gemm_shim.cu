// extern "C" entry points over the GEMM launchers (kernels_ext/csrc/gemm/gemm.h), for the GPU
// driver scripts/dev/gemm_bench.py to call through ctypes without building the PyTorch
// extension. Contiguous row-major operands only (lda = ldw = K, ldc = ldr = N).
// Every function returns 0 on success, else writes the launcher's message into err.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "../../kernels_ext/csrc/gemm/gemm.h"

using sk::DType;
using sk::gemm::MatmulArgs;
using sk::gemm::Status;
using sk::gemm::WgmmaConfig;
using sk::gemm::WgmmaOptions;

namespace {

MatmulArgs make_args(const void* a, const void* w, void* c, const void* r, long m, long n, long k) {
  MatmulArgs g;
  g.a = a;
  g.w = w;
  g.c = c;
  g.residual = r;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = k;
  g.ldw = k;
  g.ldc = n;
  g.ldr = n;
  return g;
}

WgmmaOptions make_options(int config, int group_m, int max_ctas) {
  WgmmaOptions o;
  o.config = static_cast<WgmmaConfig>(config);
  o.group_m = group_m;
  o.max_ctas = max_ctas;
  return o;
}

int report(const Status& st, char* err, int errlen) {
  if (st.ok()) return 0;
  std::snprintf(err, static_cast<size_t>(errlen), "%s", st.message.c_str());
  return st.code == cudaSuccess ? 1 : static_cast<int>(st.code);
}

// 16-bit dtype codes as sk::DType: 1 bf16, 2 fp16.
DType dtype_of(int d) { return d == 2 ? DType::kFloat16 : DType::kBFloat16; }

}  // namespace

extern "C" {

const char* sk_wgmma_config_name(int config) {
  return sk::gemm::wgmma_config_name(static_cast<WgmmaConfig>(config));
}
int sk_num_wgmma_configs() { return sk::gemm::kNumWgmmaConfigs; }

// config: sk::gemm::SgemmConfig (0 auto, 1 bk16, 2 bk32, 3 bm64).
int sk_sgemm(const void* a, const void* w, void* c, long m, long n, long k, int config, void* stream,
             char* err, int errlen) {
  return report(sk::gemm::launch_sgemm(make_args(a, w, c, nullptr, m, n, k),
                                       static_cast<cudaStream_t>(stream),
                                       static_cast<sk::gemm::SgemmConfig>(config)),
                err, errlen);
}

// config: sk::gemm::MmaConfig (0 auto, 1 bk32, 2 bk64, 3 bk64_pipe).
int sk_hgemm_mma(int dtype, const void* a, const void* w, void* c, long m, long n, long k,
                 int config, void* stream, char* err, int errlen) {
  return report(sk::gemm::launch_hgemm_mma(dtype_of(dtype), make_args(a, w, c, nullptr, m, n, k),
                                           static_cast<cudaStream_t>(stream),
                                           static_cast<sk::gemm::MmaConfig>(config)),
                err, errlen);
}

int sk_hgemm_wgmma(int dtype, const void* a, const void* w, void* c, long m, long n, long k,
                   int config, int group_m, int max_ctas, void* stream, char* err, int errlen) {
  return report(sk::gemm::launch_hgemm_wgmma(dtype_of(dtype), make_args(a, w, c, nullptr, m, n, k),
                                             make_options(config, group_m, max_ctas),
                                             static_cast<cudaStream_t>(stream)),
                err, errlen);
}

int sk_gemm_fp8(const void* a, const void* w, void* c, const float* scale_a, const float* scale_b,
                long m, long n, long k, int config, int group_m, int max_ctas, void* stream,
                char* err, int errlen) {
  return report(sk::gemm::launch_gemm_fp8(make_args(a, w, c, nullptr, m, n, k), scale_a, scale_b,
                                          make_options(config, group_m, max_ctas),
                                          static_cast<cudaStream_t>(stream)),
                err, errlen);
}

int sk_linear_residual(int dtype, const void* a, const void* w, const void* r, void* c, long m,
                       long n, long k, int config, void* stream, char* err, int errlen) {
  return report(sk::gemm::launch_linear_residual(dtype_of(dtype), make_args(a, w, c, r, m, n, k),
                                                 make_options(config, 0, 0),
                                                 static_cast<cudaStream_t>(stream)),
                err, errlen);
}

int sk_linear_residual_mma(int dtype, const void* a, const void* w, const void* r, void* c, long m,
                           long n, long k, void* stream, char* err, int errlen) {
  return report(sk::gemm::launch_hgemm_mma_residual(dtype_of(dtype), make_args(a, w, c, r, m, n, k),
                                                    static_cast<cudaStream_t>(stream)),
                err, errlen);
}

int sk_gemm_decode(int dtype, const void* a, const void* w, void* c, long m, long n, long k,
                   int split, void* stream, char* err, int errlen) {
  return report(sk::gemm::launch_gemm_decode(dtype_of(dtype), make_args(a, w, c, nullptr, m, n, k),
                                             split, static_cast<cudaStream_t>(stream)),
                err, errlen);
}

int sk_gemm_decode_mma(int dtype, const void* a, const void* w, void* c, long m, long n, long k,
                       void* stream, char* err, int errlen) {
  return report(sk::gemm::launch_gemm_decode_mma(dtype_of(dtype),
                                                 make_args(a, w, c, nullptr, m, n, k),
                                                 static_cast<cudaStream_t>(stream)),
                err, errlen);
}

}  // extern "C"

extern "C" {

// dtype: 0 fp32, 1 bf16, 2 fp16 (sk::DType).
int sk_gemm(int dtype, const void* a, const void* w, void* c, long m, long n, long k, void* stream,
            char* variant, int variant_len, char* err, int errlen) {
  const DType dt = static_cast<DType>(dtype);
  const MatmulArgs g = make_args(a, w, c, nullptr, m, n, k);
  std::snprintf(variant, static_cast<size_t>(variant_len), "%s", sk::gemm::pick_gemm_variant(dt, g));
  return report(sk::gemm::launch_gemm(dt, g, static_cast<cudaStream_t>(stream)), err, errlen);
}

}  // extern "C"
