// The kernel-side form of AttentionParams, shared by every attention variant: sizes as 32-bit
// ints (check_attention_params guarantees they fit), strides as 64-bit element counts.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "attention.h"

namespace sk::attn {

struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // [B, Hq, Sq] or null
  int64_t q_batch, q_head, q_row;
  int64_t k_batch, k_head, k_row;
  int64_t v_batch, v_head, v_row;
  int64_t o_batch, o_head, o_row;
  int batch, heads_q, heads_kv, group, seq_q, seq_k;
  float scale;
  int causal;
};

inline AttnArgs make_args(const AttentionParams& p) {
  AttnArgs a{};
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.o = p.o;
  a.lse = p.lse;
  a.q_batch = p.q_strides.batch, a.q_head = p.q_strides.head, a.q_row = p.q_strides.row;
  a.k_batch = p.k_strides.batch, a.k_head = p.k_strides.head, a.k_row = p.k_strides.row;
  a.v_batch = p.v_strides.batch, a.v_head = p.v_strides.head, a.v_row = p.v_strides.row;
  a.o_batch = p.o_strides.batch, a.o_head = p.o_strides.head, a.o_row = p.o_strides.row;
  a.batch = static_cast<int>(p.batch);
  a.heads_q = static_cast<int>(p.heads_q);
  a.heads_kv = static_cast<int>(p.heads_kv);
  a.group = static_cast<int>(p.heads_q / p.heads_kv);
  a.seq_q = static_cast<int>(p.seq_q);
  a.seq_k = static_cast<int>(p.seq_k);
  a.scale = p.scale;
  a.causal = p.causal ? 1 : 0;
  return a;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// SMs of the current device (132, an H100/H200's count, if it cannot be read).
inline int device_sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1) {
    return 132;
  }
  return sms;
}

// Keys visible to query i are [0, visible_keys(i)): all Sk keys, or with bottom-right causal
// alignment those with j <= i + Sk - Sq (<= 0 keys for the first Sq - Sk queries when Sq > Sk).
__host__ __device__ __forceinline__ int visible_keys(int i, int seq_q, int seq_k, int causal) {
  if (!causal) return seq_k;
  const int last = i + seq_k - seq_q + 1;
  return last < seq_k ? last : seq_k;
}

}  // namespace sk::attn
