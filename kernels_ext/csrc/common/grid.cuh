// Sizing launch grids on the host: integer rounding and the SM count of the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sk {

inline int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 132;
  return sms > 0 ? sms : 132;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int round_up32(int64_t a) { return static_cast<int>(ceil_div(a, 32) * 32); }

}  // namespace sk
