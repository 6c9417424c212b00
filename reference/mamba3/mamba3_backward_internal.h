// Private to reference/mamba3/: what the backward oracles share (mamba3_backward.cpp: the recurrent
// form, mamba3_backward_chunked.cpp: the chunked form; each one implementation for SISO and MIMO).
// The chunked helpers at the end (per-token scalars, angles, the decay and angle adjoints) are
// written for the chunked form; the recurrent form uses the angle advance and the trapezoid
// coefficients.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
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

// Every upstream gradient of a backward (either form, SISO or MIMO), checked by check_upstream:
// d_out like out (MIMO without Phi keeps the rank axis), the final-state gradients like the final
// states (SISO: R = 1).
inline void check_upstream(const char* who, const Problem& pb, const std::vector<double>& d_out,
                           const FinalGrads& dfinal) {
  const int64_t NS = pb.NS(), H = pb.H, N = pb.N, P = pb.P, S = pb.S, R = pb.R;
  check_upstream(who, d_out, pb.out_size(), false, "d_out");
  check_upstream(who, dfinal.d_angle, NS * H * S, true, "d_angle (final_angle)");
  check_upstream(who, dfinal.d_ssm, NS * H * P * N, true, "d_ssm (final_ssm)");
  check_upstream(who, dfinal.d_k, NS * R * H * N, true, "d_k (final_k)");
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

// Gradients sized like their inputs, all zero (empty where the input is). In: SisoInputs or
// MimoInputs (the MIMO-only gradients stay empty for SISO).
template <class In>
Grads zero_grads(const In& in) {
  Grads gr;
  for (auto [g, x] : {std::pair{&gr.dq, &in.q}, {&gr.dk, &in.k}, {&gr.dv, &in.v}, {&gr.dadt, &in.adt},
                      {&gr.ddt, &in.dt}, {&gr.dtrap, &in.trap}, {&gr.dq_bias, &in.q_bias},
                      {&gr.dk_bias, &in.k_bias}, {&gr.dangles, &in.angles}, {&gr.dd, &in.d}, {&gr.dz, &in.z},
                      {&gr.dangle_state, &in.angle_state}, {&gr.dssm_state, &in.ssm_state},
                      {&gr.dk_state, &in.k_state}, {&gr.dv_state, &in.v_state}})
    g->assign(x->size(), 0.0);
  if constexpr (std::is_same_v<In, MimoInputs>)
    for (auto [g, x] : {std::pair{&gr.dpsi, &in.psi}, {&gr.dzeta, &in.zeta}, {&gr.dphi, &in.phi},
                        {&gr.dnorm_weight, &in.norm_weight}})
      g->assign(x->size(), 0.0);
  return gr;
}

// Sizes gr.dchunk_states [NS, H, NCmax, P, N] (zero) and gr.dchunk_count = NCmax, the most chunks
// of any sequence; returns NCmax.
inline int64_t alloc_dchunk_states(const Problem& pb, Grads& gr) {
  int64_t ncmax = 0;
  for (int64_t n = 0; n < pb.NS(); ++n) ncmax = std::max(ncmax, pb.chunk_off[n + 1] - pb.chunk_off[n]);
  gr.dchunk_count = ncmax;
  check_memory(pb.NS() * pb.H * ncmax * pb.P * pb.N, 8, "mamba3 backward: dchunk_states");
  gr.dchunk_states.assign(pb.NS() * pb.H * ncmax * pb.P * pb.N, 0.0);
  return ncmax;
}

// ---- Shared by the chunked backwards (form (b), SISO and MIMO) ----

inline double sigmoid_tanh(double x) { return 0.5 * (1.0 + std::tanh(0.5 * x)); }

// Per-token scalars of one (sequence, head): ADT, DT, lam = sigmoid(Trap), gam = lam DT (the
// current term's weight), w = (1 - lam) DT (the shifted term's weight, applied to token t-1's
// v k^T) and sc_j = gam_j + w_{j+1} (w_{j+1} = 0 at the sequence end; it crosses chunk ends).
struct TokenScalars {
  std::vector<double> adt, dts, lam, gam, w, sc;
};
inline TokenScalars token_scalars(const Problem& pb, int64_t b, int64_t h, int64_t t0, int64_t len) {
  TokenScalars ts;
  for (auto* v : {&ts.adt, &ts.dts, &ts.lam, &ts.gam, &ts.w, &ts.sc}) v->resize(len);
  for (int64_t tl = 0; tl < len; ++tl) {
    const int64_t i = pb.ibht(b, h, t0 + tl);
    ts.adt[tl] = pb.adt[i];
    ts.dts[tl] = pb.dt[i];
    ts.lam[tl] = sigmoid_tanh(pb.trap[i]);
    ts.gam[tl] = ts.lam[tl] * ts.dts[tl];
    ts.w[tl] = (1.0 - ts.lam[tl]) * ts.dts[tl];
  }
  for (int64_t tl = 0; tl < len; ++tl) ts.sc[tl] = ts.gam[tl] + (tl + 1 < len ? ts.w[tl + 1] : 0.0);
  return ts;
}

// Every token's angle (len x S) as the chunked forward computes it (angle_dt_fwd's structure): a
// chunk-local compensated cumsum of pi tanh(Angles) DT plus the carried unreduced angle, each
// token's angle reduced once.
inline std::vector<double> chunked_angles(const Problem& pb, int64_t n, int64_t h, const std::vector<double>& dts) {
  const int64_t S = pb.S, Q = pb.chunk, b = pb.seq_row[n], t0 = pb.seq_start[n], len = pb.seq_len[n];
  std::vector<double> phi(len * S);
  std::vector<double> st_hi(S, 0.0), st_lo(S, 0.0);
  if (pb.init_ssm)
    for (int64_t s = 0; s < S; ++s) st_hi[s] = pb.init_angle[pb.ist_angle(n, h) + s];
  for (int64_t c0 = 0; c0 < len; c0 += Q) {
    const int64_t L = std::min(Q, len - c0);
    std::vector<double> cs(S, 0.0), cl(S, 0.0);
    for (int64_t tl = c0; tl < c0 + L; ++tl) {
      const int64_t t = t0 + tl;
      for (int64_t s = 0; s < S; ++s) {
        const double th = std::tanh(pb.angles[pb.iang(b, t, h) + s]) * kPi * dts[tl];
        double sum, e;
        two_sum(cs[s], th, sum, e);
        cs[s] = sum;
        cl[s] += e;
        double hi, lo;
        two_sum(st_hi[s], cs[s], hi, lo);
        phi[tl * S + s] = reduce_2pi(hi, lo + cl[s] + st_lo[s]);
      }
    }
    for (int64_t s = 0; s < S; ++s) {
      double hi, lo;
      two_sum(st_hi[s], cs[s], hi, lo);
      st_hi[s] = hi;
      st_lo[s] += lo + cl[s];
    }
  }
  return phi;
}

// The decay adjoint of one chunk of L tokens: dADT_m = sum over every segment holding m, i.e.
// rows i >= m of the chunk-start column (dE_i E_i) and of the columns j < m (dseg(i, j) = Gs(i, j),
// row-major L x L). Written to dadt[0 .. L).
inline void chunk_decay_adjoint(int64_t L, const std::vector<double>& dE, const std::vector<double>& E,
                                const double* Gs, double* dadt) {
  std::vector<double> colsuf(L, 0.0);
  double esuf = 0;
  for (int64_t m = L - 1; m >= 0; --m) {
    esuf += dE[m] * E[m];
    double s = esuf;
    for (int64_t j = 0; j < m; ++j) s += (colsuf[j] += Gs[m * L + j]);
    dadt[m] = s;
  }
}

// Chunked angle adjoint: dtheta_t = the carried angle adjoint (d_angle and the later chunks) plus
// the suffix sum of dphi (len x S, each token's local angle adjoint) within the chunk. Returns the
// carry at the sequence start (d angle_state); dth (len x S) receives dtheta.
inline std::vector<double> chunked_angle_adjoint(const Problem& pb, int64_t n, int64_t h, int64_t len,
                                                 const std::vector<double>& d_angle, const std::vector<double>& dphl,
                                                 std::vector<double>& dth) {
  const int64_t S = pb.S, Q = pb.chunk;
  std::vector<double> carry(S, 0.0);
  dth.assign(len * S, 0.0);
  if (!d_angle.empty())
    for (int64_t s = 0; s < S; ++s) carry[s] = d_angle[pb.ist_angle(n, h) + s];
  const int64_t nch = (len + Q - 1) / Q;
  for (int64_t c = nch - 1; c >= 0; --c) {
    const int64_t c0 = c * Q, L = std::min(Q, len - c0);
    std::vector<double> suf(S, 0.0);
    for (int64_t tl = c0 + L - 1; tl >= c0; --tl)
      for (int64_t s = 0; s < S; ++s) dth[tl * S + s] = carry[s] + (suf[s] += dphl[tl * S + s]);
    for (int64_t s = 0; s < S; ++s) carry[s] += suf[s];
  }
  return carry;
}

// The per-token chains of one (sequence, head) into the gradients:
// dDT = lam dgam + (1 - lam) dw + sum_s dtheta_s pi tanh(A_s), dAngles = dtheta pi (1 - tanh^2) DT,
// dADT, dTrap = DT (dgam - dw) lam (1 - lam).
inline void token_chains(const Problem& pb, int64_t b, int64_t h, int64_t t0, int64_t len, const TokenScalars& ts,
                  const std::vector<double>& dgam, const std::vector<double>& dw, const std::vector<double>& dadt,
                  const std::vector<double>& dth, Grads& gr) {
  const int64_t S = pb.S;
  for (int64_t tl = 0; tl < len; ++tl) {
    const int64_t t = t0 + tl, i = pb.ibht(b, h, t);
    double ddt = ts.lam[tl] * dgam[tl] + (1.0 - ts.lam[tl]) * dw[tl];
    for (int64_t s = 0; s < S; ++s) {
      const double th = std::tanh(pb.angles[pb.iang(b, t, h) + s]);
      gr.dangles[pb.iang(b, t, h) + s] = dth[tl * S + s] * kPi * (1.0 - th * th) * ts.dts[tl];
      ddt += dth[tl * S + s] * kPi * th;
    }
    gr.ddt[i] = ddt;
    gr.dadt[i] = dadt[tl];
    const double dlam = ts.dts[tl] * (dgam[tl] - dw[tl]);
    gr.dtrap[i] = dlam * ts.lam[tl] * (1.0 - ts.lam[tl]);
  }
}

}  // namespace assay::mamba3::detail
