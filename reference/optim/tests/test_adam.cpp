// Tests of the Adam / AdamW oracles (reference/optim/adam.cpp): every implementation's fp32
// emulation, the fp64 step, the derived bound, bf16 storage, trajectories.
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

TEST_CASE("adam: exact small-integer step, every implementation", "[cpu][L0]") {
  // beta1 = 0.5, beta2 = 0.75, eps = 0, lr = 0.5, t = 1, m = v = 0, g = 2, p = 3. Every constant
  // and intermediate is a short dyadic number, so every implementation is exact:
  //   m = 0.5*2 = 1; v = 0.25*4 = 1; bc1 = 0.5, bc2 = 0.25 (sqrt 0.5);
  //   mhat = 2, vhat = 4, update = 2/2 = 1.
  //   AdamW wd = 0:    p = 3 - 0.5*1 = 2.5
  //   AdamW wd = 0.25: p = 3*(1 - 0.125) - 0.5 = 2.125   (apex: 3 - 0.5*(1 + 0.25*3) = 2.125)
  //   Adam  wd = 0.25: g' = 2 + 0.75 = 2.75, m = 1.375, v = 0.25*7.5625 = 1.890625,
  //                    mhat = 2.75, sqrt(vhat) = 2.75, update = 1, p = 2.5, m = 1.375.
  struct Want {
    double wd;
    bool decoupled;
    float p, m, v;
  };
  const Want wants[] = {{0.0, true, 2.5f, 1.0f, 1.0f},
                        {0.25, true, 2.125f, 1.0f, 1.0f},
                        {0.25, false, 2.5f, 1.375f, 1.890625f}};
  for (const Want& w : wants) {
    AdamHyper h;
    h.lr = 0.5, h.beta1 = 0.5, h.beta2 = 0.75, h.eps = 0, h.weight_decay = w.wd;
    h.decoupled = w.decoupled;
    for (AdamImpl impl : {AdamImpl::torch_single, AdamImpl::torch_foreach, AdamImpl::torch_fused,
                          AdamImpl::apex, AdamImpl::te}) {
      for (Contract ct : {Contract::inferred, Contract::none}) {
        h.contract = ct;
        AdamState32 s{{3.0f}, {0.0f}, {0.0f}, {}, 0};
        adam_step_f32(impl, h, {2.0f}, s);
        INFO(name(impl) << " wd=" << w.wd << " decoupled=" << w.decoupled);
        CHECK(s.p[0] == w.p);
        CHECK(s.m[0] == w.m);
        CHECK(s.v[0] == w.v);
        CHECK(s.step == 1);
      }
    }
    AdamState64 s{{3.0}, {0.0}, {0.0}, {}, 0};
    adam_step_f64(h, {2.0}, s);
    CHECK(s.p[0] == w.p);
  }
  // Mutant: coupled (L2) instead of decoupled decay gives 2.5, not 2.125.
  // Mutant: no bias correction: m/(sqrt(v)) = 1/1 -> p = 3 - 0.5 = 2.5 (same here by accident),
  // so the bias-correction mutant is checked in the t = 1000 case below.
}

TEST_CASE("adam: amsgrad, maximize, grad_scale, found_inf (hand cases)", "[cpu][L0]") {
  AdamHyper h;
  h.lr = 0.5, h.beta1 = 0.5, h.beta2 = 0.75, h.eps = 0, h.weight_decay = 0;
  SECTION("amsgrad uses the max of the raw v, then bias-corrects") {
    // vmax = 4 preset; v = 1 after the step; denom = sqrt(4)/0.5 = 4; p = 3 - 1*(1/4) = 2.75.
    // Textbook: mhat = 2, vhat_max = 4/0.25 = 16 -> 2/4 = 0.5; p = 3 - 0.5*0.5 = 2.75.
    h.amsgrad = true;
    for (AdamImpl impl : {AdamImpl::torch_single, AdamImpl::torch_foreach, AdamImpl::torch_fused}) {
      AdamState32 s{{3.0f}, {0.0f}, {0.0f}, {4.0f}, 0};
      adam_step_f32(impl, h, {2.0f}, s);
      CHECK(s.p[0] == 2.75f);
      CHECK(s.vmax[0] == 4.0f);
      CHECK(s.v[0] == 1.0f);
    }
    AdamState64 s{{3.0}, {0.0}, {0.0}, {4.0}, 0};
    adam_step_f64(h, {2.0}, s);
    CHECK(s.p[0] == 2.75);
    AdamState32 a{{3.0f}, {0.0f}, {0.0f}, {}, 0};
    h.amsgrad = false;
    REQUIRE_THROWS(adam_step_f32(AdamImpl::apex, [&] { auto q = h; q.maximize = true; return q; }(),
                                 {2.0f}, a));
  }
  SECTION("maximize: g = -2 behaves as g = 2") {
    h.maximize = true;
    for (AdamImpl impl : {AdamImpl::torch_single, AdamImpl::torch_foreach, AdamImpl::torch_fused}) {
      AdamState32 s{{3.0f}, {0.0f}, {0.0f}, {}, 0};
      adam_step_f32(impl, h, {-2.0f}, s);
      CHECK(s.p[0] == 2.5f);
    }
  }
  SECTION("fused: grad_scale divides first; found_inf skips everything") {
    h.grad_scale = 4.0f;
    AdamState32 s{{3.0f}, {0.0f}, {0.0f}, {}, 0};
    adam_step_f32(AdamImpl::torch_fused, h, {8.0f}, s);  // 8/4 = 2 -> as above
    CHECK(s.p[0] == 2.5f);
    h.found_inf = true;
    AdamState32 s2{{3.0f}, {0.5f}, {0.25f}, {}, 7};
    adam_step_f32(AdamImpl::torch_fused, h, {8.0f}, s2);
    CHECK(s2.p[0] == 3.0f);
    CHECK(s2.m[0] == 0.5f);
    CHECK(s2.v[0] == 0.25f);
    CHECK(s2.step == 7);
  }
}

TEST_CASE("adam: t = 1000 bias correction against a long-double formula", "[cpu][L0]") {
  // Preset step 999 (the call performs t = 1000), m = v = 0, g = 1, eps = 0, wd = 0, lr = 1.
  // torch_single: m = fma(0.1f, 1 - 0, 0) = 0.1f; v = fma(f32(0.001), 1, 0) = f32(0.001);
  //   p = -(1/bc1) * m / (sqrt(v)/sqrt(bc2)), bc = 1 - beta^1000 with Python's double beta.
  // apex: bc2 = 1 - (0.999f)^1000 (the float beta!), differing from the Python value by
  //   ~1000 * (0.999f/0.999 - 1) * 0.999^1000 / bc2 ~ 7.5e-6 relative: an expected deviation of
  //   the apex/TE form from the textbook step that this test pins down.
  AdamHyper h;
  h.lr = 1, h.eps = 0, h.weight_decay = 0;
  // torch_single / foreach: m = f32(1 - 0.9) = 0.1f, v = f32(1 - 0.999).
  // torch_fused: m = fma(-0.9f, 1, 1) = 1 - 0.9f (exact), v = 1 - 0.999f (exact); apex/te: the
  //   device computes (1 - beta1) in float: the same values. bc from the float betas.
  auto expect = [&](long double b1, long double b2, long double m, long double v) {
    const long double bc1 = 1.0L - std::pow(b1, 1000.0L);
    const long double bc2 = 1.0L - std::pow(b2, 1000.0L);
    return static_cast<double>(-(m / bc1) / (std::sqrt(v) / std::sqrt(bc2)));
  };
  const double e_torch = expect(0.9, 0.999, 0.1f, static_cast<float>(0.001));
  const double e_apex = expect(0.9f, 0.999f, 1.0L - 0.9f, 1.0L - 0.999f);
  for (AdamImpl impl : {AdamImpl::torch_single, AdamImpl::torch_foreach, AdamImpl::torch_fused,
                        AdamImpl::apex}) {
    AdamState32 s{{0.0f}, {0.0f}, {0.0f}, {}, 999};
    adam_step_f32(impl, h, {1.0f}, s);
    const double e = (impl == AdamImpl::torch_single || impl == AdamImpl::torch_foreach) ? e_torch : e_apex;
    INFO(name(impl) << " got " << s.p[0] << " want " << e);
    CHECK(std::fabs(s.p[0] - e) <= 6 * std::ldexp(std::fabs(e), -24));
    // Mutant: no bias correction gives -0.1/sqrt(0.001) = -3.162: far away.
    CHECK(std::fabs(s.p[0] - (-0.1 / std::sqrt(0.001))) > 0.5);
  }
  const double rel = std::fabs(e_apex / e_torch - 1.0);
  std::printf("[optim] t=1000: apex/fused (float beta) vs torch (double beta): rel %.3g\n", rel);
  CHECK(rel > 2e-6);
  CHECK(rel < 2e-5);
  AdamState64 s{{0.0}, {0.0}, {0.0}, {}, 999};
  adam_step_f64(h, {1.0}, s);
  CHECK(std::fabs(s.p[0] - e_torch) < 1e-5 * std::fabs(e_torch));  // f64 form uses 0.1, 0.001 exactly
}

TEST_CASE("adam: f32 emulations agree with the fp64 textbook step within the derived bound",
          "[cpu][L0]") {
  const size_t n = 1 << 14;
  double worst_ratio = 0, worst_rel = 0;
  std::string worst_what;
  for (int64_t step0 : {0, 9, 999}) {
    const Case c = random_case(n, 1234 + step0);
    for (AdamImpl impl : {AdamImpl::torch_single, AdamImpl::torch_foreach, AdamImpl::torch_fused,
                          AdamImpl::apex, AdamImpl::te}) {
      for (int variant = 0; variant < 4; ++variant) {
        AdamHyper h;
        h.decoupled = variant != 1;
        const bool torch = impl == AdamImpl::torch_single || impl == AdamImpl::torch_foreach ||
                           impl == AdamImpl::torch_fused;
        if (!torch && variant >= 2) continue;
        h.amsgrad = variant == 2;
        h.maximize = variant == 3;
        AdamState32 a = st32(c, step0);
        AdamState64 b = st64(c, step0);
        const AdamBound bd = adam_step_bound(impl, h, widen(c.g), b);
        adam_step_f32(impl, h, c.g, a);
        adam_step_f64(h, widen(c.g), b);
        for (size_t i = 0; i < n; ++i) {
          const double ep = std::fabs(a.p[i] - b.p[i]), em = std::fabs(a.m[i] - b.m[i]),
                       ev = std::fabs(a.v[i] - b.v[i]);
          INFO(name(impl) << " variant " << variant << " t0 " << step0 << " i " << i << " p32 "
                          << a.p[i] << " p64 " << b.p[i] << " bound " << bd.p[i]);
          REQUIRE(ep <= bd.p[i]);
          REQUIRE(em <= bd.m[i]);
          REQUIRE(ev <= bd.v[i]);
          if (bd.p[i] > 0 && ep / bd.p[i] > worst_ratio) {
            worst_ratio = ep / bd.p[i];
            worst_what = std::string(name(impl)) + " variant " + std::to_string(variant);
          }
          worst_rel = std::max(worst_rel, ep / std::max(std::fabs(b.p[i]), 1e-30));
        }
      }
    }
  }
  std::printf("[optim] adam f32-vs-f64: worst |dp|/bound = %.3g (%s), worst rel |dp|/|p| = %.3g\n",
              worst_ratio, worst_what.c_str(), worst_rel);
  CHECK(worst_ratio > 0);  // the bound is not vacuous: some element differs
}

TEST_CASE("adam: mutants fall outside the f32-vs-f64 bound", "[cpu][L0]") {
  // A kernel with a known bug, run exactly (fp64 here, its best case), must leave the derived
  // bound of the correct step on most elements: no bias correction, coupled (L2) instead of
  // decoupled decay, eps inside the sqrt.
  const size_t n = 1 << 12;
  const Case c = random_case(n, 99);
  AdamHyper h;  // AdamW defaults, t = 10
  const AdamState64 s0 = st64(c, 9);
  AdamState64 ok = s0;
  adam_step_f64(h, widen(c.g), ok);
  const AdamBound bd = adam_step_bound(AdamImpl::torch_single, h, widen(c.g), s0);
  auto killed = [&](const std::vector<double>& pm) {
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) k += std::fabs(pm[i] - ok.p[i]) > bd.p[i];
    return k;
  };
  // no bias correction
  AdamHyper nb = h;
  nb.bias_correction = false;
  AdamState64 a = s0;
  adam_step_f64(nb, widen(c.g), a);
  // coupled decay
  AdamHyper cp = h;
  cp.decoupled = false;
  AdamState64 b = s0;
  adam_step_f64(cp, widen(c.g), b);
  // eps inside the sqrt: r = mhat / sqrt(vhat + eps)
  std::vector<double> e(n);
  const double bc1 = 1 - std::pow(0.9, 10), bc2 = 1 - std::pow(0.999, 10);
  for (size_t i = 0; i < n; ++i) {
    const double mh = ok.m[i] / bc1, vh = ok.v[i] / bc2;
    e[i] = s0.p[i] * (1 - h.lr * h.weight_decay) - h.lr * mh / std::sqrt(vh + h.eps);
  }
  const size_t ka = killed(a.p), kb = killed(b.p), ke = killed(e);
  std::printf("[optim] adam mutants outside the bound: no-bias-corr %zu, coupled %zu, "
              "eps-in-sqrt %zu of %zu\n", ka, kb, ke, n);
  CHECK(ka > n / 2);
  CHECK(kb > n / 10);
  CHECK(ke > n / 10);
}

TEST_CASE("adam: bf16 params without master (per-op bf16 stores) within the bf16 bound",
          "[cpu][L0]") {
  const size_t n = 1 << 13;
  Case c = random_case(n, 314);
  auto to_b = [](std::vector<float>& x) {
    for (float& e : x) e = bf16_to_f32(bf16_rne(e));
  };
  to_b(c.g), to_b(c.p), to_b(c.m), to_b(c.v), to_b(c.vmax);
  double worst = 0;
  std::vector<std::vector<float>> outs;
  for (AdamImpl impl : {AdamImpl::torch_single, AdamImpl::torch_foreach, AdamImpl::torch_fused,
                        AdamImpl::apex}) {
    AdamHyper h;
    h.bf16_storage = true;
    AdamState32 a = st32(c, 9);
    AdamState64 b = st64(c, 9);
    const AdamBound bd = adam_step_bound(impl, h, widen(c.g), b);
    adam_step_f32(impl, h, c.g, a);
    adam_step_f64(h, widen(c.g), b);
    for (size_t i = 0; i < n; ++i) {
      REQUIRE((bits_of(a.p[i]) & 0xFFFFu) == 0);  // stored as bf16
      const double e = std::fabs(a.p[i] - b.p[i]);
      INFO(name(impl) << " i " << i << " p16 " << a.p[i] << " p64 " << b.p[i] << " bound " << bd.p[i]);
      REQUIRE(e <= bd.p[i]);
      if (bd.p[i] > 0) worst = std::max(worst, e / bd.p[i]);
    }
    outs.push_back(a.p);
  }
  size_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff += bits_of(outs[0][i]) != bits_of(outs[2][i]);
  std::printf("[optim] adam bf16-storage vs f64: worst |dp|/bound = %.3g; single vs fused differ "
              "on %zu of %zu\n", worst, diff, n);
  CHECK(diff > 0);
  AdamHyper h;
  h.bf16_storage = true;
  AdamState32 bad = st32(random_case(4, 1), 0);
  REQUIRE_THROWS(adam_step_f32(AdamImpl::torch_single, h, {0.1f, 0.1f, 0.1f, 0.1f}, bad));
}

TEST_CASE("adam: single-tensor t = 1 uses f32(1/bc2_sqrt) (observed on H200), not 1.0f/f32(.)",
          "[cpu][L0]") {
  // Independent recomputation of the single-tensor step with each reciprocal form; the oracle
  // must equal form (a) everywhere and form (b) must differ somewhere (else the test is vacuous).
  const double bc2_sqrt = std::sqrt(1.0 - 0.999);
  const float inv_a = static_cast<float>(1.0 / bc2_sqrt), inv_b = 1.0f / static_cast<float>(bc2_sqrt);
  REQUIRE(inv_a != inv_b);  // 31.622776 vs 31.6227779 (hand-checked in the report)
  const size_t n = 4096;
  const Case c = random_case(n, 4242);
  AdamHyper h;
  h.weight_decay = 0;
  AdamState32 s = st32(c, 0);
  adam_step_f32(AdamImpl::torch_single, h, c.g, s);
  const float w1 = static_cast<float>(1.0 - 0.9), b2 = 0.999f, omb2 = static_cast<float>(1.0 - 0.999);
  const float neg_step = static_cast<float>(-(1e-3 / (1.0 - 0.9)));
  size_t differ_b = 0;
  for (size_t i = 0; i < n; ++i) {
    const float m = lerp_f32(c.m[i], c.g[i], w1);
    const float v = std::fma(omb2, c.g[i] * c.g[i], c.v[i] * b2);
    const float pa = std::fma(neg_step, m / (std::sqrt(v) * inv_a + 1e-8f), c.p[i]);
    const float pb = std::fma(neg_step, m / (std::sqrt(v) * inv_b + 1e-8f), c.p[i]);
    REQUIRE(same_bits(s.p[i], pa));
    differ_b += !same_bits(pa, pb);
  }
  std::printf("[optim] t=1 reciprocal forms differ in p on %zu of %zu elements\n", differ_b, n);
  CHECK(differ_b > 0);
}

TEST_CASE("adam: the implementation variants are distinguishable", "[cpu][L0]") {
  // The variants round differently, so a kernel must be compared with its own variant: count the
  // elements where they differ (each pair must differ somewhere on 2^14 random elements).
  const size_t n = 1 << 14;
  const Case c = random_case(n, 77);
  AdamHyper h;
  std::vector<AdamState32> out;
  for (AdamImpl impl : {AdamImpl::torch_single, AdamImpl::torch_foreach, AdamImpl::torch_fused,
                        AdamImpl::apex}) {
    AdamState32 s = st32(c, 9);
    adam_step_f32(impl, h, c.g, s);
    out.push_back(s);
  }
  for (size_t a = 0; a < out.size(); ++a)
    for (size_t b = a + 1; b < out.size(); ++b) {
      size_t diff = 0;
      for (size_t i = 0; i < n; ++i) diff += !same_bits(out[a].p[i], out[b].p[i]);
      std::printf("[optim] p mismatches variant %zu vs %zu: %zu of %zu\n", a, b, diff, n);
      CHECK(diff > 0);
    }
  // apex with and without the inferred contractions differ too.
  AdamState32 x = st32(c, 9), y = st32(c, 9);
  AdamHyper hn = h;
  hn.contract = Contract::none;
  adam_step_f32(AdamImpl::apex, h, c.g, x);
  adam_step_f32(AdamImpl::apex, hn, c.g, y);
  size_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff += !same_bits(x.p[i], y.p[i]) || !same_bits(x.m[i], y.m[i]);
  CHECK(diff > 0);
}

TEST_CASE("adam: single-tensor reciprocal multiply vs foreach division (spec B1.1 example)",
          "[cpu][L0]") {
  // Spec: 4.6875 / 0.9375 = 5 exactly, but 4.6875 * (1/0.9375)f = 5.0000005 in fp32.
  const float inv = 1.0f / 0.9375f;
  CHECK(4.6875f / 0.9375f == 5.0f);
  CHECK(4.6875f * inv != 5.0f);
  CHECK(4.6875f * inv == std::nextafter(5.0f, 10.0f));
}

// ---------------------------------------------------------------------------------------------
// Trajectories
// ---------------------------------------------------------------------------------------------

TEST_CASE("trajectory: 10 steps, step-by-step consistency and first divergent step", "[cpu][L0]") {
  const size_t n = 2048;
  const Case c = random_case(n, 61);
  Rng r(62);
  std::vector<std::vector<float>> grads(10, std::vector<float>(n));
  for (auto& g : grads)
    for (auto& e : g) e = r.logmag(-6, 2);
  AdamHyper h;
  const AdamTrajectory32 tr = adam_trajectory_f32(AdamImpl::torch_foreach, h, grads, st32(c, 0));
  REQUIRE(tr.p.size() == 10);
  AdamState32 s = st32(c, 0);
  for (int k = 0; k < 10; ++k) {
    adam_step_f32(AdamImpl::torch_foreach, h, grads[k], s);
    for (size_t i = 0; i < n; ++i) REQUIRE(same_bits(s.p[i], tr.p[k][i]));
  }
  CHECK(first_divergent_step(tr, tr) == -1);
  // Candidate: correct for 4 steps, then one element off by one ulp at step index 4.
  AdamTrajectory32 cand;
  AdamState32 cs = st32(c, 0);
  for (int k = 0; k < 10; ++k) {
    adam_step_f32(AdamImpl::torch_foreach, h, grads[k], cs);
    if (k == 4) cs.p[17] = std::nextafter(cs.p[17], INFINITY);
    cand.p.push_back(cs.p), cand.m.push_back(cs.m), cand.v.push_back(cs.v);
  }
  CHECK(first_divergent_step(tr, cand) == 4);
  // A different variant diverges at the first step already.
  const AdamTrajectory32 tr_single = adam_trajectory_f32(AdamImpl::torch_single, h, grads, st32(c, 0));
  CHECK(first_divergent_step(tr, tr_single) == 0);
  // fp64 trajectory stays close to the f32 one (relative 1e-4 of |p| + 10 lr: drift bound).
  std::vector<std::vector<double>> gd;
  for (const auto& g : grads) gd.push_back(widen(g));
  const AdamTrajectory64 t64 = adam_trajectory_f64(h, gd, st64(c, 0));
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(tr.p[9][i] - t64.p[9][i]);
    const double b = 1e-5 * (std::fabs(t64.p[9][i]) + 10 * h.lr);
    REQUIRE(e <= b);
    worst = std::max(worst, e / b);
  }
  std::printf("[optim] 10-step trajectory f32-vs-f64: worst |dp|/bound = %.3g\n", worst);
}
