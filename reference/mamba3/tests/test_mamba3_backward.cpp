// Tests of the Mamba-3 SISO backward oracle (reference/mamba3/mamba3_backward.h): central finite
// differences in fp64 of L = <d_out, out> + <d_final, final states> through the step recurrence
// (mamba3::siso_step), for every element of every differentiable input, on tiny shapes over
// several configurations; plus exact isolation of varlen sequences (no gradient crosses a reset),
// an empty sequence passing the final-state gradients through, a -inf ADT reset, and refusals.
// Then form (b), the chunked backward (backward_siso_chunked), against form (a) at 1e-12 over a sweep
// of chunk sizes and configurations, and its chunk-start adjoints (dchunk_states).
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

using Rng = SeededRng<4242>;

struct InOpts {
  bool d = true, z = true, states = false;
};

SisoInputs make_inputs(const SisoParams& p, uint64_t seed, const InOpts& o) {
  Rng g(seed);
  const int64_t BHT = p.B * p.H * p.T;
  return siso_inputs(g, p, o.d, o.z, o.states, 0.5, [&](SisoInputs& in) {
    in.dt = g.vec(BHT, 0.05, 1.0);  // DT >= 0 stays so under the FD step
    in.adt.resize(BHT);
    for (int64_t i = 0; i < BHT; ++i) in.adt[i] = -in.dt[i] * g.u(0.1, 1.5);  // ADT < 0 strictly
    in.trap = g.vec(BHT, -3, 3);
  });
}

// Final-state gradients: mask bit 0 angle, 1 ssm, 2 k, 3 v.
Upstream make_upstream(const SisoParams& p, uint64_t seed, unsigned mask = 0xF) {
  Rng g(seed);
  const int64_t NS = nseq(p);
  Upstream u;
  u.d_out = g.vec(p.B * p.T * p.H * p.P, -1, 1);
  if (mask & 1) u.df.d_angle = g.vec(NS * p.H * p.S, -1, 1);
  if (mask & 2) u.df.d_ssm = g.vec(NS * p.H * p.P * p.N, -1, 1);
  if (mask & 4) u.df.d_k = g.vec(NS * p.H * p.N, -1, 1);
  if (mask & 8) u.df.d_v = g.vec(NS * p.H * p.P, -1, 1);
  return u;
}

double loss(const SisoParams& p, const SisoInputs& in, const Upstream& u) { return test::loss(siso_step, p, in, u); }

double gradcheck(const std::string& label, const SisoParams& p, const SisoInputs& in, const Upstream& u) {
  const Grads g = backward_siso_recurrent(p, in, u.d_out, u.df);
  using GI = assay_test::GradItem<SisoInputs>;
  const std::vector<GI> items = {
      {"q", &SisoInputs::q, &g.dq},
      {"k", &SisoInputs::k, &g.dk},
      {"v", &SisoInputs::v, &g.dv},
      {"adt", &SisoInputs::adt, &g.dadt},
      {"dt", &SisoInputs::dt, &g.ddt},
      {"trap", &SisoInputs::trap, &g.dtrap},
      {"q_bias", &SisoInputs::q_bias, &g.dq_bias},
      {"k_bias", &SisoInputs::k_bias, &g.dk_bias},
      {"angles", &SisoInputs::angles, &g.dangles},
      {"d", &SisoInputs::d, &g.dd},
      {"z", &SisoInputs::z, &g.dz},
      {"angle_state", &SisoInputs::angle_state, &g.dangle_state},
      {"ssm_state", &SisoInputs::ssm_state, &g.dssm_state},
      {"k_state", &SisoInputs::k_state, &g.dk_state},
      {"v_state", &SisoInputs::v_state, &g.dv_state},
  };
  return assay_test::gradcheck_inputs(in, items, [&](const SisoInputs& w) { return loss(p, w, u); },
                                      "mamba3 siso backward gradcheck [" + label + "]");
}

constexpr double kTol = 1e-6;

SisoParams base(int64_t B, int64_t T, int64_t H, int64_t G, int64_t N, int64_t P, int64_t S, int64_t Q) {
  SisoParams p;
  p.B = B, p.T = T, p.H = H, p.G = G, p.N = N, p.P = P, p.S = S, p.chunk_size = Q;
  return p;
}

}  // namespace

TEST_CASE("mamba3 siso backward: gradcheck, D and Z, with / without input states", "[cpu][L0]") {
  for (int64_t Q : {2, 64}) {  // checkpoint grid: several recomputed chunks, or one chunk > T
    const SisoParams p = base(2, 5, 2, 1, 4, 3, 2, Q);
    const SisoInputs in = make_inputs(p, 1, {});
    CHECK(gradcheck(Q == 2 ? "D, Z, no states, full rotation S=2 N=4, Q=2" : "D, Z, no states, Q=64", p, in,
                    make_upstream(p, 2)) < kTol);
  }
  const SisoParams p = base(2, 5, 2, 2, 6, 3, 2, 2);  // S=2 < N/2=3: dims 4, 5 pass through
  const SisoInputs in = make_inputs(p, 3, {.d = true, .z = true, .states = true});
  CHECK(gradcheck("D, Z, input states, partial rotation S=2 N=6, Q=2", p, in, make_upstream(p, 4)) < kTol);
}

TEST_CASE("mamba3 siso backward: gradcheck, no D / no Z, GQA, partial final-state gradients", "[cpu][L0]") {
  {
    const SisoParams p = base(2, 5, 2, 1, 4, 2, 1, 3);
    const SisoInputs in = make_inputs(p, 10, {.d = false, .z = false, .states = true});
    CHECK(gradcheck("no D, no Z, states, S=1, Q=3", p, in, make_upstream(p, 11)) < kTol);
  }
  {
    const SisoParams p = base(1, 6, 4, 2, 4, 2, 2, 2);  // heads 0,1 -> group 0; 2,3 -> group 1
    const SisoInputs in = make_inputs(p, 12, {.d = true, .z = false, .states = true});
    CHECK(gradcheck("GQA H=4 G=2, D, no Z, states, d_out + d_ssm + d_v only", p, in, make_upstream(p, 13, 0x2 | 0x8)) <
          kTol);
  }
  {
    // No rotation at all. (With S = 0 the angle state is empty, which the forward reads as "no
    // input states", so this configuration runs without them.)
    const SisoParams p = base(1, 6, 2, 2, 4, 3, 0, 4);
    const SisoInputs in = make_inputs(p, 14, {.d = false, .z = true, .states = false});
    CHECK(gradcheck("no rotation S=0, Z, no states, d_out + d_ssm + d_k + d_v", p, in, make_upstream(p, 15)) <
          kTol);
  }
}

TEST_CASE("mamba3 siso backward: gradcheck, varlen with an empty sequence, and a -inf ADT reset", "[cpu][L0]") {
  SisoParams p = base(1, 9, 2, 1, 4, 2, 2, 2);
  p.cu_seqlens = {0, 3, 3, 7, 9};
  const SisoInputs in = make_inputs(p, 20, {.d = true, .z = true, .states = true});
  const Upstream u = make_upstream(p, 21);
  CHECK(gradcheck("varlen {0,3,3,7,9}, D, Z, states", p, in, u) < kTol);
  // The empty sequence (n = 1) passes its states through: its initial-state gradients equal the
  // final-state gradients exactly.
  const Grads g = backward_siso_recurrent(p, in, u.d_out, u.df);
  const int64_t H = p.H, S = p.S, N = p.N, P = p.P;
  for (int64_t i = 0; i < H * S; ++i) CHECK(g.dangle_state[H * S + i] == u.df.d_angle[H * S + i]);
  for (int64_t i = 0; i < H * P * N; ++i) CHECK(g.dssm_state[H * P * N + i] == u.df.d_ssm[H * P * N + i]);
  for (int64_t i = 0; i < H * N; ++i) CHECK(g.dk_state[H * N + i] == u.df.d_k[H * N + i]);
  for (int64_t i = 0; i < H * P; ++i) CHECK(g.dv_state[H * P + i] == u.df.d_v[H * P + i]);

  // ADT = -inf at a few tokens: alpha = beta = 0, a full reset. The FD step cannot perturb -inf, so
  // the gradcheck runs with ADT = -800 there (exp(-800) == 0 exactly in fp64: the same alpha = beta
  // = 0 reset, and FD around it is 0 as the analytic dADT), and the -inf run must give bitwise the
  // same gradients.
  SisoParams pr = base(2, 6, 2, 1, 4, 2, 2, 2);
  SisoInputs ir = make_inputs(pr, 22, {.d = true, .z = true, .states = true});
  const int64_t r0 = pr.T * 0 + 2, r1 = pr.T * 3 + 4;  // (b=0, h=0, t=2), (b=1, h=1, t=4)
  ir.adt[r0] = ir.adt[r1] = -800.0;
  REQUIRE(std::exp(-800.0) == 0.0);
  const Upstream ur = make_upstream(pr, 23);
  CHECK(gradcheck("ADT resets (alpha = 0), D, Z, states", pr, ir, ur) < kTol);
  check_inf_reset([&](const auto& i, const auto& d, const auto& f) { return backward_siso_recurrent(pr, i, d, f); },
                  ir, ur, r0, r1);
}

TEST_CASE("mamba3 siso backward: no gradient crosses a varlen reset", "[cpu][L0]") {
  SisoParams p = base(1, 9, 2, 1, 4, 3, 2, 2);
  p.cu_seqlens = {0, 4, 9};
  const SisoInputs in = make_inputs(p, 30, {.d = false, .z = true, .states = true});
  auto backward = [&](const auto& i, const auto& d, const auto& f) { return backward_siso_recurrent(p, i, d, f); };
  auto step_loss = [&](const SisoInputs& i, const Upstream& u) { return loss(p, i, u); };
  check_varlen_isolation(backward, step_loss, in, make_upstream(p, 31), p.T, 4);
}

TEST_CASE("mamba3 siso backward: malformed upstream gradients and inputs are refused", "[cpu][L0]") {
  const SisoParams p = base(2, 3, 1, 1, 4, 2, 2, 2);
  check_refusals([&](const auto& i, const auto& d, const auto& f) { return backward_siso_recurrent(p, i, d, f); },
                 make_inputs(p, 40, {.d = true, .z = true, .states = true}), make_upstream(p, 41));
}

// ---------------------------------------------------------------------------------------------
// Form (b): the chunked backward (backward_siso_chunked) against form (a) (backward_siso_recurrent)
// on every gradient, agreement_rel <= kFormAgreement (1e-12), over a sweep of chunk sizes and
// configurations; and the adjoint of the chunk-start states (dchunk_states).
// ---------------------------------------------------------------------------------------------
namespace {

// Two varlen sequences (20 and 25 tokens) of several chunks (Q = 8): the mutant and bound tests.
SisoParams two_sequences() {
  SisoParams p = base(1, 45, 2, 1, 6, 4, 2, 8);
  p.cu_seqlens = {0, 20, 45};
  return p;
}

void set_adt(const SisoParams& p, SisoInputs& in, int64_t b, int64_t h, int64_t t, double v) {
  in.adt[(b * p.H + h) * p.T + t] = v;
}

}  // namespace

TEST_CASE("mamba3 siso backward: chunked form (b) agrees with the recurrent form (a)", "[cpu][L0]") {
  Worst worst;
  struct Cfg {
    const char* name;
    SisoParams p;
    std::vector<int64_t> qs;   // chunk sizes (0 = T)
    bool resets = false;       // ADT = -inf at a few tokens, mid-chunk and at a chunk start
  };
  auto mk = [](int64_t B, int64_t T, int64_t H, int64_t G, int64_t N, int64_t P, int64_t S,
               std::vector<int64_t> cu = {}) {
    SisoParams p = base(B, T, H, G, N, P, S, 1);
    p.cu_seqlens = std::move(cu);
    return p;
  };
  const std::vector<int64_t> allq = {1, 2, 3, 16, 64, 0};
  const std::vector<Cfg> cfgs = {
      // T = 37: not a multiple of 2, 3, 16; 64 > T; Q = T. Partial rotation S = 3 < N/2 = 4.
      {"B=2 T=37 H=2 G=1 N=8 P=5 S=3", mk(2, 37, 2, 1, 8, 5, 3), allq},
      // GQA (G < H), full rotation S = N/2.
      {"B=1 T=20 H=4 G=2 N=4 P=3 S=2", mk(1, 20, 4, 2, 4, 3, 2), allq},
      // T = 1.
      {"B=2 T=1 H=2 G=1 N=6 P=2 S=2", mk(2, 1, 2, 1, 6, 2, 2), {1, 2, 16, 64}},
      // No rotation (S = 0): the input states are absent (S = 0 empties the angle state).
      {"B=1 T=19 H=2 G=2 N=4 P=3 S=0", mk(1, 19, 2, 2, 4, 3, 0), {1, 3, 16, 0}},
      // Varlen (B = 1): a leading and a middle empty sequence, boundaries mid-chunk (5, 22 with Q = 16).
      {"varlen {0,0,5,5,22,40} H=2 G=1 N=6 P=4 S=2", mk(1, 40, 2, 1, 6, 4, 2, {0, 0, 5, 5, 22, 40}), allq},
      // ADT = -inf resets (alpha = 0) at tokens 0, 6 (mid-chunk for Q = 16), 16 (a chunk start), 35.
      {"resets B=2 T=37 H=2 G=1 N=8 P=5 S=3", mk(2, 37, 2, 1, 8, 5, 3), allq, true},
      // Longer, full rotation (S = N/2), several chunks of the kernels' sizes.
      {"B=1 T=300 H=2 G=1 N=16 P=8 S=8", mk(1, 300, 2, 1, 16, 8, 8), {16, 64, 0}},
      // Resets inside a varlen sequence ([3, 30): its first token, local tokens 9 and 17).
      {"resets varlen {0,3,3,30} H=2 G=1 N=6 P=3 S=1", mk(1, 30, 2, 1, 6, 3, 1, {0, 3, 3, 30}), {1, 2, 3, 16, 0},
       true},
  };
  uint64_t seed = 100;
  for (const Cfg& cfg : cfgs) {
    for (int64_t q0 : cfg.qs) {
      for (int mode = 0; mode < 8; ++mode) {  // bit 0 D, bit 1 Z, bit 2 input states
        SisoParams p = cfg.p;
        p.chunk_size = q0 == 0 ? p.T : q0;
        const InOpts o{.d = (mode & 1) != 0, .z = (mode & 2) != 0, .states = (mode & 4) != 0 && p.S > 0};
        if ((mode & 4) && p.S == 0) continue;
        SisoInputs in = make_inputs(p, ++seed, o);
        if (cfg.resets) {
          if (p.cu_seqlens.empty()) {
            set_adt(p, in, 0, 0, 0, -INFINITY);
            set_adt(p, in, 0, 1, 6, -INFINITY);
            set_adt(p, in, 1, 0, 16, -INFINITY);
            set_adt(p, in, 1, 1, 35, -INFINITY);
            set_adt(p, in, 0, 0, 6, -INFINITY);
          } else {
            set_adt(p, in, 0, 0, 3 + 9, -INFINITY);
            set_adt(p, in, 0, 1, 3, -INFINITY);
            set_adt(p, in, 0, 1, 20, -INFINITY);
          }
        }
        // Full final-state gradients, or d_out only (mode 0 and 5 of each chunk size).
        const unsigned mask = (mode == 0 || mode == 5) ? 0u : 0xFu;
        const Upstream u = make_upstream(p, ++seed, mask);
        const std::string label = std::string(cfg.name) + " Q=" + std::to_string(p.chunk_size) +
                                  " D=" + std::to_string(o.d) + " Z=" + std::to_string(o.z) +
                                  " states=" + std::to_string(o.states) + " final grads=" + std::to_string(mask != 0);
        compare_forms(label, backward_siso_recurrent(p, in, u.d_out, u.df), backward_siso_chunked(p, in, u.d_out, u.df),
                      worst);
      }
    }
  }
  worst.print("mamba3 siso backward chunked vs recurrent");
}

TEST_CASE("mamba3 siso backward: chunked form (b), adjoint of the chunk-start states", "[cpu][L0]") {
  // Layout [NS, H, NCmax, P, N]; the adjoint at chunk 0 of every non-empty sequence is exactly the
  // initial SSM state's gradient; chunks a sequence does not have are 0.
  SisoParams p = base(1, 40, 2, 1, 6, 4, 2, 8);
  p.cu_seqlens = {0, 0, 5, 5, 22, 40};
  const SisoInputs in = make_inputs(p, 300, {.d = true, .z = true, .states = true});
  const Upstream u = make_upstream(p, 301);
  const Grads g = backward_siso_chunked(p, in, u.d_out, u.df);
  {  // deterministic (parallel over (sequence, group), fixed summation order): bitwise repeatable
    const Grads g2 = backward_siso_chunked(p, in, u.d_out, u.df);
    check_same_grads(g, g2);
  }
  const int64_t NS = 5, H = p.H, PN = p.P * p.N;
  REQUIRE(g.dchunk_count == 3);  // ceil(18 / 8)
  REQUIRE(static_cast<int64_t>(g.dchunk_states.size()) == NS * H * 3 * PN);
  for (int64_t n = 0; n < NS; ++n) {
    const int64_t len = p.cu_seqlens[n + 1] - p.cu_seqlens[n], nc = (len + 7) / 8;
    INFO("sequence " << n << " len " << len);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < 3; ++c) {
        const double* ds = &g.dchunk_states[((n * H + h) * 3 + c) * PN];
        const double* d0 = &g.dssm_state[(n * H + h) * PN];
        double mx = 0;
        for (int64_t i = 0; i < PN; ++i) mx = std::max(mx, std::fabs(ds[i]));
        if (c >= nc) {
          CHECK(mx == 0.0);
        } else {
          CHECK(mx > 0.0);
          if (c == 0)
            for (int64_t i = 0; i < PN; ++i) CHECK(ds[i] == d0[i]);
        }
      }
    }
  }

  // Every chunk-start adjoint against form (a) on the suffix problem: for chunk c (first token t0),
  // run the step forward on tokens [0, t0) and restart from its final states at t0. The suffix
  // problem's folded start state is S_c, so form (a)'s d ssm_state there is dL/dS_c.
  for (int64_t Q : {3, 7, 16}) {
    const SisoParams pf = base(1, 37, 2, 2, 8, 5, 3, Q);
    SisoInputs in0 = make_inputs(pf, 310 + Q, {.d = true, .z = true, .states = true});
    // A reset at the first token of chunk c_r on head 1: the adjoint of that chunk's start state is 0.
    const int64_t t_r = Q == 16 ? 16 : 21, c_r = t_r / Q;
    set_adt(pf, in0, 0, 1, t_r, -INFINITY);
    const Upstream u0 = make_upstream(pf, 320 + Q);
    const Grads gb = backward_siso_chunked(pf, in0, u0.d_out, u0.df);
    const int64_t nch = (pf.T + Q - 1) / Q, PN5 = pf.P * pf.N, H5 = pf.H;
    REQUIRE(gb.dchunk_count == nch);
    double worst_c = 0;
    for (int64_t c = 1; c < nch; ++c) {
      const int64_t t0 = c * Q, T2 = pf.T - t0;
      SisoParams pa = pf, ps = pf;
      pa.T = t0;
      ps.T = T2;
      auto split = [&](int64_t from, int64_t cnt) { return cut_tokens(in0, 1, pf.T, 0, 1, from, cnt); };
      const SisoInputs ia = split(0, t0);
      const Result ra = siso_step(pa, ia);
      SisoInputs is = split(t0, T2);
      is.angle_state = ra.final_angle;
      is.ssm_state = ra.final_ssm;
      is.k_state = ra.final_k;
      is.v_state = ra.final_v;
      Upstream us = u0;
      us.d_out = cut_bt(u0.d_out, 1, pf.T, 0, 1, t0, T2);
      const Grads gs = backward_siso_recurrent(ps, is, us.d_out, us.df);
      for (int64_t h = 0; h < H5; ++h) {
        const std::vector<double> dc(gb.dchunk_states.begin() + (h * nch + c) * PN5,
                                     gb.dchunk_states.begin() + (h * nch + c + 1) * PN5);
        const std::vector<double> ds(gs.dssm_state.begin() + h * PN5, gs.dssm_state.begin() + (h + 1) * PN5);
        INFO("Q=" << Q << " chunk " << c << " head " << h);
        const double r = agreement_rel(dc, ds);
        CHECK(r <= kFormAgreement);
        worst_c = std::max(worst_c, r);
        if (h == 1 && c == c_r) {
          for (double e : dc) CHECK(e == 0.0);
        } else {
          CHECK(max_abs(dc) > 1e-3);
        }
      }
    }
    std::printf("mamba3 siso backward chunked: dchunk_states vs recurrent suffix d ssm_state, Q=%lld: worst %.2e\n",
                static_cast<long long>(Q), worst_c);
  }
}

TEST_CASE("mamba3 siso backward: chunked form (b) refuses malformed upstream gradients", "[cpu][L0]") {
  const SisoParams p = base(2, 3, 1, 1, 4, 2, 2, 2);
  check_refusals([&](const auto& i, const auto& d, const auto& f) { return backward_siso_chunked(p, i, d, f); },
                 make_inputs(p, 40, {.d = true, .z = true, .states = true}), make_upstream(p, 41));
}

TEST_CASE("mamba3 siso chunked backward: each mutant changes what it targets", "[cpu][L0]") {
  // Two sequences of several chunks with input states: the carry, its decay and the shifted
  // trapezoid term all matter. no_shifted_term_grad changes dtrap / ddt (and the input-state
  // gradients) but not dq / dk / dv, whose terms read the weights, not their adjoints.
  const SisoParams p = two_sequences();
  const SisoInputs in = make_inputs(p, 700, {.d = true, .z = true, .states = true});
  const Upstream u = make_upstream(p, 701);
  check_bwd_mutants([&](const ChunkedBackwardOptions& o) { return backward_siso_chunked(p, in, u.d_out, u.df, o); },
                    kAllSisoBwdMutants);
}

TEST_CASE("mamba3 backward_siso_bound holds every gradient element", "[cpu][L0]") {
  // A sum of absolute terms is >= the absolute value of their sum; and the bound is not slack by
  // orders of magnitude (its largest element within 100x of the gradient's largest).
  const SisoParams p = two_sequences();
  const SisoInputs in = make_inputs(p, 800, {.d = true, .z = true, .states = true});
  const Upstream u = make_upstream(p, 801);
  const Grads g = backward_siso_recurrent(p, in, u.d_out, u.df);
  const Grads b = backward_siso_bound(p, in, u.d_out, u.df);
  check_bound_holds(g, b, 100);
}
