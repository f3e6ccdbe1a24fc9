// flash_wgmma: FlashAttention-3 style forward for Hopper (sm_90a).
//
// A block computes BM = 64 x W query rows of one (batch, head) with W + 1 warpgroups (W = 2 or 3,
// the configuration's; flash_wgmma.h names them):
//  - a producer (registers given away with setmaxnreg) whose one thread issues TMA loads: the
//    Q tile once, then K and V tiles into a ring of shared-memory stages, each stage with a
//    `full` mbarrier (TMA completes bytes on it) and an `empty` one (consumer warps arrive
//    when they no longer read it). K and V have separate rings because K is released as
//    soon as S = Q K^T is done, V only after O += P V;
//  - W consumer warpgroups of 64 rows each: S = Q K^T with wgmma SS (Q and K K-major in
//    128B-swizzled smem), online softmax in registers, O += P V with wgmma RS (P straight
//    from the S registers, V MN-major in smem through the transposed-B descriptor).
// Overlap, the two ways FlashAttention-3 describes:
//  - within a warpgroup, the matrix products of tile j (S_j) and of tile j - 1 (P_{j-1} V_{j-1})
//    are issued together, and the softmax of S_j runs while P_{j-1} V_{j-1} is on the tensor
//    cores (O is rescaled only after that product retires);
//  - between warpgroups, one named barrier per consumer makes them take turns issuing their
//    products (ping-pong; with three consumers the turn goes 0 -> 1 -> 2 -> 0), so one
//    warpgroup's softmax fills the others' matrix-product time.
// Persistent launch (one block per SM looping over the query tiles): where the tiles do not fill
// the last round, that round's tiles are split over their keys across the blocks that would idle
// and merged by LSE in prefill_tail_combine (prefill_tail_rule.h says when).
// Causal blocks stop at the last tile their last row sees and mask only tiles that cross the
// diagonal or the key tail (any BN that is a multiple of 16: 176 = 11 x 16 too); rows that see
// no key get o = 0, lse = -inf.
//
// Split mode (kSplit, for decoding with many query rows per K/V head, e.g. 16 positions x 8
// grouped heads = 128 rows, where mma.sync cannot keep up with memory): a block takes 128
// packed rows of one K/V head's query group and one range of key tiles, and writes normalised
// fp32 partial outputs and LSEs that decode.cu's combine kernel merges (see split_kv.h).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../tile/mbarrier.cuh"
#include "../tile/mma_sync.cuh"
#include "../tile/online_softmax.cuh"
#include "../tile/tma.cuh"
#include "../tile/warpgroup.cuh"
#include "../tile/wgmma.cuh"
#include "args.cuh"
#include "attention.h"
#include "flash_wgmma.h"
#include "../tile/grid_dependency.cuh"
#include "merge_partials.cuh"
#include "mma_tile.cuh"
#include "prefill_tail_rule.h"
#include "split_kv.h"

namespace sk::attn {
namespace {

using tile::fence_fragments;
using tile::wgmma_rs;
using tile::wgmma_ss;

constexpr int kPanelCols = 64;  // TMA box rows and wgmma atoms: 128 bytes, 64 elements

// Shared memory a block may take: 227 KB per block, less the 1 KB of static shared memory
// (the barriers, which ptxas places in one 1024-byte aligned unit next to the dynamic part).
constexpr int kMaxDynamicSmem = 227 * 1024 - 1024;
constexpr int kRegistersPerSm = 64 * 1024;

// D: head dim; W: consumer warpgroups (64 query rows each); BN: keys per K/V tile (a multiple
// of 16, at most 256: one wgmma N); STAGES: depth of the K and V rings.
template <int D_, int W_, int BN_, int STAGES>
struct WgmmaConfig {
  static constexpr int D = D_;
  static constexpr int kConsumers = W_;
  static constexpr int BM = 64 * kConsumers;
  static constexpr int BN = BN_;
  static constexpr int NT = BN / 8;
  static constexpr int kStages = STAGES;
  static constexpr int kPanels = D / kPanelCols;
  static constexpr int kThreads = (kConsumers + 1) * tile::kWarpgroupThreads;
  static constexpr int kConsumerWarps = 4 * kConsumers;  // arrivals that release a stage or Q
  // setmaxnreg: the producer drops to kProducerRegs, the consumers rise to kConsumerRegs; the
  // block (one per SM) must fit the 64K registers, and the consumers' count must not be below
  // what every thread starts with (the launch-bounds cap, 64K / threads rounded down to 8).
  // FlashAttention-3's counts: 24 / 240 with two consumers, 32 / 160 with three.
  static constexpr int kProducerRegs = kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 240 : 160;
  static constexpr int kQBytes = BM * D * 2;
  static constexpr int kKVBytes = BN * D * 2;                                 // one K or V stage
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes + 1024;  // + alignment
  // A persistent block double-buffers Q where it fits, so the next item's Q loads while this
  // one's is read; where it does not (D = 128 with 176- or 192-key tiles or 3 stages) the next
  // Q waits until the consumers' last S = Q K^T of the current item has retired.
  static constexpr int kPersistentQBuffers = kSmemBytes + kQBytes <= kMaxDynamicSmem ? 2 : 1;
  static constexpr int kPersistentSmemBytes = kSmemBytes + (kPersistentQBuffers - 1) * kQBytes;
  static_assert(D % kPanelCols == 0 && BN % 16 == 0 && BN <= 256 && BM <= 256, "tile shape");
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static_assert(kStages >= 2 && kStages <= 4, "Barriers holds up to 4 stages");
  static_assert(kProducerRegs * tile::kWarpgroupThreads +
                        kConsumers * kConsumerRegs * tile::kWarpgroupThreads <=
                    kRegistersPerSm,
                "setmaxnreg budgets exceed the SM's registers");
  static_assert(kConsumerRegs >= kRegistersPerSm / kThreads / 8 * 8 &&
                    kProducerRegs <= kRegistersPerSm / kThreads / 8 * 8,
                "setmaxnreg: consumers increase, the producer decreases");
  static_assert(kSmemBytes <= kMaxDynamicSmem, "shared memory per block");
};

struct Barriers {
  // Q buffer b (persistent blocks cycle through kPersistentQBuffers; others use 0): q_empty[b] =
  // every consumer is done reading it.
  uint64_t q_full[2], q_empty[2];
  uint64_t k_full[4], k_empty[4], v_full[4], v_empty[4];
};

// The persistent launch's split tail (prefill_tail_rule.h): items [first_item, items) run as
// `pieces` pieces of tiles_per_piece key tiles each, every piece writing its rows' normalised
// partial output and LSE; prefill_tail_combine merges them. pieces == 0: no split.
struct PrefillTail {
  float* o_part = nullptr;    // [(item - first_item) * BM + row][pieces][D]
  float* lse_part = nullptr;  // [(item - first_item) * BM + row][pieces]
  int64_t first_item = 0;
  int pieces = 0;
  int tiles_per_piece = 0;
};

// Item idx of a prefill launch in head-major order: query tile, head, batch. Causal heads take
// their heaviest tiles (the last rows) first.
struct ItemCoords {
  int m_block, h, b;
};

// 32-bit: the launcher keeps a persistent launch under 2^30 items. (The producer thread runs this
// with 24 registers, where 64-bit divisions, which are calls, would spill.)
__device__ __forceinline__ ItemCoords item_coords(const AttnArgs& a, int idx, int m_blocks) {
  const int mi = idx % m_blocks;
  const int bh = idx / m_blocks;
  return {a.causal ? m_blocks - 1 - mi : mi, bh % a.heads_q, bh / a.heads_q};
}

#if SK_TILE_SM90A
constexpr int kSwizzleBytes = 128;
constexpr int kSchedBarrier = tile::kFirstFreeBarrier;  // + cw: consumer cw's turn

template <class C>
struct Smem {
  uint8_t* q;
  uint8_t* k;
  uint8_t* v;
  __device__ uint8_t* q_buffer(int b) const { return q + b * C::kQBytes; }
  __device__ uint8_t* k_stage(int s) const { return k + s * C::kKVBytes; }
  __device__ uint8_t* v_stage(int s) const { return v + s * C::kKVBytes; }
};

// The block's key range: tiles [0, n_tiles) for rows [m0, m0 + BM).
__device__ __forceinline__ int block_tiles(const AttnArgs& a, int m0, int bm, int bn) {
  const int last_row = min(m0 + bm, a.seq_q) - 1;
  const int n_keys = visible_keys(last_row, a.seq_q, a.seq_k, a.causal);
  return n_keys > 0 ? (n_keys + bn - 1) / bn : 0;
}

// One work item's loads: the Q tile, then key tiles [tile0, tile0 + n_tiles) into the ring,
// whose position continues across a persistent block's work items: its tile `it` goes to ring
// slot ring0 + it (stage slot % kStages, pass slot / kStages). Work item `round` uses Q buffer
// round % NQ for the (round / NQ)-th time; from round NQ on it first waits until every consumer
// has released that buffer's previous use (item round - NQ).
template <class C, int NQ>
__device__ __forceinline__ void produce_work(const CUtensorMap* q_map, const CUtensorMap* k_map,
                                             const CUtensorMap* v_map, const Smem<C>& sm,
                                             Barriers& bar, int q_row, int q_head, int kv_head,
                                             int tile0, int n_tiles, int ring0, int round) {
  const int qb = static_cast<int>(static_cast<unsigned>(round) % NQ);  // round >= 0
  const int use = static_cast<int>(static_cast<unsigned>(round) / NQ);
  if (round >= NQ) tile::mbar_wait(&bar.q_empty[qb], (use - 1) & 1);
  tile::mbar_arrive_expect_tx(&bar.q_full[qb], C::kQBytes);
#pragma unroll
  for (int p = 0; p < C::kPanels; ++p) {
    tile::tma_load_3d(sm.q_buffer(qb) + p * C::BM * kSwizzleBytes, q_map, &bar.q_full[qb],
                      p * kPanelCols, q_row, q_head);
  }
  for (int it = 0; it < n_tiles; ++it) {
    const int slot = ring0 + it;
    const int st = slot % C::kStages;
    const uint32_t parity = ((slot / C::kStages) & 1) ^ 1;
    tile::mbar_wait(&bar.k_empty[st], parity);
    tile::mbar_arrive_expect_tx(&bar.k_full[st], C::kKVBytes);
#pragma unroll
    for (int p = 0; p < C::kPanels; ++p) {
      tile::tma_load_3d(sm.k_stage(st) + p * C::BN * kSwizzleBytes, k_map, &bar.k_full[st],
                        p * kPanelCols, (tile0 + it) * C::BN, kv_head);
    }
    tile::mbar_wait(&bar.v_empty[st], parity);
    tile::mbar_arrive_expect_tx(&bar.v_full[st], C::kKVBytes);
#pragma unroll
    for (int p = 0; p < C::kPanels; ++p) {
      tile::tma_load_3d(sm.v_stage(st) + p * C::BN * kSwizzleBytes, v_map, &bar.v_full[st],
                        p * kPanelCols, (tile0 + it) * C::BN, kv_head);
    }
  }
}

// S = Q K^T for this consumer's 64 rows and one K stage (issued, committed, not waited).
template <class T, class C>
__device__ __forceinline__ void issue_scores(float (&s)[C::BN / 2], const uint8_t* q_rows,
                                             const uint8_t* k_stage) {
#pragma unroll
  for (int kk = 0; kk < C::D / 16; ++kk) {
    const int panel = kk / 4;
    const uint32_t step = 32 * (kk % 4);  // 16 elements along K inside the 128-byte row
    const uint64_t da = tile::desc_advance(
        tile::desc_k_major<kSwizzleBytes>(q_rows + panel * C::BM * kSwizzleBytes), step);
    const uint64_t db = tile::desc_advance(
        tile::desc_k_major<kSwizzleBytes>(k_stage + panel * C::BN * kSwizzleBytes), step);
    wgmma_ss<T, C::BN>(s, da, db, kk > 0 ? 1 : 0);
  }
  tile::wgmma_commit();
}

// O += P V for one V stage: V[key][d] is MN-major for B (N = d contiguous); 16 keys per
// k-step are 16 rows of 128 bytes, d blocks of 64 are the panels (LBO apart).
template <class T, class C>
__device__ __forceinline__ void issue_pv(float (&o)[C::D / 2], const uint32_t (&p)[C::BN / 16][4],
                                         const uint8_t* v_stage) {
#pragma unroll
  for (int kt = 0; kt < C::BN / 16; ++kt) {
    const uint64_t db = tile::desc_mn_major<kSwizzleBytes>(v_stage + kt * 16 * kSwizzleBytes,
                                                           C::BN * kSwizzleBytes);
    wgmma_rs<T, C::D, 1>(o, p[kt], db, 1);
  }
  tile::wgmma_commit();
}

template <class T, int NT>
__device__ __forceinline__ void scores_to_fragments(uint32_t (&p)[NT / 2][4],
                                                    const float (&s)[1][NT][4]) {
#pragma unroll
  for (int kt = 0; kt < NT / 2; ++kt) {
    tile::accumulators_to_a<T>(p[kt], s[0][2 * kt], s[0][2 * kt + 1]);
  }
}

__device__ __forceinline__ void release(uint64_t* empty, int lane) {
  if (lane == 0) tile::mbar_arrive(empty);
}

// The block's work: rows [row_base, row_base + BM) of its row space (query positions of one
// head, or in split mode the packed rows of one K/V head's group) against key tiles
// [tile0, tile0 + n_tiles); `head` is the query head (prefill) or the K/V head (split).
struct Work {
  int row_base;
  int b;
  int head;
  int tile0;
  int n_tiles;
  // A piece of a split tail item: the workspace slot of its first row's partial (row r of the
  // item is slot + r * pieces); -1 otherwise. One int, as it stays live through the main loop.
  int tail_slot = -1;
};

// Keys visible to row `row` of the row space (split mode: packed row -> its position).
template <bool kSplit>
__device__ __forceinline__ int row_visible(const AttnArgs& a, int row) {
  return visible_keys(kSplit ? row % a.seq_q : row, a.seq_q, a.seq_k, a.causal);
}

// The consumers' turns (ping-pong): a warpgroup issues its products between
// named_barrier_sync(own turn) and named_barrier_arrive(the next consumer's turn), the turn
// going round 0 -> 1 (-> 2) -> 0. Each barrier counts the two warpgroups that meet on it, the
// one waiting for its turn and the one handing it over. Consumer 0 goes first: the last consumer
// hands it the first turn in turns_begin(), and the last consumer's final hand-over is taken by
// consumer 0 in turns_end(). Every consumer takes the same number of turns (one per key tile of
// each work item, the same items for all), so a persistent block keeps one cycle across its
// items, and no barrier sees a second hand-over before its first was taken (a consumer hands
// over turn t + 1 only after it was handed turn t + 1, which needs the whole cycle in between).
template <int W>
__device__ __forceinline__ void turns_begin(int cw) {
  if (cw == W - 1) tile::named_barrier_arrive(kSchedBarrier, 2 * tile::kWarpgroupThreads);
}

__device__ __forceinline__ void turns_end(int cw) {
  if (cw == 0) tile::named_barrier_sync(kSchedBarrier, 2 * tile::kWarpgroupThreads);
}

// One work item for consumer warpgroup cw: its tile `it` is in ring slot ring0 + it (as the
// producer put it); Q is in buffer round % NQ (phase round / NQ of its q_full), released to the
// producer (q_empty) once the item's last S = Q K^T has retired.
template <class T, class C, bool kSplit, int NQ>
__device__ __forceinline__ void consume_work(const AttnArgs& a, const SplitKV& split,
                                             const PrefillTail& tail, const Smem<C>& sm,
                                             Barriers& bar, int cw, const Work& w, int ring0,
                                             int round) {
  constexpr int NT = C::NT, D = C::D;
  const int n_tiles = w.n_tiles;
  const int t128 = static_cast<int>(threadIdx.x) - (cw + 1) * tile::kWarpgroupThreads;
  const int warp = t128 / 32;
  const int lane = t128 % 32;
  const int own_turn = kSchedBarrier + cw;
  const int next_turn = kSchedBarrier + (cw + 1) % C::kConsumers;
  // This thread's rows: row0 and row0 + 8.
  const int row0 = w.row_base + 64 * cw + 16 * warp + (lane >> 2);
  // Key tiles every row of this warpgroup sees whole (split mode: position 0 sees the fewest).
  const int first_visible = kSplit ? visible_keys(0, a.seq_q, a.seq_k, a.causal)
                                   : visible_keys(w.row_base + 64 * cw, a.seq_q, a.seq_k, a.causal);
  const int n_unmasked = max(first_visible, 0) / C::BN;
  const int qb = static_cast<int>(static_cast<unsigned>(round) % NQ);  // round >= 0
  const uint32_t q_use = static_cast<unsigned>(round) / NQ;
  const uint8_t* q_rows = sm.q_buffer(qb) + 64 * cw * kSwizzleBytes;

  tile::OnlineSoftmax<1> softmax;
  softmax.init(a.scale);
  float o[1][D / 8][4];
  zero(o);
  float s[1][NT][4];
  zero(s);
  uint32_t p[NT / 2][4];
  auto& o_flat = reinterpret_cast<float (&)[D / 2]>(o);
  auto& s_flat = reinterpret_cast<float (&)[C::BN / 2]>(s);

  tile::mbar_wait(&bar.q_full[qb], q_use & 1);

  auto softmax_tile = [&](int it, float (&rescale)[2]) {
    const int j = w.tile0 + it;  // the key tile's index in the sequence
    if (j >= n_unmasked) {
      mask_scores<1, NT>(
          s, j * C::BN, [&](int, int hh) { return row_visible<kSplit>(a, row0 + 8 * hh); }, lane);
    }
    softmax.step(s, rescale);
  };

  // Tile 0: S_0 only. Then each tile it issues S_it and P_{it-1} V_{it-1} back to back and
  // runs the softmax of S_it while the second product is in flight. Straight-line bodies (no
  // branch on `it` between a wgmma and its wait) let ptxas see that the waits retire them.
  // `rescale` carries the factor of the latest softmax step to the next P V: O is multiplied by
  // it between the two issues, so those multiplies run while S_it is on the tensor cores
  // instead of between P V's completion and the next turn (the first H200 run had this
  // kernel 2-3% behind cuDNN at S = 4096). O is not an operand of S_it; the second
  // wgmma_fence orders the multiplies before the P V that accumulates into O.
  float rescale[2];
  if (n_tiles > 0) {
    const int st = ring0 % C::kStages;
    tile::named_barrier_sync(own_turn, 2 * tile::kWarpgroupThreads);
    tile::mbar_wait(&bar.k_full[st], (ring0 / C::kStages) & 1);
    tile::wgmma_fence();
    issue_scores<T, C>(s_flat, q_rows, sm.k_stage(st));
    tile::named_barrier_arrive(next_turn, 2 * tile::kWarpgroupThreads);
    tile::wgmma_wait<0>();
    tile::fence_accumulators(s_flat);
    release(&bar.k_empty[st], lane);
    softmax_tile(0, rescale);  // rescale = 0 (no previous max); it multiplies the zero O
    scores_to_fragments<T, NT>(p, s);
  }
  for (int it = 1; it < n_tiles; ++it) {
    const int slot = ring0 + it;
    const int st = slot % C::kStages;
    const uint32_t parity = (slot / C::kStages) & 1;
    const int prev = (slot - 1) % C::kStages;
    const uint32_t prev_parity = ((slot - 1) / C::kStages) & 1;

    tile::named_barrier_sync(own_turn, 2 * tile::kWarpgroupThreads);
    tile::mbar_wait(&bar.k_full[st], parity);
    tile::mbar_wait(&bar.v_full[prev], prev_parity);
    tile::wgmma_fence();
    issue_scores<T, C>(s_flat, q_rows, sm.k_stage(st));
    tile::scale_rows(o, rescale);  // for P_{it-1}, under S_it
    tile::wgmma_fence();
    issue_pv<T, C>(o_flat, p, sm.v_stage(prev));
    tile::named_barrier_arrive(next_turn, 2 * tile::kWarpgroupThreads);

    tile::wgmma_wait<1>();  // S_it done; P_{it-1} V_{it-1} may still run
    tile::fence_accumulators(s_flat);
    release(&bar.k_empty[st], lane);
    softmax_tile(it, rescale);
    tile::wgmma_wait<0>();
    tile::fence_accumulators(o_flat);
    fence_fragments(p);
    release(&bar.v_empty[prev], lane);
    scores_to_fragments<T, NT>(p, s);
  }
  // Every S of the item has retired (each at its tile's wgmma_wait): Q may be overwritten.
  release(&bar.q_empty[qb], lane);
  const int last_slot = ring0 + n_tiles - 1;
  if (n_tiles > 0) {
    const int last = last_slot % C::kStages;
    tile::mbar_wait(&bar.v_full[last], (last_slot / C::kStages) & 1);
    tile::scale_rows(o, rescale);
    tile::wgmma_fence();
    issue_pv<T, C>(o_flat, p, sm.v_stage(last));
  }
  tile::wgmma_wait<0>();
  tile::fence_accumulators(o_flat);
  fence_fragments(p);
  // The last V stage too: a persistent block's producer refills it for a later item.
  if (n_tiles > 0) release(&bar.v_empty[last_slot % C::kStages], lane);

  float inv_sum[2], lse[2];
  softmax.finalize(inv_sum, lse);
  // A partial (split mode, or a piece of the persistent launch's split tail): this thread's
  // D / 4 columns of row hh, normalised, in fp32, and the row's LSE, for a merge kernel.
  auto write_partial = [&](int hh, float* row_out, float* lse_out) {
    float* out = row_out + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<float2*>(out + 8 * j) =
          make_float2(o[0][j][2 * hh] * inv_sum[hh], o[0][j][2 * hh + 1] * inv_sum[hh]);
    }
    if ((lane & 3) == 0) *lse_out = lse[hh];
  };
  if constexpr (kSplit) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int pr = row0 + 8 * hh;
      if (pr >= split.rows) continue;
      const int64_t row = (static_cast<int64_t>(w.b) * a.heads_kv + w.head) * split.rows + pr;
      const int64_t slot = row * split.partials + blockIdx.x;
      write_partial(hh, split.o_part + slot * D, split.lse_part + slot);
    }
  } else if (w.tail_slot >= 0) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = row0 + 8 * hh;
      if (row >= a.seq_q) continue;
      const int64_t slot = w.tail_slot + static_cast<int64_t>(row - w.row_base) * tail.pieces;
      write_partial(hh, tail.o_part + slot * D, tail.lse_part + slot);
    }
  } else {
    T* out = static_cast<T*>(a.o) + w.b * a.o_batch + w.head * a.o_head;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = row0 + 8 * hh;
      if (row >= a.seq_q) continue;
      T* out_row = out + static_cast<int64_t>(row) * D + 2 * (lane & 3);
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        *reinterpret_cast<uint32_t*>(out_row + 8 * j) =
            tile::pack2<T>(o[0][j][2 * hh] * inv_sum[hh], o[0][j][2 * hh + 1] * inv_sum[hh]);
      }
      if (a.lse != nullptr && (lane & 3) == 0) {
        a.lse[(static_cast<int64_t>(w.b) * a.heads_q + w.head) * a.seq_q + row] = lse[hh];
      }
    }
  }
}

// A prefill work item: query tile m_block of head h of batch b, and its TMA coordinates.
struct PrefillItem {
  Work w;
  int q_row, q_head, kv_head;
};

template <class C>
__device__ __forceinline__ PrefillItem prefill_item(const AttnArgs& a, int m_block, int h, int b) {
  PrefillItem item;
  item.w = {m_block * C::BM, b, h, 0, 0};
  item.w.n_tiles = block_tiles(a, item.w.row_base, C::BM, C::BN);
  item.q_row = item.w.row_base;
  item.q_head = b * a.heads_q + h;
  item.kv_head = b * a.heads_kv + h / a.group;
  return item;
}

// Persistent blocks (one per SM) walk the items in head-major order -- a head's query tiles
// run side by side and share its K/V through L2 -- with a causal head's heaviest tiles first.
// Round r of block c takes slot r G + c, or r G + G - 1 - c on odd rounds (G blocks): the
// snake pairs a block's heavy causal tiles with light ones across rounds, where a plain
// stride would give some blocks the heavy end of every round. Slots from tail.first_item on are
// pieces of the split tail items (slot first_item + i: piece i % pieces of item first_item +
// i / pieces), so the last round's blocks share those items' key tiles. False past the last.
template <class C>
__device__ __forceinline__ bool persistent_item(const AttnArgs& a, const PrefillTail& tail,
                                                int round, PrefillItem* item) {
  const int g = static_cast<int>(gridDim.x);
  const int c = static_cast<int>(blockIdx.x);
  const int slot = round * g + ((round & 1) ? g - 1 - c : c);
  const int m_blocks = (a.seq_q + C::BM - 1) / C::BM;
  const int first = static_cast<int>(tail.first_item);
  int idx = slot;
  int piece = -1;
  if (tail.pieces > 0 && slot >= first) {
    idx = first + (slot - first) / tail.pieces;
    piece = (slot - first) % tail.pieces;
  }
  if (idx >= m_blocks * a.heads_q * a.batch) return false;
  const ItemCoords at = item_coords(a, idx, m_blocks);
  *item = prefill_item<C>(a, at.m_block, at.h, at.b);
  if (piece >= 0) {
    Work& w = item->w;
    w.tail_slot = (idx - first) * C::BM * tail.pieces + piece;
    w.tile0 = piece * tail.tiles_per_piece;
    w.n_tiles = max(0, min(w.n_tiles, w.tile0 + tail.tiles_per_piece) - w.tile0);
  }
  return true;
}

#endif  // SK_TILE_SM90A

// kSplit: decoding's split mode (grid: splits x (Hkv x row blocks) x B). Otherwise prefill,
// either one block per query tile (grid: query tiles x Hq x B) or, kPersistent, one block per
// SM looping over the tiles: the producer loads the next item's Q and first K/V tiles while
// the consumers finish the current one, instead of a new block paying that latency after
// the old one exits (the first H200 run: 572 TFLOP/s at S = 4096 against 591 at S = 16384,
// where a block's fixed cost is spread over 4x the tiles).
template <class T, class C, bool kSplit, bool kPersistent>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash_wgmma_fwd(const __grid_constant__ CUtensorMap q_map,
                    const __grid_constant__ CUtensorMap k_map,
                    const __grid_constant__ CUtensorMap v_map,
                    const __grid_constant__ AttnArgs args, const __grid_constant__ SplitKV split,
                    const __grid_constant__ PrefillTail tail) {
  static_assert(!(kSplit && kPersistent), "split mode has its own grid");
#if SK_TILE_SM90A
  // The merge kernel (decode_combine, prefill_tail_combine) may be placed once all blocks run;
  // it cannot share an SM with one of these blocks (registers), so it takes SMs as they finish.
  if (kSplit || tail.pieces > 0) tile::launch_dependents();
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ Barriers bar;
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~static_cast<uintptr_t>(1023));
  // Q (kPersistentQBuffers buffers when persistent) | K stages | V stages, every part 1024-byte
  // aligned (BM, BN: multiples of 8 rows of 128 bytes).
  constexpr int kQBuffers = kPersistent ? C::kPersistentQBuffers : 1;
  constexpr int kQSpace = kQBuffers * C::kQBytes;
  const Smem<C> sm{base, base + kQSpace, base + kQSpace + C::kStages * C::kKVBytes};

  PrefillItem item{};  // this block's one item (not persistent)
  if constexpr (kSplit) {
    // q is addressed as one [B * Hq * Sq, D] matrix.
    const int hk = blockIdx.y % args.heads_kv;
    Work& w = item.w;
    w = {static_cast<int>(blockIdx.y / args.heads_kv) * C::BM, static_cast<int>(blockIdx.z), hk,
         static_cast<int>(blockIdx.x) * split.tiles_per_split, 0};
    const int total_tiles = (args.seq_k + C::BN - 1) / C::BN;
    w.n_tiles = max(0, min(total_tiles, w.tile0 + split.tiles_per_split) - w.tile0);
    item.q_row = (w.b * args.heads_q + hk * args.group) * args.seq_q + w.row_base;
    item.q_head = 0;
    item.kv_head = w.b * args.heads_kv + hk;
  } else if constexpr (!kPersistent) {
    // Causal blocks with more rows (more keys) are launched first.
    const int m_block = args.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : blockIdx.x;
    item = prefill_item<C>(args, m_block, static_cast<int>(blockIdx.y),
                           static_cast<int>(blockIdx.z));
  }

  if (threadIdx.x == 0) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      tile::mbar_init(&bar.q_full[b], 1);
      tile::mbar_init(&bar.q_empty[b], C::kConsumerWarps);
    }
#pragma unroll
    for (int s = 0; s < C::kStages; ++s) {
      tile::mbar_init(&bar.k_full[s], 1);
      tile::mbar_init(&bar.v_full[s], 1);
      tile::mbar_init(&bar.k_empty[s], C::kConsumerWarps);
      tile::mbar_init(&bar.v_empty[s], C::kConsumerWarps);
    }
    tile::mbar_fence_init();
  }
  __syncthreads();

  // Producer and consumers walk the same items in the same order, each counting the ring
  // slots the items' key tiles take, so stage and parity agree on both sides.
  const int wg = tile::warpgroup_index();
  if (wg == 0) {
    tile::setmaxnreg_dec<C::kProducerRegs>();
    if (threadIdx.x == 0) {
      tile::tma_prefetch_descriptor(&q_map);
      tile::tma_prefetch_descriptor(&k_map);
      tile::tma_prefetch_descriptor(&v_map);
      if constexpr (kPersistent) {
        int ring = 0;
        for (int round = 0; persistent_item<C>(args, tail, round, &item); ++round) {
          produce_work<C, kQBuffers>(&q_map, &k_map, &v_map, sm, bar, item.q_row, item.q_head,
                                     item.kv_head, item.w.tile0, item.w.n_tiles, ring, round);
          ring += item.w.n_tiles;
        }
      } else {
        produce_work<C, 1>(&q_map, &k_map, &v_map, sm, bar, item.q_row, item.q_head, item.kv_head,
                           item.w.tile0, item.w.n_tiles, 0, 0);
      }
    }
  } else {
    tile::setmaxnreg_inc<C::kConsumerRegs>();
    const int cw = wg - 1;
    turns_begin<C::kConsumers>(cw);
    if constexpr (kPersistent) {
      int ring = 0;
      for (int round = 0; persistent_item<C>(args, tail, round, &item); ++round) {
        consume_work<T, C, false, kQBuffers>(args, split, tail, sm, bar, cw, item.w, ring, round);
        ring += item.w.n_tiles;
      }
    } else {
      consume_work<T, C, kSplit, 1>(args, split, tail, sm, bar, cw, item.w, 0, 0);
    }
    turns_end(cw);
  }
#else
  __trap();  // built without sm_90a code: the launchers refuse such devices before this
#endif
}

// The split tail's merge: one block per workspace row (a grid-stride loop beyond the grid), the
// row's pieces merged by their LSEs into o (and lse where wanted); launched as a programmatic
// dependent of the persistent kernel, whose writes it waits for.
template <class T, int D, int BM>
__global__ void __launch_bounds__(kCombineThreads)
    prefill_tail_combine(const __grid_constant__ AttnArgs a, const __grid_constant__ PrefillTail tail) {
  __shared__ MergeSmem<D> sm;
  const int m_blocks = (a.seq_q + BM - 1) / BM;
  const int64_t rows = (static_cast<int64_t>(m_blocks) * a.heads_q * a.batch - tail.first_item) * BM;
  tile::wait_for_prior_grids();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const ItemCoords at = item_coords(a, static_cast<int>(tail.first_item + r / BM), m_blocks);
    const int pos = at.m_block * BM + static_cast<int>(r % BM);
    if (pos >= a.seq_q) continue;  // block-uniform: rows past the last query tile's end
    T* out = static_cast<T*>(a.o) + at.b * a.o_batch + at.h * a.o_head + static_cast<int64_t>(pos) * D;
    float* lse = a.lse != nullptr
                     ? a.lse + (static_cast<int64_t>(at.b) * a.heads_q + at.h) * a.seq_q + pos
                     : nullptr;
    merge_partials<T, D>(tail.o_part + r * tail.pieces * D, tail.lse_part + r * tail.pieces,
                         tail.pieces, out, lse, sm);
  }
}

// The named prefill configurations (flash_wgmma.h): BM x BN _ stages at head dim D.
template <int D>
using Cfg128x128s2 = WgmmaConfig<D, 2, 128, 2>;  // kAuto until the sweep of 2026-12-01
template <int D>
using Cfg128x176s2 = WgmmaConfig<D, 2, 176, 2>;
template <int D>
using Cfg128x128s3 = WgmmaConfig<D, 2, 128, 3>;
template <int D>
using Cfg128x192s2 = WgmmaConfig<D, 2, 192, 2>;
using Cfg192x128s2 = WgmmaConfig<64, 3, 128, 2>;  // three consumer warpgroups: D = 64 only
using Cfg192x128s3 = WgmmaConfig<64, 3, 128, 3>;
// Split mode streams keys for few rows: a third stage keeps more bytes in flight (225 KB).
using D64SplitConfig = WgmmaConfig<64, 2, kWgmmaSplitKeys, 3>;
using D128SplitConfig = WgmmaConfig<128, 2, kWgmmaSplitKeys, 3>;
static_assert(D128SplitConfig::BM == kWgmmaSplitRows && D64SplitConfig::BM == kWgmmaSplitRows,
              "split tile");

template <class T>
constexpr CUtensorMapDataType tma_dtype() {
  return std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                          : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// [B * H, S, D] as a 3-D map (D innermost), boxes of `rows` x 64 elements, 128B swizzle. Rows
// past S in a box are zero-filled by TMA, never another head's.
template <class T>
bool make_head_map(CUtensorMap* map, const void* base, int64_t heads_total, int64_t seq,
                   int64_t head_dim, int64_t head_stride, int rows, std::string* error) {
  tile::TensorMapShape s;
  s.rank = 3;
  s.dims[0] = static_cast<uint64_t>(head_dim);
  s.dims[1] = static_cast<uint64_t>(seq);
  s.dims[2] = static_cast<uint64_t>(heads_total);
  s.strides[0] = static_cast<uint64_t>(head_dim) * sizeof(T);
  s.strides[1] = static_cast<uint64_t>(head_stride) * sizeof(T);
  s.box[0] = kPanelCols;
  s.box[1] = static_cast<uint32_t>(rows);
  s.box[2] = 1;
  return tile::make_tensor_map(map, tma_dtype<T>(), sizeof(T), base, s, CU_TENSOR_MAP_SWIZZLE_128B,
                               error);
}

template <class T, class C, bool kSplit, bool kPersistent>
cudaError_t launch(const CUtensorMap& q_map, const CUtensorMap& k_map, const CUtensorMap& v_map,
                   const AttnArgs& a, const SplitKV& split, const PrefillTail& tail, dim3 grid,
                   cudaStream_t stream) {
  static_assert(C::kPanels * kPanelCols == C::D && C::NT * 8 == C::BN, "tile shape");
  auto kernel = flash_wgmma_fwd<T, C, kSplit, kPersistent>;
  constexpr int kSmem = kPersistent ? C::kPersistentSmemBytes : C::kSmemBytes;
  static_assert(kSmem <= kMaxDynamicSmem, "shared memory per block");
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  kernel<<<grid, C::kThreads, kSmem, stream>>>(q_map, k_map, v_map, a, split, tail);
  return cudaGetLastError();
}

// Tensor maps for q (prefill: [B * Hq, Sq, D]; split: one [B * Hq * Sq, D] matrix) and k, v.
template <class T, class C>
bool make_maps(const AttentionParams& p, bool split, CUtensorMap* q_map, CUtensorMap* k_map,
               CUtensorMap* v_map) {
  std::string error;
  const bool q_ok =
      split ? make_head_map<T>(q_map, p.q, 1, p.batch * p.heads_q * p.seq_q, p.head_dim,
                               p.batch * p.heads_q * p.seq_q * p.head_dim, C::BM, &error)
            : make_head_map<T>(q_map, p.q, p.batch * p.heads_q, p.seq_q, p.head_dim,
                               p.q_strides.head, C::BM, &error);
  return q_ok &&
         make_head_map<T>(k_map, p.k, p.batch * p.heads_kv, p.seq_k, p.head_dim, p.k_strides.head,
                          C::BN, &error) &&
         make_head_map<T>(v_map, p.v, p.batch * p.heads_kv, p.seq_k, p.head_dim, p.v_strides.head,
                          C::BN, &error);
}

template <class T, class C, bool kSplit, bool kPersistent>
AttentionResult run(const AttentionParams& p, const SplitKV& split, dim3 grid,
                    cudaStream_t stream, const PrefillTail& tail = PrefillTail{}) {
  CUtensorMap q_map, k_map, v_map;
  if (!make_maps<T, C>(p, kSplit, &q_map, &k_map, &v_map))
    return {AttentionStatus::kTensorMap, cudaSuccess};
  const cudaError_t err = launch<T, C, kSplit, kPersistent>(q_map, k_map, v_map, make_args(p),
                                                            split, tail, grid, stream);
  if (err != cudaSuccess) return {AttentionStatus::kCudaError, err};
  return {};
}

// Decoding's split mode: its own tiles at each head dim.
AttentionResult dispatch_split(const AttentionParams& p, const SplitKV& split, dim3 grid,
                               cudaStream_t stream) {
  if (p.dtype == DType::kBFloat16) {
    return p.head_dim == 64
               ? run<__nv_bfloat16, D64SplitConfig, true, false>(p, split, grid, stream)
               : run<__nv_bfloat16, D128SplitConfig, true, false>(p, split, grid, stream);
  }
  return p.head_dim == 64 ? run<__half, D64SplitConfig, true, false>(p, split, grid, stream)
                          : run<__half, D128SplitConfig, true, false>(p, split, grid, stream);
}

// Caller-provided scratch memory (the persistent launch's split tail); null: none.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// How the persistent launch of configuration C deals p's items (prefill_tail_rule.h).
template <class C>
PrefillTailPlan persistent_plan(const AttentionParams& p, bool split_tail) {
  const int64_t items = ceil_div(p.seq_q, C::BM) * p.heads_q * p.batch;
  return plan_prefill_tail(items, ceil_div(p.seq_k, C::BN), C::BM, device_sm_count(), split_tail,
                           p.causal, kMaxPartials);
}

template <class C>
size_t tail_workspace_bytes(const PrefillTailPlan& plan) {
  return static_cast<size_t>(plan.rows) * plan.pieces * (C::D + 1) * sizeof(float);
}

template <class T, class C>
cudaError_t launch_tail_combine(const AttentionParams& p, const PrefillTail& tail, int64_t rows,
                                cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 20)));
  return tile::launch_dependent(prefill_tail_combine<T, C::D, C::BM>, grid, dim3(kCombineThreads),
                                0, stream, make_args(p), tail);
}

// Prefill with configuration C: one block per query tile, or (kPersistent) one per SM, splitting
// the last round's items over their keys where `ws` is given and the plan says so.
template <class T, class C, bool kPersistent>
AttentionResult run_prefill(const AttentionParams& p, const Workspace& ws, cudaStream_t stream) {
  const int64_t m_blocks = ceil_div(p.seq_q, C::BM);
  if constexpr (kPersistent) {
    const int64_t items = m_blocks * p.heads_q * p.batch;
    // The kernel's item and ring counters are 32-bit; so many items never fit one launch anyway.
    if (items > (int64_t{1} << 30)) return run_prefill<T, C, false>(p, ws, stream);
    const PrefillTailPlan plan = persistent_plan<C>(p, ws.ptr != nullptr);
    PrefillTail tail;
    if (plan.pieces > 0) {
      if (ws.bytes < tail_workspace_bytes<C>(plan) || (reinterpret_cast<uintptr_t>(ws.ptr) & 15u) != 0) {
        return {AttentionStatus::kWorkspaceTooSmall, cudaSuccess};
      }
      tail.o_part = static_cast<float*>(ws.ptr);
      tail.lse_part = tail.o_part + plan.rows * plan.pieces * C::D;
      tail.first_item = plan.first_item;
      tail.pieces = plan.pieces;
      tail.tiles_per_piece = plan.tiles_per_piece;
    }
    const AttentionResult r =
        run<T, C, false, true>(p, SplitKV{}, dim3(static_cast<unsigned>(plan.grid)), stream, tail);
    if (!r.ok() || plan.pieces == 0) return r;
    const cudaError_t err = launch_tail_combine<T, C>(p, tail, plan.rows, stream);
    if (err != cudaSuccess) return {AttentionStatus::kCudaError, err};
    return {};
  } else {
    const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(p.heads_q),
                    static_cast<unsigned>(p.batch));
    return run<T, C, false, false>(p, SplitKV{}, grid, stream);
  }
}

// kAuto's pick. The H200 sweep (scripts/tune/specs/flash_wgmma_configs.yaml,
// results/h200/issue14/2026-12-01_s6/): at D = 64 three consumer warpgroups, 1.07-1.09x cuDNN
// persistent, 0.98-1.04x grid (128x128_s2: 0.90-0.93x); at D = 128 192-key tiles for the
// persistent launch (0.99-1.06x; 128x128_s2 0.91-1.02x), a third stage for the grid one
// (0.88-1.03x; 0.87-1.03x). Few query tiles (B2 H8 S1024: 96 blocks of 192 rows for 132 SMs) keep
// 128-row blocks: 192 rows ran 0.83x cuDNN there, 128 rows 0.93x (results/h200/issue14/run/attention/).
FlashWgmmaConfig resolve_config(const AttentionParams& p, FlashWgmmaConfig c, bool persistent) {
  if (c != FlashWgmmaConfig::kAuto) return c;
  if (p.head_dim == 64) {
    const int64_t tiles = ceil_div(p.seq_q, int64_t{Cfg192x128s2::BM}) * p.heads_q * p.batch;
    return tiles >= 2 * int64_t{device_sm_count()} ? FlashWgmmaConfig::k192x128_s2
                                                   : FlashWgmmaConfig::k128x128_s2;
  }
  return persistent ? FlashWgmmaConfig::k128x192_s2 : FlashWgmmaConfig::k128x128_s3;
}

// Calls f with a value of the configuration type c names at head dim D (c resolved: not kAuto);
// kBadHeadDim where c does not exist at D.
template <int D, class F>
AttentionResult visit_config(FlashWgmmaConfig c, F&& f) {
  switch (c) {
    case FlashWgmmaConfig::k128x128_s2: return f(Cfg128x128s2<D>{});
    case FlashWgmmaConfig::k128x176_s2: return f(Cfg128x176s2<D>{});
    case FlashWgmmaConfig::k128x128_s3: return f(Cfg128x128s3<D>{});
    case FlashWgmmaConfig::k128x192_s2: return f(Cfg128x192s2<D>{});
    case FlashWgmmaConfig::k192x128_s2:
      if constexpr (D == 64) return f(Cfg192x128s2{});
      break;
    case FlashWgmmaConfig::k192x128_s3:
      if constexpr (D == 64) return f(Cfg192x128s3{});
      break;
    case FlashWgmmaConfig::kAuto:
      break;
  }
  return {AttentionStatus::kBadHeadDim, cudaSuccess};  // flash_wgmma_config_applies() said no
}

template <class T, int D>
AttentionResult run_config(const AttentionParams& p, FlashWgmmaConfig c, bool persistent,
                           const Workspace& ws, cudaStream_t stream) {
  return visit_config<D>(resolve_config(p, c, persistent), [&](auto cfg) {
    using C = decltype(cfg);
    return persistent ? run_prefill<T, C, true>(p, ws, stream)
                      : run_prefill<T, C, false>(p, ws, stream);
  });
}

AttentionResult dispatch_prefill(const AttentionParams& p, FlashWgmmaConfig c, bool persistent,
                                 const Workspace& ws, cudaStream_t stream) {
  if (p.dtype == DType::kBFloat16) {
    return p.head_dim == 64 ? run_config<__nv_bfloat16, 64>(p, c, persistent, ws, stream)
                            : run_config<__nv_bfloat16, 128>(p, c, persistent, ws, stream);
  }
  return p.head_dim == 64 ? run_config<__half, 64>(p, c, persistent, ws, stream)
                          : run_config<__half, 128>(p, c, persistent, ws, stream);
}

bool device_is_sm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    return false;
  }
  return major == 9 && minor == 0;
}

// TMA addresses heads as one dimension: [B, H] must be uniformly strided.
bool heads_uniform(const AttentionStrides& s, int64_t heads) { return s.batch == heads * s.head; }

// What both prefill launchers check; kOk with *done set means there is nothing (more) to do.
AttentionResult prefill_preamble(const AttentionParams& p, cudaStream_t stream, bool* done) {
  *done = true;
  const AttentionStatus status = check_attention_params(p);
  if (status != AttentionStatus::kOk) return {status, cudaSuccess};
  if (!device_is_sm90()) return {AttentionStatus::kNeedsSm90, cudaSuccess};
  if (p.batch == 0 || p.heads_q == 0 || p.seq_q == 0) return {};
  if (!heads_uniform(p.q_strides, p.heads_q) || !heads_uniform(p.k_strides, p.heads_kv) ||
      !heads_uniform(p.v_strides, p.heads_kv)) {
    return {AttentionStatus::kBadLayout, cudaSuccess};
  }
  // TMA maps need at least one row; with no keys every output row is 0 (lse -inf), which the
  // mma kernel produces without touching k or v.
  if (p.seq_k == 0) return launch_flash_mma(p, stream);
  *done = false;
  return {};
}

}  // namespace
}  // namespace sk::attn

namespace sk {

const char* flash_wgmma_config_name(FlashWgmmaConfig c) {
  switch (c) {
    case FlashWgmmaConfig::kAuto: return "auto";
    case FlashWgmmaConfig::k128x128_s2: return "128x128_s2";
    case FlashWgmmaConfig::k128x176_s2: return "128x176_s2";
    case FlashWgmmaConfig::k128x128_s3: return "128x128_s3";
    case FlashWgmmaConfig::k128x192_s2: return "128x192_s2";
    case FlashWgmmaConfig::k192x128_s2: return "192x128_s2";
    case FlashWgmmaConfig::k192x128_s3: return "192x128_s3";
  }
  return "?";
}

bool flash_wgmma_config_applies(FlashWgmmaConfig c, int64_t head_dim) {
  if (head_dim != 64 && head_dim != 128) return false;
  switch (c) {
    case FlashWgmmaConfig::k192x128_s2:
    case FlashWgmmaConfig::k192x128_s3:
      return head_dim == 64;
    case FlashWgmmaConfig::kAuto:
    case FlashWgmmaConfig::k128x128_s2:
    case FlashWgmmaConfig::k128x176_s2:
    case FlashWgmmaConfig::k128x128_s3:
    case FlashWgmmaConfig::k128x192_s2:
      return true;
  }
  return false;
}

AttentionResult launch_flash_wgmma_config(const AttentionParams& p, FlashWgmmaConfig c,
                                          bool persistent, cudaStream_t stream, void* workspace,
                                          size_t workspace_bytes) {
  bool done = false;
  const AttentionResult pre = attn::prefill_preamble(p, stream, &done);
  if (done) return pre;
  if (!flash_wgmma_config_applies(c, p.head_dim)) {
    return {AttentionStatus::kBadHeadDim, cudaSuccess};
  }
  return attn::dispatch_prefill(p, c, persistent, {workspace, workspace_bytes}, stream);
}

size_t flash_wgmma_persistent_workspace_bytes(const AttentionParams& p, FlashWgmmaConfig c) {
  if (check_attention_params(p) != AttentionStatus::kOk || !flash_wgmma_config_applies(c, p.head_dim) ||
      p.batch == 0 || p.heads_q == 0 || p.seq_q == 0 || p.seq_k == 0) {
    return 0;
  }
  size_t bytes = 0;
  auto size = [&](auto cfg) {
    using C = decltype(cfg);
    bytes = attn::tail_workspace_bytes<C>(attn::persistent_plan<C>(p, true));
    return AttentionResult{};
  };
  const FlashWgmmaConfig r = attn::resolve_config(p, c, true);
  if (p.head_dim == 64) {
    attn::visit_config<64>(r, size);
  } else {
    attn::visit_config<128>(r, size);
  }
  return bytes;
}

AttentionResult launch_flash_wgmma(const AttentionParams& p, cudaStream_t stream) {
  return launch_flash_wgmma_config(p, FlashWgmmaConfig::kAuto, false, stream);
}

AttentionResult launch_flash_wgmma_persistent(const AttentionParams& p, cudaStream_t stream) {
  return launch_flash_wgmma_config(p, FlashWgmmaConfig::kAuto, true, stream);
}

namespace attn {

bool wgmma_split_supported(const AttentionParams& p) {
  return device_is_sm90() && p.seq_k > 0 && p.q_strides.head == p.seq_q * p.head_dim &&
         p.q_strides.batch == p.heads_q * p.q_strides.head &&
         heads_uniform(p.k_strides, p.heads_kv) && heads_uniform(p.v_strides, p.heads_kv);
}

AttentionResult launch_wgmma_split(const AttentionParams& p, const SplitKV& s, int splits,
                                   cudaStream_t stream) {
  const int64_t row_blocks = ceil_div(s.rows, kWgmmaSplitRows);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(p.heads_kv * row_blocks),
                  static_cast<unsigned>(p.batch));
  return dispatch_split(p, s, grid, stream);
}

}  // namespace attn
}  // namespace sk
