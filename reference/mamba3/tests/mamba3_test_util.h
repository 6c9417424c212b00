// Test helpers shared by the mamba3 test files (tests/test_mamba3*.cpp): seeded uniform inputs of
// the forward tests, token cuts of a problem's inputs, and the backward tests' scaffolding (upstream
// gradients, the loss, the gradient field lists, the comparison of two backward results, the
// refusals of malformed upstream gradients and inputs).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <numbers>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "tests/common.h"
#include "reference/core/check.h"
#include "reference/core/tensor.h"
#include "reference/mamba3/mamba3.h"
#include "reference/mamba3/mamba3_backward.h"

namespace assay::mamba3::test {

inline constexpr double kPi = std::numbers::pi;

// splitmix64 -> uniform in [lo, hi) (tests/common.h), seeded per test; Salt keeps each test file's
// streams apart.
template <uint64_t Salt>
struct SeededRng : assay_test::UniformRng {
  explicit SeededRng(uint64_t seed) : UniformRng{{seed * 0x9E3779B97F4A7C15ull + Salt}} {}
};

// Number of sequences (NS) of SisoParams / MimoParams.
template <class Params>
int64_t nseq(const Params& p) {
  return p.cu_seqlens.empty() ? p.B : int64_t(p.cu_seqlens.size()) - 1;
}

inline double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::fabs(e));
  return m;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- Token cuts ----

// Tokens [s0, s0 + len) of the batch rows [b0, b1) of a (B, T, X) tensor (X from its size).
inline std::vector<double> cut_bt(const std::vector<double>& x, int64_t B, int64_t T, int64_t b0, int64_t b1,
                                  int64_t s0, int64_t len) {
  if (x.empty()) return {};
  const int64_t X = static_cast<int64_t>(x.size()) / (B * T);
  std::vector<double> o;
  for (int64_t b = b0; b < b1; ++b) o.insert(o.end(), x.begin() + (b * T + s0) * X, x.begin() + (b * T + s0 + len) * X);
  return o;
}
// The same for a (B, H, T) tensor (H from its size).
inline std::vector<double> cut_bht(const std::vector<double>& x, int64_t B, int64_t T, int64_t b0, int64_t b1,
                                   int64_t s0, int64_t len) {
  const int64_t H = static_cast<int64_t>(x.size()) / (B * T);
  std::vector<double> o;
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t h = 0; h < H; ++h)
      o.insert(o.end(), x.begin() + (b * H + h) * T + s0, x.begin() + (b * H + h) * T + s0 + len);
  return o;
}
// The inputs (SisoInputs / MimoInputs) of a (B, T) problem cut to tokens [s0, s0 + len) of the
// batch rows [b0, b1); the input states and per-head parameters are kept as they are.
template <class In>
In cut_tokens(const In& in, int64_t B, int64_t T, int64_t b0, int64_t b1, int64_t s0, int64_t len) {
  In o = in;
  for (auto f : {&In::q, &In::k, &In::v, &In::z, &In::angles}) o.*f = cut_bt(in.*f, B, T, b0, b1, s0, len);
  for (auto f : {&In::adt, &In::dt, &In::trap}) o.*f = cut_bht(in.*f, B, T, b0, b1, s0, len);
  return o;
}

// ---- Forward inputs (test_mamba3.cpp, test_mamba3_semantics.cpp, test_mamba3_chunk_states.cpp) ----

using FwdRng = SeededRng<1>;

enum class Decay { normal, strong, near_zero };

struct Opts {
  bool d = true, z = true, states = false;
  Decay decay = Decay::normal;
};

// Fills dt / adt / trap (B, H, T) for the requested decay regime.
inline void make_decay(FwdRng& g, int64_t n, Decay dc, std::vector<double>& dt, std::vector<double>& adt,
                       std::vector<double>& trap) {
  dt.resize(n);
  adt.resize(n);
  trap = g.vec(n, -3.0, 3.0);
  for (int64_t i = 0; i < n; ++i) {
    dt[i] = g.u(0.02, 1.0);
    const double a = dc == Decay::strong ? g.u(20.0, 60.0) : dc == Decay::near_zero ? g.u(0.0, 1e-6) : g.u(0.05, 1.5);
    adt[i] = -dt[i] * a;
  }
}

// SISO inputs from any uniform stream, in one draw order: q, k, v, then `decay` fills dt / adt /
// trap, then the biases, angles, D, z and the input states (angle states in [margin, 2 pi - margin)).
// The forward tests (make_siso) and the backward tests (FD-safe decay, angle states off the wrap)
// differ only in the decay and the margin.
template <class Rng, class DecayFn>
SisoInputs siso_inputs(Rng& g, const SisoParams& p, bool d, bool z, bool states, double angle_margin, DecayFn decay) {
  SisoInputs in;
  const int64_t NS = nseq(p);
  in.q = g.vec(p.B * p.T * p.G * p.N, -1, 1);
  in.k = g.vec(p.B * p.T * p.G * p.N, -1, 1);
  in.v = g.vec(p.B * p.T * p.H * p.P, -1, 1);
  decay(in);
  in.q_bias = g.vec(p.H * p.N, -0.5, 0.5);
  in.k_bias = g.vec(p.H * p.N, -0.5, 0.5);
  in.angles = g.vec(p.B * p.T * p.H * p.S, -2, 2);
  if (d) in.d = g.vec(p.H, -1, 1);
  if (z) in.z = g.vec(p.B * p.T * p.H * p.P, -2, 2);
  if (states) {
    in.angle_state = g.vec(NS * p.H * p.S, angle_margin, 2 * kPi - angle_margin);
    in.ssm_state = g.vec(NS * p.H * p.P * p.N, -1, 1);
    in.k_state = g.vec(NS * p.H * p.N, -1, 1);
    in.v_state = g.vec(NS * p.H * p.P, -1, 1);
  }
  return in;
}

inline SisoInputs make_siso(const SisoParams& p, uint64_t seed, const Opts& o) {
  FwdRng g(seed);
  return siso_inputs(g, p, o.d, o.z, o.states, 0.0,
                     [&](SisoInputs& in) { make_decay(g, p.B * p.H * p.T, o.decay, in.dt, in.adt, in.trap); });
}

struct MOpts {
  bool d = true, z = true, phi = true, states = false, norm_w = true;
  Decay decay = Decay::normal;
};

inline MimoInputs make_mimo(const MimoParams& p, uint64_t seed, const MOpts& o) {
  FwdRng g(seed);
  MimoInputs in;
  const int64_t NS = nseq(p);
  const int64_t R = p.R;
  in.q = g.vec(p.B * p.T * R * p.G * p.N, -1, 1);
  in.k = g.vec(p.B * p.T * R * p.G * p.N, -1, 1);
  in.v = g.vec(p.B * p.T * p.H * p.P, -1, 1);
  make_decay(g, p.B * p.H * p.T, o.decay, in.dt, in.adt, in.trap);
  in.q_bias = g.vec(p.H * R * p.N, -0.5, 0.5);
  in.k_bias = g.vec(p.H * R * p.N, -0.5, 0.5);
  in.psi = g.vec(p.H * R * p.P, -1, 1);
  if (o.phi) in.phi = g.vec(p.H * R * p.P, -1, 1);
  in.angles = g.vec(p.B * p.T * p.H * p.S(), -2, 2);
  if (o.d) in.d = g.vec(p.H, -1, 1);
  if (o.z) {
    in.z = g.vec(p.B * p.T * p.H * p.P, -2, 2);
    in.zeta = g.vec(p.H * R * p.P, -1, 1);
  }
  if (p.fused_norm && o.norm_w) in.norm_weight = g.vec(p.H * p.P, -2, 2);
  if (o.states) {
    in.angle_state = g.vec(NS * p.H * p.S(), 0, 2 * kPi);
    in.ssm_state = g.vec(NS * p.H * p.P * p.N, -1, 1);
    in.k_state = g.vec(NS * R * p.H * p.N, -1, 1);
    in.v_state = g.vec(NS * p.H * p.P, -1, 1);
  }
  return in;
}

inline double worst_agreement(const OracleResult& r) {
  double w = 0;
  for (const auto& a : r.agreement) w = std::max(w, a.max_rel);
  return w;
}

// Every agreement of an oracle result within kFormAgreement (the caller's INFO names the case).
inline void check_agreement(const OracleResult& r) {
  for (const auto& a : r.agreement) {
    INFO("tensor " << a.tensor << " (" << a.form_a << " vs " << a.form_b << ")");
    CHECK(a.max_rel <= kFormAgreement);
  }
}

inline const Output& output(const OracleResult& r, const std::string& name) {
  for (const auto& o : r.outputs)
    if (o.expected.name == name) return o;
  throw std::runtime_error("no output " + name);
}

// ---- Backward (test_mamba3_backward.cpp, test_mamba3_backward_mimo.cpp) ----

struct Upstream {
  std::vector<double> d_out;
  FinalGrads df;
};

// L = <d_out, out> + <d_final, final states> through the step form `step` (siso_step / mimo_step).
template <class Step, class Params, class In>
double loss(Step step, const Params& p, const In& in, const Upstream& u) {
  const Result r = step(p, in);
  return dot(u.d_out, r.out) + dot(u.df.d_angle, r.final_angle) + dot(u.df.d_ssm, r.final_ssm) +
         dot(u.df.d_k, r.final_k) + dot(u.df.d_v, r.final_v);
}

struct GradField {
  const char* name;
  std::vector<double> Grads::*f;
};
// Every gradient (MIMO's; SISO leaves dpsi, dzeta, dphi, dnorm_weight empty). dchunk_states aside.
inline constexpr GradField kGradFields[] = {
    {"dq", &Grads::dq},           {"dk", &Grads::dk},
    {"dv", &Grads::dv},           {"dadt", &Grads::dadt},
    {"ddt", &Grads::ddt},         {"dtrap", &Grads::dtrap},
    {"dq_bias", &Grads::dq_bias}, {"dk_bias", &Grads::dk_bias},
    {"dpsi", &Grads::dpsi},       {"dzeta", &Grads::dzeta},
    {"dphi", &Grads::dphi},       {"dangles", &Grads::dangles},
    {"dd", &Grads::dd},           {"dz", &Grads::dz},
    {"dnorm_weight", &Grads::dnorm_weight}, {"dangle_state", &Grads::dangle_state},
    {"dssm_state", &Grads::dssm_state},     {"dk_state", &Grads::dk_state},
    {"dv_state", &Grads::dv_state},
};

// Every gradient of a and b (dchunk_states too) bitwise equal.
inline void check_same_grads(const Grads& a, const Grads& b) {
  for (const auto& fld : kGradFields) {
    INFO("gradient " << fld.name);
    CHECK(a.*(fld.f) == b.*(fld.f));
  }
  CHECK(a.dchunk_states == b.dchunk_states);
}

// The largest agreement_rel of any gradient of g against ref (how far a mutant moves them).
inline double worst_change(const Grads& g, const Grads& ref) {
  double w = 0;
  for (const auto& fld : kGradFields) w = std::max(w, agreement_rel(g.*(fld.f), ref.*(fld.f)));
  return w;
}

// Each chunked-backward mutant moves some gradient by more than 1e-3 (agreement_rel); and
// no_shifted_term_grad moves the coefficient gradients dtrap, ddt (and what reads dw_0) but not dq /
// dv, whose terms read the weights, not their adjoints. chunked(opt): the case's chunked backward.
template <class Chunked>
void check_bwd_mutants(Chunked chunked, std::span<const BwdMutant> mutants) {
  const Grads ref = chunked(ChunkedBackwardOptions{});
  for (const BwdMutant m : mutants) {
    const double worst = worst_change(chunked(ChunkedBackwardOptions{m, std::nullopt}), ref);
    INFO(bwd_mutant_name(m) << ": worst agreement_rel " << worst);
    CHECK(worst > 1e-3);
  }
  const Grads gs = chunked(ChunkedBackwardOptions{BwdMutant::no_shifted_term_grad, std::nullopt});
  CHECK(gs.dq == ref.dq);
  CHECK(gs.dv == ref.dv);
  CHECK(agreement_rel(gs.dtrap, ref.dtrap) > 1e-3);
  CHECK(agreement_rel(gs.ddt, ref.ddt) > 1e-3);
}

// The bound b holds every gradient element of g (dchunk_states too): a sum of absolute terms is
// >= the absolute value of their sum; and each gradient's largest bound element is within `slack`
// of its largest element. Returns the worst max(bound) / max|gradient|.
inline double check_bound_holds(const Grads& g, const Grads& b, double slack) {
  double worst_slack = 0;
  for (const auto& fld : kGradFields) {
    const auto &gv = g.*(fld.f), &bv = b.*(fld.f);
    INFO(fld.name);
    REQUIRE(gv.size() == bv.size());
    double gmax = 0, bmax = 0;
    for (size_t i = 0; i < gv.size(); ++i) {
      CHECK(std::abs(gv[i]) <= bv[i] * (1 + 1e-12));
      gmax = std::max(gmax, std::abs(gv[i])), bmax = std::max(bmax, bv[i]);
    }
    CHECK(bmax <= slack * gmax);
    if (gmax > 0) worst_slack = std::max(worst_slack, bmax / gmax);
  }
  REQUIRE(g.dchunk_states.size() == b.dchunk_states.size());
  for (size_t i = 0; i < g.dchunk_states.size(); ++i)
    CHECK(std::abs(g.dchunk_states[i]) <= b.dchunk_states[i] * (1 + 1e-12));
  return worst_slack;
}

// Worst agreement per gradient (kGradFields, then dchunk_states) over every comparison of a test
// case; a gradient empty in every run is left out of the printout.
struct Worst {
  static constexpr size_t kN = std::size(kGradFields) + 1;
  std::vector<double> per = std::vector<double>(kN, 0.0);
  std::vector<char> seen = std::vector<char>(kN, 0);
  int64_t runs = 0, zero = 0;
  static const char* name(size_t i) { return i < kN - 1 ? kGradFields[i].name : "dchunk_states"; }
  void print(const char* title) const {
    std::string line;
    double all = 0;
    for (size_t i = 0; i < kN; ++i) {
      if (!seen[i]) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, " %s=%.2e", name(i), per[i]);
      line += buf;
      all = std::max(all, per[i]);
    }
    std::printf("%s: %lld runs, worst agreement_rel %.2e;%s (%lld analytically zero gradients, both forms below "
                "1e-13 of the largest gradient)\n",
                title, static_cast<long long>(runs), all, line.c_str(), static_cast<long long>(zero));
  }
};

// Form (b)'s gradients b against form (a)'s a: every gradient and dchunk_states
// agrees to kFormAgreement, the shapes match, and b never holds a non-finite value. One exception: a
// gradient that is analytically zero (e.g. dangles at T = 1 without states or final-state gradients:
// rotating q and k by the same angle leaves q . k unchanged) is rounding noise in form (a) (~1e-17)
// and exactly 0 in form (b) (unrotated diagonal), so agreement_rel is meaningless there; it is
// judged by both forms being below 1e-13 of the largest gradient.
inline void compare_forms(const std::string& label, const Grads& a, const Grads& b, Worst& worst) {
  REQUIRE(a.dchunk_count == b.dchunk_count);
  double scale = 0;
  for (const auto& fld : kGradFields) scale = std::max(scale, max_abs(a.*(fld.f)));
  for (size_t i = 0; i < Worst::kN; ++i) {
    const bool dc = i == Worst::kN - 1;
    const auto& fa = dc ? a.dchunk_states : a.*(kGradFields[i].f);
    const auto& fb = dc ? b.dchunk_states : b.*(kGradFields[i].f);
    INFO(label << " gradient " << Worst::name(i));
    REQUIRE(fa.size() == fb.size());
    if (fa.empty()) continue;
    worst.seen[i] = 1;
    for (double e : fb) REQUIRE(std::isfinite(e));
    if (max_abs(fa) <= 1e-13 * scale) {
      CHECK(max_abs(fb) <= 1e-13 * scale);
      ++worst.zero;
      continue;
    }
    const double r = agreement_rel(fb, fa);
    CHECK(r <= kFormAgreement);
    worst.per[i] = std::max(worst.per[i], r);
  }
  ++worst.runs;
}

// Malformed upstream gradients and inputs are refused (InputError) by backward(in, d_out, dfinal):
// d_out short or not finite, each final-state gradient short or not finite, ADT > 0, DT < 0. `good`
// holds all four final-state gradients.
template <class Backward, class In>
void check_refusals(Backward backward, const In& in, const Upstream& good) {
  auto refused = [&](const char* what, const In& i, const Upstream& u) {
    INFO(what);
    REQUIRE_THROWS_AS(backward(i, u.d_out, u.df), InputError);
  };
  Upstream u = good;
  u.d_out.pop_back();
  refused("d_out short", in, u);
  u = good;
  u.d_out[0] = INFINITY;
  refused("d_out not finite", in, u);
  for (auto f : {&FinalGrads::d_angle, &FinalGrads::d_ssm, &FinalGrads::d_k, &FinalGrads::d_v}) {
    REQUIRE(!(good.df.*f).empty());
    u = good;
    (u.df.*f).pop_back();
    refused("a final-state gradient short", in, u);
    u = good;
    (u.df.*f)[0] = NAN;
    refused("a final-state gradient not finite", in, u);
  }
  In bad = in;
  bad.adt[0] = 0.1;
  refused("ADT > 0 (as by the forward)", bad, good);
  bad = in;
  bad.dt[1] = -0.5;
  refused("DT < 0 (as by the forward)", bad, good);
}

// ADT = -inf at the (B, H, T) rows r0 = (b 0, h 0, t 2) and r1 = (b 1, h 1, t 4) of a B = 2, H = 2
// problem: `finite` holds ADT = -800 there (exp(-800) == 0 in fp64: the same alpha = beta = 0 reset,
// which a finite-difference check can perturb); the -inf run gives bitwise the same gradients and
// dADT = 0 at the resets. The reset blocks the state path: with only d_ssm upstream, nothing
// reaches the initial SSM state of (b 1, h 1) through its reset at t 4, exactly; the other head of
// b 1 does get some.
template <class Backward, class In>
void check_inf_reset(Backward backward, const In& finite, const Upstream& u, int64_t r0, int64_t r1) {
  const Grads gf = backward(finite, u.d_out, u.df);
  In ii = finite;
  ii.adt[r0] = ii.adt[r1] = -INFINITY;
  const Grads gr = backward(ii, u.d_out, u.df);
  CHECK(gr.dadt[r0] == 0.0);
  CHECK(gr.dadt[r1] == 0.0);
  check_same_grads(gr, gf);
  for (double e : gr.dq) CHECK(std::isfinite(e));
  Upstream us = u;
  std::fill(us.d_out.begin(), us.d_out.end(), 0.0);
  us.df.d_angle.clear(), us.df.d_k.clear(), us.df.d_v.clear();
  const Grads gs = backward(ii, us.d_out, us.df);
  const int64_t PN = static_cast<int64_t>(gs.dssm_state.size()) / 4;  // [B = 2, H = 2, P, N]
  double blocked = 0, open = 0;
  for (int64_t i = 0; i < PN; ++i) {
    blocked = std::max(blocked, std::fabs(gs.dssm_state[(1 * 2 + 1) * PN + i]));
    open = std::max(open, std::fabs(gs.dssm_state[(1 * 2 + 0) * PN + i]));
  }
  CHECK(blocked == 0.0);
  CHECK(open > 1e-3);
}

// Varlen isolation, B = 1, T tokens, two sequences: [0, t1) and [t1, T). With sequence 0 unobserved
// (its d_out tokens and final-state gradient rows zero), no gradient reaches its tokens or input
// states (exactly 0) while sequence 1 gets some; and changing sequence 0's inputs and states leaves
// L unchanged exactly. loss(in, u): L through the step form.
template <class Backward, class Loss, class In>
void check_varlen_isolation(Backward backward, Loss loss, const In& in, Upstream u, int64_t T, int64_t t1) {
  auto first_tokens = [&](std::vector<double>& x) {  // the elements of tokens [0, t1) of a (1, T, X) tensor
    return std::span<double>(x.data(), x.size() / T * t1);
  };
  auto first_row = [&](std::vector<double>& x) {  // row 0 of a (2, ...) state tensor
    return std::span<double>(x.data(), x.size() / 2);
  };
  for (double& e : first_tokens(u.d_out)) e = 0.0;
  for (auto f : {&FinalGrads::d_angle, &FinalGrads::d_ssm, &FinalGrads::d_k, &FinalGrads::d_v})
    for (double& e : first_row(u.df.*f)) e = 0.0;
  Grads g = backward(in, u.d_out, u.df);
  double leak = 0, inside = 0;
  auto upd = [&](bool seq0, double v) { (seq0 ? leak : inside) = std::max(seq0 ? leak : inside, std::fabs(v)); };
  for (auto f : {&Grads::dq, &Grads::dk, &Grads::dv, &Grads::dz, &Grads::dangles}) {  // (1, T, X)
    const size_t X = (g.*f).size() / T;
    for (size_t i = 0; i < (g.*f).size(); ++i) upd(int64_t(i / X) < t1, (g.*f)[i]);
  }
  for (auto f : {&Grads::dadt, &Grads::ddt, &Grads::dtrap})  // (1, H, T)
    for (size_t i = 0; i < (g.*f).size(); ++i) upd(int64_t(i) % T < t1, (g.*f)[i]);
  for (auto f : {&Grads::dangle_state, &Grads::dssm_state, &Grads::dk_state, &Grads::dv_state})
    for (double e : first_row(g.*f)) leak = std::max(leak, std::fabs(e));
  CHECK(leak == 0.0);
  CHECK(inside > 0.01);
  double s1 = 0;
  for (size_t i = g.dssm_state.size() / 2; i < g.dssm_state.size(); ++i) s1 = std::max(s1, std::fabs(g.dssm_state[i]));
  CHECK(s1 > 0.01);
  // The converse by perturbation.
  In w = in;
  for (auto [f, d] : {std::pair{&In::q, 0.5}, {&In::k, -0.3}, {&In::v, 0.5}, {&In::z, -0.25}, {&In::angles, 0.3}})
    for (double& e : first_tokens(w.*f)) e += d;
  for (auto [f, d] : {std::pair{&In::dt, 0.1}, {&In::adt, -0.2}, {&In::trap, 0.4}})
    for (size_t i = 0; i < (w.*f).size(); ++i)
      if (int64_t(i) % T < t1) (w.*f)[i] += d;
  for (auto f : {&In::angle_state, &In::ssm_state, &In::k_state, &In::v_state})
    for (double& e : first_row(w.*f)) e += 0.25;
  CHECK(loss(w, u) == loss(in, u));
}

}  // namespace assay::mamba3::test
