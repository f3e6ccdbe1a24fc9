// Hand-written implementation of the `impl: custom` gemv op (op table: csrc/gemv/ops.yaml).
// The generated wrapper has checked dtypes, shapes ([M, K], [*B, K] of rank <= 2), x's
// contiguity, the variant's name and the devices, and set the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "../gemm/gemm.h"
#include "../gemv/gemv.h"
#include "binding_utils.h"

namespace sk::impl {

at::Tensor gemv(const at::Tensor& a, const at::Tensor& x, c10::string_view variant) {
  SK_CHECK_VALUE(a.stride(1) == 1 || a.size(1) <= 1, "solbench_kernels::gemv: rows of a must be contiguous (stride ",
                    a.stride(1), ")");
  const bool vector = x.dim() == 1;
  const int64_t batch = vector ? 1 : x.size(0);
  at::Tensor y = vector ? at::empty({a.size(0)}, a.options()) : at::empty({batch, a.size(0)}, a.options());
  if (y.numel() == 0) return y;
  if (a.size(1) == 0) return y.zero_();  // empty dot products
  const GemvArgs g{sk::bind::dtype_of(a, "gemv", "a"), a.data_ptr(), x.data_ptr(), y.data_ptr(), a.size(0),
                   a.size(1), batch, a.stride(0), a.size(1)};
  // decode: the GEMM family's small-M kernel (y = x a^T with the batch as its M), for 16-bit inputs in
  // whole 16-byte packs and batches of at most 16; elsewhere the CUDA-core kernel. auto, as measured on
  // the H200 (solbench run --ops gemv, results/h200/issue15/2026-12-02/): rows shorter than 1024 take
  // mma (K = 128, B = 4: SOL 0.56 against decode's 0.26), batches of 2 and more decode (B = 8, M =
  // 16384, K = 8192: 0.87 against mma's 0.85 and simt's 0.67), one vector simt (0.91 against 0.86).
  const bool packed = gemv_mma_supports(g);
  const bool decode_ok = packed && batch <= gemm::kDecodeMmaMaxM;
  const bool automatic = variant == "auto";
  const bool decode = decode_ok && (variant == "decode" || (automatic && batch >= 2 && g.cols >= 1024));
  const bool mma = packed && (variant == "mma" || (automatic && g.cols < 1024));
  cudaStream_t stream = sk::bind::current_stream();
  if (decode) {
    gemm::MatmulArgs m{};
    m.a = g.x;
    m.w = g.a;
    m.c = g.y;
    m.m = batch;
    m.n = g.rows;
    m.k = g.cols;
    m.lda = g.ldx;
    m.ldw = g.lda;
    m.ldc = g.rows;
    const gemm::Status st = gemm::launch_gemm_decode_mma(g.dtype, m, stream);
    SK_CHECK_VALUE(st.ok(), "solbench_kernels::gemv: ", st.message);
    return y;
  }
  sk::bind::check_launch(mma ? launch_gemv_mma(g, stream) : launch_gemv(g, stream), "gemv");
  return y;
}

}  // namespace sk::impl
