// Torch-facing implementations of the GEMM family (registered through the op table,
// csrc/gemm/ops.yaml): the generated wrapper has already checked dtypes, shapes, contiguity,
// the device and the entry's requirements and set the device guard; these allocate the
// output, handle empty shapes, call the launcher on the current stream and turn its Status
// into a Python exception that names the op.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <optional>
#include <string>

#include "../gemm/gemm.h"
#include "message.h"

namespace sk::impl {
namespace {

using gemm::MatmulArgs;
using gemm::Status;

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

DType half_dtype(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat) return DType::kFloat32;
  return t.scalar_type() == at::kHalf ? DType::kFloat16 : DType::kBFloat16;
}

// Refusals (a requirement the launcher checks: alignment, device generation) become
// ValueError / NotImplementedError; CUDA failures RuntimeError.
void raise_if_failed(const Status& st, const char* op) {
  if (st.ok()) return;
  if (st.code == cudaErrorInvalidValue) {
    SK_CHECK_VALUE(false, "solbench_kernels::", op, ": ", st.message);
  }
  if (st.code == cudaErrorNotSupported) {
    SK_CHECK_NOT_IMPLEMENTED(false, "solbench_kernels::", op, ": ", st.message);
  }
  SK_CHECK(false, "solbench_kernels::", op, ": ", st.message);
}

MatmulArgs matmul_args(const at::Tensor& a, const at::Tensor& w, at::Tensor& c,
                       const at::Tensor* residual) {
  MatmulArgs g;
  g.a = a.data_ptr();
  g.w = w.data_ptr();
  g.c = c.data_ptr();
  g.m = a.size(0);
  g.n = w.size(0);
  g.k = a.size(1);
  g.lda = a.size(1);
  g.ldw = w.size(1);
  g.ldc = c.size(1);
  if (residual != nullptr) {
    g.residual = residual->data_ptr();
    g.ldr = residual->size(1);
  }
  return g;
}

at::Tensor empty_out(const at::Tensor& a, const at::Tensor& w, at::ScalarType dtype) {
  return at::empty({a.size(0), w.size(0)}, a.options().dtype(dtype));
}

// The shared shape logic: nothing to launch for an empty output; K = 0 is a sum of nothing.
template <class Launch>
at::Tensor run(const char* op, const at::Tensor& a, const at::Tensor& w, at::ScalarType out_dtype,
               Launch&& launch) {
  at::Tensor c = empty_out(a, w, out_dtype);
  if (c.numel() == 0) return c;
  if (a.size(1) == 0) return c.zero_();
  raise_if_failed(launch(matmul_args(a, w, c, nullptr)), op);
  return c;
}

// A config name -> the launcher's enum. The table restricts the choices; a name it allows
// but the launchers lack is a bug here.
template <class Config>
Config parse_config(const char* op, c10::string_view name, int count,
                    const char* (*name_of)(Config)) {
  for (int i = 0; i < count; ++i) {
    const auto c = static_cast<Config>(i);
    if (name == name_of(c)) return c;
  }
  SK_CHECK(false, "solbench_kernels::", op, ": unknown configuration ", std::string(name));
  return static_cast<Config>(0);
}

}  // namespace

at::Tensor gemm(const at::Tensor& a, const at::Tensor& w) {
  return run("gemm", a, w, a.scalar_type(), [&](const MatmulArgs& g) {
    return gemm::launch_gemm(half_dtype(a), g, stream());
  });
}

at::Tensor sgemm(const at::Tensor& a, const at::Tensor& w, c10::string_view config) {
  const auto c = parse_config("sgemm", config, gemm::kNumSgemmConfigs, gemm::sgemm_config_name);
  return run("sgemm", a, w, a.scalar_type(),
             [&](const MatmulArgs& g) { return gemm::launch_sgemm(g, stream(), c); });
}

at::Tensor sgemm_decode(const at::Tensor& a, const at::Tensor& w, c10::string_view config,
                        c10::string_view grid, int64_t prefetch) {
  const auto c = parse_config("sgemm_decode", config, gemm::kNumSdecodeConfigs, gemm::sdecode_config_name);
  const gemm::DecodeOptions opt{parse_config("sgemm_decode", grid, gemm::kNumDecodeGrids, gemm::decode_grid_name),
                                static_cast<int>(prefetch)};
  return run("sgemm_decode", a, w, a.scalar_type(),
             [&](const MatmulArgs& g) { return gemm::launch_sgemm_decode(g, stream(), c, opt); });
}

at::Tensor gemm_mma(const at::Tensor& a, const at::Tensor& w, c10::string_view config) {
  const auto c = parse_config("gemm_mma", config, gemm::kNumMmaConfigs, gemm::mma_config_name);
  return run("gemm_mma", a, w, a.scalar_type(), [&](const MatmulArgs& g) {
    return gemm::launch_hgemm_mma(half_dtype(a), g, stream(), c);
  });
}

at::Tensor gemm_wgmma(const at::Tensor& a, const at::Tensor& w, c10::string_view config) {
  gemm::WgmmaOptions opt;
  opt.config = parse_config("gemm_wgmma", config, gemm::kNumWgmmaConfigs, gemm::wgmma_config_name);
  return run("gemm_wgmma", a, w, a.scalar_type(), [&](const MatmulArgs& g) {
    return gemm::launch_hgemm_wgmma(half_dtype(a), g, opt, stream());
  });
}

at::Tensor gemm_fp8(const at::Tensor& a, const at::Tensor& w, const std::optional<at::Tensor>& scale_a,
                    const std::optional<at::Tensor>& scale_b, c10::string_view config) {
  gemm::WgmmaOptions opt;
  opt.config = parse_config("gemm_fp8", config, gemm::kNumWgmmaConfigs, gemm::wgmma_config_name);
  // A missing scale is 1 (the kernel reads none).
  const float* sa = scale_a ? scale_a->data_ptr<float>() : nullptr;
  const float* sb = scale_b ? scale_b->data_ptr<float>() : nullptr;
  return run("gemm_fp8", a, w, at::kBFloat16, [&](const MatmulArgs& g) {
    return gemm::launch_gemm_fp8(g, sa, sb, opt, stream());
  });
}

at::Tensor gemm_decode(const at::Tensor& a, const at::Tensor& w, int64_t split_k) {
  return run("gemm_decode", a, w, a.scalar_type(), [&](const MatmulArgs& g) {
    return gemm::launch_gemm_decode(half_dtype(a), g, static_cast<int>(split_k), stream());
  });
}

at::Tensor gemm_decode_mma(const at::Tensor& a, const at::Tensor& w, c10::string_view grid,
                           int64_t prefetch) {
  const gemm::DecodeOptions opt{
      parse_config("gemm_decode_mma", grid, gemm::kNumDecodeGrids, gemm::decode_grid_name),
      static_cast<int>(prefetch)};
  return run("gemm_decode_mma", a, w, a.scalar_type(), [&](const MatmulArgs& g) {
    return gemm::launch_gemm_decode_mma(half_dtype(a), g, stream(), opt);
  });
}

at::Tensor linear_residual(const at::Tensor& x, const at::Tensor& w, const at::Tensor& residual,
                           c10::string_view config) {
  gemm::WgmmaOptions opt;
  opt.config = parse_config("linear_residual", config, gemm::kNumWgmmaConfigs, gemm::wgmma_config_name);
  at::Tensor out = at::empty_like(residual, at::MemoryFormat::Contiguous);
  if (out.numel() == 0) return out;
  if (x.size(1) == 0) return out.copy_(residual);
  raise_if_failed(gemm::launch_linear_residual(half_dtype(x), matmul_args(x, w, out, &residual), opt, stream()),
                  "linear_residual");
  return out;
}

}  // namespace sk::impl
