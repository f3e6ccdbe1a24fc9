// Warp-level tensor-core building blocks for sm_80 and later: mma.sync m16n8k16 with 16-bit
// inputs (bf16 or fp16) and fp32 accumulators, and ldmatrix (x1/x2/x4, plain and .trans).
//
// Fragment layouts (PTX ISA "mma.m16n8k16"), lane = 4 * g + t, g = lane / 4, t = lane % 4:
//   A 16x16 (row-major), 4 x b32:  a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
//                                   a[2] = A[g][2t+8..2t+9]  a[3] = A[g+8][2t+8..2t+9]
//   B 16x8 (k x n, "col"), 2 x b32: b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..2t+9][g]
//   C 16x8 fp32, 4 floats:          c[0..1] = C[g][2t..2t+1] c[2..3] = C[g+8][2t..2t+1]
// In every b32 the lower 16 bits hold the element with the smaller column (A, C) or k (B) index.
//
// ldmatrix: lane i supplies the shared address of row (i % 8) of 8x8 matrix (i / 8) (x2 reads
// lanes 0-15, x1 lanes 0-7, the other lanes' addresses are ignored but must be valid to form);
// register j receives matrix j: lane l holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1, or
// with .trans the transposed element pair (rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4).
// So an A fragment is ldmatrix.x4 of a row-major 16x16 tile with lane i pointing at row (i % 16),
// column 8 (i / 16); a B fragment of a k x n tile stored n-major ([n][k], e.g. K in Q K^T) is the
// plain form, and of one stored k-major ([k][n], e.g. V in P V) the .trans form.
//
// Only CUDA headers: kernel files must compile without PyTorch (and under its
// __CUDA_NO_HALF_OPERATORS__ / __CUDA_NO_BFLOAT16_CONVERSIONS__ defines).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace sk::tile {

// The 32-bit shared-space address of a generic pointer to shared memory (what ldmatrix,
// cp.async and the other .shared instructions take).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <class T>
inline constexpr bool kIs16Bit = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// d += a * b for one m16n8k16 tile; T (bf16 or fp16) is the input type, accumulation is fp32.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
  static_assert(kIs16Bit<T>, "mma_m16n8k16: T must be __nv_bfloat16 or __half");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

// fp32 on the tensor cores, three TF32 products to one fp32 one ("3xTF32"): each float x splits
// into hi = x rounded to TF32 (10 mantissa bits) and lo = (x - hi) rounded to TF32, and
// a b = a_hi b_hi + a_hi b_lo + a_lo b_hi + a_lo b_lo, the last term (about 2^-22 of a b) dropped.
// Words hold the floats' bits (the mma's operand registers): hi is rounded in place, lo written.
template <int N>
__device__ __forceinline__ void tf32_split(uint32_t (&hi)[N], uint32_t (&lo)[N]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float x = __uint_as_float(hi[i]);
    uint32_t h, l;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(h) : "f"(x));
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(l) : "f"(x - __uint_as_float(h)));
    hi[i] = h;
    lo[i] = l;
  }
#endif
}

// D += A B for one m16n8k8 step in TF32 (fp32 accumulate); the fragments are mma_m16n8k16's with
// one 32-bit element per register: a = {A[g][t], A[g + 8][t], A[g][t + 4], A[g + 8][t + 4]},
// b = {B[t][g], B[t + 4][g]} for lane (g, t) = (lane / 4, lane % 4).
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// The 3xTF32 step on split operands (tf32_split): the two small cross terms, then the large one.
__device__ __forceinline__ void mma_m16n8k8_tf32x3(float (&d)[4], const uint32_t (&a_hi)[4],
                                                   const uint32_t (&a_lo)[4], const uint32_t (&b_hi)[2],
                                                   const uint32_t (&b_lo)[2]) {
  mma_m16n8k8_tf32(d, a_lo, b_hi);
  mma_m16n8k8_tf32(d, a_hi, b_lo);
  mma_m16n8k8_tf32(d, a_hi, b_hi);
}

// B operand given as two registers taken from an ldmatrix.x4 result (b0, b1).
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  const uint32_t b[2] = {b0, b1};
  mma_m16n8k16<T>(d, a, b);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
#endif
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr));
#endif
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr));
#endif
}

__device__ __forceinline__ void ldmatrix_x1(uint32_t& r, uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r) : "r"(smem_addr));
#endif
}

__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t& r, uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r)
               : "r"(smem_addr));
#endif
}

// Two fp32 values rounded to one b32 of two 16-bit T: `lo` in the lower half (the element
// with the smaller index, as the fragments above want).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(kIs16Bit<T>, "pack2: T must be __nv_bfloat16 or __half");
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&v);
  }
  return r;
}

// An m16n8k16 A fragment (16 rows x 16 k) from two adjacent C tiles of fp32 accumulators
// (columns 0-7 and 8-15): the register-level reuse that turns the scores S = Q K^T into the
// P operand of P V without a trip through shared memory (the C and A layouts line up).
template <class T>
__device__ __forceinline__ void accumulators_to_a(uint32_t (&a)[4], const float (&c_lo)[4],
                                                  const float (&c_hi)[4]) {
  a[0] = pack2<T>(c_lo[0], c_lo[1]);
  a[1] = pack2<T>(c_lo[2], c_lo[3]);
  a[2] = pack2<T>(c_hi[0], c_hi[1]);
  a[3] = pack2<T>(c_hi[2], c_hi[3]);
}

}  // namespace sk::tile
