// Tests of the dtype codecs (reference/core/dtype.h) against a slow exact reference encoder
// (reference/tests/dtype_ref.h: a sorted table of every finite value of the format, built from the
// A1 bit layouts without calling decode(); nearest neighbour by exact comparison with the
// midpoint, which is exact in fp64 for every format here): names, decode tables, round trips,
// every midpoint, random values, double rounding. Hardware / compiler conversions, the worked
// examples of the quantization rules and the wide codecs: test_dtype_conversions.cpp.
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
#include "reference/tests/dtype_ref.h"

using namespace assay;
using namespace dtype_test;

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
