// Mamba-3 oracle tests: step vs chunked agreement (SISO, MIMO) over chunk sizes and lengths not
// divisible by the chunk, hand-derived small cases (trapezoid weights, rotation conventions, MIMO
// rank pairs, fused norm), independent reductions (lambda = 1 gives Mamba-2's exponential Euler),
// state carry across calls, varlen = separate runs, chunk-start-state semantics, bounds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include "catch_compat.h"
#include "tests/common.h"
#include "reference/core/check.h"
#include "reference/core/tensor.h"
#include "reference/mamba3/mamba3.h"
#include "reference/mamba3/mamba3_internal.h"

using namespace assay;
using namespace assay::mamba3;

namespace {

constexpr double kPi = std::numbers::pi;

// splitmix64 -> uniform in [lo, hi) (tests/common.h), seeded per test.
struct Rng : assay_test::UniformRng {
  explicit Rng(uint64_t seed) : UniformRng{{seed * 0x9E3779B97F4A7C15ull + 1}} {}
};

enum class Decay { normal, strong, near_zero };

struct Opts {
  bool d = true, z = true, states = false;
  Decay decay = Decay::normal;
};

// Fills dt / adt / trap (B, H, T) for the requested decay regime.
void make_decay(Rng& g, int64_t n, Decay dc, std::vector<double>& dt, std::vector<double>& adt,
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

SisoInputs make_siso(const SisoParams& p, uint64_t seed, const Opts& o) {
  Rng g(seed);
  SisoInputs in;
  const int64_t NS = p.cu_seqlens.empty() ? p.B : int64_t(p.cu_seqlens.size()) - 1;
  in.q = g.vec(p.B * p.T * p.G * p.N, -1, 1);
  in.k = g.vec(p.B * p.T * p.G * p.N, -1, 1);
  in.v = g.vec(p.B * p.T * p.H * p.P, -1, 1);
  make_decay(g, p.B * p.H * p.T, o.decay, in.dt, in.adt, in.trap);
  in.q_bias = g.vec(p.H * p.N, -0.5, 0.5);
  in.k_bias = g.vec(p.H * p.N, -0.5, 0.5);
  in.angles = g.vec(p.B * p.T * p.H * p.S, -2, 2);
  if (o.d) in.d = g.vec(p.H, -1, 1);
  if (o.z) in.z = g.vec(p.B * p.T * p.H * p.P, -2, 2);
  if (o.states) {
    in.angle_state = g.vec(NS * p.H * p.S, 0, 2 * kPi);
    in.ssm_state = g.vec(NS * p.H * p.P * p.N, -1, 1);
    in.k_state = g.vec(NS * p.H * p.N, -1, 1);
    in.v_state = g.vec(NS * p.H * p.P, -1, 1);
  }
  return in;
}

struct MOpts {
  bool d = true, z = true, phi = true, states = false, norm_w = true;
  Decay decay = Decay::normal;
};

MimoInputs make_mimo(const MimoParams& p, uint64_t seed, const MOpts& o) {
  Rng g(seed);
  MimoInputs in;
  const int64_t NS = p.cu_seqlens.empty() ? p.B : int64_t(p.cu_seqlens.size()) - 1;
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

double worst_agreement(const OracleResult& r) {
  double w = 0;
  for (const auto& a : r.agreement) w = std::max(w, a.max_rel);
  return w;
}

const Output& output(const OracleResult& r, const std::string& name) {
  for (const auto& o : r.outputs)
    if (o.expected.name == name) return o;
  throw std::runtime_error("no output " + name);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Worst agreement seen so far in this process (printed by the agreement tests).
double g_worst_siso = 0, g_worst_mimo = 0;

}  // namespace

// -----------------------------------------------------------------------------------------------
// Agreement of the two forms
// -----------------------------------------------------------------------------------------------

TEST_CASE("SISO: step and chunked forms agree to 1e-12 for every chunk size", "[cpu][L0]") {
  const int64_t T = GENERATE(1, 37, 64, 65, 130);
  const bool states = GENERATE(false, true);
  double worst = 0;
  for (int64_t Q : {int64_t(1), int64_t(3), int64_t(16), int64_t(64), T}) {
    SisoParams p;
    p.B = 2;
    p.T = T;
    p.H = 4;
    p.G = 2;
    p.N = 12;  // not a power of two
    p.P = 6;
    p.S = 4;  // 2S < N: the last 4 dims pass through
    p.chunk_size = Q;
    Opts o;
    o.states = states;
    auto in = make_siso(p, 1000 + T, o);
    auto r = siso_oracle(p, in);
    for (const auto& a : r.agreement) {
      INFO("T=" << T << " Q=" << Q << " states=" << states << " tensor " << a.tensor);
      CHECK(a.max_rel <= kFormAgreement);
    }
    worst = std::max(worst, worst_agreement(r));
    REQUIRE(max_abs(output(r, "out").expected.data) > 0.0);
  }
  g_worst_siso = std::max(g_worst_siso, worst);
  std::printf("[mamba3] SISO T=%lld states=%d worst step-vs-chunked agreement %.3e\n", (long long)T,
              int(states), worst);
}

TEST_CASE("SISO: agreement under strong and near-zero decay, without D/Z", "[cpu][L0]") {
  const Decay dc = GENERATE(Decay::strong, Decay::near_zero);
  for (int64_t Q : {int64_t(1), int64_t(16), int64_t(64)}) {
    SisoParams p;
    p.B = 1;
    p.T = 100;
    p.H = 2;
    p.G = 1;
    p.N = 8;
    p.P = 4;
    p.S = 4;
    p.chunk_size = Q;
    Opts o;
    o.d = false;
    o.z = false;
    o.states = true;
    o.decay = dc;
    auto r = siso_oracle(p, make_siso(p, 77, o));
    for (const auto& a : r.agreement) {
      INFO("decay=" << int(dc) << " Q=" << Q << " tensor " << a.tensor);
      CHECK(a.max_rel <= kFormAgreement);
    }
    g_worst_siso = std::max(g_worst_siso, worst_agreement(r));
  }
}

TEST_CASE("SISO: varlen with mid-chunk starts and an empty sequence", "[cpu][L0]") {
  SisoParams p;
  p.B = 1;
  p.T = 90;
  p.H = 2;
  p.G = 2;
  p.N = 8;
  p.P = 4;
  p.S = 2;
  p.cu_seqlens = {0, 5, 5, 40, 90};
  Opts o;
  o.states = true;
  auto in = make_siso(p, 5, o);
  for (int64_t Q : {int64_t(1), int64_t(16), int64_t(64)}) {
    p.chunk_size = Q;
    auto r = siso_oracle(p, in);
    for (const auto& a : r.agreement) {
      INFO("Q=" << Q << " tensor " << a.tensor);
      CHECK(a.max_rel <= kFormAgreement);
    }
    g_worst_siso = std::max(g_worst_siso, worst_agreement(r));
  }
  // Independent check: each sequence alone (B = 1, its own input-state row) gives the same.
  p.chunk_size = 16;
  auto whole = siso_step(p, in);
  for (size_t n = 0; n + 1 < p.cu_seqlens.size(); ++n) {
    const int64_t s0 = p.cu_seqlens[n], len = p.cu_seqlens[n + 1] - s0;
    SisoParams q = p;
    q.cu_seqlens.clear();
    q.T = len;
    SisoInputs qi;
    auto slice_t = [&](const std::vector<double>& x, int64_t per) {  // (1, T, per)
      return std::vector<double>(x.begin() + s0 * per, x.begin() + (s0 + len) * per);
    };
    auto slice_ht = [&](const std::vector<double>& x) {  // (1, H, T)
      std::vector<double> r;
      for (int64_t h = 0; h < p.H; ++h)
        r.insert(r.end(), x.begin() + h * p.T + s0, x.begin() + h * p.T + s0 + len);
      return r;
    };
    auto slice_n = [&](const std::vector<double>& x, int64_t per) {
      return std::vector<double>(x.begin() + n * per, x.begin() + (n + 1) * per);
    };
    qi.q = slice_t(in.q, p.G * p.N);
    qi.k = slice_t(in.k, p.G * p.N);
    qi.v = slice_t(in.v, p.H * p.P);
    qi.z = slice_t(in.z, p.H * p.P);
    qi.angles = slice_t(in.angles, p.H * p.S);
    qi.adt = slice_ht(in.adt);
    qi.dt = slice_ht(in.dt);
    qi.trap = slice_ht(in.trap);
    qi.q_bias = in.q_bias;
    qi.k_bias = in.k_bias;
    qi.d = in.d;
    qi.angle_state = slice_n(in.angle_state, p.H * p.S);
    qi.ssm_state = slice_n(in.ssm_state, p.H * p.P * p.N);
    qi.k_state = slice_n(in.k_state, p.H * p.N);
    qi.v_state = slice_n(in.v_state, p.H * p.P);
    auto one = siso_chunked(q, qi);
    INFO("sequence " << n << " len " << len);
    CHECK(agreement_rel(one.out, slice_t(whole.out, p.H * p.P)) <= kFormAgreement);
    CHECK(agreement_rel(one.final_ssm, slice_n(whole.final_ssm, p.H * p.P * p.N)) <= kFormAgreement);
    CHECK(agreement_rel(one.final_k, slice_n(whole.final_k, p.H * p.N)) <= kFormAgreement);
    CHECK(agreement_rel(one.final_v, slice_n(whole.final_v, p.H * p.P)) == 0.0);
    if (len == 0) {  // an empty sequence passes its input states through unchanged
      CHECK(slice_n(whole.final_ssm, p.H * p.P * p.N) == qi.ssm_state);
      CHECK(slice_n(whole.final_angle, p.H * p.S) == qi.angle_state);
    }
  }
}

TEST_CASE("MIMO: step and chunked forms agree to 1e-12 (R, divisor, chunk sizes)", "[cpu][L0]") {
  const int64_t R = GENERATE(1, 2, 4);
  const int div = GENERATE(2, 4);
  const int64_t T = GENERATE(1, 33, 65);
  double worst = 0;
  for (int64_t Q : {int64_t(1), int64_t(8), int64_t(16), T}) {
    MimoParams p;
    p.B = 2;
    p.T = T;
    p.H = 4;
    p.G = 2;
    p.N = 24;  // not a power of two; divisible by 4
    p.P = 6;
    p.R = R;
    p.rotary_dim_divisor = div;
    p.chunk_size = Q;
    MOpts o;
    o.states = (T % 2 == 1);
    auto r = mimo_oracle(p, make_mimo(p, 31 * R + div + T, o));
    for (const auto& a : r.agreement) {
      INFO("R=" << R << " div=" << div << " T=" << T << " Q=" << Q << " tensor " << a.tensor);
      CHECK(a.max_rel <= kFormAgreement);
    }
    worst = std::max(worst, worst_agreement(r));
    REQUIRE(max_abs(output(r, "out").expected.data) > 0.0);
  }
  g_worst_mimo = std::max(g_worst_mimo, worst);
  std::printf("[mamba3] MIMO R=%lld div=%d T=%lld worst step-vs-chunked agreement %.3e\n", (long long)R, div,
              (long long)T, worst);
}

TEST_CASE("MIMO: R = 8 and P = 128 (kernel-port shapes), chunk 8 and 16, T not a multiple", "[cpu][L0]") {
  const int64_t R = GENERATE(4, 8);
  double worst = 0;
  for (int64_t Q : {int64_t(8), int64_t(16)}) {
    MimoParams p;
    p.B = 1;
    p.T = 37;
    p.H = 1;
    p.G = 1;
    p.N = 32;
    p.P = 128;
    p.R = R;
    p.chunk_size = Q;
    MOpts o;
    auto r = mimo_oracle(p, make_mimo(p, 8 * R + Q, o));
    for (const auto& a : r.agreement) {
      INFO("R=" << R << " Q=" << Q << " tensor " << a.tensor);
      CHECK(a.max_rel <= kFormAgreement);
    }
    worst = std::max(worst, worst_agreement(r));
  }
  g_worst_mimo = std::max(g_worst_mimo, worst);
  std::printf("[mamba3] MIMO R=%lld P=128 worst step-vs-chunked agreement %.3e\n", (long long)R, worst);
}

TEST_CASE("SISO: T = 1000 (angles accumulate over many chunks)", "[cpu][L0]") {
  SisoParams p;
  p.B = 1;
  p.T = 1000;
  p.H = 2;
  p.G = 1;
  p.N = 16;
  p.P = 8;
  p.S = 8;
  p.chunk_size = 64;
  Opts o;
  o.states = true;
  auto r = siso_oracle(p, make_siso(p, 1000, o));
  for (const auto& a : r.agreement) {
    INFO("tensor " << a.tensor);
    CHECK(a.max_rel <= kFormAgreement);
  }
  g_worst_siso = std::max(g_worst_siso, worst_agreement(r));
  std::printf("[mamba3] SISO T=1000 worst step-vs-chunked agreement %.3e (all SISO so far %.3e)\n",
              worst_agreement(r), g_worst_siso);
}

TEST_CASE("MIMO: options (fused norm, no Phi, pairwise rotation, no Z, varlen, decay)", "[cpu][L0]") {
  MimoParams p;
  p.B = 1;
  p.T = 50;
  p.H = 2;
  p.G = 1;
  p.N = 16;
  p.P = 8;
  p.R = 4;
  p.chunk_size = 16;
  MOpts o;
  SECTION("fused pre-gate RMSNorm with weight") { p.fused_norm = true; }
  SECTION("fused pre-gate RMSNorm without weight") {
    p.fused_norm = true;
    o.norm_w = false;
  }
  SECTION("no Phi: output keeps the rank axis") { o.phi = false; }
  SECTION("adjacent pairing (rotate_pairwise)") { p.rotate_pairwise = true; }
  SECTION("no Z, no D") {
    o.z = false;
    o.d = false;
  }
  SECTION("input states") { o.states = true; }
  SECTION("strong decay") { o.decay = Decay::strong; }
  SECTION("near-zero decay") { o.decay = Decay::near_zero; }
  SECTION("varlen with a mid-chunk start and an empty sequence") {
    p.cu_seqlens = {0, 7, 7, 29, 50};
    o.states = true;
  }
  for (int64_t Q : {int64_t(1), int64_t(5), int64_t(16), int64_t(64)}) {
    p.chunk_size = Q;
    auto r = mimo_oracle(p, make_mimo(p, 99, o));
    for (const auto& a : r.agreement) {
      INFO("Q=" << Q << " tensor " << a.tensor);
      CHECK(a.max_rel <= kFormAgreement);
    }
    g_worst_mimo = std::max(g_worst_mimo, worst_agreement(r));
    const auto& out = output(r, "out").expected;
    REQUIRE(max_abs(out.data) > 0.0);
    CHECK(out.shape.size() == (o.phi ? 4u : 5u));
  }
}

// -----------------------------------------------------------------------------------------------
// Hand-derived cases
// -----------------------------------------------------------------------------------------------

TEST_CASE("SISO: two-token hand derivation (trapezoid weights, rotation, states)", "[cpu][L0]") {
  // N = 2, P = 1, S = 1, H = G = 1, biases 0, D and Z absent, DT = 1, Trap = 0 (lambda = 1/2).
  // Angles: tanh(a_0) = 1/2 -> theta_0 = pi/2; tanh(a_1) = 1/6 -> theta_1 = pi/6; phi_1 = 2pi/3.
  // ADT_0 = 0 (alpha_0 = 1), ADT_1 = ln(1/2) (alpha_1 = 1/2).
  // t=0: q_0 = k_0 = R(pi/2)(1,0) = (0,1); gamma_0 = 1/2; H_0 = 1/2 * v_0 k_0^T = (0, 1/2);
  //      y_0 = H_0 q_0 = 1/2.
  // t=1: Q_1 = K_1 = (1,0), V_1 = 0; q_1 = k_1 = (cos 2pi/3, sin 2pi/3) = (-1/2, sqrt3/2);
  //      beta_1 = (1 - 1/2) * 1 * alpha_1 = 1/4; H_1 = 1/2 H_0 + 1/4 v_0 k_0^T = (0, 1/2);
  //      y_1 = H_1 q_1 = sqrt3/4.
  // Final: angle 2pi/3, ssm (0, 1/2), k = (-1/2, sqrt3/2), v = 0.
  SisoParams p;
  p.T = 2;
  p.N = 2;
  p.P = 1;
  p.S = 1;
  p.chunk_size = GENERATE(1, 2, 64);
  SisoInputs in;
  in.q = {1, 0, 1, 0};
  in.k = {1, 0, 1, 0};
  in.v = {1, 0};
  in.adt = {0.0, std::log(0.5)};
  in.dt = {1, 1};
  in.trap = {0, 0};
  in.q_bias = {0, 0};
  in.k_bias = {0, 0};
  in.angles = {std::atanh(0.5), std::atanh(1.0 / 6.0)};
  for (const Result& r : {siso_step(p, in), siso_chunked(p, in)}) {
    CHECK(r.out[0] == Approx(0.5).margin(1e-15));
    CHECK(r.out[1] == Approx(std::sqrt(3.0) / 4).margin(1e-15));
    CHECK(r.final_angle[0] == Approx(2 * kPi / 3).margin(1e-14));
    CHECK(r.final_ssm[0] == Approx(0.0).margin(1e-15));
    CHECK(r.final_ssm[1] == Approx(0.5).margin(1e-15));
    CHECK(r.final_k[0] == Approx(-0.5).margin(1e-15));
    CHECK(r.final_k[1] == Approx(std::sqrt(3.0) / 2).margin(1e-15));
    CHECK(r.final_v[0] == 0.0);
    // Bounds: angle |0| + pi/2 + pi/6; K rotation: the pair scale |u| + |w| of the biased key
    // (1, 0), i.e. 1 for both elements; out_0 and out_1 have no cancellation (all terms >= 0
    // here), so bound == value.
    CHECK(r.final_angle_bound[0] == Approx(2 * kPi / 3).margin(1e-14));
    CHECK(r.final_k_bound[0] == Approx(1.0).margin(1e-15));
    CHECK(r.final_k_bound[1] == Approx(1.0).margin(1e-15));
    CHECK(r.out_bound[0] == Approx(0.5).margin(1e-15));
    CHECK(r.out_bound[1] == Approx(std::sqrt(3.0) / 4).margin(1e-15));
    // Chunk start states: chunk 0 starts from zero; with Q = 1, chunk 1 starts from the folded
    // H_0 + (1 - lambda_1) DT_1 v_0 k_0^T = (0, 1/2) + 1/2 (0, 1) = (0, 1).
    CHECK(r.chunk_states[0] == 0.0);
    CHECK(r.chunk_states[1] == 0.0);
    if (p.chunk_size == 1) {
      CHECK(r.chunk_states[2] == Approx(0.0).margin(1e-15));
      CHECK(r.chunk_states[3] == Approx(1.0).margin(1e-15));
    }
  }
}

TEST_CASE("MIMO: same-step rank pairs all interact with weight gamma (hand derivation)", "[cpu][L0]") {
  // T = 1, R = 2, N = 4, P = 1, raw angles 0 (no rotation), biases 0, DT = 2, Trap = 0 -> gamma = 1.
  // q_0 = e0, q_1 = e1, k_0 = e1, k_1 = e0: q_r'.k_r = 1 only for r' != r.
  // V = 1, Psi = (2, 3) -> v_0 = 2, v_1 = 3. y_{r'} = gamma sum_r (q_r'.k_r) v_r + D v_r':
  //   D = 0: y_0 = 3, y_1 = 2; out = Phi_0 y_0 + Phi_1 y_1 = 1*3 + 10*2 = 23.
  //   D = 1/2: y_0 = 3 + 1 = 4, y_1 = 2 + 1.5 = 3.5; out = 4 + 35 = 39.
  // Without Phi the output keeps R: (y_0, y_1).
  MimoParams p;
  p.T = 1;
  p.N = 4;
  p.P = 1;
  p.R = 2;
  p.rotary_dim_divisor = 2;
  p.chunk_size = 8;
  MimoInputs in;
  in.q = {1, 0, 0, 0, 0, 1, 0, 0};
  in.k = {0, 1, 0, 0, 1, 0, 0, 0};
  in.v = {1};
  in.adt = {-0.3};
  in.dt = {2};
  in.trap = {0};
  in.q_bias.assign(8, 0.0);
  in.k_bias.assign(8, 0.0);
  in.psi = {2, 3};
  in.phi = {1, 10};
  in.angles = {0, 0};
  for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) CHECK(r.out[0] == Approx(23).epsilon(1e-15));
  in.d = {0.5};
  for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) CHECK(r.out[0] == Approx(39).epsilon(1e-15));
  in.phi.clear();
  for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) {
    REQUIRE(r.out.size() == 2);
    CHECK(r.out[0] == Approx(4).epsilon(1e-15));
    CHECK(r.out[1] == Approx(3.5).epsilon(1e-15));
  }
}

TEST_CASE("MIMO: rotation pairing conventions (half-split vs adjacent) on the final K", "[cpu][L0]") {
  // T = 1, R = 1, N = 8, K = (1..8), bias 0, DT = 1. Angle 0 has tanh(a) = 1/2 -> phi_0 = pi/2, the
  // other angles are 0. (u, w) -> (u cos - w sin, u sin + w cos) = (-w, u) for phi = pi/2.
  //   half-split, divisor 4 (S = 2, pairs (0,4), (1,5)):      (-5, 2, 3, 4, 1, 6, 7, 8)
  //   half-split, divisor 2 (S = 4, pairs (i, i+4)):          (-5, 2, 3, 4, 1, 6, 7, 8)
  //   adjacent (rotate_pairwise), divisor 4 (pairs (0,1),(2,3)): (-2, 1, 3, 4, 5, 6, 7, 8)
  // The angle of the second pair (pi/3 via tanh = 1/3) distinguishes the layouts further:
  //   half-split: pair (1,5) = (2,6) -> (2c - 6s, 2s + 6c), c = 1/2, s = sqrt3/2.
  //   adjacent:   pair (2,3) = (3,4) -> (3c - 4s, 3s + 4c).
  const double c = 0.5, s = std::sqrt(3.0) / 2;
  struct Case {
    int div;
    bool pairwise;
    std::vector<double> expect;
  };
  const std::vector<Case> cases = {
      {4, false, {-5, 2 * c - 6 * s, 3, 4, 1, 2 * s + 6 * c, 7, 8}},
      {2, false, {-5, 2 * c - 6 * s, 3, 4, 1, 2 * s + 6 * c, 7, 8}},
      {4, true, {-2, 1, 3 * c - 4 * s, 3 * s + 4 * c, 5, 6, 7, 8}},
  };
  for (const auto& cs : cases) {
    MimoParams p;
    p.T = 1;
    p.N = 8;
    p.P = 1;
    p.R = 1;
    p.rotary_dim_divisor = cs.div;
    p.rotate_pairwise = cs.pairwise;
    MimoInputs in;
    in.q.assign(8, 0.0);
    in.k = {1, 2, 3, 4, 5, 6, 7, 8};
    in.v = {1};
    in.adt = {0};
    in.dt = {1};
    in.trap = {0};
    in.q_bias.assign(8, 0.0);
    in.k_bias.assign(8, 0.0);
    in.psi = {1};
    in.angles.assign(p.S(), 0.0);
    in.angles[0] = std::atanh(0.5);
    in.angles[1] = std::atanh(1.0 / 3.0);
    for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) {
      INFO("divisor " << cs.div << " pairwise " << cs.pairwise);
      for (int i = 0; i < 8; ++i) CHECK(r.final_k[i] == Approx(cs.expect[i]).margin(1e-14));
    }
  }
  // SISO uses adjacent pairs; S = 1 < N/2 leaves dims 2.. untouched.
  SisoParams p;
  p.T = 1;
  p.N = 8;
  p.P = 1;
  p.S = 1;
  SisoInputs in;
  in.q.assign(8, 0.0);
  in.k = {1, 2, 3, 4, 5, 6, 7, 8};
  in.v = {1};
  in.adt = {0};
  in.dt = {1};
  in.trap = {0};
  in.q_bias.assign(8, 0.0);
  in.k_bias.assign(8, 0.0);
  in.angles = {std::atanh(0.5)};
  const std::vector<double> expect = {-2, 1, 3, 4, 5, 6, 7, 8};
  for (const Result& r : {siso_step(p, in), siso_chunked(p, in)})
    for (int i = 0; i < 8; ++i) CHECK(r.final_k[i] == Approx(expect[i]).margin(1e-14));
}

TEST_CASE("MIMO: fused pre-gate RMSNorm is an RMS over P per rank, then w, silu(Z zeta), Phi", "[cpu][L0]") {
  // T = 1, R = 1, N = 2, P = 2, no rotation, q = k = (1, 0), DT = 2, Trap = 0 -> gamma = 1,
  // Psi = 1, V = (3, 4): y = gamma (q.k) v = (3, 4) (D absent). mean(y^2) = 12.5.
  // out_p = Phi_p * y_p / sqrt(12.5 + eps) * w_p * silu(Z_p zeta_p), silu computed here.
  MimoParams p;
  p.T = 1;
  p.N = 2;
  p.P = 2;
  p.R = 1;
  p.rotary_dim_divisor = 2;
  p.fused_norm = true;
  p.norm_eps = 1e-5;
  MimoInputs in;
  in.q = {1, 0};
  in.k = {1, 0};
  in.v = {3, 4};
  in.adt = {-1};
  in.dt = {2};
  in.trap = {0};
  in.q_bias = {0, 0};
  in.k_bias = {0, 0};
  in.psi = {1, 1};
  in.phi = {0.5, -2};
  in.zeta = {1.5, -0.25};
  in.z = {0.7, 1.2};
  in.norm_weight = {2, 3};
  in.angles = {0};
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  const double rs = 1 / std::sqrt(12.5 + 1e-5);
  const double e0 = 0.5 * 3 * rs * 2 * silu(0.7 * 1.5);
  const double e1 = -2 * 4 * rs * 3 * silu(1.2 * -0.25);
  for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) {
    CHECK(r.out[0] == Approx(e0).epsilon(1e-14));
    CHECK(r.out[1] == Approx(e1).epsilon(1e-14));
  }
  // Scale invariance of the normalized output in V (eps -> 0): V -> 10 V leaves out unchanged.
  p.norm_eps = 0;
  auto a = mimo_step(p, in);
  in.v = {30, 40};
  auto b = mimo_step(p, in);
  CHECK(agreement_rel(a.out, b.out) <= 1e-14);
}

// -----------------------------------------------------------------------------------------------
// Independent reductions and semantics
// -----------------------------------------------------------------------------------------------

TEST_CASE("SISO: lambda = 1 reduces to Mamba-2's exponential-Euler update (naive formula)", "[cpu][L0]") {
  // Trap = 60 gives lambda = 1 - 8.8e-27 = 1 in fp64, so beta = 0 and gamma = DT:
  //   y_t = sum_{s <= t} exp(sum_{m=s+1..t} ADT_m) DT_s (q_t . k_s) v_s + D v_t,
  // with q, k rotated by their own cumulative angles; here S = 0 (no rotation), so q_t = Q_t + b.
  SisoParams p;
  p.T = 40;
  p.H = 2;
  p.G = 1;
  p.N = 6;
  p.P = 3;
  p.S = 0;
  p.chunk_size = 16;
  Opts o;
  o.z = false;
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

TEST_CASE("Carried states: two calls with the states handed over equal one call", "[cpu][L0]") {
  // Split T = 70 at 29: the second call starts from the first call's (angle, SSM, K, V).
  const int64_t T = 70, T1 = 29;
  SECTION("SISO") {
    SisoParams p;
    p.B = 2;
    p.T = T;
    p.H = 2;
    p.G = 1;
    p.N = 8;
    p.P = 4;
    p.S = 3;
    p.chunk_size = 16;
    Opts o;
    o.states = true;
    auto in = make_siso(p, 21, o);
    auto full = siso_chunked(p, in);
    auto split = [&](int64_t t0, int64_t len) {
      SisoParams q = p;
      q.T = len;
      SisoInputs s = in;
      auto st = [&](const std::vector<double>& x, int64_t per) {
        std::vector<double> r;
        for (int64_t b = 0; b < p.B; ++b)
          r.insert(r.end(), x.begin() + (b * T + t0) * per, x.begin() + (b * T + t0 + len) * per);
        return r;
      };
      s.q = st(in.q, p.G * p.N);
      s.k = st(in.k, p.G * p.N);
      s.v = st(in.v, p.H * p.P);
      s.z = st(in.z, p.H * p.P);
      s.angles = st(in.angles, p.H * p.S);
      return std::make_pair(q, s);
    };
    // (B, H, T) slicing: treat B*H rows of length T.
    auto slice_bht = [&](const std::vector<double>& x, int64_t t0, int64_t len) {
      std::vector<double> r;
      for (int64_t row = 0; row < p.B * p.H; ++row)
        r.insert(r.end(), x.begin() + row * T + t0, x.begin() + row * T + t0 + len);
      return r;
    };
    auto [p1, s1] = split(0, T1);
    s1.adt = slice_bht(in.adt, 0, T1);
    s1.dt = slice_bht(in.dt, 0, T1);
    s1.trap = slice_bht(in.trap, 0, T1);
    auto r1 = siso_step(p1, s1);
    auto [p2, s2] = split(T1, T - T1);
    s2.adt = slice_bht(in.adt, T1, T - T1);
    s2.dt = slice_bht(in.dt, T1, T - T1);
    s2.trap = slice_bht(in.trap, T1, T - T1);
    s2.angle_state = r1.final_angle;
    s2.ssm_state = r1.final_ssm;
    s2.k_state = r1.final_k;
    s2.v_state = r1.final_v;
    auto r2 = siso_chunked(p2, s2);
    std::vector<double> out;
    for (int64_t b = 0; b < p.B; ++b) {
      const int64_t per = p.H * p.P;
      out.insert(out.end(), r1.out.begin() + b * T1 * per, r1.out.begin() + (b + 1) * T1 * per);
      out.insert(out.end(), r2.out.begin() + b * (T - T1) * per, r2.out.begin() + (b + 1) * (T - T1) * per);
    }
    CHECK(agreement_rel(out, full.out) <= kFormAgreement);
    CHECK(agreement_rel(r2.final_ssm, full.final_ssm) <= kFormAgreement);
    CHECK(agreement_rel(r2.final_k, full.final_k) <= kFormAgreement);
    CHECK(agreement_rel(r2.final_v, full.final_v) == 0.0);
    std::vector<double> a = r2.final_angle;
    for (size_t i = 0; i < a.size(); ++i)
      CHECK(std::remainder(a[i] - full.final_angle[i], 2 * kPi) == Approx(0).margin(1e-12));
  }
  SECTION("MIMO") {
    MimoParams p;
    p.B = 1;
    p.T = T;
    p.H = 2;
    p.G = 1;
    p.N = 8;
    p.P = 4;
    p.R = 2;
    p.chunk_size = 8;
    MOpts o;
    o.states = true;
    auto in = make_mimo(p, 23, o);
    auto full = mimo_chunked(p, in);
    auto cut = [&](int64_t t0, int64_t len) {
      MimoParams q = p;
      q.T = len;
      MimoInputs s = in;
      auto tt = [&](const std::vector<double>& x, int64_t per) {
        return std::vector<double>(x.begin() + t0 * per, x.begin() + (t0 + len) * per);
      };
      auto ht = [&](const std::vector<double>& x) {
        std::vector<double> r;
        for (int64_t h = 0; h < p.H; ++h) r.insert(r.end(), x.begin() + h * T + t0, x.begin() + h * T + t0 + len);
        return r;
      };
      s.q = tt(in.q, p.R * p.G * p.N);
      s.k = tt(in.k, p.R * p.G * p.N);
      s.v = tt(in.v, p.H * p.P);
      s.z = tt(in.z, p.H * p.P);
      s.angles = tt(in.angles, p.H * p.S());
      s.adt = ht(in.adt);
      s.dt = ht(in.dt);
      s.trap = ht(in.trap);
      return std::make_pair(q, s);
    };
    auto [p1, s1] = cut(0, T1);
    auto r1 = mimo_chunked(p1, s1);
    auto [p2, s2] = cut(T1, T - T1);
    s2.angle_state = r1.final_angle;
    s2.ssm_state = r1.final_ssm;
    s2.k_state = r1.final_k;
    s2.v_state = r1.final_v;
    auto r2 = mimo_step(p2, s2);
    std::vector<double> out = r1.out;
    out.insert(out.end(), r2.out.begin(), r2.out.end());
    CHECK(agreement_rel(out, full.out) <= kFormAgreement);
    CHECK(agreement_rel(r2.final_ssm, full.final_ssm) <= kFormAgreement);
    CHECK(agreement_rel(r2.final_k, full.final_k) <= kFormAgreement);
  }
}

TEST_CASE("Chunk start states are the prefix's final state folded with the next token's beta term",
          "[cpu][L0]") {
  // For chunk c starting at t0 = cQ: S_c = H_{t0-1} + (1 - lambda_{t0}) DT_{t0} v_{t0-1} k_{t0-1}^T,
  // with H_{t0-1}, k_{t0-1}, v_{t0-1} the final states of a run over the prefix [0, t0).
  SisoParams p;
  p.T = 50;
  p.H = 1;
  p.N = 4;
  p.P = 3;
  p.S = 2;
  p.chunk_size = 16;
  Opts o;
  o.states = true;
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
  MimoParams p;
  p.T = 45;
  p.H = 2;
  p.N = 8;
  p.P = 4;
  p.R = 2;
  p.chunk_size = 8;
  MOpts o;
  o.states = true;
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
  SisoParams p;
  p.B = 2;
  p.T = 20;
  p.H = 2;
  p.N = 8;
  p.P = 4;
  p.S = 4;
  p.chunk_size = 8;
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
  MimoParams p;
  p.T = T;
  p.H = 1;
  p.N = 8;
  p.P = 4;
  p.R = 2;
  MOpts o;
  o.states = true;
  auto in = make_mimo(p, 17, o);
  in.adt[tr] = -HUGE_VAL;
  for (int64_t Q : {int64_t(1), int64_t(8), int64_t(16)}) {
    p.chunk_size = Q;
    auto r = mimo_oracle(p, in);
    for (const auto& a : r.agreement) {
      INFO("Q=" << Q << " tensor " << a.tensor);
      CHECK(a.max_rel <= kFormAgreement);
    }
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
  SisoParams p;
  p.T = 4;
  p.N = 4;
  p.P = 2;
  p.S = 2;
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
    MimoParams m;
    m.T = 4;
    m.N = 8;
    m.P = 2;
    m.R = 2;
    m.fused_norm = true;
    MOpts mo;
    mo.z = false;
    auto mi = make_mimo(m, 2, mo);
    CHECK_THROWS_AS(mimo_step(m, mi), InputError);
  }
}

// -----------------------------------------------------------------------------------------------
// Mutants and emulation knobs in the oracle's own metric (agreement_rel vs the step form). Whether
// the tolerance policy rejects every mutant and accepts every emulation is judged by
// `assay calibrate --op mamba3` (fixtures/mamba3.cpp variants; CTest calibrate.mamba3).
// -----------------------------------------------------------------------------------------------

namespace {

void round_bf16(std::vector<double>& x) {
  for (auto& e : x) e = round_to(DType::bf16, e);
}

}  // namespace

TEST_CASE("Mutants: every deliberate bug moves the output away from the step form", "[cpu][L0]") {
  using detail::Variant;
  const std::vector<Variant> mutants = {Variant::no_intra,         Variant::no_diag,
                                        Variant::diag_same_rank_only, Variant::shifted_reset_at_chunk,
                                        Variant::no_state_passing, Variant::no_chunk_decay,
                                        Variant::wrong_pairing,    Variant::double_sigmoid,
                                        Variant::row_mask};
  SisoParams sp;
  sp.T = 130;
  sp.H = 2;
  sp.N = 16;
  sp.P = 16;
  sp.S = 8;
  sp.chunk_size = 16;
  Opts so;
  so.states = true;
  SisoInputs si = make_siso(sp, 606, so);
  MimoParams mp;
  mp.T = 65;
  mp.H = 2;
  mp.N = 16;
  mp.P = 32;
  mp.R = 4;
  mp.chunk_size = 16;
  MOpts mo;
  MimoInputs mi = make_mimo(mp, 607, mo);
  const std::vector<detail::Problem> problems = {detail::make_problem(sp, si), detail::make_problem(mp, mi)};
  std::vector<Result> gold;
  for (const auto& pb : problems) gold.push_back(detail::run_step(pb));
  for (size_t k = 0; k < problems.size(); ++k)  // the exact chunked form is the step form
    CHECK(agreement_rel(detail::run_chunked(problems[k]).out, gold[k].out) < kFormAgreement);
  for (const auto m : mutants) {
    double worst = 0;
    for (size_t k = 0; k < problems.size(); ++k) {
      auto pb = problems[k];
      pb.variant = m;
      worst = std::max(worst, agreement_rel(detail::run_chunked(pb).out, gold[k].out));
    }
    INFO("mutant " << static_cast<int>(m));
    CHECK(worst > 1e-6);  // far outside the fp64 form agreement
  }
}

TEST_CASE("bf16 angle path: stored angles are bf16 values within half an ulp of the exact ones", "[cpu][L0]") {
  SisoParams sp;
  sp.T = 200;
  sp.H = 2;
  sp.N = 16;
  sp.P = 8;
  sp.S = 8;
  sp.chunk_size = 64;
  Opts so;
  so.states = true;
  SisoInputs si = make_siso(sp, 611, so);
  round_bf16(si.angles);
  auto pb = detail::make_problem(sp, si);
  const Result exact = detail::run_chunked(pb);
  pb.bf16_angles = true;
  const Result r = detail::run_chunked(pb);
  for (size_t i = 0; i < r.final_angle.size(); ++i) {
    const double a = r.final_angle[i], e = exact.final_angle[i];
    CHECK(a == round_to(DType::bf16, a));
    double d = std::fabs(a - e);
    d = std::min(d, 2 * kPi - d);  // circular
    // half a bf16 ulp of a value in [0, 2pi) is at most 2^-6, plus the fp32 cumsum's rounding
    CHECK(d <= 0x1p-6 + 1e-4);
  }
  // The rotations see the rounded angles: the output moves, V (copied) does not.
  CHECK(agreement_rel(r.out, exact.out) > 0);
  CHECK(r.final_v == exact.final_v);
}

TEST_CASE("Chunk start states localize a chunking bug to its first bad chunk", "[cpu][L0]") {
  // The shifted-term-reset mutant drops (1 - lambda_{t0}) DT_{t0} v_{t0-1} k_{t0-1}^T at every chunk
  // start t0 = cQ > 0: chunk 0's start state is still right, chunk 1's is the first wrong one.
  SisoParams p;
  p.T = 70;
  p.H = 1;
  p.N = 8;
  p.P = 4;
  p.S = 4;
  p.chunk_size = 16;
  Opts o;
  auto in = make_siso(p, 71, o);
  auto pb = detail::make_problem(p, in);
  const Result gold = detail::run_step(pb);
  pb.variant = detail::Variant::shifted_reset_at_chunk;
  const Result bad = detail::run_chunked(pb);
  const int64_t per = p.P * p.N;
  int64_t first_bad = -1;
  for (int64_t c = 0; c < int64_t(gold.chunk_start.size()) && first_bad < 0; ++c) {
    std::vector<double> a(bad.chunk_states.begin() + c * per, bad.chunk_states.begin() + (c + 1) * per);
    std::vector<double> e(gold.chunk_states.begin() + c * per, gold.chunk_states.begin() + (c + 1) * per);
    if (agreement_rel(a, e) > 1e-6) first_bad = c;
  }
  CHECK(first_bad == 1);
  CHECK(gold.chunk_start[1] == 16);
}

// -----------------------------------------------------------------------------------------------
// Chunk-state bounds (intermediate_bounds["chunk_states"])
// -----------------------------------------------------------------------------------------------

namespace {

// One sequence of a (B, T, ...) problem cut to its first `len` tokens, as a B = 1, no-varlen
// problem with that sequence's input-state row. X = per-token width of a (B, T, X) tensor.
std::vector<double> cut_bt(const std::vector<double>& x, int64_t T, int64_t X, int64_t b, int64_t s0, int64_t len) {
  if (x.empty()) return {};
  return std::vector<double>(x.begin() + (b * T + s0) * X, x.begin() + (b * T + s0 + len) * X);
}
std::vector<double> cut_bht(const std::vector<double>& x, int64_t H, int64_t T, int64_t b, int64_t s0, int64_t len) {
  std::vector<double> o;
  for (int64_t h = 0; h < H; ++h)
    o.insert(o.end(), x.begin() + (b * H + h) * T + s0, x.begin() + (b * H + h) * T + s0 + len);
  return o;
}
std::vector<double> cut_row(const std::vector<double>& x, int64_t per_row, int64_t n) {
  if (x.empty()) return {};
  return std::vector<double>(x.begin() + n * per_row, x.begin() + (n + 1) * per_row);
}

template <class Params, class Inputs>
Inputs cut_inputs(const Params& p, const Inputs& in, int64_t R, int64_t S, int64_t b, int64_t n, int64_t s0,
                  int64_t len) {
  Inputs o = in;
  const int64_t T = p.T, H = p.H, G = p.G, N = p.N, P = p.P;
  o.q = cut_bt(in.q, T, R * G * N, b, s0, len);
  o.k = cut_bt(in.k, T, R * G * N, b, s0, len);
  o.v = cut_bt(in.v, T, H * P, b, s0, len);
  o.z = cut_bt(in.z, T, H * P, b, s0, len);
  o.angles = cut_bt(in.angles, T, H * S, b, s0, len);
  o.adt = cut_bht(in.adt, H, T, b, s0, len);
  o.dt = cut_bht(in.dt, H, T, b, s0, len);
  o.trap = cut_bht(in.trap, H, T, b, s0, len);
  o.angle_state = cut_row(in.angle_state, H * S, n);
  o.ssm_state = cut_row(in.ssm_state, H * P * N, n);
  o.k_state = cut_row(in.k_state, R * H * N, n);
  o.v_state = cut_row(in.v_state, H * P, n);
  // An empty cut (a chunk at the sequence start) has no Z: MIMO_Z then goes too (they come together;
  // the output gate does not touch the state or its bound).
  if constexpr (requires { o.zeta; })
    if (o.z.empty()) o.zeta.clear();
  return o;
}

// (b) For every chunk c (sequence n, first token t0 of the sequence's chunk grid): the chunk's
// bound equals the final_ssm_bound of the sequence truncated before t0, folded like the value:
//   + (1 - lambda_{t0}) DT_{t0} sum_r |V_{t0-1} Psi_r| |K_{t0-1,r}|  (the truncated run's final V / K).
// The step form computes both with the same operations in the same order, so the relation is exact
// (bit for bit); it is checked to 1e-14 relative. Returns the worst relative difference.
// (a) Also: bound >= |chunk_states| elementwise (both forms), the chunked form's bound agrees.
template <class Params, class Inputs, class Step, class Chunked>
double check_chunk_bounds(const Params& p, const Inputs& in, int64_t R, int64_t S, const std::vector<double>& psi,
                          Step step, Chunked chunked) {
  const Result st = step(p, in), ch = chunked(p, in);
  REQUIRE(st.chunk_states_bound.size() == st.chunk_states.size());
  for (const Result* r : {&st, &ch})
    for (size_t i = 0; i < r->chunk_states.size(); ++i)
      CHECK(r->chunk_states_bound[i] >= std::fabs(r->chunk_states[i]) * (1 - 1e-14));
  CHECK(agreement_rel(ch.chunk_states_bound, st.chunk_states_bound) <= kFormAgreement);

  const int64_t H = p.H, P = p.P, N = p.N, T = p.T, Q = p.chunk_size;
  const int64_t per = H * P * N;
  double worst = 0;
  int64_t checked = 0;
  for (size_t c = 0; c < st.chunk_start.size(); ++c) {
    const int64_t n = st.chunk_seq[c];
    const int64_t b = p.cu_seqlens.empty() ? n : 0;
    const int64_t s0 = p.cu_seqlens.empty() ? 0 : p.cu_seqlens[n];
    const int64_t t0 = st.chunk_start[c] - s0;  // first token of the chunk within its sequence
    REQUIRE(t0 % Q == 0);
    Params q = p;
    q.B = 1;
    q.T = t0;
    q.cu_seqlens.clear();
    q.extra_chunk_sizes.clear();
    const Inputs cut = cut_inputs(p, in, R, S, b, n, s0, t0);
    const Result pre = step(q, cut);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = (b * H + h) * T + s0 + t0;
      const double lam = 1.0 / (1.0 + std::exp(-in.trap[i]));
      const double w = (1.0 - lam) * in.dt[i];
      std::vector<double> expect(P * N), got(P * N);
      for (int64_t pp = 0; pp < P; ++pp)
        for (int64_t j = 0; j < N; ++j) {
          double acca = 0;
          for (int64_t r = 0; r < R; ++r) {
            const double ps = psi.empty() ? 1.0 : psi[(h * R + r) * P + pp];
            acca += std::fabs(pre.final_v[h * P + pp] * ps) * std::fabs(pre.final_k[(r * H + h) * N + j]);
          }
          expect[pp * N + j] = pre.final_ssm_bound[h * P * N + pp * N + j] + w * acca;
          got[pp * N + j] = st.chunk_states_bound[c * per + h * P * N + pp * N + j];
        }
      const double a = agreement_rel(got, expect);
      INFO("chunk " << c << " (sequence " << n << ", t0 " << t0 << "), head " << h);
      CHECK(a <= 1e-14);
      worst = std::max(worst, a);
      ++checked;
    }
  }
  CHECK(checked == int64_t(st.chunk_start.size()) * H);
  return worst;
}

}  // namespace

TEST_CASE("Chunk-state bounds: >= |value|, and the truncated problem's final_ssm_bound, folded", "[cpu][L0]") {
  auto siso_step_fn = [](const SisoParams& p, const SisoInputs& in) { return siso_step(p, in); };
  auto siso_ch_fn = [](const SisoParams& p, const SisoInputs& in) { return siso_chunked(p, in); };
  auto mimo_step_fn = [](const MimoParams& p, const MimoInputs& in) { return mimo_step(p, in); };
  auto mimo_ch_fn = [](const MimoParams& p, const MimoInputs& in) { return mimo_chunked(p, in); };
  double worst = 0;
  SECTION("SISO") {
    const bool states = GENERATE(false, true);
    const bool varlen = GENERATE(false, true);
    SisoParams p;
    p.H = 2;
    p.G = 1;
    p.N = 8;
    p.P = 3;
    p.S = 3;
    p.chunk_size = 8;
    if (varlen) {
      p.B = 1;
      p.T = 45;
      p.cu_seqlens = {0, 5, 5, 23, 45};  // mid-chunk starts, an empty sequence, T % Q != 0
    } else {
      p.B = 2;
      p.T = 37;  // 4 full chunks and a 5-token tail
    }
    Opts o;
    o.states = states;
    const auto in = make_siso(p, 901 + 2 * states + varlen, o);
    worst = check_chunk_bounds(p, in, 1, p.S, {}, siso_step_fn, siso_ch_fn);
    // The oracle exposes the step form's bound under the intermediate's name, with its shape.
    const OracleResult orr = siso_oracle(p, in);
    const auto it = orr.intermediate_bounds.find("chunk_states");
    REQUIRE(it != orr.intermediate_bounds.end());
    CHECK(it->second == siso_step(p, in).chunk_states_bound);
    for (const auto& t : orr.intermediates)
      if (t.name == "chunk_states") {
        CHECK(t.dtype == DType::bf16);  // mamba3_siso_fwd allocates SSM_States in bf16
        CHECK(t.data.size() == it->second.size());
      }
  }
  SECTION("MIMO") {
    const bool states = GENERATE(false, true);
    const bool varlen = GENERATE(false, true);
    MimoParams p;
    p.H = 2;
    p.N = 8;
    p.P = 3;
    p.R = varlen ? 3 : 2;
    p.rotary_dim_divisor = 2;
    p.chunk_size = 4;
    if (varlen) {
      p.B = 1;
      p.T = 30;
      p.cu_seqlens = {0, 0, 7, 7, 30};  // a leading and a middle empty sequence, mid-chunk starts
    } else {
      p.B = 2;
      p.T = 19;
    }
    MOpts o;
    o.states = states;
    const auto in = make_mimo(p, 911 + 2 * states + varlen, o);
    worst = check_chunk_bounds(p, in, p.R, p.S(), in.psi, mimo_step_fn, mimo_ch_fn);
    const OracleResult orr = mimo_oracle(p, in);
    const auto it = orr.intermediate_bounds.find("chunk_states");
    REQUIRE(it != orr.intermediate_bounds.end());
    CHECK(it->second == mimo_step(p, in).chunk_states_bound);
    for (const auto& t : orr.intermediates)
      if (t.name == "chunk_states") CHECK(t.dtype == DType::f32);  // the TileLang fp32 running state
  }
  std::printf("chunk-state bound vs truncated final_ssm_bound (folded): worst rel diff %.3g\n", worst);
}

TEST_CASE("Chunk-state bounds equal the chunk states when every term is nonnegative", "[cpu][L0]") {
  MimoParams p;
  p.T = 23;
  p.H = 2;
  p.N = 8;
  p.P = 4;
  p.R = 2;
  p.chunk_size = 5;
  MOpts o;
  o.states = true;
  auto in = make_mimo(p, 5, o);
  for (auto* x : {&in.q, &in.k, &in.v, &in.psi, &in.q_bias, &in.k_bias, &in.ssm_state, &in.k_state, &in.v_state})
    for (auto& e : *x) e = std::fabs(e);
  in.angles.assign(in.angles.size(), 0.0);
  in.angle_state.assign(in.angle_state.size(), 0.0);
  for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) {
    CHECK(max_abs(r.chunk_states) > 0);
    CHECK(agreement_rel(r.chunk_states_bound, r.chunk_states) <= 1e-13);
  }
}
