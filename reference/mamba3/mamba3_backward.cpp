// Mamba-3 backward, form (a): the recurrent adjoint of SISO and MIMO (mamba3_backward.h has the
// contract and the adjoint equations). One implementation on the normalized problem: SISO is the
// R = 1 case without Psi (v = V), zeta, Phi or the norm; where SISO's operations ran in another
// order (the V adjoint), the no-Psi branch keeps that order, so every result is bit for bit the
// one of the former SISO code.
#include "reference/mamba3/mamba3_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/core/check.h"
#include "reference/mamba3/mamba3_backward_internal.h"
#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3 {

namespace {

using detail::kPi;
using detail::Problem;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

using detail::pair_of;
using detail::rotate;

// Adjoint of x = Rot(phi) xh, in place: dx (of the rotated x) -> dxh; dphi += dx_b x_a - dx_a x_b.
void rotate_adjoint(const Problem& pb, const double* phi, const double* x, double* dx, double* dphi) {
  for (int64_t i = 0; i < pb.S; ++i) {
    int64_t a, b;
    pair_of(pb, i, a, b);
    const double c = std::cos(phi[i]), s = std::sin(phi[i]);
    const double da = dx[a], db = dx[b];
    dphi[i] += db * x[a] - da * x[b];
    dx[a] = da * c + db * s;
    dx[b] = -da * s + db * c;
  }
}

// Magnitudes (the bound functions): |Rot(phi) x| componentwise as |u||c| + |w||s| from |x|, and the
// rotation adjoint's terms in absolute value.
void rotate_mag(const Problem& pb, const double* phi, double* x) {
  for (int64_t i = 0; i < pb.S; ++i) {
    int64_t a, b;
    pair_of(pb, i, a, b);
    const double c = std::abs(std::cos(phi[i])), s = std::abs(std::sin(phi[i]));
    const double u = x[a], w = x[b];
    x[a] = u * c + w * s;
    x[b] = u * s + w * c;
  }
}
void rotate_adjoint_mag(const Problem& pb, const double* phi, const double* x, double* dx, double* dphi) {
  for (int64_t i = 0; i < pb.S; ++i) {
    int64_t a, b;
    pair_of(pb, i, a, b);
    const double c = std::abs(std::cos(phi[i])), s = std::abs(std::sin(phi[i]));
    const double da = dx[a], db = dx[b];
    dphi[i] += db * x[a] + da * x[b];
    dx[a] = da * c + db * s;
    dx[b] = da * s + db * c;
  }
}

// H <- alpha H + beta sum_r vprev_r kprev_r^T + gamma sum_r v_r k_r^T (mamba3_step.cpp's order).
void state_update(double* Hs, int64_t P, int64_t N, int64_t R, double alpha, double beta, double gamma,
                  const double* vprev, const double* kprev, const double* v, const double* k) {
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < N; ++j) {
      double prev = 0, cur = 0;
      for (int64_t r = 0; r < R; ++r) {
        prev += vprev[r * P + p] * kprev[r * N + j];
        cur += v[r * P + p] * k[r * N + j];
      }
      Hs[p * N + j] = alpha * Hs[p * N + j] + beta * prev + gamma * cur;
    }
}

// One (sequence, head): forward with checkpoints, then the reverse sweep. Writes only this
// (sequence, head)'s slices, except the tensors shared by several (sequence, head) runs (dq / dk over
// the heads of a group; the per-head parameters over sequences), which the caller serialises.
// SISO (pb.psi null): v = V, one rank, no zeta / Phi / norm.
// Mag = true (the bound functions): the same sweep on magnitudes (every input, state, parameter and
// upstream gradient in absolute value; the caller passes |d_out| and |final grads|), the decays and
// trapezoid coefficients unchanged, differences as sums; the fused norm's rs from the true pre-gate
// y (ypre, mimo_step's out_pregate), the y it multiplies by its magnitude.
template <bool Mag>
void run_one(const Problem& pb, int64_t n, int64_t h, const std::vector<double>& d_out, const FinalGrads& df,
             const std::vector<double>* ypre, int64_t ncmax, Grads& gr) {
  const int64_t N = pb.N, P = pb.P, R = pb.R, S = pb.S, PN = P * N, RN = R * N, RP = R * P, Q = pb.chunk;
  const int64_t b = pb.seq_row[n], t0 = pb.seq_start[n], len = pb.seq_len[n];
  const int64_t g = h / (pb.H / pb.G);
  const bool st = pb.init_ssm != nullptr;
  const double Dh = pb.d ? (Mag ? std::abs(pb.d[h]) : pb.d[h]) : 0.0;
  // Per-head parameters ([R,P], norm weight [P]) and the raw V of the sequence; Mag: their |.|.
  std::vector<double> absbuf;
  absbuf.reserve(Mag ? 3 * R * P + P : 0);  // never reallocates: the pointers handed out stay valid
  auto param = [&](const double* x, int64_t cnt) -> const double* {
    if (!Mag || x == nullptr) return x;
    const size_t at = absbuf.size();
    for (int64_t i = 0; i < cnt; ++i) absbuf.push_back(std::abs(x[i]));
    return absbuf.data() + at;
  };
  const double* psi = param(pb.psi ? pb.psi + pb.ihr(h, 0) * P : nullptr, R * P);  // [R,P] of head h
  const double* zeta = param(pb.zeta ? pb.zeta + pb.ihr(h, 0) * P : nullptr, R * P);
  const double* phiw = param(pb.phi ? pb.phi + pb.ihr(h, 0) * P : nullptr, R * P);
  const double* nw = param(pb.norm_w ? pb.norm_w + h * P : nullptr, P);
  std::vector<double> Vabs(Mag ? len * P : 0);
  if constexpr (Mag)
    for (int64_t tl = 0; tl < len; ++tl)
      for (int64_t p = 0; p < P; ++p) Vabs[tl * P + p] = std::abs(pb.v[pb.iv(b, t0 + tl, h) + p]);
  auto Vp = [&](int64_t tl) { return Mag ? &Vabs[tl * P] : pb.v + pb.iv(b, t0 + tl, h); };  // V of token tl
  auto ix = [&](int64_t tl) { return pb.ibht(b, h, t0 + tl); };
  auto coef = [&](int64_t tl) { return detail::trap_coef(pb.trap[ix(tl)], pb.adt[ix(tl)], pb.dt[ix(tl)]); };

  // Initial states (or zeros).
  std::vector<double> phi0(S, 0.0), H0(PN, 0.0), k0(RN, 0.0), v0(P, 0.0);
  if (st) {
    std::copy_n(pb.init_angle + pb.ist_angle(n, h), S, phi0.begin());
    std::copy_n(pb.init_ssm + pb.ist_ssm(n, h), PN, H0.begin());
    for (int64_t r = 0; r < R; ++r) std::copy_n(pb.init_k + pb.ist_k(n, r, h), N, k0.begin() + r * N);
    std::copy_n(pb.init_v + pb.ist_v(n, h), P, v0.begin());
    if constexpr (Mag)
      for (auto* v : {&H0, &k0, &v0})
        for (double& x : *v) x = std::abs(x);
  }
  auto kprev_of = [&](const std::vector<double>& kr, int64_t tl) { return tl == 0 ? k0.data() : &kr[(tl - 1) * RN]; };
  auto vprev_raw = [&](int64_t tl) { return tl == 0 ? v0.data() : Vp(tl - 1); };
  // dZ: MIMO sums its R ranks; SISO's one term is stored as is (bit for bit the former SISO code).
  auto add_dz = [&](double& dst, double x) { dst = psi ? dst + x : x; };
  // v_{.,r} = V (.) Psi_r of a raw V, into out [R,P] (SISO: v = V).
  auto up_v = [&](const double* V, double* out) {
    if (!psi) {
      std::copy_n(V, P, out);
      return;
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t p = 0; p < P; ++p) out[r * P + p] = V[p] * psi[r * P + p];
  };

  // Forward: per-token reduced angles (the forward's compensated sum and reduction), rotated q / k,
  // and the checkpoint H_{c*Q - 1} entering every chunk c of Q tokens.
  std::vector<double> phi(len * S), qr(len * RN), kr(len * RN);
  const int64_t nchunks = (len + Q - 1) / Q;
  std::vector<double> ck(nchunks * PN);
  std::vector<double> vcur(RP), vprev(RP);
  {
    std::vector<double> acc_hi(phi0), acc_lo(S, 0.0), Hs(H0);
    for (int64_t tl = 0; tl < len; ++tl) {
      const int64_t t = t0 + tl;
      const double dtv = pb.dt[ix(tl)];
      for (int64_t s = 0; s < S; ++s) {
        const double th = kPi * std::tanh(pb.angles[pb.iang(b, t, h) + s]) * dtv;
        phi[tl * S + s] = detail::advance_angle(acc_hi[s], acc_lo[s], th);
      }
      for (int64_t r = 0; r < R; ++r) {
        const double* Qv = pb.q + pb.iqk(b, t, r, g);
        const double* Kv = pb.k + pb.iqk(b, t, r, g);
        double* qx = &qr[tl * RN + r * N];
        double* kx = &kr[tl * RN + r * N];
        for (int64_t j = 0; j < N; ++j) {
          if constexpr (Mag) {
            qx[j] = std::abs(Qv[j]) + std::abs(pb.q_bias[pb.ihr(h, r) * N + j]);
            kx[j] = std::abs(Kv[j]) + std::abs(pb.k_bias[pb.ihr(h, r) * N + j]);
          } else {
            qx[j] = Qv[j] + pb.q_bias[pb.ihr(h, r) * N + j];
            kx[j] = Kv[j] + pb.k_bias[pb.ihr(h, r) * N + j];
          }
        }
        if constexpr (Mag) {
          rotate_mag(pb, &phi[tl * S], qx);
          rotate_mag(pb, &phi[tl * S], kx);
        } else {
          rotate(pb, &phi[tl * S], qx);
          rotate(pb, &phi[tl * S], kx);
        }
      }
      if (tl % Q == 0) std::copy(Hs.begin(), Hs.end(), ck.begin() + (tl / Q) * PN);
      const detail::TrapCoef c = coef(tl);
      up_v(Vp(tl), vcur.data());
      up_v(vprev_raw(tl), vprev.data());
      state_update(Hs.data(), P, N, R, c.alpha, c.beta, c.gamma, vprev.data(), kprev_of(kr, tl), vcur.data(),
                   &kr[tl * RN]);
    }
  }

  // Adjoints carried backwards, seeded by the final-state gradients.
  std::vector<double> dH(PN, 0.0), dkc(RN, 0.0), dvc(P, 0.0), dphi(S, 0.0);
  if (!df.d_ssm.empty()) std::copy_n(df.d_ssm.begin() + pb.ist_ssm(n, h), PN, dH.begin());
  if (!df.d_k.empty())
    for (int64_t r = 0; r < R; ++r) std::copy_n(df.d_k.begin() + pb.ist_k(n, r, h), N, dkc.begin() + r * N);
  if (!df.d_v.empty()) std::copy_n(df.d_v.begin() + pb.ist_v(n, h), P, dvc.begin());
  if (!df.d_angle.empty()) std::copy_n(df.d_angle.begin() + pb.ist_angle(n, h), S, dphi.begin());
  if constexpr (Mag)
    for (auto* v : {&dH, &dkc, &dvc, &dphi})
      for (double& x : *v) x = std::abs(x);

  std::vector<double> Hbuf((Q + 1) * PN), y(RP), dy(RP), dq(RN), dk(RN), dv(RP), dvp(RP), dkc_new(RN);
  std::vector<double> hk(R), hkp(R);
  for (int64_t c = nchunks - 1; c >= 0; --c) {
    const int64_t c0 = c * Q, c1 = std::min(len, c0 + Q);
    // Recompute H_{c0-1} .. H_{c1-1} into Hbuf[0 .. c1-c0].
    std::copy_n(ck.begin() + c * PN, PN, Hbuf.begin());
    for (int64_t tl = c0; tl < c1; ++tl) {
      double* Hn = &Hbuf[(tl - c0 + 1) * PN];
      std::copy_n(&Hbuf[(tl - c0) * PN], PN, Hn);
      const detail::TrapCoef cf = coef(tl);
      up_v(Vp(tl), vcur.data());
      up_v(vprev_raw(tl), vprev.data());
      state_update(Hn, P, N, R, cf.alpha, cf.beta, cf.gamma, vprev.data(), kprev_of(kr, tl), vcur.data(),
                   &kr[tl * RN]);
    }
    for (int64_t tl = c1 - 1; tl >= c0; --tl) {
      const int64_t t = t0 + tl;
      const double* Ht = &Hbuf[(tl - c0 + 1) * PN];
      const double* Hm = &Hbuf[(tl - c0) * PN];
      const double* V = Vp(tl);
      const double* Vprev = vprev_raw(tl);
      up_v(V, vcur.data());
      up_v(Vprev, vprev.data());
      const double* kprev = kprev_of(kr, tl);
      const double* q = &qr[tl * RN];
      const double* k = &kr[tl * RN];
      const detail::TrapCoef cf = coef(tl);
      const double dtv = pb.dt[ix(tl)];
      const double* Zt = pb.z ? pb.z + pb.iv(b, t, h) : nullptr;

      // y_{t,r} = H_t q_{t,r} + D v_{t,r}, recomputed as the forward does.
      for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) {
          double acc = 0;
          for (int64_t j = 0; j < N; ++j) acc += Ht[p * N + j] * q[r * N + j];
          y[r * P + p] = acc + Dh * vcur[r * P + p];
        }
      // Down-projection, gate, fused norm: d_out -> dy.
      for (int64_t r = 0; r < R; ++r) {
        const double* yr = &y[r * P];  // Mag: the magnitude of y
        const double* yt = Mag && pb.fused_norm ? &(*ypre)[pb.ipre(b, t, r, h)] : yr;  // the true y
        double rs = 1.0;
        if (pb.fused_norm) {
          double ms = 0;
          for (int64_t p = 0; p < P; ++p) ms += yt[p] * yt[p];
          rs = 1.0 / std::sqrt(ms / static_cast<double>(P) + pb.norm_eps);
        }
        double sdu = 0;
        for (int64_t p = 0; p < P; ++p) {
          const double u = yr[p] * rs;              // normalized (u = y without the norm)
          const double w = nw ? nw[p] : 1.0;
          const double nv = u * w;                  // n: before the gate
          double sil = 1.0, o = nv, dn;
          double dO;
          if (phiw)
            dO = d_out[pb.iout(b, t, 0, h) + p] * phiw[r * P + p];
          else
            dO = d_out[pb.iout(b, t, r, h) + p];
          if (Zt) {
            const double zr = zeta ? zeta[r * P + p] : 1.0;
            if constexpr (Mag) {  // zeta is |zeta|: the gate's factors from the true Z zeta
              const double zz = Zt[p] * (pb.zeta ? pb.zeta[pb.ihr(h, r) * P + p] : 1.0);
              const double sg = sigmoid(zz);
              sil = std::abs(zz * sg);
              o = nv * sil;
              const double dzz = dO * nv * std::abs(sg * (1.0 + zz * (1.0 - sg)));
              add_dz(gr.dz[pb.iv(b, t, h) + p], dzz * zr);
              if (zeta) gr.dzeta[pb.ihr(h, r) * P + p] += dzz * std::abs(Zt[p]);
            } else {
              const double zz = Zt[p] * zr;
              const double sg = sigmoid(zz);
              sil = zz * sg;
              o = nv * sil;
              const double dzz = dO * nv * sg * (1.0 + zz * (1.0 - sg));
              add_dz(gr.dz[pb.iv(b, t, h) + p], dzz * zr);
              if (zeta) gr.dzeta[pb.ihr(h, r) * P + p] += dzz * Zt[p];
            }
          }
          if (phiw) gr.dphi[pb.ihr(h, r) * P + p] += d_out[pb.iout(b, t, 0, h) + p] * o;
          dn = dO * sil;
          if (nw) gr.dnorm_weight[h * P + p] += dn * u;
          const double du = dn * w;
          dy[r * P + p] = du;
          sdu += du * (Mag ? std::abs(yt[p]) : yr[p]);  // Mag: one factor true, one magnitude (below)
        }
        if (pb.fused_norm) {
          const double k3 = rs * rs * rs * sdu / static_cast<double>(P);
          for (int64_t p = 0; p < P; ++p) dy[r * P + p] = rs * dy[r * P + p] + (Mag ? k3 : -k3) * yr[p];
        }
      }
      // y = H_t q + D v.
      std::fill(dq.begin(), dq.end(), 0.0);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t j = 0; j < N; ++j) {
            dH[p * N + j] += dy[r * P + p] * q[r * N + j];
            dq[r * N + j] += Ht[p * N + j] * dy[r * P + p];
          }
      if (pb.d) {
        double s = 0;
        for (int64_t i = 0; i < RP; ++i) s += dy[i] * vcur[i];
        gr.dd[h] += s;
      }
      // SISO adds the carried V adjoint first (its order); MIMO after the up-projection (below).
      for (int64_t i = 0; i < RP; ++i) dv[i] = psi ? Dh * dy[i] : dvc[i] + Dh * dy[i];
      std::copy(dkc.begin(), dkc.end(), dk.begin());
      // H_t = alpha H_{t-1} + beta sum_r vprev_r kprev_r^T + gamma sum_r v_r k_r^T.
      double dalpha = 0, dbeta = 0, dgamma = 0;
      std::fill(dkc_new.begin(), dkc_new.end(), 0.0);
      for (int64_t p = 0; p < P; ++p) {
        std::fill(hk.begin(), hk.end(), 0.0);
        std::fill(hkp.begin(), hkp.end(), 0.0);
        for (int64_t j = 0; j < N; ++j) {
          const double e = dH[p * N + j];
          dalpha += e * Hm[p * N + j];
          for (int64_t r = 0; r < R; ++r) {
            hk[r] += e * k[r * N + j];
            hkp[r] += e * kprev[r * N + j];
            dk[r * N + j] += cf.gamma * e * vcur[r * P + p];
            dkc_new[r * N + j] += cf.beta * e * vprev[r * P + p];
          }
        }
        for (int64_t r = 0; r < R; ++r) {
          dgamma += vcur[r * P + p] * hk[r];
          dbeta += vprev[r * P + p] * hkp[r];
          dv[r * P + p] += cf.gamma * hk[r];
          dvp[r * P + p] = cf.beta * hkp[r];
        }
      }
      for (int64_t x = 0; x < PN; ++x) dH[x] *= cf.alpha;
      dkc.swap(dkc_new);
      // v_r = V_t (.) Psi_r and vprev_r = V_{t-1} (.) Psi_r: raw V adjoints and dPsi (SISO: v = V).
      if (!psi) {  // SISO: dv already holds the carry
        for (int64_t p = 0; p < P; ++p) {
          gr.dv[pb.iv(b, t, h) + p] += dv[p];
          dvc[p] = dvp[p];
        }
      } else {
        for (int64_t p = 0; p < P; ++p) {
          double dVt = dvc[p], dVprev = 0;
          for (int64_t r = 0; r < R; ++r) {
            dVt += dv[r * P + p] * psi[r * P + p];
            dVprev += dvp[r * P + p] * psi[r * P + p];
            gr.dpsi[pb.ihr(h, r) * P + p] += dv[r * P + p] * V[p] + dvp[r * P + p] * Vprev[p];
          }
          gr.dv[pb.iv(b, t, h) + p] += dVt;
          dvc[p] = dVprev;
        }
      }
      // Coefficients.
      gr.dadt[ix(tl)] = dalpha * cf.alpha + dbeta * cf.beta;
      const double dlam = Mag ? std::abs(dtv) * (dgamma + cf.alpha * dbeta) : dtv * (dgamma - cf.alpha * dbeta);
      gr.dtrap[ix(tl)] = dlam * cf.lam * (1.0 - cf.lam);
      double ddt = dbeta * (1.0 - cf.lam) * cf.alpha + dgamma * cf.lam;
      // Rotation and biases.
      for (int64_t r = 0; r < R; ++r) {
        if constexpr (Mag) {
          rotate_adjoint_mag(pb, &phi[tl * S], &q[r * N], &dq[r * N], dphi.data());
          rotate_adjoint_mag(pb, &phi[tl * S], &k[r * N], &dk[r * N], dphi.data());
        } else {
          rotate_adjoint(pb, &phi[tl * S], &q[r * N], &dq[r * N], dphi.data());
          rotate_adjoint(pb, &phi[tl * S], &k[r * N], &dk[r * N], dphi.data());
        }
        for (int64_t j = 0; j < N; ++j) {
          gr.dq[pb.iqk(b, t, r, g) + j] += dq[r * N + j];
          gr.dk[pb.iqk(b, t, r, g) + j] += dk[r * N + j];
          gr.dq_bias[pb.ihr(h, r) * N + j] += dq[r * N + j];
          gr.dk_bias[pb.ihr(h, r) * N + j] += dk[r * N + j];
        }
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
    for (int64_t r = 0; r < R; ++r) std::copy_n(dkc.begin() + r * N, N, gr.dk_state.begin() + pb.ist_k(n, r, h));
    std::copy(dvc.begin(), dvc.end(), gr.dv_state.begin() + pb.ist_v(n, h));
  }
}


// Every entry point: validated problem, zeroed gradients, then every (sequence, head) in order.
template <bool Mag, class Params, class In>
Grads run_all(const char* who, const Params& p, const In& in, const std::vector<double>& d_out,
              const FinalGrads& dfinal) {
  const Problem pb = detail::make_problem(p, in);  // validates every input as the forward does
  detail::check_upstream(who, pb, d_out, dfinal);
  Grads gr = detail::zero_grads(in);
  const int64_t ncmax = detail::alloc_dchunk_states(pb, gr);
  std::vector<double> ypre;  // Mag with the fused norm: the true pre-gate y for its rs
  if (Mag && pb.fused_norm) ypre = detail::run_step(pb).out_pregate;
  auto absv = [](std::vector<double> x) {
    for (double& e : x) e = std::abs(e);
    return x;
  };
  const std::vector<double> dout = Mag ? absv(d_out) : std::vector<double>{};
  const FinalGrads dfa = Mag ? FinalGrads{absv(dfinal.d_angle), absv(dfinal.d_ssm), absv(dfinal.d_k), absv(dfinal.d_v)}
                             : FinalGrads{};
  // Serial over (sequence, head): dq / dk accumulate over the heads of a group, and the per-head
  // parameters (biases, Psi, zeta, Phi, D, norm weight) over the sequences, always in this fixed
  // order (deterministic).
  for (int64_t n = 0; n < pb.NS(); ++n)
    for (int64_t h = 0; h < pb.H; ++h) run_one<Mag>(pb, n, h, Mag ? dout : d_out, Mag ? dfa : dfinal, &ypre, ncmax, gr);
  return gr;
}

}  // namespace

Grads backward_siso_recurrent(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                              const FinalGrads& dfinal) {
  return run_all<false>("mamba3 backward", p, in, d_out, dfinal);
}

Grads backward_siso_bound(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                          const FinalGrads& dfinal) {
  return run_all<true>("mamba3 backward bound", p, in, d_out, dfinal);
}

Grads backward_mimo_recurrent(const MimoParams& p, const MimoInputs& in, const std::vector<double>& d_out,
                              const FinalGrads& dfinal) {
  return run_all<false>("mamba3 mimo backward", p, in, d_out, dfinal);
}

Grads backward_mimo_bound(const MimoParams& p, const MimoInputs& in, const std::vector<double>& d_out,
                          const FinalGrads& dfinal) {
  return run_all<true>("mamba3 mimo backward", p, in, d_out, dfinal);
}

}  // namespace assay::mamba3
