// Quantization oracles: NVFP4 (TransformerEngine and torchao recipes), MX (MXFP8 E4M3/E5M2, MXFP4),
// FP8 (per-tensor, per-channel, DeepSeek/DeepGEMM 1x128 and 128x128 blocks), the 128x4 scale-factor
// swizzle, dequantization, the block-scaled GEMM reference and FP8 QAT fake-quant (STE backward).
//
// Semantics: written out below; the tags A2.x, A3.x, ... number the quantization rules, and the
// fixtures, tests and kernels cite them.
// Quantizers have exact answers: every quantizer here emits the exact codes a correct kernel must
// produce (fp32 emulation of the kernel's operation order, -ffp-contract=off, no fast-math), and
// where the spec allows more than one encoding, a per-element bit mask of the allowed codes.
//
// Two independently built forms per quantizer:
//   form "kernel"  (this header's main functions): a per-element / per-block loop that mirrors the
//                  GPU kernel's fp32 operation order and uses the shared codecs of
//                  reference/core/dtype.h (encode_f32 with Overflow::satfinite, ue8m0 rules).
//   form "tensor"  (namespace quant::ref): whole-tensor passes in the shape of the Python references
//                  (TE reference_nvfp4.py, torchao, DeepGEMM), with encoders written from scratch:
//                  exhaustive nearest-code search over the code table with exact fp64 distances
//                  (E4M3/E5M2), the spec's E2M1 decision table (A2.4), frexp-based UE8M0 rules,
//                  a fast Walsh-Hadamard butterfly for the RHT, the reshape/permute form of the
//                  swizzle, Eigen for the GEMM.
// Tests check bit-identity of codes, scales and amax between the forms.
//
// Layout conventions (shared vocabulary): a quantized matrix is [M, N] row-major fp32 (BF16/FP16
// inputs are widened exactly by the caller). Rowwise output = blocks along N (the last dim);
// columnwise output = the same applied to x^T ([N, M], blocks along M), stored transposed, as TE
// does (A3.1 step 8). Codes are unpacked (one code per byte); `packed` puts element 2k in the low
// nibble and 2k+1 in the high nibble of byte k (A2.4), rows padded to an even count with code 0.
// Scale arrays are compact [rows, ceil(cols/V)]; swizzle_scales() produces the padded 128x4 layout.
// Ragged shapes are allowed: a partial block's amax is over its present elements (= zero padding).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/core/tensor.h"

namespace assay::quant {

// ------------------------------------------------------------------------------------------------
// Scalar pieces
// ------------------------------------------------------------------------------------------------

// E2M1 magnitudes for index 0..7 (A1).
inline constexpr double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
double e2m1_value(uint8_t code);  // exact decode, code 0..15

// Allowed-code mask helpers (bit c set = code c allowed).
inline uint32_t bit(unsigned c) { return 1u << c; }

// E2M1 round-to-nearest-even, satfinite, from fp32 (cvt.rn.satfinite.e2m1x2.f32): the dtype.h codec.
uint8_t e2m1_rn(float y);
// E2M1 stochastic rounding with 8 explicit random bits, TE's software emulation of
// cvt.rs.satfinite.e2m1x4 (A3.5): u = rbits/256, step = 0.5/1/2 for |y| in [0,2)/[2,4)/[4,inf),
// t = fma(u, step, |y|) in fp32, step re-derived from t, q = min(floor(t/step_t)*step_t, 6), sign
// restored; NaN -> +6. Exact grid points never move (u < 1). This replays TE's fallback exactly;
// the hardware cvt.rs rule and its rbits byte <-> element pairing are not documented in the
// sources read (spec "Open doubts" 2), so a kernel using cvt.rs is to be checked statistically
// (neighbours, bias, P(up): see test_quant), not bit-exactly, unless it is shown to match.
uint8_t e2m1_sr(float y, uint8_t rbits);

// Nibble packing (A2.4): element 2k -> low nibble of byte k. cols may be odd (last high nibble 0).
std::vector<uint8_t> pack_e2m1(const std::vector<uint8_t>& codes, int64_t rows, int64_t cols);
std::vector<uint8_t> unpack_e2m1(const std::vector<uint8_t>& packed, int64_t rows, int64_t cols);

// BF16 round-to-nearest-even of an exact real given as a sum of doubles (used for the RHT: the
// 16-term sum is formed exactly as a floating-point expansion, then rounded once). Returns the
// bf16 value as a float.
float bf16_round_exact_sum(const double* terms, int n);

// ------------------------------------------------------------------------------------------------
// Mutants (CPU kill matrix, docs/DESIGN.md "Mutants and emulations"): deliberately broken variants
// the comparison must reject. `none` is the correct oracle.
// ------------------------------------------------------------------------------------------------
enum class Mutant : uint8_t {
  none,
  nibble_swap,         // packing: element 2k in the HIGH nibble
  e2m1_ties_away,      // E2M1 ties away from zero (0.25 -> 0.5, 2.5 -> 3, 5 -> 6 ...)
  no_global_scale,     // NVFP4: S_enc forced to 1 (global scale missing)
  sixth_not_folded,    // NVFP4: s = fl(fl(a_b/6) * S_enc) instead of fl(a_b * fl(S_enc * fl(1/6)))
  mx_floor_for_rceil,  // MX: the spec floor scale used where RCEIL is asked for
  qs_zero_encode_zero, // NVFP4: r = 0 when q_s = 0 (old TE C++ test reference); value-equivalent,
                       // codes differ but lie in the allowed set (must be ACCEPTED, not rejected)
  mx_nan_as_inf,       // MX RCEIL: a NaN element counted as +Inf in the block amax (scale 0xFE):
                       // neither allowed NaN-block behaviour (drop NaN, or torchao's NaN scale)
};
std::string mutant_name(Mutant m);

// ------------------------------------------------------------------------------------------------
// NVFP4 (A3)
// ------------------------------------------------------------------------------------------------
enum class Nvfp4Recipe : uint8_t {
  te,       // TransformerEngine kernel arithmetic (A3.1)
  torchao,  // torchao nvfp4_quantize (A3.7)
};

struct Nvfp4Config {
  Nvfp4Recipe recipe = Nvfp4Recipe::te;
  bool rowwise = true;
  bool columnwise = false;
  bool block_2d = false;  // 16x16 tiles (A3.3); TE recipe only; not combined with RHT
  bool rht = false;       // RHT on the columnwise operand (A3.4); needs M % 16 == 0
  uint16_t rht_sign_mask = 0xD7E8;  // bit i set <=> s_i = -1 (TE get_wgrad_sign_vector); 0 = no signs
  bool stochastic = false;          // SR (A3.5) with explicit rbits (one byte per element)
  // Amax overrides (TE kernels can take an amax computed elsewhere). Unset: computed from the data
  // (fmaxf-style: NaN elements are dropped, A3.1 step 1; post-RHT for columnwise+RHT).
  std::optional<float> amax_rowwise, amax_columnwise;
  // torchao only: two-level scaling (per-tensor scale) or single-level (block scale only).
  bool ao_two_level = true;
  // torchao only: PyTorch CUDA divides a tensor by a Python scalar as x * fl(1/b) (A3.7); true
  // replays the CUDA eager path, false a true IEEE division (CPU eager).
  bool ao_cuda_scalar_div = true;
  Mutant mutant = Mutant::none;
};

// One direction (rowwise, or columnwise = x^T).
struct Nvfp4Dir {
  int64_t rows = 0, cols = 0;        // of the quantized matrix; blocks of 16 along cols
  std::vector<float> hp;             // rows x cols: the fp32 values quantized (post-RHT bf16 for RHT)
  std::vector<uint8_t> codes;        // rows x cols E2M1 codes (kernel-form answer)
  std::vector<uint16_t> allowed;     // rows x cols masks of allowed codes (contains codes[i])
  std::vector<uint8_t> packed;       // rows x ceil(cols/2)
  std::vector<uint8_t> scales;       // rows x ceil(cols/16) E4M3 codes (q_s); 2D: tile scale per row
  float amax = 0;                    // the amax used for S_enc (TE) / per-tensor scale (torchao)
  float s_enc = 1;                   // TE: global encode scale; torchao: unused (0)
  float s_dec = 1;                   // TE: 1/S_enc; torchao: per_tensor_scale (1 in single-level)
  int64_t scale_cols() const { return (cols + 15) / 16; }
};

struct Nvfp4Result {
  std::optional<Nvfp4Dir> row, col;
};

// NVFP4 quantization, kernel form.
//   x      [M, N] fp32 (BF16/FP16 inputs widened exactly), row-major.
//   rbits_row  [M, N] u8, one random byte per element of the rowwise output (SR only);
//   rbits_col  [N, M] u8, per element of the columnwise (transposed) output (SR only).
// Outputs per direction: codes/allowed/packed e2m1, scales e4m3 [rows, ceil(cols/16)], amax f32.
// Preconditions: M, N >= 1; RHT needs M % 16 == 0 and !block_2d; block_2d needs recipe te.
// Convention: TE kernel (quantize_transpose_nvfp4.cuh, core_nvfp4.cuh) per A3.1:
//   S_enc = fl(2688/A), fminf(.,FLT_MAX), 1 if A == 0 or S_enc == 0 (the kernel rule; TE's Python
//   reference uses FLT_MAX for A == 0, which changes no code, only S_dec); S_dec = fl(1/S_enc);
//   t = fl(S_enc*fl(1/6)); s = fminf(fl(a_b*t), FLT_MAX); q_s = E4M3_satfinite_RNE(s);
//   r = fminf(fl(1/fl(q_s*S_dec)), FLT_MAX); y = fl(x*r); code = E2M1_RN (or SR).
// Allowed sets: a code whose value is 0 allows both +0 and -0 (the hardware's sign of zero is not
// documented, A2.4); in a q_s = 0 block the kernel's +-6 codes (r = FLT_MAX) and the reference's 0
// are both allowed (both dequantise to 0, A3.1 "Tiny block"); a NaN element allows any code
// (unspecified). torchao: NaN per-tensor/block scales (all-zero tensor: 0/0) make every code of the
// block allowed.
// torchao (A3.7, source nvfp4_tensor.py `_nvfp4_quantize`, which the spec paraphrases slightly
// differently; the source wins): pts = A/2688; bs = a_b/6 (both tensor/scalar: x*fl(1/b) on CUDA);
// q_s = E4M3(clamp(fl(bs/pts), 2^-6, 448)); total = fl(pts*q_s); y = clamp(fl(x/total), -6, 6);
// E2M1 RN. Single level: q_s = E4M3(clamp(bs, 2^-6, 448)), y = fl(x/q_s). torch.amax propagates NaN.
Nvfp4Result nvfp4_quantize(const std::vector<float>& x, int64_t M, int64_t N, const Nvfp4Config& cfg,
                           const std::vector<uint8_t>* rbits_row = nullptr,
                           const std::vector<uint8_t>* rbits_col = nullptr);

// The RHT of the columnwise operand (A3.4): returns [N, M] fp32 (bf16-valued): for each row n of
// x^T and each 16-run along M, v'_j = 1/4 sum_i s_i v_i H[i][j], summed exactly, RNE to bf16.
std::vector<float> rht_columnwise(const std::vector<float>& x, int64_t M, int64_t N, uint16_t sign_mask);

// TE global encode scale (A3.1 step 2) and the NVFP4 GEMM alpha (A3.2).
float nvfp4_global_encode_scale(float amax);
float nvfp4_gemm_alpha(float alpha, float amax_a, float amax_b);

// Dequantization. TE kernel form (dequantize_nvfp4.cuh, A3.2): final = fl(fl(q_s*A)*fl(1/2688)),
// xhat = fl(e2m1*final) in fp32; returns rows x cols fp32.
std::vector<float> nvfp4_dequantize_te(const Nvfp4Dir& d);
// Exact: e2m1 * q_s * s_dec in fp64 (the value the GEMM consumes; torchao: e2m1*q_s*pts).
std::vector<double> nvfp4_dequantize_exact(const Nvfp4Dir& d);

// ------------------------------------------------------------------------------------------------
// MX (A4): 1x32 blocks, UE8M0 scales.
// ------------------------------------------------------------------------------------------------
enum class MxScaleRule : uint8_t { floor, rceil };

struct MxConfig {
  DType elem = DType::e4m3;          // e4m3, e5m2 (MXFP8) or e2m1 (MXFP4)
  MxScaleRule rule = MxScaleRule::floor;
  bool rowwise = true, columnwise = false;  // columnwise: 32x1 blocks, quantized independently
  Mutant mutant = Mutant::none;
};

struct MxDir {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;    // rows x cols element codes (e2m1 unpacked for MXFP4)
  std::vector<uint16_t> allowed; // only meaningful for e2m1 (+-0); for fp8: bit 0 = "any NaN code"
  std::vector<uint8_t> alt;      // a second allowed code per element (== codes[i] when unique):
                                 // RCEIL blocks with scale byte 0, see mx_quantize
  std::vector<uint8_t> packed;   // MXFP4 only: rows x ceil(cols/2)
  std::vector<uint8_t> scales;   // rows x ceil(cols/32) UE8M0 bytes
  std::vector<uint8_t> scale_alt;  // the allowed alternative scale byte (== scales when unique):
                                   // 0xFF for an RCEIL block containing NaN (torchao)
  int64_t scale_cols() const { return (cols + 31) / 32; }
};
struct MxResult {
  std::optional<MxDir> row, col;
};

// MX quantization, kernel form.
//   x [M, N] fp32. Outputs: element codes (elem dtype), UE8M0 scales [rows, ceil(cols/32)].
// Scale rules:
//   floor (OCP MX spec / torchao FLOOR default): e = ue8m0_floor_exponent(amax, emax_elem),
//     amax = max|x| with NaN propagating (torch.amax); NaN/Inf amax -> 0xFF.
//   rceil (TE MXFP8, cuBLAS/cuDNN, torchao RCEIL): e = ue8m0_from_f32_rceil(fl(amax*fl(1/max_elem))),
//     amax with fmaxf semantics as TE's kernel reduces it (NaN dropped; Inf -> 0xFE). torchao's
//     RCEIL does NOT drop NaN: its to_mx takes torch.amax (NaN propagates), so a block holding a
//     NaN gets scale byte 0xFF and dequantizes to NaN as a whole. The spec leaves NaN inside a
//     block unspecified, so both are allowed: `scale_alt` = 0xFF for such a block; the dequantized
//     value's alternative is NaN. A block whose scale is NaN decodes to NaN whatever its codes:
//     the golden links the codes to their scale (Output::scaled_by) and the judge accepts any code
//     in a block whose candidate scale is NaN where the golden allows it (torchao writes 0 there
//     on the GPU; what x / NaN leaves depends on the NaN's bits).
// Elements: P = RNE_satfinite(x * 2^(127-e)) (exact power-of-two scaling, then one rounding);
// a NaN scale (0xFF) makes every element NaN (FP8 NaN code; MXFP4 has none: all codes allowed).
// NaN elements: FP8 NaN code (compared as a class). MXFP4: +-0 both allowed.
// RCEIL scale byte 0 (block amax*fl(1/max) <= 2^-127, e.g. bf16 subnormal blocks): the spec's
// encode multiplier is 2^127, but TE's exp2f_rcp (util/ptx.cuh @03198ae: `biased_exp == 0 ? 1 :`)
// uses 1, which encodes every element of such a block as +-0. Both codes are allowed (`alt`).
// Likewise an Inf in an RCEIL block gives byte 0xFE, whose multiplier is 2^-127 per the spec but
// 0.0f in that TE version (finite x -> +-0, Inf -> NaN): both allowed.
// Not reproduced: [MX]'s default round-half-away rounding (torchao, TE and cuBLAS use RNE), and
// torchao's to_mx clamp of the fp32 scale to F32_MIN_NORMAL (a workaround for pytorch#125557):
// with scale byte 0 torchao divides the elements by 2^-126 while the byte says 2^-127, so its
// codes come out half the spec's (an upstream defect; the calibration mutant
// mx_torchao_min_normal_scale, rejected on the L0 case mxfp8_e4m3_floor).
MxResult mx_quantize(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg);
// torchao's E2M1 code for an element of a NaN-scaled block: x / NaN is the canonical CUDA NaN
// 0x7FFFFFFF, which torchao's f32_to_f4_unpacked (custom_fp_utils._f32_to_floatx_unpacked) sends
// down its normal-number bit path: (0x7FFFFFFF + (-126 << 23) + 0x1FFFFF + 1) >> 22 = 260, cast to
// uint8 = 4 (+2.0).
inline constexpr uint8_t kAoNanE2m1Code = 4;
// torchao's to_mx as torchao computes it (quant_torchao.cpp), written independently of
// mx_quantize, for calibration only: codes, scales and MXFP4 bytes (allowed/alt fields empty).
// clamp_min_normal reproduces torchao's F32_MIN_NORMAL scale clamp (the upstream defect above).
MxResult mx_quantize_torchao(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg,
                             bool clamp_min_normal);
std::vector<double> mx_dequantize(const MxDir& d, DType elem);  // exact: P * 2^(e-127); NaN scale -> NaN
int mx_emax(DType elem);  // E4M3 8, E5M2 15, E2M1 2

// ------------------------------------------------------------------------------------------------
// FP8 scaling (A2.1/A2.2, A7)
// ------------------------------------------------------------------------------------------------
enum class Fp8Granularity : uint8_t {
  per_tensor,     // one scale
  per_channel,    // one scale per row (output channel of a [N, K] weight / token of [M, K])
  block_1x128,    // DeepSeek activations: per row per 128 columns
  block_128x128,  // DeepSeek weights
};
enum class Fp8ScaleRecipe : uint8_t {
  // TE current scaling (recipe_common.cuh compute_scale_from_amax): amax < eps -> eps; amax 0, Inf
  // or NaN -> scale 1; scale = fl(max/amax); Inf -> FLT_MAX; pow2: mantissa bits cleared (floor);
  // scale_inv = fl(1/scale); code = FP8(fl(x*scale)).
  te_current,
  // DeepGEMM test quantizers (deep_gemm/utils/math.py): amax = max(amax, fl(1e-4)); sf = amax/448
  // (tensor/scalar: amax*fl(1/448) on CUDA, see torch_cuda_scalar_div); pow2: ceil_to_ue8m0
  // (exponent + (mantissa != 0), clamped to [1, 254]); code = FP8(fl(x * fl(1/sf))); sf stored.
  deepgemm,
};
struct Fp8Config {
  DType fp8 = DType::e4m3;
  Overflow overflow = Overflow::satfinite;  // nonsat = torch <= 2.11 eager cast / __NV_NOSAT
  Fp8Granularity gran = Fp8Granularity::per_tensor;
  Fp8ScaleRecipe recipe = Fp8ScaleRecipe::te_current;
  bool pow2_scale = false;          // TE force_pow_2_scales / DeepGEMM use_ue8m0
  float epsilon = 0.0f;             // TE amax epsilon
  bool torch_cuda_scalar_div = true;  // deepgemm: amax/448 as amax*fl(1/448) (CUDA eager)
  int block = 128;                  // block edge for the DeepSeek granularities
  std::optional<float> amax_override;  // per_tensor only: an externally supplied amax
};
// DeepSeek-V3 training casts (DeepGEMM per_token_cast / per_block_cast, E4M3): activations in 1x128
// groups, weights (weight = true) in 128x128 blocks.
inline Fp8Config deepseek_fp8_config(bool weight) {
  Fp8Config c;
  c.recipe = Fp8ScaleRecipe::deepgemm;
  c.gran = weight ? Fp8Granularity::block_128x128 : Fp8Granularity::block_1x128;
  return c;
}
struct Fp8Result {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;      // rows x cols
  int64_t scale_rows = 1, scale_cols = 1;  // grid of scale groups
  int64_t group_rows = 1, group_cols = 1;  // elements per group (edge groups are ragged)
  std::vector<float> amax;         // per group (after the recipe's clamp), fp32
  std::vector<float> scale;        // per group: the encode multiplier actually used (x * scale)
  std::vector<float> scale_inv;    // per group: the stored decode scale (TE scale_inv, DeepGEMM sf)
  int64_t group_of(int64_t r, int64_t c) const;  // flat group index of element (r, c)
};
// FP8 quantization, kernel form. x [M, N] fp32 -> codes fp8 [M, N], scales per group (fp32).
// Preconditions: fp8 in {e4m3, e5m2}. Blocks are ragged at the edges (DeepGEMM zero-pads, which
// leaves the amax unchanged).
Fp8Result fp8_quantize(const std::vector<float>& x, int64_t M, int64_t N, const Fp8Config& cfg);
std::vector<double> fp8_dequantize(const Fp8Result& r, DType fp8);  // exact code * scale_inv (fp64)

// QAT fake-quant for FP8 (per-tensor / per-channel): forward yhat = fl(decode(code) * scale_inv)
// in fp32 (TE dequantize), backward straight-through: dx = dy (ste), or dx = dy * [|fl(x*scale)| <=
// fp8 max] with clipped_ste (only differs when a given scale makes values overflow).
struct FakeQuantResult {
  Fp8Result q;
  std::vector<float> y;   // fp32 forward
  std::vector<double> y_exact;  // fp64: decode(code) * scale_inv exactly
  std::vector<float> dx;  // backward
};
FakeQuantResult fp8_fake_quant(const std::vector<float>& x, const std::vector<float>& dy, int64_t M,
                               int64_t N, const Fp8Config& cfg, bool clipped_ste = false);

// ------------------------------------------------------------------------------------------------
// Scale-factor swizzle (A5): 128x4 tiles, K-tiles fastest.
// ------------------------------------------------------------------------------------------------
int64_t swizzle_offset(int64_t r, int64_t c, int64_t cols_padded);
// compact [rows, cols] -> swizzled [roundup(rows,128) * roundup(cols,4)] (padding = `pad`).
std::vector<uint8_t> swizzle_scales(const std::vector<uint8_t>& compact, int64_t rows, int64_t cols,
                                    uint8_t pad = 0);
std::vector<uint8_t> unswizzle_scales(const std::vector<uint8_t>& swizzled, int64_t rows, int64_t cols);

// ------------------------------------------------------------------------------------------------
// Block-scaled GEMM reference (A6)
// ------------------------------------------------------------------------------------------------
// A block-scaled operand: `rows` x K decoded element values and decoded scales
// [rows, ceil(K/V)] (V = 16 NVFP4, 32 MX, 128 DeepSeek 1x128; for 128x128 weights pass the scale
// replicated per row).
struct ScaledOperand {
  int64_t rows = 0, k = 0;
  int v = 16;
  std::vector<double> elem;   // rows x k
  std::vector<double> scale;  // rows x ceil(k/v)
};
ScaledOperand operand_from_nvfp4(const Nvfp4Dir& d);  // elem = e2m1 values, scale = q_s values
ScaledOperand operand_from_mx(const MxDir& d, DType elem);
ScaledOperand operand_from_fp8(const Fp8Result& r, DType fp8);  // 1x128 / per-tensor / per-channel

struct GemmResult {
  int64_t m = 0, n = 0;
  std::vector<double> d;      // [M, N] = alpha * sum_k (a*sa)(b*sb) + beta*C, fp64 accumulation
  std::vector<double> bound;  // [M, N] = |alpha| * sum_k |a*sa*b*sb|
};
// D[m][n] = alpha * sum_k (A.elem[m][k] * A.scale[m][k/V]) * (B.elem[n][k] * B.scale[n][k/V]) + beta*C.
// A [M, K], B [N, K] (TN, as cuBLASLt block-scaled GEMMs), C optional [M, N]. Sequential k order,
// fp64 (element*scale products are exact; sums of integer-valued products are exact).
GemmResult block_scaled_gemm(const ScaledOperand& a, const ScaledOperand& b, double alpha = 1.0,
                             double beta = 0.0, const std::vector<double>* c = nullptr);
// Per-element absolute error bound of an fp32-accumulating kernel (any order):
// gamma_K * bound + |d| * u_out, gamma_K = K*2^-24/(1-K*2^-24), u_out the unit roundoff of the
// output dtype (f32 2^-24, bf16 2^-8, f16 2^-11).
double gemm_fp32_error_bound(int64_t k, double bound, double d, DType out);

// ------------------------------------------------------------------------------------------------
// Comparison (issue 6 item 8): codes, scales and amax are compared bit-exactly and separately; a
// failure names the first bad block.
// ------------------------------------------------------------------------------------------------
struct CodeMismatch {
  int64_t count = 0;
  int64_t first_row = -1, first_col = -1;       // first bad element (row-major order)
  int64_t block_row = -1, block_col = -1;       // its block
  uint32_t expected = 0, got = 0;
  std::string message;
};
// allowed: optional per-element masks (bit c = code c allowed); otherwise exact equality, with NaN
// codes of `dt` compared as a class when dt is given.
std::optional<CodeMismatch> compare_codes(const std::string& what, const std::vector<uint8_t>& expected,
                                          const std::vector<uint16_t>* allowed,
                                          const std::vector<uint8_t>& got, int64_t rows, int64_t cols,
                                          int64_t block_rows, int64_t block_cols,
                                          std::optional<DType> dt = std::nullopt,
                                          const std::vector<uint8_t>* alt = nullptr);

// ------------------------------------------------------------------------------------------------
// Form "tensor" (independent reimplementations; see the header comment).
// ------------------------------------------------------------------------------------------------
namespace ref {
// Exhaustive nearest code of a floating format (e4m3, e5m2, e2m1, bf16-free): exact fp64 distance
// to every finite code, ties to the code with an even mantissa LSB; overflow/NaN per dtype.h rules.
uint8_t encode_exhaustive(DType t, double x, Overflow ov);
// The spec A2.4 decision table (satfinite; NaN -> +6; negatives in [-0.25, 0) and -0.0 -> code 8;
// TE's Python reference maps exactly -0.0 to code 0, which the allowed sets accept).
uint8_t e2m1_table(double y);
// SR decided as "fl32(|y| + u*step) >= hi" with the sum formed in fp64 and rounded once.
uint8_t e2m1_sr_ref(float y, uint8_t rbits);
uint8_t ue8m0_floor_ref(float amax, int emax);  // frexp-based floor(log2) - emax, clamped
uint8_t ue8m0_rceil_ref(float v);               // smallest e with 2^(e-127) >= v, clamped
float bf16_from_f64_ref(double v);              // RNE to bf16 by integer ops on the fp64 bits
std::vector<float> rht_columnwise_fwht(const std::vector<float>& x, int64_t M, int64_t N,
                                       uint16_t sign_mask);
Nvfp4Result nvfp4_quantize(const std::vector<float>& x, int64_t M, int64_t N, const Nvfp4Config& cfg,
                           const std::vector<uint8_t>* rbits_row = nullptr,
                           const std::vector<uint8_t>* rbits_col = nullptr);
MxResult mx_quantize(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg);
// torchao's E2M1 code for an element of a NaN-scaled block: x / NaN is the canonical CUDA NaN
// 0x7FFFFFFF, which torchao's f32_to_f4_unpacked (custom_fp_utils._f32_to_floatx_unpacked) sends
// down its normal-number bit path: (0x7FFFFFFF + (-126 << 23) + 0x1FFFFF + 1) >> 22 = 260, cast to
// uint8 = 4 (+2.0).
inline constexpr uint8_t kAoNanE2m1Code = 4;
// torchao's to_mx as torchao computes it (quant_torchao.cpp), written independently of
// mx_quantize, for calibration only: codes, scales and MXFP4 bytes (allowed/alt fields empty).
// clamp_min_normal reproduces torchao's F32_MIN_NORMAL scale clamp (the upstream defect above).
MxResult mx_quantize_torchao(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg,
                             bool clamp_min_normal);
Fp8Result fp8_quantize(const std::vector<float>& x, int64_t M, int64_t N, const Fp8Config& cfg);
std::vector<uint8_t> swizzle_scales_permute(const std::vector<uint8_t>& compact, int64_t rows,
                                            int64_t cols, uint8_t pad = 0);
GemmResult block_scaled_gemm_eigen(const ScaledOperand& a, const ScaledOperand& b, double alpha = 1.0,
                                   double beta = 0.0, const std::vector<double>* c = nullptr);
}  // namespace ref

// ------------------------------------------------------------------------------------------------
// Golden builders: run BOTH forms, cross-check them and package the outputs for `assay gen`.
// Output tensors (per direction suffix "_row" / "_col"):
//   q_<dir>       codes: expected = decoded values (fp64), dtype e2m1/e4m3/e5m2, rounded = codes
//   scale_<dir>   block scales: expected = decoded (e4m3 / ue8m0 values), rounded = codes
//   amax_<dir>    [1] f32 (NVFP4), rounded = fp32 bits
//   packed_<dir>  (E2M1 only) u8 bytes, element 2k in the low nibble; alt (when it differs): the
//                 bytes with q_s = 0 blocks encoded as +-0 (NVFP4) or with torchao's NaN-block
//                 codes (MXFP4 RCEIL, see mx_quantize)
//   xhat_<dir>    dequantized: expected = exact fp64 dequantization; for NVFP4 rounded = the fp32
//                 bits of TE's dequantize kernel (A3.2), dtype f32
// The MX scale_<dir> carries alt 0xFF (NaN) for an RCEIL block holding a NaN, and xhat_<dir> alt
// NaN for its elements (torchao's NaN propagation, mx_quantize).
// Intermediates: allowed_<dir> (per-element masks of allowed codes, as fp64 integers; present
// when some element allows more than one code), hp_col (post-RHT bf16 values) for RHT, and
// s_enc_<dir>, s_dec_<dir> (NVFP4). Agreement: one entry per output tensor, forms "kernel" and
// "tensor", agreement_rel of the decoded values (0 when bit-identical; codes are additionally
// required bit-identical, else the builder throws assay::Error).
// ------------------------------------------------------------------------------------------------
OracleResult nvfp4_oracle(const std::vector<float>& x, int64_t M, int64_t N, const Nvfp4Config& cfg,
                          const std::vector<uint8_t>* rbits_row = nullptr,
                          const std::vector<uint8_t>* rbits_col = nullptr);
OracleResult mx_oracle(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg);
// FP8: outputs q [M, N], scale_inv / scale / amax [SR, SC] f32, xhat [M, N].
OracleResult fp8_oracle(const std::vector<float>& x, int64_t M, int64_t N, const Fp8Config& cfg);
// Fake quant: outputs y [M, N] f32 (expected exact fp64, rounded = TE fp32 bits), dx [M, N] f32.
OracleResult fp8_fake_quant_oracle(const std::vector<float>& x, const std::vector<float>& dy, int64_t M,
                                   int64_t N, const Fp8Config& cfg, bool clipped_ste);
// GEMM: output d [M, N] (dtype out), bound = |alpha| sum |a b| (per-element magnitude).
OracleResult gemm_oracle(const ScaledOperand& a, const ScaledOperand& b, double alpha, DType out);
// Swizzle: output sf_swizzled [roundup(rows,128) * roundup(cols,4)] u8.
OracleResult swizzle_oracle(const std::vector<uint8_t>& compact, int64_t rows, int64_t cols);
}  // namespace assay::quant
