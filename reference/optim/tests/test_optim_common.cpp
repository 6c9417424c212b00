// Tests across the optimizers: the fp64 cross-check of every textbook form against its second
// form, and the shared helpers (optim_common.cpp).
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

// ---------------------------------------------------------------------------------------------
// The fp64 cross-check: textbook forms vs the second (alt) forms, agreement_rel <= 1e-12
// ---------------------------------------------------------------------------------------------

TEST_CASE("fp64 forms: textbook vs alt agree to 1e-12", "[cpu][L0]") {
  double worst = 0;
  auto rec = [&](const char* what, const std::vector<double>& a, const std::vector<double>& b) {
    const double r = assay::agreement_rel(a, b);
    std::printf("[optim] fp64 agreement %-28s %.3g\n", what, r);
    CHECK(r <= 1e-12);
    worst = std::max(worst, r);
  };
  const size_t n = 4096;
  const Case c = random_case(n, 123);
  for (int variant = 0; variant < 4; ++variant) {
    for (int64_t step0 : {0, 9, 999}) {
      AdamHyper h;
      h.decoupled = variant != 1;
      h.amsgrad = variant == 2;
      h.maximize = variant == 3;
      AdamState64 a = st64(c, step0), b = st64(c, step0);
      adam_step_f64(h, widen(c.g), a);
      adam_step_f64_alt(h, widen(c.g), b);
      const std::string w = "adam v" + std::to_string(variant) + " t0=" + std::to_string(step0);
      rec(w.c_str(), a.p, b.p);
      CHECK(assay::agreement_rel(a.m, b.m) <= 1e-12);
      CHECK(assay::agreement_rel(a.v, b.v) <= 1e-12);
    }
  }
  for (int variant = 0; variant < 3; ++variant) {
    SgdHyper h;
    h.lr = 1e-2, h.momentum = 0.9, h.weight_decay = 1e-2;
    h.dampening = variant == 0 ? 0.1 : 0.0;
    h.nesterov = variant == 1;
    h.maximize = variant == 2;
    SgdState64 a{widen(c.p), {}, 0}, b{widen(c.p), {}, 0};
    for (int k = 0; k < 3; ++k) {
      sgd_step_f64(h, widen(c.g), a);
      sgd_step_f64_alt(h, widen(c.g), b);
    }
    rec(("sgd v" + std::to_string(variant) + " (3 steps)").c_str(), a.p, b.p);
  }
  {
    LionHyper h;
    h.weight_decay = 0.1;
    std::vector<double> pa = widen(c.p), ma = widen(c.m), pb = pa, mb = ma;
    lion_step_f64(h, widen(c.g), pa, ma);
    lion_step_f64_alt(h, widen(c.g), pb, mb);
    rec("lion", pa, pb);
    rec("lion m", ma, mb);
  }
  {
    std::vector<std::vector<double>> g, p, m, v;
    Rng r(7);
    for (size_t len : {100, 513, 64}) {
      std::vector<double> gi(len), pi(len), mi(len), vi(len);
      for (size_t i = 0; i < len; ++i) {
        gi[i] = r.logmag(-4, 1), pi[i] = r.logmag(-3, 0), mi[i] = r.logmag(-4, -1);
        vi[i] = 2 * mi[i] * mi[i];
      }
      g.push_back(gi), p.push_back(pi), m.push_back(mi), v.push_back(vi);
    }
    for (int mode = 0; mode < 4; ++mode) {
      LambHyper h;
      h.adam_w_mode = mode != 1;
      h.weight_decay = mode == 2 ? 0.0 : 0.01;
      h.use_nvlamb = mode == 3;
      LambState64 a{p, m, v, 2}, b{p, m, v, 2};
      lamb_step_f64(h, g, a);
      lamb_step_f64_alt(h, g, b);
      std::vector<double> fa, fb;
      for (size_t k = 0; k < a.p.size(); ++k) {
        fa.insert(fa.end(), a.p[k].begin(), a.p[k].end());
        fb.insert(fb.end(), b.p[k].begin(), b.p[k].end());
      }
      rec(("lamb mode " + std::to_string(mode)).c_str(), fa, fb);
    }
  }
  {
    Rng r(8);
    const int64_t M = 13, N = 7;
    for (bool factored : {true, false}) {
      AdafactorState64 a, b;
      for (int64_t i = 0; i < M * N; ++i) a.p.push_back(r.logmag(-3, 0));
      b = a;
      AdafactorHyper h;
      h.weight_decay = 0.01;
      for (int k = 0; k < 3; ++k) {
        std::vector<double> gk(M * N);
        for (auto& e : gk) e = r.logmag(-4, 0);
        adafactor_step_f64(h, factored ? M : 1, factored ? N : M * N, factored, gk, a);
        adafactor_step_f64_alt(h, factored ? M : 1, factored ? N : M * N, factored, gk, b);
      }
      rec(factored ? "adafactor factored (3 steps)" : "adafactor 1-D (3 steps)", a.p, b.p);
    }
  }
  {
    Rng r(9);
    for (auto [M, N] : {std::pair<int64_t, int64_t>{40, 12}, {12, 40}, {20, 20}}) {
      std::vector<double> G(M * N);
      for (auto& e : G) e = r.uni() * 2 - 1;
      for (NsCoeffs set : {NsCoeffs::simple, NsCoeffs::quintic}) {
        const auto a = newton_schulz_f64(G, M, N, 5, set, 1e-7);
        const auto b = newton_schulz_f64_eigen(G, M, N, 5, set, 1e-7);
        rec(("NS " + std::to_string(M) + "x" + std::to_string(N) + " " + name(set)).c_str(), a, b);
      }
    }
  }
  std::printf("[optim] fp64 forms: worst agreement_rel = %.3g\n", worst);
}

TEST_CASE("pow_int_cr: exact cases and agreement with long double", "[cpu][L0]") {
  CHECK(pow_int_cr(0.5, 10) == 0x1p-10);
  CHECK(pow_int_cr(3.0, 20) == 3486784401.0);  // exact integer
  CHECK(powf_int_cr(0.5f, 149) == 0x1p-149f);  // smallest subnormal
  CHECK(pow_int_cr(0.9, 0) == 1.0);
  size_t diff_d = 0, diff_f = 0;
  for (double b : {0.9, 0.999, 0.95, 0.99, 0.9999, 0.5 + 1e-9}) {
    for (int64_t t : {1, 2, 3, 10, 100, 999, 1000, 4097}) {
      const long double ref = std::pow(static_cast<long double>(b), static_cast<long double>(t));
      const double d = pow_int_cr(b, t);
      // long double has 11 extra bits: agreement to 1 ulp, equality in the overwhelming case
      if (ref >= DBL_MIN)
        CHECK(std::fabs(static_cast<long double>(d) - ref) <= std::ldexp(std::fabs(ref), -52));
      diff_d += d != static_cast<double>(ref);
      const float bf = static_cast<float>(b);
      const float f = powf_int_cr(bf, t);
      const long double reff = std::pow(static_cast<long double>(bf), static_cast<long double>(t));
      diff_f += f != static_cast<float>(reff);
      if (reff >= FLT_MIN)
        CHECK(std::fabs(static_cast<long double>(f) - reff) <= std::ldexp(std::fabs(reff), -23));
    }
  }
  std::printf("[optim] pow_int_cr vs long double: %zu / %zu double and float differ (expect 0)\n",
              diff_d, diff_f);
  CHECK(diff_f == 0);
}
