// Gated delta rule backward oracle: see gated_delta_backward.h for the contract and the adjoint
// equations.
#include "reference/gated_delta/gated_delta_backward.h"
#include "reference/gated_delta/gated_delta_backward_internal.h"
#include "reference/gated_delta/gated_delta_state.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "reference/core/check.h"

namespace assay::gated_delta {

namespace {

// State slice in the stored layout <-> internal [K][V] row-major (gated_delta_state.h).
constexpr auto load = detail::load_state;
constexpr auto store = detail::store_state;

// The forward step's state update (same operations, same order as gated_delta.cpp step(), Mutant::none):
// S <- exp(g) S; m = S^T k; delta = beta (v - m); S <- S + k delta^T.
void fwd_step(double* S, int64_t K, int64_t V, double g, double beta, const double* k, const double* v,
              double* m) {
  const double alpha = std::exp(g);
  for (int64_t x = 0; x < K * V; ++x) S[x] = alpha * S[x];
  for (int64_t j = 0; j < V; ++j) m[j] = 0;
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) m[j] += S[i * V + j] * k[i];
  for (int64_t j = 0; j < V; ++j) m[j] = beta * (v[j] - m[j]);
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S[i * V + j] += k[i] * m[j];
}

double softplus_grad(double x) { return x > 20.0 ? 1.0 : sigmoid(x); }

}  // namespace

namespace detail {

BwdPrep prepare_backward(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                         const std::vector<double>& dfinal_state,
                         Result (*forward)(const Params&, const Inputs&)) {
  ASSAY_INPUT_CHECK(p.mutant == Mutant::none, "gated_delta backward: only Mutant::none is differentiated (got {})",
                    name(p.mutant));
  BwdPrep P;
  // The forward validates every input and gives the checkpoints (chunk-start states).
  P.fw = forward(p, in);
  P.B = p.B, P.T = p.T, P.H = p.H, P.HV = p.HV, P.K = p.K, P.V = p.V, P.KV = p.K * p.V, P.G = p.HV / p.H;
  P.C = p.chunk_size, P.Nseq = P.fw.num_seqs;
  P.scale = p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(P.K));
  const int64_t B = P.B, T = P.T, H = P.H, HV = P.HV, K = P.K, V = P.V, KV = P.KV, Nseq = P.Nseq;
  ASSAY_INPUT_CHECK(static_cast<int64_t>(d_o.size()) == B * T * HV * V,
                    "gated_delta backward: do has {} values, expected B*T*HV*V = {}", d_o.size(), B * T * HV * V);
  ASSAY_INPUT_CHECK(dfinal_state.empty() || static_cast<int64_t>(dfinal_state.size()) == Nseq * HV * KV,
                    "gated_delta backward: dfinal_state has {} values, expected Nseq*HV*K*V = {} or none",
                    dfinal_state.size(), Nseq * HV * KV);
  for (double e : d_o) ASSAY_INPUT_CHECK(std::isfinite(e), "gated_delta backward: do not finite");
  for (double e : dfinal_state) ASSAY_INPUT_CHECK(std::isfinite(e), "gated_delta backward: dfinal_state not finite");

  // Elementwise preprocessing, as the forward (validated above).
  const int64_t BT = B * T;
  P.qh = in.q, P.kh = in.k, P.rq.assign(BT * H, 1.0), P.rk.assign(BT * H, 1.0);
  if (p.qk_l2norm)
    for (int64_t r = 0; r < BT * H; ++r) {
      P.rq[r] = l2norm_scale(in.q.data() + r * K, K, p.l2norm_eps);
      P.rk[r] = l2norm_scale(in.k.data() + r * K, K, p.l2norm_eps);
      for (int64_t i = 0; i < K; ++i) P.qh[r * K + i] *= P.rq[r], P.kh[r * K + i] *= P.rk[r];
    }
  P.ge.assign(BT * HV, 0.0), P.be.assign(BT * HV, 0.0);
  for (int64_t i = 0; i < BT * HV; ++i) {
    P.be[i] = beta_value(p.beta, in.beta[i]);
    const int64_t hv = i % HV;
    if (p.gate == GateMode::log) P.ge[i] = in.g[i];
    if (p.gate == GateMode::in_kernel)
      P.ge[i] = gate_in_kernel(in.g[i], in.A_log[hv], in.dt_bias.empty() ? 0.0 : in.dt_bias[hv]);
  }

  // Sequences: (row b, first token t0, length len), slot n.
  if (p.cu_seqlens.empty())
    for (int64_t b = 0; b < B; ++b) P.seqs.push_back({b, 0, T});
  else
    for (int64_t n = 0; n < Nseq; ++n)
      P.seqs.push_back({0, p.cu_seqlens[n], p.cu_seqlens[n + 1] - p.cu_seqlens[n]});
  return P;
}

RawGrads zero_raw_grads(const BwdPrep& P, const Inputs& in) {
  const int64_t BT = P.B * P.T;
  RawGrads r;
  r.dqh.assign(BT * P.H * P.K, 0.0);
  r.dkh.assign(BT * P.H * P.K, 0.0);
  r.dv.assign(BT * P.HV * P.V, 0.0);
  r.dge.assign(BT * P.HV, 0.0);
  r.dbe.assign(BT * P.HV, 0.0);
  if (!in.initial_state.empty()) r.dinitial_state.assign(P.Nseq * P.HV * P.KV, 0.0);
  r.dh.assign(P.fw.chunk_offsets.back() * P.HV * P.KV, 0.0);
  return r;
}

Grads finish_backward(const Params& p, const Inputs& in, const BwdPrep& P, RawGrads&& raw, bool magnitude) {
  const int64_t BT = P.B * P.T, H = P.H, HV = P.HV, K = P.K;
  const std::vector<double>&dqh = raw.dqh, &dkh = raw.dkh, &dge = raw.dge, &dbe = raw.dbe;
  const std::vector<double>&qh = P.qh, &kh = P.kh, &rq = P.rq, &rk = P.rk, &ge = P.ge;
  Grads gr;
  gr.dv = std::move(raw.dv);
  gr.dinitial_state = std::move(raw.dinitial_state);
  gr.dh = std::move(raw.dh);
  // l2norm chain: dx = r (dhat - hat (hat . dhat)).
  gr.dq = dqh;
  gr.dk = dkh;
  if (p.qk_l2norm && magnitude)  // r (|dhat| + |hat| (|hat| . |dhat|)); the raw gradients are >= 0
    for (int64_t r = 0; r < BT * H; ++r) {
      double dq_dot = 0, dk_dot = 0;
      for (int64_t i = 0; i < K; ++i) {
        dq_dot += std::abs(qh[r * K + i]) * dqh[r * K + i];
        dk_dot += std::abs(kh[r * K + i]) * dkh[r * K + i];
      }
      for (int64_t i = 0; i < K; ++i) {
        gr.dq[r * K + i] = rq[r] * (dqh[r * K + i] + std::abs(qh[r * K + i]) * dq_dot);
        gr.dk[r * K + i] = rk[r] * (dkh[r * K + i] + std::abs(kh[r * K + i]) * dk_dot);
      }
    }
  else if (p.qk_l2norm)
    for (int64_t r = 0; r < BT * H; ++r) {
      double dq_dot = 0, dk_dot = 0;
      for (int64_t i = 0; i < K; ++i) {
        dq_dot += qh[r * K + i] * dqh[r * K + i];
        dk_dot += kh[r * K + i] * dkh[r * K + i];
      }
      for (int64_t i = 0; i < K; ++i) {
        gr.dq[r * K + i] = rq[r] * (dqh[r * K + i] - qh[r * K + i] * dq_dot);
        gr.dk[r * K + i] = rk[r] * (dkh[r * K + i] - kh[r * K + i] * dk_dot);
      }
    }

  // Gate chain.
  if (p.gate == GateMode::log) gr.dg = dge;
  if (p.gate == GateMode::in_kernel) {
    gr.dg.assign(BT * HV, 0.0);
    gr.dA_log.assign(HV, 0.0);
    if (!in.dt_bias.empty()) gr.ddt_bias.assign(HV, 0.0);
    for (int64_t i = 0; i < BT * HV; ++i) {
      const int64_t hv = i % HV;
      const double u = in.g[i] + (in.dt_bias.empty() ? 0.0 : in.dt_bias[hv]);
      const double da = dge[i] * (magnitude ? std::exp(in.A_log[hv]) : -std::exp(in.A_log[hv])) * softplus_grad(u);
      gr.dg[i] = da;
      if (!gr.ddt_bias.empty()) gr.ddt_bias[hv] += da;
      gr.dA_log[hv] += dge[i] * (magnitude ? std::abs(ge[i]) : ge[i]);
    }
  }

  // Beta chain.
  gr.dbeta.assign(BT * HV, 0.0);
  for (int64_t i = 0; i < BT * HV; ++i) {
    if (p.beta == BetaMode::given) {
      gr.dbeta[i] = dbe[i];
    } else {
      const double sg = sigmoid(in.beta[i]);
      gr.dbeta[i] = dbe[i] * (p.beta == BetaMode::two_sigmoid ? 2.0 : 1.0) * sg * (1.0 - sg);
    }
  }
  return gr;
}

}  // namespace detail

namespace {

// The reverse scan of backward_recurrent (Mag = false: the adjoint itself) and of backward_bound
// (Mag = true). The bound scan runs the exact adjoint alongside a magnitude M of the state adjoint:
//   M starts at |dfinal_state|; per token (reverse)  M += |scale| |q| |do|  (the output's terms),
//   M_{t-1} = e^g (M + |k| |beta| (sum_r |dS[r, .]| |k_r|))  (the rank-1 correction's terms, from the
//   exact adjoint dS), so the delta transition (I - beta k k^T), a contraction in the 2-norm for
//   beta |k|^2 <= 2, is modelled as 1 and errors accumulate at most linearly along the sequence
//   (a sum of absolute terms through the transition itself would grow like (1 + beta |k|^2)^T).
// Each gradient's bound is the sum of the absolute terms of its last reduction, with M standing for
// the state adjoint wherever a gradient reads it (dk, dv, dbeta, dg, dh, dinitial_state):
//   dq: |scale| sum_j |S_t[r,j]| |do_j|;  dk: sum_j M[r,j] |delta_j| + sum_j |S'[r,j]| |beta| ddM_j;
//   dv: |beta| ddM (ddM_j = sum_r M[r,j] |k_r|);  dbeta: sum_j ddM_j (|v_j| + sum_r |S'[r,j]| |k_r|);
//   dg: sum |S'| (M + |k| |beta| ddS) (ddS from the exact adjoint).
template <bool Mag>
detail::RawGrads recurrent_scan(const Params& p, const Inputs& in, const detail::BwdPrep& P,
                                const std::vector<double>& d_o, const std::vector<double>& dfinal_state) {
  const int64_t T = P.T, H = P.H, HV = P.HV, K = P.K, V = P.V, KV = P.KV, G = P.G, C = P.C, Nseq = P.Nseq;
  const double scale = P.scale;
  const Result& fw = P.fw;
  const auto& seqs = P.seqs;
  const std::vector<double>&qh = P.qh, &kh = P.kh, &ge = P.ge, &be = P.be;
  detail::RawGrads raw = detail::zero_raw_grads(P, in);
  std::vector<double>&dqh = raw.dqh, &dkh = raw.dkh, &dge = raw.dge, &dbe = raw.dbe;
  std::vector<double>& dv = raw.dv;

  // One job per (sequence, q/k head): its HV/H value heads are visited in turn, so the dq / dk
  // accumulation over the value heads of a group never races.
  const int64_t jobs = Nseq * H;
#pragma omp parallel for schedule(dynamic)
  for (int64_t job = 0; job < jobs; ++job) {
    const int64_t n = job / H, h = job % H;
    const detail::BwdSeq& s = seqs[n];
    std::vector<double> dS(KV), Sp(KV), St(KV), dSp(KV), m(V), delta(V), dd(V), dm(V), tmp(V);
    std::vector<double> M(Mag ? KV : 0), ddM(Mag ? V : 0), ddS(Mag ? V : 0);  // bound scan only
    std::vector<double> seg;  // S_{t-1} for each token of the current chunk, [L][K][V]
    for (int64_t hv = h * G; hv < (h + 1) * G; ++hv) {
      if (dfinal_state.empty())
        std::fill(dS.begin(), dS.end(), 0.0);
      else
        load(dfinal_state.data() + (n * HV + hv) * KV, p.state_layout, K, V, dS.data());
      if constexpr (Mag)
        for (int64_t x = 0; x < KV; ++x) M[x] = std::abs(dS[x]);
      const int64_t nchunks = (s.len + C - 1) / C;
      for (int64_t c = nchunks - 1; c >= 0; --c) {
        const int64_t c0 = c * C, L = std::min(C, s.len - c0);
        // Recompute the chunk's states from its checkpoint.
        seg.assign((L + 1) * KV, 0.0);
        load(fw.chunk_states.data() + ((fw.chunk_offsets[n] + c) * HV + hv) * KV, p.state_layout, K, V, seg.data());
        for (int64_t i = 0; i + 1 < L; ++i) {
          std::copy(seg.begin() + i * KV, seg.begin() + (i + 1) * KV, seg.begin() + (i + 1) * KV);
          const int64_t tok = s.b * T + s.t0 + c0 + i, tv = tok * HV + hv;
          fwd_step(seg.data() + (i + 1) * KV, K, V, ge[tv], be[tv], kh.data() + (tok * H + h) * K,
                   in.v.data() + tv * V, tmp.data());
        }
        for (int64_t i = L - 1; i >= 0; --i) {
          const int64_t tok = s.b * T + s.t0 + c0 + i, tv = tok * HV + hv, qk = (tok * H + h) * K;
          const double* Sprev = seg.data() + i * KV;
          const double* q = qh.data() + qk;
          const double* k = kh.data() + qk;
          const double* v = in.v.data() + tv * V;
          const double* dout = d_o.data() + tv * V;
          const double a = std::exp(ge[tv]), b = be[tv];
          // Forward quantities of this token.
          for (int64_t x = 0; x < KV; ++x) Sp[x] = a * Sprev[x];
          for (int64_t j = 0; j < V; ++j) m[j] = 0;
          for (int64_t r = 0; r < K; ++r)
            for (int64_t j = 0; j < V; ++j) m[j] += Sp[r * V + j] * k[r];
          for (int64_t j = 0; j < V; ++j) delta[j] = b * (v[j] - m[j]);
          for (int64_t r = 0; r < K; ++r)
            for (int64_t j = 0; j < V; ++j) St[r * V + j] = Sp[r * V + j] + k[r] * delta[j];
          // o = scale S_t^T q.
          for (int64_t r = 0; r < K; ++r) {
            double acc = 0;
            for (int64_t j = 0; j < V; ++j) {
              if constexpr (Mag) {
                acc += std::abs(St[r * V + j] * dout[j]);
                M[r * V + j] += std::abs(scale * q[r] * dout[j]);
              } else {
                acc += St[r * V + j] * dout[j];
              }
              dS[r * V + j] += scale * q[r] * dout[j];
            }
            dqh[qk + r] += Mag ? std::abs(scale) * acc : scale * acc;
          }
          // S_t = S' + k delta^T.
          for (int64_t j = 0; j < V; ++j) dd[j] = 0;
          if constexpr (Mag)
            for (int64_t j = 0; j < V; ++j) ddM[j] = 0, ddS[j] = 0;
          for (int64_t r = 0; r < K; ++r) {
            double acc = 0;
            for (int64_t j = 0; j < V; ++j) {
              if constexpr (Mag) {
                acc += M[r * V + j] * std::abs(delta[j]);
                ddM[j] += M[r * V + j] * std::abs(k[r]);
                ddS[j] += std::abs(dS[r * V + j] * k[r]);
              } else {
                acc += dS[r * V + j] * delta[j];
              }
              dd[j] += dS[r * V + j] * k[r];
            }
            dkh[qk + r] += acc;
          }
          // delta = beta (v - m).
          double db = 0;
          for (int64_t j = 0; j < V; ++j) {
            if constexpr (Mag) {
              double mm = 0;  // sum_r |S'[r, j]| |k_r|
              for (int64_t r = 0; r < K; ++r) mm += std::abs(Sp[r * V + j] * k[r]);
              dv[tv * V + j] = std::abs(b) * ddM[j];
              db += ddM[j] * (std::abs(v[j]) + mm);
            } else {
              dv[tv * V + j] = b * dd[j];
              db += dd[j] * (v[j] - m[j]);
            }
            dm[j] = -b * dd[j];
          }
          dbe[tv] = db;
          // m = S'^T k.
          for (int64_t r = 0; r < K; ++r) {
            double acc = 0;
            for (int64_t j = 0; j < V; ++j) {
              dSp[r * V + j] = dS[r * V + j] + k[r] * dm[j];
              if constexpr (Mag) {
                acc += std::abs(Sp[r * V + j] * b) * ddM[j];
                M[r * V + j] += std::abs(k[r] * b) * ddS[j];
              } else {
                acc += Sp[r * V + j] * dm[j];
              }
            }
            dkh[qk + r] += acc;
          }
          // S' = exp(g) S_{t-1}.
          double dg = 0;
          for (int64_t x = 0; x < KV; ++x) {
            if constexpr (Mag) {
              dg += M[x] * std::abs(Sp[x]);
              M[x] *= a;
            } else {
              dg += dSp[x] * Sp[x];
            }
            dS[x] = a * dSp[x];
          }
          dge[tv] = dg;
        }
        store(Mag ? M.data() : dS.data(), p.state_layout, K, V, raw.dh.data() + ((fw.chunk_offsets[n] + c) * HV + hv) * KV);
      }
      if (!raw.dinitial_state.empty())
        store(Mag ? M.data() : dS.data(), p.state_layout, K, V, raw.dinitial_state.data() + (n * HV + hv) * KV);
    }
  }
  return raw;
}

}  // namespace

Grads backward_recurrent(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                         const std::vector<double>& dfinal_state) {
  const detail::BwdPrep P = detail::prepare_backward(p, in, d_o, dfinal_state, &recurrent);
  detail::RawGrads raw = recurrent_scan<false>(p, in, P, d_o, dfinal_state);
  return detail::finish_backward(p, in, P, std::move(raw));
}

Grads backward_bound(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                     const std::vector<double>& dfinal_state) {
  const detail::BwdPrep P = detail::prepare_backward(p, in, d_o, dfinal_state, &recurrent);
  detail::RawGrads raw = recurrent_scan<true>(p, in, P, d_o, dfinal_state);
  return detail::finish_backward(p, in, P, std::move(raw), /*magnitude=*/true);
}

std::string_view bwd_mutant_name(BwdMutant m) {
  switch (m) {
    case BwdMutant::none: return "none";
    case BwdMutant::adjoint_no_decay: return "bwd_adjoint_no_decay";
    case BwdMutant::no_adjoint_carry: return "bwd_no_adjoint_carry";
    case BwdMutant::dg_forward_cumsum: return "bwd_dg_forward_cumsum";
    case BwdMutant::dbeta_wrong_residual: return "bwd_dbeta_wrong_residual";
    case BwdMutant::adjoint_crosses_reset: return "bwd_adjoint_crosses_reset";
  }
  return "?";
}

}  // namespace assay::gated_delta
