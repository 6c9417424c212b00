// Mamba-3 forward oracle tests (2/3): independent reductions (lambda = 1 gives Mamba-2's
// exponential Euler), state carry across calls, chunk-start-state semantics, bounds, the pre-gate
// output, the -inf reset and refused inputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "catch_compat.h"
#include "reference/core/check.h"
#include "reference/core/tensor.h"
#include "reference/mamba3/mamba3.h"
#include "reference/mamba3/mamba3_internal.h"
#include "reference/mamba3/tests/mamba3_test_util.h"

using namespace assay;
using namespace assay::mamba3;
using namespace assay::mamba3::test;

// -----------------------------------------------------------------------------------------------
// Independent reductions and semantics
// -----------------------------------------------------------------------------------------------

TEST_CASE("SISO: lambda = 1 reduces to Mamba-2's exponential-Euler update (naive formula)", "[cpu][L0]") {
  // Trap = 60 gives lambda = 1 - 8.8e-27 = 1 in fp64, so beta = 0 and gamma = DT:
  //   y_t = sum_{s <= t} exp(sum_{m=s+1..t} ADT_m) DT_s (q_t . k_s) v_s + D v_t,
  // with q, k rotated by their own cumulative angles; here S = 0 (no rotation), so q_t = Q_t + b.
  SisoParams p{.T = 40, .H = 2, .G = 1, .N = 6, .P = 3, .S = 0, .chunk_size = 16};
  const Opts o{.z = false};
  auto in = make_siso(p, 11, o);
  in.trap.assign(in.trap.size(), 60.0);
  std::vector<double> expect(p.T * p.H * p.P, 0.0);
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t t = 0; t < p.T; ++t)
      for (int64_t s = 0; s <= t; ++s) {
        double seg = 0;
        for (int64_t m = s + 1; m <= t; ++m) seg += in.adt[h * p.T + m];
        double qk = 0;
        for (int64_t j = 0; j < p.N; ++j)
          qk += (in.q[t * p.N + j] + in.q_bias[h * p.N + j]) * (in.k[s * p.N + j] + in.k_bias[h * p.N + j]);
        for (int64_t pp = 0; pp < p.P; ++pp) {
          expect[(t * p.H + h) * p.P + pp] += std::exp(seg) * in.dt[h * p.T + s] * qk * in.v[(s * p.H + h) * p.P + pp];
          if (s == t) expect[(t * p.H + h) * p.P + pp] += in.d[h] * in.v[(t * p.H + h) * p.P + pp];
        }
      }
  CHECK(agreement_rel(siso_step(p, in).out, expect) <= 1e-13);
  CHECK(agreement_rel(siso_chunked(p, in).out, expect) <= 1e-13);
}

namespace {

// Tokens [0, T1) by `first`, the rest by `second` starting from the first call's final (angle, SSM,
// K, V), against `full` on all T tokens: the same outputs and final states.
template <class Params, class In, class First, class Second>
void check_carried(const Params& p, const In& in, int64_t T1, const Result& full, First first, Second second) {
  const int64_t T = p.T;
  auto split = [&](int64_t t0, int64_t len) {  // tokens [t0, t0 + len) of every batch row
    Params q = p;
    q.T = len;
    return std::make_pair(q, cut_tokens(in, p.B, T, 0, p.B, t0, len));
  };
  auto [p1, s1] = split(0, T1);
  const Result r1 = first(p1, s1);
  auto [p2, s2] = split(T1, T - T1);
  s2.angle_state = r1.final_angle;
  s2.ssm_state = r1.final_ssm;
  s2.k_state = r1.final_k;
  s2.v_state = r1.final_v;
  const Result r2 = second(p2, s2);
  std::vector<double> out;
  const int64_t per = static_cast<int64_t>(full.out.size()) / (p.B * T);  // out values per token
  for (int64_t b = 0; b < p.B; ++b) {
    out.insert(out.end(), r1.out.begin() + b * T1 * per, r1.out.begin() + (b + 1) * T1 * per);
    out.insert(out.end(), r2.out.begin() + b * (T - T1) * per, r2.out.begin() + (b + 1) * (T - T1) * per);
  }
  CHECK(agreement_rel(out, full.out) <= kFormAgreement);
  CHECK(agreement_rel(r2.final_ssm, full.final_ssm) <= kFormAgreement);
  CHECK(agreement_rel(r2.final_k, full.final_k) <= kFormAgreement);
  CHECK(agreement_rel(r2.final_v, full.final_v) == 0.0);
  for (size_t i = 0; i < r2.final_angle.size(); ++i)
    CHECK(std::remainder(r2.final_angle[i] - full.final_angle[i], 2 * kPi) == Approx(0).margin(1e-12));
}

}  // namespace

TEST_CASE("Carried states: two calls with the states handed over equal one call", "[cpu][L0]") {
  // Split T = 70 at 29: the second call starts from the first call's (angle, SSM, K, V).
  const int64_t T = 70, T1 = 29;
  SECTION("SISO") {
    SisoParams p{.B = 2, .T = T, .H = 2, .G = 1, .N = 8, .P = 4, .S = 3, .chunk_size = 16};
    const Opts o{.states = true};
    const SisoInputs in = make_siso(p, 21, o);
    check_carried(p, in, T1, siso_chunked(p, in), siso_step, siso_chunked);
  }
  SECTION("MIMO") {
    MimoParams p{.B = 1, .T = T, .H = 2, .G = 1, .N = 8, .P = 4, .R = 2, .chunk_size = 8};
    const MOpts o{.states = true};
    const MimoInputs in = make_mimo(p, 23, o);
    check_carried(p, in, T1, mimo_chunked(p, in), mimo_chunked, mimo_step);
  }
}

TEST_CASE("Chunk start states are the prefix's final state folded with the next token's beta term",
          "[cpu][L0]") {
  // For chunk c starting at t0 = cQ: S_c = H_{t0-1} + (1 - lambda_{t0}) DT_{t0} v_{t0-1} k_{t0-1}^T,
  // with H_{t0-1}, k_{t0-1}, v_{t0-1} the final states of a run over the prefix [0, t0).
  SisoParams p{.T = 50, .H = 1, .N = 4, .P = 3, .S = 2, .chunk_size = 16};
  const Opts o{.states = true};
  auto in = make_siso(p, 41, o);
  auto full = siso_chunked(p, in);
  REQUIRE(int64_t(full.chunk_states.size()) == 4 * p.P * p.N);
  REQUIRE(full.chunk_start == std::vector<int64_t>{0, 16, 32, 48});
  for (int64_t c = 1; c < 4; ++c) {
    const int64_t t0 = c * p.chunk_size;
    SisoParams q = p;
    q.T = t0;
    SisoInputs s = in;
    s.q.resize(t0 * p.N);
    s.k.resize(t0 * p.N);
    s.v.resize(t0 * p.P);
    s.z.resize(t0 * p.P);
    s.angles.resize(t0 * p.S);
    s.adt.resize(t0);
    s.dt.resize(t0);
    s.trap.resize(t0);
    auto pre = siso_step(q, s);
    const double lam = 1 / (1 + std::exp(-in.trap[t0]));
    const double w = (1 - lam) * in.dt[t0];
    std::vector<double> expect(p.P * p.N);
    for (int64_t pp = 0; pp < p.P; ++pp)
      for (int64_t j = 0; j < p.N; ++j)
        expect[pp * p.N + j] = pre.final_ssm[pp * p.N + j] + w * pre.final_v[pp] * pre.final_k[j];
    std::vector<double> got(full.chunk_states.begin() + c * p.P * p.N, full.chunk_states.begin() + (c + 1) * p.P * p.N);
    INFO("chunk " << c);
    CHECK(agreement_rel(got, expect) <= kFormAgreement);
  }
}

TEST_CASE("Bounds: >= |value| everywhere, equal when every term is nonnegative", "[cpu][L0]") {
  MimoParams p{.T = 45, .H = 2, .N = 8, .P = 4, .R = 2, .chunk_size = 8};
  const MOpts o{.states = true};
  auto in = make_mimo(p, 3, o);
  for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) {
    for (size_t i = 0; i < r.out.size(); ++i) CHECK(r.out_bound[i] >= std::fabs(r.out[i]) * (1 - 1e-14));
    for (size_t i = 0; i < r.final_ssm.size(); ++i)
      CHECK(r.final_ssm_bound[i] >= std::fabs(r.final_ssm[i]) * (1 - 1e-14));
    for (size_t i = 0; i < r.final_k.size(); ++i) CHECK(r.final_k_bound[i] >= std::fabs(r.final_k[i]) * (1 - 1e-14));
  }
  // Nonnegative inputs, no rotation (raw angles and angle state 0), no Z: no cancellation, bound == value.
  for (auto* x : {&in.q, &in.k, &in.v, &in.psi, &in.phi, &in.q_bias, &in.k_bias, &in.ssm_state, &in.k_state,
                  &in.v_state})
    for (auto& e : *x) e = std::fabs(e);
  in.angles.assign(in.angles.size(), 0.0);
  in.angle_state.assign(in.angle_state.size(), 0.0);
  in.z.clear();
  in.zeta.clear();
  in.d = {0.3, 0.8};
  for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) {
    CHECK(agreement_rel(r.out_bound, r.out) <= 1e-13);
    CHECK(agreement_rel(r.final_ssm_bound, r.final_ssm) <= 1e-13);
  }
}

TEST_CASE("Pre-gate output: equals out without a gate, and out = pregate * silu(Z) with one", "[cpu][L0]") {
  SisoParams p{.B = 2, .T = 20, .H = 2, .N = 8, .P = 4, .S = 4, .chunk_size = 8};
  Opts o;
  auto in = make_siso(p, 13, o);
  auto gated = siso_step(p, in);
  std::vector<double> expect(gated.out.size());
  for (size_t i = 0; i < expect.size(); ++i) {
    const double z = in.z[i];
    expect[i] = gated.out_pregate[i] * z / (1 + std::exp(-z));
  }
  CHECK(agreement_rel(gated.out, expect) <= 1e-14);
  in.z.clear();
  for (const Result& r : {siso_step(p, in), siso_chunked(p, in)}) {
    CHECK(r.out == r.out_pregate);
    CHECK(agreement_rel(r.out_pregate, gated.out_pregate) <= kFormAgreement);
  }
}

TEST_CASE("ADT = -inf is a clean reset in both forms (no NaN)", "[cpu][L0]") {
  // With alpha_t = 0 (and so beta_t = 0), H_t = gamma_t v_t k_t^T: from token t on, the output is
  // that of a fresh run that starts at t with zero SSM/K/V states and the angle state phi_{t-1}.
  const int64_t T = 48, tr = 21;
  MimoParams p{.T = T, .H = 1, .N = 8, .P = 4, .R = 2};
  const MOpts o{.states = true};
  auto in = make_mimo(p, 17, o);
  in.adt[tr] = -HUGE_VAL;
  for (int64_t Q : {int64_t(1), int64_t(8), int64_t(16)}) {
    p.chunk_size = Q;
    auto r = mimo_oracle(p, in);
    INFO("Q=" << Q);
    check_agreement(r);
    for (double x : output(r, "out").expected.data) REQUIRE(std::isfinite(x));
  }
  // The prefix [0, tr) gives phi_{tr-1}; the fresh run covers [tr, T).
  MimoParams pre = p, post = p;
  pre.T = tr;
  post.T = T - tr;
  auto cut = [&](int64_t t0, int64_t len) {
    MimoInputs s = in;
    auto tt = [&](const std::vector<double>& x, int64_t per) {
      return std::vector<double>(x.begin() + t0 * per, x.begin() + (t0 + len) * per);
    };
    s.q = tt(in.q, p.R * p.N);
    s.k = tt(in.k, p.R * p.N);
    s.v = tt(in.v, p.P);
    s.z = tt(in.z, p.P);
    s.angles = tt(in.angles, p.S());
    s.adt = tt(in.adt, 1);
    s.dt = tt(in.dt, 1);
    s.trap = tt(in.trap, 1);
    return s;
  };
  auto a = mimo_step(pre, cut(0, tr));
  auto fresh = cut(tr, T - tr);
  fresh.angle_state = a.final_angle;
  fresh.ssm_state.assign(in.ssm_state.size(), 0.0);
  fresh.k_state.assign(in.k_state.size(), 0.0);
  fresh.v_state.assign(in.v_state.size(), 0.0);
  auto b = mimo_chunked(post, fresh);
  auto full = mimo_step(p, in);
  std::vector<double> tail(full.out.begin() + tr * p.P, full.out.end());
  CHECK(agreement_rel(b.out, tail) <= kFormAgreement);
  CHECK(agreement_rel(b.final_ssm, full.final_ssm) <= kFormAgreement);
}

TEST_CASE("Invalid inputs are rejected", "[cpu][L0]") {
  SisoParams p{.T = 4, .N = 4, .P = 2, .S = 2};
  Opts o;
  auto in = make_siso(p, 1, o);
  SECTION("positive ADT") {
    in.adt[1] = 0.1;
    CHECK_THROWS_AS(siso_step(p, in), InputError);
  }
  SECTION("negative DT") {
    in.dt[0] = -0.1;
    CHECK_THROWS_AS(siso_chunked(p, in), InputError);
  }
  SECTION("too many angle dims") {
    p.S = 3;
    CHECK_THROWS_AS(siso_step(p, in), InputError);
  }
  SECTION("partial input states") {
    in.ssm_state.assign(p.H * p.P * p.N, 0.0);
    CHECK_THROWS_AS(siso_step(p, in), InputError);
  }
  SECTION("wrong size") {
    in.v.pop_back();
    CHECK_THROWS_AS(siso_step(p, in), InputError);
  }
  SECTION("MIMO fused norm without Z") {
    MimoParams m{.T = 4, .N = 8, .P = 2, .R = 2, .fused_norm = true};
    const MOpts mo{.z = false};
    auto mi = make_mimo(m, 2, mo);
    CHECK_THROWS_AS(mimo_step(m, mi), InputError);
  }
}
