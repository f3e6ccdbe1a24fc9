// Shared by the binding files only (these include PyTorch; kernel .cu files never do):
// what the generated op wrappers (kernels_ext/codegen.py) and the hand-written custom
// impls need around a launch. The input checks themselves are generated from the op table.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "../common/dtype.h"
#include "message.h"

namespace sk::bind {

// torch's Python name of a dtype ("float32", not c10's "Float"), so the messages of the
// compiled checks read like the Python wrapper's.
inline const char* dtype_name(c10::ScalarType t) {
  switch (t) {
    case at::kDouble: return "float64";
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kFloat8_e4m3fn: return "float8_e4m3fn";
    case at::kFloat8_e5m2: return "float8_e5m2";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

inline const char* dtype_name(const at::Tensor& t) { return dtype_name(t.scalar_type()); }

// The kernels' dtype of a tensor (op: the op's name without the namespace; name: the
// argument's). The op table admits only these three for map and rows ops.
inline DType dtype_of(const at::Tensor& t, const char* op, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kHalf: return DType::kFloat16;
    default:
      SK_CHECK_TYPE(false, "solbench_kernels::", op, ": ", name, " has dtype ", dtype_name(t),
                       "; supported: float32, bfloat16, float16");
  }
  return DType::kFloat32;  // unreachable
}

// Index of value among a str argument's choices (table order), or -1.
inline int choice_index(c10::string_view value, std::initializer_list<const char*> choices) {
  int i = 0;
  for (const char* c : choices) {
    if (value == c) return i;
    ++i;
  }
  return -1;
}

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// A launcher's error as an exception naming the op (its name without the namespace).
inline void check_launch(cudaError_t err, const char* op) {
  if (err == cudaSuccess) return;
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    SK_CHECK(false, "solbench_kernels::", op, ": ", cudaGetErrorString(err),
                " (no kernel image is available for execution on the device): this library was "
                "compiled for other GPU architectures than this device's sm_",
                major, minor, ". Set TORCH_CUDA_ARCH_LIST (e.g. '", major, ".", minor,
                major == 9 && minor == 0 ? "a" : "",
                "') and rebuild (kernels_ext.build() or python -m kernels_ext.build).");
  }
  SK_CHECK(false, "solbench_kernels::", op, ": CUDA error: ", cudaGetErrorString(err));
}

}  // namespace sk::bind
