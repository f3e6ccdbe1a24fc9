// Shared by the binding files only (these include PyTorch; kernel .cu files never do).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <string>

#include "../common/dtype.h"

namespace sk::bind {

inline DType dtype_of(const at::Tensor& t, const char* op, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kHalf: return DType::kFloat16;
    default:
      TORCH_CHECK_TYPE(false, "solbench_kernels::", op, ": ", name, " has dtype ",
                       t.scalar_type(), "; supported: float32, bfloat16, float16");
  }
  return DType::kFloat32;  // unreachable
}

inline void check_cuda_contiguous(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.is_cuda(), "solbench_kernels::", op, ": ", name, " is on ", t.device(),
                    "; a CUDA tensor is required");
  TORCH_CHECK_VALUE(t.is_contiguous(), "solbench_kernels::", op, ": ", name,
                    " must be contiguous (call .contiguous() first)");
}

// Checks `other` against the first input `ref`: CUDA, contiguous, same dtype and device,
// and (when same_shape) the same shape.
inline void check_like(const at::Tensor& ref, const at::Tensor& other, const char* op,
                       const char* name, bool same_shape) {
  check_cuda_contiguous(other, op, name);
  TORCH_CHECK_TYPE(other.scalar_type() == ref.scalar_type(), "solbench_kernels::", op, ": ", name,
                   " has dtype ", other.scalar_type(), " but the first input has ",
                   ref.scalar_type());
  TORCH_CHECK_VALUE(other.device() == ref.device(), "solbench_kernels::", op, ": ", name,
                    " is on ", other.device(), " but the first input is on ", ref.device());
  if (same_shape) {
    TORCH_CHECK_VALUE(other.sizes() == ref.sizes(), "solbench_kernels::", op, ": ", name,
                      " has shape ", other.sizes(), " but the first input has shape ",
                      ref.sizes());
  }
}

// A row op's per-feature parameter (weight, bias): 1-D of the row length.
inline void check_row_param(const at::Tensor& x, const at::Tensor& p, const char* op,
                            const char* name) {
  check_like(x, p, op, name, false);
  TORCH_CHECK_VALUE(p.dim() == 1 && p.size(0) == x.size(-1), "solbench_kernels::", op, ": ", name,
                    " must have shape [", x.size(-1), "] (the last dim of x), got ", p.sizes());
}

inline void check_row_input(const at::Tensor& x, const char* op) {
  check_cuda_contiguous(x, op, "x");
  TORCH_CHECK_VALUE(x.dim() >= 1, "solbench_kernels::", op,
                    ": x must have at least one dimension (the row)");
}

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

inline void check_launch(cudaError_t err, const char* op) {
  if (err == cudaSuccess) return;
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    TORCH_CHECK(false, "solbench_kernels::", op, ": ", cudaGetErrorString(err),
                " (no kernel image is available for execution on the device): this library was "
                "compiled for other GPU architectures than this device's sm_",
                major, minor, ". Set TORCH_CUDA_ARCH_LIST (e.g. '", major, ".", minor,
                major == 9 && minor == 0 ? "a" : "",
                "') and rebuild (kernels_ext.build() or python -m kernels_ext.build).");
  }
  TORCH_CHECK(false, "solbench_kernels::", op, ": CUDA error: ", cudaGetErrorString(err));
}

}  // namespace sk::bind
