// Asynchronous global -> shared copies for sm_80 and later (cp.async), the Ampere way of
// streaming tiles: each thread issues 16-byte copies, groups them with commit(), and waits
// with wait<N>() until at most N of its most recent groups are still in flight. A wait only
// covers the calling thread's copies: follow it with a barrier before other threads read.
//
// A multi-stage ring (S stages, tile j in stage j % S) pairs with these as
//   prologue: load tiles 0 .. S-2, commit() after each (even when a tile does not exist)
//   loop j:   wait<S - 2>(); __syncthreads();     // tile j landed, everyone left tile j - 1
//             load tile j + S - 1 into stage (j - 1) % S; commit();   // always commit
//             compute on stage j % S
// Committing an empty group keeps the count of outstanding groups what wait<> assumes.
//
// Out-of-range rows: pass valid = false and the 16 destination bytes are zero-filled without
// reading global memory (src-size 0); the source pointer must still be a valid address to
// form, so callers clamp it into the tensor.
#pragma once

#include <cstdint>

namespace sk::tile {

// 16 bytes global -> shared, bypassing L1 (.cg: tiles are read once per block); zero-fill
// when !valid. Both addresses must be 16-byte aligned.
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem),
               "r"(src_bytes)
               : "memory");
#endif
}

// 4 bytes global -> shared through L1 (.ca: the only form for sizes under 16), zero-filled when
// !valid. (The 16-byte form is above.)
__device__ __forceinline__ void cp_async_4(uint32_t smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes)
               : "memory");
#endif
}

// The same copy for a source known to be in bounds (no zero-fill operand, no predicate).
__device__ __forceinline__ void cp_async_4_always(uint32_t smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(gmem) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace sk::tile
