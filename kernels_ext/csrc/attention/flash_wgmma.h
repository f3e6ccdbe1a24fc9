// flash_wgmma's named tile configurations (plain C++: no PyTorch, no CUDA kernels in this header).
// Used by flash_wgmma.cu, which defines them, and by the bindings' config argument
// (csrc/bindings/attention.cpp; the op table's choices in ops.yaml are these names, in this order).
//
// A name is BM x BN _ stages: BM query rows per block (64 per consumer warpgroup: 128 = two
// consumer warpgroups at 240 registers a thread, 192 = three at 160), BN keys per K/V tile and
// the depth of the K/V ring. kAuto is the pick of launch_flash_wgmma / _persistent, from the H200
// sweep: D = 64 192x128_s2 (128x128_s2 where there are under two 192-row tiles per SM); D = 128
// 128x192_s2 (persistent) or 128x128_s3 (grid). Not every configuration exists at both head dims: three consumer warpgroups
// cannot hold head dim 128's output accumulators in 160 registers (192x128_* are D = 64 only).
// Decoding's split mode keeps its own tiles (128 x 128, 3 stages) whatever is named here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention.h"

namespace sk {

enum class FlashWgmmaConfig : int {
  kAuto = 0,
  k128x128_s2 = 1,  // two consumer warpgroups, 128-key tiles, 2 stages (the pick before the sweep)
  k128x176_s2 = 2,  // 176-key tiles (11 x 16; FlashAttention-3's non-causal head dim 128 tile)
  k128x128_s3 = 3,  // a third K/V stage (225 KB at D = 128; persistent: one Q buffer)
  k128x192_s2 = 4,  // 192-key tiles (225 KB at D = 128)
  k192x128_s2 = 5,  // three consumer warpgroups (D = 64 only)
  k192x128_s3 = 6,  // the same with a third stage (D = 64 only)
};
constexpr int kNumFlashWgmmaConfigs = 7;

// "auto", "128x128_s2", ... (the op table's choices); "?" for a value outside the enum.
const char* flash_wgmma_config_name(FlashWgmmaConfig c);

// Whether the configuration exists for this head dim (kAuto: for 64 and 128).
bool flash_wgmma_config_applies(FlashWgmmaConfig c, int64_t head_dim);

// launch_flash_wgmma (persistent = false) or launch_flash_wgmma_persistent (true) with the named
// tiles; a configuration that does not apply to p.head_dim returns kBadHeadDim (the bindings
// check flash_wgmma_config_applies first, and name the configuration). With a workspace of
// flash_wgmma_persistent_workspace_bytes (16-byte aligned), a persistent launch splits the items
// of its last, partly filled round over their key tiles across the SMs that would idle, and
// merges the pieces in a second kernel (csrc/attention/prefill_tail_rule.h says when); without
// one (null) every item runs whole. A workspace smaller than needed returns kWorkspaceTooSmall.
AttentionResult launch_flash_wgmma_config(const AttentionParams& p, FlashWgmmaConfig c,
                                          bool persistent, cudaStream_t stream,
                                          void* workspace = nullptr, size_t workspace_bytes = 0);

// Bytes of the persistent launch's split tail for p on the current device (0: it runs whole).
size_t flash_wgmma_persistent_workspace_bytes(const AttentionParams& p, FlashWgmmaConfig c);

}  // namespace sk
