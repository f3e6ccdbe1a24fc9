// decode: split-KV attention for short queries (flash-decoding), on mma.sync (sm_80+).
//
// Decoding reads the whole KV cache for a handful of query rows, so it is bound by memory
// bandwidth, and one block per (batch, head) would leave most SMs idle. Two things fix that:
//  - the rows of every query head that shares a key/value head (G = Hq / Hkv heads x Sq
//    positions, contiguous in [B, Hq, Sq, D]) are packed into one row block, so each K/V
//    byte is read from memory once per group, not once per query head;
//  - the key range is split across blocks (and, for short row blocks, across the warps of a
//    block, merged in shared memory at the end), each block writing an fp32 partial output
//    normalised by its own softmax sum plus its log-sum-exp; a second kernel merges the
//    partials of each row by their LSEs.
// K/V tiles of 64 keys stream through a 2-3 stage cp.async ring so that enough bytes are in
// flight per SM to cover memory latency.
//
// On sm_90 with 64 or more rows per group (e.g. 16 positions x 8 grouped heads) the main loop
// is flash_wgmma.cu's split mode instead: there the mma.sync products, not memory, would set
// the pace. Both write the same partials, merged by decode_combine.
//
// Warp layout per block: WR row groups x WK key groups. A row group owns MFW fragments of 16
// rows; a key group takes 64 / WK keys of every stage. Few rows (Sq x G <= 32): 1 x 4 warps,
// each with all rows and a quarter of the keys; 128 rows: 4 x 1, each warp 32 rows.
//
// The combine step is what the first H200 run (results/h200/dev/attention_v1.txt) found slow:
// with 8 rows per K/V head (Sq = 1, GQA 8) it took ~25 us whatever the cache length (4k: 577
// GB/s, 16k: 1502), because every key group of every split was a partial (128 per row) and
// one warp walked a row's partials one dependent load at a time. Now the key groups of a block
// are merged in shared memory before anything is written (partials = splits), the combine
// gives each row a block whose warps split the partials with their loads in flight together,
// and on sm_90 it is a programmatic dependent launch (grid_dependency.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "../tile/online_softmax.cuh"
#include "args.cuh"
#include "attention.h"
#include "../tile/grid_dependency.cuh"
#include "merge_partials.cuh"
#include "mma_tile.cuh"
#include "split_kv.h"

namespace sk::attn {
namespace {

constexpr int kDecodeBN = 64;         // keys per stage
constexpr int kMaxDecodeQuery = 16;

template <int D_, int MFW_, int WR_, int WK_, int STAGES_>
struct DecodeConfig {
  static constexpr int D = D_;
  static constexpr int MFW = MFW_;
  static constexpr int WR = WR_;
  static constexpr int WK = WK_;
  static constexpr int kWarps = WR * WK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int BR = WR * MFW * 16;  // rows per block
  static constexpr int BN = kDecodeBN;
  static constexpr int KW = BN / WK;            // keys per warp per stage
  static constexpr int KC = KW < 32 ? KW : 32;  // keys per score sub-tile (register budget)
  static constexpr int NT = KC / 8;
  static constexpr int kStages = STAGES_;
  // Q stays in registers unless it would not fit beside 32 rows of D = 128 accumulators.
  static constexpr bool kQFromSmem = MFW * D > 128;
  static constexpr int kQBytes = BR * D * 2;
  static constexpr int kKVBytes = BN * D * 2;
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes + kTileAlign;
  static_assert(KC % 16 == 0 && KW % KC == 0, "each warp takes whole 16-key steps");
  // The key groups' results, merged after the main loop in the K/V stages' space: [WK][BR]
  // rows of D floats, padded by 8 so that a warp's float2 stores of 8 rows hit distinct banks,
  // then [WK][BR] LSEs.
  static constexpr int kMergeStride = D + 8;
  static constexpr int kMergeBytes = WK * BR * (kMergeStride + 1) * 4;
  static_assert(WK == 1 || kMergeBytes <= 2 * kStages * kKVBytes, "merge buffers fit the stages");
};

struct DecodeArgs {
  AttnArgs a;
  SplitKV s;
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, 2)
    decode_split(const __grid_constant__ DecodeArgs d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int D = C::D, MFW = C::MFW, BN = C::BN, NT = C::NT, S = C::kStages;
  const AttnArgs& a = d.a;
  tile::launch_dependents();  // the combine kernel may be placed once every split block runs
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_tile = (tile::smem_u32(smem) + kTileAlign - 1) & ~uint32_t{kTileAlign - 1};
  const uint32_t k_tiles = q_tile + C::kQBytes;
  const uint32_t v_tiles = k_tiles + S * C::kKVBytes;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wr = warp / C::WK;
  const int wk = warp % C::WK;
  const int split = blockIdx.x;
  const int hk = blockIdx.y % a.heads_kv;
  const int rb = blockIdx.y / a.heads_kv;
  const int b = blockIdx.z;
  const int seq_q = a.seq_q, seq_k = a.seq_k;
  const int row_base = rb * C::BR;  // first packed row (head-in-group * Sq + position)

  const T* q = static_cast<const T*>(a.q) + b * a.q_batch + hk * a.group * a.q_head;
  const T* k = static_cast<const T*>(a.k) + b * a.k_batch + hk * a.k_head;
  const T* v = static_cast<const T*>(a.v) + b * a.v_batch + hk * a.v_head;

  const int n_tiles = (seq_k + BN - 1) / BN;
  const int t0 = split * d.s.tiles_per_split;
  const int t1 = min(n_tiles, t0 + d.s.tiles_per_split);
  // Tiles ending at or before the first position's visible keys need no mask.
  const int unmasked_keys = max(visible_keys(0, seq_q, seq_k, a.causal), 0);

  gather_rows_async<C::BR, D, C::kThreads>(
      q_tile,
      [&](int r) {
        const int pr = row_base + r;
        return q + (pr / seq_q) * a.q_head + static_cast<int64_t>(pr % seq_q) * D;
      },
      d.s.rows - row_base, tid);
  auto load_kv = [&](int j, int stage) {
    load_kv_stage<BN, D, C::kThreads, C::kKVBytes>(k_tiles, v_tiles, k, v, j, stage, seq_k, tid);
  };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (t0 + i < t1) load_kv(t0 + i, i);
    tile::cp_async_commit();  // the first group carries Q too
  }

  const int q_row0 = wr * MFW * 16;
  tile::OnlineSoftmax<MFW> softmax;
  softmax.init(a.scale);
  float o[MFW][D / 8][4];
  zero(o);
  uint32_t qf[MFW][D / 16][4];
  tile::cp_async_wait<S - 2>();
  __syncthreads();
  if constexpr (!C::kQFromSmem) load_a_fragments<MFW, D>(qf, q_tile, q_row0, lane);

  for (int j = t0; j < t1; ++j) {
    const int i = j - t0;
    const int stage = i % S;
    tile::cp_async_wait<S - 2>();
    __syncthreads();  // tile j visible to all; every warp is done with tile j - 1's stage
    if (j + S - 1 < t1) load_kv(j + S - 1, (i + S - 1) % S);
    tile::cp_async_commit();

    const uint32_t k_stage = k_tiles + stage * C::kKVBytes;
    const uint32_t v_stage = v_tiles + stage * C::kKVBytes;
    const bool masked = (j + 1) * BN > unmasked_keys;
#pragma unroll 1
    for (int sub = 0; sub < C::KW / C::KC; ++sub) {
      const int key_row0 = wk * C::KW + sub * C::KC;  // within the stage
      float s[MFW][NT][4];
      zero(s);
      warp_scores<T, MFW, NT, D, C::kQFromSmem>(s, qf, q_tile, q_row0, k_stage, key_row0, lane);
      if (masked) {
        const int row0 = row_base + q_row0 + (lane >> 2);
        mask_scores<MFW, NT>(
            s, j * BN + key_row0,
            [&](int f, int hh) {
              return visible_keys((row0 + 16 * f + 8 * hh) % seq_q, seq_q, seq_k, a.causal);
            },
            lane);
      }
      float rescale[2 * MFW];
      softmax.step(s, rescale);
      tile::scale_rows(o, rescale);
      warp_pv<T, MFW, NT, D>(o, s, v_stage, key_row0, lane);
    }
  }

  float inv_sum[2 * MFW], lse[2 * MFW];
  softmax.finalize(inv_sum, lse);
  // Row r of the block's split goes to workspace row (b, hk, row_base + r), partial `split`.
  const int64_t group_row0 = (static_cast<int64_t>(b) * a.heads_kv + hk) * d.s.rows + row_base;
  if constexpr (C::WK == 1) {
#pragma unroll
    for (int r = 0; r < 2 * MFW; ++r) {
      const int f = r / 2, hh = r % 2;
      const int lr = q_row0 + 16 * f + (lane >> 2) + 8 * hh;
      if (row_base + lr >= d.s.rows) continue;
      const int64_t slot = (group_row0 + lr) * d.s.partials + split;
      float* out = d.s.o_part + slot * D + 2 * (lane & 3);
#pragma unroll
      for (int jj = 0; jj < D / 8; ++jj) {
        *reinterpret_cast<float2*>(out + 8 * jj) =
            make_float2(o[f][jj][2 * hh] * inv_sum[r], o[f][jj][2 * hh + 1] * inv_sum[r]);
      }
      if ((lane & 3) == 0) d.s.lse_part[slot] = lse[r];
    }
  } else {
    // The WK warps of a row group saw disjoint keys of the same rows: merge their normalised
    // outputs by their LSEs (as decode_combine does across splits) through shared memory,
    // which the K/V stages no longer need once every warp is past the loop and no copy is
    // in flight (the last groups committed in the loop are empty, but wait for all anyway).
    tile::cp_async_wait<0>();
    __syncthreads();
    unsigned char* stages = smem + (k_tiles - tile::smem_u32(smem));
    float* merge_o = reinterpret_cast<float*>(stages);                      // [WK][BR][stride]
    float* merge_lse = merge_o + C::WK * C::BR * C::kMergeStride;           // [WK][BR]
#pragma unroll
    for (int r = 0; r < 2 * MFW; ++r) {
      const int f = r / 2, hh = r % 2;
      const int lr = q_row0 + 16 * f + (lane >> 2) + 8 * hh;
      float* dst = merge_o + (wk * C::BR + lr) * C::kMergeStride + 2 * (lane & 3);
#pragma unroll
      for (int jj = 0; jj < D / 8; ++jj) {
        *reinterpret_cast<float2*>(dst + 8 * jj) =
            make_float2(o[f][jj][2 * hh] * inv_sum[r], o[f][jj][2 * hh + 1] * inv_sum[r]);
      }
      if ((lane & 3) == 0) merge_lse[wk * C::BR + lr] = lse[r];
    }
    __syncthreads();
    constexpr int kVecs = D / 4;  // float4 columns per row
    for (int item = tid; item < C::BR * kVecs; item += C::kThreads) {
      const int lr = item / kVecs;
      const int c = item % kVecs;
      if (row_base + lr >= d.s.rows) continue;
      float m = -CUDART_INF_F;
#pragma unroll
      for (int w = 0; w < C::WK; ++w) m = fmaxf(m, merge_lse[w * C::BR + lr]);
      // m = -inf: no key group saw a key (all weights 0, the row stays empty).
      float total = 0.f;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int w = 0; w < C::WK; ++w) {
        const float e = m == -CUDART_INF_F ? 0.f : expf(merge_lse[w * C::BR + lr] - m);
        const float4 x =
            *reinterpret_cast<const float4*>(merge_o + (w * C::BR + lr) * C::kMergeStride + 4 * c);
        total += e;
        acc.x = fmaf(e, x.x, acc.x), acc.y = fmaf(e, x.y, acc.y);
        acc.z = fmaf(e, x.z, acc.z), acc.w = fmaf(e, x.w, acc.w);
      }
      const float inv = total > 0.f ? 1.f / total : 0.f;
      const int64_t slot = (group_row0 + lr) * d.s.partials + split;
      *reinterpret_cast<float4*>(d.s.o_part + slot * D + 4 * c) =
          make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      if (c == 0) d.s.lse_part[slot] = total > 0.f ? m + logf(total) : -CUDART_INF_F;
    }
  }
#endif
}

// One block per output row (a grid-stride loop beyond the grid), merged by merge_partials.
template <class T, int D>
__global__ void __launch_bounds__(kCombineThreads)
    decode_combine(const __grid_constant__ DecodeArgs d) {
  __shared__ MergeSmem<D> sm;
  const AttnArgs& a = d.a;
  const int np = d.s.partials;
  const int64_t total_rows = static_cast<int64_t>(a.batch) * a.heads_q * a.seq_q;
  tile::wait_for_prior_grids();  // before the first read of the split kernel's partials
  for (int64_t row = blockIdx.x; row < total_rows; row += gridDim.x) {
    // Packed row -> (batch, query head, position); o uses the caller's strides.
    const int pos = static_cast<int>(row % a.seq_q);
    const int64_t bh = row / a.seq_q;
    const int h = static_cast<int>(bh % a.heads_q);
    const int b = static_cast<int>(bh / a.heads_q);
    T* out = static_cast<T*>(a.o) + b * a.o_batch + h * a.o_head + static_cast<int64_t>(pos) * D;
    merge_partials<T, D>(d.s.o_part + row * np * D, d.s.lse_part + row * np, np, out,
                         a.lse != nullptr ? a.lse + row : nullptr, sm);
  }
}

// The partition of the work, computed the same way for sizing and for launching.
struct DecodePlan {
  bool wgmma;      // flash_wgmma's split kernel runs the main loop
  int block_rows;  // rows per block (BR)
  int key_groups;  // WK: warps splitting each key tile (1 for wgmma)
  int tile_keys;   // keys per tile of the main kernel
  int rows;        // R
  int row_blocks;
  int splits;
  int tiles_per_split;
  int partials;
};

DecodePlan plan_decode(const AttentionParams& p, int sms, bool allow_wgmma) {
  DecodePlan plan{};
  plan.rows = static_cast<int>(p.heads_q / p.heads_kv * p.seq_q);
  plan.tile_keys = kDecodeBN;
  plan.wgmma = allow_wgmma && plan.rows >= 64 && wgmma_split_supported(p);
  if (plan.wgmma) {
    plan.block_rows = kWgmmaSplitRows, plan.key_groups = 1;
    plan.tile_keys = kWgmmaSplitKeys;
  } else if (plan.rows <= 16) {
    plan.block_rows = 16, plan.key_groups = 4;
  } else if (plan.rows <= 32) {
    plan.block_rows = 32, plan.key_groups = 4;
  } else if (plan.rows <= 64) {
    plan.block_rows = 64, plan.key_groups = 2;
  } else {
    plan.block_rows = 128, plan.key_groups = 1;
  }
  plan.row_blocks = static_cast<int>(ceil_div(plan.rows, plan.block_rows));
  const int n_tiles = static_cast<int>(ceil_div(p.seq_k, plan.tile_keys));
  const int64_t groups = p.batch * p.heads_kv * plan.row_blocks;
  // One wave of blocks (a partial second wave would cost a whole tile time), as many per SM as keep
  // about a D=128 block's bytes in flight: one at D=128 (at SQ=1, 8 groups, 16 splits beat 32 by
  // 1.01-1.05x and 64 by 1.07-1.37x on the H200, scripts/tune/specs/decode_splits.yaml,
  // results/h200/issue14/), two at D=64, whose tiles are half the bytes. Never more splits than
  // tiles, nor more partials per row than the combine kernel stages. A block's key groups are merged
  // before it writes, so each split is one partial.
  const int64_t per_sm = plan.wgmma ? 1 : std::max<int64_t>(1, 128 / std::max<int64_t>(p.head_dim, 1));
  const int64_t wanted = p.decode_splits > 0 ? int64_t{p.decode_splits}
                                             : per_sm * sms / std::max<int64_t>(groups, 1);
  int splits = static_cast<int>(std::min<int64_t>(wanted, kMaxPartials));
  splits = std::max(1, std::min(splits, n_tiles));
  plan.tiles_per_split = static_cast<int>(ceil_div(n_tiles, splits));
  plan.splits =
      plan.tiles_per_split > 0 ? static_cast<int>(ceil_div(n_tiles, plan.tiles_per_split)) : 1;
  plan.partials = plan.splits;
  return plan;
}

template <class T, class C>
cudaError_t run_split(const DecodeArgs& d, const DecodePlan& plan, cudaStream_t stream) {
  auto kernel = decode_split<T, C>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(plan.splits, d.a.heads_kv * plan.row_blocks, d.a.batch);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(d);
  return cudaGetLastError();
}

// One block per row (up to 2^20 blocks; the kernel loops beyond), launched as a programmatic
// dependent of the split kernel where its code waits for it (grid_dependency.cuh).
template <class T, int D>
cudaError_t run_combine(const DecodeArgs& d, cudaStream_t stream) {
  const int64_t rows = d.a.batch * d.a.heads_q * static_cast<int64_t>(d.a.seq_q);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 20)));
  return tile::launch_dependent(decode_combine<T, D>, grid, dim3(kCombineThreads), 0, stream, d);
}

template <class T, int D>
cudaError_t run_decode(const DecodeArgs& d, const DecodePlan& plan, cudaStream_t stream) {
  cudaError_t err;
  switch (plan.block_rows) {
    case 16:
      err = run_split<T, DecodeConfig<D, 1, 1, 4, 3>>(d, plan, stream);
      break;
    case 32:
      err = run_split<T, DecodeConfig<D, 2, 1, 4, 3>>(d, plan, stream);
      break;
    case 64:
      err = run_split<T, DecodeConfig<D, 2, 2, 2, 3>>(d, plan, stream);
      break;
    default:
      err = run_split<T, DecodeConfig<D, 2, 4, 1, 2>>(d, plan, stream);
      break;
  }
  if (err != cudaSuccess) return err;
  return run_combine<T, D>(d, stream);
}

cudaError_t combine(const AttentionParams& p, const DecodeArgs& d, cudaStream_t stream) {
  if (p.dtype == DType::kBFloat16) {
    return p.head_dim == 64 ? run_combine<__nv_bfloat16, 64>(d, stream)
                            : run_combine<__nv_bfloat16, 128>(d, stream);
  }
  return p.head_dim == 64 ? run_combine<__half, 64>(d, stream)
                          : run_combine<__half, 128>(d, stream);
}

}  // namespace
}  // namespace sk::attn

namespace sk::attn {
namespace {

size_t workspace_bytes(const AttentionParams& p, bool allow_wgmma) {
  if (check_attention_params(p) != AttentionStatus::kOk || p.seq_q < 1 ||
      p.seq_q > kMaxDecodeQuery) {
    return 0;
  }
  const DecodePlan plan = plan_decode(p, device_sm_count(), allow_wgmma);
  const int64_t rows = p.batch * p.heads_q * p.seq_q;
  return static_cast<size_t>(rows) * plan.partials * (p.head_dim + 1) * sizeof(float);
}

AttentionResult launch(const AttentionParams& p, void* workspace, size_t bytes, bool allow_wgmma,
                       cudaStream_t stream) {
  const AttentionStatus status = check_attention_params(p);
  if (status != AttentionStatus::kOk) return {status, cudaSuccess};
  if (p.seq_q < 1 || p.seq_q > kMaxDecodeQuery)
    return {AttentionStatus::kBadQueryLength, cudaSuccess};
  if (p.batch == 0 || p.heads_q == 0) return {};
  if (workspace == nullptr || bytes < workspace_bytes(p, allow_wgmma) ||
      (reinterpret_cast<uintptr_t>(workspace) & 15u) != 0) {
    return {AttentionStatus::kWorkspaceTooSmall, cudaSuccess};
  }
  const DecodePlan plan = plan_decode(p, device_sm_count(), allow_wgmma);
  DecodeArgs d{};
  d.a = make_args(p);
  const int64_t rows = p.batch * p.heads_q * p.seq_q;
  d.s.o_part = static_cast<float*>(workspace);
  d.s.lse_part = d.s.o_part + rows * plan.partials * p.head_dim;
  d.s.rows = plan.rows;
  d.s.tiles_per_split = plan.tiles_per_split;
  d.s.partials = plan.partials;
  if (plan.wgmma) {
    const AttentionResult r = launch_wgmma_split(p, d.s, plan.splits, stream);
    if (!r.ok()) return r;
    const cudaError_t err = combine(p, d, stream);
    if (err != cudaSuccess) return {AttentionStatus::kCudaError, err};
    return {};
  }
  cudaError_t err;
  if (p.dtype == DType::kBFloat16) {
    err = p.head_dim == 64 ? run_decode<__nv_bfloat16, 64>(d, plan, stream)
                           : run_decode<__nv_bfloat16, 128>(d, plan, stream);
  } else {
    err = p.head_dim == 64 ? run_decode<__half, 64>(d, plan, stream)
                           : run_decode<__half, 128>(d, plan, stream);
  }
  if (err != cudaSuccess) return {AttentionStatus::kCudaError, err};
  return {};
}

}  // namespace
}  // namespace sk::attn

namespace sk {

size_t attention_decode_workspace_bytes(const AttentionParams& p) {
  return attn::workspace_bytes(p, true);
}

AttentionResult launch_attention_decode(const AttentionParams& p, void* workspace,
                                        size_t workspace_bytes, cudaStream_t stream) {
  return attn::launch(p, workspace, workspace_bytes, true, stream);
}

size_t attention_decode_mma_workspace_bytes(const AttentionParams& p) {
  return attn::workspace_bytes(p, false);
}

AttentionResult launch_attention_decode_mma(const AttentionParams& p, void* workspace,
                                            size_t workspace_bytes, cudaStream_t stream) {
  return attn::launch(p, workspace, workspace_bytes, false, stream);
}

}  // namespace sk
