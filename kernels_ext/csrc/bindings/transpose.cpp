// Hand-written implementation of the `impl: custom` transpose op (op table:
// csrc/transpose/ops.yaml). The generated wrapper has checked the dtype, the rank (>= 2) and
// the device and set the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <utility>
#include <vector>

#include "../transpose/tile_order.cuh"
#include "../transpose/transpose.h"
#include "binding_utils.h"

namespace sk::impl {

namespace {

// ldsm variants name their block in elements of x (rows x columns); plain ldsm is 32 x 32.
// A trailing _el loads x evict_last (TransposeArgs::keep_loads).
bool keeps_loads(c10::string_view variant) {
  return variant.size() > 3 && variant.substr(variant.size() - 3) == "_el";
}

c10::string_view without_el(c10::string_view variant) {
  return keeps_loads(variant) ? variant.substr(0, variant.size() - 3) : variant;
}

int ldsm_subs_of(c10::string_view variant) {
  variant = without_el(variant);
  if (variant == "ldsm_32x64") return 12;
  if (variant == "ldsm_64x32" || variant == "ldsm_64x32_flat") return 21;
  if (variant == "ldsm_64x64") return 22;
  return 11;
}

bool is_ldsm(c10::string_view variant) { return variant.substr(0, 4) == "ldsm"; }

// auto: the smem kernel, except for the 16-bit layouts its word path does not take; those follow
// the odd-shape sweep's rule (launch_transpose_odd16, csrc/transpose/odd16_rule.h). ldsm trails
// smem on every aligned case (4-14%). regs and the ldsm blocks are selected by name;
// they fall back to smem where they do not apply. `band`: the caller's, 0 for automatic.
cudaError_t launch(TransposeArgs a, c10::string_view variant, int64_t band, cudaStream_t stream) {
  const bool sixteen = a.dtype != DType::kFloat32;
  if (variant == "auto" && sixteen && !transpose_words_fit(a)) {
    a.band = band;
    return launch_transpose_odd16(a, stream);
  }
  if (variant == "regs" && transpose_regs_supports(a)) return launch_transpose_regs(a, stream);
  if (is_ldsm(variant) && sixteen) return launch_transpose_ldsm(a, stream);
  return launch_transpose(a, stream);
}

}  // namespace

at::Tensor transpose(const at::Tensor& x, c10::string_view variant, int64_t band) {
  const int64_t rows = x.size(-2);
  const int64_t cols = x.size(-1);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  at::Tensor y = at::empty(shape, x.options());
  if (y.numel() == 0) return y;
  // Batch dims collapse into one strided dim when they can (a view), else this copies; rows must
  // be contiguous for the kernel, so a column-strided x is made contiguous first.
  at::Tensor v = x.reshape({-1, rows, cols});
  if (v.stride(2) != 1 && cols > 1) v = v.contiguous();
  TransposeArgs a{};
  a.dtype = sk::bind::dtype_of(x, "transpose", "x");
  a.x = v.data_ptr();
  a.y = y.data_ptr();
  a.batch = v.size(0);
  a.rows = rows;
  a.cols = cols;
  a.batch_stride = v.stride(0);
  a.row_stride = v.stride(1);
  // band 0: the measured pick (auto_band: bands of 128 row tiles where rows of y are 128 KiB or
  // longer, row order elsewhere; the odd 16-bit path has its own).
  a.band = band > 0 ? band : auto_band(rows, x.element_size());
  a.tile_words = variant == "smem_w16" ? 16 : variant == "smem_w32" ? 32 : (variant == "smem_w64" ? 64 : 0);
  a.ldsm_subs = ldsm_subs_of(variant);
  a.flatten_batch = without_el(variant) == "ldsm_64x32_flat";
  a.keep_loads = keeps_loads(variant);
  sk::bind::check_launch(launch(a, variant, band, sk::bind::current_stream()), "transpose");
  return y;
}

}  // namespace sk::impl
