// Internal to the attention family: what split-KV decoding's two main-loop kernels share
// (decode.cu's mma.sync kernel and flash_wgmma.cu's wgmma kernel in split mode), and the
// combine step both feed. Plain C++: no PyTorch, no CUDA kernels.
#pragma once

#include <cuda_runtime_api.h>

#include "attention.h"

namespace sk::attn {

// The partial results of one split of the key range, for the rows of one K/V head's query group
// (G = Hq / Hkv heads x Sq positions, packed: row r is head r / Sq, position r % Sq). Row
// (b * Hkv + hkv) * rows + r of o_part holds `partials` normalised outputs of D floats; lse_part
// the matching log-sum-exps (-inf for a split in which the row saw no key).
struct SplitKV {
  float* o_part = nullptr;    // [B * Hq * Sq][partials][D]
  float* lse_part = nullptr;  // [B * Hq * Sq][partials]
  int rows = 0;               // G * Sq
  int tiles_per_split = 0;    // key tiles per split (of the main kernel's tile size)
  int partials = 0;           // per row: one per split (a block merges its key groups first)
};

// The wgmma split kernel: 128 packed rows per block, key tiles of 128, one block per SM.
inline constexpr int kWgmmaSplitRows = 128;
inline constexpr int kWgmmaSplitKeys = 128;

// Whether the wgmma split kernel can run p: an sm_90 device, keys present, q's rows packed
// contiguously over (batch, head, position) and k/v heads uniformly strided (TMA addressing).
bool wgmma_split_supported(const AttentionParams& p);

// Launches it over grid (splits, Hkv x row blocks, B), writing s's partials (flash_wgmma.cu).
AttentionResult launch_wgmma_split(const AttentionParams& p, const SplitKV& s, int splits,
                                   cudaStream_t stream);

}  // namespace sk::attn
