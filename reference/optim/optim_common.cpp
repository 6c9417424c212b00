// Exact fp32 / bf16 helpers shared by every optimizer oracle: the double -> float cast, bit
// views, PyTorch's CUDA lerp, bf16 RNE and the correctly rounded integer powers used for bias
// corrections. See optim.h ("Small exact helpers").
#include <bit>
#include <cmath>

#include "reference/optim/optim.h"

namespace assay::optim {

float f32(double x) { return static_cast<float>(x); }  // IEEE RNE on SSE2 (default rounding mode)

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float float_of(uint32_t b) { return std::bit_cast<float>(b); }

float lerp_f32(float self, float end, float w) {
  // Lerp.h: (|w| < 0.5) ? self + w * (end - self) : end - (end - self) * (1 - w);
  // nvcc contracts both: fma(w, diff, self) and fma(-diff, 1 - w, end).
  const float diff = end - self;
  if (std::fabs(w) < 0.5f) return std::fma(w, diff, self);
  return std::fma(-diff, 1.0f - w, end);
}

uint16_t bf16_rne(float x) {
  uint32_t b = bits_of(x);
  if (std::isnan(x)) return static_cast<uint16_t>(((b >> 16) & 0x8000u) | 0x7FC0u);
  // Round-to-nearest-even on the low 16 bits; overflow carries into the exponent (-> Inf).
  const uint32_t lsb = (b >> 16) & 1u;
  b += 0x7FFFu + lsb;
  return static_cast<uint16_t>(b >> 16);
}
float bf16_to_f32(uint16_t code) { return float_of(static_cast<uint32_t>(code) << 16); }

// beta^t for integer t >= 0 in double-double (exact products via fma), rounded once: correctly
// rounded except in astronomically rare near-tie cases, and independent of the libm (glibc's pow
// and powf are accurate but not guaranteed correctly rounded; the goldens must not depend on them).
namespace {
struct DD {
  double hi, lo;
};
DD dd_mul(DD a, DD b) {
  const double p = a.hi * b.hi;
  double e = std::fma(a.hi, b.hi, -p);
  e += a.hi * b.lo + a.lo * b.hi;
  const double s = p + e;
  return {s, e - (s - p)};
}
DD dd_pow(double b, int64_t t) {
  DD r{1.0, 0.0}, x{b, 0.0};
  while (t > 0) {
    if (t & 1) r = dd_mul(r, x);
    x = dd_mul(x, x);
    t >>= 1;
  }
  return r;
}
}  // namespace
double pow_int_cr(double b, int64_t t) {
  const DD r = dd_pow(b, t);
  return r.hi + r.lo;  // normalised: hi is the nearest double
}
float powf_int_cr(float b, int64_t t) {
  const DD r = dd_pow(static_cast<double>(b), t);
  float f = static_cast<float>(r.hi);
  // Correct a double rounding (exact -> double -> float) with the low part.
  const double resid = (r.hi - static_cast<double>(f)) + r.lo;
  const float up = std::nextafter(f, INFINITY), dn = std::nextafter(f, -INFINITY);
  if (resid > 0 && resid > (static_cast<double>(up) - f) / 2) f = up;
  if (resid < 0 && -resid > (f - static_cast<double>(dn)) / 2) f = dn;
  return f;
}

}  // namespace assay::optim
