// Tests of the bf16 copies of fp32 masters (reference/optim/bf16_copy.cpp, optim_common.cpp).
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

TEST_CASE("bf16: RNE and TE ties-away at exact ties, RNE matches the core codec", "[cpu][L0]") {
  // bf16 has 8 significant bits: ulp(1) = 2^-7. 1 + 2^-8 is a tie between 1 (even) and 1 + 2^-7:
  // RNE -> 1, TE remainder (ties away) -> 1 + 2^-7. 1 + 3*2^-8 is a tie between 1 + 2^-7 (odd)
  // and 1 + 2^-6 (even): both -> 1 + 2^-6. Signs mirror.
  struct T {
    double x, rne, away;
  };
  const T ties[] = {{1 + 0x1p-8, 1, 1 + 0x1p-7},
                    {1 + 3 * 0x1p-8, 1 + 0x1p-6, 1 + 0x1p-6},
                    {-(1 + 0x1p-8), -1, -(1 + 0x1p-7)},
                    {0x1p-134 * 5, 0x1p-132, 0x1p-133 * 3}};  // bf16 subnormals (spacing 2^-133): tie 2.5 ulp
  for (const T& t : ties) {
    const float x = static_cast<float>(t.x);
    REQUIRE(static_cast<double>(x) == t.x);
    CHECK(bf16_to_f32(bf16_rne(x)) == static_cast<float>(t.rne));
    CHECK(bf16_to_f32(te_split_remainder(x).param) == static_cast<float>(t.away));
  }
  // RNE against the independent core codec on random fp32 bit patterns (finite, incl. ties).
  Rng r(5);
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = static_cast<uint32_t>(r.next());
    if (i % 4 == 0) b = (b & 0xFFFF0000u) | 0x8000u;  // force exact ties
    const float x = float_of(b);
    if (!std::isfinite(x)) continue;
    REQUIRE(bf16_rne(x) == assay::encode_f32(assay::DType::bf16, x));
  }
}

TEST_CASE("bf16: TE remainder recovers the master exactly, bf16 part is ties-away", "[cpu][L0]") {
  Rng r(11);
  for (int i = 0; i < 300000; ++i) {
    uint32_t b = static_cast<uint32_t>(r.next());
    if (i % 3 == 0) b = (b & 0xFFFF0000u) | 0x8000u;
    const float x = float_of(b);
    const Bf16Remainder pr = te_split_remainder(x);
    REQUIRE(bits_of(te_merge_remainder(pr)) == b);  // every bit pattern, NaN/Inf included
    if (!std::isfinite(x) || std::fabs(x) >= 0x1.fep127f) continue;
    // Independent: round half away from zero on the magnitude, in double.
    const double ax = std::fabs(static_cast<double>(x));
    const double lo = std::fabs(static_cast<double>(float_of(b & 0xFFFF0000u)));
    const double hi = std::fabs(static_cast<double>(float_of((b & 0xFFFF0000u) + 0x10000u)));
    const double want = (ax - lo >= hi - ax) ? hi : lo;
    REQUIRE(std::fabs(static_cast<double>(bf16_to_f32(pr.param))) == want);
  }
  // A full TE step with remainders equals the TE step on the fp32 master, bit for bit.
  const Case c = random_case(4096, 3);
  AdamHyper h;
  AdamState32 ref = st32(c, 4);
  AdamMasterState ms;
  for (float p : c.p) {
    const Bf16Remainder pr = te_split_remainder(p);
    ms.p_bf16.push_back(pr.param);
    ms.remainder.push_back(pr.remainder);
  }
  ms.m = c.m, ms.v = c.v, ms.step = 4;
  adam_step_f32(AdamImpl::te, h, c.g, ref);
  adam_step_bf16_master(AdamImpl::te, Bf16Copy::te_remainder, h, c.g, ms);
  size_t rne_differs = 0;
  for (size_t i = 0; i < c.p.size(); ++i) {
    REQUIRE(bits_of(te_merge_remainder({ms.p_bf16[i], ms.remainder[i]})) == bits_of(ref.p[i]));
    REQUIRE(bits_of(ms.m[i]) == bits_of(ref.m[i]));
    rne_differs += ms.p_bf16[i] != bf16_rne(ref.p[i]);
  }
  // RNE copy path: master equals the fp32 step, param = RNE(master).
  AdamMasterState rs;
  rs.master = c.p, rs.m = c.m, rs.v = c.v, rs.step = 4;
  for (float p : c.p) rs.p_bf16.push_back(bf16_rne(p));
  adam_step_bf16_master(AdamImpl::te, Bf16Copy::rne, h, c.g, rs);
  for (size_t i = 0; i < c.p.size(); ++i) {
    REQUIRE(bits_of(rs.master[i]) == bits_of(ref.p[i]));
    REQUIRE(rs.p_bf16[i] == bf16_rne(ref.p[i]));
  }
  std::printf("[optim] TE remainder bf16 != RNE bf16 on %zu of %zu (ties only; expected 0 for "
              "random data)\n", rne_differs, c.p.size());
}

TEST_CASE("bf16: stochastic rounding with explicit bits", "[cpu][L0]") {
  Rng r(21);
  for (int i = 0; i < 20000; ++i) {
    uint32_t b = static_cast<uint32_t>(r.next());
    const float x = float_of(b);
    if (!std::isfinite(x) || std::fabs(x) >= 0x1.fep127f) continue;
    const uint16_t down = static_cast<uint16_t>(b >> 16);  // toward zero
    const bool exact = (b & 0xFFFFu) == 0;
    const uint16_t up = exact ? down : static_cast<uint16_t>(down + 1);  // away from zero
    // torchao: r = 0 -> away from zero whenever inexact; r = 0xFFFF -> toward zero.
    CHECK(bf16_sr_torchao(x, 0) == up);
    CHECK(bf16_sr_torchao(x, 0xFFFF) == down);
    // PTX add-then-truncate: r = 0 truncates; r = 0xFFFF rounds every inexact value up.
    CHECK(bf16_sr_ptx(x, 0) == down);
    CHECK(bf16_sr_ptx(x, 0xFFFF) == up);
  }
  // Exhaustive over all 2^16 draws: exactly frac draws round up, so the mean is x exactly.
  for (float x : {1.0f + 0x1p-9f, -3.14159f, 1e-30f, 65504.5f}) {
    const uint32_t frac = bits_of(x) & 0xFFFFu;
    uint32_t ups_a = 0, ups_p = 0;
    double sum_a = 0, sum_p = 0;
    for (uint32_t rr = 0; rr < 65536; ++rr) {
      const uint16_t ca = bf16_sr_torchao(x, static_cast<uint16_t>(rr));
      const uint16_t cp = bf16_sr_ptx(x, static_cast<uint16_t>(rr));
      ups_a += ca != static_cast<uint16_t>(bits_of(x) >> 16);
      ups_p += cp != static_cast<uint16_t>(bits_of(x) >> 16);
      sum_a += bf16_to_f32(ca);
      sum_p += bf16_to_f32(cp);
    }
    CHECK(ups_a == frac);
    CHECK(ups_p == frac);
    CHECK(sum_a / 65536.0 == static_cast<double>(x));
    CHECK(sum_p / 65536.0 == static_cast<double>(x));
  }
  // Grid points are unchanged for every draw; Inf stays Inf.
  for (uint32_t rr : {0u, 1u, 0x8000u, 0xFFFFu}) {
    CHECK(bf16_sr_torchao(1.5f, static_cast<uint16_t>(rr)) == bf16_rne(1.5f));
    CHECK(bf16_sr_torchao(INFINITY, static_cast<uint16_t>(rr)) == 0x7F80);
  }
}
