// How the persistent prefill launch (flash_wgmma.cu) deals its work items (query tiles of BM rows
// against all their keys) to one block per SM, and when it splits the last round. Plain C++, so
// the CPU tests check it.
//
// With I items on G SMs, blocks run ceil(I / G) rounds; when G does not divide I the last round
// has only T = I mod G items and the other G - T SMs idle for a whole item's time. At issue 14's
// cases that is most of a round in 32 (B4 H32 S4096 D128: 4,096 items of 128 rows = 31 rounds of
// 132 and 4 items over; B1 H32 S16384 too): ~3% of the kernel. The split tail gives each of those
// T items' key tiles to P blocks (pieces of ceil(n_tiles / P) tiles), each writing a normalised
// partial output and its log-sum-exp, which a small second kernel merges (as split-KV decoding's
// combine does). Measured on an H100 in two calls (docs/PERF.md, 2026-12-07,
// scripts/tune/specs/prefill_tail.yaml): 1.02-1.05x the whole-item launch at B4 H32 S4096 D128,
// S16384 and D64; 1.017-1.029x cuDNN at the first. Where there were fewer items than SMs
// (B1 H4 S2048 D128: 64 items, each split in two) it was 0.88x, so a tail is split only after
// at least one full round. The other conditions: P >= 2, and items
// of at least kMinTilesToSplit key tiles (an estimate, not measured: a 4-tile D = 128 item is
// ~5-8 us of one SM, the merge ~2.5 us). Causal items differ in cost (their heaviest run
// first), so causal launches keep whole items.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sk::attn {

inline constexpr int64_t kMinTilesToSplit = 4;

struct PrefillTailPlan {
  int64_t grid = 0;          // persistent blocks
  int64_t first_item = 0;    // items [first_item, items) run as pieces; == items: none
  int pieces = 0;            // pieces per split item (0: no split)
  int tiles_per_piece = 0;
  int64_t rows = 0;          // workspace rows: split items x bm
};

// items: query tiles of bm rows over every (batch, head); n_tiles: key tiles per item (all equal:
// not causal); max_pieces: the merge kernel's limit on partials per row.
inline PrefillTailPlan plan_prefill_tail(int64_t items, int64_t n_tiles, int64_t bm, int64_t sms,
                                         bool split, bool causal, int64_t max_pieces) {
  PrefillTailPlan plan;
  plan.grid = std::min(items, std::max<int64_t>(sms, 1));
  plan.first_item = items;
  if (!split || causal || sms <= 0 || items < sms || n_tiles < kMinTilesToSplit) return plan;
  const int64_t tail = items % sms;
  if (tail == 0) return plan;
  const int64_t most = std::min({n_tiles, sms / tail, max_pieces});
  if (most < 2) return plan;
  const int64_t per_piece = (n_tiles + most - 1) / most;
  const int64_t pieces = (n_tiles + per_piece - 1) / per_piece;
  if (pieces < 2) return plan;
  plan.grid = sms;
  plan.first_item = items - tail;
  plan.pieces = static_cast<int>(pieces);
  plan.tiles_per_piece = static_cast<int>(per_piece);
  plan.rows = tail * bm;
  return plan;
}

}  // namespace sk::attn
