// Tests of the SSD backward oracle (reference/ssd/ssd_backward.h): central finite differences in
// fp64 of L = <dout, out> + <dfinal, final_states> (+ <dvarlen, varlen_states>) through the forward
// recurrence, for every differentiable input, on tiny shapes; plus exact isolation of packed
// sequences (no gradient crosses a seq_idx reset); and the two-forms rule for the backward:
// ssd::backward_chunked agrees with ssd::backward_recurrent to kFormTolerance (agreement_rel) on
// every gradient tensor.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "tests/gradcheck.h"
#include "reference/ssd/tests/ssd_test_inputs.h"
#include "tests/common.h"
#include "reference/core/check.h"
#include "reference/ssd/ssd.h"
#include "reference/ssd/ssd_backward.h"
#include "reference/tests/backward_check.h"

using namespace assay;
using ssd::Grads;
using ssd::Inputs;
using ssd::Params;

namespace {

using ssd_test::Cfg;
using ssd_test::make_inputs;
using ssd_test::Rng;

// The gradcheck's tiny shapes: every feature off unless a test turns it on.
Cfg tiny() {
  Cfg c;
  c.B = 2, c.T = 7, c.H = 4, c.P = 3, c.G = 2, c.N = 4;
  c.D = c.z = c.bias = c.h0 = false;
  c.seed = 7;
  return c;
}

// Keep every pre-clamp dt value (after bias / softplus) at least `margin` away from the clamp
// bounds and from the softplus threshold 20, so that no FD point crosses a kink.
void keep_off_kinks(const Params& p, Inputs& in, double margin = 1e-3) {
  for (size_t i = 0; i < in.dt.size(); ++i) {
    const int64_t h = static_cast<int64_t>(i) % in.nheads;
    for (int it = 0; it < 100; ++it) {
      double v = in.dt[i] + (in.dt_bias.empty() ? 0.0 : in.dt_bias[h]);
      const double s = p.dt_softplus && v <= 20.0 ? std::log1p(std::exp(v)) : v;
      const bool near = std::fabs(s - p.dt_min) < margin || std::fabs(s - p.dt_max) < margin ||
                        (p.dt_softplus && std::fabs(v - 20.0) < margin);
      if (!near) break;
      in.dt[i] += 10 * margin;
    }
  }
}

struct Upstream {
  std::vector<double> dout, dfinal, dvarlen;
};

Upstream make_upstream(const Inputs& in, uint64_t seed, bool with_final = true) {
  Rng r(seed);
  Upstream u;
  u.dout = r.vec(in.batch * in.seqlen * in.nheads * in.headdim, -1, 1);
  if (with_final) u.dfinal = r.vec(in.batch * in.nheads * in.headdim * in.dstate, -1, 1);
  if (!in.cu_seqlens.empty())
    u.dvarlen = r.vec((static_cast<int64_t>(in.cu_seqlens.size()) - 1) * in.nheads * in.headdim *
                          in.dstate,
                      -1, 1);
  return u;
}

// Corruptions of valid upstream gradients that both backward forms refuse (require_refused):
// dout one element short, dfinal_states one element short, dvarlen_states without cu_seqlens.
void short_dout(Upstream& u) { u.dout.pop_back(); }
void short_dfinal(Upstream& u) { u.dfinal.pop_back(); }
void stray_dvarlen(Upstream& u) { u.dvarlen = {1.0}; }

double loss(const Params& p0, const Inputs& in, const Upstream& u) {
  Params p = p0;
  p.compute_bounds = false;
  const auto r = ssd::recurrence(p, in);
  return assay_test::loss_of({{u.dout, r.out}, {u.dfinal, r.final_states}, {u.dvarlen, r.varlen_states}});
}

// Central FD of every element of every input against the analytic gradient (tests/gradcheck.h);
// the worst relative error over all inputs, printed per input.
double gradcheck(const char* label, const Params& p, const Inputs& in, const Upstream& u) {
  const Grads g = ssd::backward_recurrent(p, in, u.dout, u.dfinal, u.dvarlen);
  const std::vector<assay_test::GradItem<Inputs>> items = {
      {"x", &Inputs::x, &g.dx},           {"dt", &Inputs::dt, &g.ddt},
      {"A", &Inputs::A, &g.dA},           {"B", &Inputs::B, &g.dB},
      {"C", &Inputs::C, &g.dC},           {"D", &Inputs::D, &g.dD},
      {"z", &Inputs::z, &g.dz},           {"dt_bias", &Inputs::dt_bias, &g.ddt_bias},
      {"initial_states", &Inputs::initial_states, &g.dinitial_states}};
  return assay_test::gradcheck_inputs(in, items, [&](const Inputs& w) { return loss(p, w, u); },
                                      std::string("ssd backward gradcheck [") + label + "]");
}

constexpr double kTol = 1e-6;

// ssd_test::params without the forward's bounds (the gradchecks' loss does not read them).
Params params(int64_t Q, bool softplus = true) {
  Params p = ssd_test::params(Q, softplus);
  p.compute_bounds = false;
  return p;
}

}  // namespace

TEST_CASE("ssd backward: gradcheck, plain (no D, z, dt_bias, initial states)", "[cpu][L0]") {
  Cfg c = tiny();
  for (int64_t Q : {3, 64}) {  // Q: checkpoint segment length (3: several segments; 64 > T)
    const Params p = params(Q);
    Inputs in = make_inputs(c);
    keep_off_kinks(p, in);
    CHECK(gradcheck(Q == 3 ? "plain Q=3" : "plain Q=64", p, in, make_upstream(in, 11)) < kTol);
  }
}

TEST_CASE("ssd backward: gradcheck with D and the z gate (D before the gate)", "[cpu][L0]") {
  Cfg c = tiny();
  c.D = c.z = true;
  const Params p = params(3);
  {
    Inputs in = make_inputs(c);
    keep_off_kinks(p, in);
    CHECK(gradcheck("D[H] + z", p, in, make_upstream(in, 12)) < kTol);
  }
  {
    c.D_per_p = true;
    c.seed = 8;
    Inputs in = make_inputs(c);
    keep_off_kinks(p, in);
    CHECK(gradcheck("D[H,P] + z", p, in, make_upstream(in, 13)) < kTol);
  }
  {
    c.z = false;
    Inputs in = make_inputs(c);
    keep_off_kinks(p, in);
    CHECK(gradcheck("D[H,P], no z", p, in, make_upstream(in, 14)) < kTol);
  }
}

TEST_CASE("ssd backward: gradcheck with dt_bias and an active clamp", "[cpu][L0]") {
  Cfg c = tiny();
  c.bias = true;
  c.D = c.z = true;
  SECTION("softplus, dt_limit = (0.15, 1.0) clamps some tokens at each end") {
    Params p = params(3);
    p.dt_min = 0.15;
    p.dt_max = 1.0;
    Inputs in = make_inputs(c);
    keep_off_kinks(p, in);
    const auto delta = ssd::process_dt(p, in);
    int lo = 0, hi = 0;
    for (double d : delta) lo += d == p.dt_min, hi += d == p.dt_max;
    REQUIRE(lo > 0);
    REQUIRE(hi > 0);
    const Upstream u = make_upstream(in, 15);
    const Grads g = ssd::backward_recurrent(p, in, u.dout, u.dfinal);
    for (size_t i = 0; i < delta.size(); ++i)
      if (delta[i] == p.dt_min || delta[i] == p.dt_max) CHECK(g.ddt[i] == 0.0);
    CHECK(gradcheck("bias + clamp (softplus)", p, in, u) < kTol);
  }
  SECTION("no softplus, default dt_limit (0, inf): negative dt + bias clamps to 0") {
    const Params p = params(3, false);
    c.dt_lo = -0.6;
    c.dt_hi = 1.0;
    Inputs in = make_inputs(c);
    keep_off_kinks(p, in);
    const auto delta = ssd::process_dt(p, in);
    REQUIRE(std::count(delta.begin(), delta.end(), 0.0) > 0);
    CHECK(gradcheck("bias + clamp at 0 (no softplus)", p, in, make_upstream(in, 16)) < kTol);
  }
}

TEST_CASE("ssd backward: gradcheck with initial states (all options)", "[cpu][L0]") {
  Cfg c = tiny();
  c.D = c.z = c.bias = c.h0 = true;
  const Params p = params(3);
  Inputs in = make_inputs(c);
  keep_off_kinks(p, in);
  CHECK(gradcheck("initial_states + D + z + bias", p, in, make_upstream(in, 17)) < kTol);
  // dfinal only: dinitial_states is the pure decay exp(A sum Delta) dfinal.
  Upstream u = make_upstream(in, 18);
  std::fill(u.dout.begin(), u.dout.end(), 0.0);
  const Grads g = ssd::backward_recurrent(p, in, u.dout, u.dfinal);
  const auto delta = ssd::process_dt(p, in);
  const int64_t PN = c.P * c.N;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      double sum = 0;
      for (int64_t t = 0; t < c.T; ++t) sum += delta[(b * c.T + t) * c.H + h];
      const double decay = std::exp(sum * in.A[h]);
      for (int64_t i = 0; i < PN; ++i) {
        const int64_t k = (b * c.H + h) * PN + i;
        CHECK(std::fabs(g.dinitial_states[k] - decay * u.dfinal[k]) <=
              1e-14 * std::fabs(u.dfinal[k]));
      }
    }
}

TEST_CASE("ssd backward: gradcheck with seq_idx resets and varlen (cu_seqlens)", "[cpu][L0]") {
  Cfg c = tiny();
  c.D = c.z = c.bias = c.h0 = true;
  SECTION("B=2 packed rows; row 1 starts with id 1 (initial_states dropped there)") {
    const Params p = params(3);
    Inputs in = make_inputs(c);
    in.seq_idx = {0, 0, 0, 1, 1, 2, 2,   // row 0: resets at t = 3 (mid segment) and t = 5
                  1, 1, 1, 1, 3, 3, 3};  // row 1: reset at t = 0 (id 1 != 0) and t = 4
    keep_off_kinks(p, in);
    const Upstream u = make_upstream(in, 19);
    CHECK(gradcheck("seq_idx B=2", p, in, u) < kTol);
    const Grads g = ssd::backward_recurrent(p, in, u.dout, u.dfinal);
    const int64_t PN = c.P * c.N;
    for (int64_t i = 0; i < c.H * PN; ++i) CHECK(g.dinitial_states[c.H * PN + i] == 0.0);
  }
  SECTION("B=1 varlen with an empty sequence; loss includes varlen_states") {
    c.B = 1;
    c.T = 9;
    const Params p = params(4);
    Inputs in = make_inputs(c);
    in.cu_seqlens = {0, 3, 3, 7, 9};
    in.seq_idx = {0, 0, 0, 2, 2, 2, 2, 3, 3};
    keep_off_kinks(p, in);
    CHECK(gradcheck("varlen B=1", p, in, make_upstream(in, 20)) < kTol);
  }
}

TEST_CASE("ssd backward: no gradient crosses a packed-sequence reset", "[cpu][L0]") {
  Cfg c = tiny();
  c.D = c.z = c.bias = c.h0 = true;
  c.B = 1;
  c.T = 9;
  const Params p = params(4);
  Inputs in = make_inputs(c);
  in.cu_seqlens = {0, 4, 9};
  in.seq_idx = {0, 0, 0, 0, 1, 1, 1, 1, 1};
  keep_off_kinks(p, in);
  Upstream u = make_upstream(in, 21);
  // Only sequence 1 is observed: dout on its tokens, dfinal (its final state), dvarlen[1].
  const int64_t HP = c.H * c.P, PN = c.P * c.N;
  std::fill(u.dout.begin(), u.dout.begin() + 4 * HP, 0.0);
  std::fill(u.dvarlen.begin(), u.dvarlen.begin() + c.H * PN, 0.0);
  const Grads g = ssd::backward_recurrent(p, in, u.dout, u.dfinal, u.dvarlen);
  const int64_t GN = c.G * c.N;
  double leak = 0, inside = 0;
  for (int64_t t = 0; t < 9; ++t) {
    double m = 0;
    for (int64_t i = 0; i < HP; ++i) m = std::max({m, std::fabs(g.dx[t * HP + i]),
                                                   std::fabs(g.dz[t * HP + i])});
    for (int64_t i = 0; i < GN; ++i)
      m = std::max({m, std::fabs(g.dB[t * GN + i]), std::fabs(g.dC[t * GN + i])});
    for (int64_t h = 0; h < c.H; ++h) m = std::max(m, std::fabs(g.ddt[t * c.H + h]));
    (t < 4 ? leak : inside) = std::max(t < 4 ? leak : inside, m);
  }
  for (double e : g.dinitial_states) leak = std::max(leak, std::fabs(e));
  CHECK(leak == 0.0);
  CHECK(inside > 0.1);
  // And the converse direction by FD: perturbing sequence-0 inputs leaves L unchanged exactly.
  Inputs w = in;
  for (int64_t i = 0; i < 4 * HP; ++i) w.x[i] += 0.5;
  for (int64_t i = 0; i < 4 * c.H; ++i) w.dt[i] += 0.3;
  CHECK(loss(p, w, u) == loss(p, in, u));
}

TEST_CASE("ssd backward: malformed upstream gradients are refused", "[cpu][L0]") {
  const Params p = params(3);
  const Inputs in = make_inputs(tiny());
  assay_test::require_refused(make_upstream(in, 22), {short_dout, short_dfinal, stray_dvarlen},
                              [&](const Upstream& u) { return ssd::backward_recurrent(p, in, u.dout, u.dfinal, u.dvarlen); });
}

// ---------------------------------------------------------------- chunked vs recurrent backward
namespace {

struct GradAgreement {
  std::vector<std::pair<const char*, double>> worst = {
      {"dx", 0},  {"ddt", 0}, {"dA", 0},       {"dB", 0},         {"dC", 0},
      {"dD", 0},  {"dz", 0},  {"ddt_bias", 0}, {"dinitial_states", 0}};
  int cases = 0;
  // agreement_rel(chunked, recurrent) per tensor; returns the worst of this case.
  double add(const Grads& ch, const Grads& rc) {
    const std::vector<double>* a[] = {&ch.dx, &ch.ddt, &ch.dA, &ch.dB, &ch.dC,
                                      &ch.dD, &ch.dz,  &ch.ddt_bias, &ch.dinitial_states};
    const std::vector<double>* r[] = {&rc.dx, &rc.ddt, &rc.dA, &rc.dB, &rc.dC,
                                      &rc.dD, &rc.dz,  &rc.ddt_bias, &rc.dinitial_states};
    double w = 0;
    for (size_t i = 0; i < worst.size(); ++i) {
      REQUIRE(a[i]->size() == r[i]->size());
      const double e = agreement_rel(*a[i], *r[i]);
      worst[i].second = std::max(worst[i].second, e);
      w = std::max(w, e);
    }
    ++cases;
    return w;
  }
};

// Resets of row 0 at t in {3, 4, 5, 16, 33, 64, 100} (chunk boundaries for Q = 1, 3, 4, 16, 64
// and mid-chunk ones, length-1 sequences at 3 and 4); row 1 starts with id 1 (initial_states
// dropped) and resets at t in {1, 7, 20, 65}.
std::vector<int64_t> make_seq_idx(int64_t B, int64_t T) {
  std::vector<int64_t> s(B * T);
  const std::vector<std::vector<int64_t>> resets = {{3, 4, 5, 16, 33, 64, 100}, {1, 7, 20, 65}};
  for (int64_t b = 0; b < B; ++b) {
    int64_t id = b == 0 ? 0 : 1;
    for (int64_t t = 0; t < T; ++t) {
      const auto& r = resets[b % 2];
      if (std::find(r.begin(), r.end(), t) != r.end()) id += 1 + b;  // ids may skip values
      s[b * T + t] = id;
    }
  }
  return s;
}

// cu_seqlens with an empty sequence at 3 and a trailing empty one: {0, 3, 3, 5, 16, 40, 64, 70,
// 129 (those < T), T, T}; seq_idx from it.
void make_varlen(Inputs& in) {
  const int64_t T = in.seqlen;
  std::vector<int64_t> cu = {0};
  for (int64_t e : {3, 3, 5, 16, 40, 64, 70, 129})
    if (e < T) cu.push_back(e);
  cu.push_back(T);
  cu.push_back(T);
  in.cu_seqlens = cu;
  in.seq_idx.assign(T, 0);
  for (size_t n = 0; n + 1 < cu.size(); ++n)
    for (int64_t t = cu[n]; t < cu[n + 1]; ++t) in.seq_idx[t] = static_cast<int64_t>(n);
}

}  // namespace

TEST_CASE("ssd backward: chunked form agrees with the recurrent form", "[cpu][L0]") {
  GradAgreement ag;
  int clamped_lo = 0, clamped_hi = 0;
  for (int64_t T : {1, 7, 37, 65, 130})
    for (int64_t Q : {1, 3, 4, 16, 64})
      for (int variant = 0; variant < 5; ++variant) {
        Cfg c;
        c.B = 2, c.T = T, c.H = 4, c.P = 5, c.G = 2, c.N = 6;
        c.seed = 1000 + 37 * T + 5 * Q + variant;
        Params p = params(Q);
        bool with_final = true;
        const char* what = "";
        switch (variant) {
          case 0:  // plain, dfinal_states only as the state gradient
            what = "plain";
            c.D = c.z = c.bias = c.h0 = false;
            break;
          case 1:  // D[H], z, dt_bias, an active clamp on both sides, initial states
            what = "D[H] z bias clamp h0";
            p.dt_min = 0.15, p.dt_max = 1.0;
            break;
          case 2:  // D[H,P], no z, no softplus with the default clamp at 0, no dfinal
            what = "D[H,P] clamp0 h0, no dfinal";
            c.D_per_p = true, c.z = false;
            p.dt_softplus = false;
            c.dt_lo = -0.6, c.dt_hi = 1.0;
            with_final = false;
            break;
          case 3:  // seq_idx resets, B = 2
            what = "seq_idx B=2";
            c.D_per_p = true;
            p.dt_min = 0.15, p.dt_max = 1.0;
            break;
          case 4:  // varlen: cu_seqlens with empty sequences, dvarlen_states + dfinal_states
            what = "varlen B=1";
            c.B = 1;
            break;
        }
        Inputs in = make_inputs(c);
        if (variant == 3) in.seq_idx = make_seq_idx(c.B, T);
        if (variant == 4) make_varlen(in);
        if (variant == 1)
          for (double d : ssd::process_dt(p, in))
            clamped_lo += d == p.dt_min, clamped_hi += d == p.dt_max;
        const Upstream u = make_upstream(in, c.seed + 1, with_final);
        const Grads rc = ssd::backward_recurrent(p, in, u.dout, u.dfinal, u.dvarlen);
        const Grads ch = ssd::backward_chunked(p, in, u.dout, u.dfinal, u.dvarlen);
        const double w = ag.add(ch, rc);
        INFO("T=" << T << " Q=" << Q << " " << what << " worst agreement " << w);
        CHECK(w <= ssd::kFormTolerance);
      }
  REQUIRE(clamped_lo > 0);
  REQUIRE(clamped_hi > 0);
  std::string line;
  for (const auto& [name, w] : ag.worst) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s=%.2e", name, w);
    line += buf;
    CHECK(w <= ssd::kFormTolerance);
  }
  std::printf("ssd backward chunked vs recurrent, %d cases, worst agreement_rel per gradient:%s\n",
              ag.cases, line.c_str());
}

TEST_CASE("ssd backward: chunked form refuses malformed upstream gradients", "[cpu][L0]") {
  const Params p = params(3);
  const Inputs in = make_inputs(tiny());
  assay_test::require_refused(make_upstream(in, 22), {short_dout, stray_dvarlen},
                              [&](const Upstream& u) { return ssd::backward_chunked(p, in, u.dout, u.dfinal, u.dvarlen); });
}

TEST_CASE("ssd backward: bounds dominate every gradient, are 0 where the clamp acts, and are tight without cancellation", "[cpu][L0]") {
  // |g| <= bound elementwise (the bound is the sum of the absolute values of g's terms), and the
  // bound equals |g| when no term can cancel: x, B, C, dout, dfinal >= 0, no z, no D, and A = 0
  // (so the decay-chain term A ddecay vanishes and decays are 1).
  Cfg c;
  c.B = 2, c.T = 37, c.H = 4, c.P = 3, c.G = 2, c.N = 5;
  c.D_per_p = true;
  Params p = params(8);
  p.dt_min = 0.15, p.dt_max = 1.0;
  Inputs in = make_inputs(c);
  in.seq_idx = make_seq_idx(c.B, c.T);
  const Upstream u = make_upstream(in, 91);
  const Grads g = ssd::backward_recurrent(p, in, u.dout, u.dfinal);
  const Grads b = ssd::backward_bound(p, in, u.dout, u.dfinal);
  auto dominated = [](const char* name, const std::vector<double>& gv, const std::vector<double>& bv) {
    INFO(name);
    REQUIRE(gv.size() == bv.size());
    double worst = 0;
    for (size_t i = 0; i < gv.size(); ++i) worst = std::max(worst, std::fabs(gv[i]) - bv[i] * (1 + 1e-12));
    CHECK(worst <= 0.0);
  };
  dominated("dx", g.dx, b.dx), dominated("ddt", g.ddt, b.ddt), dominated("dA", g.dA, b.dA);
  dominated("dB", g.dB, b.dB), dominated("dC", g.dC, b.dC), dominated("dD", g.dD, b.dD);
  dominated("dz", g.dz, b.dz), dominated("ddt_bias", g.ddt_bias, b.ddt_bias);
  dominated("dinitial_states", g.dinitial_states, b.dinitial_states);
  const std::vector<double> delta = ssd::process_dt(p, in);
  int clamped = 0;
  for (size_t i = 0; i < delta.size(); ++i)
    if (delta[i] == p.dt_min || delta[i] == p.dt_max) {
      // (equality with a bound is a pass-through; strictly outside is the clamp acting)
      double v = in.dt[i] + in.dt_bias[i % in.nheads];
      const double s = std::log1p(std::exp(v));
      if (s < p.dt_min || s > p.dt_max) {
        ++clamped;
        CHECK(b.ddt[i] == 0.0);
        CHECK(g.ddt[i] == 0.0);
      }
    }
  REQUIRE(clamped > 0);

  // Tight: no cancellation possible.
  Cfg t = c;
  t.D = t.z = false;
  Inputs ip = make_inputs(t);
  for (auto* v : {&ip.x, &ip.B, &ip.C, &ip.initial_states})
    for (double& e : *v) e = std::fabs(e);
  std::fill(ip.A.begin(), ip.A.end(), -1e-300);  // (A < 0 is required; exp(Delta A) = 1)
  Upstream up = make_upstream(ip, 92);
  for (auto* v : {&up.dout, &up.dfinal})
    for (double& e : *v) e = std::fabs(e);
  const Params pp = params(8);
  const Grads gp = ssd::backward_recurrent(pp, ip, up.dout, up.dfinal);
  const Grads bp = ssd::backward_bound(pp, ip, up.dout, up.dfinal);
  CHECK(agreement_rel(gp.dx, bp.dx) <= 1e-14);
  CHECK(agreement_rel(gp.dB, bp.dB) <= 1e-14);
  CHECK(agreement_rel(gp.dC, bp.dC) <= 1e-14);
  CHECK(agreement_rel(gp.ddt, bp.ddt) <= 1e-14);
  CHECK(agreement_rel(gp.dinitial_states, bp.dinitial_states) <= 1e-14);
}

TEST_CASE("ssd backward: dstates is the chunk-start adjoint (chunk 0 = dinitial_states, chunk c = the gradient of the state entering chunk c)", "[cpu][L0]") {
  Cfg c;
  c.B = 2, c.T = 50, c.H = 2, c.P = 3, c.G = 1, c.N = 4;
  const Params p = params(16);
  Inputs in = make_inputs(c);
  const Upstream u = make_upstream(in, 93);
  const Grads g = ssd::backward_chunked(p, in, u.dout, u.dfinal);
  const int64_t NC = 4, PN = c.P * c.N;
  REQUIRE(static_cast<int64_t>(g.dstates.size()) == c.B * NC * c.H * PN);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < PN; ++i)
        CHECK(g.dstates[((b * NC + 0) * c.H + h) * PN + i] == g.dinitial_states[(b * c.H + h) * PN + i]);
  // dstates of chunk c is the gradient of the loss w.r.t. the state entering chunk c: equal to
  // dinitial_states of the same problem started at token cQ from that state.
  const int64_t cs = 2, t0 = cs * 16;
  Params pf = p;
  pf.compute_bounds = false;
  const auto fwd = ssd::chunked(pf, in);
  Inputs tail = in;
  tail.seqlen = c.T - t0;
  auto slice = [&](const std::vector<double>& v, int64_t per_t) {
    std::vector<double> r;
    for (int64_t b = 0; b < c.B; ++b)
      r.insert(r.end(), v.begin() + (b * c.T + t0) * per_t, v.begin() + (b * c.T + c.T) * per_t);
    return r;
  };
  tail.x = slice(in.x, c.H * c.P), tail.dt = slice(in.dt, c.H), tail.B = slice(in.B, c.G * c.N);
  tail.C = slice(in.C, c.G * c.N), tail.z = slice(in.z, c.H * c.P);
  tail.initial_states.assign(c.B * c.H * PN, 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < PN; ++i)
        tail.initial_states[(b * c.H + h) * PN + i] = fwd.chunk_states[((b * NC + cs) * c.H + h) * PN + i];
  const Grads gt = ssd::backward_recurrent(p, tail, slice(u.dout, c.H * c.P), u.dfinal);
  std::vector<double> ours;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      ours.insert(ours.end(), g.dstates.begin() + ((b * NC + cs) * c.H + h) * PN,
                  g.dstates.begin() + ((b * NC + cs) * c.H + h + 1) * PN);
  CHECK(agreement_rel(ours, gt.dinitial_states) <= 1e-12);
}

TEST_CASE("ssd backward: every BwdMutant changes the gradients it targets, the io emulation stays near", "[cpu][L0]") {
  Cfg c;
  c.B = 1, c.T = 60, c.H = 2, c.P = 3, c.G = 1, c.N = 4;
  Params p = params(16);
  p.dt_min = 0.15, p.dt_max = 1.0;
  Inputs in = make_inputs(c);
  in.seq_idx = std::vector<int64_t>(c.T, 0);
  for (int64_t t = 20; t < c.T; ++t) in.seq_idx[t] = 1;  // a reset inside chunk 1
  const Upstream u = make_upstream(in, 94);
  const Grads ref = ssd::backward_chunked(p, in, u.dout, u.dfinal);
  for (const ssd::BwdMutant m : ssd::kAllBwdMutants) {
    const Grads g = ssd::backward_chunked(p, in, u.dout, u.dfinal, {}, {m, std::nullopt});
    INFO(ssd::bwd_mutant_name(m));
    CHECK(agreement_rel(g.ddt, ref.ddt) > 1e-3);
  }
  const Grads e = ssd::backward_chunked(p, in, u.dout, u.dfinal, {}, {ssd::BwdMutant::none, DType::bf16});
  const double d = agreement_rel(e.dx, ref.dx);
  CHECK(d > 0.0);
  CHECK(d < 0.05);
}
