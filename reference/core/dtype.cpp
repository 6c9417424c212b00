// Dtype codecs. Every rule is specified in dtype.h; this file implements it.
//
// Floating encode (bf16, fp16, e4m3, e5m2, e2m1, ue8m0), exact and without double rounding:
//   a = |x|; E = max(floor(log2 a), emin) where emin = 1 - bias (the subnormal exponent; ue8m0
//   has no subnormals and clamps below 2^-127 separately); the quantum at that binade is
//   q = 2^(E - mant_bits); n = nearbyint(a / q). a / q is an exact power-of-two scaling of a (no
//   overflow or underflow is possible for these formats) and nearbyint rounds ties to even in the
//   default rounding mode, so n is the RNE-rounded significand on the format's grid continued past
//   max. n == 2^(mant_bits+1) is the carry into the next binade. value = n * q exceeds max_finite
//   exactly when the RNE result overflows.
#include <bit>
#include "reference/core/dtype.h"

#include <algorithm>
#include <cfenv>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/core/check.h"

namespace assay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bit-level facts per floating format that DTypeInfo does not carry.
struct FloatCodes {
  uint64_t max_code;   // positive max finite
  uint64_t inf_code;   // positive Inf (0 when none)
  uint64_t nan_code;   // canonical NaN (0 when none)
  bool ieee_specials;  // exponent all-ones is Inf/NaN (bf16, fp16, e5m2, fp32, fp64)
};

const DTypeInfo kInfo[] = {
    // name, bits, bytes, is_float, exp, mant, bias, max_finite, min_subnormal, inf, nan
    {"fp64", 64, 8, true, 11, 52, 1023, DBL_MAX, 0x1p-1074, true, true},
    {"fp32", 32, 4, true, 8, 23, 127, double(FLT_MAX), 0x1p-149, true, true},
    {"bf16", 16, 2, true, 8, 7, 127, 0x1.FEp127, 0x1p-133, true, true},
    {"fp16", 16, 2, true, 5, 10, 15, 65504.0, 0x1p-24, true, true},
    {"fp8e4m3", 8, 1, true, 4, 3, 7, 448.0, 0x1p-9, false, true},
    {"fp8e5m2", 8, 1, true, 5, 2, 15, 57344.0, 0x1p-16, true, true},
    {"fp4e2m1", 4, 1, true, 2, 1, 1, 6.0, 0.5, false, false},
    {"ue8m0", 8, 1, true, 8, 0, 127, 0x1p127, 0x1p-127, false, true},
    {"int8", 8, 1, false, 0, 0, 0, 0, 0, false, false},
    {"uint8", 8, 1, false, 0, 0, 0, 0, 0, false, false},
    {"int32", 32, 4, false, 0, 0, 0, 0, 0, false, false},
    {"uint32", 32, 4, false, 0, 0, 0, 0, 0, false, false},
    {"int64", 64, 8, false, 0, 0, 0, 0, 0, false, false},
};

const FloatCodes& codes(DType t) {
  static const FloatCodes kCodes[] = {
      {0x7FEFFFFFFFFFFFFFull, 0x7FF0000000000000ull, 0x7FF8000000000000ull, true},  // f64
      {0x7F7FFFFFull, 0x7F800000ull, 0x7FC00000ull, true},                         // f32
      {0x7F7F, 0x7F80, 0x7FC0, true},                                              // bf16
      {0x7BFF, 0x7C00, 0x7E00, true},                                              // f16
      {0x7E, 0, 0x7F, false},                                                      // e4m3
      {0x7B, 0x7C, 0x7F, true},                                                    // e5m2
      {0x7, 0, 0, false},                                                          // e2m1
      {0xFE, 0, 0xFF, false},                                                      // ue8m0
  };
  return kCodes[static_cast<int>(t)];
}

bool is_int(DType t) { return static_cast<int>(t) >= static_cast<int>(DType::i8); }

uint64_t f64_bits(double x) { return std::bit_cast<uint64_t>(x); }
double bits_f64(uint64_t b) { return std::bit_cast<double>(b); }
uint32_t f32_bits(float x) { return std::bit_cast<uint32_t>(x); }
float bits_f32(uint32_t b) { return std::bit_cast<float>(b); }

// floor(log2(a)) for finite a > 0 (exact, via frexp: a = m 2^e with m in [0.5, 1)).
int floor_log2(double a) {
  int e;
  std::frexp(a, &e);
  return e - 1;
}

// Overflow / Inf result of a sign-magnitude small format.
uint64_t overflow_code(DType t, const DTypeInfo& in, const FloatCodes& c, uint64_t sign,
                       Overflow ov) {
  if (ov == Overflow::satfinite || (!in.has_inf && !in.has_nan)) return sign | c.max_code;
  if (in.has_inf) return sign | c.inf_code;
  (void)t;
  return sign | c.nan_code;  // e4m3: 0x7F | sign
}

// bf16 / fp16 of an fp64 whose result is a normal number of the format: the fp64 fraction rounded
// to the format's mantissa bits in integers (to nearest, ties to even, a carry moving into the next
// binade), the same code as the general path below. False for everything else (zero, NaN, Inf, a
// subnormal or overflowing result), which the general path handles. The input path encodes every
// element of a recipe tensor (billions at production scale), so this is its hot spot.
template <int kMantBits, int kBias>
bool encode_half_fast(double x, uint64_t& code) {
  constexpr int kEmax = kBias;  // IEEE-style: the all-ones exponent field is Inf / NaN
  const uint64_t b = f64_bits(x);
  const int e = static_cast<int>((b >> 52) & 0x7FF) - 1023;  // -1023: zero / fp64 subnormal; 1024: NaN / Inf
  if (e < 1 - kBias || e > kEmax) return false;
  constexpr int sh = 52 - kMantBits;
  const uint64_t frac = b & ((uint64_t{1} << 52) - 1);
  uint64_t q = frac >> sh;
  const uint64_t rem = frac & ((uint64_t{1} << sh) - 1), half = uint64_t{1} << (sh - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  int E = e;
  if (q >> kMantBits) q = 0, ++E;  // rounded up to 2^(e + 1)
  if (E > kEmax) return false;     // overflow: the general path applies the Overflow rule
  code = ((b >> 63) << 15) | (static_cast<uint64_t>(E + kBias) << kMantBits) | q;
  return true;
}

uint64_t encode_small(DType t, double x, Overflow ov) {
  uint64_t fast = 0;
  if (t == DType::bf16 && encode_half_fast<7, 127>(x, fast)) return fast;
  if (t == DType::f16 && encode_half_fast<10, 15>(x, fast)) return fast;
  const DTypeInfo& in = info(t);
  const FloatCodes& c = codes(t);
  const uint64_t sign = std::signbit(x) ? (uint64_t{1} << (in.bits - 1)) : 0;
  if (std::isnan(x)) return in.has_nan ? c.nan_code : c.max_code;  // e2m1: NaN -> +6
  if (std::isinf(x)) return overflow_code(t, in, c, sign, ov);
  const double a = std::fabs(x);
  if (a == 0.0) return sign;
  const int mb = in.mant_bits;
  const int emin = 1 - in.bias;
  int E = std::max(floor_log2(a), emin);
  const double q = std::ldexp(1.0, E - mb);
  const double n = std::nearbyint(a / q);
  if (std::ldexp(n, E - mb) > in.max_finite) return overflow_code(t, in, c, sign, ov);
  uint64_t ni = static_cast<uint64_t>(n);
  const uint64_t hidden = uint64_t{1} << mb;
  if (ni == 2 * hidden) {  // carry into the next binade
    ++E;
    ni = hidden;
  }
  if (ni < hidden) return sign | ni;  // subnormal (E == emin) or zero
  const uint64_t efield = static_cast<uint64_t>(E + in.bias);
  return sign | (efield << mb) | (ni - hidden);
}

uint64_t encode_ue8m0(double x, Overflow ov) {
  if (std::isnan(x)) return 0xFF;
  if (x == 0.0) return 0x00;  // +-0
  if (x < 0.0) return 0xFF;   // negative (including -Inf): no sign bit -> NaN
  if (std::isinf(x)) return ov == Overflow::satfinite ? 0xFE : 0xFF;
  if (x <= 0x1p-127) return 0x00;
  int E = floor_log2(x);  // >= -127
  const double n = std::nearbyint(std::ldexp(x, -E));  // in [1, 2): 1 or 2 (1.5 -> 2, even)
  if (n == 2.0) ++E;
  if (E > 127) return ov == Overflow::satfinite ? 0xFE : 0xFF;
  return static_cast<uint64_t>(E + 127);
}

uint64_t encode_int(DType t, double x) {
  ASSAY_INPUT_CHECK(std::isfinite(x) && std::trunc(x) == x,
                    "{}: value {} is not an integer", name(t), x);
  double lo = 0, hi = 0;  // valid range [lo, hi)
  switch (t) {
    case DType::i8: lo = -128.0; hi = 128.0; break;
    case DType::u8: lo = 0.0; hi = 256.0; break;
    case DType::i32: lo = -0x1p31; hi = 0x1p31; break;
    case DType::u32: lo = 0.0; hi = 0x1p32; break;
    case DType::i64: lo = -0x1p63; hi = 0x1p63; break;
    default: ASSAY_CHECK(false, "not an integer dtype");
  }
  ASSAY_INPUT_CHECK(x >= lo && x < hi, "{}: value {} out of range", name(t), x);
  const int bits = info(t).bits;
  uint64_t v;
  if (x < 0)
    v = static_cast<uint64_t>(static_cast<int64_t>(x));
  else
    v = static_cast<uint64_t>(x);
  if (bits < 64) v &= (uint64_t{1} << bits) - 1;
  return v;
}

double decode_small(DType t, uint64_t code) {
  const DTypeInfo& in = info(t);
  const FloatCodes& c = codes(t);
  ASSAY_CHECK(code < (uint64_t{1} << in.bits), "{} code {:#x} out of range", in.name, code);
  const int mb = in.mant_bits;
  const uint64_t mmask = (uint64_t{1} << mb) - 1;
  const uint64_t emask = (uint64_t{1} << in.exp_bits) - 1;
  const bool neg = (code >> (in.bits - 1)) & 1;
  const uint64_t ef = (code >> mb) & emask;
  const uint64_t mf = code & mmask;
  double v;
  if (c.ieee_specials && ef == emask) {
    v = mf == 0 ? kInf : kNaN;
  } else if (t == DType::e4m3 && ef == emask && mf == mmask) {
    v = kNaN;
  } else if (ef == 0) {
    v = std::ldexp(static_cast<double>(mf), 1 - in.bias - mb);
  } else {
    v = std::ldexp(static_cast<double>(mf | (mmask + 1)), static_cast<int>(ef) - in.bias - mb);
  }
  return neg ? -v : v;
}

}  // namespace

const DTypeInfo& info(DType t) {
  const int i = static_cast<int>(t);
  ASSAY_CHECK(i >= 0 && i <= static_cast<int>(DType::i64), "bad DType {}", i);
  return kInfo[i];
}

std::string_view name(DType t) { return info(t).name; }

std::optional<DType> parse_dtype(std::string_view s) {
  // Every accepted spelling of each dtype (assay's, torch's and other common ones).
  struct Names {
    DType t;
    std::string_view names[5];  // (unused slots empty)
  };
  static const Names kNames[] = {
      {DType::f64, {"fp64", "f64", "float64", "double"}},
      {DType::f32, {"fp32", "f32", "float32", "float"}},
      {DType::bf16, {"bf16", "bfloat16"}},
      {DType::f16, {"fp16", "f16", "half", "float16"}},
      {DType::e4m3, {"fp8e4m3", "e4m3", "e4m3fn", "fp8e4m3fn", "float8_e4m3fn"}},
      {DType::e5m2, {"fp8e5m2", "e5m2", "float8_e5m2"}},
      {DType::e2m1, {"fp4e2m1", "e2m1", "fp4", "float4_e2m1fn_x2"}},
      {DType::ue8m0, {"ue8m0", "e8m0", "float8_e8m0fnu", "e8m0fnu"}},
      {DType::i8, {"int8", "i8"}},
      {DType::u8, {"uint8", "u8"}},
      {DType::i32, {"int32", "i32"}},
      {DType::u32, {"uint32", "u32"}},
      {DType::i64, {"int64", "i64"}},
  };
  if (s.empty()) return std::nullopt;
  for (const auto& d : kNames)
    for (std::string_view n : d.names)
      if (n == s) return d.t;
  return std::nullopt;
}

uint64_t encode(DType t, double x, Overflow ov) {
  switch (t) {
    case DType::f64: {
      if (std::isnan(x)) return codes(t).nan_code;
      if (std::isinf(x) && ov == Overflow::satfinite) x = std::copysign(DBL_MAX, x);
      return f64_bits(x);
    }
    case DType::f32: {
      if (std::isnan(x)) return codes(t).nan_code;
      float f = static_cast<float>(x);  // IEEE RNE (default rounding mode)
      if (std::isinf(f) && ov == Overflow::satfinite) f = std::copysign(FLT_MAX, f);
      return f32_bits(f);
    }
    case DType::bf16:
    case DType::f16:
    case DType::e4m3:
    case DType::e5m2:
    case DType::e2m1: return encode_small(t, x, ov);
    case DType::ue8m0: return encode_ue8m0(x, ov);
    default: return encode_int(t, x);
  }
}

uint64_t encode_f32(DType t, float x, Overflow ov) { return encode(t, static_cast<double>(x), ov); }

double decode(DType t, uint64_t code) {
  switch (t) {
    case DType::f64: return bits_f64(code);
    case DType::f32:
      ASSAY_CHECK(code <= 0xFFFFFFFFull, "fp32 code {:#x} out of range", code);
      return static_cast<double>(bits_f32(static_cast<uint32_t>(code)));
    case DType::bf16:
    case DType::f16:
    case DType::e4m3:
    case DType::e5m2:
    case DType::e2m1: return decode_small(t, code);
    case DType::ue8m0:
      ASSAY_CHECK(code <= 0xFF, "ue8m0 code {:#x} out of range", code);
      return code == 0xFF ? kNaN : std::ldexp(1.0, static_cast<int>(code) - 127);
    case DType::i8: return static_cast<double>(static_cast<int8_t>(static_cast<uint8_t>(code)));
    case DType::u8: return static_cast<double>(static_cast<uint8_t>(code));
    case DType::i32: return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(code)));
    case DType::u32: return static_cast<double>(static_cast<uint32_t>(code));
    case DType::i64: return static_cast<double>(static_cast<int64_t>(code));
  }
  ASSAY_CHECK(false, "bad DType");
  return 0;
}

double round_to(DType t, double x, Overflow ov) { return decode(t, encode(t, x, ov)); }

bool is_nan_code(DType t, uint64_t code) {
  if (is_int(t)) return false;
  return std::isnan(decode(t, code));
}

bool is_inf_code(DType t, uint64_t code) {
  if (is_int(t)) return false;
  return std::isinf(decode(t, code));
}

double ulp(DType t, double x) {
  const DTypeInfo& in = info(t);
  ASSAY_CHECK(in.is_float, "ulp() of integer dtype {}", in.name);
  if (std::isnan(x)) return kNaN;
  if (std::isinf(x)) return kInf;
  const double a = std::fabs(x);
  if (t == DType::ue8m0) {
    // Power-of-two grid without subnormals: the spacing above 2^E is 2^E.
    if (a <= 0x1p-127) return 0x1p-127;
    return std::ldexp(1.0, floor_log2(a));
  }
  if (a == 0.0) return in.min_subnormal;
  const int E = std::max(floor_log2(a), 1 - in.bias);
  return std::ldexp(1.0, E - in.mant_bits);
}

uint8_t ue8m0_from_f32_rceil(float x) {
  // TE tests/cpp/test_common.h float_to_e8m0 (the sign bit is dropped by the uint8 truncation of
  // bits >> 23, so the magnitude is used).
  if (std::isnan(x)) return 0xFF;
  if (std::isinf(x)) return 0xFE;
  if (x == 0.0f) return 0x00;
  const uint32_t b = f32_bits(x);
  uint32_t e = (b >> 23) & 0xFF;
  const uint32_t m = b & 0x7FFFFF;
  if (m > 0 && e != 0xFE && !(e == 0 && m <= 0x400000)) ++e;
  return static_cast<uint8_t>(e);
}

uint8_t ue8m0_floor_exponent(float amax, int emax_elem) {
  if (std::isnan(amax) || std::isinf(amax)) return 0xFF;
  const double a = std::fabs(static_cast<double>(amax));
  // Zero (and any value whose shared exponent falls below -127) clamps to byte 0.
  if (a == 0.0) return 0x00;
  const long long e = static_cast<long long>(floor_log2(a)) - emax_elem + 127;
  return static_cast<uint8_t>(std::clamp<long long>(e, 0, 254));
}

}  // namespace assay
