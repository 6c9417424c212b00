// Mamba-3 SISO backward oracle: see mamba3_backward.h for the contract and the adjoint equations.
#include "reference/mamba3/mamba3_backward_internal.h"
#include "reference/mamba3/mamba3_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/core/check.h"
#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3 {

namespace {

using detail::kPi;
using detail::Problem;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }


// Rotation by phi (adjacent pairs (2i, 2i+1), i < S), the forward's operations in the same order.
void rotate(const double* phi, int64_t S, double* x) {
  for (int64_t i = 0; i < S; ++i) {
    const double c = std::cos(phi[i]), s = std::sin(phi[i]);
    const double u = x[2 * i], w = x[2 * i + 1];
    x[2 * i] = u * c - w * s;
    x[2 * i + 1] = u * s + w * c;
  }
}

// Adjoint of x = Rot(phi) xh, in place: dx (of the rotated x) -> dxh; dphi += dx_b x_a - dx_a x_b.
void rotate_adjoint(const double* phi, int64_t S, const double* x, double* dx, double* dphi) {
  for (int64_t i = 0; i < S; ++i) {
    const double c = std::cos(phi[i]), s = std::sin(phi[i]);
    const double da = dx[2 * i], db = dx[2 * i + 1];
    dphi[i] += db * x[2 * i] - da * x[2 * i + 1];
    dx[2 * i] = da * c + db * s;
    dx[2 * i + 1] = -da * s + db * c;
  }
}

// Magnitudes (backward_siso_bound): |Rot(phi) x| componentwise as |u||c| + |w||s| from |x|, and the
// rotation adjoint's terms in absolute value.
void rotate_mag(const double* phi, int64_t S, double* x) {
  for (int64_t i = 0; i < S; ++i) {
    const double c = std::abs(std::cos(phi[i])), s = std::abs(std::sin(phi[i]));
    const double u = x[2 * i], w = x[2 * i + 1];
    x[2 * i] = u * c + w * s;
    x[2 * i + 1] = u * s + w * c;
  }
}
void rotate_adjoint_mag(const double* phi, int64_t S, const double* x, double* dx, double* dphi) {
  for (int64_t i = 0; i < S; ++i) {
    const double c = std::abs(std::cos(phi[i])), s = std::abs(std::sin(phi[i]));
    const double da = dx[2 * i], db = dx[2 * i + 1];
    dphi[i] += db * x[2 * i] + da * x[2 * i + 1];
    dx[2 * i] = da * c + db * s;
    dx[2 * i + 1] = da * s + db * c;
  }
}

// State update H <- alpha H + beta vprev kprev^T + gamma v k^T (mamba3_step.cpp's order, R = 1).
void state_update(double* Hs, int64_t P, int64_t N, double alpha, double beta, double gamma, const double* vprev,
                  const double* kprev, const double* v, const double* k) {
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < N; ++j) {
      const double prev = vprev[p] * kprev[j], cur = v[p] * k[j];
      Hs[p * N + j] = alpha * Hs[p * N + j] + beta * prev + gamma * cur;
    }
}

// One (sequence, head): forward with checkpoints, then the reverse sweep. Writes only this
// (sequence, head)'s slices, except dq / dk (shared by the heads of a group), which the caller
// serialises by running the heads of a group in order.
// Mag = true (backward_siso_bound): the same sweep on magnitudes: every input, state and upstream
// gradient in absolute value (q / k bias sums as |x| + |bias|, rotations by rotate_mag), the decays
// alpha and the coefficients beta, gamma, lam (all >= 0) unchanged, the gate's and the angle chain's
// factors in absolute value, and the one difference (dlam = DT (dgamma - alpha dbeta)) a sum; so
// every gradient element is the sum of the absolute values of the products it is made of.
template <bool Mag>
void run_one(const Problem& pb, int64_t n, int64_t h, const std::vector<double>& d_out, const SisoFinalGrads& df,
             int64_t ncmax, SisoGrads& gr) {
  const int64_t N = pb.N, P = pb.P, S = pb.S, PN = P * N, Q = pb.chunk;
  const int64_t b = pb.seq_row[n], t0 = pb.seq_start[n], len = pb.seq_len[n];
  const int64_t g = h / (pb.H / pb.G);
  const bool st = pb.init_ssm != nullptr;
  const double Dh = pb.d ? (Mag ? std::abs(pb.d[h]) : pb.d[h]) : 0.0;
  std::vector<double> Vabs(Mag ? len * P : 0);  // Mag: |V| of the sequence
  if constexpr (Mag)
    for (int64_t tl = 0; tl < len; ++tl)
      for (int64_t p = 0; p < P; ++p) Vabs[tl * P + p] = std::abs(pb.v[pb.iv(b, t0 + tl, h) + p]);
  auto Vp = [&](int64_t tl) { return Mag ? &Vabs[tl * P] : pb.v + pb.iv(b, t0 + tl, h); };  // V of token tl
  auto ix = [&](int64_t tl) { return pb.ibht(b, h, t0 + tl); };
  auto coef = [&](int64_t tl) { return detail::trap_coef(pb.trap[ix(tl)], pb.adt[ix(tl)], pb.dt[ix(tl)]); };

  // Initial states (or zeros).
  std::vector<double> phi0(S, 0.0), H0(PN, 0.0), k0(N, 0.0), v0(P, 0.0);
  if (st) {
    std::copy_n(pb.init_angle + pb.ist_angle(n, h), S, phi0.begin());
    std::copy_n(pb.init_ssm + pb.ist_ssm(n, h), PN, H0.begin());
    std::copy_n(pb.init_k + pb.ist_k(n, 0, h), N, k0.begin());
    std::copy_n(pb.init_v + pb.ist_v(n, h), P, v0.begin());
    if constexpr (Mag)
      for (auto* v : {&H0, &k0, &v0})
        for (double& x : *v) x = std::abs(x);
  }
  auto kprev_of = [&](const std::vector<double>& kr, int64_t tl) { return tl == 0 ? k0.data() : &kr[(tl - 1) * N]; };
  auto vprev_of = [&](int64_t tl) { return tl == 0 ? v0.data() : Vp(tl - 1); };

  // Forward: per-token reduced angles (the forward's compensated sum and reduction), rotated q / k,
  // and the checkpoint H_{c*Q - 1} entering every chunk c of Q tokens.
  std::vector<double> phi(len * S), qr(len * N), kr(len * N);
  const int64_t nchunks = (len + Q - 1) / Q;
  std::vector<double> ck(nchunks * PN);
  {
    std::vector<double> acc_hi(phi0), acc_lo(S, 0.0), Hs(H0);
    for (int64_t tl = 0; tl < len; ++tl) {
      const int64_t t = t0 + tl;
      const double dtv = pb.dt[ix(tl)];
      for (int64_t s = 0; s < S; ++s) {
        const double th = kPi * std::tanh(pb.angles[pb.iang(b, t, h) + s]) * dtv;
        phi[tl * S + s] = detail::advance_angle(acc_hi[s], acc_lo[s], th);
      }
      for (int64_t j = 0; j < N; ++j) {
        if constexpr (Mag) {
          qr[tl * N + j] = std::abs(pb.q[pb.iqk(b, t, 0, g) + j]) + std::abs(pb.q_bias[h * N + j]);
          kr[tl * N + j] = std::abs(pb.k[pb.iqk(b, t, 0, g) + j]) + std::abs(pb.k_bias[h * N + j]);
        } else {
          qr[tl * N + j] = pb.q[pb.iqk(b, t, 0, g) + j] + pb.q_bias[h * N + j];
          kr[tl * N + j] = pb.k[pb.iqk(b, t, 0, g) + j] + pb.k_bias[h * N + j];
        }
      }
      if constexpr (Mag) {
        rotate_mag(&phi[tl * S], S, &qr[tl * N]);
        rotate_mag(&phi[tl * S], S, &kr[tl * N]);
      } else {
        rotate(&phi[tl * S], S, &qr[tl * N]);
        rotate(&phi[tl * S], S, &kr[tl * N]);
      }
      if (tl % Q == 0) std::copy(Hs.begin(), Hs.end(), ck.begin() + (tl / Q) * PN);
      const detail::TrapCoef c = coef(tl);
      state_update(Hs.data(), P, N, c.alpha, c.beta, c.gamma, vprev_of(tl), kprev_of(kr, tl), Vp(tl), &kr[tl * N]);
    }
  }

  // Adjoints carried backwards, seeded by the final-state gradients.
  std::vector<double> dH(PN, 0.0), dkc(N, 0.0), dvc(P, 0.0), dphi(S, 0.0);
  if (!df.d_ssm.empty()) std::copy_n(df.d_ssm.begin() + pb.ist_ssm(n, h), PN, dH.begin());
  if (!df.d_k.empty()) std::copy_n(df.d_k.begin() + pb.ist_k(n, 0, h), N, dkc.begin());
  if (!df.d_v.empty()) std::copy_n(df.d_v.begin() + pb.ist_v(n, h), P, dvc.begin());
  if (!df.d_angle.empty()) std::copy_n(df.d_angle.begin() + pb.ist_angle(n, h), S, dphi.begin());
  if constexpr (Mag)
    for (auto* v : {&dH, &dkc, &dvc, &dphi})
      for (double& x : *v) x = std::abs(x);

  std::vector<double> Hbuf((Q + 1) * PN), dy(P), dq(N), dk(N), dV(P), dkc_new(N), dvc_new(P);
  for (int64_t c = nchunks - 1; c >= 0; --c) {
    const int64_t c0 = c * Q, c1 = std::min(len, c0 + Q);
    // Recompute H_{c0-1} .. H_{c1-1} into Hbuf[0 .. c1-c0].
    std::copy_n(ck.begin() + c * PN, PN, Hbuf.begin());
    for (int64_t tl = c0; tl < c1; ++tl) {
      double* Hn = &Hbuf[(tl - c0 + 1) * PN];
      std::copy_n(&Hbuf[(tl - c0) * PN], PN, Hn);
      const detail::TrapCoef cf = coef(tl);
      state_update(Hn, P, N, cf.alpha, cf.beta, cf.gamma, vprev_of(tl), kprev_of(kr, tl), Vp(tl), &kr[tl * N]);
    }
    for (int64_t tl = c1 - 1; tl >= c0; --tl) {
      const int64_t t = t0 + tl;
      const double* Ht = &Hbuf[(tl - c0 + 1) * PN];
      const double* Hm = &Hbuf[(tl - c0) * PN];
      const double* V = Vp(tl);
      const double* vprev = vprev_of(tl);
      const double* kprev = kprev_of(kr, tl);
      const double* q = &qr[tl * N];
      const double* k = &kr[tl * N];
      const double* dO = &d_out[pb.iv(b, t, h)];  // Mag: the caller passes |d_out|
      const detail::TrapCoef cf = coef(tl);
      const double dtv = pb.dt[ix(tl)];

      // Gate. y recomputed as the forward does (acc over j, + D V).
      for (int64_t p = 0; p < P; ++p) {
        if (pb.z) {
          double acc = 0;
          for (int64_t j = 0; j < N; ++j) acc += Ht[p * N + j] * q[j];
          const double y = acc + Dh * V[p];
          const double zz = pb.z[pb.iv(b, t, h) + p];
          const double sg = sigmoid(zz);
          if constexpr (Mag) {
            dy[p] = dO[p] * std::abs(zz * sg);
            gr.dz[pb.iv(b, t, h) + p] = dO[p] * y * std::abs(sg * (1.0 + zz * (1.0 - sg)));
          } else {
            dy[p] = dO[p] * (zz * sg);
            gr.dz[pb.iv(b, t, h) + p] = dO[p] * y * sg * (1.0 + zz * (1.0 - sg));
          }
        } else {
          dy[p] = dO[p];
        }
      }
      // y = H_t q + D V.
      for (int64_t j = 0; j < N; ++j) dq[j] = 0;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < N; ++j) {
          dH[p * N + j] += dy[p] * q[j];
          dq[j] += Ht[p * N + j] * dy[p];
        }
      if (pb.d) {
        double s = 0;
        for (int64_t p = 0; p < P; ++p) s += dy[p] * V[p];
        gr.dd[h] += s;
      }
      for (int64_t p = 0; p < P; ++p) dV[p] = dvc[p] + Dh * dy[p];
      for (int64_t j = 0; j < N; ++j) dk[j] = dkc[j];
      // H_t = alpha H_{t-1} + beta vprev kprev^T + gamma V k^T.
      double dalpha = 0, dbeta = 0, dgamma = 0;
      for (int64_t j = 0; j < N; ++j) dkc_new[j] = 0;
      for (int64_t p = 0; p < P; ++p) {
        double hk = 0, hkp = 0;
        for (int64_t j = 0; j < N; ++j) {
          const double e = dH[p * N + j];
          dalpha += e * Hm[p * N + j];
          hk += e * k[j];
          hkp += e * kprev[j];
          dk[j] += cf.gamma * e * V[p];
          dkc_new[j] += cf.beta * e * vprev[p];
        }
        dgamma += V[p] * hk;
        dbeta += vprev[p] * hkp;
        dV[p] += cf.gamma * hk;
        dvc_new[p] = cf.beta * hkp;
      }
      for (int64_t x = 0; x < PN; ++x) dH[x] *= cf.alpha;
      dkc.swap(dkc_new);
      dvc.swap(dvc_new);
      for (int64_t p = 0; p < P; ++p) gr.dv[pb.iv(b, t, h) + p] += dV[p];
      // Coefficients.
      gr.dadt[ix(tl)] = dalpha * cf.alpha + dbeta * cf.beta;
      const double dlam = Mag ? std::abs(dtv) * (dgamma + cf.alpha * dbeta) : dtv * (dgamma - cf.alpha * dbeta);
      gr.dtrap[ix(tl)] = dlam * cf.lam * (1.0 - cf.lam);
      double ddt = dbeta * (1.0 - cf.lam) * cf.alpha + dgamma * cf.lam;
      // Rotation and biases.
      if constexpr (Mag) {
        rotate_adjoint_mag(&phi[tl * S], S, q, dq.data(), dphi.data());
        rotate_adjoint_mag(&phi[tl * S], S, k, dk.data(), dphi.data());
      } else {
        rotate_adjoint(&phi[tl * S], S, q, dq.data(), dphi.data());
        rotate_adjoint(&phi[tl * S], S, k, dk.data(), dphi.data());
      }
      for (int64_t j = 0; j < N; ++j) {
        gr.dq[pb.iqk(b, t, 0, g) + j] += dq[j];
        gr.dk[pb.iqk(b, t, 0, g) + j] += dk[j];
        gr.dq_bias[h * N + j] += dq[j];
        gr.dk_bias[h * N + j] += dk[j];
      }
      // Angles: phi_t = phi_{t-1} + pi tanh(A) DT; dphi passes to phi_{t-1} unchanged.
      for (int64_t s = 0; s < S; ++s) {
        const double th = std::tanh(pb.angles[pb.iang(b, t, h) + s]);
        gr.dangles[pb.iang(b, t, h) + s] = dphi[s] * kPi * (1.0 - th * th) * (Mag ? std::abs(dtv) : dtv);
        ddt += dphi[s] * kPi * (Mag ? std::abs(th) : th);
      }
      gr.ddt[ix(tl)] = ddt;
    }
    // dH now holds the adjoint of H_{c0-1}, which is the adjoint of the folded chunk-start state S_c.
    std::copy(dH.begin(), dH.end(), gr.dchunk_states.begin() + ((n * pb.H + h) * ncmax + c) * PN);
  }

  if (st) {
    std::copy(dphi.begin(), dphi.end(), gr.dangle_state.begin() + pb.ist_angle(n, h));
    std::copy(dH.begin(), dH.end(), gr.dssm_state.begin() + pb.ist_ssm(n, h));
    std::copy(dkc.begin(), dkc.end(), gr.dk_state.begin() + pb.ist_k(n, 0, h));
    std::copy(dvc.begin(), dvc.end(), gr.dv_state.begin() + pb.ist_v(n, h));
  }
}

}  // namespace

SisoGrads backward_siso_recurrent(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                                  const SisoFinalGrads& dfinal) {
  const Problem pb = detail::make_problem(p, in);  // validates every input as the forward does
  detail::check_siso_upstream("mamba3 backward", pb, d_out, dfinal);
  const int64_t NS = pb.NS(), H = pb.H;

  SisoGrads gr = detail::zero_siso_grads(in);
  const int64_t ncmax = detail::alloc_dchunk_states(pb, gr);
  // Serial over (sequence, head): dq / dk accumulate over the heads of a group, and dq_bias / dk_bias /
  // dd over the sequences of a head, always in this fixed order (deterministic).
  for (int64_t n = 0; n < NS; ++n)
    for (int64_t h = 0; h < H; ++h) run_one<false>(pb, n, h, d_out, dfinal, ncmax, gr);
  return gr;
}

SisoGrads backward_siso_bound(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                              const SisoFinalGrads& dfinal) {
  const Problem pb = detail::make_problem(p, in);
  detail::check_siso_upstream("mamba3 backward bound", pb, d_out, dfinal);
  auto abs_of = [](const std::vector<double>& x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = std::abs(x[i]);
    return r;
  };
  const SisoFinalGrads df{abs_of(dfinal.d_angle), abs_of(dfinal.d_ssm), abs_of(dfinal.d_k), abs_of(dfinal.d_v)};
  const std::vector<double> dO = abs_of(d_out);
  SisoGrads gr = detail::zero_siso_grads(in);
  const int64_t ncmax = detail::alloc_dchunk_states(pb, gr);
  for (int64_t n = 0; n < pb.NS(); ++n)
    for (int64_t h = 0; h < pb.H; ++h) run_one<true>(pb, n, h, dO, df, ncmax, gr);
  return gr;
}

}  // namespace assay::mamba3
