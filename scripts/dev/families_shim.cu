// extern "C" entry points over the launchers of issue 15's kernel families, so that
// scripts/dev/families_bench.py can drive them through ctypes (raw pointers, sizes and the
// stream) without building the PyTorch extension. Dev tooling: the library's own bindings are
// kernels_ext/csrc/bindings/*.cpp. Every function returns the cudaError_t of the launch.
#include <cuda_runtime.h>

#include <cstdint>

#include "../../kernels_ext/csrc/cross_entropy/cross_entropy.h"
#include "../../kernels_ext/csrc/embedding/embedding.h"
#include "../../kernels_ext/csrc/gemv/gemv.h"
#include "../../kernels_ext/csrc/histogram/histogram.h"
#include "../../kernels_ext/csrc/nms/nms.h"
#include "../../kernels_ext/csrc/quant/quant.h"
#include "../../kernels_ext/csrc/rope/rope.h"
#include "../../kernels_ext/csrc/transpose/transpose.h"

namespace {
sk::DType dt(int code) { return static_cast<sk::DType>(code); }
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

extern "C" {

// strides: q (token, head), k, q_out, k_out, then the cache's token stride: 9 values.
int sk_rope(int dtype, const void* q, const void* k, const void* cos_sin, void* q_out, void* k_out,
            int64_t tokens, int heads, int kv_heads, int head_dim, const int64_t* strides, int neox,
            void* stream) {
  sk::RopeArgs a{};
  a.dtype = dt(dtype);
  a.q = q, a.k = k, a.cos_sin = cos_sin, a.q_out = q_out, a.k_out = k_out;
  a.tokens = tokens, a.heads = heads, a.kv_heads = kv_heads, a.head_dim = head_dim;
  a.q_stride[0] = strides[0], a.q_stride[1] = strides[1];
  a.k_stride[0] = strides[2], a.k_stride[1] = strides[3];
  a.q_out_stride[0] = strides[4], a.q_out_stride[1] = strides[5];
  a.k_out_stride[0] = strides[6], a.k_out_stride[1] = strides[7];
  a.cos_sin_stride = strides[8];
  a.neox = neox != 0;
  return sk::launch_rope(a, st(stream));
}

int sk_transpose(int dtype, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols,
                 int64_t batch_stride, int64_t row_stride, void* stream) {
  const sk::TransposeArgs a{dt(dtype), x, y, batch, rows, cols, batch_stride, row_stride};
  return sk::launch_transpose(a, st(stream));
}

int64_t sk_cross_entropy_workspace(int dtype, const void* logits, int64_t rows, int64_t vocab, int reduction) {
  const sk::CrossEntropyArgs a{dt(dtype), logits, nullptr, nullptr, rows, vocab, 0,
                               static_cast<sk::Reduction>(reduction)};
  return sk::cross_entropy_workspace_bytes(a);
}

int sk_cross_entropy(int dtype, const void* logits, const int64_t* target, float* out, int64_t rows,
                     int64_t vocab, int64_t ignore_index, int reduction, void* workspace, void* stream) {
  const sk::CrossEntropyArgs a{dt(dtype), logits, target, out, rows, vocab, ignore_index,
                               static_cast<sk::Reduction>(reduction)};
  return sk::launch_cross_entropy(a, workspace, st(stream));
}

int sk_embedding(int dtype, const void* table, const int64_t* indices, void* out, int64_t n, int64_t vocab,
                 int64_t dim, int64_t table_stride, void* status, void* stream) {
  const sk::EmbeddingArgs a{dt(dtype), table, indices, out, n, vocab, dim, table_stride,
                            static_cast<unsigned long long*>(status)};
  return sk::launch_embedding(a, st(stream));
}

int sk_histogram(int type, const void* x, int64_t n, int bins, int64_t* counts, void* stream) {
  const sk::HistogramArgs a{static_cast<sk::IntType>(type), x, n, bins, counts};
  return sk::launch_histogram(a, st(stream));
}

int sk_fp8_quant(int dtype, const void* x, const float* scale, void* q, int64_t n, void* stream) {
  return sk::launch_fp8_quant(dt(dtype), x, scale, static_cast<uint8_t*>(q), n, st(stream));
}

int sk_fp8_quant_dynamic(int dtype, const void* x, void* q, float* scale_out, void* amax_bits, int64_t n,
                         void* stream) {
  return sk::launch_fp8_quant_dynamic(dt(dtype), x, static_cast<uint8_t*>(q), scale_out,
                                      static_cast<unsigned*>(amax_bits), n, st(stream));
}

int sk_fp8_quant_rows(int dtype, const void* x, void* q, float* scales, int64_t rows, int64_t cols,
                      void* stream) {
  return sk::launch_fp8_quant_rows(dt(dtype), x, static_cast<uint8_t*>(q), scales, rows, cols, st(stream));
}

int sk_fp8_dequant(int dtype, const void* q, const float* scale, int per_row, void* y, int64_t rows,
                   int64_t cols, void* stream) {
  return sk::launch_fp8_dequant(dt(dtype), static_cast<const uint8_t*>(q), scale, per_row != 0, y, rows, cols,
                                st(stream));
}

int sk_gemv(int dtype, const void* a, const void* x, void* y, int64_t rows, int64_t cols, int64_t batch,
            int64_t lda, int64_t ldx, void* stream) {
  const sk::GemvArgs g{dt(dtype), a, x, y, rows, cols, batch, lda, ldx};
  return sk::launch_gemv(g, st(stream));
}

int sk_gemv_mma(int dtype, const void* a, const void* x, void* y, int64_t rows, int64_t cols, int64_t batch,
                int64_t lda, int64_t ldx, void* stream) {
  const sk::GemvArgs g{dt(dtype), a, x, y, rows, cols, batch, lda, ldx};
  return sk::launch_gemv_mma(g, st(stream));
}

int sk_nms(const float* boxes, const int64_t* order, int64_t n, float iou_threshold, void* mask, int64_t* keep,
           int64_t* count, void* stream) {
  const sk::NmsArgs a{boxes, order, n, iou_threshold, static_cast<unsigned long long*>(mask), keep, count};
  return sk::launch_nms(a, st(stream));
}

int64_t sk_nms_words(int64_t n) { return sk::nms_words(n); }

}  // extern "C"
