// Tests of the quantization oracles (reference/quant): the scalar codecs, special values through
// every recipe, the mutants, the golden builders and a hidden benchmark; NVFP4 in
// test_quant_nvfp4.cpp, MX, FP8, the swizzle and the GEMM in test_quant_mx_fp8_gemm.cpp. Expected
// values are either derived by hand in a comment or come from the independently built form
// (quant::ref). The agreement figures are printed (WARN) so that the report can quote them.
#include <chrono>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "catch_compat.h"
#include "reference/core/dtype.h"
#include "reference/quant/quant.h"
#include "reference/quant/tests/quant_test_util.h"

using namespace assay;
using namespace assay::quant;
using namespace quant_test;

// ================================================================================================
// Scalar codecs
// ================================================================================================

TEST_CASE("E2M1: every midpoint and boundary, codec vs spec table vs exhaustive", "[cpu][L0]") {
  // Spec A2.4: ties 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4; (5, inf) -> 6.
  struct Case { float y; uint8_t code; };
  const Case cases[] = {{0.0f, 0},  {0.25f, 0}, {0.75f, 2},  {1.25f, 2},  {1.75f, 4}, {2.5f, 4},
                        {3.5f, 6},  {5.0f, 6},  {6.0f, 7},   {7.0f, 7},   {1e30f, 7}, {-0.25f, 8},
                        {-0.75f, 10}, {-5.0f, 14}, {-6.5f, 15}, {0.5f, 1}, {3.0f, 5}, {4.0f, 6}};
  for (const auto& c : cases) {
    INFO("y = " << c.y);
    CHECK(e2m1_rn(c.y) == c.code);
    CHECK(ref::e2m1_table(c.y) == c.code);
    CHECK(ref::encode_exhaustive(DType::e2m1, c.y, Overflow::satfinite) == c.code);
  }
  // +-1 fp32 ulp around every midpoint: the side decides.
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const uint8_t below[] = {0, 1, 2, 3, 4, 5, 6}, above[] = {1, 2, 3, 4, 5, 6, 7};
  for (int i = 0; i < 7; ++i) {
    CHECK(e2m1_rn(std::nextafter(mids[i], 0.0f)) == below[i]);
    CHECK(e2m1_rn(std::nextafter(mids[i], 10.0f)) == above[i]);
    CHECK(ref::e2m1_table(std::nextafter(mids[i], 10.0f)) == above[i]);
  }
  // Dense sweep: all multiples of 2^-14 in [-8, 8] plus +-1 ulp neighbours; the three encoders agree.
  int64_t n = 0, bad = 0;
  for (int64_t k = -8 * 16384; k <= 8 * 16384; ++k) {
    const float y0 = static_cast<float>(std::ldexp(static_cast<double>(k), -14));
    for (float y : {y0, std::nextafter(y0, -1e9f), std::nextafter(y0, 1e9f)}) {
      const uint8_t a = e2m1_rn(y), b = ref::e2m1_table(y),
                    c = ref::encode_exhaustive(DType::e2m1, y, Overflow::satfinite);
      ++n;
      if (a != b || a != c) ++bad;
    }
  }
  WARN("E2M1 codec vs table vs exhaustive: " << bad << " disagreements over " << n << " inputs");
  CHECK(bad == 0);
  // NaN -> +6 (TE satfinite fallback), Inf -> +-6.
  CHECK(e2m1_rn(std::numeric_limits<float>::quiet_NaN()) == 7);
  CHECK(e2m1_rn(-std::numeric_limits<float>::infinity()) == 15);
}

TEST_CASE("E4M3/E5M2: every midpoint, boundary and overflow rule vs exhaustive search", "[cpu][L0]") {
  for (DType t : {DType::e4m3, DType::e5m2}) {
    const int maxc = t == DType::e4m3 ? 0x7E : 0x7B;
    int64_t n = 0, bad = 0;
    for (Overflow ov : {Overflow::satfinite, Overflow::nonsat}) {
      for (int c = 0; c < maxc; ++c) {
        const double lo = decode(t, static_cast<uint64_t>(c)), hi = decode(t, static_cast<uint64_t>(c + 1));
        const float mid = static_cast<float>(0.5 * (lo + hi));  // exact in fp32
        REQUIRE(static_cast<double>(mid) == 0.5 * (lo + hi));
        for (float y : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)})
          for (float s : {y, -y}) {
            const uint64_t a = encode_f32(t, s, ov);
            const uint8_t b = ref::encode_exhaustive(t, s, ov);
            ++n;
            if (a != b) {
              ++bad;
              if (bad < 5) WARN(name(t) << " x=" << s << " codec=" << a << " exhaustive=" << int(b));
            }
          }
        // tie rule at the midpoint: the even code
        CHECK(encode_f32(t, mid, ov) == static_cast<uint64_t>((c % 2 == 0) ? c : c + 1));
      }
    }
    WARN(name(t) << " codec vs exhaustive: " << bad << " disagreements over " << n << " inputs");
    CHECK(bad == 0);
  }
  // Overflow (A2.1): E4M3 464 is a tie -> 448; above -> sat 448 / nonsat NaN (sign kept).
  CHECK(encode_f32(DType::e4m3, 464.0f, Overflow::satfinite) == 0x7E);
  CHECK(encode_f32(DType::e4m3, 464.0f, Overflow::nonsat) == 0x7E);
  CHECK(encode_f32(DType::e4m3, std::nextafter(464.0f, 1e9f), Overflow::satfinite) == 0x7E);
  CHECK(encode_f32(DType::e4m3, std::nextafter(464.0f, 1e9f), Overflow::nonsat) == 0x7F);
  CHECK(encode_f32(DType::e4m3, -1e30f, Overflow::nonsat) == 0xFF);
  CHECK(encode_f32(DType::e4m3, -INFINITY, Overflow::satfinite) == 0xFE);
  CHECK(ref::encode_exhaustive(DType::e4m3, std::nextafter(464.0, 1e9), Overflow::nonsat) == 0x7F);
  // E5M2: 61440 is overflow (57344 has an odd mantissa).
  CHECK(encode_f32(DType::e5m2, 61440.0f, Overflow::satfinite) == 0x7B);
  CHECK(encode_f32(DType::e5m2, 61440.0f, Overflow::nonsat) == 0x7C);
  CHECK(ref::encode_exhaustive(DType::e5m2, 61440.0, Overflow::nonsat) == 0x7C);
  CHECK(encode_f32(DType::e5m2, std::nextafter(61440.0f, 0.0f), Overflow::nonsat) == 0x7B);
  // Subnormals: half the smallest subnormal is a tie to 0.
  CHECK(encode_f32(DType::e4m3, 0x1.0p-10f, Overflow::satfinite) == 0x00);
  CHECK(encode_f32(DType::e4m3, std::nextafter(0x1.0p-10f, 1.0f), Overflow::satfinite) == 0x01);
  CHECK(encode_f32(DType::e5m2, 0x1.0p-17f, Overflow::satfinite) == 0x00);
}

TEST_CASE("UE8M0: RCEIL and floor rules vs frexp derivations over all fp32 exponents", "[cpu][L0]") {
  int64_t n = 0, bad_r = 0, bad_f = 0;
  Rng g(7);
  for (uint32_t e = 0; e < 256; ++e)
    for (int k = 0; k < 64; ++k) {
      uint32_t mant = k == 0 ? 0u : (k == 1 ? 1u : (k == 2 ? 0x400000u : (k == 3 ? 0x400001u : (k == 4 ? 0x7FFFFFu : static_cast<uint32_t>(g.next() & 0x7FFFFF)))));
      const float v = f32_bits((e << 23) | mant);
      ++n;
      if (ue8m0_from_f32_rceil(v) != ref::ue8m0_rceil_ref(v)) {
        ++bad_r;
        if (bad_r < 4) WARN("rceil v=" << v << " core=" << int(ue8m0_from_f32_rceil(v)) << " ref=" << int(ref::ue8m0_rceil_ref(v)));
      }
      for (int emax : {2, 8, 15})
        if (ue8m0_floor_exponent(v, emax) != ref::ue8m0_floor_ref(v, emax)) {
          ++bad_f;
          if (bad_f < 4) WARN("floor v=" << v << " emax=" << emax << " core=" << int(ue8m0_floor_exponent(v, emax)) << " ref=" << int(ref::ue8m0_floor_ref(v, emax)));
        }
    }
  WARN("UE8M0 rceil disagreements " << bad_r << ", floor " << bad_f << " over " << n << " inputs");
  CHECK(bad_r == 0);
  CHECK(bad_f == 0);
  // Hand-derived (A2.5): 1.0 -> 127; 1.0000001 -> 128; 2^-127 (bits 0x00400000) -> 0; just above -> 1.
  CHECK(ue8m0_from_f32_rceil(1.0f) == 127);
  CHECK(ue8m0_from_f32_rceil(std::nextafter(1.0f, 2.0f)) == 128);
  CHECK(ue8m0_from_f32_rceil(f32_bits(0x00400000)) == 0);
  CHECK(ue8m0_from_f32_rceil(f32_bits(0x00400001)) == 1);
  CHECK(ue8m0_from_f32_rceil(INFINITY) == 0xFE);
  CHECK(ue8m0_from_f32_rceil(NAN) == 0xFF);
}

TEST_CASE("packing: element 2k in the low nibble, odd widths", "[cpu][L0]") {
  // codes row 0: 1 2 3 ; row 1: 15 0 7 -> bytes (2<<4|1)=0x21, 0x03 ; (0<<4|15)=0x0F, 0x07
  std::vector<uint8_t> c = {1, 2, 3, 15, 0, 7};
  auto p = pack_e2m1(c, 2, 3);
  REQUIRE(p == std::vector<uint8_t>{0x21, 0x03, 0x0F, 0x07});
  REQUIRE(unpack_e2m1(p, 2, 3) == c);
}

TEST_CASE("special values through every recipe: forms agree", "[cpu][L0]") {
  // zeros (+-0), fp32 and bf16 subnormals, E2M1/E4M3 midpoints, 448*6, beyond max, +-Inf, NaN;
  // ragged 40 x 70 so that blocks of 16, 32 and 128 are all partial at the edges.
  const int64_t M = 48, N = 70;
  auto x = bf16_matrix(M, N, 8080);
  const float specials[] = {0.0f, -0.0f, 0x1.0p-149f, -0x1.0p-140f, 0x1.0p-133f, 1e-38f, 0.25f, 0.75f, 2.5f,
                            5.0f, 2688.0f, -2688.0f, 464.0f, 480.0f, 1e30f, -1e30f, 57344.0f, 61440.0f,
                            INFINITY, -INFINITY, NAN};
  Rng g(9);
  for (int i = 0; i < 200; ++i) x[g.next() % (M * N)] = specials[g.next() % 21];
  for (int64_t c = 0; c < 16; ++c) x[2 * N + c] = 0.0f;  // an all-zero block in row 2
  int64_t cmp = 0;
  auto same_nan_class = [&](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType t) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ++cmp;
      if (is_nan_code(t, a[i])) CHECK(is_nan_code(t, b[i]));
      else CHECK(a[i] == b[i]);
    }
  };
  for (auto rec : {Nvfp4Recipe::te, Nvfp4Recipe::torchao})
    for (bool two_d : {false, true}) {
      if (rec == Nvfp4Recipe::torchao && two_d) continue;
      Nvfp4Config cfg;
      cfg.recipe = rec;
      cfg.block_2d = two_d;
      cfg.columnwise = true;
      auto [a, b] = both_forms(x, M, N, cfg);
      for (auto [da, db] : {std::pair{&*a.row, &*b.row}, std::pair{&*a.col, &*b.col}}) {
        same_nan_class(da->scales, db->scales, DType::e4m3);
        // codes: compare within the allowed set of the kernel form
        auto mm = compare_codes("codes", da->codes, &da->allowed, db->codes, da->rows, da->cols, 1, 16);
        CHECK_FALSE(mm.has_value());
        if (mm) WARN(mm->message);
      }
    }
  for (DType el : {DType::e4m3, DType::e5m2, DType::e2m1})
    for (auto rule : {MxScaleRule::floor, MxScaleRule::rceil}) {
      auto cfg = mx_config(el, rule, true);
      auto [a, b] = both_forms(x, M, N, cfg);
      CHECK(a.row->scales == b.row->scales);
      CHECK(a.col->scales == b.col->scales);
      if (el == DType::e2m1) {
        CHECK_FALSE(compare_codes("mxfp4", a.row->codes, &a.row->allowed, b.row->codes, M, N, 1, 32).has_value());
      } else {
        same_nan_class(a.row->codes, b.row->codes, el);
        same_nan_class(a.col->codes, b.col->codes, el);
      }
    }
  for (auto gran : {Fp8Granularity::per_tensor, Fp8Granularity::per_channel, Fp8Granularity::block_1x128,
                    Fp8Granularity::block_128x128})
    for (auto rec : {Fp8ScaleRecipe::te_current, Fp8ScaleRecipe::deepgemm})
      for (auto ov : {Overflow::satfinite, Overflow::nonsat}) {
        Fp8Config cfg;
        cfg.gran = gran;
        cfg.recipe = rec;
        cfg.overflow = ov;
        auto [a, b] = both_forms(x, M, N, cfg);
        same_nan_class(a.codes, b.codes, DType::e4m3);
        for (size_t i = 0; i < a.scale.size(); ++i) {
          CHECK((a.scale[i] == b.scale[i] || (std::isnan(a.scale[i]) && std::isnan(b.scale[i]))));
          CHECK((a.scale_inv[i] == b.scale_inv[i] || (std::isnan(a.scale_inv[i]) && std::isnan(b.scale_inv[i]))));
        }
      }
  WARN("special-value fixture: " << cmp << " code comparisons, forms agree");
}

TEST_CASE("FP8 codecs vs exhaustive search on random fp32 inputs", "[cpu][L0]") {
  Rng g(606);
  int64_t n = 0, bad = 0;
  for (int i = 0; i < 60000; ++i) {
    // random sign/exponent in the interesting range [2^-20, 2^18) and random mantissa
    const uint32_t e = 107 + static_cast<uint32_t>(g.next() % 38);
    const float v = f32_bits(((g.next() & 1) << 31) | (e << 23) | static_cast<uint32_t>(g.next() & 0x7FFFFF));
    for (DType t : {DType::e4m3, DType::e5m2})
      for (Overflow ov : {Overflow::satfinite, Overflow::nonsat}) {
        ++n;
        if (encode_f32(t, v, ov) != ref::encode_exhaustive(t, v, ov)) ++bad;
      }
  }
  WARN("FP8 codec vs exhaustive on random fp32: " << bad << " disagreements over " << n);
  CHECK(bad == 0);
}

// ================================================================================================
// Mutants: the comparison must reject each one (and accept the value-equivalent q_s = 0 variant).
// ================================================================================================

TEST_CASE("mutants are rejected, with the first bad block named", "[cpu][L0]") {
  const int64_t M = 32, N = 64;
  auto x = bf16_matrix(M, N, 2024);
  Nvfp4Config cfg;
  auto good = nvfp4_quantize(x, M, N, cfg);
  const auto& gd = *good.row;
  auto run = [&](Mutant m) {
    Nvfp4Config c = cfg;
    c.mutant = m;
    return nvfp4_quantize(x, M, N, c);
  };
  SECTION("nibble swap") {
    auto bad = run(Mutant::nibble_swap);
    CHECK(bad.row->packed != gd.packed);
    auto un = unpack_e2m1(bad.row->packed, M, N);
    auto mm = compare_codes("codes", gd.codes, &gd.allowed, un, M, N, 1, 16);
    REQUIRE(mm.has_value());
    WARN(mm->message);
  }
  SECTION("ties away from zero") {
    // Fixture with exact E2M1 midpoints: A = 2688 -> S_enc = 1; block amax 448*6 -> q_s = 448,
    // r = fl(1/448); x = 448 * {0.25, 0.75, 2.5, 5} are exact ties after the multiply? r is inexact,
    // so use S_dec-free midpoints: pick block amax = 6 * 2^k style values with q_s a power of two:
    // block amax 12 in a tensor with A = 2688: s = 12 * fl(1/6) = 2.0000000596 -> fl = 2 (ulp 2.4e-7) ->
    // q_s = 2, r = fl(1/(2 * S_dec)) = 0.5 exactly (S_dec = 1). x = 2.5*2 = 5 -> y = 2.5 (tie -> 2).
    auto t = row_of(32, {{0, 2688},
                         {16, 12},
                         {17, 5},  // y = 2.5: RNE -> 2 (code 4), away -> 3 (code 5)
                         {18, 0.5f},  // y = 0.25: RNE -> 0, away -> 0.5
                         {19, 10}});  // y = 5: RNE -> 4, away -> 6
    auto g2 = nvfp4_quantize(t, 1, 32, cfg);
    REQUIRE(g2.row->scales[1] == static_cast<uint8_t>(encode(DType::e4m3, 2.0)));
    check_at(g2.row->codes, {{17, 4}, {18, 0}, {19, 6}});
    Nvfp4Config c = cfg;
    c.mutant = Mutant::e2m1_ties_away;
    auto b2 = nvfp4_quantize(t, 1, 32, c);
    auto mm = compare_codes("codes", g2.row->codes, &g2.row->allowed, b2.row->codes, 1, 32, 1, 16);
    REQUIRE(mm.has_value());
    CHECK(mm->block_col == 1);
    CHECK(mm->first_col == 17);
    WARN(mm->message);
  }
  SECTION("missing global scale") {
    auto bad = run(Mutant::no_global_scale);
    auto mm = compare_codes("scales", gd.scales, nullptr, bad.row->scales, M, gd.scale_cols(), 1, 1, DType::e4m3);
    REQUIRE(mm.has_value());
    WARN(mm->message);
  }
  SECTION("1/6 not folded first: a fixture where the bits differ") {
    // Search bf16 block amaxes a_b (with a fixed tensor amax A) for which
    // E4M3(fl(a_b * fl(S_enc * fl(1/6)))) != E4M3(fl(fl(a_b / 6) * S_enc)).
    int found = 0;
    float wa = 0, wb = 0;
    for (uint32_t abits = 0x3F80; abits < 0x4500 && !found; ++abits) {  // bf16 A in [1, 2048)
      const float A = f32_bits(abits << 16);
      const float se = nvfp4_global_encode_scale(A), t = se * (1.0f / 6.0f);
      for (uint32_t bb = abits; bb > 0x3000; --bb) {  // a_b <= A, largest first (normal q_s)
        const float ab = f32_bits(bb << 16);
        const float s1 = ab * t, s2 = (ab / 6.0f) * se;
        if (encode_f32(DType::e4m3, s1, Overflow::satfinite) != encode_f32(DType::e4m3, s2, Overflow::satfinite)) {
          wa = A;
          wb = ab;
          found = 1;
          break;
        }
      }
    }
    REQUIRE(found);
    WARN("1/6-folding witness: tensor amax A = " << wa << " (bf16), block amax a_b = " << wb);
    auto t = row_of(32, {{0, wa}, {16, wb}, {17, wb * 0.5f}});
    auto g2 = nvfp4_quantize(t, 1, 32, cfg);
    Nvfp4Config c = cfg;
    c.mutant = Mutant::sixth_not_folded;
    auto b2 = nvfp4_quantize(t, 1, 32, c);
    auto mm = compare_codes("scales", g2.row->scales, nullptr, b2.row->scales, 1, 2, 1, 1, DType::e4m3);
    REQUIRE(mm.has_value());
    CHECK(mm->block_col == 1);
    WARN(mm->message);
    auto r2 = ref::nvfp4_quantize(t, 1, 32, cfg);
    CHECK(r2.row->scales == g2.row->scales);  // the tensor form agrees with the kernel form
  }
  SECTION("MX floor instead of RCEIL") {
    auto xm = bf16_matrix(4, 64, 8);
    MxConfig mc;
    mc.rule = MxScaleRule::rceil;
    auto gm = mx_quantize(xm, 4, 64, mc);
    mc.mutant = Mutant::mx_floor_for_rceil;
    auto bm = mx_quantize(xm, 4, 64, mc);
    auto mm = compare_codes("scales", gm.row->scales, nullptr, bm.row->scales, 4, 2, 1, 1, DType::ue8m0);
    REQUIRE(mm.has_value());
    WARN(mm->message);
  }
  SECTION("value-equivalent q_s = 0 variant is accepted") {
    auto alt = run(Mutant::qs_zero_encode_zero);
    CHECK_FALSE(compare_codes("codes", gd.codes, &gd.allowed, alt.row->codes, M, N, 1, 16).has_value());
  }
}

TEST_CASE("golden builders: both forms agree on every output tensor", "[cpu][L0]") {
  auto x = bf16_matrix(64, 48, 321);
  Nvfp4Config cfg;
  cfg.columnwise = true;
  cfg.rht = true;
  auto r = nvfp4_oracle(x, 64, 48, cfg);
  CHECK(r.outputs.size() == 10);  // q, scale, amax, packed, xhat per direction
  for (const auto& a : r.agreement) {
    INFO(a.tensor);
    CHECK(a.max_rel == 0.0);
  }
  for (auto el : {DType::e4m3, DType::e2m1}) {
    MxConfig mc;
    mc.elem = el;
    mc.columnwise = true;
    for (const auto& a : mx_oracle(x, 64, 48, mc).agreement) CHECK(a.max_rel == 0.0);
  }
  Fp8Config fc;
  fc.gran = Fp8Granularity::block_1x128;
  fc.recipe = Fp8ScaleRecipe::deepgemm;
  for (const auto& a : fp8_oracle(x, 64, 48, fc).agreement) CHECK(a.max_rel == 0.0);
  std::vector<float> dy(64 * 48, 1.0f);
  fc = Fp8Config{};
  for (const auto& a : fp8_fake_quant_oracle(x, dy, 64, 48, fc, true).agreement) CHECK(a.max_rel == 0.0);
  auto q = nvfp4_quantize(x, 64, 48, Nvfp4Config{});
  auto op = operand_from_nvfp4(*q.row);
  auto g = gemm_oracle(op, op, 1.0, DType::f32);
  CHECK(g.agreement[0].max_rel <= 1e-14);
  auto s = swizzle_oracle(q.row->scales, 64, 3);
  CHECK(s.outputs[0].expected.data.size() == 128 * 4);
}

// ================================================================================================
// Benchmark (hidden: run with `test_quant "[bench]"`)
// ================================================================================================
TEST_CASE("NVFP4 quantization throughput", "[.][bench]") {
  const int64_t M = 1024, N = 4096;
  auto x = bf16_matrix(M, N, 1);
  Nvfp4Config cfg;
  cfg.columnwise = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = nvfp4_quantize(x, M, N, cfg);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("NVFP4 TE rowwise+columnwise: " << (2.0 * M * N / s) / 1e6 << " M elements/s (" << s << " s for "
                                       << 2 * M * N << " element-quantizations, OpenMP over rows)");
  CHECK(r.row->codes.size() == static_cast<size_t>(M * N));
}
