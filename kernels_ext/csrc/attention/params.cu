// Argument checks shared by every attention launcher, and the status messages.
#include <cmath>
#include <cstdint>

#include "attention.h"

namespace sk {
namespace {

constexpr int64_t kMaxGridDim = 65535;         // heads and batch are grid y / z
constexpr int64_t kMaxSeq = int64_t{1} << 30;  // row and key indices are 32-bit in kernels

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

bool strides_aligned(const AttentionStrides& s) {
  // 16-byte loads of 16-bit elements: every row must start on a multiple of 8 elements.
  return s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0;
}

}  // namespace

const char* attention_status_message(AttentionStatus status) {
  switch (status) {
    case AttentionStatus::kOk:
      return "ok";
    case AttentionStatus::kBadDType:
      return "q, k, v must be bfloat16 or float16";
    case AttentionStatus::kBadHeadDim:
      return "head dim must be 64 or 128";
    case AttentionStatus::kBadHeads:
      return "the number of key/value heads must be at least 1 and divide the number of query "
             "heads";
    case AttentionStatus::kBadShape:
      return "a size is negative or too large (batch and heads at most 65535, sequence lengths "
             "at most 2^30)";
    case AttentionStatus::kBadScale:
      return "scale must be a finite number > 0";
    case AttentionStatus::kMisaligned:
      return "q, k, v and o must start on 16-byte boundaries with every row stride a multiple "
             "of 8 elements";
    case AttentionStatus::kBadLayout:
      return "each head's rows must be contiguous (row stride = head dim), and for flash_wgmma the "
             "batch stride must equal heads x head stride (a contiguous [B, H, S, D] tensor)";
    case AttentionStatus::kTensorMap:
      return "the CUDA driver refused a TMA tensor map";
    case AttentionStatus::kBadQueryLength:
      return "decode needs a query length between 1 and 16";
    case AttentionStatus::kNeedsSm90:
      return "flash_wgmma needs an sm_90 GPU (H100/H200) and a library built for sm_90a";
    case AttentionStatus::kWorkspaceTooSmall:
      return "the decode workspace is too small";
    case AttentionStatus::kCudaError:
      return "CUDA error";
  }
  return "unknown attention status";
}

AttentionStatus check_attention_params(const AttentionParams& p) {
  if (p.dtype != DType::kBFloat16 && p.dtype != DType::kFloat16) return AttentionStatus::kBadDType;
  if (p.head_dim != 64 && p.head_dim != 128) return AttentionStatus::kBadHeadDim;
  if (p.heads_kv < 1 || p.heads_q % p.heads_kv != 0) return AttentionStatus::kBadHeads;
  if (p.batch < 0 || p.heads_q < 0 || p.seq_q < 0 || p.seq_k < 0 || p.batch > kMaxGridDim ||
      p.heads_q > kMaxGridDim || p.seq_q > kMaxSeq || p.seq_k > kMaxSeq) {
    return AttentionStatus::kBadShape;
  }
  if (!(std::isfinite(p.scale) && p.scale > 0.f)) return AttentionStatus::kBadScale;
  if (p.q_strides.row != p.head_dim || p.k_strides.row != p.head_dim ||
      p.v_strides.row != p.head_dim || p.o_strides.row != p.head_dim) {
    return AttentionStatus::kBadLayout;
  }
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.o) ||
      !strides_aligned(p.q_strides) || !strides_aligned(p.k_strides) ||
      !strides_aligned(p.v_strides) || !strides_aligned(p.o_strides)) {
    return AttentionStatus::kMisaligned;
  }
  return AttentionStatus::kOk;
}

}  // namespace sk
