// Scalar arithmetic shared by the quant kernels (kernels/quant/quant_*.cu): format codecs, scale
// rules and the per-block quantizers. Every function is __host__ __device__ so that the CUDA
// kernels and a host emulation use one definition; fp32 operations are written as single IEEE
// roundings (QM_MUL / QM_DIV are __fmul_rn / __fdiv_rn on the device, so nvcc can neither contract
// them into FMAs nor use approximate division). Build without --use_fast_math and without
// -ftz=true: fp32 subnormals (the UE8M0 byte 0 = 2^-127 multiplier, bf16 subnormal inputs) matter.
//
// Conventions (as reference/quant/quant.h states them):
//   E4M3 / E5M2 encode   __nv_cvt_float_to_fp8 (RNE; __NV_SATFINITE: cvt.rn.satfinite on sm_89+;
//                        __NV_NOSAT: the header's bit-exact software path)      (A2.1)
//   E2M1 encode          RNE + satfinite decision table, NaN -> +6 (code 7), sign of zero kept (A2.4)
//   UE8M0 floor          OCP MX spec floor(log2 amax) - emax, from the fp32 exponent field  (A4)
//   UE8M0 RCEIL          TE float_to_e8m0 round-up of fl(amax * fl(1/max))                 (A4, A2.5)
//   NVFP4 (TE)           S_enc = fl(2688/A) (1 if A == 0 or S_enc == 0), t = fl(S_enc*fl(1/6)),
//                        q_s = E4M3sat(fminf(fl(a_b*t), FLT_MAX)), r = fminf(fl(1/fl(q_s*S_dec)), FLT_MAX),
//                        code = E2M1(fl(x*r))      (TE quantize_transpose_nvfp4.cuh / core_nvfp4.cuh, A3.1)
//   NVFP4 dequant (TE)   fl(e2m1 * fl(fl(q_s*A) * fl(1/2688)))  (TE dequantize_nvfp4.cuh, A3.2)
//   FP8 scales           TE compute_scale_from_amax (recipe_common.cuh) or DeepGEMM
//                        per_token/per_block_cast_to_fp8 (deep_gemm/utils/math.py)      (A7)
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cuda_fp8.h>

#if defined(__CUDACC__)
#define QM_HD __host__ __device__ __forceinline__
#else
#define QM_HD inline
#endif

namespace assay::kernels::quant {

inline constexpr float kFltMax = 3.40282346638528859812e+38f;

QM_HD float qm_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
QM_HD float qm_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
// The 4 bytes of a float as uint32 (To = uint32_t) or back (To = float): the intrinsics on the
// device, a byte copy on the host.
template <class To, class From>
QM_HD To qm_bits(From x) {
  static_assert(sizeof(To) == 4 && sizeof(From) == 4);
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<To, float>)
    return __uint_as_float(x);
  else
    return __float_as_uint(x);
#else
  To t;
  __builtin_memcpy(&t, &x, 4);
  return t;
#endif
}
QM_HD uint32_t f2u(float f) { return qm_bits<uint32_t>(f); }
QM_HD float u2f(uint32_t u) { return qm_bits<float>(u); }
QM_HD bool qm_isnan(float f) { return (f2u(f) & 0x7FFFFFFFu) > 0x7F800000u; }
QM_HD bool qm_isinf(float f) { return (f2u(f) & 0x7FFFFFFFu) == 0x7F800000u; }
QM_HD float qm_abs(float f) { return u2f(f2u(f) & 0x7FFFFFFFu); }
// fminf / fmaxf semantics (a NaN operand is dropped), as CUDA's fminf/fmaxf and C99 fmin/fmax.
QM_HD float qm_fmin(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fminf(a, b);  // FMNMX: a NaN operand is dropped
#endif
  if (qm_isnan(a)) return b;
  if (qm_isnan(b)) return a;
  return a < b ? a : b;
}
QM_HD float qm_fmax(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#endif
  if (qm_isnan(a)) return b;
  if (qm_isnan(b)) return a;
  return a > b ? a : b;
}
// torch.amax semantics: NaN propagates.
QM_HD float qm_max_nan(float a, float b) {
  if (qm_isnan(a) || qm_isnan(b)) return u2f(0x7FC00000u);
  return a > b ? a : b;
}
QM_HD float bf16_to_f32(uint16_t b) { return u2f(static_cast<uint32_t>(b) << 16); }

// ---------------------------------------------------------------------------------- codecs
enum class Elem : int { e4m3 = 0, e5m2 = 1, e2m1 = 2 };

QM_HD uint8_t fp8_encode(float y, Elem e, bool satfinite) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(y, satfinite ? __NV_SATFINITE : __NV_NOSAT,
                                                    e == Elem::e4m3 ? __NV_E4M3 : __NV_E5M2));
}

QM_HD float qm_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// E2M1 RNE satfinite (A2.4 decision table); NaN -> +6; the sign of zero is kept. As a code in
// 0..15 (bit 3 = sign). |y| >= 1: the fp32 mantissa rounded to one bit (RNE: add 2^21 - 1 plus
// the kept bit; a carry moves into the exponent), after which (bits >> 22) - 0xFC is the code,
// 2 (1.0) .. 7 (6.0), saturated at 7. |y| < 1: the grid step is 0.5, and fp32's RNE of
// |y| + 2^22 leaves round(2|y|) in the low mantissa bits: 0, 1 or 2 (= 1.0). Integer work only
// where it is cheap: the kernels are ALU-bound on this. Checked against the oracle's E2M1
// encoder on every fp32 near each decision point (kernels/quant/tests).
QM_HD uint32_t e2m1_code(float y) {
  const uint32_t u = f2u(y), au = u & 0x7FFFFFFFu;
  if (au > 0x7F800000u) return 7u;
  uint32_t i;
  if (au >= 0x3F800000u) {
    i = ((au + 0x1FFFFFu + ((au >> 22) & 1u)) >> 22) - 0xFCu;
    i = i < 7u ? i : 7u;
  } else {
    i = f2u(qm_add(u2f(au), 4194304.0f)) & 3u;
  }
  return i | ((u >> 28) & 8u);
}
QM_HD uint8_t e2m1_encode(float y) { return static_cast<uint8_t>(e2m1_code(y)); }

// E2M1 stochastic rounding with an explicit random byte (TE's software emulation of cvt.rs, A3.5):
// u = rb / 256; step = the grid step at |y| (0.5 below 2, 1 below 4, else 2); t = fma(u, step,
// |y|) (one rounding); q = floor(t / step(t)) * step(t), saturated at 6; NaN -> +6.
QM_HD float e2m1_sr_step(float v) { return v < 2.0f ? 0.5f : (v < 4.0f ? 1.0f : 2.0f); }
QM_HD uint32_t e2m1_sr_code(float y, uint8_t rb) {
  if (qm_isnan(y)) return 7u;
  const float a = qm_abs(y);
  const float u = qm_mul(static_cast<float>(rb), 0.00390625f);  // exact
#if defined(__CUDA_ARCH__)
  const float t = __fmaf_rn(u, e2m1_sr_step(a), a);
#else
  const float t = __builtin_fmaf(u, e2m1_sr_step(a), a);
#endif
  const float st = e2m1_sr_step(t);
  float q = qm_mul(floorf(qm_div(t, st)), st);  // division and product by a power of two: exact
  q = qm_fmin(q, 6.0f);
  return e2m1_code(q) | ((f2u(y) >> 28) & 8u);
}

QM_HD float e2m1_decode(uint8_t c) {
  // magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 as (m + 2) * 2^(e - 2) style bit construction
  const uint32_t i = c & 7u;
  float v;
  switch (i) {
    case 0: v = 0.0f; break;
    case 1: v = 0.5f; break;
    case 2: v = 1.0f; break;
    case 3: v = 1.5f; break;
    case 4: v = 2.0f; break;
    case 5: v = 3.0f; break;
    case 6: v = 4.0f; break;
    default: v = 6.0f; break;
  }
  return (c & 8u) ? -v : v;
}

QM_HD float e4m3_decode(uint8_t c) {
  const uint32_t s = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  if (e == 15u && m == 7u) return u2f(s | 0x7FC00000u);
  if (e == 0u) return u2f(s | f2u(static_cast<float>(m) * 0.001953125f));  // m * 2^-9, exact
  return u2f(s | ((e + 120u) << 23) | (m << 20));
}

QM_HD float e5m2_decode(uint8_t c) {
  const uint32_t s = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c >> 2) & 31u, m = c & 3u;
  if (e == 31u) return u2f(s | (m == 0u ? 0x7F800000u : 0x7FC00000u));
  if (e == 0u) return u2f(s | f2u(static_cast<float>(m) * 1.52587890625e-05f));  // m * 2^-16, exact
  return u2f(s | ((e + 112u) << 23) | (m << 21));
}

QM_HD float elem_decode(uint8_t c, Elem e) {
  return e == Elem::e4m3 ? e4m3_decode(c) : (e == Elem::e5m2 ? e5m2_decode(c) : e2m1_decode(c));
}

// 2^(k) as an fp32 for k in [-127, 127] (2^-127 is the subnormal 0x00400000).
QM_HD float pow2f(int k) {
  return k >= -126 ? u2f(static_cast<uint32_t>(k + 127) << 23) : u2f(0x00400000u);
}

// ---------------------------------------------------------------------------------- MX scales
QM_HD int mx_emax(Elem e) { return e == Elem::e4m3 ? 8 : (e == Elem::e5m2 ? 15 : 2); }

// Spec floor rule; `amax` with NaN propagated (torch.amax). NaN/Inf -> 0xFF; 0 / subnormal -> 0.
QM_HD uint8_t ue8m0_floor(float amax, int emax) {
  const uint32_t u = f2u(amax) & 0x7FFFFFFFu;
  if (u >= 0x7F800000u) return 0xFF;
  const int E = static_cast<int>(u >> 23);
  if (E == 0) return 0;  // zero or fp32 subnormal: floor(log2) <= -127, minus emax -> clamped to 0
  int e = E - emax;
  e = e < 0 ? 0 : (e > 254 ? 254 : e);
  return static_cast<uint8_t>(e);
}

// cvt.rp.satfinite.ue8m0 semantics (TE float_to_e8m0 of tests/cpp/test_common.h).
QM_HD uint8_t ue8m0_rceil(float v) {
  const uint32_t b = f2u(v) & 0x7FFFFFFFu;
  if (b > 0x7F800000u) return 0xFF;
  if (b == 0x7F800000u) return 0xFE;
  if (b == 0u) return 0x00;
  uint32_t e = b >> 23;
  const uint32_t m = b & 0x7FFFFFu;
  if (m > 0 && e != 0xFE && !(e == 0 && m <= 0x400000u)) ++e;
  return static_cast<uint8_t>(e);
}

// One MX element: P = RNE_satfinite(x * 2^(127-e)); scale byte 0xFF -> the element's NaN code
// (E2M1 has none: +6, any code is accepted there).
QM_HD uint8_t mx_encode(float x, uint8_t e, Elem el) {
  if (e == 0xFF) return el == Elem::e2m1 ? 7 : 0x7F;
  const float y = qm_mul(x, pow2f(127 - static_cast<int>(e)));  // exact wherever the code is nonzero
  return el == Elem::e2m1 ? e2m1_encode(y) : fp8_encode(y, el, true);
}

QM_HD float mx_dequant(uint8_t code, uint8_t e, Elem el) {
  if (e == 0xFF) return u2f(0x7FC00000u);
  return qm_mul(elem_decode(code, el), pow2f(static_cast<int>(e) - 127));
}

// ---------------------------------------------------------------------------------- NVFP4 (TE)
QM_HD float nvfp4_s_enc(float A) {
  float s = qm_fmin(qm_div(2688.0f, A), kFltMax);
  if (A == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}
struct Nvfp4Global {
  float s_dec;  // fl(1/S_enc)
  float t;      // fl(S_enc * fl(1/6))
};
QM_HD Nvfp4Global nvfp4_global(float A) {
  const float s = nvfp4_s_enc(A);
  Nvfp4Global g;
  g.s_dec = qm_div(1.0f, s);
  g.t = qm_mul(s, qm_div(1.0f, 6.0f));
  return g;
}
// Block scale code q_s from the block amax (fmaxf over the block: NaN dropped).
QM_HD uint8_t nvfp4_scale_code(float ab, const Nvfp4Global& g) {
  return fp8_encode(qm_fmin(qm_mul(ab, g.t), kFltMax), Elem::e4m3, true);
}
// Encode multiplier r of a block.
QM_HD float nvfp4_encode_mult(uint8_t qs, const Nvfp4Global& g) {
  return qm_fmin(qm_div(1.0f, qm_mul(e4m3_decode(qs), g.s_dec)), kFltMax);
}
// TE dequantize: fl(e2m1 * fl(fl(q_s * A) * fl(1/2688))). Where that block factor is not finite
// (A = Inf: the quantizer used S_enc = 1, and TE's formula gives Inf / NaN for finite codes) the
// decode scale the quantizer actually used is applied instead: fl(e2m1 * fl(q_s * S_dec)).
QM_HD float nvfp4_dequant(uint8_t code, uint8_t qs, float A) {
  const float q = e4m3_decode(qs);
  float fin = qm_mul(qm_mul(q, A), qm_div(1.0f, 2688.0f));
  if ((f2u(fin) & 0x7F800000u) == 0x7F800000u) fin = qm_mul(q, qm_div(1.0f, nvfp4_s_enc(A)));
  return qm_mul(e2m1_decode(code), fin);
}

// ---------------------------------------------------------------------------------- FP8 scaling
struct Fp8Scale {
  float amax, scale, scale_inv;
};
// TE compute_scale_from_amax (current scaling). `a` = fmaxf amax (NaN dropped) or the override.
QM_HD Fp8Scale fp8_scale_te(float a, float maxv, bool pow2, float eps) {
  Fp8Scale r;
  r.amax = a;
  float am = a < eps ? eps : a;
  float scale = 1.0f;
  if (!(qm_isinf(am) || am == 0.0f || qm_isnan(am))) {
    scale = qm_div(maxv, am);
    if (qm_isinf(scale)) scale = kFltMax;
    if (qm_isnan(scale)) scale = 1.0f;
    if (pow2) scale = u2f(f2u(scale) & 0xFF800000u);
  }
  r.scale = scale;
  r.scale_inv = qm_div(1.0f, scale);
  return r;
}
// DeepGEMM ceil_to_ue8m0: exponent field + (mantissa != 0), clamped to [1, 254].
QM_HD float ceil_to_ue8m0(float x) {
  const uint32_t b = f2u(x) & 0x7FFFFFFFu;
  int e = static_cast<int>(b >> 23) + ((b & 0x7FFFFFu) != 0 ? 1 : 0);
  e = e < 1 ? 1 : (e > 254 ? 254 : e);
  return u2f(static_cast<uint32_t>(e) << 23);
}
// DeepGEMM per_token / per_block cast: `a` = torch.amax (NaN propagates) or the override;
// amax clamped to >= 1e-4; sf = amax * fl(1/448) (CUDA tensor/scalar division); pow2: ceil_to_ue8m0;
// scale_inv = sf, scale = fl(1/sf).
QM_HD Fp8Scale fp8_scale_deepgemm(float a, bool pow2) {
  Fp8Scale r;
  if (!qm_isnan(a)) a = a < 1e-4f ? 1e-4f : a;
  r.amax = a;
  float sf = qm_mul(a, qm_div(1.0f, 448.0f));
  if (pow2) sf = ceil_to_ue8m0(sf);
  r.scale_inv = sf;
  r.scale = qm_div(1.0f, sf);
  return r;
}

}  // namespace assay::kernels::quant
