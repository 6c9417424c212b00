// Private to reference/mamba3/: what the three backward oracles share (mamba3_backward.cpp:
// SISO recurrent, mamba3_backward_chunked.cpp: SISO chunked, mamba3_backward_mimo.cpp: MIMO).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "reference/core/check.h"
#include "reference/mamba3/mamba3_backward.h"
#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3::detail {

// Throws InputError (naming `who` and the tensor) unless x holds n finite values (or none, where
// allowed: an absent upstream gradient is 0).
inline void check_upstream(const char* who, const std::vector<double>& x, int64_t n, bool allow_empty,
                           const char* name) {
  ASSAY_INPUT_CHECK((allow_empty && x.empty()) || static_cast<int64_t>(x.size()) == n,
                    "{}: {} has {} values, expected {}{}", who, name, x.size(), n, allow_empty ? " or none" : "");
  for (double e : x) ASSAY_INPUT_CHECK(std::isfinite(e), "{}: {} not finite", who, name);
}

// Every upstream gradient of a SISO backward (both forms), checked by check_upstream.
inline void check_siso_upstream(const char* who, const Problem& pb, const std::vector<double>& d_out,
                                const SisoFinalGrads& dfinal) {
  const int64_t NS = pb.NS(), H = pb.H, N = pb.N, P = pb.P, S = pb.S;
  check_upstream(who, d_out, pb.B * pb.T * H * P, false, "d_out");
  check_upstream(who, dfinal.d_angle, NS * H * S, true, "d_angle (final_angle)");
  check_upstream(who, dfinal.d_ssm, NS * H * P * N, true, "d_ssm (final_ssm)");
  check_upstream(who, dfinal.d_k, NS * H * N, true, "d_k (final_k)");
  check_upstream(who, dfinal.d_v, NS * H * P, true, "d_v (final_v)");
}

// One token of the step forward's angle recurrence, recomputed bit-identically by the recurrent
// backwards: the compensated running sum (hi, lo) of theta = pi tanh(Angles) DT, reduced mod 2pi.
inline double advance_angle(double& hi, double& lo, double theta) {
  double sum, e;
  two_sum(hi, theta, sum, e);
  hi = sum;
  lo += e;
  return reduce_2pi(hi, lo);
}

// The trapezoid coefficients of one token: lam = sigmoid(Trap), alpha = exp(ADT),
// beta = (1 - lam) DT alpha (the shifted term), gamma = lam DT (the current term).
struct TrapCoef {
  double lam, alpha, beta, gamma;
};
inline TrapCoef trap_coef(double trap, double adt, double dt) {
  TrapCoef c;
  c.lam = 1.0 / (1.0 + std::exp(-trap));
  c.alpha = std::exp(adt);
  c.beta = (1.0 - c.lam) * dt * c.alpha;
  c.gamma = c.lam * dt;
  return c;
}

// SISO gradients sized like their inputs, all zero (empty where the input is).
inline SisoGrads zero_siso_grads(const SisoInputs& in) {
  SisoGrads gr;
  for (auto [g, x] : {std::pair{&gr.dq, &in.q}, {&gr.dk, &in.k}, {&gr.dv, &in.v}, {&gr.dadt, &in.adt},
                      {&gr.ddt, &in.dt}, {&gr.dtrap, &in.trap}, {&gr.dq_bias, &in.q_bias},
                      {&gr.dk_bias, &in.k_bias}, {&gr.dangles, &in.angles}, {&gr.dd, &in.d}, {&gr.dz, &in.z},
                      {&gr.dangle_state, &in.angle_state}, {&gr.dssm_state, &in.ssm_state},
                      {&gr.dk_state, &in.k_state}, {&gr.dv_state, &in.v_state}})
    g->assign(x->size(), 0.0);
  return gr;
}

// Sizes gr.dchunk_states [NS, H, NCmax, P, N] (zero) and gr.dchunk_count = NCmax, the most chunks
// of any sequence; returns NCmax.
inline int64_t alloc_dchunk_states(const Problem& pb, SisoGrads& gr) {
  int64_t ncmax = 0;
  for (int64_t n = 0; n < pb.NS(); ++n) ncmax = std::max(ncmax, pb.chunk_off[n + 1] - pb.chunk_off[n]);
  gr.dchunk_count = ncmax;
  check_memory(pb.NS() * pb.H * ncmax * pb.P * pb.N, 8, "mamba3 backward: dchunk_states");
  gr.dchunk_states.assign(pb.NS() * pb.H * ncmax * pb.P * pb.N, 0.0);
  return ncmax;
}

}  // namespace assay::mamba3::detail
