// Launchers of the attention family (plain C++: no PyTorch, no CUDA kernels in this header).
//
// Forward attention  o = softmax(scale * q k^T + mask) v  with fp32 softmax statistics and
// the per-row log-sum-exp lse = log(sum_j exp(scale * q.k_j)) over the visible keys.
//   q, o: [B, Hq, Sq, D]     k, v: [B, Hkv, Sk, D]     lse: [B, Hq, Sq] fp32 (may be null)
// given by element strides: D is contiguous and so are the rows of a head (row stride D);
// batch and head strides are free (multiples of 8 elements; flash_wgmma also needs batch
// stride = heads x head stride). The bindings pass contiguous tensors. Inputs and output in
// one 16-bit type (bf16 or fp16); D is 64 or 128; Hkv divides Hq and query head h reads
// key/value head h / (Hq / Hkv) (grouped-query attention).
// Causal masking is bottom-right aligned, as in FlashAttention: query i sees key j when
// j <= i + Sk - Sq. A query that sees no key (Sq > Sk, i < Sq - Sk) gets o = 0, lse = -inf.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "../common/dtype.h"

namespace sk {

struct AttentionStrides {
  int64_t batch = 0;  // elements between consecutive batch entries
  int64_t head = 0;   // ... heads
  int64_t row = 0;    // ... sequence positions (the innermost, D, has stride 1)
};

struct AttentionParams {
  DType dtype = DType::kBFloat16;  // of q, k, v, o: kBFloat16 or kFloat16
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // [B, Hq, Sq] contiguous, or null when not wanted
  AttentionStrides q_strides, k_strides, v_strides, o_strides;
  int64_t batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  float scale = 0.f;  // > 0; the bindings default it to 1 / sqrt(D)
  bool causal = false;
  // Decoding only: how many parts the key range is split into (0: one block per SM;
  // never more than the key tiles, nor than the combine step merges). For sweeps.
  int decode_splits = 0;
};

// Why a launcher refuses its arguments; the bindings turn these into Python errors.
enum class AttentionStatus : int {
  kOk = 0,
  kBadDType,        // not bf16/fp16
  kBadHeadDim,      // D not 64 or 128
  kBadHeads,        // Hkv < 1 or Hq % Hkv != 0
  kBadShape,        // a negative size, or a size the kernels' 32-bit indices cannot hold
  kBadScale,        // scale not finite and > 0
  kMisaligned,      // a pointer or a stride not 16-byte aligned (the 16-byte loads need it)
  kBadLayout,       // rows of a head not contiguous (row stride != D), or (flash_wgmma) batch
                    // stride != heads x head stride
  kBadQueryLength,  // decode: Sq outside 1..16
  kNeedsSm90,       // flash_wgmma on a device below sm_90, or a library built without sm_90a
  kWorkspaceTooSmall,
  kTensorMap,  // the driver refused a TMA tensor map
  kCudaError,  // see AttentionResult::cuda
};

struct AttentionResult {
  AttentionStatus status = AttentionStatus::kOk;
  cudaError_t cuda = cudaSuccess;
  bool ok() const { return status == AttentionStatus::kOk; }
};

// A short English description of a status (never null).
const char* attention_status_message(AttentionStatus status);

// Checks shared by every variant (dtype, head dim, heads, sizes, scale, alignment).
AttentionStatus check_attention_params(const AttentionParams& p);

// FlashAttention-2 style forward with mma.sync (sm_80+): Q in registers (or re-read from
// shared memory where registers do not allow it), K/V tiles streamed with cp.async.
AttentionResult launch_flash_mma(const AttentionParams& p, cudaStream_t stream);

// Hopper forward (sm_90a): TMA loads of K/V into an mbarrier ring, a producer warp and two
// consumer warpgroups, wgmma for both products.
AttentionResult launch_flash_wgmma(const AttentionParams& p, cudaStream_t stream);

// The same kernel as persistent blocks, one per SM, each looping over query tiles so that the
// next tile's loads overlap the current one's end (the arithmetic of a tile is
// launch_flash_wgmma's). Every tile runs whole here; launch_flash_wgmma_config (flash_wgmma.h)
// with a workspace also splits a partly filled last round over the idle SMs.
AttentionResult launch_flash_wgmma_persistent(const AttentionParams& p, cudaStream_t stream);

// Split-KV decoding (flash-decoding) for 1 <= Sq <= 16: the key range is split across
// blocks, each writes fp32 partial outputs and log-sum-exps into `workspace`, and a combine
// kernel merges them. attention_decode_workspace_bytes() sizes the workspace for p.
size_t attention_decode_workspace_bytes(const AttentionParams& p);
AttentionResult launch_attention_decode(const AttentionParams& p, void* workspace,
                                        size_t workspace_bytes, cudaStream_t stream);

// Dev-only entry points (the GPU bench script): one named tile configuration of flash_mma,
// and the number of configurations; config < 0 picks the default for the head dim.
int flash_mma_config_count(int head_dim);
const char* flash_mma_config_name(int head_dim, int config);
AttentionResult launch_flash_mma_config(const AttentionParams& p, int config, cudaStream_t stream);
// decode with its main loop on mma.sync even where the wgmma split kernel would run.
size_t attention_decode_mma_workspace_bytes(const AttentionParams& p);
AttentionResult launch_attention_decode_mma(const AttentionParams& p, void* workspace,
                                            size_t workspace_bytes, cudaStream_t stream);

}  // namespace sk
