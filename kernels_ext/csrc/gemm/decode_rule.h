// How the two register-streaming decode kernels (gemm_decode_mma: 16-bit, sgemm_decode: fp32)
// deal W's rows to CTAs, and which CTA shape they take. Plain C++, so the CPU tests check it.
//
// Both kernels run 256-thread CTAs, two per SM (sgemm_decode's rows4_d3: one), each over a fixed
// number of W rows (32, or 16 where 32-row CTAs would leave SMs idle; rows4_d3: 64, or 32), K
// split over the CTA's warps. The grid:
//   tiles: one CTA per row tile, G = ceil(N / rows);
//   waves: G rounded up to whole waves of resident CTAs, the rows spread evenly, so
//          that no SM streams more of W than another (at N = K = 8192 on 132 SMs, 256 CTAs of 32
//          rows leave 8 of the 264 slots empty; 264 CTAs of 31-32 rows do not);
//   auto:  waves where the row tiles fill at least half of one wave (so a CTA keeps at least half
//          its row slots; below that, spreading rows thinner would only multiply the CTAs
//          re-reading x), else tiles.
// CTA b takes rows [b N / G, (b + 1) N / G).
#pragma once

#include <algorithm>
#include <cstdint>

namespace sk::gemm {

// gemm_decode_mma's grid (and sgemm_decode's): kTiles, one CTA per row tile; kWaves, the CTA count
// rounded up to whole waves of resident CTAs with the rows spread evenly over them; kAuto, kWaves
// where the tiles fill half a wave or more.
enum class DecodeGrid : int { kAuto = 0, kTiles = 1, kWaves = 2 };
constexpr int kNumDecodeGrids = 3;

// The number of CTAs over n rows of W for CTAs of `rows` rows, `per_sm` of them resident per SM.
inline int64_t decode_ctas(int64_t n, int64_t rows, int per_sm, DecodeGrid grid, int sms) {
  const int64_t tiles = (n + rows - 1) / rows;
  const int64_t wave = static_cast<int64_t>(per_sm) * sms;
  const bool waves = grid == DecodeGrid::kWaves || (grid == DecodeGrid::kAuto && 2 * tiles >= wave);
  if (!waves || wave <= 0) return tiles;
  return std::min(n, (tiles + wave - 1) / wave * wave);
}

// Half-height CTAs where CTAs of `rows` rows would fill under three quarters of the SMs' slots
// (`per_sm` a SM).
inline bool decode_halves_rows(int64_t n, int64_t rows, int per_sm, int sms) {
  return sms > 0 && (n + rows - 1) / rows < (static_cast<int64_t>(per_sm) * sms * 3) / 4;
}

// 16-row CTAs where 32-row ones would fill under three quarters of the SMs' two slots (N = 4096:
// 128 CTAs on 132 SMs), measured for gemm_decode_mma on the H200 (gemm_decode_mma.cu).
inline bool decode_prefers_rows16(int64_t n, int sms) { return decode_halves_rows(n, 32, 2, sms); }

// How a decode kernel is launched: the grid, and how many chunks of W ahead of its register
// loads each warp asks L2 for (tile::prefetch_l2_if; 0: none, negative: the kernel's default).
struct DecodeOptions {
  DecodeGrid grid = DecodeGrid::kAuto;
  int prefetch = -1;
};

// The prefetch distance a launch runs: the requested one, or `fallback` when none was requested.
inline int decode_prefetch_chunks(const DecodeOptions& o, int fallback) {
  return o.prefetch >= 0 ? o.prefetch : fallback;
}

// sgemm_decode's compile-time token count for M tokens: the next of 1, 2, 4, 8, 16, so that a
// CTA's FMAs and x copies cover at most twice the tokens there are (0 for M outside 1..16).
inline int sgemm_decode_tokens(int64_t m) {
  if (m < 1 || m > 16) return 0;
  int t = 1;
  while (t < m) t *= 2;
  return t;
}

// sgemm_decode's kernel for `auto` at a token count (sgemm_decode_tokens): at 4 and 8 the
// one-CTA-per-SM thread tile with 3 chunks of W in flight; rows4 (two CTAs per SM) at 1 and 2;
// kTf32x3 at 16, 1.11-1.16x rows4 at N >= 4096 on an H100 with its exact fp32 path for inf and NaN
// (decode_rows_exact_fp32) passing test_sgemm_decode_keeps_ieee_specials there. The measurements
// are at run_tile in sgemm_decode.cu.
enum class SdecodeConfig : int { kAuto = 0, kRows4 = 1, kRows2 = 2, kRows4D3 = 3, kTf32x3 = 4 };
constexpr int kNumSdecodeConfigs = 5;
inline SdecodeConfig sdecode_auto_config(int tokens) {
  if (tokens == 16) return SdecodeConfig::kTf32x3;
  return tokens == 4 || tokens == 8 ? SdecodeConfig::kRows4D3 : SdecodeConfig::kRows4;
}

}  // namespace sk::gemm
