// Hand-written implementations of the attention ops (op table: csrc/attention/ops.yaml).
// The generated wrappers have checked the inputs (dtype bf16/fp16, shapes [B, H, SQ, D] and
// [B, HKV, SK, D], D in {64, 128}, HKV | H, contiguity, one CUDA device) and set the device;
// these choose the variant, allocate the outputs and turn launcher statuses into errors.
#include "../attention/attention.h"
#include "../attention/flash_wgmma.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "binding_utils.h"

namespace sk::impl {
namespace {

enum class Variant { kAuto, kMma, kWgmma, kWgmmaPersistent, kDecode };

constexpr int64_t kMaxDecodeQuery = 16;

bool device_is_sm90(const at::Tensor& t) {
  int major = 0, minor = 0;
  const int dev = t.get_device();
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

// decode for short queries; on Hopper the persistent wgmma launch; the mma.sync kernel elsewhere.
// Why persistent: in an H200 run of `solbench run --ops attention` on 2026-12-01 it led the grid
// launch by 1-5% at every prefill case (head dim 64 and 128, causal or not). That run's results
// file was lost before it was committed (docs/PERF.md), so the choice awaits a committed re-run.
Variant choose(const at::Tensor& q) {
  if (q.size(2) >= 1 && q.size(2) <= kMaxDecodeQuery) return Variant::kDecode;
  return device_is_sm90(q) ? Variant::kWgmmaPersistent : Variant::kMma;
}

AttentionStrides strides_of(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

float softmax_scale(std::optional<double> scale, int64_t head_dim, const char* op) {
  const double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  SK_CHECK_VALUE(std::isfinite(s) && s > 0.0, "solbench_kernels::", op,
                    ": scale must be a finite number > 0, got ", s);
  return static_cast<float>(s);
}

void raise_on_error(const AttentionResult& r, const char* op) {
  if (r.ok()) return;
  if (r.status == AttentionStatus::kCudaError) sk::bind::check_launch(r.cuda, op);
  if (r.status == AttentionStatus::kNeedsSm90) {
    SK_CHECK(false, "solbench_kernels::", op, ": ", attention_status_message(r.status));
  }
  SK_CHECK_VALUE(false, "solbench_kernels::", op, ": ", attention_status_message(r.status));
}

std::tuple<at::Tensor, at::Tensor> run(const char* op, Variant variant, const at::Tensor& q,
                                       const at::Tensor& k, const at::Tensor& v, bool causal,
                                       std::optional<double> scale, bool want_lse,
                                       int decode_splits = 0,
                                       FlashWgmmaConfig wgmma_config = FlashWgmmaConfig::kAuto,
                                       bool split_tail = true) {
  AttentionParams p;
  p.decode_splits = decode_splits;
  p.dtype = q.scalar_type() == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  p.batch = q.size(0);
  p.heads_q = q.size(1);
  p.seq_q = q.size(2);
  p.head_dim = q.size(3);
  p.heads_kv = k.size(1);
  p.seq_k = k.size(2);
  p.scale = softmax_scale(scale, p.head_dim, op);
  p.causal = causal;
  at::Tensor o = at::empty(q.sizes(), q.options());
  at::Tensor lse;
  if (want_lse) lse = at::empty({p.batch, p.heads_q, p.seq_q}, q.options().dtype(at::kFloat));
  if (o.numel() == 0) return {o, lse};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = o.data_ptr();
  p.lse = want_lse ? lse.data_ptr<float>() : nullptr;
  p.q_strides = strides_of(q);
  p.k_strides = strides_of(k);
  p.v_strides = strides_of(v);
  p.o_strides = strides_of(o);

  if (variant == Variant::kAuto) variant = choose(q);
  const cudaStream_t stream = sk::bind::current_stream();
  AttentionResult r;
  switch (variant) {
    case Variant::kWgmma:
      r = launch_flash_wgmma_config(p, wgmma_config, false, stream);
      break;
    case Variant::kWgmmaPersistent: {
      // The split tail's partials (a few MiB at most); none where the launch runs every item whole.
      const size_t bytes = split_tail ? flash_wgmma_persistent_workspace_bytes(p, wgmma_config) : 0;
      at::Tensor workspace;
      if (bytes > 0) workspace = at::empty({static_cast<int64_t>(bytes)}, q.options().dtype(at::kByte));
      r = launch_flash_wgmma_config(p, wgmma_config, true, stream,
                                    bytes > 0 ? workspace.data_ptr() : nullptr, bytes);
      break;
    }
    case Variant::kDecode: {
      SK_CHECK_VALUE(p.seq_q >= 1 && p.seq_q <= kMaxDecodeQuery, "solbench_kernels::", op,
                        ": decode needs a query length SQ of 1 to 16, got ", p.seq_q);
      const size_t bytes = attention_decode_workspace_bytes(p);
      at::Tensor workspace =
          at::empty({static_cast<int64_t>(bytes > 0 ? bytes : 16)}, q.options().dtype(at::kByte));
      r = launch_attention_decode(p, workspace.data_ptr(), bytes, stream);
      break;
    }
    default:
      r = launch_flash_mma(p, stream);
      break;
  }
  raise_on_error(r, op);
  return {o, lse};
}

Variant variant_of(c10::string_view name) {
  if (name == "mma") return Variant::kMma;
  if (name == "wgmma") return Variant::kWgmma;
  if (name == "wgmma_persistent") return Variant::kWgmmaPersistent;
  if (name == "decode") return Variant::kDecode;
  SK_CHECK_VALUE(name == "auto",
                    "solbench_kernels::attention_lse: variant must be one of "
                    "'auto', 'mma', 'wgmma', 'wgmma_persistent', 'decode'; got '",
                    std::string(name), "'");
  return Variant::kAuto;
}

// flash_wgmma's `config` -> the launcher's enum, refused (naming it, D and the configurations D
// has) where it does not exist for q's head dim. The table restricts the names; one it allows but
// the launcher lacks is a bug here.
FlashWgmmaConfig wgmma_config_of(const char* op, c10::string_view name, const at::Tensor& q) {
  const int64_t head_dim = q.size(3);
  for (int i = 0; i < kNumFlashWgmmaConfigs; ++i) {
    const auto c = static_cast<FlashWgmmaConfig>(i);
    if (name != flash_wgmma_config_name(c)) continue;
    if (!flash_wgmma_config_applies(c, head_dim)) {
      std::string fits;
      for (int j = 0; j < kNumFlashWgmmaConfigs; ++j) {
        const auto other = static_cast<FlashWgmmaConfig>(j);
        if (!flash_wgmma_config_applies(other, head_dim)) continue;
        if (!fits.empty()) fits += ", ";
        fits += flash_wgmma_config_name(other);
      }
      SK_CHECK_VALUE(false, "solbench_kernels::", op, ": config '", std::string(name),
                     "' does not apply to head dim D = ", head_dim, " (D = ", head_dim, " takes ",
                     fits, ")");
    }
    return c;
  }
  SK_CHECK(false, "solbench_kernels::", op, ": unknown configuration ", std::string(name));
  return FlashWgmmaConfig::kAuto;
}

}  // namespace

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     std::optional<double> scale) {
  return std::get<0>(run("attention", Variant::kAuto, q, k, v, causal, scale, false));
}

std::tuple<at::Tensor, at::Tensor> attention_lse(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, bool causal,
                                                 std::optional<double> scale,
                                                 c10::string_view variant) {
  return run("attention_lse", variant_of(variant), q, k, v, causal, scale, true);
}

at::Tensor flash_attention_mma(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal, std::optional<double> scale) {
  return std::get<0>(run("flash_attention_mma", Variant::kMma, q, k, v, causal, scale, false));
}

at::Tensor flash_attention_wgmma(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 bool causal, std::optional<double> scale,
                                 c10::string_view config) {
  const char* op = "flash_attention_wgmma";
  return std::get<0>(run(op, Variant::kWgmma, q, k, v, causal, scale, false, 0,
                         wgmma_config_of(op, config, q)));
}

at::Tensor flash_attention_wgmma_persistent(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, bool causal,
                                            std::optional<double> scale,
                                            c10::string_view config, c10::string_view tail) {
  const char* op = "flash_attention_wgmma_persistent";
  return std::get<0>(run(op, Variant::kWgmmaPersistent, q, k, v, causal, scale, false, 0,
                         wgmma_config_of(op, config, q), tail != "whole"));
}

at::Tensor attention_decode(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool causal, std::optional<double> scale, int64_t splits) {
  return std::get<0>(run("attention_decode", Variant::kDecode, q, k, v, causal, scale, false,
                         static_cast<int>(splits)));
}

}  // namespace sk::impl
