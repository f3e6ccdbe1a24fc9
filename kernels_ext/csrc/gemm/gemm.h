// The GEMM family's plain C++ launchers (no PyTorch, no CUDA device code): pointers, sizes,
// row pitches, scales and a stream in; a Status out.
//
// Layout contract (a linear layer's): A is M x K row-major, W is N x K row-major,
// C = A @ W^T is M x N row-major; every variant accumulates in fp32. Row pitches (lda, ldw,
// ldc, ldr) are in elements; rows must not overlap (pitch >= row length).
//
// Variants (each its own kernel file in this folder):
//   sgemm_fp32      CUDA cores, fp32 in/out (TF32 never used)              launch_sgemm
//   hgemm_mma       bf16/fp16, mma.sync m16n8k16 + ldmatrix + cp.async, sm_80+ launch_hgemm_mma
//   hgemm_wgmma     bf16/fp16, TMA + wgmma, warp-specialised, persistent, sm_90a
//                                                                         launch_hgemm_wgmma
//   fp8_wgmma       float8_e4m3 in, per-tensor fp32 scales (device pointers), bf16 out, sm_90a
//                                                                         launch_gemm_fp8
//   linear_residual C = A @ W^T + R in one kernel (the add in the epilogue)  launch_linear_residual
//   gemm_decode     small M (<= kDecodeMaxM): W streamed once, split over K across a cluster,
//                   partial sums reduced through distributed shared memory, sm_90a
//                                                                         launch_gemm_decode
//   gemm_decode_mma small M (<= kDecodeMmaMaxM): W streamed once through registers (no shared
//                   memory), mma.sync, K split over the warps of a CTA, sm_80+
//                                                                     launch_gemm_decode_mma
//   sgemm_decode    fp32 at small M (<= kDecodeMmaMaxM): the same stream of W on the CUDA cores,
//                   x staged per warp in shared memory, sm_80+              launch_sgemm_decode
// A launcher returns a Status whose message names the violated requirement when it refuses
// (e.g. TMA's 16-byte row alignment: K * element size % 16 == 0), or the CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../common/dtype.h"
#include "decode_rule.h"

namespace sk::gemm {

struct Status {
  cudaError_t code = cudaSuccess;
  std::string message;  // empty when ok
  bool ok() const { return code == cudaSuccess && message.empty(); }
};

inline Status ok() { return {}; }
inline Status fail(const std::string& message, cudaError_t code = cudaErrorInvalidValue) {
  return {code, message};
}
inline Status from_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return {e, std::string(what) + ": " + cudaGetErrorString(e)};
}

// C[M, N] = A[M, K] @ W[N, K]^T (+ R[M, N] for linear_residual).
struct MatmulArgs {
  const void* a = nullptr;
  const void* w = nullptr;
  void* c = nullptr;
  const void* residual = nullptr;  // linear_residual only
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldw = 0, ldc = 0, ldr = 0;
};

// The head of a CUDA-core or mma.sync kernel's parameter block: the operands with the kernel's
// element types and the sizes as int (check_sizes bounds them below 2^31). A kernel's own fields
// follow in the derived struct, so the block's layout is the same as spelled out flat.
template <class In, class Out>
struct GemmOperands {
  const In* a;
  const In* w;
  Out* c;
  int m, n, k;
  int64_t lda, ldw, ldc;
};

// Fills the operand fields of a parameter block from `g`: any struct with fields a, w, c, m, n,
// k, lda, ldw and ldc (hgemm_mma's block keeps its residual between c and the sizes).
template <class P>
inline void set_operands(P& p, const MatmulArgs& g) {
  p.a = static_cast<decltype(p.a)>(g.a);
  p.w = static_cast<decltype(p.w)>(g.w);
  p.c = static_cast<decltype(p.c)>(g.c);
  p.m = static_cast<int>(g.m);
  p.n = static_cast<int>(g.n);
  p.k = static_cast<int>(g.k);
  p.lda = g.lda;
  p.ldw = g.ldw;
  p.ldc = g.ldc;
}

// Every launcher's first check: M, N and K are positive and fit the kernels' int indexing.
inline Status check_sizes(const MatmulArgs& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return fail("M, N and K must be positive");
  if (g.m >= (int64_t{1} << 31) || g.n >= (int64_t{1} << 31) || g.k >= (int64_t{1} << 31)) {
    return fail("M, N and K must be below 2^31");
  }
  return ok();
}

// Named tile configurations of the wgmma kernels: BM x BN tile, pipeline stages, CTAs per cluster
// (2: the pair shares W's tile through TMA multicast). kAuto picks by shape and device.
enum class WgmmaConfig : int {
  kAuto = 0,
  k128x256_s4_c2 = 1,  // 4 stages; C staged through smem in two 128-column halves
  k128x256_s3_c2 = 2,  // 3 stages; C staged whole
  k128x256_s4_c1 = 3,
  k128x256_s3_c1 = 4,
  k128x128_s6_c2 = 5,
  k128x128_s6_c1 = 6,
  kDirectStore = 7,    // 128x128, C written from registers (any N, any alignment of C)
};
constexpr int kNumWgmmaConfigs = 8;
const char* wgmma_config_name(WgmmaConfig c);

// Debug/tuning knobs; defaults are the production choices.
struct WgmmaOptions {
  WgmmaConfig config = WgmmaConfig::kAuto;
  int group_m = 0;    // tile-order group height in cluster rows (0: automatic)
  int max_ctas = 0;   // cap on the persistent grid (0: one CTA per SM)
};

// The largest M the decode (swap-AB, split-K) path handles.
constexpr int64_t kDecodeMaxM = 64;
// The largest M the register-streaming decode kernel handles (one m16 tile of tokens).
constexpr int64_t kDecodeMmaMaxM = 16;

// The variant the front door runs for this dtype, shape and device (see gemm.cu), and the call.
const char* pick_gemm_variant(DType dt, const MatmulArgs& args);
Status launch_gemm(DType dt, const MatmulArgs& args, cudaStream_t stream);

// sgemm loaders (sgemm_fp32.cu): bk16 (16-k tiles, the measured one) and bk32 (32-k tiles,
// unpredicated copies for interior tiles) on 128 x 128 blocks, bm64 (bk32's on 64 x 128 blocks,
// four per SM); kAuto runs bk32 (0.85x cuBLAS fp32 vs 0.82x on the H200), or bm64 where the
// 128 x 128 grid gives some SM no block (sgemm_rule.h).
enum class SgemmConfig : int { kAuto = 0, kBk16 = 1, kBk32 = 2, kBm64 = 3 };
constexpr int kNumSgemmConfigs = 4;
const char* sgemm_config_name(SgemmConfig c);

Status launch_sgemm(const MatmulArgs& args, cudaStream_t stream,
                    SgemmConfig config = SgemmConfig::kAuto);
// hgemm_mma k-tilings (hgemm_mma.cu): bk32 (the first one), bk64 (half the barriers per mma,
// unpredicated interior copies) and bk64_pipe (bk64 with the next k-step's fragments loaded
// while this one's mma run and the next k-tile's copies spread over the k-steps). kAuto runs
// bk64_pipe where its 192 KiB of stages fit (0.59-0.64x cuBLAS, bk64 0.50-0.53x, bk32
// 0.36-0.40x on the H200), else bk32; bk64 and bk64_pipe named where they do not fit: an error.
enum class MmaConfig : int { kAuto = 0, kBk32 = 1, kBk64 = 2, kBk64Pipe = 3 };
constexpr int kNumMmaConfigs = 4;
const char* mma_config_name(MmaConfig c);

Status launch_hgemm_mma(DType dt, const MatmulArgs& args, cudaStream_t stream,
                        MmaConfig config = MmaConfig::kAuto);
Status launch_hgemm_wgmma(DType dt, const MatmulArgs& args, const WgmmaOptions& options,
                          cudaStream_t stream);
// a, w: float8_e4m3 (1 byte); c: bf16; scale_a, scale_b: device pointers to one fp32 each
// (nullptr: 1); C = (A @ W^T) * scale_a * scale_b.
Status launch_gemm_fp8(const MatmulArgs& args, const float* scale_a, const float* scale_b,
                       const WgmmaOptions& options, cudaStream_t stream);
Status launch_linear_residual(DType dt, const MatmulArgs& args, const WgmmaOptions& options,
                              cudaStream_t stream);
// linear_residual through the mma.sync kernel (what launch_linear_residual runs off Hopper).
Status launch_hgemm_mma_residual(DType dt, const MatmulArgs& args, cudaStream_t stream);
// M <= kDecodeMaxM; `split_k` 0 = automatic, else 1, 2, 4 or 8 (the cluster size).
Status launch_gemm_decode(DType dt, const MatmulArgs& args, int split_k, cudaStream_t stream);
// The decode kernels' grids (DecodeGrid, decode_rule.h).
const char* decode_grid_name(DecodeGrid g);

// M <= kDecodeMmaMaxM, K % 8 == 0; any GPU with mma.sync bf16 (sm_80+).
Status launch_gemm_decode_mma(DType dt, const MatmulArgs& args, cudaStream_t stream,
                              DecodeOptions opt = {});
// sgemm_decode's thread tiles (SdecodeConfig, decode_rule.h; the layouts at run_tile in sgemm_decode.cu).
const char* sdecode_config_name(SdecodeConfig c);
// fp32, M <= kDecodeMmaMaxM, K % 4 == 0, 16-byte aligned A and W; sm_80+ (cp.async).
Status launch_sgemm_decode(const MatmulArgs& args, cudaStream_t stream,
                           SdecodeConfig config = SdecodeConfig::kAuto, DecodeOptions opt = {});
// sgemm_decode's `tf32x3`: gemm_decode_mma's kernel on fp32, each product as three TF32 ones
// (tile::mma_m16n8k8_tf32x3); the arguments as launch_sgemm_decode has checked them.
Status launch_decode_mma_tf32x3(const MatmulArgs& args, cudaStream_t stream, DecodeOptions opt);
// Whether sgemm_decode takes these arguments (the front door's test for fp32 at small M).
bool sgemm_decode_supports(const MatmulArgs& args);

// The current device's compute capability as major * 10 + minor (0 when unknown).
int device_capability();

// The current device's multiprocessor count (0 when unknown).
inline int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return sms;
}

// The current device's opt-in shared memory per block in bytes (0 when unknown).
inline int max_smem_optin() {
  int dev = 0, bytes = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 0;
  return bytes;
}
// A refusal naming `variant` when the current device is not compute capability 9.0 (the wgmma,
// TMA-multicast and setmaxnreg kernels exist only as sm_90a code).
Status require_sm90(const char* variant);

}  // namespace sk::gemm
