// Tests of the Mamba-3 MIMO backward oracle (reference/mamba3/mamba3_backward_mimo.h): central finite
// differences in fp64 of L = <d_out, out> + <d_final, final states> through the MIMO step recurrence
// (mamba3::mimo_step), for every element of every differentiable input, on tiny shapes over
// configurations covering both rotation pairings, with / without Phi, Z (+ zeta), D, the fused
// RMSNorm (with / without its weight), input states, G < H, varlen with an empty sequence, T = 1 and
// ADT = -inf resets; plus the R = 1 reduction to the SISO backward, exact isolation of varlen
// sequences, and refusals.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "tests/gradcheck.h"
#include "reference/core/check.h"
#include "reference/mamba3/mamba3.h"
#include "reference/mamba3/mamba3_backward.h"
#include "reference/mamba3/tests/mamba3_test_util.h"

using namespace assay;
using namespace assay::mamba3;
using namespace assay::mamba3::test;

namespace {

using Rng = SeededRng<7331>;

struct InOpts {
  bool d = true, z = true, phi = true, states = false;
  int norm = 0;  // 0: none, 1: fused norm without weight, 2: with weight (needs z and phi)
};

MimoParams base(int64_t B, int64_t T, int64_t H, int64_t G, int64_t N, int64_t P, int64_t R, int divisor,
                bool adjacent, int64_t Q) {
  MimoParams p;
  p.B = B, p.T = T, p.H = H, p.G = G, p.N = N, p.P = P, p.R = R;
  p.rotary_dim_divisor = divisor;
  p.rotate_pairwise = adjacent;
  p.chunk_size = Q;
  return p;
}

MimoInputs make_inputs(MimoParams& p, uint64_t seed, const InOpts& o) {
  Rng g(seed);
  MimoInputs in;
  const int64_t NS = nseq(p), BHT = p.B * p.H * p.T, S = p.S(), HRP = p.H * p.R * p.P;
  in.q = g.vec(p.B * p.T * p.R * p.G * p.N, -1, 1);
  in.k = g.vec(p.B * p.T * p.R * p.G * p.N, -1, 1);
  in.v = g.vec(p.B * p.T * p.H * p.P, -1, 1);
  in.dt = g.vec(BHT, 0.05, 1.0);  // DT >= 0 stays so under the FD step
  in.adt.resize(BHT);
  for (int64_t i = 0; i < BHT; ++i) in.adt[i] = -in.dt[i] * g.u(0.1, 1.5);  // ADT < 0 strictly
  in.trap = g.vec(BHT, -3, 3);
  in.q_bias = g.vec(p.H * p.R * p.N, -0.5, 0.5);
  in.k_bias = g.vec(p.H * p.R * p.N, -0.5, 0.5);
  in.psi = g.vec(HRP, -1.5, 1.5);
  in.angles = g.vec(p.B * p.T * p.H * S, -2, 2);
  if (o.d) in.d = g.vec(p.H, -1, 1);
  if (o.z) {
    in.z = g.vec(p.B * p.T * p.H * p.P, -2, 2);
    in.zeta = g.vec(HRP, -1.5, 1.5);
  }
  if (o.phi) in.phi = g.vec(HRP, -1, 1);
  p.fused_norm = o.norm > 0;
  if (o.norm == 2) in.norm_weight = g.vec(p.H * p.P, 0.5, 1.5);
  if (o.states) {
    in.angle_state = g.vec(NS * p.H * S, 0.5, 2 * kPi - 0.5);
    in.ssm_state = g.vec(NS * p.H * p.P * p.N, -1, 1);
    in.k_state = g.vec(NS * p.R * p.H * p.N, -1, 1);
    in.v_state = g.vec(NS * p.H * p.P, -1, 1);
  }
  return in;
}

int64_t out_size(const MimoParams& p, const MimoInputs& in) {
  return in.phi.empty() ? p.B * p.T * p.R * p.H * p.P : p.B * p.T * p.H * p.P;
}

// Final-state gradients: mask bit 0 angle, 1 ssm, 2 k, 3 v.
Upstream make_upstream(const MimoParams& p, const MimoInputs& in, uint64_t seed, unsigned mask = 0xF) {
  Rng g(seed);
  const int64_t NS = nseq(p);
  Upstream u;
  u.d_out = g.vec(out_size(p, in), -1, 1);
  if (mask & 1) u.df.d_angle = g.vec(NS * p.H * p.S(), -1, 1);
  if (mask & 2) u.df.d_ssm = g.vec(NS * p.H * p.P * p.N, -1, 1);
  if (mask & 4) u.df.d_k = g.vec(NS * p.R * p.H * p.N, -1, 1);
  if (mask & 8) u.df.d_v = g.vec(NS * p.H * p.P, -1, 1);
  return u;
}

double loss(const MimoParams& p, const MimoInputs& in, const Upstream& u) { return test::loss(mimo_step, p, in, u); }

// L(w) - L(in), summed from elementwise differences of the outputs (the final angle's difference
// taken circularly, in (-pi, pi]), so the FD quotient is not swamped by the rounding of L itself
// (ulp(L) / step ~ 1e-9 at L ~ 10, which is 1e-6 relative on the small initial-state gradients of
// tokens with a small beta). Same gradient as L: the two differ by the constant L(in).
double loss_delta(const MimoParams& p, const MimoInputs& w, const Upstream& u, const Result& r0) {
  const Result r = mimo_step(p, w);
  auto ddot = [](const std::vector<double>& d, const std::vector<double>& a, const std::vector<double>& a0,
                 bool circular) {
    double s = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      double x = a[i] - a0[i];
      if (circular) x -= 2 * kPi * std::round(x / (2 * kPi));
      s += d[i] * x;
    }
    return s;
  };
  return ddot(u.d_out, r.out, r0.out, false) + ddot(u.df.d_angle, r.final_angle, r0.final_angle, true) +
         ddot(u.df.d_ssm, r.final_ssm, r0.final_ssm, false) + ddot(u.df.d_k, r.final_k, r0.final_k, false) +
         ddot(u.df.d_v, r.final_v, r0.final_v, false);
}

double gradcheck(const std::string& label, const MimoParams& p, const MimoInputs& in, const Upstream& u) {
  const Grads g = backward_mimo_recurrent(p, in, u.d_out, u.df);
  const Result r0 = mimo_step(p, in);
  using GI = assay_test::GradItem<MimoInputs>;
  const std::vector<GI> items = {
      {"q", &MimoInputs::q, &g.dq},
      {"k", &MimoInputs::k, &g.dk},
      {"v", &MimoInputs::v, &g.dv},
      {"adt", &MimoInputs::adt, &g.dadt},
      {"dt", &MimoInputs::dt, &g.ddt},
      {"trap", &MimoInputs::trap, &g.dtrap},
      {"q_bias", &MimoInputs::q_bias, &g.dq_bias},
      {"k_bias", &MimoInputs::k_bias, &g.dk_bias},
      {"psi", &MimoInputs::psi, &g.dpsi},
      {"zeta", &MimoInputs::zeta, &g.dzeta},
      {"phi", &MimoInputs::phi, &g.dphi},
      {"angles", &MimoInputs::angles, &g.dangles},
      {"d", &MimoInputs::d, &g.dd},
      {"z", &MimoInputs::z, &g.dz},
      {"norm_weight", &MimoInputs::norm_weight, &g.dnorm_weight},
      {"angle_state", &MimoInputs::angle_state, &g.dangle_state},
      {"ssm_state", &MimoInputs::ssm_state, &g.dssm_state},
      {"k_state", &MimoInputs::k_state, &g.dk_state},
      {"v_state", &MimoInputs::v_state, &g.dv_state},
  };
  return assay_test::gradcheck_inputs(in, items, [&](const MimoInputs& w) { return loss_delta(p, w, u, r0); },
                                      "mamba3 mimo backward gradcheck [" + label + "]");
}

constexpr double kTol = 1e-6;

// max |a - b| / max(max |b|, 1e-300): the equality gauge of the SISO reduction.
double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i])), m = std::max(m, std::fabs(b[i]));
  return d / std::max(m, 1e-300);
}

}  // namespace

TEST_CASE("mamba3 mimo backward: gradcheck, half-split and adjacent pairs, Phi, Z, D, states", "[cpu][L0]") {
  {
    // Kernel defaults: half-split pairs, divisor 4 (S = 2 of N = 8: dims 2, 3, 6, 7 pass through).
    MimoParams p = base(2, 5, 2, 1, 8, 3, 2, 4, false, 2);
    const MimoInputs in = make_inputs(p, 1, {});
    CHECK(gradcheck("half-split div 4, R=2 N=8 P=3, Phi Z D, no states, Q=2", p, in, make_upstream(p, in, 2)) <
          kTol);
  }
  {
    MimoParams p = base(2, 5, 2, 1, 4, 2, 3, 2, true, 3);  // adjacent, full rotation S = N/2 = 2
    const MimoInputs in = make_inputs(p, 3, {.states = true});
    CHECK(gradcheck("adjacent div 2, R=3 N=4 P=2, Phi Z D, states, Q=3", p, in, make_upstream(p, in, 4)) < kTol);
  }
  {
    MimoParams p = base(1, 7, 2, 2, 8, 2, 2, 4, true, 64);  // adjacent div 4: pairs (0,1), (2,3)
    const MimoInputs in = make_inputs(p, 5, {.states = true});
    CHECK(gradcheck("adjacent div 4, R=2 N=8 P=2, Phi Z D, states, one chunk Q=64", p, in,
                    make_upstream(p, in, 6)) < kTol);
  }
}

TEST_CASE("mamba3 mimo backward: gradcheck, no Phi / no Z / no D, GQA, T = 1, partial final grads", "[cpu][L0]") {
  {
    // Without Phi the output keeps the rank axis; no Z (so no zeta), no D.
    MimoParams p = base(1, 6, 4, 2, 4, 2, 2, 2, false, 2);  // heads 0,1 -> group 0; 2,3 -> group 1
    const MimoInputs in = make_inputs(p, 10, {.d = false, .z = false, .phi = false, .states = true});
    CHECK(gradcheck("no Phi (out keeps R), no Z, no D, GQA H=4 G=2, half-split div 2, states", p, in,
                    make_upstream(p, in, 11)) < kTol);
  }
  {
    MimoParams p = base(2, 4, 2, 1, 8, 3, 4, 4, false, 3);
    const MimoInputs in = make_inputs(p, 12, {.d = true, .z = true, .phi = false, .states = true});
    CHECK(gradcheck("no Phi, Z D, R=4 N=8 P=3, states, d_out + d_ssm + d_v only", p, in,
                    make_upstream(p, in, 13, 0x2 | 0x8)) < kTol);
  }
  {
    MimoParams p = base(2, 1, 2, 1, 4, 2, 2, 2, true, 1);  // T = 1: the carry meets the input states at once
    const MimoInputs in = make_inputs(p, 14, {.states = true});
    CHECK(gradcheck("T=1, R=2, adjacent, Phi Z D, states", p, in, make_upstream(p, in, 15)) < kTol);
  }
  {
    MimoParams p = base(1, 5, 1, 1, 4, 2, 1, 4, false, 2);  // R = 1, half-split, no states
    const MimoInputs in = make_inputs(p, 16, {.d = false, .z = true, .phi = true, .states = false});
    CHECK(gradcheck("R=1 half-split div 4, Phi Z, no D, no states", p, in, make_upstream(p, in, 17)) < kTol);
  }
}

TEST_CASE("mamba3 mimo backward: gradcheck, fused pre-gate RMSNorm with and without its weight", "[cpu][L0]") {
  {
    MimoParams p = base(1, 4, 2, 1, 4, 4, 4, 2, false, 2);
    const MimoInputs in = make_inputs(p, 20, {.d = true, .z = true, .phi = true, .states = true, .norm = 2});
    CHECK(gradcheck("fused norm + weight, R=4 N=4 P=4, Phi Z D, states", p, in, make_upstream(p, in, 21)) < kTol);
  }
  {
    MimoParams p = base(2, 3, 2, 1, 8, 3, 2, 4, true, 2);
    p.norm_eps = 1e-3;
    const MimoInputs in = make_inputs(p, 22, {.d = false, .z = true, .phi = true, .states = false, .norm = 1});
    CHECK(gradcheck("fused norm, no weight, eps 1e-3, R=2 N=8 P=3, adjacent, no D", p, in,
                    make_upstream(p, in, 23)) < kTol);
  }
}

TEST_CASE("mamba3 mimo backward: gradcheck, varlen with an empty sequence, and -inf ADT resets", "[cpu][L0]") {
  MimoParams p = base(1, 9, 2, 1, 4, 2, 2, 2, false, 2);
  p.cu_seqlens = {0, 3, 3, 7, 9};
  const MimoInputs in = make_inputs(p, 30, {.states = true});
  const Upstream u = make_upstream(p, in, 31);
  CHECK(gradcheck("varlen {0,3,3,7,9}, R=2, Phi Z D, states", p, in, u) < kTol);
  // The empty sequence (n = 1) passes its states through: its initial-state gradients equal the
  // final-state gradients exactly.
  const Grads g = backward_mimo_recurrent(p, in, u.d_out, u.df);
  const int64_t H = p.H, S = p.S(), N = p.N, P = p.P, R = p.R;
  for (int64_t i = 0; i < H * S; ++i) CHECK(g.dangle_state[H * S + i] == u.df.d_angle[H * S + i]);
  for (int64_t i = 0; i < H * P * N; ++i) CHECK(g.dssm_state[H * P * N + i] == u.df.d_ssm[H * P * N + i]);
  for (int64_t i = 0; i < R * H * N; ++i) CHECK(g.dk_state[R * H * N + i] == u.df.d_k[R * H * N + i]);
  for (int64_t i = 0; i < H * P; ++i) CHECK(g.dv_state[H * P + i] == u.df.d_v[H * P + i]);

  // ADT = -inf at a few tokens: alpha = beta = 0. The FD step cannot perturb -inf, so the gradcheck
  // runs with ADT = -800 there (exp(-800) == 0 in fp64: the same reset), and the -inf run must give
  // bitwise the same gradients.
  MimoParams pr = base(2, 6, 2, 1, 4, 2, 3, 2, true, 2);
  MimoInputs ir = make_inputs(pr, 32, {.states = true});
  const int64_t r0 = pr.T * 0 + 2, r1 = pr.T * 3 + 4;  // (b=0, h=0, t=2), (b=1, h=1, t=4)
  ir.adt[r0] = ir.adt[r1] = -800.0;
  REQUIRE(std::exp(-800.0) == 0.0);
  const Upstream ur = make_upstream(pr, ir, 33);
  CHECK(gradcheck("ADT resets (alpha = 0), R=3, Phi Z D, states", pr, ir, ur) < kTol);
  check_inf_reset([&](const auto& i, const auto& d, const auto& f) { return backward_mimo_recurrent(pr, i, d, f); },
                  ir, ur, r0, r1);
}

TEST_CASE("mamba3 mimo backward: no gradient crosses a varlen boundary", "[cpu][L0]") {
  MimoParams p = base(1, 9, 2, 1, 4, 3, 2, 2, false, 2);
  p.cu_seqlens = {0, 4, 9};
  const MimoInputs in = make_inputs(p, 40, {.d = true, .z = true, .phi = false, .states = true});  // out keeps R
  auto backward = [&](const auto& i, const auto& d, const auto& f) { return backward_mimo_recurrent(p, i, d, f); };
  auto step_loss = [&](const MimoInputs& i, const Upstream& u) { return loss(p, i, u); };
  check_varlen_isolation(backward, step_loss, in, make_upstream(p, in, 41), p.T, 4);
}

namespace {

// Two varlen sequences (13 and 17 tokens) of several chunks (Q = 4), R = 3: the mutant and bound tests.
MimoParams two_sequences() {
  MimoParams p = base(1, 30, 2, 1, 8, 4, 3, 4, false, 4);
  p.cu_seqlens = {0, 13, 30};
  return p;
}

}  // namespace

// R = 1 with Psi = zeta = Phi = 1 and adjacent pairs is the SISO recurrence: same layouts (Q/K
// [B,T,1,G,N] = [B,T,G,N], k_state [NS,1,H,N] = [NS,H,N]), the same angle reduction, silu(Z (.) 1) =
// silu(Z), out = 1 (.) gated. Every SISO gradient must match; dPsi / dzeta / dPhi have no SISO
// counterpart (they are checked by the gradcheck).
TEST_CASE("mamba3 mimo backward: R = 1 with Psi = zeta = Phi = 1 equals the SISO backward", "[cpu][L0]") {
  struct Cfg {
    int divisor;
    bool phi, z, d, states;
    std::vector<int64_t> cu;
  };
  const std::vector<Cfg> cfgs = {
      {2, true, true, true, true, {}},            // full rotation S = N/2, Phi = 1
      {4, false, true, false, true, {0, 3, 3, 7}},  // S = N/4, no Phi (out keeps R = 1), varlen
      {2, true, false, true, false, {}},          // no Z, no states
  };
  for (size_t ci = 0; ci < cfgs.size(); ++ci) {
    const Cfg& c = cfgs[ci];
    MimoParams mp = base(c.cu.empty() ? 2 : 1, c.cu.empty() ? 6 : 7, 2, 1, 8, 3, 1, c.divisor, true, 2);
    mp.cu_seqlens = c.cu;
    MimoInputs mi = make_inputs(mp, 50 + ci, {.d = c.d, .z = c.z, .phi = c.phi, .states = c.states});
    std::fill(mi.psi.begin(), mi.psi.end(), 1.0);
    std::fill(mi.zeta.begin(), mi.zeta.end(), 1.0);
    std::fill(mi.phi.begin(), mi.phi.end(), 1.0);
    const Upstream u = make_upstream(mp, mi, 60 + ci);

    SisoParams sp;
    sp.B = mp.B, sp.T = mp.T, sp.H = mp.H, sp.G = mp.G, sp.N = mp.N, sp.P = mp.P, sp.S = mp.S();
    sp.chunk_size = mp.chunk_size, sp.cu_seqlens = mp.cu_seqlens;
    SisoInputs si;
    si.q = mi.q, si.k = mi.k, si.v = mi.v, si.adt = mi.adt, si.dt = mi.dt, si.trap = mi.trap;
    si.q_bias = mi.q_bias, si.k_bias = mi.k_bias, si.angles = mi.angles, si.d = mi.d, si.z = mi.z;
    si.angle_state = mi.angle_state, si.ssm_state = mi.ssm_state, si.k_state = mi.k_state;
    si.v_state = mi.v_state;
    FinalGrads sf{u.df.d_angle, u.df.d_ssm, u.df.d_k, u.df.d_v};

    // The forwards agree first (same out, same finals).
    const Result rm = mimo_step(mp, mi), rs = siso_step(sp, si);
    CHECK(rel_diff(rm.out, rs.out) <= 1e-15);
    CHECK(rel_diff(rm.final_ssm, rs.final_ssm) <= 1e-15);

    const Grads gm = backward_mimo_recurrent(mp, mi, u.d_out, u.df);
    const Grads gs = backward_siso_recurrent(sp, si, u.d_out, sf);
    const std::vector<std::pair<const char*, double>> diffs = {
        {"q", rel_diff(gm.dq, gs.dq)},
        {"k", rel_diff(gm.dk, gs.dk)},
        {"v", rel_diff(gm.dv, gs.dv)},
        {"adt", rel_diff(gm.dadt, gs.dadt)},
        {"dt", rel_diff(gm.ddt, gs.ddt)},
        {"trap", rel_diff(gm.dtrap, gs.dtrap)},
        {"q_bias", rel_diff(gm.dq_bias, gs.dq_bias)},
        {"k_bias", rel_diff(gm.dk_bias, gs.dk_bias)},
        {"angles", rel_diff(gm.dangles, gs.dangles)},
        {"d", c.d ? rel_diff(gm.dd, gs.dd) : 0.0},
        {"z", c.z ? rel_diff(gm.dz, gs.dz) : 0.0},
        {"angle_state", c.states ? rel_diff(gm.dangle_state, gs.dangle_state) : 0.0},
        {"ssm_state", c.states ? rel_diff(gm.dssm_state, gs.dssm_state) : 0.0},
        {"k_state", c.states ? rel_diff(gm.dk_state, gs.dk_state) : 0.0},
        {"v_state", c.states ? rel_diff(gm.dv_state, gs.dv_state) : 0.0},
        {"dchunk_states", rel_diff(gm.dchunk_states, gs.dchunk_states)},
    };
    std::string line;
    double worst = 0;
    for (const auto& [name, v] : diffs) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " %s=%.1e", name, v);
      line += buf;
      worst = std::max(worst, v);
    }
    std::printf("mamba3 mimo backward R=1 vs siso [cfg %zu] max rel diff:%s\n", ci, line.c_str());
    CHECK(worst <= 1e-12);
  }
}

TEST_CASE("mamba3 mimo backward: malformed upstream gradients and inputs are refused", "[cpu][L0]") {
  MimoParams p = base(2, 3, 1, 1, 4, 2, 2, 2, false, 2);
  const MimoInputs in = make_inputs(p, 70, {.states = true});
  check_refusals([&](const auto& i, const auto& d, const auto& f) { return backward_mimo_recurrent(p, i, d, f); },
                 in, make_upstream(p, in, 71));
  // Without Phi, d_out must keep the rank axis.
  MimoInputs np = in;
  np.phi.clear();
  Upstream u = make_upstream(p, in, 71);  // sized for Phi: [B,T,H,P]
  REQUIRE_THROWS_AS(backward_mimo_recurrent(p, np, u.d_out, u.df), InputError);
  u.df.d_k.resize(u.df.d_k.size() / p.R);  // SISO layout [NS,H,N]: refused for R = 2
  REQUIRE_THROWS_AS(backward_mimo_recurrent(p, in, u.d_out, u.df), InputError);
  MimoInputs bad = in;
  bad.zeta.clear();  // Z without MIMO_Z: refused as by the forward
  u = make_upstream(p, in, 71);
  REQUIRE_THROWS_AS(backward_mimo_recurrent(p, bad, u.d_out, u.df), InputError);
}

// ---- Form (b): backward_mimo_chunked against form (a), the chunk-start adjoints, mutants, bound ----

TEST_CASE("mamba3 mimo backward: chunked form (b) agrees with the recurrent form (a)", "[cpu][L0]") {
  Worst worst;
  struct Cfg {
    const char* name;
    MimoParams p;
    std::vector<int64_t> qs;  // chunk sizes (0 = T)
    bool resets = false;
  };
  auto mk = [](int64_t B, int64_t T, int64_t H, int64_t G, int64_t N, int64_t P, int64_t R, int divisor,
               bool adjacent, std::vector<int64_t> cu = {}) {
    MimoParams p = base(B, T, H, G, N, P, R, divisor, adjacent, 1);
    p.cu_seqlens = std::move(cu);
    return p;
  };
  const std::vector<int64_t> allq = {1, 2, 3, 16, 0};
  const std::vector<Cfg> cfgs = {
      // T = 21: not a multiple of 2, 3, 16; Q = T. Half-split divisor 4: dims pass through.
      {"B=2 T=21 H=2 G=1 N=8 P=3 R=2 half-split/4", mk(2, 21, 2, 1, 8, 3, 2, 4, false), allq},
      // GQA, adjacent full rotation, R = 3.
      {"B=1 T=13 H=4 G=2 N=4 P=2 R=3 adjacent/2", mk(1, 13, 4, 2, 4, 2, 3, 2, true), allq},
      // R = 4, T = 1.
      {"B=2 T=1 H=2 G=1 N=8 P=3 R=4", mk(2, 1, 2, 1, 8, 3, 4, 4, false), {1, 2, 16}},
      // Varlen with a leading and a middle empty sequence, boundaries mid-chunk.
      {"varlen {0,0,5,5,14,25} H=2 R=2", mk(1, 25, 2, 1, 8, 4, 2, 4, false, {0, 0, 5, 5, 14, 25}), allq},
      // ADT = -inf resets.
      {"resets B=2 T=21 H=2 R=2", mk(2, 21, 2, 1, 8, 3, 2, 4, false), allq, true},
      // Longer, several chunks of the kernels' sizes (64 / R).
      {"B=1 T=150 H=2 G=1 N=16 P=8 R=4", mk(1, 150, 2, 1, 16, 8, 4, 2, false), {16, 0}},
  };
  uint64_t seed = 500;
  for (const Cfg& cfg : cfgs) {
    for (int64_t q0 : cfg.qs) {
      // bit 0 D, bit 1 Z, bit 2 Phi, bit 3 input states; modes 16.. the fused norm (with / without weight)
      for (int mode : {0, 3, 5, 6, 7, 8, 15, 16 + 15, 32 + 13}) {
        MimoParams p = cfg.p;
        p.chunk_size = q0 == 0 ? p.T : q0;
        const int norm = mode >= 32 ? 1 : mode >= 16 ? 2 : 0;
        const InOpts o{.d = (mode & 1) != 0, .z = (mode & 2) != 0 || norm > 0, .phi = (mode & 4) != 0 || norm > 0,
                     .states = (mode & 8) != 0, .norm = norm};
        MimoInputs in = make_inputs(p, ++seed, o);
        if (cfg.resets) {
          const int64_t T = p.T;
          auto at = [&](int64_t bb, int64_t h, int64_t t) { in.adt[(bb * p.H + h) * T + t] = -INFINITY; };
          at(0, 0, 0), at(0, 1, 6), at(1, 0, 16), at(1, 1, 20), at(0, 0, 6);
        }
        const unsigned mask = (mode == 0 || mode == 5) ? 0u : 0xFu;
        const Upstream u = make_upstream(p, in, ++seed, mask);
        const std::string label = std::string(cfg.name) + " Q=" + std::to_string(p.chunk_size) +
                                  " mode=" + std::to_string(mode);
        compare_forms(label, backward_mimo_recurrent(p, in, u.d_out, u.df), backward_mimo_chunked(p, in, u.d_out, u.df),
                      worst);
      }
    }
  }
  worst.print("mamba3 mimo backward chunked vs recurrent");
  {  // deterministic (parallel over (sequence, group), fixed summation order): bitwise repeatable
    MimoParams p = mk(1, 25, 4, 2, 8, 4, 2, 4, false, {0, 7, 25});
    p.chunk_size = 4;
    const MimoInputs in = make_inputs(p, 900, {.states = true});
    const Upstream u = make_upstream(p, in, 901);
    const Grads g1 = backward_mimo_chunked(p, in, u.d_out, u.df), g2 = backward_mimo_chunked(p, in, u.d_out, u.df);
    check_same_grads(g1, g2);
  }
}

TEST_CASE("mamba3 mimo chunked backward: each mutant changes what it targets", "[cpu][L0]") {
  // Two sequences of several chunks with input states, R = 3: the carry, its decay, the shifted
  // trapezoid term and the cross-rank diagonal all matter.
  MimoParams p = two_sequences();
  const MimoInputs in = make_inputs(p, 700, {.states = true});
  const Upstream u = make_upstream(p, in, 701);
  check_bwd_mutants([&](const ChunkedBackwardOptions& o) { return backward_mimo_chunked(p, in, u.d_out, u.df, o); },
                    kAllMimoBwdMutants);
  // diag_same_rank_only is a no-op at R = 1.
  MimoParams p1 = base(1, 9, 1, 1, 4, 2, 1, 2, false, 4);
  const MimoInputs in1 = make_inputs(p1, 710, {});
  const Upstream u1 = make_upstream(p1, in1, 711);
  const Grads a1 = backward_mimo_chunked(p1, in1, u1.d_out, u1.df);
  const Grads b1 = backward_mimo_chunked(p1, in1, u1.d_out, u1.df, {BwdMutant::diag_same_rank_only, std::nullopt});
  CHECK(a1.dq == b1.dq);
  CHECK(a1.ddt == b1.ddt);
}

TEST_CASE("mamba3 backward_mimo_bound holds every gradient element", "[cpu][L0]") {
  // A sum of absolute terms is >= the absolute value of their sum; and the bound is not slack by
  // orders of magnitude: its largest element within 100x of the gradient's largest without the
  // fused norm. With it, the norm divides by rms(y) (the true y) while the magnitude keeps |y|mag,
  // so every gradient's bound grows by the cancellation ratio |y|mag / |y| of the pre-gate output
  // (first order in a kernel's error of y, which is what the bound is for); at T = 30, N = 8 with
  // uniform inputs that is ~20, so the norm case allows 1e4 (measured worst ~2.5e3, dadt).
  for (int norm : {0, 2}) {
    const double slack = norm ? 1e4 : 100;
    MimoParams p = two_sequences();
    const MimoInputs in = make_inputs(p, 800 + norm, {.states = true, .norm = norm});
    const Upstream u = make_upstream(p, in, 801);
    const Grads g = backward_mimo_recurrent(p, in, u.d_out, u.df);
    const Grads b = backward_mimo_bound(p, in, u.d_out, u.df);
    INFO("fused norm " << norm);
    const double worst_slack = check_bound_holds(g, b, slack);
    std::printf("mamba3 backward_mimo_bound, fused norm %d: worst max(bound) / max|gradient| %.3g\n", norm,
                worst_slack);
  }
}

TEST_CASE("mamba3 mimo backward: chunked form (b) refuses malformed upstream gradients", "[cpu][L0]") {
  MimoParams p = base(2, 3, 1, 1, 4, 2, 2, 2, false, 2);
  const MimoInputs in = make_inputs(p, 72, {.states = true});
  check_refusals([&](const auto& i, const auto& d, const auto& f) { return backward_mimo_chunked(p, i, d, f); },
                 in, make_upstream(p, in, 73));
}
