// Launchers of the quant kernels (device pointers; every launch is enqueued on `s`). Used by the
// registration (kernels/quant/quant.cpp) and the benchmark (kernels/quant/bench_quant.cu).
//
// Tensors (docs/DESIGN.md "Axis vocabulary"; codes one per byte unless "packed"):
//   x            [M, N] bf16 codes (uint16)
//   rowwise      q_row [M, N] (e2m1 / e4m3 / e5m2 codes), packed_row [M, ceil(N/2)] u8 (E2M1 only:
//                element 2k in the low nibble), scale_row [M, ceil(N/V)] (e4m3 for NVFP4, V = 16;
//                ue8m0 for MX, V = 32), amax_row [1] f32 (NVFP4), xhat_row [M, N] f32
//   columnwise   the same for x^T: q_col [N, M], packed_col [N, ceil(M/2)], scale_col [N, ceil(M/V)],
//                amax_col [1], xhat_col [N, M]
//   FP8          q [M, N], scale_inv / scale / amax [SR, SC] f32 (one per group), xhat [M, N] f32
//   swizzle      sf [rows, cols] u8 -> sf_swizzled [roundup(rows,128) * roundup(cols,4)] u8
// Any output pointer may be null (not written), except those a direction needs: scale_* (and
// amax_* for NVFP4) enable a direction.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace assay::kernels::quant {

// ---------------------------------------------------------------- NVFP4 (TransformerEngine)
struct Nvfp4Args {
  const uint16_t* x = nullptr;
  int64_t M = 0, N = 0;
  bool block_2d = false;  // 16x16 tiles: one scale per tile, rowwise = columnwise^T
  // Per direction: q (optional), packed (optional), scale (enables the direction), amax (required
  // with scale: receives the global amax used), xhat (optional: the TE dequantization).
  uint8_t *q_row = nullptr, *packed_row = nullptr, *scale_row = nullptr;
  float *amax_row = nullptr, *xhat_row = nullptr;
  uint8_t *q_col = nullptr, *packed_col = nullptr, *scale_col = nullptr;
  float *amax_col = nullptr, *xhat_col = nullptr;
  // Amax: overrides (TE's externally supplied amax) or computed from x (fmaxf, NaN dropped).
  bool amax_row_given = false, amax_col_given = false;
  float amax_row_value = 0, amax_col_value = 0;
  // false: amax_row / amax_col already hold the amax (benchmark of the cast alone).
  bool compute_amax = true;
  // quant_nvfp4_recipes_v1 only (quant_nvfp4_v1 ignores them):
  bool rht = false;                  // RHT of the columnwise operand (M % 16 == 0)
  uint16_t rht_sign_mask = 0xD7E8;   // bit i set <=> sign s_i = -1
  const uint8_t* rbits_row = nullptr;  // [M, N] u8: stochastic rounding, one random byte per element
  const uint8_t* rbits_col = nullptr;  // [N, M] u8
  bool ao = false;                   // torchao recipe (A3.7) instead of TE
  bool ao_two_level = true, ao_cuda_div = true;
};
cudaError_t quant_nvfp4_v1(const Nvfp4Args& a, cudaStream_t s);
// One thread per 16-element block straight from global memory: every NVFP4 recipe of the oracle
// but 2D blocks (TE round-to-nearest or SR, RHT of the columnwise operand, torchao).
cudaError_t quant_nvfp4_recipes_v1(const Nvfp4Args& a, cudaStream_t s);

// ---------------------------------------------------------------- MX (MXFP8 E4M3 / E5M2, MXFP4)
struct MxArgs {
  const uint16_t* x = nullptr;
  int64_t M = 0, N = 0;
  int elem = 0;        // 0 e4m3, 1 e5m2, 2 e2m1
  bool rceil = false;  // false: OCP spec floor rule
  uint8_t *q_row = nullptr, *packed_row = nullptr, *scale_row = nullptr;
  float* xhat_row = nullptr;
  uint8_t *q_col = nullptr, *packed_col = nullptr, *scale_col = nullptr;
  float* xhat_col = nullptr;
};
cudaError_t quant_mx_v1(const MxArgs& a, cudaStream_t s);

// ---------------------------------------------------------------- FP8 scaling
struct Fp8Args {
  const uint16_t* x = nullptr;
  int64_t M = 0, N = 0;
  int elem = 0;            // 0 e4m3, 1 e5m2
  bool satfinite = true;   // false: __NV_NOSAT (torch <= 2.11 eager cast)
  int gran = 0;            // 0 per tensor, 1 per channel (row), 2 1x128, 3 128x128
  bool deepgemm = false;   // false: TE compute_scale_from_amax
  bool pow2 = false;
  float epsilon = 0;
  bool amax_given = false;  // per tensor only
  float amax_value = 0;
  uint8_t* q = nullptr;
  float *scale_inv = nullptr, *scale = nullptr, *amax = nullptr;  // [SR, SC]; all three required
  float* xhat = nullptr;
};
cudaError_t quant_fp8_v1(const Fp8Args& a, cudaStream_t s);
// v2: the grouped DeepSeek granularities with vector access (gran 2 or 3, N % 4 == 0, x 8-byte
// and q 4-byte aligned); the same bits as v1.
bool quant_fp8_v2_supports(int gran, int64_t N);
cudaError_t quant_fp8_v2(const Fp8Args& a, cudaStream_t s);

// QAT fake-quant (FP8 per tensor / per channel): y = fl(decode(q) * scale_inv) (TE dequantize),
// dx = dy (STE) or, with clipped_ste, 0 where |fl(x * scale)| > the fp8 max. `q` holds the
// quantization settings (x, M, N, elem, satfinite, gran 0/1, scale recipe, amax override); its
// output pointers are ignored (scratch is allocated on the stream).
struct FakeQuantArgs {
  Fp8Args q;
  const float* dy = nullptr;  // [M, N] f32
  bool clipped_ste = false;
  float *y = nullptr, *dx = nullptr;  // [M, N] f32
};
cudaError_t quant_fake_quant_v1(const FakeQuantArgs& a, cudaStream_t s);

// ---------------------------------------------------------------- block-scaled GEMM (A6)
// d [M, N] = alpha * sum_k (a[m][k] * sa[m][k/V]) * (b[n][k] * sb[n][k/V]); a [M, K], b [N, K]
// element codes; sb_block128: sb is [ceil(N/128), ceil(K/V)] (DeepSeek 128x128 weight blocks).
struct GemmArgs {
  const uint8_t *a = nullptr, *b = nullptr;
  const void *sa = nullptr, *sb = nullptr;
  int64_t M = 0, N = 0, K = 0;
  int V = 16;
  int elem_type = 0;   // 0 e2m1, 1 e4m3, 2 e5m2
  int scale_type = 0;  // 0 e4m3 codes, 1 ue8m0 codes, 2 f32 values
  bool sb_block128 = false;
  float alpha = 1.0f;
  const float* alpha_dev = nullptr;  // [1] on the device; overrides alpha
  void* d = nullptr;
  bool d_bf16 = false;  // else f32
};
cudaError_t quant_gemm_v1(const GemmArgs& g, cudaStream_t s);

// ---------------------------------------------------------------- 128x4 scale swizzle
cudaError_t quant_swizzle_v1(const uint8_t* sf, int64_t rows, int64_t cols, uint8_t* out, cudaStream_t s);

}  // namespace assay::kernels::quant
