// Warp-level pieces of attention on mma.sync (sm_80+), shared by flash_mma (prefill) and
// decode: swizzled shared-memory tiles of 16-bit rows, their cp.async loader, the score
// product S = Q K^T, masking, and O += P V with P taken straight from the score registers.
//
// Shared-memory tiles hold `rows x D` 16-bit elements, one row per D * 2 bytes, split into
// 16-byte chunks; chunk c of row r lives at chunk position c ^ (r % 8). Eight consecutive rows
// at one logical chunk (what one 8x8 ldmatrix phase reads, plain or .trans) then land in eight
// different 16-byte bank groups, and a warp's cp.async writes of consecutive chunks do too.
//
// Fragment bookkeeping (layouts in tile/mma_sync.cuh). A warp owns MF fragments of 16 rows;
// scores of one key tile are s[MF][NT][4] (NT column tiles of 8 keys), the output accumulator
// o[MF][D / 8][4]. Row 2f + h of a thread (h = 0, 1) is fragment row g + 8h, g = lane / 4;
// its columns are 8j + 2t and 8j + 2t + 1, t = lane % 4.
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "../tile/cp_async.cuh"
#include "../tile/mma_sync.cuh"
#include "args.cuh"

namespace sk::attn {

template <int D>
struct SwizzledRows {
  static_assert(D % 64 == 0, "rows must span whole 128-byte swizzle groups");
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = D * 2;
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
  }
};

// Cooperative asynchronous copy of ROWS consecutive rows of D elements (row r at
// `first + r * D`: the rows of one head are contiguous) into a swizzled tile; rows
// r >= valid_rows (valid_rows >= 1) are zero-filled, their source address clamped to row 0
// (cp.async reads nothing for them, but the address must still be one the tensor owns).
// With the row stride a compile-time constant every copy addresses `first` plus an
// immediate offset, so the loop keeps one pointer live; only a partial tile (the sequence
// tail) pays for the clamp, on its own branch.
template <int ROWS, int D, int THREADS, class T>
__device__ __forceinline__ void load_rows_async(uint32_t tile, const T* first, int valid_rows,
                                                int tid) {
  constexpr int kChunks = SwizzledRows<D>::kChunks;
  static_assert(THREADS % kChunks == 0, "each thread must copy the same chunk column");
  constexpr int kRowsPerPass = THREADS / kChunks;
  static_assert(ROWS % kRowsPerPass == 0, "tile rows must divide evenly among the threads");
  const int r0 = tid / kChunks;
  const int c = tid % kChunks;
  const T* src = first + r0 * D + c * 8;
  if (valid_rows >= ROWS) {
#pragma unroll
    for (int i = 0; i < ROWS / kRowsPerPass; ++i) {
      const int r = r0 + i * kRowsPerPass;
      tile::cp_async_16(tile + SwizzledRows<D>::offset(r, c), src + i * kRowsPerPass * D, true);
    }
  } else {
#pragma unroll 1
    for (int i = 0; i < ROWS / kRowsPerPass; ++i) {
      const int r = r0 + i * kRowsPerPass;
      const bool valid = r < valid_rows;
      tile::cp_async_16(tile + SwizzledRows<D>::offset(r, c),
                        valid ? src + i * kRowsPerPass * D : first + c * 8, valid);
    }
  }
}

// One stage of the key/value pipeline: keys [j BN, (j + 1) BN) of K and of V (rows of D
// elements, contiguous) into that stage's tiles, KV_BYTES apart; keys past seq_k zero-filled.
template <int BN, int D, int THREADS, int KV_BYTES, class T>
__device__ __forceinline__ void load_kv_stage(uint32_t k_tiles, uint32_t v_tiles, const T* k,
                                              const T* v, int j, int stage, int seq_k, int tid) {
  const int key0 = j * BN;
  load_rows_async<BN, D, THREADS>(k_tiles + stage * KV_BYTES, k + static_cast<int64_t>(key0) * D,
                                  seq_k - key0, tid);
  load_rows_async<BN, D, THREADS>(v_tiles + stage * KV_BYTES, v + static_cast<int64_t>(key0) * D,
                                  seq_k - key0, tid);
}

// The same for rows at arbitrary addresses: row_ptr(r) gives local row r's address (only
// called for rows r < valid_rows; missing rows pass row 0's address, never dereferenced).
template <int ROWS, int D, int THREADS, class RowPtr>
__device__ __forceinline__ void gather_rows_async(uint32_t tile, RowPtr row_ptr, int valid_rows,
                                                  int tid) {
  constexpr int kChunks = SwizzledRows<D>::kChunks;
  constexpr int kTotal = ROWS * kChunks;
  static_assert(kTotal % THREADS == 0, "tile chunks must divide evenly among the threads");
#pragma unroll
  for (int i = 0; i < kTotal / THREADS; ++i) {
    const int idx = tid + i * THREADS;
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool valid = r < valid_rows;
    tile::cp_async_16(tile + SwizzledRows<D>::offset(r, c), row_ptr(valid ? r : 0) + c * 8, valid);
  }
}

// ldmatrix addresses. In every pattern below a lane's row is congruent to lane % 8 modulo 8,
// so its swizzle term is fixed per lane: with the tile base aligned to 256 bytes (kTileAlign),
// the address of chunk pair c is the lane's pair-0 address XOR (c << 5) (the chunk field lies
// below the row bits). One XOR per k-step then replaces one live register per (k-step, lane)
// address. The base is laundered through an empty asm so the compiler cannot hoist the
// per-step addresses out of the key loop as loop invariants, which costs a register each and
// made the widest configuration spill.
inline constexpr int kTileAlign = 256;

__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("" : "+r"(x));
  return x;
}

__device__ __forceinline__ uint32_t chunk_pair(uint32_t base, int pair) {
  return base ^ static_cast<uint32_t>(pair << 5);
}

// A fragments of MF x 16 rows starting at row0 of a swizzled [rows][D] tile, all of D.
template <int MF, int D>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[MF][D / 16][4], uint32_t tile,
                                                 int row0, int lane) {
  const uint32_t base = tile + SwizzledRows<D>::offset(row0 + (lane & 15), lane >> 4);
#pragma unroll
  for (int f = 0; f < MF; ++f) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      tile::ldmatrix_x4(a[f][kk], chunk_pair(base, kk) + 16 * f * SwizzledRows<D>::kRowBytes);
    }
  }
}

// s += Q K^T for the 8 * NT keys starting at key_row0 of the K tile (key_row0 % 16 == 0).
// With QF_FROM_SMEM the Q fragments are read from q_tile at q_row0 for each k-step (used where
// registers cannot hold all of Q); otherwise `qf` holds them.
template <class T, int MF, int NT, int D, bool QF_FROM_SMEM>
__device__ __forceinline__ void warp_scores(float (&s)[MF][NT][4],
                                            const uint32_t (&qf)[MF][D / 16][4], uint32_t q_tile,
                                            int q_row0, uint32_t k_tile, int key_row0, int lane) {
  static_assert(NT % 2 == 0, "key columns come in pairs of 8 (one ldmatrix.x4)");
  constexpr int kRowBytes = SwizzledRows<D>::kRowBytes;
  const uint32_t k_base =
      opaque(k_tile +
             SwizzledRows<D>::offset(key_row0 + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1));
  const uint32_t q_base = opaque(q_tile + SwizzledRows<D>::offset(q_row0 + (lane & 15), lane >> 4));
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[MF][4];
#pragma unroll
    for (int f = 0; f < MF; ++f) {
      if constexpr (QF_FROM_SMEM) {
        tile::ldmatrix_x4(a[f], chunk_pair(q_base, kk) + 16 * f * kRowBytes);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[f][i] = qf[f][kk][i];
      }
    }
    const uint32_t k_addr = chunk_pair(k_base, kk);
#pragma unroll
    for (int p = 0; p < NT / 2; ++p) {
      uint32_t b[4];  // b[0..1]: keys 16p..16p+7, b[2..3]: keys 16p+8..16p+15
      tile::ldmatrix_x4(b, k_addr + 16 * p * kRowBytes);
#pragma unroll
      for (int f = 0; f < MF; ++f) {
        tile::mma_m16n8k16<T>(s[f][2 * p], a[f], b[0], b[1]);
        tile::mma_m16n8k16<T>(s[f][2 * p + 1], a[f], b[2], b[3]);
      }
    }
  }
}

// Scores of keys a row may not see become -inf: the key of column pair j, element e, is
// key0 + 8j + 2t + e, and the thread's row 2f + h (fragment row g + 8h of fragment f) sees
// keys below visible(f, h) (see visible_keys()).
template <int MF, int NT, class Visible>
__device__ __forceinline__ void mask_scores(float (&s)[MF][NT][4], int key0, Visible visible,
                                            int lane) {
  const int col = key0 + 2 * (lane & 3);
#pragma unroll
  for (int f = 0; f < MF; ++f) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int limit = visible(f, h);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col + 8 * j + e >= limit) s[f][j][2 * h + e] = -CUDART_INF_F;
        }
      }
    }
  }
}

// o += P V: P = the probabilities of 8 * NT keys in score layout, V rows key_row0 .. of the
// V tile (key_row0 % 16 == 0). V is row-major [key][d], so its B fragments use ldmatrix.trans.
template <class T, int MF, int NT, int D>
__device__ __forceinline__ void warp_pv(float (&o)[MF][D / 8][4], const float (&p)[MF][NT][4],
                                        uint32_t v_tile, int key_row0, int lane) {
  static_assert(NT % 2 == 0, "keys come in k-steps of 16");
  constexpr int kRowBytes = SwizzledRows<D>::kRowBytes;
  const uint32_t v_base =
      opaque(v_tile +
             SwizzledRows<D>::offset(key_row0 + (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4));
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t a[MF][4];
#pragma unroll
    for (int f = 0; f < MF; ++f) tile::accumulators_to_a<T>(a[f], p[f][2 * kk], p[f][2 * kk + 1]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];  // b[0..1]: d 16dp..16dp+7, b[2..3]: d 16dp+8..16dp+15
      tile::ldmatrix_x4_trans(b, chunk_pair(v_base, dp) + 16 * kk * kRowBytes);
#pragma unroll
      for (int f = 0; f < MF; ++f) {
        tile::mma_m16n8k16<T>(o[f][2 * dp], a[f], b[0], b[1]);
        tile::mma_m16n8k16<T>(o[f][2 * dp + 1], a[f], b[2], b[3]);
      }
    }
  }
}

template <int MF, int NT>
__device__ __forceinline__ void zero(float (&acc)[MF][NT][4]) {
#pragma unroll
  for (int f = 0; f < MF; ++f)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[f][j][e] = 0.f;
}

}  // namespace sk::attn
