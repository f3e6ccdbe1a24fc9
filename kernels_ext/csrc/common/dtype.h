// Plain C++ (no CUDA, no PyTorch): the vocabulary shared by launchers and bindings.
#pragma once

#include <cstdint>

namespace sk {

enum class DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// Rows are indexed with int inside kernels; the launchers refuse longer rows.
constexpr int64_t kMaxRowLength = (int64_t{1} << 31) - 1;

}  // namespace sk
