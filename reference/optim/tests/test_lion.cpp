// Tests of the Lion oracles (reference/optim/lion.cpp).
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

TEST_CASE("lion: sign update and moment (hand case), f32 vs f64", "[cpu][L0]") {
  // beta1 = 0.5, beta2 = 0.75, lr = 0.125, wd = 0: m = 1, g = -3: c = 0.5 - 1.5 = -1 -> p += lr;
  // m = 0.75 - 0.75 = 0. Second element m = g = 0: c = 0 -> sign 0 -> p unchanged.
  LionHyper h;
  h.lr = 0.125, h.beta1 = 0.5, h.beta2 = 0.75;
  std::vector<float> p{2.0f, 2.0f}, m{1.0f, 0.0f};
  std::vector<double> pd{2.0, 2.0}, md{1.0, 0.0};
  lion_step_f32(h, {-3.0f, 0.0f}, p, m);
  lion_step_f64(h, {-3.0, 0.0}, pd, md);
  CHECK(p[0] == 2.125f);
  CHECK(m[0] == 0.0f);
  CHECK(p[1] == 2.0f);
  CHECK(pd[0] == 2.125);
  CHECK(pd[1] == 2.0);
  // Random: agreement except where c is within rounding of 0 (sign undefined).
  const Case c = random_case(4096, 9);
  LionHyper r;
  r.weight_decay = 0.1;
  std::vector<float> a = c.p, am = c.m;
  std::vector<double> b = widen(c.p), bm = widen(c.m);
  lion_step_f32(r, c.g, a, am);
  lion_step_f64(r, widen(c.g), b, bm);
  const double u = 0x1p-24;
  for (size_t i = 0; i < a.size(); ++i) {
    const double cc = r.beta1 * c.m[i] + (1 - r.beta1) * c.g[i];
    if (std::fabs(cc) <= 4 * u * (std::fabs(c.m[i]) + std::fabs(c.g[i]))) continue;
    REQUIRE(std::fabs(a[i] - b[i]) <= 4 * u * (std::fabs(b[i]) + r.lr));
    REQUIRE(std::fabs(am[i] - bm[i]) <= 4 * u * (std::fabs(c.m[i]) + std::fabs(c.g[i])));
  }
}
