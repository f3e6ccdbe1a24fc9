// Programmatic dependent launch (sm_90+): a small second kernel that finishes what a big first
// one wrote (split-KV decoding's combine, cross-entropy's reduction over rows) is launched with
// cudaLaunchAttributeProgrammaticStreamSerialization, so the GPU may place it before the first
// has drained instead of after a full kernel boundary (~1-2 us, a good part of a 5-20 us decode).
// Correctness rests on one rule: the second kernel executes wait_for_prior_grids() before its
// first read of anything the first wrote; that instruction returns only when the first grid has
// completed and its memory is visible. launch_dependents() in the first kernel only lets the
// scheduler place the second's blocks once every block of the first has started (so they can
// never take an SM from a block that has not); it orders no memory. On targets below sm_90
// both compile to nothing, and the host launches normally there (kernel_waits_for_prior_grids()
// decides).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "arch.cuh"

namespace sk::tile {

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

// Launches `kernel` on `stream`, as a programmatic dependent of the stream's previous kernel where
// its code waits for it, as a plain launch elsewhere.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = kernel_waits_for_prior_grids(reinterpret_cast<const void*>(kernel)) ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace sk::tile
