// Mamba-3 forward oracle tests (1/3): step vs chunked agreement (SISO, MIMO) over chunk sizes and
// lengths not divisible by the chunk, and hand-derived small cases (trapezoid weights, rotation
// conventions, MIMO rank pairs, fused norm). Semantics and reductions: test_mamba3_semantics.cpp;
// mutants, emulations and chunk-state bounds: test_mamba3_chunk_states.cpp.
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

namespace {

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
    SisoParams p{.B = 2, .T = T, .H = 4, .G = 2};
    p.N = 12;  // not a power of two
    p.P = 6;
    p.S = 4;  // 2S < N: the last 4 dims pass through
    p.chunk_size = Q;
    const Opts o{.states = states};
    auto in = make_siso(p, 1000 + T, o);
    auto r = siso_oracle(p, in);
    INFO("T=" << T << " Q=" << Q << " states=" << states);
    check_agreement(r);
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
    SisoParams p{.B = 1, .T = 100, .H = 2, .G = 1, .N = 8, .P = 4, .S = 4, .chunk_size = Q};
    const Opts o{.d = false, .z = false, .states = true, .decay = dc};
    auto r = siso_oracle(p, make_siso(p, 77, o));
    INFO("decay=" << int(dc) << " Q=" << Q);
    check_agreement(r);
    g_worst_siso = std::max(g_worst_siso, worst_agreement(r));
  }
}

TEST_CASE("SISO: varlen with mid-chunk starts and an empty sequence", "[cpu][L0]") {
  SisoParams p{.B = 1, .T = 90, .H = 2, .G = 2, .N = 8, .P = 4, .S = 2, .cu_seqlens = {0, 5, 5, 40, 90}};
  const Opts o{.states = true};
  auto in = make_siso(p, 5, o);
  for (int64_t Q : {int64_t(1), int64_t(16), int64_t(64)}) {
    p.chunk_size = Q;
    auto r = siso_oracle(p, in);
    INFO("Q=" << Q);
    check_agreement(r);
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
    MimoParams p{.B = 2, .T = T, .H = 4, .G = 2};
    p.N = 24;  // not a power of two; divisible by 4
    p.P = 6;
    p.R = R;
    p.rotary_dim_divisor = div;
    p.chunk_size = Q;
    const MOpts o{.states = (T % 2 == 1)};
    auto r = mimo_oracle(p, make_mimo(p, 31 * R + div + T, o));
    INFO("R=" << R << " div=" << div << " T=" << T << " Q=" << Q);
    check_agreement(r);
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
    MimoParams p{.B = 1, .T = 37, .H = 1, .G = 1, .N = 32, .P = 128, .R = R, .chunk_size = Q};
    MOpts o;
    auto r = mimo_oracle(p, make_mimo(p, 8 * R + Q, o));
    INFO("R=" << R << " Q=" << Q);
    check_agreement(r);
    worst = std::max(worst, worst_agreement(r));
  }
  g_worst_mimo = std::max(g_worst_mimo, worst);
  std::printf("[mamba3] MIMO R=%lld P=128 worst step-vs-chunked agreement %.3e\n", (long long)R, worst);
}

TEST_CASE("SISO: T = 1000 (angles accumulate over many chunks)", "[cpu][L0]") {
  SisoParams p{.B = 1, .T = 1000, .H = 2, .G = 1, .N = 16, .P = 8, .S = 8, .chunk_size = 64};
  const Opts o{.states = true};
  auto r = siso_oracle(p, make_siso(p, 1000, o));
  check_agreement(r);
  g_worst_siso = std::max(g_worst_siso, worst_agreement(r));
  std::printf("[mamba3] SISO T=1000 worst step-vs-chunked agreement %.3e (all SISO so far %.3e)\n",
              worst_agreement(r), g_worst_siso);
}

TEST_CASE("MIMO: options (fused norm, no Phi, pairwise rotation, no Z, varlen, decay)", "[cpu][L0]") {
  MimoParams p{.B = 1, .T = 50, .H = 2, .G = 1, .N = 16, .P = 8, .R = 4, .chunk_size = 16};
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
    INFO("Q=" << Q);
    check_agreement(r);
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
  SisoParams p{.T = 2, .N = 2, .P = 1, .S = 1};
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
  MimoParams p{.T = 1, .N = 4, .P = 1, .R = 2, .rotary_dim_divisor = 2, .chunk_size = 8};
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

namespace {

// One token, N = 8, P = 1 (R = 1): Q = 0, K = (1, ..., 8), V = 1, ADT = 0, DT = 1, Trap = 0, zero
// biases; the final K is then the rotated K.
template <class In>
In one_token_key() {
  In in;
  in.q.assign(8, 0.0);
  in.k = {1, 2, 3, 4, 5, 6, 7, 8};
  in.v = {1};
  in.adt = {0};
  in.dt = {1};
  in.trap = {0};
  in.q_bias.assign(8, 0.0);
  in.k_bias.assign(8, 0.0);
  return in;
}

}  // namespace

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
    MimoParams p{.T = 1, .N = 8, .P = 1, .R = 1, .rotary_dim_divisor = cs.div, .rotate_pairwise = cs.pairwise};
    MimoInputs in = one_token_key<MimoInputs>();
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
  SisoParams p{.T = 1, .N = 8, .P = 1, .S = 1};
  SisoInputs in = one_token_key<SisoInputs>();
  in.angles = {std::atanh(0.5)};
  const std::vector<double> expect = {-2, 1, 3, 4, 5, 6, 7, 8};
  for (const Result& r : {siso_step(p, in), siso_chunked(p, in)})
    for (int i = 0; i < 8; ++i) CHECK(r.final_k[i] == Approx(expect[i]).margin(1e-14));
}

TEST_CASE("MIMO: fused pre-gate RMSNorm is an RMS over P per rank, then w, silu(Z zeta), Phi", "[cpu][L0]") {
  // T = 1, R = 1, N = 2, P = 2, no rotation, q = k = (1, 0), DT = 2, Trap = 0 -> gamma = 1,
  // Psi = 1, V = (3, 4): y = gamma (q.k) v = (3, 4) (D absent). mean(y^2) = 12.5.
  // out_p = Phi_p * y_p / sqrt(12.5 + eps) * w_p * silu(Z_p zeta_p), silu computed here.
  MimoParams p{.T = 1, .N = 2, .P = 2, .R = 1, .rotary_dim_divisor = 2, .fused_norm = true, .norm_eps = 1e-5};
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
