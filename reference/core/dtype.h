// Dtype codecs: bf16, fp16, fp8 e4m3fn, fp8 e5m2, fp4 e2m1, ue8m0 (and fp32/fp64/ints as storage).
//
// Encode rounds to nearest, ties to even (RNE), DIRECTLY from the fp64 value: never via fp32.
// Decode is exact (every code of these formats is an fp64 value).
//
// Overflow and special values (the quantization rules A1, A2 that reference/quant/quant.h cites):
//   "overflow" means the RNE result (on the format's grid continued past max) exceeds max finite,
//   i.e. |x| >= max + ulp(max)/2 with the tie at max + ulp/2 resolved by RNE (e4m3: 464 -> 448,
//   e5m2: 61440 -> overflow, fp16: 65520 -> overflow, e2m1: 5 -> 4, 7 -> overflow).
//   Overflow::satfinite   (CUDA __NV_SATFINITE, cvt.rn.satfinite): overflow and +-Inf -> +-max.
//   Overflow::nonsat      (CUDA __NV_NOSAT, IEEE): overflow and +-Inf -> +-Inf where the format has
//                         Inf (bf16, fp16, e5m2), else the format's NaN with the sign kept
//                         (e4m3: 0x7F|sign, as torch <= 2.11 casts).
//   NaN input -> the canonical NaN code: bf16 0x7FC0, fp16 0x7E00, e4m3 0x7F, e5m2 0x7F,
//                ue8m0 0xFF; e2m1 has no NaN: NaN -> +6 (0x7), TE's satfinite fallback.
//   e2m1 has neither Inf nor NaN: it always saturates (the Overflow argument is ignored).
//   Signed zero is kept (e2m1 -0 = code 8). Values below half the smallest subnormal go to +-0;
//   exactly half of it is a tie and goes to 0 (the even code).
//   ue8m0 (2^(e-127), e in 0..254, 0xFF NaN; no sign, no zero): nearest power of two in linear
//   distance, the midpoint 1.5*2^k rounds up to 2^(k+1) (RNE with zero mantissa bits); x <= 2^-127
//   (including +-0) -> 0x00; negative x -> NaN (0xFF); overflow: satfinite -> 0xFE, nonsat -> 0xFF.
//   The MX scale rules (floor, RCEIL) are separate functions below.
//   fp32 from fp64: IEEE RNE; overflow -> Inf (nonsat) or +-FLT_MAX (satfinite).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace assay {

enum class DType : uint8_t {
  f64, f32, bf16, f16, e4m3, e5m2, e2m1, ue8m0,  // floating formats
  i8, u8, i32, u32, i64,                          // integers (indices, cu_seqlens, packed codes)
};

enum class Overflow : uint8_t { nonsat, satfinite };

struct DTypeInfo {
  std::string_view name;   // "bf16", "fp16", "fp8e4m3", "fp8e5m2", "fp4e2m1", "ue8m0", ...
  int bits;                // storage bits per element (e2m1: 4; stored one code per byte unpacked)
  int storage_bytes;       // bytes per element in a golden (e2m1: 1)
  bool is_float;
  int exp_bits, mant_bits, bias;  // floating formats only
  double max_finite;              // floating formats only
  double min_subnormal;           // smallest positive value (ue8m0: 2^-127)
  bool has_inf, has_nan;
};

const DTypeInfo& info(DType t);
std::string_view name(DType t);
// Accepts the canonical names and common aliases (bf16/bfloat16, fp16/f16/half, fp32/f32/float32,
// fp64/f64/float64, fp8e4m3/e4m3/e4m3fn/float8_e4m3fn, fp8e5m2/e5m2/float8_e5m2, fp4e2m1/e2m1,
// ue8m0/e8m0, int32/i32, ...). Returns nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view s);

// Encode x to the format's code (right-aligned in the uint64). RNE from the exact fp64 value.
uint64_t encode(DType t, double x, Overflow ov = Overflow::nonsat);
// Encode from fp32: the float is widened exactly, then encoded as above (NaN canonicalised).
uint64_t encode_f32(DType t, float x, Overflow ov = Overflow::nonsat);
// Exact decode of a code. Integer dtypes decode their two's-complement value.
double decode(DType t, uint64_t code);
// decode(encode(x)).
double round_to(DType t, double x, Overflow ov = Overflow::nonsat);
bool is_nan_code(DType t, uint64_t code);
bool is_inf_code(DType t, uint64_t code);

// One unit in the last place of the format at the magnitude of x (for x = 0: the smallest
// subnormal). Used for ULP error metrics. Floating formats only.
double ulp(DType t, double x);

// MX / TE scale rules (quantization.md A2.5 and the MX section):
//   ue8m0_from_f32_rceil: cvt.rp.satfinite.ue8m0 semantics (TE float_to_e8m0, torchao RCEIL).
//   ue8m0_floor_exponent: the OCP MX spec's shared exponent floor(log2(amax)) - emax_elem, as a
//   biased ue8m0 code, clamped to [0, 254]; amax NaN/Inf -> 0xFF.
uint8_t ue8m0_from_f32_rceil(float x);
uint8_t ue8m0_floor_exponent(float amax, int emax_elem);

}  // namespace assay
