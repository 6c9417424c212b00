// Tests of the LAMB oracles (reference/optim/lamb.cpp).
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

TEST_CASE("lamb: trust ratio, clipping, NVLAMB, f32 vs f64", "[cpu][L0]") {
  Rng r(31);
  const std::vector<size_t> sizes{257, 1024, 33};
  std::vector<std::vector<float>> g, p, m, v;
  for (size_t n : sizes) {
    std::vector<float> gi(n), pi(n), mi(n), vi(n);
    for (size_t i = 0; i < n; ++i) {
      gi[i] = r.logmag(-4, 1), pi[i] = r.logmag(-3, 0), mi[i] = r.logmag(-4, -1);
      vi[i] = mi[i] * mi[i] * 2.0f;
    }
    g.push_back(gi), p.push_back(pi), m.push_back(mi), v.push_back(vi);
  }
  auto w = [](const std::vector<std::vector<float>>& x) {
    std::vector<std::vector<double>> y;
    for (const auto& e : x) y.push_back(widen(e));
    return y;
  };
  for (int mode = 0; mode < 4; ++mode) {
    LambHyper h;
    h.adam_w_mode = mode != 1;
    h.weight_decay = mode == 2 ? 0.0 : 0.01;
    h.use_nvlamb = mode == 3;
    LambState32 a{p, m, v, 4};
    LambState64 b{w(p), w(m), w(v), 4};
    const LambInfo ia = lamb_step_f32(h, g, a);
    const LambInfo ib = lamb_step_f64(h, w(g), b);
    REQUIRE(ib.global_grad_norm > h.max_grad_norm);  // the clipping branch is exercised
    double worst = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      // Trust ratio identity (f64): ||p_old - p_new|| = ratio ||u|| = lr ||p_old|| when applied.
      double dn = 0;
      for (size_t i = 0; i < sizes[k]; ++i) dn += std::pow(static_cast<double>(p[k][i]) - b.p[k][i], 2);
      dn = std::sqrt(dn);
      if (mode == 2)
        CHECK(ib.ratio[k] == h.lr);  // wd = 0 and no NVLAMB: plain lr
      else
        CHECK(std::fabs(dn - h.lr * ib.param_norm[k]) <= 1e-12 * h.lr * ib.param_norm[k]);
      CHECK(std::fabs(ia.ratio[k] / ib.ratio[k] - 1) < 1e-5);
      for (size_t i = 0; i < sizes[k]; ++i) {
        const double step = std::fabs(static_cast<double>(p[k][i]) - b.p[k][i]);
        const double e = std::fabs(a.p[k][i] - b.p[k][i]);
        // reductions (norms) in fp32: relative 1e-5 of the step, plus rounding of p.
        const double bound = 1e-5 * step + 4 * 0x1p-24 * std::fabs(b.p[k][i]);
        REQUIRE(e <= bound);
        worst = std::max(worst, e / bound);
      }
    }
    std::printf("[optim] lamb mode %d f32-vs-f64: worst |dp|/bound = %.3g\n", mode, worst);
  }
}
