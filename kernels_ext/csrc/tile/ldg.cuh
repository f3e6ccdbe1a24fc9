// Global loads into registers with cache hints (sm_80+), for kernels that stream an operand
// through registers instead of shared memory (decode GEMMs, GEMVs), and the L2 eviction
// policies those hints and TMA loads take.
//
//   ldg_stream_16(p, policy): 16 bytes read once: no L1 allocation (the L1 stays for the
//     small operand every warp re-reads), the L2 line marked by `policy` (evict_first for data
//     read exactly once), and an L2 prefetch of the enclosing 256-byte block, so DRAM sees
//     256-byte requests even when a warp's instruction touches 64 bytes of each of 8 rows.
//   ldg_16(p): 16 bytes through L1 (read-only path): operands many warps of an SM re-read.
//   *_if(..., pred): the same, predicated inside the asm: zeros and no access when !pred.
//   prefetch_l2_if(p, pred): the line holding p fetched into L2, nothing returned.
// Both need 16-byte aligned addresses. On targets below sm_80 they compile to __trap().
#pragma once

#include <vector_types.h>

#include <cstdint>

namespace sk::tile {

// L2 eviction policies (createpolicy, sm_80+): operands re-read by many CTAs stay
// (evict_last); streamed-once data goes first (evict_first).
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
#endif
  return p;
}

__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
  return p;
}

__device__ __forceinline__ uint4 ldg_stream_16(const void* p, uint64_t policy) {
  uint4 v{0u, 0u, 0u, 0u};   // overwritten by the asm (the host pass sees the #else)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(policy));
#else
  __trap();
#endif
  return v;
}

// As ldg_stream_16, reading nothing and returning zeros when !pred (the load is predicated
// inside the asm, so callers in unrolled loops get no branches).
__device__ __forceinline__ uint4 ldg_stream_16_if(const void* p, uint64_t policy, bool pred) {
  uint4 v{0u, 0u, 0u, 0u};   // overwritten by the asm (the host pass sees the #else)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "{\n.reg .pred q;\nsetp.ne.b32 q, %6, 0;\n"
      "mov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"
      "@q ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(policy), "r"(static_cast<int>(pred)));
#else
  __trap();
#endif
  return v;
}

// How a streamed operand is loaded (ldg_stream_16_as_if): the full hint set of
// ldg_stream_16_if, or parts of it. The decode GEMM's shapes name one (gemm_decode_mma.cu);
// scripts/tune/decode_probe.cu measures each beside a plain read.
enum class StreamLoad {
  kEvictFirst256,  // L1::no_allocate, L2 evict_first, L2::256B prefetch (ldg_stream_16_if)
  kPrefetch256,    // L1::no_allocate, L2::256B prefetch, default L2 policy
  kNoAllocate,     // L1::no_allocate only
  kReadOnly,       // ld.global.nc: the read-only path, allocating in L1 (what __ldg does)
};

template <StreamLoad kHow>
__device__ __forceinline__ uint4 ldg_stream_16_as_if(const void* p, uint64_t policy, bool pred) {
  if constexpr (kHow == StreamLoad::kEvictFirst256) return ldg_stream_16_if(p, policy, pred);
  uint4 v{0u, 0u, 0u, 0u};   // overwritten by the asm (the host pass sees the #else)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SK_LDG_PRED_V4(INSTR)                                                              \
  asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\n"                               \
               "mov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"          \
               "@q " INSTR " {%0, %1, %2, %3}, [%4];\n}"                                   \
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                               \
               : "l"(p), "r"(static_cast<int>(pred)))
  if constexpr (kHow == StreamLoad::kPrefetch256) {
    SK_LDG_PRED_V4("ld.global.nc.L1::no_allocate.L2::256B.v4.u32");
  } else if constexpr (kHow == StreamLoad::kNoAllocate) {
    SK_LDG_PRED_V4("ld.global.nc.L1::no_allocate.v4.u32");
  } else {
    SK_LDG_PRED_V4("ld.global.nc.v4.u32");
  }
#undef SK_LDG_PRED_V4
  (void)policy;
#else
  __trap();
#endif
  return v;
}

// As ldg_16, zeros when !pred.
__device__ __forceinline__ uint4 ldg_16_if(const void* p, bool pred) {
  uint4 v{0u, 0u, 0u, 0u};   // overwritten by the asm (the host pass sees the #else)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\n"
      "mov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"
      "@q ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
#else
  __trap();
#endif
  return v;
}

// Asks L2 for the 128-byte line holding p, when pred: no register, no L1, nothing to wait for.
// A streaming kernel whose registers hold only a chunk or two of its operand issues these a few
// chunks ahead, so that more of the stream is in flight than its registers could hold.
__device__ __forceinline__ void prefetch_l2_if(const void* p, bool pred) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %1, 0;\n@q prefetch.global.L2 [%0];\n}"
               :: "l"(p), "r"(static_cast<int>(pred)));
#else
  (void)p, (void)pred;
#endif
}

// One 16-bit element marked to stay: L1 evict_last and the L2 line under `policy`
// (l2_policy_evict_last). torch.compile's Triton transpose loads its input this way; so does the
// ldsm transpose on auto's odd 16-bit path (transpose_ldsm.cu, 2-7% faster than ld.global.nc on an
// H100). Any alignment, unlike the 16-byte loads above.
__device__ __forceinline__ uint16_t ldg_u16_evict_last(const uint16_t* p, uint64_t policy) {
  unsigned short v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("ld.global.L1::evict_last.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(policy));
#else
  __trap();
#endif
  return v;
}

__device__ __forceinline__ uint4 ldg_16(const void* p) {
  uint4 v{0u, 0u, 0u, 0u};   // overwritten by the asm (the host pass sees the #else)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
#else
  __trap();
#endif
  return v;
}

}  // namespace sk::tile
