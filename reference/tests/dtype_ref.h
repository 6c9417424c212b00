// The independent reference the dtype codec tests (test_dtype.cpp, test_dtype_conversions.cpp)
// compare reference/core/dtype.h against: a slow exact encoder written from quantization.md A1 / A2
// (a sorted table of every finite value of each small format, built from the bit layouts without
// calling decode()), and the helpers of the random and exhaustive sweeps (mismatch records,
// log-uniform values of a format's range).
#pragma once
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/core/dtype.h"
#include "tests/common.h"

namespace dtype_test {

using namespace assay;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline const DType kSmall[] = {DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::e2m1, DType::ue8m0};
inline const Overflow kModes[] = {Overflow::nonsat, Overflow::satfinite};

inline float bitsf(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline double bitsd(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

using assay_test::SplitMix64;

// ---------------------------------------------------------------------------------------------
// Slow exact reference, written from quantization.md A1 / A2 (not from dtype.cpp).
// ---------------------------------------------------------------------------------------------
struct Entry {
  double v;
  uint64_t code;  // positive code (ue8m0: the byte)
};

struct RefFormat {
  DType t;
  std::vector<Entry> pos;  // every finite value >= 0 (ue8m0: > 0), ascending, with its code
  std::vector<double> vals;  // pos[i].v (a compact copy for the binary search)
  Entry beyond;            // the next grid point past max on the continued grid, "code" max+1
  uint64_t sign_bit;       // 0 for ue8m0
  uint64_t max_code, inf_code, nan_code;
  bool has_inf, has_nan;
};

// Builds the table of a sign-magnitude format with e exponent bits, m mantissa bits and bias b from
// the layout: subnormals k*2^(1-b-m), normals (2^m + k) * 2^(E-m). The top n_top_special positive
// codes are not finite (Inf/NaN) and are left out.
inline RefFormat make_sm(DType t, int e, int m, int b, int n_top_special, uint64_t inf_code,
                  uint64_t nan_code) {
  RefFormat f;
  f.t = t;
  const int bits = 1 + e + m;
  f.sign_bit = uint64_t{1} << (bits - 1);
  const uint64_t n_pos = f.sign_bit;  // codes 0 .. 2^(bits-1)-1
  for (uint64_t c = 0; c + n_top_special < n_pos; ++c) {
    const uint64_t ef = c >> m, mf = c & ((uint64_t{1} << m) - 1);
    double v;
    if (ef == 0)
      v = double(mf) * std::pow(2.0, 1 - b - m);
    else
      v = double((uint64_t{1} << m) + mf) * std::pow(2.0, int(ef) - b - m);
    f.pos.push_back({v, c});
  }
  const size_t n = f.pos.size();
  // The top binade has uniform spacing, so the continued grid's next point is max + spacing.
  f.beyond = {f.pos[n - 1].v + (f.pos[n - 1].v - f.pos[n - 2].v), f.pos[n - 1].code + 1};
  f.max_code = f.pos[n - 1].code;
  f.inf_code = inf_code;
  f.nan_code = nan_code;
  f.has_inf = inf_code != 0;
  f.has_nan = nan_code != 0;
  return f;
}

inline RefFormat make_ref(DType t) {
  switch (t) {
    // A1: bf16 upper half of fp32: exp 0xFF is Inf (mant 0) or NaN -> 128 special positive codes.
    case DType::bf16: return make_sm(t, 8, 7, 127, 128, 0x7F80, 0x7FC0);
    // IEEE binary16: exp 31 -> 1024 special positive codes.
    case DType::f16: return make_sm(t, 5, 10, 15, 1024, 0x7C00, 0x7E00);
    // E4M3FN: only S.1111.111 is NaN; no Inf.
    case DType::e4m3: return make_sm(t, 4, 3, 7, 1, 0, 0x7F);
    // E5M2: exp 31 -> Inf 0x7C and NaN 0x7D..0x7F.
    case DType::e5m2: return make_sm(t, 5, 2, 15, 4, 0x7C, 0x7F);
    case DType::e2m1: {
      // A1 table: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 for index 0..7; next grid point 8.
      RefFormat f;
      f.t = t;
      const double mags[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
      for (int i = 0; i < 8; ++i) f.pos.push_back({mags[i], uint64_t(i)});
      f.beyond = {8.0, 8};
      f.sign_bit = 8, f.max_code = 7;  // no Inf, no NaN
      f.inf_code = f.nan_code = 0, f.has_inf = f.has_nan = false;
      return f;
    }
    case DType::ue8m0: {
      RefFormat f;
      f.t = t;
      for (int e = 0; e <= 254; ++e) f.pos.push_back({std::pow(2.0, e - 127), uint64_t(e)});
      f.beyond = {std::pow(2.0, 128), 255};
      f.sign_bit = 0, f.max_code = 0xFE;  // unsigned; 0xFF is the NaN, no Inf
      f.inf_code = 0, f.nan_code = 0xFF, f.has_inf = false, f.has_nan = true;
      return f;
    }
    default: throw std::logic_error("make_ref: not a small format");
  }
}

inline const RefFormat& ref(DType t) {
  static const std::vector<RefFormat> all = [] {
    std::vector<RefFormat> v;
    for (DType t : kSmall) {
      v.push_back(make_ref(t));
      for (const Entry& e : v.back().pos) v.back().vals.push_back(e.v);
    }
    return v;
  }();
  for (const auto& f : all)
    if (f.t == t) return f;

  throw std::logic_error("ref: unknown");
}

inline uint64_t ref_overflow(const RefFormat& f, uint64_t sign, Overflow ov) {
  if (f.t == DType::ue8m0) return ov == Overflow::satfinite ? 0xFE : 0xFF;
  if (f.t == DType::e2m1 || ov == Overflow::satfinite) return sign | f.max_code;
  if (f.has_inf) return sign | f.inf_code;
  return sign | f.nan_code;  // e4m3 nonsat: NaN with the sign kept
}

inline uint64_t ref_encode(const RefFormat& f, double x, Overflow ov) {
  const DType t = f.t;
  if (std::isnan(x)) return t == DType::e2m1 ? 0x7 : f.nan_code;
  uint64_t sign = 0;
  if (t == DType::ue8m0) {
    if (x == 0) return 0x00;
    if (x < 0) return 0xFF;
  } else if (std::signbit(x)) {
    sign = f.sign_bit;
  }
  const double a = std::fabs(x);
  if (std::isinf(a)) return ref_overflow(f, sign, ov);
  if (t == DType::ue8m0 && a <= f.pos.front().v) return 0x00;
  if (a > f.beyond.v) return ref_overflow(f, sign, ov);
  // Neighbours lo <= a <= hi on the continued grid.
  const size_t i = size_t(std::upper_bound(f.vals.begin(), f.vals.end(), a) - f.vals.begin());
  const Entry lo = f.pos[i - 1];
  const Entry hi = i == f.pos.size() ? f.beyond : f.pos[i];
  Entry r;
  if (a == lo.v) {
    r = lo;
  } else {
    const double mid = (lo.v + hi.v) / 2;  // exact: one more bit than the format needs
    if (a < mid)
      r = lo;
    else if (a > mid)
      r = hi;
    else if (t == DType::ue8m0)
      r = hi;  // header: the power-of-two midpoint rounds up
    else
      r = (lo.code % 2 == 0) ? lo : hi;  // tie: even code
  }
  if (r.code == f.beyond.code) return ref_overflow(f, sign, ov);
  return sign | r.code;
}

inline uint64_t ref_encode(DType t, double x, Overflow ov) { return ref_encode(ref(t), x, ov); }

// Canonical NaN code (or e2m1's +6) of the format.
inline uint64_t canonical_nan(DType t) {
  switch (t) {
    case DType::bf16: return 0x7FC0;
    case DType::f16: return 0x7E00;
    case DType::e4m3: return 0x7F;
    case DType::e5m2: return 0x7F;
    case DType::e2m1: return 0x7;
    case DType::ue8m0: return 0xFF;
    default: return 0;
  }
}

// The midpoints of adjacent grid points, including 0..min_subnormal and max..beyond (ue8m0 has no
// 0: its first interval is 2^-127..2^-126; values <= 2^-127 go to 0x00 and are covered by the
// grid-point neighbours in the midpoint test).
inline std::vector<double> midpoints(DType t) {
  const RefFormat& f = ref(t);
  std::vector<double> m;
  for (size_t i = 0; i + 1 < f.pos.size(); ++i) m.push_back((f.pos[i].v + f.pos[i + 1].v) / 2);
  m.push_back((f.pos.back().v + f.beyond.v) / 2);
  return m;
}

struct Mismatch {
  long long count = 0;
  double x = 0;
  uint64_t got = 0, want = 0;
  int ov = 0;
};

inline void record(Mismatch& mm, double x, uint64_t got, uint64_t want, Overflow ov) {
#pragma omp critical(codec_mismatch)
  {
    if (mm.count == 0) {
      mm.x = x;
      mm.got = got;
      mm.want = want;
      mm.ov = int(ov);
    }
    ++mm.count;
  }
}

inline std::string describe(DType t, const Mismatch& mm) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: %lld mismatches; first x=%a ov=%d got=%#llx want=%#llx",
                std::string(name(t)).c_str(), mm.count, mm.x, mm.ov, (unsigned long long)mm.got,
                (unsigned long long)mm.want);
  return buf;
}

// A log-uniform magnitude over [2^lo_e, 2^hi_e) with a full random mantissa of 'mbits' bits,
// built from its bit fields (the range stays within fp64 normals).
inline double log_uniform(SplitMix64& r, int lo_e, int hi_e, int mbits) {
  const uint64_t u = r.next();
  const int e = lo_e + int(u % uint64_t(hi_e - lo_e));
  const uint64_t mant = r.next() >> 12;
  const uint64_t mask = ~((uint64_t{1} << (52 - mbits)) - 1);
  return bitsd((uint64_t(e + 1023) << 52) | (mant & mask));
}

// Exponent range of the random test values of a format: from 4 binades below half the smallest
// positive value to 3 binades above max (so overflow is exercised).
inline void exp_range(DType t, int& lo_e, int& hi_e) {
  const RefFormat& f = ref(t);
  const double minpos = t == DType::ue8m0 ? f.pos.front().v : f.pos[1].v;
  lo_e = std::ilogb(minpos) - 4;
  hi_e = std::ilogb(f.pos.back().v) + 3;
}

}  // namespace dtype_test
