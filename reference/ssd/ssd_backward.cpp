// Mamba-2 SSD backward oracle: see ssd_backward.h for the contract and the adjoint equations.
#include "reference/ssd/ssd_backward.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "reference/ssd/ssd_backward_internal.h"

namespace assay::ssd {

namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double silu(double v) { return v / (1.0 + std::exp(-v)); }  // as the forward's epilogue
double dsilu(double v) {
  const double s = sigmoid(v);
  return s + v * s * (1.0 - s);
}

}  // namespace

namespace detail {

void check_upstream(const Inputs& in, const std::vector<double>& dout,
                    const std::vector<double>& dfinal_states,
                    const std::vector<double>& dvarlen_states) {
  const int64_t Bn = in.batch, T = in.seqlen, H = in.nheads, P = in.headdim, N = in.dstate;
  const int64_t PN = P * N;
  const int64_t S = in.cu_seqlens.empty() ? 0 : static_cast<int64_t>(in.cu_seqlens.size()) - 1;
  ASSAY_INPUT_CHECK(static_cast<int64_t>(dout.size()) == Bn * T * H * P,
                    "ssd backward: dout has {} values, expected B*T*H*P={}", dout.size(),
                    Bn * T * H * P);
  ASSAY_INPUT_CHECK(dfinal_states.empty() ||
                        static_cast<int64_t>(dfinal_states.size()) == Bn * H * PN,
                    "ssd backward: dfinal_states has {} values, expected B*H*P*N={} or none",
                    dfinal_states.size(), Bn * H * PN);
  ASSAY_INPUT_CHECK(dvarlen_states.empty() ||
                        (S > 0 && static_cast<int64_t>(dvarlen_states.size()) == S * H * PN),
                    "ssd backward: dvarlen_states has {} values, expected S*H*P*N={} (needs "
                    "cu_seqlens) or none",
                    dvarlen_states.size(), S * H * PN);
  for (double e : dout) ASSAY_INPUT_CHECK(std::isfinite(e), "ssd backward: dout non-finite");
  for (double e : dfinal_states)
    ASSAY_INPUT_CHECK(std::isfinite(e), "ssd backward: dfinal_states non-finite");
  for (double e : dvarlen_states)
    ASSAY_INPUT_CHECK(std::isfinite(e), "ssd backward: dvarlen_states non-finite");
}

Grads zero_grads(const Inputs& in) {
  const int64_t Bn = in.batch, T = in.seqlen, H = in.nheads, P = in.headdim, G = in.ngroups,
                N = in.dstate;
  Grads gr;
  gr.dx.assign(Bn * T * H * P, 0.0);
  gr.ddt.assign(Bn * T * H, 0.0);
  gr.dA.assign(H, 0.0);
  gr.dB.assign(Bn * T * G * N, 0.0);
  gr.dC.assign(Bn * T * G * N, 0.0);
  if (!in.D.empty()) gr.dD.assign(in.D.size(), 0.0);
  if (!in.z.empty()) gr.dz.assign(Bn * T * H * P, 0.0);
  if (!in.dt_bias.empty()) gr.ddt_bias.assign(H, 0.0);
  if (!in.initial_states.empty()) gr.dinitial_states.assign(Bn * H * P * N, 0.0);
  return gr;
}

std::vector<int64_t> seq_ending_at(const Inputs& in) {
  const int64_t S = in.cu_seqlens.empty() ? 0 : static_cast<int64_t>(in.cu_seqlens.size()) - 1;
  std::vector<int64_t> r(in.seqlen, -1);
  for (int64_t n = 0; n < S; ++n)
    if (in.cu_seqlens[n + 1] > in.cu_seqlens[n]) r[in.cu_seqlens[n + 1] - 1] = n;
  return r;
}

void epilogue_token(const Inputs& in, int64_t h, int64_t ip, const std::vector<double>& dout,
                    const double* y, double* dy, Grads& gr, double* dD_row, bool magnitude) {
  const int64_t P = in.headdim;
  const bool has_D = !in.D.empty(), has_z = !in.z.empty();
  const bool D_per_p = static_cast<int64_t>(in.D.size()) == in.nheads * P;
  const double* xt = &in.x[ip];
  for (int64_t pp = 0; pp < P; ++pp) {
    const double go = dout[ip + pp];
    if (has_z || has_D) {
      const double Dv = has_D ? (D_per_p ? in.D[h * P + pp] : in.D[h]) : 0.0;
      double gate = 1.0;
      if (has_z) {
        const double skip = has_D ? Dv * xt[pp] : 0.0;
        gate = silu(in.z[ip + pp]);
        double dgate = dsilu(in.z[ip + pp]);
        if (magnitude) gate = std::abs(gate), dgate = std::abs(dgate);
        gr.dz[ip + pp] = go * (y[pp] + skip) * dgate;
      }
      dy[pp] = go * gate;
      if (has_D) {
        dD_row[pp] += dy[pp] * xt[pp];
        gr.dx[ip + pp] += Dv * dy[pp];
      }
    } else {
      dy[pp] = go;
    }
  }
}

void finish(const Params& p, const Inputs& in, const std::vector<double>& ddelta,
            const std::vector<double>& dA_part, const std::vector<double>& dD_part, Grads& gr,
            BwdMutant m) {
  const int64_t Bn = in.batch, T = in.seqlen, H = in.nheads, P = in.headdim;
  const bool has_D = !in.D.empty();
  const bool D_per_p = static_cast<int64_t>(in.D.size()) == H * P;
  // Reductions over the batch (serial, fixed order) and the dt chain.
  for (int64_t b = 0; b < Bn; ++b)
    for (int64_t h = 0; h < H; ++h) {
      gr.dA[h] += dA_part[b * H + h];
      if (has_D)
        for (int64_t pp = 0; pp < P; ++pp)
          gr.dD[D_per_p ? h * P + pp : h] += dD_part[(b * H + h) * P + pp];
    }
  for (int64_t i = 0; i < Bn * T * H; ++i) {
    const int64_t h = i % H;
    double v = in.dt[i];
    if (!in.dt_bias.empty()) v += in.dt_bias[h];
    double dv = 1.0, s = v;
    if (p.dt_softplus && v <= 20.0) {
      s = std::log1p(std::exp(v));
      dv = m == BwdMutant::dt_grad_ignores_softplus ? 1.0 : sigmoid(v);
    }
    const bool clamped = m != BwdMutant::dt_grad_ignores_clamp && (s < p.dt_min || s > p.dt_max);
    gr.ddt[i] = clamped ? 0.0 : ddelta[i] * dv;
  }
  if (!in.dt_bias.empty())
    for (int64_t i = 0; i < Bn * T * H; ++i) gr.ddt_bias[i % H] += gr.ddt[i];
}

}  // namespace detail

namespace {

// magnitude = false: the adjoint (backward_recurrent). magnitude = true: the bound form
// (backward_bound), called with absolute-valued inputs and upstream gradients; the only other
// differences are |A| where A multiplies and the gate's |silu|, |silu'|.
Grads recurrent_adjoint(const Params& p, const Inputs& in, const std::vector<double>& dout,
                        const std::vector<double>& dfinal_states,
                        const std::vector<double>& dvarlen_states, bool magnitude) {
  validate(p, in);
  const int64_t Bn = in.batch, T = in.seqlen, H = in.nheads, P = in.headdim, G = in.ngroups,
                N = in.dstate, Q = p.chunk_size;
  const int64_t NC = (T + Q - 1) / Q, PN = P * N, hpg = H / G;
  detail::check_upstream(in, dout, dfinal_states, dvarlen_states);

  const std::vector<double> delta = process_dt(p, in);
  const bool has_D = !in.D.empty(), has_z = !in.z.empty(), has_h0 = !in.initial_states.empty();
  // The prefactor of dDelta's decay term (A, or |A| for the bound; the decays keep A).
  auto a_factor = [&](int64_t h) { return magnitude ? std::abs(in.A[h]) : in.A[h]; };

  Grads gr = detail::zero_grads(in);

  std::vector<double> ddelta(Bn * T * H, 0.0);
  std::vector<double> dA_part(Bn * H, 0.0);                     // per (b, h), reduced below
  std::vector<double> dD_part(has_D ? Bn * H * P : 0, 0.0);     // per (b, h, p)
  const std::vector<int64_t> seq_ending_at = detail::seq_ending_at(in);

  // Tasks (b, g) own disjoint slices of dB / dC (b, t, g) and of dx / ddelta / dz / dh0 (b, h).
#pragma omp parallel for schedule(static)
  for (int64_t bg = 0; bg < Bn * G; ++bg) {
    const int64_t b = bg / G, g = bg % G;
    auto reset_at = [&](int64_t t) {
      if (in.seq_idx.empty()) return false;
      const int64_t prev = t == 0 ? 0 : in.seq_idx[b * T + t - 1];
      return in.seq_idx[b * T + t] != prev;
    };
    std::vector<double> ck(NC * PN, 0.0);   // S after token kQ-1 (k = 0: h0 or 0), before reset
    std::vector<double> St(Q * PN, 0.0);    // states S_t of the current segment
    std::vector<double> dS(PN), dy(P), yt(P);
    for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
      const int64_t bh = b * H + h;
      const double A = in.A[h];
      // Forward with the same operations and order as recurrence_core (bit-identical states).
      auto step = [&](int64_t t, const double* Sin, double* Sout) {
        const bool rs = reset_at(t);
        const double dl = delta[(b * T + t) * H + h];
        const double decay = std::exp(dl * A);
        const double* xt = &in.x[((b * T + t) * H + h) * P];
        const double* Bt = &in.B[((b * T + t) * G + g) * N];
        for (int64_t pp = 0; pp < P; ++pp) {
          const double u = dl * xt[pp];
          for (int64_t n = 0; n < N; ++n) {
            const double sp = rs ? 0.0 : Sin[pp * N + n];
            Sout[pp * N + n] = decay * sp + u * Bt[n];
          }
        }
      };
      {
        std::vector<double> cur(PN, 0.0), nxt(PN);
        if (has_h0) std::copy_n(in.initial_states.begin() + bh * PN, PN, cur.begin());
        for (int64_t t = 0; t < T; ++t) {
          if (t % Q == 0) std::copy(cur.begin(), cur.end(), ck.begin() + (t / Q) * PN);
          step(t, cur.data(), nxt.data());
          std::swap(cur, nxt);
        }
      }
      // Reverse pass.
      if (!dfinal_states.empty())
        std::copy_n(dfinal_states.begin() + bh * PN, PN, dS.begin());
      else
        std::fill(dS.begin(), dS.end(), 0.0);
      for (int64_t k = NC - 1; k >= 0; --k) {
        const int64_t t0 = k * Q, t1 = std::min(T, t0 + Q);
        for (int64_t t = t0; t < t1; ++t)
          step(t, t == t0 ? &ck[k * PN] : &St[(t - t0 - 1) * PN], &St[(t - t0) * PN]);
        for (int64_t t = t1 - 1; t >= t0; --t) {
          const double* Scur = &St[(t - t0) * PN];
          const bool rs = reset_at(t);
          const double* Sprev = t == t0 ? &ck[k * PN] : &St[(t - t0 - 1) * PN];  // unless rs
          const double dl = delta[(b * T + t) * H + h];
          const double decay = std::exp(dl * A);
          const int64_t ip = ((b * T + t) * H + h) * P, ig = ((b * T + t) * G + g) * N;
          const double* xt = &in.x[ip];
          const double* Bt = &in.B[ig];
          const double* Ct = &in.C[ig];
          double* dxt = &gr.dx[ip];
          double* dBt = &gr.dB[ig];
          double* dCt = &gr.dC[ig];
          if (seq_ending_at[t] >= 0 && !dvarlen_states.empty()) {
            const double* dv = &dvarlen_states[(seq_ending_at[t] * H + h) * PN];
            for (int64_t i = 0; i < PN; ++i) dS[i] += dv[i];
          }
          // Epilogue: out = (y + D x) * silu(z), y = S_t C_t (y needed only for dz).
          if (has_z)
            for (int64_t pp = 0; pp < P; ++pp) {
              double acc = 0;
              for (int64_t n = 0; n < N; ++n) acc += Scur[pp * N + n] * Ct[n];
              yt[pp] = acc;
            }
          detail::epilogue_token(in, h, ip, dout, yt.data(), dy.data(), gr,
                                 has_D ? &dD_part[bh * P] : nullptr, magnitude);
          for (int64_t pp = 0; pp < P; ++pp)
            for (int64_t n = 0; n < N; ++n) {
              dS[pp * N + n] += dy[pp] * Ct[n];
              dCt[n] += dy[pp] * Scur[pp * N + n];
            }
          // Step: S_t = decay * S_prev + dl * x_t (x) B_t.
          double ddl = 0, ddecay = 0;
          for (int64_t pp = 0; pp < P; ++pp) {
            double accx = 0;
            for (int64_t n = 0; n < N; ++n) {
              const double s = dS[pp * N + n];
              accx += s * Bt[n];
              dBt[n] += dl * s * xt[pp];
              ddl += s * xt[pp] * Bt[n];
              if (!rs) ddecay += s * Sprev[pp * N + n];
            }
            dxt[pp] += dl * accx;
          }
          ddl += ddecay * decay * a_factor(h);
          dA_part[bh] += ddecay * decay * dl;
          ddelta[(b * T + t) * H + h] = ddl;
          if (rs)
            std::fill(dS.begin(), dS.end(), 0.0);
          else
            for (int64_t i = 0; i < PN; ++i) dS[i] *= decay;
        }
      }
      if (has_h0) std::copy(dS.begin(), dS.end(), gr.dinitial_states.begin() + bh * PN);
    }
  }

  detail::finish(p, in, ddelta, dA_part, dD_part, gr);
  return gr;
}

std::vector<double> abs_of(std::vector<double> v) {
  for (double& e : v) e = std::abs(e);
  return v;
}

}  // namespace

std::string_view bwd_mutant_name(BwdMutant m) {
  switch (m) {
    case BwdMutant::none: return "none";
    case BwdMutant::adjoint_no_decay: return "bwd_adjoint_no_decay";
    case BwdMutant::no_adjoint_carry: return "bwd_no_adjoint_carry";
    case BwdMutant::adjoint_crosses_reset: return "bwd_adjoint_crosses_reset";
    case BwdMutant::dt_grad_ignores_clamp: return "bwd_dt_grad_ignores_clamp";
    case BwdMutant::dt_grad_ignores_softplus: return "bwd_dt_grad_ignores_softplus";
  }
  return "?";
}

Grads backward_recurrent(const Params& p, const Inputs& in, const std::vector<double>& dout,
                         const std::vector<double>& dfinal_states,
                         const std::vector<double>& dvarlen_states) {
  return recurrent_adjoint(p, in, dout, dfinal_states, dvarlen_states, false);
}

Grads backward_bound(const Params& p, const Inputs& in, const std::vector<double>& dout,
                     const std::vector<double>& dfinal_states,
                     const std::vector<double>& dvarlen_states) {
  Inputs a = in;
  a.x = abs_of(in.x), a.B = abs_of(in.B), a.C = abs_of(in.C), a.D = abs_of(in.D);
  a.initial_states = abs_of(in.initial_states);
  return recurrent_adjoint(p, a, abs_of(dout), abs_of(dfinal_states), abs_of(dvarlen_states), true);
}

}  // namespace assay::ssd
