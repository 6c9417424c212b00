// Tests of the grad-norm clipping oracles (reference/optim/clip.cpp).
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

TEST_CASE("clip: torch (always multiply, bf16 stays bf16) and Megatron (only below 1)",
          "[cpu][L0]") {
  SECTION("fp32, max_norm 1: grads {3, 4} -> norm 5") {
    std::vector<std::vector<float>> g{{3.0f}, {4.0f}};
    const ClipResult c = clip_grad_norm_torch(g, GradDType::f32, 1.0);
    CHECK(c.total_norm == 5.0);
    const float want_coef = (1.0f / (5.0f + static_cast<float>(1e-6))) * 1.0f;
    CHECK(c.coef == want_coef);
    CHECK(g[0][0] == 3.0f * want_coef);
    CHECK(std::fabs(g[1][0] - 0.8) < 1e-6);
  }
  SECTION("fp32, max_norm 10: coefficient clamps to 1, grads unchanged") {
    std::vector<std::vector<float>> g{{3.0f}, {4.0f}};
    const ClipResult c = clip_grad_norm_torch(g, GradDType::f32, 10.0);
    CHECK(c.coef == 1.0);
    CHECK(g[0][0] == 3.0f);
  }
  SECTION("bf16: norms, coefficient and product are bf16-rounded") {
    // total = 5; 5 + 1e-6 -> bf16 5; 1/5 -> bf16(0.2) = 205/1024 = 0.2001953125;
    // * 1 -> same; 3 * 0.2001953125 = 0.6005859375 -> bf16 (ulp 2^-8 in [0.5, 1)): * 256 =
    // 153.75 -> 154 -> 0.6015625. 4 * 0.2001953125 = 0.80078125 = 205 * 2^-8: exact.
    std::vector<std::vector<float>> g{{3.0f}, {4.0f}};
    const ClipResult c = clip_grad_norm_torch(g, GradDType::bf16, 1.0);
    CHECK(c.total_norm == 5.0);
    CHECK(c.coef == 0.2001953125);
    CHECK(g[0][0] == 0.6015625f);
    CHECK(g[1][0] == 0.80078125f);
  }
  SECTION("inf norm") {
    std::vector<std::vector<float>> g{{3.0f, -7.0f}, {4.0f}};
    const ClipResult c = clip_grad_norm_torch(g, GradDType::f32, 1.0, INFINITY);
    CHECK(c.total_norm == 7.0);
  }
  SECTION("Megatron: not applied when the coefficient is >= 1; applied with f32(coeff) below") {
    std::vector<std::vector<float>> g{{3.0f}, {4.0f}};
    ClipResult c = clip_grad_norm_megatron(g, 10.0);
    CHECK_FALSE(c.applied);
    CHECK(g[0][0] == 3.0f);
    c = clip_grad_norm_megatron(g, 1.0);
    CHECK(c.applied);
    CHECK(g[0][0] == 3.0f * static_cast<float>(1.0 / (5.0 + 1e-6)));
    std::vector<std::vector<double>> gd{{3.0}, {4.0}};
    const ClipResult cd = clip_grad_norm_f64(gd, 1.0);
    CHECK(std::fabs(gd[0][0] - 0.6) < 1e-6);
    CHECK(std::fabs(cd.coef - 1.0 / (5.0 + 1e-6)) < 1e-16);
  }
}
