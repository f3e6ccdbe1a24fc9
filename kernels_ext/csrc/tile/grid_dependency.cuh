// Programmatic dependent launch (sm_90+) between split-KV decoding's two kernels.
//
// The combine kernel is launched with cudaLaunchAttributeProgrammaticStreamSerialization, so
// the GPU may start it before the split kernel has drained instead of after a full kernel
// boundary (at KV = 4k-16k the whole decode takes 5-20 us, and a kernel boundary is ~1-2 us of
// it). Correctness rests on one rule: the combine kernel executes wait_for_prior_grids() before
// its first read of anything the split kernel wrote; that instruction returns only when the
// split grid has completed and its memory is visible. launch_dependents() in the split
// kernel only lets the scheduler place combine blocks once every split block has started
// (so they can never take an SM from a split block that has not); it orders no memory.
// On targets below sm_90 both compile to nothing, and the host launches normally there
// (kernel_waits_for_prior_grids() decides).
#pragma once

#include <cuda_runtime.h>

#include "../tile/arch.cuh"

namespace sk::attn {

__device__ __forceinline__ void launch_dependents() {
#if SK_TILE_SM90
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prior_grids() {
#if SK_TILE_SM90
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether `kernel` may be launched as a programmatic dependent: only when the code that will
// run was compiled for sm_90+ (ptxVersion >= 90), i.e. contains wait_for_prior_grids(). A
// library built from compute_80 PTX and JIT-compiled on an H100 has no such wait, so the
// device's capability alone would not be a safe test.
inline bool kernel_waits_for_prior_grids(const void* kernel) {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.ptxVersion >= 90;
}

}  // namespace sk::attn
