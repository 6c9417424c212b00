// Tests of the dtype codecs (reference/core/dtype.h) against independent references:
//  * a slow exact reference encoder (sorted table of every finite value of the format, built from
//    the A1 bit layouts without calling decode(); nearest neighbour by exact comparison with the
//    midpoint, which is exact in fp64 for every format here);
//  * hardware / compiler conversions where they exist (fp32 -> bf16 bit trick, fp64 -> _Float16);
//  * the worked examples of the quantization rules A2.1, A2.2, A2.3, A2.4, A2.5 and A4.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <omp.h>

#include "catch_compat.h"
#include "tests/common.h"
#include "reference/core/check.h"
#include "reference/core/dtype.h"

using namespace assay;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const DType kSmall[] = {DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::e2m1, DType::ue8m0};
const Overflow kModes[] = {Overflow::nonsat, Overflow::satfinite};

float bitsf(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
double bitsd(uint64_t b) {
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
RefFormat make_sm(DType t, int e, int m, int b, int n_top_special, uint64_t inf_code,
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

RefFormat make_ref(DType t) {
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
      f.sign_bit = 8;
      f.max_code = 7;
      f.inf_code = f.nan_code = 0;
      f.has_inf = f.has_nan = false;
      return f;
    }
    case DType::ue8m0: {
      RefFormat f;
      f.t = t;
      for (int e = 0; e <= 254; ++e) f.pos.push_back({std::pow(2.0, e - 127), uint64_t(e)});
      f.beyond = {std::pow(2.0, 128), 255};
      f.sign_bit = 0;
      f.max_code = 0xFE;
      f.inf_code = 0;
      f.nan_code = 0xFF;
      f.has_inf = false;
      f.has_nan = true;
      return f;
    }
    default: throw std::logic_error("make_ref: not a small format");
  }
}

const RefFormat& ref(DType t) {
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

uint64_t ref_overflow(const RefFormat& f, uint64_t sign, Overflow ov) {
  if (f.t == DType::ue8m0) return ov == Overflow::satfinite ? 0xFE : 0xFF;
  if (f.t == DType::e2m1 || ov == Overflow::satfinite) return sign | f.max_code;
  if (f.has_inf) return sign | f.inf_code;
  return sign | f.nan_code;  // e4m3 nonsat: NaN with the sign kept
}

uint64_t ref_encode(const RefFormat& f, double x, Overflow ov) {
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

uint64_t ref_encode(DType t, double x, Overflow ov) { return ref_encode(ref(t), x, ov); }

// Canonical NaN code (or e2m1's +6) of the format.
uint64_t canonical_nan(DType t) {
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
std::vector<double> midpoints(DType t) {
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

void record(Mismatch& mm, double x, uint64_t got, uint64_t want, Overflow ov) {
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

std::string describe(DType t, const Mismatch& mm) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: %lld mismatches; first x=%a ov=%d got=%#llx want=%#llx",
                std::string(name(t)).c_str(), mm.count, mm.x, mm.ov, (unsigned long long)mm.got,
                (unsigned long long)mm.want);
  return buf;
}

// A log-uniform magnitude over [2^lo_e, 2^hi_e) with a full random mantissa of 'mbits' bits,
// built from its bit fields (the range stays within fp64 normals).
double log_uniform(SplitMix64& r, int lo_e, int hi_e, int mbits) {
  const uint64_t u = r.next();
  const int e = lo_e + int(u % uint64_t(hi_e - lo_e));
  const uint64_t mant = r.next() >> 12;
  const uint64_t mask = ~((uint64_t{1} << (52 - mbits)) - 1);
  return bitsd((uint64_t(e + 1023) << 52) | (mant & mask));
}

// Exponent range of the random test values of a format: from 4 binades below half the smallest
// positive value to 3 binades above max (so overflow is exercised).
void exp_range(DType t, int& lo_e, int& hi_e) {
  const RefFormat& f = ref(t);
  const double minpos = t == DType::ue8m0 ? f.pos.front().v : f.pos[1].v;
  lo_e = std::ilogb(minpos) - 4;
  hi_e = std::ilogb(f.pos.back().v) + 3;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("dtype: info, names and parse_dtype", "[cpu][L0]") {
  const DType all[] = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2,
                       DType::e2m1, DType::ue8m0, DType::i8, DType::u8, DType::i32, DType::u32,
                       DType::i64};
  for (DType t : all) {
    auto p = parse_dtype(name(t));
    REQUIRE(p.has_value());
    CHECK(*p == t);
  }
  CHECK(parse_dtype("bfloat16") == DType::bf16);
  CHECK(parse_dtype("half") == DType::f16);
  CHECK(parse_dtype("float8_e4m3fn") == DType::e4m3);
  CHECK(parse_dtype("e4m3fn") == DType::e4m3);
  CHECK(parse_dtype("float8_e5m2") == DType::e5m2);
  CHECK(parse_dtype("e2m1") == DType::e2m1);
  CHECK(parse_dtype("e8m0") == DType::ue8m0);
  CHECK(parse_dtype("float32") == DType::f32);
  CHECK(parse_dtype("float64") == DType::f64);
  CHECK(parse_dtype("i32") == DType::i32);
  CHECK_FALSE(parse_dtype("fp8").has_value());
  CHECK_FALSE(parse_dtype("").has_value());
  CHECK_FALSE(parse_dtype("BF16x").has_value());
  // A1 table.
  CHECK(info(DType::e4m3).max_finite == 448.0);
  CHECK(info(DType::e5m2).max_finite == 57344.0);
  CHECK(info(DType::e2m1).max_finite == 6.0);
  CHECK(info(DType::f16).max_finite == 65504.0);
  CHECK(info(DType::bf16).max_finite == double(bitsf(0x7F7F0000u)));
  CHECK(info(DType::ue8m0).max_finite == std::ldexp(1.0, 127));
  CHECK(info(DType::e4m3).min_subnormal == std::ldexp(1.0, -9));
  CHECK(info(DType::e5m2).min_subnormal == std::ldexp(1.0, -16));
  CHECK(info(DType::bf16).min_subnormal == std::ldexp(1.0, -133));
  CHECK(info(DType::f16).min_subnormal == std::ldexp(1.0, -24));
  CHECK(info(DType::e2m1).min_subnormal == 0.5);
  CHECK(info(DType::ue8m0).min_subnormal == std::ldexp(1.0, -127));
  CHECK(info(DType::e2m1).bits == 4);
  CHECK(info(DType::e2m1).storage_bytes == 1);
  CHECK_FALSE(info(DType::e4m3).has_inf);
  CHECK_FALSE(info(DType::e2m1).has_nan);
  // The reference tables have the sizes the layouts imply.
  CHECK(ref(DType::bf16).pos.size() == 0x7F80u);  // 0x0000..0x7F7F
  CHECK(ref(DType::f16).pos.size() == 0x7C00u);
  CHECK(ref(DType::e4m3).pos.size() == 0x7Fu);
  CHECK(ref(DType::e5m2).pos.size() == 0x7Cu);
  CHECK(ref(DType::ue8m0).pos.size() == 255u);
  CHECK(ref(DType::e4m3).beyond.v == 480.0);
  CHECK(ref(DType::e5m2).beyond.v == 65536.0);
  CHECK(ref(DType::f16).beyond.v == 65536.0);
  CHECK(ref(DType::bf16).beyond.v == std::ldexp(1.0, 128));
}

TEST_CASE("dtype: decode matches the independent tables and hardware formats", "[cpu][L0]") {
  for (DType t : kSmall) {
    const RefFormat& f = ref(t);
    for (const Entry& e : f.pos) {
      INFO(name(t) << " code " << e.code);
      REQUIRE(decode(t, e.code) == e.v);
      if (f.sign_bit) {
        const double neg = decode(t, e.code | f.sign_bit);
        REQUIRE(neg == -e.v);
        REQUIRE(std::signbit(neg));  // -0 decodes to -0
      }
    }
  }
  // bf16 is the upper half of an fp32: compare with the float of bits << 16, every code.
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const double want = double(bitsf(c << 16));
    const double got = decode(DType::bf16, c);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      REQUIRE(is_nan_code(DType::bf16, c));
    } else {
      REQUIRE(got == want);
      REQUIRE(std::signbit(got) == std::signbit(want));
      REQUIRE(is_inf_code(DType::bf16, c) == std::isinf(want));
    }
  }
#if defined(__FLT16_MAX__)
  // IEEE binary16 through the compiler's _Float16, every code.
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const uint16_t u = uint16_t(c);
    _Float16 h;
    std::memcpy(&h, &u, 2);
    const double want = double(h);
    const double got = decode(DType::f16, c);
    if (std::isnan(want))
      REQUIRE(std::isnan(got));
    else
      REQUIRE((got == want && std::signbit(got) == std::signbit(want)));
  }
#endif
  // Special codes (A1).
  CHECK(std::isnan(decode(DType::e4m3, 0x7F)));
  CHECK(std::isnan(decode(DType::e4m3, 0xFF)));
  CHECK(decode(DType::e4m3, 0x7E) == 448.0);
  CHECK(decode(DType::e4m3, 0x01) == std::ldexp(1.0, -9));
  CHECK(decode(DType::e4m3, 0x08) == std::ldexp(1.0, -6));  // min normal
  CHECK(decode(DType::e5m2, 0x7C) == kInf);
  CHECK(decode(DType::e5m2, 0xFC) == -kInf);
  for (uint64_t c : {0x7Du, 0x7Eu, 0x7Fu, 0xFDu, 0xFEu, 0xFFu}) CHECK(is_nan_code(DType::e5m2, c));
  CHECK(decode(DType::e5m2, 0x7B) == 57344.0);
  CHECK(decode(DType::e2m1, 0x7) == 6.0);
  CHECK(decode(DType::e2m1, 0xF) == -6.0);
  CHECK(std::signbit(decode(DType::e2m1, 0x8)));
  CHECK(decode(DType::ue8m0, 0x00) == std::ldexp(1.0, -127));
  CHECK(decode(DType::ue8m0, 0x7F) == 1.0);
  CHECK(decode(DType::ue8m0, 0xFE) == std::ldexp(1.0, 127));
  CHECK(std::isnan(decode(DType::ue8m0, 0xFF)));
  for (DType t : kSmall) {
    CHECK_FALSE(is_inf_code(t, canonical_nan(t)));
    if (t != DType::e2m1) CHECK(is_nan_code(t, canonical_nan(t)));
  }
}

TEST_CASE("dtype: every code of the <=16-bit formats round-trips", "[cpu][L0]") {
  long long checked = 0;
  for (DType t : kSmall) {
    const RefFormat& f = ref(t);
    const uint64_t n_codes = uint64_t{1} << info(t).bits;
    for (uint64_t c = 0; c < n_codes; ++c) {
      const double v = decode(t, c);
      for (Overflow ov : kModes) {
        INFO(name(t) << " code " << c << " ov " << int(ov));
        const uint64_t back = encode(t, v, ov);
        if (std::isnan(v)) {
          REQUIRE(is_nan_code(t, c));
          REQUIRE(back == canonical_nan(t));
        } else if (std::isinf(v)) {
          REQUIRE(is_inf_code(t, c));
          // Inf re-encodes to itself without saturation, to +-max with it.
          const uint64_t sign = c & f.sign_bit;
          REQUIRE(back == (ov == Overflow::nonsat ? c : (sign | f.max_code)));
        } else {
          REQUIRE(back == c);  // includes -0 (sign kept)
          REQUIRE(encode_f32(t, float(v), ov) == c);  // every finite code is an fp32 value
          REQUIRE(round_to(t, v, ov) == v);
        }
        ++checked;
      }
    }
  }
  std::printf("[codecs] round-trip: %lld (code, mode) pairs over bf16/fp16/e4m3/e5m2/e2m1/ue8m0\n",
              checked);
}

TEST_CASE("dtype: encode equals the slow reference at every midpoint and its neighbours",
          "[cpu][L0]") {
  long long checked = 0;
  for (DType t : kSmall) {
    std::vector<double> pts;
    for (double m : midpoints(t)) {
      pts.push_back(m);
      pts.push_back(std::nextafter(m, kInf));
      pts.push_back(std::nextafter(m, -kInf));
      const float mf = float(m);
      REQUIRE(double(mf) == m);  // midpoints of these formats are fp32 values
      pts.push_back(double(std::nextafterf(mf, INFINITY)));
      pts.push_back(double(std::nextafterf(mf, -INFINITY)));
    }
    // The grid points themselves, half the smallest subnormal, beyond-max, extremes.
    for (const Entry& e : ref(t).pos) {
      pts.push_back(e.v);
      pts.push_back(std::nextafter(e.v, kInf));
      pts.push_back(std::nextafter(e.v, -kInf));
    }
    pts.push_back(ref(t).beyond.v);
    pts.push_back(std::nextafter(ref(t).beyond.v, kInf));
    pts.push_back(DBL_MAX);
    pts.push_back(DBL_TRUE_MIN);
    pts.push_back(double(FLT_MAX));
    pts.push_back(0x1p-149);
    pts.push_back(0.0);
    pts.push_back(kInf);
    Mismatch mm, mmf;
    for (double p : pts) {
      for (double x : {p, -p}) {
        for (Overflow ov : kModes) {
          const uint64_t want = ref_encode(t, x, ov);
          const uint64_t got = encode(t, x, ov);
          if (got != want) record(mm, x, got, want, ov);
          ++checked;
          const float xf = float(x);
          if (double(xf) == x) {
            const uint64_t gf = encode_f32(t, xf, ov);
            if (gf != want) record(mmf, x, gf, want, ov);
            ++checked;
          }
        }
      }
    }
    INFO(describe(t, mm));
    CHECK(mm.count == 0);
    INFO(describe(t, mmf));
    CHECK(mmf.count == 0);
  }
  std::printf("[codecs] midpoints +-1 ulp (fp64 and fp32), grid points, thresholds: %lld checks\n",
              checked);
}

TEST_CASE("dtype: encode equals the slow reference on 1e7 random fp32 and 1e7 random fp64 values "
          "per format",
          "[cpu][L0]") {
  const long long kN = 10'000'000;
  const long long kChunk = 1 << 16;
  long long total = 0;
  for (DType t : kSmall) {
    int lo_e, hi_e;
    exp_range(t, lo_e, hi_e);
    const std::vector<double> mids = midpoints(t);
    const RefFormat& rf = ref(t);
    Mismatch m32, m64;
    const long long n_chunks = (kN + kChunk - 1) / kChunk;
    long long n32 = 0, n64 = 0;
#pragma omp parallel for schedule(dynamic) reduction(+ : n32, n64)
    for (long long ch = 0; ch < n_chunks; ++ch) {
      SplitMix64 r{0xC0DEC5ull * 1000003ull + uint64_t(ch) * 0x9E37ull + uint64_t(t) * 0x1000000001ull};
      const long long end = std::min(kN, (ch + 1) * kChunk);
      for (long long i = ch * kChunk; i < end; ++i) {
        const uint64_t sel = r.next();
        const bool neg = sel & 1;
        const Overflow ov = (sel & 2) ? Overflow::satfinite : Overflow::nonsat;
        const int kind = int((sel >> 2) % 4);
        // fp64 value: 0 random bits, 1-2 log-uniform over the range, 3 near a midpoint.
        double x;
        if (kind == 0) {
          x = bitsd(r.next());
        } else if (kind == 3) {
          const double m = mids[r.next() % mids.size()];
          const int k = int(r.next() % 9) - 4;  // -4..+4 fp64 ulps
          x = m;
          for (int j = 0; j < std::abs(k); ++j) x = std::nextafter(x, k > 0 ? kInf : 0.0);
        } else {
          x = log_uniform(r, lo_e, hi_e, 52);
        }
        if (neg) x = -x;
        {
          const uint64_t want = ref_encode(rf, x, ov);
          const uint64_t got = encode(t, x, ov);
          if (got != want) record(m64, x, got, want, ov);
          ++n64;
        }
        // fp32 value: random bits, log-uniform, or a midpoint +- fp32 ulps.
        float xf;
        if (kind == 0) {
          xf = bitsf(uint32_t(r.next() >> 32));
        } else if (kind == 3) {
          const float m = float(mids[r.next() % mids.size()]);
          const int k = int(r.next() % 9) - 4;
          xf = m;
          for (int j = 0; j < std::abs(k); ++j) xf = std::nextafterf(xf, k > 0 ? INFINITY : 0.0f);
        } else {
          xf = float(log_uniform(r, lo_e, hi_e, 23));  // exact: 24-bit significand
        }
        if (neg) xf = -xf;
        {
          const uint64_t want = ref_encode(rf, double(xf), ov);
          const uint64_t got = encode_f32(t, xf, ov);
          if (got != want) record(m32, double(xf), got, want, ov);
          ++n32;
        }
      }
    }
    std::printf("[codecs] %-8s random: %lld fp64 + %lld fp32 values checked, mismatches %lld + %lld\n",
                std::string(name(t)).c_str(), n64, n32, m64.count, m32.count);
    total += n32 + n64;
    CHECK(n64 >= kN);
    CHECK(n32 >= kN);
    INFO("fp64: " << describe(t, m64));
    CHECK(m64.count == 0);
    INFO("fp32: " << describe(t, m32));
    CHECK(m32.count == 0);
  }
  std::printf("[codecs] random total: %lld values (%d threads)\n", total, omp_get_max_threads());
}

TEST_CASE("dtype: fp64 values that would double-round through fp32", "[cpu][L0]") {
  // Each case: x (fp64), the correct direct code, and the code that rounding to fp32 first would
  // give. The second is asserted too, so the test is known to distinguish the two paths.
  struct Case {
    const char* what;
    DType t;
    double x;
    uint64_t direct, via_f32;
  };
  const Case cases[] = {
      // bf16 ulp at 1 is 2^-7 (7 mantissa bits), so the midpoint of 1 (0x3F80) and 1+2^-7
      // (0x3F81) is 1+2^-8. x = 1+2^-8+2^-30 lies above it -> 0x3F81. fp32 (ulp 2^-23) drops
      // 2^-30 < 2^-24 and lands on the tie 1+2^-8, which RNE sends to the even 0x3F80.
      {"bf16 above tie", DType::bf16, 1 + 0x1p-8 + 0x1p-30, 0x3F81, 0x3F80},
      // Below a tie that fp32 rounds up onto: the midpoint of 1+2^-7 (0x3F81, odd) and 1+2^-6
      // (0x3F82) is 1+2^-7+2^-8; x = that - 2^-30 -> 0x3F81 directly; fp32 gives the tie, which
      // goes to the even 0x3F82.
      {"bf16 below tie", DType::bf16, 1 + 0x1p-7 + 0x1p-8 - 0x1p-30, 0x3F81, 0x3F82},
      // fp16 ulp at 1 is 2^-10; 1.0 = 0x3C00. Midpoint 1+2^-11; x above it by 2^-30 -> 0x3C01;
      // fp32 makes it the tie -> even 0x3C00.
      {"fp16 above tie", DType::f16, 1 + 0x1p-11 + 0x1p-30, 0x3C01, 0x3C00},
      // Midpoint of 0x3C01 (1+2^-10) and 0x3C02 (1+2^-9) is 1+2^-10+2^-11; just below -> 0x3C01,
      // via fp32 the tie -> 0x3C02.
      {"fp16 below tie", DType::f16, 1 + 0x1p-10 + 0x1p-11 - 0x1p-30, 0x3C01, 0x3C02},
      // fp16 subnormal: half the smallest subnormal 2^-25 is a tie (-> 0). x = 2^-25 + 2^-60 is
      // above it -> 0x0001; fp32 (ulp 2^-48 at 2^-25) rounds it to the tie -> 0x0000.
      {"fp16 subnormal", DType::f16, 0x1p-25 + 0x1p-60, 0x0001, 0x0000},
      // e4m3: 1.0 = exponent field 7 (bias 7), code 0x38; ulp 2^-3; midpoint 1+2^-4. Above it
      // -> 1.125 = 0x39; via fp32 -> tie -> even 0x38.
      {"e4m3 above tie", DType::e4m3, 1 + 0x1p-4 + 0x1p-30, 0x39, 0x38},
      // Midpoint of 0x39 (1.125) and 0x3A (1.25) is 1.1875; just below -> 0x39; via fp32 -> 0x3A.
      {"e4m3 below tie", DType::e4m3, 1.1875 - 0x1p-30, 0x39, 0x3A},
      // e4m3 overflow: 464 = 448 + 16 is the tie of 448 (0x7E, even) and 480; 464 + 2^-30 is
      // above it -> overflow (nonsat: NaN 0x7F); fp32 (ulp 2^-15 at 464) gives 464 -> 0x7E.
      {"e4m3 overflow", DType::e4m3, 464 + 0x1p-30, 0x7F, 0x7E},
      // e5m2: 1.0 = exponent 15 (bias 15), code 0x3C; ulp 2^-2; midpoint 1.125. Above -> 1.25
      // = 0x3D; via fp32 -> tie -> even 0x3C.
      {"e5m2 above tie", DType::e5m2, 1.125 + 0x1p-30, 0x3D, 0x3C},
      // Midpoint of 0x3D (1.25) and 0x3E (1.5) is 1.375; just below -> 0x3D; via fp32 -> 0x3E.
      {"e5m2 below tie", DType::e5m2, 1.375 - 0x1p-30, 0x3D, 0x3E},
      // e2m1: 1 = code 2, 1.5 = code 3, midpoint 1.25. Above -> 3; via fp32 -> tie -> even 2.
      {"e2m1 above tie", DType::e2m1, 1.25 + 0x1p-30, 0x3, 0x2},
      // 1.5 (code 3) and 2 (code 4): midpoint 1.75; just below -> 3; via fp32 -> tie -> 4.
      {"e2m1 below tie", DType::e2m1, 1.75 - 0x1p-30, 0x3, 0x4},
      // e2m1: 4 (code 6) and 6 (code 7), midpoint 5; above -> 6 (code 7); via fp32 -> 5 -> 4.
      {"e2m1 5+", DType::e2m1, 5 + 0x1p-30, 0x7, 0x6},
      // ue8m0: 1 (0x7F) and 2 (0x80), midpoint 1.5 rounds up; just below -> 0x7F; via fp32 the
      // value becomes 1.5 -> 0x80.
      {"ue8m0 below tie", DType::ue8m0, 1.5 - 0x1p-30, 0x7F, 0x80},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    CHECK(encode(c.t, c.x, Overflow::nonsat) == c.direct);
    CHECK(ref_encode(c.t, c.x, Overflow::nonsat) == c.direct);
    CHECK(encode(c.t, double(float(c.x)), Overflow::nonsat) == c.via_f32);
    CHECK(encode(c.t, -c.x, Overflow::nonsat) ==
          (c.t == DType::ue8m0 ? 0xFFu : (c.direct | ref(c.t).sign_bit)));
  }
#if defined(__FLT16_MAX__)
  // The compiler's fp64 -> _Float16 conversion (correctly rounded, no fp32 step) agrees.
  for (double x : {1 + 0x1p-11 + 0x1p-30, 1 + 0x1p-10 + 0x1p-11 - 0x1p-30, 0x1p-25 + 0x1p-60}) {
    _Float16 h = static_cast<_Float16>(x);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    CHECK(encode(DType::f16, x) == u);
  }
#endif
}

TEST_CASE("dtype: fp16 and bf16 agree with compiler / bit-trick conversions", "[cpu][L0]") {
  // bf16 from fp32 by the c10 bias trick (A2.3): (b + 0x7FFF + bit16) >> 16 for non-NaN b.
  long long n = 0;
  Mismatch mm;
#pragma omp parallel for reduction(+ : n)
  for (long long hi = 0; hi < 0x10000; ++hi) {
    // Every upper half (sign, exponent, bf16 mantissa) with the tie, its neighbours and a stride.
    static const std::vector<uint32_t> los = [] {
      std::vector<uint32_t> v{0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
      for (uint32_t lo = 0; lo < 0x10000; lo += 997) v.push_back(lo);
      return v;
    }();
    for (uint32_t lo : los) {
      const uint32_t b = uint32_t(hi << 16) | lo;
      const float x = bitsf(b);
      if (std::isnan(x)) continue;
      const uint32_t want = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
      const uint64_t got = encode_f32(DType::bf16, x);
      if (got != want) record(mm, double(x), got, want, Overflow::nonsat);
      ++n;
    }
  }
  INFO(describe(DType::bf16, mm));
  CHECK(mm.count == 0);
  std::printf("[codecs] bf16 vs c10 bias trick: %lld fp32 values\n", n);
#if defined(__FLT16_MAX__)
  Mismatch mh;
  long long nh = 0;
#pragma omp parallel for reduction(+ : nh)
  for (long long ch = 0; ch < 64; ++ch) {
    SplitMix64 r{uint64_t(ch) + 77};
    for (int i = 0; i < 20000; ++i) {
      const double x = (r.next() & 1 ? -1 : 1) * log_uniform(r, -30, 18, 52);
      _Float16 h = static_cast<_Float16>(x);
      uint16_t u;
      std::memcpy(&u, &h, 2);
      const uint64_t got = encode(DType::f16, x);
      if (got != u) record(mh, x, got, u, Overflow::nonsat);
      ++nh;
    }
  }
  INFO(describe(DType::f16, mh));
  CHECK(mh.count == 0);
  std::printf("[codecs] fp16 vs _Float16 (fp64 source): %lld values\n", nh);
#endif
}

TEST_CASE("dtype: spec examples (quantization.md A2)", "[cpu][L0]") {
  const auto S = Overflow::satfinite;
  const auto N = Overflow::nonsat;
  SECTION("e4m3 (A2.1, A2.2)") {
    // 464 = 448 + 16 is the tie between 448 (mantissa 110, even) and 480 -> 448 = 0x7E.
    CHECK(encode(DType::e4m3, 464.0, S) == 0x7E);
    CHECK(encode(DType::e4m3, 464.0, N) == 0x7E);
    CHECK(encode(DType::e4m3, 465.0, S) == 0x7E);
    CHECK(encode(DType::e4m3, 465.0, N) == 0x7F);
    for (double x : {479.0, 480.0, 500.0, 1e30, kInf}) {
      CHECK(encode(DType::e4m3, x, N) == 0x7F);
      CHECK(encode(DType::e4m3, x, S) == 0x7E);
      CHECK(encode(DType::e4m3, -x, N) == 0xFF);
      CHECK(encode(DType::e4m3, -x, S) == 0xFE);
    }
    CHECK(encode(DType::e4m3, kNaN, N) == 0x7F);
    CHECK(encode(DType::e4m3, -kNaN, N) == 0x7F);  // canonical NaN (sign dropped)
    CHECK(encode(DType::e4m3, kNaN, S) == 0x7F);
    // Half the smallest subnormal 2^-10 is a tie -> 0; just above -> 0x01.
    CHECK(encode(DType::e4m3, 0x1p-10) == 0x00);
    CHECK(encode(DType::e4m3, 0x1p-10 * 1.0001) == 0x01);
    CHECK(encode(DType::e4m3, -0x1p-10) == 0x80);
  }
  SECTION("e5m2 (A2.1, A2.2)") {
    CHECK(encode(DType::e5m2, 61439.0, N) == 0x7B);
    CHECK(encode(DType::e5m2, 61439.0, S) == 0x7B);
    // 61440 = 57344 + 4096: tie; 57344's mantissa 11 is odd -> rounds up = overflow.
    CHECK(encode(DType::e5m2, 61440.0, N) == 0x7C);
    CHECK(encode(DType::e5m2, 61440.0, S) == 0x7B);
    CHECK(encode(DType::e5m2, 65536.0, N) == 0x7C);
    CHECK(encode(DType::e5m2, 1e30, N) == 0x7C);
    CHECK(encode(DType::e5m2, kInf, N) == 0x7C);
    CHECK(encode(DType::e5m2, -kInf, N) == 0xFC);
    CHECK(encode(DType::e5m2, -kInf, S) == 0xFB);
    CHECK(encode(DType::e5m2, kNaN) == 0x7F);
    CHECK(encode(DType::e5m2, 0x1p-17) == 0x00);  // half the smallest subnormal: tie -> 0
    CHECK(encode(DType::e5m2, std::nextafter(0x1p-17, 1.0)) == 0x01);
  }
  SECTION("fp16 / bf16 (A2.3)") {
    CHECK(encode(DType::f16, 65519.0) == 0x7BFF);
    CHECK(encode(DType::f16, 65520.0) == 0x7C00);
    CHECK(encode(DType::f16, 65520.0, S) == 0x7BFF);
    CHECK(encode(DType::f16, kNaN) == 0x7E00);
    CHECK(encode(DType::f16, -kInf) == 0xFC00);
    CHECK(encode(DType::bf16, kNaN) == 0x7FC0);
    CHECK(encode_f32(DType::bf16, 3.0e38f) == 0x7F62);
    CHECK(encode_f32(DType::bf16, 3.4e38f) == 0x7F80);
    CHECK(encode_f32(DType::bf16, 3.4e38f, S) == 0x7F7F);
    CHECK(encode_f32(DType::bf16, bitsf(0x7F7F8000u)) == 0x7F80);  // ">= 0x7F7F8000 -> Inf"
    CHECK(encode_f32(DType::bf16, bitsf(0x7F7F7FFFu)) == 0x7F7F);
    CHECK(encode_f32(DType::bf16, bitsf(0xFF7F8000u)) == 0xFF80);
  }
  SECTION("e2m1 (A2.4)") {
    struct {
      double y;
      uint64_t code;
    } table[] = {{0.0, 0},  {0.25, 0}, {0.2500001, 1}, {0.5, 1},  {0.7499999, 1}, {0.75, 2},
                 {1.0, 2},  {1.25, 2}, {1.2500001, 3}, {1.5, 3},  {1.75, 4},      {2.0, 4},
                 {2.5, 4},  {2.5000001, 5}, {3.0, 5},  {3.4999999, 5}, {3.5, 6},  {4.0, 6},
                 {5.0, 6},  {5.0000001, 7}, {6.0, 7},  {7.0, 7},      {100.0, 7}, {kInf, 7}};
    for (auto& e : table) {
      INFO("y = " << e.y);
      for (Overflow ov : kModes) {
        CHECK(encode(DType::e2m1, e.y, ov) == e.code);
        CHECK(encode(DType::e2m1, -e.y, ov) == (e.code | 8));
      }
    }
    CHECK(encode(DType::e2m1, kNaN) == 0x7);  // TE: NaN -> +max
    CHECK(encode(DType::e2m1, -kNaN) == 0x7);
    CHECK(encode(DType::e2m1, -0.0) == 8);  // the header keeps -0 (the TE reference gives 0)
    CHECK(encode(DType::e2m1, -0.1) == 8);
  }
  SECTION("ue8m0 encode (header)") {
    // Nearest power of two in linear distance: 1.5 * 2^k is the midpoint and rounds up.
    CHECK(encode(DType::ue8m0, 1.0) == 0x7F);
    CHECK(encode(DType::ue8m0, 1.4999999) == 0x7F);
    CHECK(encode(DType::ue8m0, 1.5) == 0x80);
    CHECK(encode(DType::ue8m0, 3.0) == 0x81);
    CHECK(encode(DType::ue8m0, 0.75) == 0x7F);
    CHECK(encode(DType::ue8m0, 0x1p-127) == 0x00);
    CHECK(encode(DType::ue8m0, 1e-300) == 0x00);
    CHECK(encode(DType::ue8m0, 0.0) == 0x00);
    CHECK(encode(DType::ue8m0, -0.0) == 0x00);
    CHECK(encode(DType::ue8m0, -1.0) == 0xFF);
    CHECK(encode(DType::ue8m0, kNaN) == 0xFF);
    CHECK(encode(DType::ue8m0, 0x1p127) == 0xFE);
    CHECK(encode(DType::ue8m0, 0x1.8p127, N) == 0xFF);  // midpoint to 2^128: up -> overflow
    CHECK(encode(DType::ue8m0, 0x1.8p127, S) == 0xFE);
    CHECK(encode(DType::ue8m0, 0x1.7FFFFFFFFFFFFp127, N) == 0xFE);
    CHECK(encode(DType::ue8m0, kInf, N) == 0xFF);
    CHECK(encode(DType::ue8m0, kInf, S) == 0xFE);
  }
  SECTION("ue8m0 RCEIL (A2.5)") {
    CHECK(ue8m0_from_f32_rceil(NAN) == 0xFF);
    CHECK(ue8m0_from_f32_rceil(INFINITY) == 0xFE);
    CHECK(ue8m0_from_f32_rceil(-INFINITY) == 0xFE);
    CHECK(ue8m0_from_f32_rceil(0.0f) == 0x00);
    CHECK(ue8m0_from_f32_rceil(1.0f) == 0x7F);             // exact power: no round-up
    CHECK(ue8m0_from_f32_rceil(1.0000001f) == 0x80);       // mantissa != 0 -> e + 1
    CHECK(ue8m0_from_f32_rceil(0.75f) == 0x7F);            // ceil(log2 0.75) = 0
    CHECK(ue8m0_from_f32_rceil(FLT_MAX) == 0xFE);          // e = 0xFE stays (satfinite)
    CHECK(ue8m0_from_f32_rceil(0x1p127f) == 0xFE);
    CHECK(ue8m0_from_f32_rceil(FLT_MIN) == 0x01);          // 2^-126, exact
    // fp32 subnormals: byte 0 is 2^-127 (bits 0x00400000); round up only if mantissa > 0x400000.
    CHECK(ue8m0_from_f32_rceil(bitsf(0x00400000u)) == 0x00);
    CHECK(ue8m0_from_f32_rceil(bitsf(0x00400001u)) == 0x01);
    CHECK(ue8m0_from_f32_rceil(bitsf(0x003FFFFFu)) == 0x00);
    CHECK(ue8m0_from_f32_rceil(bitsf(0x00000001u)) == 0x00);
    CHECK(ue8m0_from_f32_rceil(bitsf(0x007FFFFFu)) == 0x01);
    // Equals ceil(log2 v) clamped to [-127, 127] (exact, by comparison with powers of two), on
    // every exponent field with a spread of mantissas, both signs (the magnitude counts).
    long long n = 0, bad = 0;
    for (uint32_t e = 0; e < 255; ++e) {
      for (uint32_t m : {0u, 1u, 2u, 0x3FFFFFu, 0x400000u, 0x400001u, 0x7FFFFEu, 0x7FFFFFu, 0x123457u}) {
        for (uint32_t s : {0u, 0x80000000u}) {
          const float v = bitsf(s | (e << 23) | m);
          if (v == 0.0f) continue;
          const double a = std::fabs(double(v));
          int k = -200;
          while (std::ldexp(1.0, k) < a) ++k;  // smallest k with 2^k >= a
          const int want = std::clamp(k, -127, 127) + 127;
          if (ue8m0_from_f32_rceil(v) != want) ++bad;
          ++n;
        }
      }
    }
    CHECK(bad == 0);
    CHECK(n > 4000);
  }
  SECTION("ue8m0 floor exponent (A4, MX)") {
    // shared_exp = floor(log2 amax) - emax_elem, biased by 127, clamped to [0, 254].
    CHECK(ue8m0_floor_exponent(448.0f, 8) == 127);    // e4m3: log2 448 = 8.8 -> 8 - 8 = 0
    CHECK(ue8m0_floor_exponent(511.99f, 8) == 127);
    CHECK(ue8m0_floor_exponent(512.0f, 8) == 128);
    CHECK(ue8m0_floor_exponent(255.9f, 8) == 126);
    CHECK(ue8m0_floor_exponent(6.0f, 2) == 127);      // e2m1: 2 - 2 = 0
    CHECK(ue8m0_floor_exponent(1.0f, 2) == 125);      // 0 - 2 = -2
    CHECK(ue8m0_floor_exponent(57344.0f, 15) == 127); // e5m2
    CHECK(ue8m0_floor_exponent(0.0f, 8) == 0);        // zero block -> byte 0
    CHECK(ue8m0_floor_exponent(FLT_MIN, 8) == 0);     // -126 - 8 clamps to -127
    CHECK(ue8m0_floor_exponent(bitsf(1u), 2) == 0);
    CHECK(ue8m0_floor_exponent(FLT_MAX, 0) == 254);   // 127 + 127
    CHECK(ue8m0_floor_exponent(FLT_MAX, -3) == 254);  // clamped
    CHECK(ue8m0_floor_exponent(INFINITY, 8) == 0xFF);
    CHECK(ue8m0_floor_exponent(NAN, 8) == 0xFF);
    // torchao FLOOR by the fp32 exponent field (A4), over random finite amax, emax 2, 4, 8, 15.
    SplitMix64 r{12345};
    long long bad = 0;
    for (int i = 0; i < 200000; ++i) {
      const uint32_t b = uint32_t(r.next() >> 33);  // non-negative
      const float amax = bitsf(b);
      if (!std::isfinite(amax)) continue;
      for (int emax : {2, 4, 8, 15}) {
        const int extracted = int((b >> 23) & 0xFF) - 127;
        const int want = std::clamp(extracted - emax, -127, 127) + 127;
        if (ue8m0_floor_exponent(amax, emax) != want) ++bad;
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("dtype: encode_f32 equals encode of the widened float", "[cpu][L0]") {
  long long n = 0, bad = 0;
  SplitMix64 r{99};
  for (DType t : kSmall) {
    for (int i = 0; i < 200000; ++i) {
      const float x = bitsf(uint32_t(r.next() >> 32));
      for (Overflow ov : kModes) {
        const uint64_t a = encode_f32(t, x, ov), b = encode(t, double(x), ov);
        if (a != b) ++bad;
        if (std::isnan(x) && a != canonical_nan(t)) ++bad;
        ++n;
      }
    }
  }
  CHECK(bad == 0);
  // Every NaN payload canonicalises.
  for (uint32_t b : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FA00000u})
    for (DType t : kSmall) CHECK(encode_f32(t, bitsf(b)) == canonical_nan(t));
  std::printf("[codecs] encode_f32 vs encode(double): %lld checks\n", n);
}

TEST_CASE("dtype: fp32, fp64 and integer storage codecs", "[cpu][L0]") {
  CHECK(encode(DType::f32, 1.0) == 0x3F800000u);
  CHECK(encode(DType::f32, 1 + 0x1p-24) == 0x3F800000u);               // tie -> even
  CHECK(encode(DType::f32, 1 + 0x1p-24 + 0x1p-40) == 0x3F800001u);     // above the tie
  CHECK(encode(DType::f32, 1e39) == 0x7F800000u);
  CHECK(encode(DType::f32, 1e39, Overflow::satfinite) == 0x7F7FFFFFu);
  CHECK(encode(DType::f32, -kInf, Overflow::satfinite) == 0xFF7FFFFFu);
  // FLT_MAX + ulp/2 = 2^128 - 2^103 is the tie; FLT_MAX's mantissa is odd -> overflow.
  CHECK(encode(DType::f32, 0x1p128 - 0x1p103) == 0x7F800000u);
  CHECK(encode(DType::f32, std::nextafter(0x1p128 - 0x1p103, 0.0)) == 0x7F7FFFFFu);
  CHECK(encode(DType::f32, 0x1p-150) == 0u);                           // tie -> 0
  CHECK(encode(DType::f32, std::nextafter(0x1p-150, 1.0)) == 1u);
  CHECK(encode(DType::f32, -0.0) == 0x80000000u);
  CHECK(encode(DType::f32, kNaN) == 0x7FC00000u);
  CHECK(is_nan_code(DType::f32, 0x7FC00000u));
  CHECK(is_inf_code(DType::f32, 0xFF800000u));
  CHECK(decode(DType::f32, 0x40490FDBu) == double(3.14159265f));
  CHECK(decode(DType::f64, encode(DType::f64, 0.1)) == 0.1);
  CHECK(encode(DType::f64, -0.0) == 0x8000000000000000ull);
  CHECK(std::isnan(decode(DType::f64, encode(DType::f64, kNaN))));

  CHECK(encode(DType::i8, -1.0) == 0xFFu);
  CHECK(encode(DType::i8, -128.0) == 0x80u);
  CHECK(encode(DType::i8, 127.0) == 0x7Fu);
  CHECK(decode(DType::i8, 0x80) == -128.0);
  CHECK(decode(DType::u8, 0xFF) == 255.0);
  CHECK(encode(DType::i32, -2.0) == 0xFFFFFFFEu);
  CHECK(decode(DType::i32, 0xFFFFFFFEu) == -2.0);
  CHECK(encode(DType::u32, 4294967295.0) == 0xFFFFFFFFu);
  CHECK(encode(DType::i64, -0x1p63) == 0x8000000000000000ull);
  CHECK(decode(DType::i64, 0x8000000000000000ull) == -0x1p63);
  CHECK(encode(DType::i64, 12345678901234.0) == 12345678901234ull);
  CHECK_THROWS_AS(encode(DType::i8, 128.0), InputError);
  CHECK_THROWS_AS(encode(DType::i8, -129.0), InputError);
  CHECK_THROWS_AS(encode(DType::u8, -1.0), InputError);
  CHECK_THROWS_AS(encode(DType::u32, 0x1p32), InputError);
  CHECK_THROWS_AS(encode(DType::i32, 0x1p31), InputError);
  CHECK_THROWS_AS(encode(DType::i64, 0x1p63), InputError);
  CHECK_THROWS_AS(encode(DType::i32, 1.5), InputError);
  CHECK_THROWS_AS(encode(DType::i32, kNaN), InputError);
  CHECK_THROWS_AS(encode(DType::i64, kInf), InputError);
  CHECK_FALSE(is_nan_code(DType::i32, 0xFFFFFFFFu));
}

TEST_CASE("dtype: ulp", "[cpu][L0]") {
  // ulp = 2^(max(floor(log2|x|), 1 - bias) - mant_bits); x = 0 -> the smallest subnormal.
  CHECK(ulp(DType::bf16, 1.0) == 0x1p-7);
  CHECK(ulp(DType::bf16, -3.0) == 0x1p-6);            // binade [2, 4)
  CHECK(ulp(DType::bf16, 0.0) == 0x1p-133);
  CHECK(ulp(DType::bf16, 1e-40) == 0x1p-133);         // subnormal range: 1 - 127 - 7
  CHECK(ulp(DType::f16, 65504.0) == 32.0);            // 2^(15 - 10)
  CHECK(ulp(DType::f16, 1e-6) == 0x1p-24);
  CHECK(ulp(DType::e4m3, 448.0) == 32.0);             // 2^(8 - 3)
  CHECK(ulp(DType::e4m3, 0.001) == 0x1p-9);
  CHECK(ulp(DType::e5m2, 57344.0) == 8192.0);         // 2^(15 - 2)
  CHECK(ulp(DType::e2m1, 6.0) == 2.0);                // 2^(2 - 1)
  CHECK(ulp(DType::e2m1, 0.5) == 0.5);                // subnormal: 2^(0 - 1)
  CHECK(ulp(DType::e2m1, 1.0) == 0.5);
  CHECK(ulp(DType::f32, 1.0) == 0x1p-23);
  CHECK(ulp(DType::f64, 1.0) == 0x1p-52);
  CHECK(ulp(DType::ue8m0, 1.0) == 1.0);
  // Derived: the gap above every positive finite code below max equals ulp at that code.
  for (DType t : kSmall) {
    const RefFormat& f = ref(t);
    for (size_t i = 0; i + 1 < f.pos.size(); ++i) {
      INFO(name(t) << " value " << f.pos[i].v);
      REQUIRE(ulp(t, f.pos[i].v) == f.pos[i + 1].v - f.pos[i].v);
    }
  }
}
