// Tests of the gated delta rule backward oracle (reference/gated_delta/gated_delta_backward.h):
// central finite differences in fp64 of L = <do, o> + <dfinal, final_state> through the forward
// recurrence (gated_delta::recurrent), for every element of every differentiable input, on tiny
// shapes; plus exact isolation of varlen sequences (no gradient crosses a reset) and an empty
// sequence passing dfinal through to dinitial_state.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "tests/gradcheck.h"
#include "tests/common.h"
#include "reference/core/check.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/gated_delta/gated_delta_backward.h"
#include "reference/gated_delta/tests/gated_delta_test_inputs.h"
#include "reference/tests/backward_check.h"

using namespace assay;
using namespace assay::gated_delta;

namespace {

using gated_delta_test::base;
using gated_delta_test::num_seqs;

// The backward tests' inputs: their own stream and distributions (gated_delta_test::Rng).
struct Rng : gated_delta_test::Rng {
  explicit Rng(uint64_t seed) : gated_delta_test::Rng(seed, 777) {}
};

Inputs make_inputs(const Params& p, uint64_t seed, bool h0, bool dt_bias = true) {
  Rng r(seed);
  Inputs in;
  const int64_t BT = p.B * p.T;
  in.q = r.vec(BT * p.H * p.K);
  in.k = r.vec(BT * p.H * p.K);
  in.v = r.vec(BT * p.HV * p.V);
  if (p.gate == GateMode::log) {
    in.g.resize(BT * p.HV);
    for (auto& x : in.g) x = -0.25 - 0.25 * r.uni();  // in (-0.5, 0]
  } else if (p.gate == GateMode::in_kernel) {
    in.g = r.vec(BT * p.HV, 2.0);
    in.A_log = r.vec(p.HV, 0.7);
    if (dt_bias) in.dt_bias = r.vec(p.HV, 0.5);
  }
  in.beta.resize(BT * p.HV);
  for (auto& x : in.beta) x = p.beta == BetaMode::given ? 0.5 + 0.5 * r.uni() : 2.0 * r.uni();
  if (h0) in.initial_state = r.vec(num_seqs(p) * p.HV * p.K * p.V, 0.5);
  return in;
}

struct Upstream {
  std::vector<double> d_o, dfinal;
};

Upstream make_upstream(const Params& p, uint64_t seed, bool with_final = true) {
  Rng r(seed);
  Upstream u;
  u.d_o = r.vec(p.B * p.T * p.HV * p.V);
  if (with_final) u.dfinal = r.vec(num_seqs(p) * p.HV * p.K * p.V);
  return u;
}

double loss(const Params& p, const Inputs& in, const Upstream& u) {
  const Result r = recurrent(p, in);
  return assay_test::loss_of({{u.d_o, r.o}, {u.dfinal, r.final_state}});
}

// Central FD of every element of every input against the analytic gradient (tests/gradcheck.h);
// the worst relative error over all inputs, printed per input.
double gradcheck(const char* label, const Params& p, const Inputs& in, const Upstream& u) {
  const Grads g = backward_recurrent(p, in, u.d_o, u.dfinal);
  const std::vector<assay_test::GradItem<Inputs>> items = {
      {"q", &Inputs::q, &g.dq},         {"k", &Inputs::k, &g.dk},
      {"v", &Inputs::v, &g.dv},         {"g", &Inputs::g, &g.dg},
      {"beta", &Inputs::beta, &g.dbeta}, {"A_log", &Inputs::A_log, &g.dA_log},
      {"dt_bias", &Inputs::dt_bias, &g.ddt_bias},
      {"initial_state", &Inputs::initial_state, &g.dinitial_state}};
  return assay_test::gradcheck_inputs(in, items, [&](const Inputs& w) { return loss(p, w, u); },
                                      std::string("gated_delta backward gradcheck [") + label + "]");
}

constexpr double kTol = 1e-6;

}  // namespace

TEST_CASE("gated_delta backward: gradcheck, log gate, given beta, H == HV", "[cpu][L0]") {
  for (int64_t C : {2, 64}) {  // C: checkpoint grid (2: several recomputed chunks; 64 > T)
    Params p = base(2, 5, 2, 2, 3, 4, C);
    const Inputs in = make_inputs(p, 1, /*h0=*/false);
    CHECK(gradcheck(C == 2 ? "log, given, no h0, C=2" : "log, given, no h0, C=64", p, in,
                    make_upstream(p, 2)) < kTol);
  }
  Params p = base(2, 5, 2, 2, 3, 4, 2);
  p.scale = 0.7;
  const Inputs in = make_inputs(p, 3, /*h0=*/true);
  CHECK(gradcheck("log, given, h0, scale=0.7", p, in, make_upstream(p, 4)) < kTol);
}

TEST_CASE("gated_delta backward: gradcheck, GVA (HV > H) with qk l2norm and every beta mode", "[cpu][L0]") {
  for (BetaMode bm : {BetaMode::given, BetaMode::sigmoid, BetaMode::two_sigmoid}) {
    Params p = base(2, 5, 2, 4, 3, 2, 2);
    p.beta = bm;
    p.qk_l2norm = true;
    const Inputs in = make_inputs(p, 10 + static_cast<int>(bm), /*h0=*/true);
    const char* label = bm == BetaMode::given     ? "GVA HV=4 H=2, l2norm, beta given, h0"
                        : bm == BetaMode::sigmoid ? "GVA HV=4 H=2, l2norm, beta sigmoid, h0"
                                                  : "GVA HV=4 H=2, l2norm, beta two_sigmoid, h0";
    CHECK(gradcheck(label, p, in, make_upstream(p, 20 + static_cast<int>(bm))) < kTol);
  }
}

TEST_CASE("gated_delta backward: gradcheck, in-kernel gate, no gate, vk state layout", "[cpu][L0]") {
  {
    Params p = base(2, 5, 1, 3, 3, 2, 2);
    p.gate = GateMode::in_kernel;
    p.beta = BetaMode::sigmoid;
    p.qk_l2norm = true;
    const Inputs in = make_inputs(p, 30, /*h0=*/true);
    CHECK(gradcheck("in_kernel gate + dt_bias, GVA HV=3 H=1, l2norm, sigmoid, h0", p, in, make_upstream(p, 31)) <
          kTol);
  }
  {
    Params p = base(1, 6, 2, 2, 2, 3, 3);
    p.gate = GateMode::in_kernel;
    const Inputs in = make_inputs(p, 32, /*h0=*/true, /*dt_bias=*/false);
    CHECK(gradcheck("in_kernel gate, no dt_bias", p, in, make_upstream(p, 33)) < kTol);
  }
  {
    Params p = base(2, 5, 1, 2, 3, 2, 2);
    p.gate = GateMode::none;
    p.beta = BetaMode::two_sigmoid;
    const Inputs in = make_inputs(p, 34, /*h0=*/true);
    CHECK(gradcheck("gate none (delta rule), two_sigmoid, h0", p, in, make_upstream(p, 35)) < kTol);
  }
  {
    Params p = base(2, 5, 2, 4, 3, 2, 2);
    p.state_layout = StateLayout::vk;
    p.qk_l2norm = true;
    const Inputs in = make_inputs(p, 36, /*h0=*/true);
    CHECK(gradcheck("vk layout, GVA, l2norm, h0", p, in, make_upstream(p, 37)) < kTol);
  }
}

TEST_CASE("gated_delta backward: gradcheck, varlen with an empty sequence", "[cpu][L0]") {
  Params p = base(1, 9, 2, 4, 3, 2, 2);
  p.cu_seqlens = {0, 3, 3, 7, 9};
  p.qk_l2norm = true;
  p.beta = BetaMode::sigmoid;
  const Inputs in = make_inputs(p, 40, /*h0=*/true);
  const Upstream u = make_upstream(p, 41);
  CHECK(gradcheck("varlen {0,3,3,7,9}, GVA, l2norm, sigmoid, h0", p, in, u) < kTol);
  // The empty sequence (n = 1) passes the state through: dinitial_state[1] == dfinal[1] exactly.
  const Grads g = backward_recurrent(p, in, u.d_o, u.dfinal);
  const int64_t S = p.HV * p.K * p.V;
  for (int64_t i = 0; i < S; ++i) CHECK(g.dinitial_state[S + i] == u.dfinal[S + i]);
  Params pi = p;
  pi.gate = GateMode::in_kernel;
  const Inputs in2 = make_inputs(pi, 42, /*h0=*/true);
  CHECK(gradcheck("varlen {0,3,3,7,9}, in_kernel gate, GVA, l2norm, sigmoid, h0", pi, in2, make_upstream(pi, 43)) <
        kTol);
}

TEST_CASE("gated_delta backward: dfinal only gives the pure decay-and-projection adjoint", "[cpu][L0]") {
  // With beta = 0 the state only decays: dinitial_state = exp(sum g) dfinal exactly-ish.
  Params p = base(1, 4, 1, 2, 2, 3, 2);
  Inputs in = make_inputs(p, 50, /*h0=*/true);
  std::fill(in.beta.begin(), in.beta.end(), 0.0);
  Upstream u = make_upstream(p, 51);
  std::fill(u.d_o.begin(), u.d_o.end(), 0.0);
  const Grads g = backward_recurrent(p, in, u.d_o, u.dfinal);
  const int64_t KV = p.K * p.V;
  for (int64_t hv = 0; hv < p.HV; ++hv) {
    double decay = 1;
    for (int64_t t = 0; t < p.T; ++t) decay *= std::exp(in.g[t * p.HV + hv]);
    for (int64_t x = 0; x < KV; ++x)
      CHECK(std::fabs(g.dinitial_state[hv * KV + x] - decay * u.dfinal[hv * KV + x]) <=
            1e-14 * std::fabs(u.dfinal[hv * KV + x]));
  }
  for (double e : g.dv) CHECK(e == 0.0);
  for (double e : g.dq) CHECK(e == 0.0);
}

TEST_CASE("gated_delta backward: no gradient crosses a varlen reset", "[cpu][L0]") {
  Params p = base(1, 9, 2, 4, 3, 2, 2);
  p.cu_seqlens = {0, 4, 9};
  p.qk_l2norm = true;
  p.gate = GateMode::in_kernel;
  p.beta = BetaMode::sigmoid;
  const Inputs in = make_inputs(p, 60, /*h0=*/true);
  Upstream u = make_upstream(p, 61);
  // Only sequence 1 is observed: do on its tokens, dfinal of its slot.
  const int64_t HVV = p.HV * p.V, S = p.HV * p.K * p.V;
  std::fill(u.d_o.begin(), u.d_o.begin() + 4 * HVV, 0.0);
  std::fill(u.dfinal.begin(), u.dfinal.begin() + S, 0.0);
  const Grads g = backward_recurrent(p, in, u.d_o, u.dfinal);
  const int64_t HK = p.H * p.K;
  double leak = 0, inside = 0;
  for (int64_t t = 0; t < p.T; ++t) {
    double mx = 0;
    for (int64_t i = 0; i < HK; ++i) mx = std::max({mx, std::fabs(g.dq[t * HK + i]), std::fabs(g.dk[t * HK + i])});
    for (int64_t i = 0; i < HVV; ++i) mx = std::max(mx, std::fabs(g.dv[t * HVV + i]));
    for (int64_t hv = 0; hv < p.HV; ++hv)
      mx = std::max({mx, std::fabs(g.dg[t * p.HV + hv]), std::fabs(g.dbeta[t * p.HV + hv])});
    (t < 4 ? leak : inside) = std::max(t < 4 ? leak : inside, mx);
  }
  for (int64_t i = 0; i < S; ++i) leak = std::max(leak, std::fabs(g.dinitial_state[i]));
  CHECK(leak == 0.0);
  CHECK(inside > 0.01);
  double h0_1 = 0;
  for (int64_t i = S; i < 2 * S; ++i) h0_1 = std::max(h0_1, std::fabs(g.dinitial_state[i]));
  CHECK(h0_1 > 0.01);
  // The converse by perturbation: changing sequence-0 inputs leaves L unchanged exactly.
  Inputs w = in;
  for (int64_t i = 0; i < 4 * HK; ++i) w.q[i] += 0.5, w.k[i] -= 0.3;
  for (int64_t i = 0; i < 4 * HVV; ++i) w.v[i] += 0.5;
  for (int64_t i = 0; i < 4 * p.HV; ++i) w.g[i] += 0.3, w.beta[i] -= 0.2;
  for (int64_t i = 0; i < S; ++i) w.initial_state[i] += 0.25;
  CHECK(loss(p, w, u) == loss(p, in, u));
}

TEST_CASE("gated_delta backward: malformed upstream gradients and mutants are refused by both forms", "[cpu][L0]") {
  using Fn = Grads (*)(const Params&, const Inputs&, const std::vector<double>&, const std::vector<double>&);
  const Fn chunked = [](const Params& p, const Inputs& in, const std::vector<double>& d_o,
                        const std::vector<double>& df) { return backward_chunked(p, in, d_o, df); };
  for (const Fn backward : {Fn{&backward_recurrent}, chunked}) {
    Params p = base(2, 3, 1, 1, 2, 2, 2);
    const Inputs in = make_inputs(p, 70, /*h0=*/true);
    const Upstream u = make_upstream(p, 71);
    assay_test::require_refused(u, {[](Upstream& x) { x.d_o.pop_back(); }, [](Upstream& x) { x.dfinal.pop_back(); }},
                                [&](const Upstream& x) { return backward(p, in, x.d_o, x.dfinal); });
    p.mutant = Mutant::missing_alpha;
    REQUIRE_THROWS_AS(backward(p, in, u.d_o, u.dfinal), InputError);
  }
}

// ---------------------------------------------------------------------------------------------
// backward_chunked (the WY / UT form) against backward_recurrent (the definitional adjoint): every
// gradient tensor with agreement_rel <= 1e-12 (the two-forms rule), over chunk sizes 1, 3, 16, 64
// and T = 1, 7, 37, 65 (mostly not divisible by the chunk), for each configuration below.
TEST_CASE("gated_delta backward: chunked (WY/UT) and recurrent backward forms agree to 1e-12", "[cpu][L0]") {
  struct Config {
    const char* label;
    int64_t B, H, HV;
    GateMode gate;
    BetaMode beta;
    bool l2norm, h0, dfinal, dt_bias, varlen, neg_inf;
    StateLayout layout;
  };
  const Config configs[] = {
      {"log, given, H=HV=2, no h0, no dfinal", 2, 2, 2, GateMode::log, BetaMode::given, false, false, false, true,
       false, false, StateLayout::kv},
      {"log, sigmoid, GVA H=2 HV=4, l2norm, h0, dfinal, vk", 2, 2, 4, GateMode::log, BetaMode::sigmoid, true, true,
       true, true, false, false, StateLayout::vk},
      {"in_kernel + dt_bias, two_sigmoid, GVA H=1 HV=3, l2norm, h0, dfinal", 2, 1, 3, GateMode::in_kernel,
       BetaMode::two_sigmoid, true, true, true, true, false, false, StateLayout::kv},
      {"in_kernel no dt_bias, given, h0, no dfinal, vk", 1, 1, 2, GateMode::in_kernel, BetaMode::given, false, true,
       false, false, false, false, StateLayout::vk},
      {"no gate, sigmoid, l2norm, dfinal", 2, 1, 1, GateMode::none, BetaMode::sigmoid, true, false, true, true, false,
       false, StateLayout::kv},
      {"varlen with empty sequences, log, GVA H=2 HV=4, l2norm, two_sigmoid, h0, dfinal, vk", 1, 2, 4, GateMode::log,
       BetaMode::two_sigmoid, true, true, true, true, true, false, StateLayout::vk},
      {"varlen, in_kernel, given, h0, no dfinal", 1, 1, 2, GateMode::in_kernel, BetaMode::given, false, true, false,
       true, true, false, StateLayout::kv},
      {"log with -inf gates (clean resets), GVA, h0, dfinal", 2, 1, 2, GateMode::log, BetaMode::given, true, true,
       true, true, false, true, StateLayout::kv},
  };
  const char* names[] = {"dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dinitial_state", "dh"};
  double worst[9] = {};
  uint64_t seed = 900;
  int runs = 0;
  for (const Config& cf : configs)
    for (int64_t T : {1, 7, 37, 65})
      for (int64_t C : {1, 3, 16, 64}) {
        Params p = base(cf.B, T, cf.H, cf.HV, /*K=*/4, /*V=*/3, C);
        p.gate = cf.gate;
        p.beta = cf.beta;
        p.qk_l2norm = cf.l2norm;
        p.state_layout = cf.layout;
        if (cf.varlen) {  // empty sequences at the start and in the middle
          const int64_t a = T / 3;
          p.cu_seqlens = {0, 0, a, a, T};
        }
        Inputs in = make_inputs(p, ++seed, cf.h0, cf.dt_bias);
        if (cf.neg_inf)
          for (int64_t t = 2; t < T; t += 11)
            for (int64_t b = 0; b < p.B; ++b) in.g[(b * T + t) * p.HV + (t % p.HV)] = -INFINITY;
        const Upstream u = make_upstream(p, ++seed, cf.dfinal);
        const Grads r = backward_recurrent(p, in, u.d_o, u.dfinal);
        const Grads c = backward_chunked(p, in, u.d_o, u.dfinal);
        const std::vector<double>* rs[] = {&r.dq, &r.dk, &r.dv, &r.dg, &r.dbeta, &r.dA_log, &r.ddt_bias,
                                           &r.dinitial_state, &r.dh};
        const std::vector<double>* cs[] = {&c.dq, &c.dk, &c.dv, &c.dg, &c.dbeta, &c.dA_log, &c.ddt_bias,
                                           &c.dinitial_state, &c.dh};
        REQUIRE(r.dh.size() == c.dh.size());
        for (int x = 0; x < 9; ++x) {
          const double a = agreement_rel(*cs[x], *rs[x]);
          INFO(cf.label << ", T=" << T << ", C=" << C << ": " << names[x] << " agreement_rel " << a);
          CHECK(a <= 1e-12);
          worst[x] = std::max(worst[x], a);
        }
        for (const auto& e : r.dq) CHECK(std::isfinite(e));
        ++runs;
      }
  for (int x = 0; x < 9; ++x)
    std::printf("gated_delta backward chunked vs recurrent: worst agreement_rel %-15s %.3e (%d runs)\n", names[x],
                worst[x], runs);
}

// ---------------------------------------------------------------------------------------------
// backward_bound: a sum of absolute terms is >= the absolute value of their sum, so every gradient
// element (and every chunk-start adjoint dh) lies inside its bound; and the bound is not slack by
// orders of magnitude (its largest element within 100x of the gradient's largest).
TEST_CASE("gated_delta backward_bound holds every gradient element", "[cpu][L0]") {
  for (const bool varlen : {false, true})
    for (const GateMode gate : {GateMode::log, GateMode::in_kernel}) {
      Params p = base(varlen ? 1 : 2, 37, 1, 2, 4, 3, 16);
      p.gate = gate;
      p.beta = BetaMode::sigmoid;
      p.qk_l2norm = true;
      if (varlen) p.cu_seqlens = {0, 10, 10, 37};
      const Inputs in = make_inputs(p, 4242 + varlen, /*h0=*/true);
      const Upstream u = make_upstream(p, 4343);
      const Grads g = backward_recurrent(p, in, u.d_o, u.dfinal);
      const Grads b = backward_bound(p, in, u.d_o, u.dfinal);
      const std::pair<const std::vector<double>*, const std::vector<double>*> pairs[] = {
          {&g.dq, &b.dq}, {&g.dk, &b.dk}, {&g.dv, &b.dv}, {&g.dg, &b.dg}, {&g.dbeta, &b.dbeta},
          {&g.dA_log, &b.dA_log}, {&g.ddt_bias, &b.ddt_bias}, {&g.dinitial_state, &b.dinitial_state}, {&g.dh, &b.dh}};
      for (const auto& [gv, bv] : pairs) {
        REQUIRE(gv->size() == bv->size());
        double gmax = 0, bmax = 0;
        for (size_t i = 0; i < gv->size(); ++i) {
          CHECK(std::abs((*gv)[i]) <= (*bv)[i] * (1 + 1e-12));
          gmax = std::max(gmax, std::abs((*gv)[i])), bmax = std::max(bmax, (*bv)[i]);
        }
        CHECK(bmax <= 100 * gmax);
      }
    }
}

// Every BwdMutant changes what it targets on a case built for it, and the io emulation stays close
// to the oracle (fp32 hand-offs within 1e-5 relative, bf16 within 0.1), without being equal to it.
TEST_CASE("gated_delta chunked backward: mutants differ from the oracle, io emulations stay near it", "[cpu][L0]") {
  Params p = base(1, 70, 1, 2, 4, 3, 16);
  p.qk_l2norm = true;
  p.cu_seqlens = {0, 30, 70};
  const Inputs in = make_inputs(p, 5150, /*h0=*/true);
  const Upstream u = make_upstream(p, 5151);
  const Grads ref = backward_chunked(p, in, u.d_o, u.dfinal);
  for (const BwdMutant m : kAllBwdMutants) {
    const Grads g = backward_chunked(p, in, u.d_o, u.dfinal, {m, std::nullopt});
    double worst = 0;
    for (const auto& [a, b] : {std::pair{&g.dq, &ref.dq}, {&g.dk, &ref.dk}, {&g.dv, &ref.dv}, {&g.dg, &ref.dg},
                               {&g.dbeta, &ref.dbeta}, {&g.dinitial_state, &ref.dinitial_state}})
      worst = std::max(worst, agreement_rel(*a, *b));
    INFO(bwd_mutant_name(m) << ": worst agreement_rel " << worst);
    CHECK(worst > 1e-3);
  }
  // The dg mutant changes dg only; the dbeta mutant dbeta only.
  const Grads gdg = backward_chunked(p, in, u.d_o, u.dfinal, {BwdMutant::dg_forward_cumsum, std::nullopt});
  CHECK(gdg.dq == ref.dq);
  CHECK(agreement_rel(gdg.dg, ref.dg) > 1e-3);
  const Grads gdb = backward_chunked(p, in, u.d_o, u.dfinal, {BwdMutant::dbeta_wrong_residual, std::nullopt});
  CHECK(gdb.dq == ref.dq);
  CHECK(agreement_rel(gdb.dbeta, ref.dbeta) > 1e-3);
  for (const auto& [io, lim] : {std::pair{DType::f32, 1e-5}, {DType::bf16, 0.1}}) {
    const Grads g = backward_chunked(p, in, u.d_o, u.dfinal, {BwdMutant::none, io});
    const double a = agreement_rel(g.dk, ref.dk);
    INFO(name(io) << ": dk agreement_rel " << a);
    CHECK(a > 0);
    CHECK(a < lim);
  }
}
