// Tests of the dtype codecs (reference/core/dtype.h), continued from test_dtype.cpp:
//  * hardware / compiler conversions where they exist (fp32 -> bf16 bit trick, fp64 -> _Float16);
//  * the worked examples of the quantization rules A2.1, A2.2, A2.3, A2.4, A2.5 and A4;
//  * encode_f32, the fp32 / fp64 / integer storage codecs, ulp.
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
