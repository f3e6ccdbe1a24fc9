// flash_mma: FlashAttention-2 style forward on mma.sync m16n8k16 (sm_80 and later).
//
// One block computes BM = WARPS x MF x 16 query rows of one (batch, head): each warp owns
// MF 16-row fragments end to end (scores, softmax, output), so no warp ever waits on another
// except at the one barrier per key tile that hands over the next K/V stage. K and V tiles of
// BN keys stream through two shared-memory stages with cp.async: the loads of tile j + 1 fly
// while tile j is computed. Scores stay in registers and become the A operand of P V
// directly; the softmax is online (one rescale of the output per tile, exp2 with the scale
// folded in, see tile/online_softmax.cuh). Causal blocks stop at the last key tile their
// last row can see, and only tiles that cross the diagonal (or the key tail) are masked.
//
// Q lives in registers where they allow it (MF x D / 16 x 4 words). At D = 128 with two
// fragments per warp it does not fit beside the 128 output accumulators, so that
// configuration re-reads Q from shared memory each tile: two fragments per warp halve the
// shared-memory traffic of K and V per FLOP, which is the tighter limit on Hopper (ldmatrix
// bandwidth, not tensor throughput, bounds a one-fragment warp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../tile/online_softmax.cuh"
#include "args.cuh"
#include "attention.h"
#include "mma_tile.cuh"

namespace sk::attn {
namespace {

template <int D_, int WARPS, int MF_, int BN_, int BNC_, bool Q_FROM_SMEM, int MIN_BLOCKS>
struct MmaConfig {
  static constexpr int D = D_;
  static constexpr int kThreads = 32 * WARPS;
  static constexpr int MF = MF_;
  static constexpr int BM = WARPS * MF * 16;
  static constexpr int BN = BN_;
  static constexpr int BNC = BNC_;  // keys per score sub-tile (registers: MF x BNC / 2 floats)
  static constexpr int NT = BNC / 8;
  static constexpr bool kQFromSmem = Q_FROM_SMEM;
  static constexpr int kMinBlocks = MIN_BLOCKS;
  static constexpr int kQBytes = BM * D * 2;
  static constexpr int kKVBytes = BN * D * 2;
  // Q | K stage 0, 1 | V stage 0, 1, after aligning the dynamic base to kTileAlign.
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes + kTileAlign;
  static_assert(BNC % 16 == 0 && BN % BNC == 0, "a stage holds whole sub-tiles of 16-key steps");
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    flash_mma_fwd(const __grid_constant__ AttnArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int D = C::D, MF = C::MF, BM = C::BM, BN = C::BN, NT = C::NT;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_tile = (tile::smem_u32(smem) + kTileAlign - 1) & ~uint32_t{kTileAlign - 1};
  const uint32_t k_tiles = q_tile + C::kQBytes;
  const uint32_t v_tiles = k_tiles + 2 * C::kKVBytes;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  // Causal blocks with more rows see more keys: launch those first so the long ones do not
  // start last and leave the machine idle at the end.
  const int m_block = args.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int hk = h / args.group;
  const int m0 = m_block * BM;
  const int seq_q = args.seq_q, seq_k = args.seq_k;

  const T* q = static_cast<const T*>(args.q) + b * args.q_batch + h * args.q_head;
  const T* k = static_cast<const T*>(args.k) + b * args.k_batch + hk * args.k_head;
  const T* v = static_cast<const T*>(args.v) + b * args.v_batch + hk * args.v_head;

  const int last_row = min(m0 + BM, seq_q) - 1;
  const int n_keys = visible_keys(last_row, seq_q, seq_k, args.causal);
  const int n_tiles = n_keys > 0 ? (n_keys + BN - 1) / BN : 0;
  // Tiles every row of the block sees whole need no mask.
  const int n_unmasked = max(visible_keys(m0, seq_q, seq_k, args.causal), 0) / BN;

  load_rows_async<BM, D, C::kThreads>(q_tile, q + static_cast<int64_t>(m0) * D, seq_q - m0, tid);
  auto load_kv = [&](int j, int stage) {
    load_kv_stage<BN, D, C::kThreads, C::kKVBytes>(k_tiles, v_tiles, k, v, j, stage, seq_k, tid);
  };
  if (n_tiles > 0) load_kv(0, 0);
  tile::cp_async_commit();

  const int q_row0 = warp * MF * 16;  // this warp's first row within the block
  tile::OnlineSoftmax<MF> softmax;
  softmax.init(args.scale);
  float o[MF][D / 8][4];
  zero(o);
  uint32_t qf[MF][D / 16][4];
  tile::cp_async_wait<0>();
  __syncthreads();
  if constexpr (!C::kQFromSmem) load_a_fragments<MF, D>(qf, q_tile, q_row0, lane);

  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j & 1;
    tile::cp_async_wait<0>();
    __syncthreads();  // tile j visible to all; every warp is done with tile j - 1's stage
    if (j + 1 < n_tiles) load_kv(j + 1, stage ^ 1);
    tile::cp_async_commit();

    const uint32_t k_stage = k_tiles + stage * C::kKVBytes;
    const uint32_t v_stage = v_tiles + stage * C::kKVBytes;
#pragma unroll 1
    for (int sub = 0; sub < BN / C::BNC; ++sub) {
      float s[MF][NT][4];
      zero(s);
      warp_scores<T, MF, NT, D, C::kQFromSmem>(s, qf, q_tile, q_row0, k_stage, sub * C::BNC, lane);
      if (j >= n_unmasked) {
        const int row0 = m0 + q_row0 + (lane >> 2);
        mask_scores<MF, NT>(
            s, j * BN + sub * C::BNC,
            [&](int f, int hh) {
              return visible_keys(row0 + 16 * f + 8 * hh, seq_q, seq_k, args.causal);
            },
            lane);
      }
      float rescale[2 * MF];
      softmax.step(s, rescale);
      tile::scale_rows(o, rescale);
      warp_pv<T, MF, NT, D>(o, s, v_stage, sub * C::BNC, lane);
    }
  }

  float inv_sum[2 * MF], lse[2 * MF];
  softmax.finalize(inv_sum, lse);
  T* out = static_cast<T*>(args.o) + b * args.o_batch + h * args.o_head;
#pragma unroll
  for (int r = 0; r < 2 * MF; ++r) {
    const int f = r / 2, hh = r % 2;
    const int row = m0 + q_row0 + 16 * f + (lane >> 2) + 8 * hh;
    if (row >= seq_q) continue;
    T* out_row = out + static_cast<int64_t>(row) * D + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<uint32_t*>(out_row + 8 * j) =
          tile::pack2<T>(o[f][j][2 * hh] * inv_sum[r], o[f][j][2 * hh + 1] * inv_sum[r]);
    }
    if (args.lse != nullptr && (lane & 3) == 0) {
      args.lse[(static_cast<int64_t>(b) * args.heads_q + h) * seq_q + row] = lse[r];
    }
  }
#endif
}

template <class T, class C>
cudaError_t run(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_mma_fwd<T, C>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((a.seq_q + C::BM - 1) / C::BM, a.heads_q, a.batch);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

// The configurations, named as the bench prints them; index 0 is the default.
using D64Default = MmaConfig<64, 4, 2, 64, 64, false, 2>;   // 128 rows x 64 keys, Q in registers
using D64Narrow = MmaConfig<64, 4, 1, 64, 64, false, 3>;    // 64 rows, 3 blocks per SM
using D128Default = MmaConfig<128, 4, 2, 64, 32, true, 2>;  // 128 rows, Q re-read from smem
using D128QRegs = MmaConfig<128, 4, 1, 64, 64, false, 2>;   // 64 rows, Q in registers

constexpr const char* kD64Names[] = {"d64_m128_n64_qreg", "d64_m64_n64_qreg"};
constexpr const char* kD128Names[] = {"d128_m128_n64x32_qsmem", "d128_m64_n64_qreg"};

template <class T>
cudaError_t dispatch(const AttnArgs& a, int head_dim, int config, cudaStream_t stream) {
  if (head_dim == 64) {
    return config == 1 ? run<T, D64Narrow>(a, stream) : run<T, D64Default>(a, stream);
  }
  return config == 1 ? run<T, D128QRegs>(a, stream) : run<T, D128Default>(a, stream);
}

}  // namespace
}  // namespace sk::attn

namespace sk {

int flash_mma_config_count(int head_dim) { return head_dim == 64 || head_dim == 128 ? 2 : 0; }

const char* flash_mma_config_name(int head_dim, int config) {
  if (config < 0 || config >= flash_mma_config_count(head_dim)) return "";
  return head_dim == 64 ? attn::kD64Names[config] : attn::kD128Names[config];
}

AttentionResult launch_flash_mma_config(const AttentionParams& p, int config, cudaStream_t stream) {
  const AttentionStatus status = check_attention_params(p);
  if (status != AttentionStatus::kOk) return {status, cudaSuccess};
  if (config >= flash_mma_config_count(static_cast<int>(p.head_dim))) {
    return {AttentionStatus::kBadShape, cudaSuccess};
  }
  if (p.batch == 0 || p.heads_q == 0 || p.seq_q == 0) return {};
  const attn::AttnArgs a = attn::make_args(p);
  const int d = static_cast<int>(p.head_dim);
  const cudaError_t err = p.dtype == DType::kBFloat16
                              ? attn::dispatch<__nv_bfloat16>(a, d, config, stream)
                              : attn::dispatch<__half>(a, d, config, stream);
  if (err != cudaSuccess) return {AttentionStatus::kCudaError, err};
  return {};
}

AttentionResult launch_flash_mma(const AttentionParams& p, cudaStream_t stream) {
  return launch_flash_mma_config(p, -1, stream);
}

}  // namespace sk
