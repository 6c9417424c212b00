#include <cmath>
#include <limits>

#include "catch_compat.h"
#include "verify/judge/compare.h"
#include "verify/judge/tolerance.h"

using namespace assay;

namespace {
Output golden(std::vector<double> v, DType t = DType::f32) {
  Output o;
  o.expected = Tensor{"o", {"B", "H"}, {2, static_cast<int64_t>(v.size() / 2)}, t, std::move(v)};
  return o;
}
Tolerance loose() {
  Tolerance t;
  t.atol = 1e30;
  t.rtol = 1e30;
  t.why = "absurdly loose";
  return t;
}
}  // namespace

TEST_CASE("metrics are the hand-derived ones", "[cpu][L0]") {
  auto g = golden({1, 2, 3, 4});
  Tolerance t;
  t.atol = 0.05;
  auto r = compare_tensor(g, {1, 2.1, 3, 4}, t);
  // |2.1 - 2| = 0.1 > 0.05: one mismatch at flat 1 = [b=0, h=1].
  CHECK(r.max_abs == Approx(0.1));
  CHECK(r.max_rel == Approx(0.05));
  CHECK(r.rms_rel == Approx(0.1 / std::sqrt(30.0)));
  CHECK(r.mismatches == 1);
  CHECK(r.first_bad_index == "[b=0, h=1]");
  CHECK(r.worst_index == "[b=0, h=1]");
  CHECK(r.verdict == Verdict::Incorrect);
  t.max_mismatch = 1;
  CHECK(compare_tensor(g, {1, 2.1, 3, 4}, t).verdict == Verdict::Passed);
  // ULP in fp32 at 2.0 is 2^-22.
  auto u = compare_tensor(g, {1, 2 + 0x1p-22, 3, 4}, t);
  CHECK(u.ulp_max == Approx(1.0));
}

TEST_CASE("the worst mismatch is the largest excess over the allowance", "[cpu][L0]") {
  auto g = golden({1, 100, 3, 4});
  Tolerance t;
  t.rtol = 0.01;
  auto r = compare_tensor(g, {1.5, 100.9, 3, 4.2}, t);
  // excesses: 0.5-0.01=0.49, 0.9-1.0<0 (ok), 0.2-0.04=0.16 -> worst at flat 0
  CHECK(r.mismatches == 2);
  CHECK(r.worst_index == "[b=0, h=0]");
  CHECK(r.first_bad_index == "[b=0, h=0]");
}

TEST_CASE("never-pass: NaN, Inf, all-zero and constant candidates fail under any tolerance", "[cpu][L0]") {
  auto g = golden({1, -2, 3, 4});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto r = compare_tensor(g, {1, nan, 3, 4}, loose());
  CHECK(r.verdict == Verdict::Incorrect);
  CHECK(r.nonfinite_mismatches == 1);
  CHECK(compare_tensor(g, {1, -2, INFINITY, 4}, loose()).verdict == Verdict::Incorrect);
  auto z = compare_tensor(g, {0, 0, 0, 0}, loose());
  CHECK(z.verdict == Verdict::Incorrect);
  CHECK_THAT(z.summary(), assay_test::Contains("all zero"));
  auto k = compare_tensor(g, {2.5, 2.5, 2.5, 2.5}, loose());
  CHECK(k.verdict == Verdict::Incorrect);
  CHECK_THAT(k.summary(), assay_test::Contains("constant"));
  CHECK(compare_tensor(g, {1.1, -2.1, 3.1, 4.1}, loose()).verdict == Verdict::Passed);
  // A golden that is itself all zero / constant accepts the same candidate.
  CHECK(compare_tensor(golden({0, 0, 0, 0}), {0, 0, 0, 0}, Tolerance{}).verdict == Verdict::Passed);
  CHECK(compare_tensor(golden({7, 7, 7, 7}), {7, 7, 7, 7}, Tolerance{}).verdict == Verdict::Passed);
}

TEST_CASE("non-finite goldens need the same class at the same position", "[cpu][L0]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto g = golden({1, nan, INFINITY, 4});
  g.allow_nonfinite = true;
  CHECK(compare_tensor(g, {1, nan, INFINITY, 4}, Tolerance{}).verdict == Verdict::Passed);
  CHECK(compare_tensor(g, {1, nan, -INFINITY, 4}, loose()).verdict == Verdict::Incorrect);
  CHECK(compare_tensor(g, {1, 0, INFINITY, 4}, loose()).verdict == Verdict::Incorrect);
}

TEST_CASE("a finite truth past the output dtype's range must come back as the Inf it rounds to", "[cpu][L0]") {
  // MXFP4 dequant of code 6 with scale 2^127: 6 * 2^127 = 1.02e39 is finite in fp64, but fp32's
  // largest finite is (2 - 2^-23) * 2^127 = 3.4e38, so RNE gives +Inf.
  const double big = 6.0 * std::ldexp(1.0, 127);
  auto g = golden({1, big, -big, 4});
  auto t = loose();
  CHECK(compare_tensor(g, {1, INFINITY, -INFINITY, 4}, t).verdict == Verdict::Passed);
  // Saturating to FLT_MAX is not what fp32 rounding of the truth gives.
  const double fmax = std::numeric_limits<float>::max();
  auto r = compare_tensor(g, {1, fmax, -INFINITY, 4}, t);
  CHECK(r.verdict == Verdict::Incorrect);
  CHECK(r.nonfinite_mismatches == 1);
  CHECK_THAT(r.summary(), assay_test::Contains("rounds to +Inf in fp32"));
  CHECK(compare_tensor(g, {1, INFINITY, INFINITY, 4}, t).verdict == Verdict::Incorrect);
  // The same magnitude is finite in fp64 outputs: Inf there is wrong.
  CHECK(compare_tensor(golden({1, big, -big, 4}, DType::f64), {1, INFINITY, -INFINITY, 4}, t).verdict ==
        Verdict::Incorrect);
  // Below the fp32 rounding boundary (max + half an ulp) the truth stays finite in fp32.
  CHECK(compare_tensor(golden({1, fmax, -fmax, 4}), {1, INFINITY, -INFINITY, 4}, t).verdict == Verdict::Incorrect);
}

TEST_CASE("exact tolerance compares the spec-rounded value", "[cpu][L0]") {
  Output g = golden({0.5, 1.0, 6.0, -0.0}, DType::e2m1);
  g.rounded = std::vector<uint64_t>{0x1, 0x2, 0x7, 0x8};
  auto t = default_tolerance(DType::e2m1);
  REQUIRE(t.exact);
  CHECK(compare_tensor(g, {0.5, 1.0, 6.0, 0.0}, t).verdict == Verdict::Passed);  // +0 == -0
  auto r = compare_tensor(g, {0.5, 1.5, 6.0, 0.0}, t);
  CHECK(r.verdict == Verdict::Incorrect);
  CHECK(r.first_bad_index == "[b=0, h=1]");
}

TEST_CASE("bound-based tolerance scales with the per-element magnitude", "[cpu][L0]") {
  Output g = golden({1, 1, 1, 1});
  g.bound = std::vector<double>{1, 1, 100, 1};
  Tolerance t;
  t.bound_k = 0.01;
  auto r = compare_tensor(g, {1.005, 1, 1.9, 1}, t);  // allowed 0.01, 0.01, 1.0, 0.01
  CHECK(r.verdict == Verdict::Passed);
  CHECK(compare_tensor(g, {1.02, 1, 1, 1}, t).verdict == Verdict::Incorrect);
}

TEST_CASE("every default tolerance says why", "[cpu][L0]") {
  for (auto t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2, DType::e2m1, DType::ue8m0, DType::i32})
    CHECK(!default_tolerance(t).why.empty());
}

TEST_CASE("exact outputs accept the spec's other allowed encodings and nothing else", "[cpu][L0]") {
  Output g = golden({0.5, 1.0, 4.0, 2.0}, DType::e2m1);
  g.rounded = std::vector<uint64_t>{0x1, 0x2, 0x6, 0x4};
  // Element 2 may also be 3.0 (code 0x5); element 3 may also be encoded as the alternative 0.
  g.allowed_mask = std::vector<uint64_t>{1u << 1, 1u << 2, (1u << 6) | (1u << 5), 1u << 4};
  g.alt = std::vector<double>{0.5, 1.0, 4.0, 0.0};
  const auto t = default_tolerance(DType::e2m1);
  CHECK(compare_tensor(g, {0.5, 1.0, 3.0, 2.0}, t).verdict == Verdict::Passed);
  CHECK(compare_tensor(g, {0.5, 1.0, 4.0, 0.0}, t).verdict == Verdict::Passed);
  CHECK(compare_tensor(g, {0.5, 1.0, 6.0, 2.0}, t).verdict == Verdict::Incorrect);  // 6 not allowed
  CHECK(compare_tensor(g, {0.5, 1.0, 4.0, 3.0}, t).verdict == Verdict::Incorrect);  // neither 2 nor alt 0
}

TEST_CASE("periodic tolerance compares angles circularly", "[cpu][L0]") {
  const double two_pi = 6.283185307179586;
  Output g = golden({0.001, 3.0, two_pi - 0.001, 1.0});
  Tolerance t;
  t.atol = 0.01;
  t.period = two_pi;
  // 6.2822 vs 0.001 and 0.0005 vs 2pi-0.001 are 0.002 and 0.0015 apart on the circle.
  CHECK(compare_tensor(g, {two_pi - 0.001, 3.0, 0.0005, 1.0}, t).verdict == Verdict::Passed);
  CHECK(compare_tensor(g, {0.001, 3.5, two_pi - 0.001, 1.0}, t).verdict == Verdict::Incorrect);
  t.period = 0;
  CHECK(compare_tensor(g, {two_pi - 0.001, 3.0, 0.0005, 1.0}, t).verdict == Verdict::Incorrect);
}

TEST_CASE("a NaN alternative the golden allows is accepted as a class, under any tolerance", "[cpu][L0]") {
  // torchao's MX cast propagates a NaN inside a block (scale 0xFF, the block dequantizes to NaN);
  // TE drops it from the amax. The golden lists torchao's values as /alt: both must pass.
  Output g;
  g.expected = Tensor{"xhat", {"M", "N"}, {1, 3}, DType::f32, {0.5, 1.0, 2.0}};
  g.alt = std::vector<double>{std::nan(""), std::nan(""), 2.0};
  Tolerance t;
  t.rtol = 1e-6;
  CHECK(compare_tensor(g, {0.5, 1.0, 2.0}, t).verdict == Verdict::Passed);
  CHECK(compare_tensor(g, {std::nan(""), std::nan(""), 2.0}, t).verdict == Verdict::Passed);
  CHECK(compare_tensor(g, {std::nan(""), 1.0, std::nan("")}, t).verdict == Verdict::Incorrect);  // not allowed at [2]
  CHECK(compare_tensor(g, {INFINITY, 1.0, 2.0}, t).verdict == Verdict::Incorrect);             // Inf is not NaN
}

TEST_CASE("an all-NaN candidate's metrics are NaN, not a perfect 0 and 1", "[cpu][L0]") {
  auto g = golden({1, -2, 3, 4});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto r = compare_tensor(g, {nan, nan, nan, nan}, loose());
  CHECK(r.verdict == Verdict::Incorrect);
  CHECK(std::isnan(r.max_abs));
  CHECK(std::isnan(r.cosine));
  CHECK_THAT(r.summary(), assay_test::Contains("max_abs=nan"));
}

TEST_CASE("a second magnitude (bound2) adds bound2_k * bound2 to the allowance, nothing without its factor", "[cpu][L0]") {
  auto g = golden({1, 2, 3, 4});
  g.bound = std::vector<double>{1, 1, 1, 1};
  g.bound2 = std::vector<double>{0, 10, 0, 0};
  Tolerance t;
  t.bound_k = 0.01;
  const std::vector<double> a{1, 2.05, 3, 4};  // 0.05 off at [b=0, h=1]: 0.01 * 1 allows 0.01 only
  CHECK(compare_tensor(g, a, t).verdict == Verdict::Incorrect);
  t.bound2_k = 0.005;  // + 0.005 * 10 = 0.05 more
  CHECK(compare_tensor(g, a, t).verdict == Verdict::Passed);
  g.bound2.reset();  // a golden without the magnitude gets no extra allowance
  CHECK(compare_tensor(g, a, t).verdict == Verdict::Incorrect);
}
