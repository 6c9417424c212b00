// Tests of the Adafactor oracles (reference/optim/adafactor.cpp).
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

TEST_CASE("adafactor: t = 1 gives alpha * sign(g) (1-D and rank-1 factored), f32 vs f64",
          "[cpu][L0]") {
  // t = 1: beta2_t = 1^-0.8 = 1, so var = g^2 (1-D) and, for g_ij = a_i b_j (rank 1),
  // row_var_i = a_i^2 mean(b^2), col_var_j = b_j^2 mean(a^2), mean(row_var) = mean(a^2) mean(b^2):
  // var_ij = a_i^2 b_j^2 = g_ij^2 exactly in real arithmetic. U = g / |g| = sign(g), ||U|| =
  // sqrt(numel) -> denom = 1; alpha = max(1e-3, ||p||/sqrt(numel)) * min(lr, 1) = 2 * 0.01.
  // So p = 2 - 0.02 sign(g).
  AdafactorHyper h;
  const int64_t M = 3, N = 4;
  const double a[M] = {1.0, -2.0, 0.5}, b[N] = {3.0, 0.25, -1.0, 2.0};
  std::vector<double> g(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) g[i * N + j] = a[i] * b[j];
  for (bool factored : {false, true}) {
    AdafactorState64 s;
    s.p.assign(M * N, 2.0);
    adafactor_step_f64(h, factored ? M : 1, factored ? N : M * N, factored, g, s);
    AdafactorState32 s32;
    s32.p.assign(M * N, 2.0f);
    std::vector<float> g32(g.begin(), g.end());
    adafactor_step_f32(h, factored ? M : 1, factored ? N : M * N, factored, g32, s32);
    for (int64_t i = 0; i < M * N; ++i) {
      const double want = 2.0 - 0.02 * (g[i] > 0 ? 1 : -1);
      CHECK(std::fabs(s.p[i] - want) < 1e-14);
      CHECK(std::fabs(s32.p[i] - want) < 4e-7);
    }
  }
  // Random, 3 steps, f32 vs f64 (tolerance: fp32 elementwise + fp32-rounded reductions).
  Rng r(41);
  const int64_t R = 17, C = 9;
  AdafactorState64 d;
  AdafactorState32 f;
  for (int64_t i = 0; i < R * C; ++i) f.p.push_back(r.logmag(-3, 0));
  d.p = widen(f.p);
  AdafactorHyper hw;
  hw.weight_decay = 0.01;
  double worst = 0;
  for (int k = 0; k < 3; ++k) {
    std::vector<float> g32(R * C);
    for (auto& e : g32) e = r.logmag(-4, 0);
    adafactor_step_f32(hw, R, C, true, g32, f);
    adafactor_step_f64(hw, R, C, true, widen(g32), d);
    for (int64_t i = 0; i < R * C; ++i) worst = std::max(worst, std::fabs(f.p[i] - d.p[i]) / std::fabs(d.p[i]));
  }
  std::printf("[optim] adafactor f32-vs-f64 (3 steps): worst rel = %.3g\n", worst);
  CHECK(worst < 1e-5);
}
