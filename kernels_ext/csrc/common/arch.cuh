// Facts about the architecture being compiled (device passes see __CUDA_ARCH__; the
// host pass gets the values of the most common targets).
#pragma once

namespace sk {

// The most threads one SM holds, for the architecture being compiled (compute
// capability 7.5: 1024; 8.6, 8.7, 8.9, 12.x: 1536; 8.0, 9.0, 10.x: 2048), so a tile's
// register cap is one the SM can honour (ptxas ignores a larger one, with a warning).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
constexpr int kMaxThreadsPerSm = 1024;
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || \
                                 __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
constexpr int kMaxThreadsPerSm = 1536;
#else
constexpr int kMaxThreadsPerSm = 2048;
#endif

}  // namespace sk
