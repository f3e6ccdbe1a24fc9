// A C ABI over the attention launchers (kernels_ext/csrc/attention), so the dev bench can load
// them with ctypes without compiling PyTorch's headers. Dev tooling only: the library's own
// entry points are the op-table bindings (csrc/bindings/attention.cpp).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "../../kernels_ext/csrc/attention/attention.h"

namespace {

// kDecode: the library's decode (wgmma split kernel on sm_90 for >= 64 rows per K/V head);
// kDecodeMma: decode with its main loop forced onto mma.sync; kWgmmaPersistent: flash_wgmma
// as one persistent block per SM.
enum Variant : int { kMma = 0, kWgmma = 1, kDecode = 2, kDecodeMma = 3, kWgmmaPersistent = 4 };

sk::AttentionParams make_params(int dtype, const void* q, const void* k, const void* v, void* o,
                                float* lse, int64_t b, int64_t hq, int64_t hkv, int64_t sq,
                                int64_t sk_len, int64_t d, float scale, int causal) {
  sk::AttentionParams p;
  p.dtype = dtype == 0 ? sk::DType::kBFloat16 : sk::DType::kFloat16;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = o;
  p.lse = lse;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = sq;
  p.seq_k = sk_len;
  p.head_dim = d;
  p.scale = scale;
  p.causal = causal != 0;
  // Contiguous [B, H, S, D].
  p.q_strides = {hq * sq * d, sq * d, d};
  p.o_strides = p.q_strides;
  p.k_strides = {hkv * sk_len * d, sk_len * d, d};
  p.v_strides = p.k_strides;
  return p;
}

}  // namespace

extern "C" {

// Returns the AttentionStatus; *cuda_error receives the CUDA error of a kCudaError status.
// config selects a flash_mma tile configuration (-1: the default; ignored by other variants).
int sk_attention_run(int variant, int config, int dtype, const void* q, const void* k,
                     const void* v, void* o, float* lse, int64_t b, int64_t hq, int64_t hkv,
                     int64_t sq, int64_t sk_len, int64_t d, float scale, int causal,
                     void* workspace, size_t workspace_bytes, void* stream, int* cuda_error) {
  const sk::AttentionParams p =
      make_params(dtype, q, k, v, o, lse, b, hq, hkv, sq, sk_len, d, scale, causal);
  const auto s = static_cast<cudaStream_t>(stream);
  sk::AttentionResult r;
  switch (variant) {
    case kMma:
      r = sk::launch_flash_mma_config(p, config, s);
      break;
    case kWgmma:
      r = sk::launch_flash_wgmma(p, s);
      break;
    case kWgmmaPersistent:
      r = sk::launch_flash_wgmma_persistent(p, s);
      break;
    case kDecode:
      r = sk::launch_attention_decode(p, workspace, workspace_bytes, s);
      break;
    default:
      r = sk::launch_attention_decode_mma(p, workspace, workspace_bytes, s);
      break;
  }
  *cuda_error = static_cast<int>(r.cuda);
  return static_cast<int>(r.status);
}

size_t sk_attention_decode_workspace(int variant, int dtype, int64_t b, int64_t hq, int64_t hkv,
                                     int64_t sq, int64_t sk_len, int64_t d, float scale,
                                     int causal) {
  // Alignment is checked at launch; sizing only needs the shape.
  alignas(16) static const char kAligned[16] = {};
  const sk::AttentionParams p =
      make_params(dtype, kAligned, kAligned, kAligned, const_cast<char*>(kAligned), nullptr, b, hq,
                  hkv, sq, sk_len, d, scale, causal);
  return variant == kDecode ? sk::attention_decode_workspace_bytes(p)
                            : sk::attention_decode_mma_workspace_bytes(p);
}

const char* sk_attention_status_message(int status) {
  return sk::attention_status_message(static_cast<sk::AttentionStatus>(status));
}

const char* sk_cuda_error_message(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

int sk_flash_mma_config_count(int head_dim) { return sk::flash_mma_config_count(head_dim); }

const char* sk_flash_mma_config_name(int head_dim, int config) {
  return sk::flash_mma_config_name(head_dim, config);
}

}  // extern "C"
