// Tests of the NVFP4 quantization oracles (reference/quant): TE and torchao recipes, 1D / 2D
// blocks, RHT, stochastic rounding, dequantize. Expected values are either derived by hand in a
// comment or come from the independently built form (quant::ref); agreement figures are printed
// (WARN).
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
// NVFP4
// ================================================================================================

TEST_CASE("NVFP4 TE: hand-derived block (A = 448*6)", "[cpu][L0]") {
  // x = [2688, 1344, -672, 0, 1, ..]: A = 2688 -> S_enc = fl(2688/2688) = 1, S_dec = 1.
  // t = fl(1/6) = 0.16666667163...; s = fl(2688 * t) = 448.0000133.. -> fl = 448 (half ulp at 448 is
  // 2^-16 * 2 = 1.5e-5 > 1.3e-5), q_s = 448 = 0x7E. r = fl(1/448). y(2688) = fl(2688*fl(1/448)):
  // 2688/448 = 6 -> code 7; y(1344) ~ 3 -> code 5; y(-672) ~ -1.5 -> code 11; 0 -> 0;
  // y(1) = 1/448 = 0.00223 -> 0 (below 0.25).
  auto x = row_of(16, {{0, 2688}, {1, 1344}, {2, -672}, {4, 1}});
  Nvfp4Config cfg;
  auto r = nvfp4_quantize(x, 1, 16, cfg);
  REQUIRE(r.row);
  CHECK(r.row->s_enc == 1.0f);
  CHECK(r.row->scales[0] == 0x7E);
  check_at(r.row->codes, {{0, 7}, {1, 5}, {2, 11}, {3, 0}, {4, 0}});
  CHECK(r.row->packed[0] == 0x57);  // element 0 (7) low nibble, element 1 (5) high nibble
  auto deq = nvfp4_dequantize_exact(*r.row);
  CHECK(deq[0] == 2688.0);
  CHECK(deq[2] == -672.0);
}

TEST_CASE("NVFP4 TE: q_s subnormal and q_s = 0 corners, zero amax, Inf", "[cpu][L0]") {
  // Block 0 holds A = 2688 (S_enc = 1, t = fl(1/6)). Block 1 amax 0.01: s = 0.01/6 = 0.001667 =
  // 0.853 * 2^-9 -> E4M3 subnormal code 0x01 (2^-9). Block 2 amax 0.001: s = 1.67e-4 < 2^-10 -> q_s = 0,
  // r = FLT_MAX: non-zero elements give +-6 codes (allowed set also holds 0); zeros stay 0.
  auto x = row_of(48, {{0, 2688}, {16, 0.01f}, {17, -0.004f}, {32, 0.001f}, {33, -0.0005f}});
  Nvfp4Config cfg;
  auto r = nvfp4_quantize(x, 1, 48, cfg);
  const auto& d = *r.row;
  CHECK(d.scales[1] == 0x01);
  // y(0.01) = 0.01 * fl(1/2^-9) = 5.12 -> 6 (code 7); y(-0.004) = -2.048 -> -2 (code 12)
  CHECK(d.codes[16] == 7);
  CHECK(d.codes[17] == 12);
  CHECK(d.scales[2] == 0x00);
  CHECK(d.codes[32] == 7);
  CHECK(d.codes[33] == 15);
  CHECK(((d.allowed[32] >> 0) & 1) == 1);
  CHECK(d.codes[34] == 0);
  auto deq = nvfp4_dequantize_exact(d);
  CHECK(deq[32] == 0.0);
  auto ref = ref::nvfp4_quantize(x, 1, 48, cfg);
  require_same_dir(d, *ref.row, "q_s corners");
  // The old TE C++ test reference (r = 0 when q_s = 0): codes differ, but lie in the allowed set.
  Nvfp4Config alt = cfg;
  alt.mutant = Mutant::qs_zero_encode_zero;
  auto ra = nvfp4_quantize(x, 1, 48, alt);
  CHECK(ra.row->codes[32] == 0);
  CHECK_FALSE(compare_codes("codes", d.codes, &d.allowed, ra.row->codes, 1, 48, 1, 16).has_value());
  CHECK(compare_codes("codes", d.codes, nullptr, ra.row->codes, 1, 48, 1, 16).has_value());

  // All-zero tensor: A = 0 -> S_enc = 1 (kernel rule), every scale 0, every code 0.
  std::vector<float> z(32, 0.0f);
  auto rz = nvfp4_quantize(z, 2, 16, cfg);
  CHECK(rz.row->s_enc == 1.0f);
  for (auto s : rz.row->scales) CHECK(s == 0);
  for (auto c : rz.row->codes) CHECK(c == 0);
  // Inf element: A = Inf -> S_enc = fl(2688/Inf) = 0 -> 1; block s = Inf -> 448 (satfinite);
  // Inf * r = Inf -> code 7; 448 * fl(1/448) = 1 -> code 2.
  auto xi = row_of(16, {{0, INFINITY}, {1, 448.0f}});
  auto ri = nvfp4_quantize(xi, 1, 16, cfg);
  CHECK(ri.row->s_enc == 1.0f);
  CHECK(ri.row->scales[0] == 0x7E);
  CHECK(ri.row->codes[0] == 7);
  CHECK(ri.row->codes[1] == 2);
  // NaN element: dropped from the amax (fmaxf), its own code unspecified (all allowed).
  std::vector<float> xn(16, 1.0f);
  xn[3] = NAN;
  auto rn = nvfp4_quantize(xn, 1, 16, cfg);
  CHECK(rn.row->amax == 1.0f);
  CHECK(rn.row->allowed[3] == 0xFFFF);
  CHECK(rn.row->codes[0] == 7);  // 1 * r with q_s = 448, S_dec = 1/2688 -> y = 6
}

TEST_CASE("NVFP4 TE: kernel form vs tensor form, 1D/2D, rowwise/columnwise, ragged", "[cpu][L0]") {
  struct Shape2 { int64_t M, N; };
  int64_t elems = 0;
  for (Shape2 s : {Shape2{1, 16}, Shape2{16, 16}, Shape2{33, 50}, Shape2{128, 96}, Shape2{17, 255}})
    for (bool two_d : {false, true}) {
      auto x = bf16_matrix(s.M, s.N, 1000 + s.M * 7 + s.N + (two_d ? 1 : 0));
      Nvfp4Config cfg;
      cfg.columnwise = true;
      cfg.block_2d = two_d;
      auto [a, b] = both_forms(x, s.M, s.N, cfg);
      require_same_dir(*a.row, *b.row, "rowwise");
      require_same_dir(*a.col, *b.col, "columnwise");
      elems += 2 * s.M * s.N;
      if (two_d) {
        // 2D: rowwise and columnwise are exact transposes (A3.3).
        for (int64_t m = 0; m < s.M; ++m)
          for (int64_t n = 0; n < s.N; ++n) {
            REQUIRE(a.row->codes[m * s.N + n] == a.col->codes[n * s.M + m]);
            REQUIRE(a.row->scales[m * a.row->scale_cols() + n / 16] == a.col->scales[n * a.col->scale_cols() + m / 16]);
          }
      }
    }
  WARN("NVFP4 TE forms: bit-identical codes/scales/amax/packed over " << elems << " elements");
}

TEST_CASE("NVFP4: separate rowwise / columnwise amax", "[cpu][L0]") {
  auto x = bf16_matrix(32, 32, 99);
  Nvfp4Config cfg;
  cfg.columnwise = true;
  cfg.amax_rowwise = 10.0f;
  cfg.amax_columnwise = 20.0f;
  auto [a, b] = both_forms(x, 32, 32, cfg);
  CHECK(a.row->amax == 10.0f);
  CHECK(a.col->amax == 20.0f);
  CHECK(a.row->s_enc == 2688.0f / 10.0f);
  CHECK(a.col->s_enc == 2688.0f / 20.0f);
  require_same_dir(*a.row, *b.row, "row");
  require_same_dir(*a.col, *b.col, "col");
}

TEST_CASE("NVFP4 RHT: exact-sum form vs FWHT form, sign vector, post-RHT amax", "[cpu][L0]") {
  // Sign vector (A3.4): + + + - + - - - - - - + - + - -  -> bits set at i = 3,5,6,7,8,9,10,12,14,15
  // = 0x0008+0x0020+0x0040+0x0080+0x0100+0x0200+0x0400+0x1000+0x4000+0x8000 = 0xD7E8.
  const int signs[16] = {+1, +1, +1, -1, +1, -1, -1, -1, -1, -1, -1, +1, -1, +1, -1, -1};
  uint16_t mask = 0;
  for (int i = 0; i < 16; ++i)
    if (signs[i] < 0) mask = static_cast<uint16_t>(mask | (1u << i));
  REQUIRE(mask == 0xD7E8);
  REQUIRE(Nvfp4Config{}.rht_sign_mask == 0xD7E8);
  // A unit vector e_0 along M: v'_j = 1/4 * s_0 * H[0][j] = 0.25 for all j.
  {
    std::vector<float> x(16, 0.0f);
    x[0] = 1.0f;
    auto t = rht_columnwise(x, 16, 1, 0xD7E8);
    for (float v : t) CHECK(v == 0.25f);
    // e_3 (s_3 = -1): v'_j = -1/4 * (-1)^popcount(3 & j)
    std::fill(x.begin(), x.end(), 0.0f);
    x[3] = 1.0f;
    t = rht_columnwise(x, 16, 1, 0xD7E8);
    for (int j = 0; j < 16; ++j) CHECK(t[j] == (__builtin_popcount(3 & j) % 2 ? 0.25f : -0.25f));
  }
  int64_t n = 0, bad = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t M = 64, N = 40;
    auto x = bf16_matrix(M, N, 500 + rep, rep == 3 ? 1e-30 : 1.0);
    auto a = rht_columnwise(x, M, N, 0xD7E8);
    auto b = ref::rht_columnwise_fwht(x, M, N, 0xD7E8);
    for (size_t i = 0; i < a.size(); ++i) {
      ++n;
      if (std::memcmp(&a[i], &b[i], 4) != 0) ++bad;
    }
    Nvfp4Config cfg;
    cfg.columnwise = true;
    cfg.rht = true;
    auto qa = nvfp4_quantize(x, M, N, cfg);
    auto qb = ref::nvfp4_quantize(x, M, N, cfg);
    require_same_dir(*qa.row, *qb.row, "rht row");
    require_same_dir(*qa.col, *qb.col, "rht col");
    float post = 0;
    for (float v : a) post = std::max(post, std::fabs(v));
    CHECK(qa.col->amax == post);  // post-RHT amax
    CHECK(qa.col->hp == a);
  }
  WARN("RHT exact-sum vs FWHT: " << bad << " bf16 differences over " << n << " outputs");
  CHECK(bad == 0);
  // A sum whose exact value is a bf16 tie broken by a tiny term: 1 + 2^-8 (tie) + 2^-40 -> rounds up.
  double terms[3] = {1.0, 0x1.0p-8, 0x1.0p-40};
  CHECK(bf16_round_exact_sum(terms, 3) == 1.0078125f);
  double terms2[2] = {1.0, 0x1.0p-8};
  CHECK(bf16_round_exact_sum(terms2, 2) == 1.0f);  // exact tie -> even
  double terms3[3] = {1.0, 0x1.0p-8, -0x1.0p-60};
  CHECK(bf16_round_exact_sum(terms3, 3) == 1.0f);
}

TEST_CASE("NVFP4 SR: replay, grid points fixed, unbiasedness and P(up) over 1e6 draws", "[cpu][L0]") {
  // Replay: kernel emulation (fp32 fma) vs the exact-sum form, on every rbits value.
  Rng g(42);
  int64_t n = 0, bad = 0;
  for (int i = 0; i < 4000; ++i) {
    const float y = static_cast<float>((g.uniform() * 2 - 1) * 7.0);
    for (int rb = 0; rb < 256; ++rb) {
      ++n;
      if (e2m1_sr(y, static_cast<uint8_t>(rb)) != ref::e2m1_sr_ref(y, static_cast<uint8_t>(rb))) ++bad;
    }
  }
  WARN("SR kernel-emulation vs exact-sum form: " << bad << " disagreements over " << n);
  CHECK(bad == 0);
  // Grid points never move; saturation and sign.
  for (int c = 0; c < 16; ++c)
    for (int rb = 0; rb < 256; ++rb) {
      const float y = static_cast<float>(e2m1_value(static_cast<uint8_t>(c)));
      const uint8_t q = e2m1_sr(y, static_cast<uint8_t>(rb));
      REQUIRE(e2m1_value(q) == static_cast<double>(y));
    }
  CHECK(e2m1_sr(7.5f, 255) == 7);
  CHECK(e2m1_sr(-100.0f, 0) == 15);
  // Every SR output is one of the two grid neighbours of y.
  // Statistics: for each y, 2^20 draws of rbits from splitmix64. With 8 random bits, P(up) is
  // exactly #{k in 0..255 : fl(|y| + k/256*step) >= hi} / 256 (computed by enumeration); the
  // observed count must lie within 5 binomial sigmas, and the mean within 5 sigma/sqrt(N) of
  // lo + step * P(up), which is itself within step/256 of y (8-bit quantisation of P).
  const float ys[] = {0.1f, 0.3f, 1.1f, 1.9f, 2.2f, 3.7f, 4.5f, 5.99f, -2.75f};
  const int64_t draws = 1 << 20;
  for (float y : ys) {
    const double a = std::fabs(y);
    int lo = 0;
    while (lo < 7 && kE2M1[lo + 1] <= a) ++lo;
    const double lov = kE2M1[lo], hiv = kE2M1[lo + 1], step = hiv - lov;
    int kup = 0;
    for (int rb = 0; rb < 256; ++rb)
      if (std::fabs(e2m1_value(e2m1_sr(y, static_cast<uint8_t>(rb)))) == hiv) ++kup;
    const double p = kup / 256.0;
    CHECK(std::fabs(lov + step * p - a) <= step / 256.0 + 1e-12);
    Rng r(1234 + static_cast<uint64_t>(a * 1000));
    int64_t ups = 0;
    double sum = 0;
    for (int64_t i = 0; i < draws; ++i) {
      const uint8_t q = e2m1_sr(y, static_cast<uint8_t>(r.next() >> 56));
      const double v = std::fabs(e2m1_value(q));
      REQUIRE((v == lov || v == hiv));
      ups += v == hiv;
      sum += v;
    }
    const double sd = std::sqrt(draws * p * (1 - p));
    INFO("y = " << y << " p = " << p << " ups = " << ups);
    CHECK(std::fabs(static_cast<double>(ups) - draws * p) <= 5 * sd + 1e-9);
    const double mean = sum / draws, sigma = step * std::sqrt(p * (1 - p));
    CHECK(std::fabs(mean - (lov + step * p)) <= 5 * sigma / std::sqrt(static_cast<double>(draws)) + 1e-12);
    CHECK(std::fabs(mean - a) <= step / 256.0 + 5 * sigma / std::sqrt(static_cast<double>(draws)) + 1e-12);
  }
  // SR through the quantizer with explicit rbits: both forms replay identically.
  const int64_t M = 32, N = 48;
  auto x = bf16_matrix(M, N, 77);
  std::vector<uint8_t> rr(M * N), rc(M * N);
  for (auto& v : rr) v = static_cast<uint8_t>(g.next());
  for (auto& v : rc) v = static_cast<uint8_t>(g.next());
  Nvfp4Config cfg;
  cfg.columnwise = true;
  cfg.stochastic = true;
  auto qa = nvfp4_quantize(x, M, N, cfg, &rr, &rc);
  auto qb = ref::nvfp4_quantize(x, M, N, cfg, &rr, &rc);
  require_same_dir(*qa.row, *qb.row, "sr row");
  require_same_dir(*qa.col, *qb.col, "sr col");
}

TEST_CASE("NVFP4 torchao recipe: forms agree, differs from TE, zero tensor", "[cpu][L0]") {
  int64_t diff_codes = 0, diff_scales = 0, total = 0;
  for (bool cuda : {true, false})
    for (bool two : {true, false}) {
      auto x = bf16_matrix(48, 64, 4242 + cuda + 2 * two);
      Nvfp4Config cfg;
      cfg.recipe = Nvfp4Recipe::torchao;
      cfg.ao_cuda_scalar_div = cuda;
      cfg.ao_two_level = two;
      cfg.columnwise = true;
      auto [a, b] = both_forms(x, 48, 64, cfg);
      require_same_dir(*a.row, *b.row, "ao row");
      require_same_dir(*a.col, *b.col, "ao col");
      // torchao scales are clamped to >= 2^-6: never zero or subnormal.
      for (auto s : a.row->scales) CHECK(s >= 0x08);
      Nvfp4Config te;
      te.columnwise = true;
      auto t = nvfp4_quantize(x, 48, 64, te);
      for (size_t i = 0; i < t.row->codes.size(); ++i) diff_codes += t.row->codes[i] != a.row->codes[i];
      for (size_t i = 0; i < t.row->scales.size(); ++i) diff_scales += t.row->scales[i] != a.row->scales[i];
      total += static_cast<int64_t>(t.row->codes.size());
    }
  WARN("torchao vs TE recipe: " << diff_codes << " codes and " << diff_scales << " scales differ over "
                                << total << " elements (expected: different recipes)");
  // All-zero tensor under torchao: pts = 0, 0/0 = NaN scale (clamp keeps NaN) -> 0x7F scales and
  // unspecified codes (all allowed). Documented torchao behaviour, not TE's.
  std::vector<float> z(16, 0.0f);
  Nvfp4Config cfg;
  cfg.recipe = Nvfp4Recipe::torchao;
  auto rz = nvfp4_quantize(z, 1, 16, cfg);
  CHECK(rz.row->scales[0] == 0x7F);
  CHECK(rz.row->allowed[0] == 0xFFFF);
}

TEST_CASE("NVFP4 dequantize: TE kernel fp32 form vs exact", "[cpu][L0]") {
  // TE dequant uses fl(fl(q_s*A)*fl(1/2688)) instead of S_dec = fl(1/fl(2688/A)): a couple of fp32
  // ulps apart. Several tensor scales so that A takes different mantissas.
  double worst = 0;
  int64_t differ = 0, n = 0;
  for (int k = 0; k < 12; ++k) {
    auto x = bf16_matrix(16, 64, 31337 + k, std::pow(1.37, k));
    Nvfp4Config cfg;
    auto r = nvfp4_quantize(x, 16, 64, cfg);
    auto te = nvfp4_dequantize_te(*r.row);
    auto ex = nvfp4_dequantize_exact(*r.row);
    for (size_t i = 0; i < ex.size(); ++i) {
      if (ex[i] == 0) continue;
      ++n;
      differ += te[i] != ex[i];
      worst = std::max(worst, std::fabs(te[i] - ex[i]) / std::fabs(ex[i]));
    }
  }
  WARN("NVFP4 dequant TE-fp32 vs exact: " << differ << " of " << n << " non-zero values differ, worst rel "
                                          << worst);
  CHECK(worst <= 4 * 0x1.0p-24);
}
