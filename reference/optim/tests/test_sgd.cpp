// Tests of the SGD oracles (reference/optim/sgd.cpp).
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

TEST_CASE("sgd: momentum, dampening, nesterov, no dampening on step 1", "[cpu][L0]") {
  SgdHyper h;
  h.lr = 0.5, h.momentum = 0.5, h.dampening = 0.5;
  // step 1, g = 2: buf = 2 (copy, no dampening); p = 10 - 0.5*2 = 9.
  // step 2, g = 4: buf = 0.5*2 + 0.5*4 = 3; p = 9 - 1.5 = 7.5.
  SgdState32 s{{10.0f}, {}, 0};
  SgdState64 d{{10.0}, {}, 0};
  sgd_step_f32(h, {2.0f}, s);
  sgd_step_f64(h, {2.0}, d);
  CHECK(s.buf[0] == 2.0f);
  CHECK(s.p[0] == 9.0f);
  CHECK(d.p[0] == 9.0);
  sgd_step_f32(h, {4.0f}, s);
  sgd_step_f64(h, {4.0}, d);
  CHECK(s.buf[0] == 3.0f);
  CHECK(s.p[0] == 7.5f);
  CHECK(d.p[0] == 7.5);
  // Mutant "dampening on step 1" would give buf = 1, p = 9.5 after step 1: differs from 9.
  // Nesterov (dampening 0), wd = 0.25, maximize: g = -(-2) = 2, g += 0.25*10 = 4.5;
  // buf = 4.5; g = 4.5 + 0.5*4.5 = 6.75; p = 10 - 0.5*6.75 = 6.625.
  SgdHyper n;
  n.lr = 0.5, n.momentum = 0.5, n.nesterov = true, n.weight_decay = 0.25, n.maximize = true;
  SgdState32 s2{{10.0f}, {}, 0};
  SgdState64 d2{{10.0}, {}, 0};
  sgd_step_f32(n, {-2.0f}, s2);
  sgd_step_f64(n, {-2.0}, d2);
  CHECK(s2.p[0] == 6.625f);
  CHECK(d2.p[0] == 6.625);
  SgdHyper bad = n;
  bad.dampening = 0.1;
  REQUIRE_THROWS(sgd_step_f32(bad, {1.0f}, s2));
  // Random agreement f32 vs f64 over 3 steps: bound 8u(|p| + lr(|g|+|buf|)) per step, summed.
  const Case c = random_case(4096, 8);
  SgdHyper r;
  r.lr = 1e-2, r.momentum = 0.9, r.dampening = 0.1, r.weight_decay = 1e-2;
  SgdState32 a{c.p, {}, 0};
  SgdState64 b{widen(c.p), {}, 0};
  std::vector<double> acc(c.p.size(), 0.0);
  const double u = 0x1p-24;
  double worst = 0;
  for (int k = 0; k < 3; ++k) {
    sgd_step_f32(r, c.g, a);
    sgd_step_f64(r, widen(c.g), b);
    for (size_t i = 0; i < c.p.size(); ++i) {
      acc[i] += 8 * u * (std::fabs(b.p[i]) + r.lr * (std::fabs(c.g[i]) + std::fabs(b.buf[i]) +
                                                     r.weight_decay * std::fabs(b.p[i]))) +
                r.lr * 8 * u * (k + 1) * (std::fabs(c.g[i]) + std::fabs(b.buf[i]));
      const double e = std::fabs(a.p[i] - b.p[i]);
      REQUIRE(e <= acc[i]);
      worst = std::max(worst, e / acc[i]);
    }
  }
  std::printf("[optim] sgd f32-vs-f64 (3 steps): worst |dp|/bound = %.3g\n", worst);
}
