// Mamba-3 backward, form (b): the chunked backward of SISO and MIMO (mamba3_backward.h "Form (b)"
// has the math). One implementation on the normalized problem,
// as the forward's chunked form: SISO is the R = 1 case without Psi, zeta, Phi or the norm. The
// forward is recomputed by the chunked form (folded chunk-start states and the pre-gate output);
// the reverse sweep runs per chunk (last first) with Eigen GEMMs over the chunk's fused (token,
// rank) rows and passes the adjoint of the chunk-start state backwards. It never calls the step
// recurrence or its backward (form (a), mamba3_backward.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include <Eigen/Dense>

#include "reference/core/check.h"
#include "reference/mamba3/mamba3_backward.h"
#include "reference/mamba3/mamba3_backward_internal.h"
#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3 {

namespace {

using detail::Problem;
using detail::sigmoid_tanh;
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// What one (sequence, head) contributes to gradients shared with other work items (added in a
// fixed order by the caller): dq / dk of its rows (the group's slice) and the per-head parameters.
struct Shared {
  Mat dqh, dkh;                                   // (len R, N), unrotated; scratch per task
  std::vector<double> dqb, dkb;                   // (R, N)
  std::vector<double> dpsi, dzeta, dphi, dnorm;   // (R, P), (R, P), (R, P), (P)
  double dD = 0;
};

// One (sequence, head), SISO or MIMO (SISO: R = 1, pb.psi null, so v = V and no dPsi). opt: the
// mutant and io.
void run_one(const Problem& pb, const Result& fw, const ChunkedBackwardOptions& opt, int64_t n, int64_t h,
             const std::vector<double>& d_out, const FinalGrads& df, int64_t ncmax, Grads& gr, Shared& sh) {
  const BwdMutant mut = opt.mutant;
  const int64_t N = pb.N, P = pb.P, S = pb.S, R = pb.R, Q = pb.chunk;
  const int64_t b = pb.seq_row[n], t0 = pb.seq_start[n], len = pb.seq_len[n], rows_all = len * R;
  const int64_t g = h / (pb.H / pb.G);
  const bool st = pb.init_ssm != nullptr;
  const double Dh = pb.d ? pb.d[h] : 0.0;
  const double* psi = pb.psi ? pb.psi + pb.ihr(h, 0) * P : nullptr;  // [R,P] of head h (SISO: none)
  const double* zeta = pb.zeta ? pb.zeta + pb.ihr(h, 0) * P : nullptr;
  const double* phiw = pb.phi ? pb.phi + pb.ihr(h, 0) * P : nullptr;
  const double* nw = pb.norm_w ? pb.norm_w + h * P : nullptr;
  sh.dqb.assign(R * N, 0.0);
  sh.dkb.assign(R * N, 0.0);
  sh.dpsi.assign(psi ? R * P : 0, 0.0);
  sh.dzeta.assign(zeta ? R * P : 0, 0.0);
  sh.dphi.assign(phiw ? R * P : 0, 0.0);
  sh.dnorm.assign(nw ? P : 0, 0.0);
  sh.dqh.setZero(rows_all, N);
  sh.dkh.setZero(rows_all, N);

  if (len == 0) {  // the input states pass through: their gradients are the final-state gradients
    if (st) {
      if (!df.d_angle.empty())
        std::copy_n(df.d_angle.begin() + pb.ist_angle(n, h), S, gr.dangle_state.begin() + pb.ist_angle(n, h));
      if (!df.d_ssm.empty())
        std::copy_n(df.d_ssm.begin() + pb.ist_ssm(n, h), P * N, gr.dssm_state.begin() + pb.ist_ssm(n, h));
      if (!df.d_k.empty())
        for (int64_t r = 0; r < R; ++r)
          std::copy_n(df.d_k.begin() + pb.ist_k(n, r, h), N, gr.dk_state.begin() + pb.ist_k(n, r, h));
      if (!df.d_v.empty()) std::copy_n(df.d_v.begin() + pb.ist_v(n, h), P, gr.dv_state.begin() + pb.ist_v(n, h));
    }
    return;
  }

  // ---- Per-token scalars and angles (shared with the SISO chunked backward). ----
  const detail::TokenScalars ts = detail::token_scalars(pb, b, h, t0, len);
  const std::vector<double>&gam = ts.gam, &w = ts.w, &sc = ts.sc, &adt = ts.adt;
  const std::vector<double> phi = detail::chunked_angles(pb, n, h, ts.dts);
  std::vector<double> cosv(len * S), sinv(len * S);
  for (int64_t i = 0; i < len * S; ++i) cosv[i] = std::cos(phi[i]), sinv[i] = std::sin(phi[i]);
  std::vector<int64_t> ia(S), ib(S);
  for (int64_t i = 0; i < S; ++i) detail::pair_of(pb, i, ia[i], ib[i]);

  // ---- Rows (t, r): biased q^, k^ (unrotated), rotated q, k, v = V (.) Psi_r; raw V per token;
  // the diagonal dots qkd(t, a, b) = q^_(t,a) . k^_(t,b). ----
  Mat qh(rows_all, N), kh(rows_all, N), v(rows_all, P), V(len, P);
  for (int64_t tl = 0; tl < len; ++tl) {
    const int64_t t = t0 + tl;
    for (int64_t p = 0; p < P; ++p) V(tl, p) = pb.v[pb.iv(b, t, h) + p];
    for (int64_t r = 0; r < R; ++r) {
      const int64_t row = tl * R + r;
      for (int64_t j = 0; j < N; ++j) {
        qh(row, j) = pb.q[pb.iqk(b, t, r, g) + j] + pb.q_bias[pb.ihr(h, r) * N + j];
        kh(row, j) = pb.k[pb.iqk(b, t, r, g) + j] + pb.k_bias[pb.ihr(h, r) * N + j];
      }
      for (int64_t p = 0; p < P; ++p) v(row, p) = psi ? V(tl, p) * psi[r * P + p] : V(tl, p);
    }
  }
  Mat q = qh, k = kh;
  for (int64_t row = 0; row < rows_all; ++row) {
    const int64_t tl = row / R;
    for (int64_t i = 0; i < S; ++i) {
      const double c = cosv[tl * S + i], s = sinv[tl * S + i];
      q(row, ia[i]) = c * qh(row, ia[i]) - s * qh(row, ib[i]);
      q(row, ib[i]) = s * qh(row, ia[i]) + c * qh(row, ib[i]);
      k(row, ia[i]) = c * kh(row, ia[i]) - s * kh(row, ib[i]);
      k(row, ib[i]) = s * kh(row, ia[i]) + c * kh(row, ib[i]);
    }
  }
  std::vector<double> qkd(len * R * R);
  for (int64_t tl = 0; tl < len; ++tl)
    for (int64_t a = 0; a < R; ++a)
      for (int64_t bb = 0; bb < R; ++bb) qkd[(tl * R + a) * R + bb] = qh.row(tl * R + a).dot(kh.row(tl * R + bb));

  // ---- Down-projection, gate, fused norm: d_out -> dY (rows, P), with dZ, dzeta, dPhi, dnorm. ----
  Mat dY(rows_all, P);
  for (int64_t row = 0; row < rows_all; ++row) {
    const int64_t tl = row / R, r = row % R, t = t0 + tl;
    const double* y = &fw.out_pregate[pb.ipre(b, t, r, h)];
    double rs = 1.0;
    if (pb.fused_norm) rs = 1.0 / std::sqrt(Eigen::Map<const Eigen::VectorXd>(y, P).squaredNorm() / double(P) + pb.norm_eps);
    double sdu = 0;
    for (int64_t p = 0; p < P; ++p) {
      const double u = y[p] * rs, wn = nw ? nw[p] : 1.0, nv = u * wn;
      const double dO = phiw ? d_out[pb.iout(b, t, 0, h) + p] * phiw[r * P + p] : d_out[pb.iout(b, t, r, h) + p];
      double sil = 1.0;
      if (pb.z) {
        const double zr = zeta ? zeta[r * P + p] : 1.0, Zv = pb.z[pb.iv(b, t, h) + p];
        const double zz = Zv * zr, sg = sigmoid_tanh(zz);
        sil = zz * sg;
        const double dzz = dO * nv * (sg * (1.0 + zz * (1.0 - sg)));
        gr.dz[pb.iv(b, t, h) + p] += dzz * zr;
        if (zeta) sh.dzeta[r * P + p] += dzz * Zv;
      }
      if (phiw) sh.dphi[r * P + p] += d_out[pb.iout(b, t, 0, h) + p] * (nv * sil);
      const double dn = dO * sil;
      if (nw) sh.dnorm[p] += dn * u;
      const double du = dn * wn;
      dY(row, p) = du;
      sdu += du * y[p];
    }
    if (pb.fused_norm) {
      const double k3 = rs * rs * rs * sdu / double(P);
      for (int64_t p = 0; p < P; ++p) dY(row, p) = rs * dY(row, p) - k3 * y[p];
    }
  }

  // ---- Reverse over chunks. ----
  Mat dq = Mat::Zero(rows_all, N), dk = Mat::Zero(rows_all, N), dv = Mat::Zero(rows_all, P);
  std::vector<double> dgam(len, 0.0), dw(len, 0.0), dadt(len, 0.0);
  double dD = 0;
  Mat dS = Mat::Zero(P, N);  // adjoint of the state leaving the chunk being processed
  if (!df.d_ssm.empty()) dS = Eigen::Map<const Mat>(df.d_ssm.data() + pb.ist_ssm(n, h), P, N);
  const int64_t nch = (len + Q - 1) / Q;
  for (int64_t c = nch - 1; c >= 0; --c) {
    const int64_t c0 = c * Q, L = std::min(Q, len - c0), r0 = c0 * R, rows = L * R;
    Mat Sc = Eigen::Map<const Mat>(fw.chunk_states.data() + pb.ichunk(pb.chunk_off[n] + c, h), P, N);
    if (opt.io) Sc = Sc.unaryExpr([&](double x) { return round_to(*opt.io, x); });
    // Decays on the token index: seg(i, j) summed directly, E_i = exp(a_i); Mr the mask on rows.
    Mat seg = Mat::Zero(L, L);
    for (int64_t j = 0; j < L; ++j) {
      double s = 0;
      for (int64_t i = j + 1; i < L; ++i) seg(i, j) = (s += adt[c0 + i]);
    }
    std::vector<double> E(L), dE(L, 0.0), dsc(L, 0.0);
    {
      double s = 0;
      for (int64_t i = 0; i < L; ++i) E[i] = std::exp(s += adt[c0 + i]);
    }
    Mat Mx = Mat::Zero(L, L), M = Mat::Zero(L, L);
    for (int64_t i = 1; i < L; ++i)
      for (int64_t j = 0; j < i; ++j) {
        Mx(i, j) = std::exp(seg(i, j));
        M(i, j) = Mx(i, j) * sc[c0 + j];
      }
    Mat Mr(rows, rows);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < rows; ++j) Mr(i, j) = M(i / R, j / R);
    const auto Qc = q.middleRows(r0, rows);
    const auto Kc = k.middleRows(r0, rows);
    const auto Vc = v.middleRows(r0, rows);
    const auto dYc = dY.middleRows(r0, rows);
    auto dQc = dq.middleRows(r0, rows);
    auto dKc = dk.middleRows(r0, rows);
    auto dVc = dv.middleRows(r0, rows);
    Mat Gs = Mat::Zero(L, L);  // dseg(i, j) on tokens

    // Inter: y_i += E_{t_i} S_c q_i.
    Mat EdY = dYc;
    for (int64_t i = 0; i < rows; ++i) EdY.row(i) *= E[i / R];
    dQc.noalias() += EdY * Sc;
    const Mat SQ = Qc * Sc.transpose();  // (rows, P): S_c q_i
    for (int64_t i = 0; i < rows; ++i) dE[i / R] += dYc.row(i).dot(SQ.row(i));
    Mat dSc = EdY.transpose() * Qc;  // (P, N)

    // Intra: y_i += sum_{t_j < t_i} M(t_i, t_j) (q_i . k_j) v_j.
    const Mat A = Qc * Kc.transpose();
    const Mat DV = dYc * Vc.transpose();  // DV_ij = dy_i . v_j
    dVc.noalias() += Mr.cwiseProduct(A).transpose() * dYc;
    const Mat dA = Mr.cwiseProduct(DV);
    dQc.noalias() += dA * Kc;
    dKc.noalias() += dA.transpose() * Qc;
    for (int64_t i = R; i < rows; ++i)
      for (int64_t j = 0; j < (i / R) * R; ++j) {
        const int64_t ti = i / R, tj = j / R;
        const double dM = A(i, j) * DV(i, j);
        dsc[tj] += dM * Mx(ti, tj);
        Gs(ti, tj) += dM * M(ti, tj);
      }

    // Diagonal: y_(t,a) += gam_t sum_b qkd(t, a, b) v_(t,b) (unrotated dots, every rank pair), and D.
    for (int64_t i = 0; i < L; ++i) {
      const int64_t tl = c0 + i;
      for (int64_t a = 0; a < R; ++a)
        for (int64_t bb = 0; bb < R; ++bb) {
          if (mut == BwdMutant::diag_same_rank_only && a != bb) continue;
          const int64_t ra = i * R + a, rb = i * R + bb, ga = tl * R + a, gb = tl * R + bb;
          const double qk = qkd[(tl * R + a) * R + bb], d = DV(ra, rb);
          dgam[tl] += qk * d;
          sh.dqh.row(ga) += (gam[tl] * d) * kh.row(gb);
          sh.dkh.row(gb) += (gam[tl] * d) * qh.row(ga);
          dVc.row(rb) += (gam[tl] * qk) * dYc.row(ra);
        }
      for (int64_t a = 0; a < R; ++a) {
        dVc.row(i * R + a) += Dh * dYc.row(i * R + a);
        dD += DV(i * R + a, i * R + a);
      }
    }

    // State: S_{c+1} = E_{L-1} S_c + sum_j W_{t_j} v_j k_j^T, dS its adjoint.
    // The carry stays exact; the chunk's gradient terms read dS as handed off (io: rounded).
    dSc += (mut == BwdMutant::adjoint_no_decay ? 1.0 : E[L - 1]) * dS;
    Mat dSr = dS;
    if (opt.io) dSr = dSr.unaryExpr([&](double x) { return round_to(*opt.io, x); });
    dE[L - 1] += dSr.cwiseProduct(Sc).sum();
    const Mat KdS = Kc * dSr.transpose();  // (rows, P): dS k_j
    const Mat VdS = Vc * dSr;              // (rows, N): dS^T v_j
    for (int64_t j = 0; j < rows; ++j) {
      const int64_t tj = j / R;
      const double Wx = tj == L - 1 ? 1.0 : std::exp(seg(L - 1, tj)), Wt = Wx * sc[c0 + tj];
      dVc.row(j) += Wt * KdS.row(j);
      dKc.row(j) += Wt * VdS.row(j);
      const double dW = VdS.row(j).dot(Kc.row(j));
      dsc[tj] += dW * Wx;
      Gs(L - 1, tj) += dW * Wt;
    }

    // Decay and trapezoid weights (sc_j = gam_j + w_{j+1}, across the chunk end for j = L-1).
    detail::chunk_decay_adjoint(L, dE, E, Gs.data(), &dadt[c0]);
    for (int64_t j = 0; j < L; ++j) {
      dgam[c0 + j] += dsc[j];
      if (c0 + j + 1 < len && mut != BwdMutant::no_shifted_term_grad) dw[c0 + j + 1] += dsc[j];
    }

    Eigen::Map<Mat>(gr.dchunk_states.data() + ((n * pb.H + h) * ncmax + c) * P * N, P, N) = dSc;
    dS = dSc;  // adjoint of the chunk-start state S_c
    if (mut == BwdMutant::no_adjoint_carry && c > 0) dS.setZero();  // the boundary drops it
  }

  // ---- Up-projection v_(t,r) = V_t (.) Psi_r, the final V seed, the sequence start. ----
  Mat dVraw = Mat::Zero(len, P);
  for (int64_t row = 0; row < rows_all; ++row) {
    const int64_t tl = row / R, r = row % R;
    for (int64_t p = 0; p < P; ++p) {
      if (!psi) {
        dVraw(tl, p) += dv(row, p);
        continue;
      }
      dVraw(tl, p) += dv(row, p) * psi[r * P + p];
      sh.dpsi[r * P + p] += dv(row, p) * V(tl, p);
    }
  }
  if (!df.d_v.empty()) dVraw.row(len - 1) += Eigen::Map<const Eigen::RowVectorXd>(df.d_v.data() + pb.ist_v(n, h), P);
  if (!df.d_k.empty())
    for (int64_t r = 0; r < R; ++r)
      dk.row((len - 1) * R + r) += Eigen::Map<const Eigen::RowVectorXd>(df.d_k.data() + pb.ist_k(n, r, h), N);
  if (st) {  // S_0 = H_init + w_0 sum_r v_init,r k_init,r^T, v_init,r = V_init (.) Psi_r
    const Eigen::Map<const Eigen::RowVectorXd> Vi(pb.init_v + pb.ist_v(n, h), P);
    Eigen::Map<Mat>(gr.dssm_state.data() + pb.ist_ssm(n, h), P, N) = dS;
    Eigen::RowVectorXd dVi = Eigen::RowVectorXd::Zero(P);
    for (int64_t r = 0; r < R; ++r) {
      const Eigen::Map<const Eigen::RowVectorXd> ki(pb.init_k + pb.ist_k(n, r, h), N);
      const Eigen::RowVectorXd vi = psi ? Eigen::RowVectorXd(Vi.cwiseProduct(Eigen::Map<const Eigen::RowVectorXd>(psi + r * P, P)))
                                        : Eigen::RowVectorXd(Vi);
      const Eigen::RowVectorXd dvi = w[0] * (ki * dS.transpose());
      Eigen::Map<Eigen::RowVectorXd>(gr.dk_state.data() + pb.ist_k(n, r, h), N) = w[0] * (vi * dS);
      if (mut != BwdMutant::no_shifted_term_grad) dw[0] += (vi * dS).dot(ki);
      if (!psi) {
        dVi += dvi;
        continue;
      }
      dVi += dvi.cwiseProduct(Eigen::Map<const Eigen::RowVectorXd>(psi + r * P, P));
      for (int64_t p = 0; p < P; ++p) sh.dpsi[r * P + p] += dvi[p] * Vi[p];
    }
    Eigen::Map<Eigen::RowVectorXd>(gr.dv_state.data() + pb.ist_v(n, h), P) = dVi;
  }

  // ---- Rotation: each token's local angle adjoint (its R rows of q and k), the inputs' gradients. ----
  std::vector<double> dphl(len * S, 0.0);
  std::vector<char> rotated(N, 0);
  for (int64_t i = 0; i < S; ++i) rotated[ia[i]] = rotated[ib[i]] = 1;
  for (int64_t row = 0; row < rows_all; ++row) {
    const int64_t tl = row / R;
    for (int64_t j = 0; j < N; ++j)
      if (!rotated[j]) sh.dqh(row, j) += dq(row, j), sh.dkh(row, j) += dk(row, j);
    for (int64_t i = 0; i < S; ++i) {
      const double c = cosv[tl * S + i], s = sinv[tl * S + i];
      const int64_t a = ia[i], bb = ib[i];
      double& dp = dphl[tl * S + i];
      dp += dq(row, bb) * q(row, a) - dq(row, a) * q(row, bb);
      dp += dk(row, bb) * k(row, a) - dk(row, a) * k(row, bb);
      sh.dqh(row, a) += dq(row, a) * c + dq(row, bb) * s;
      sh.dqh(row, bb) += -dq(row, a) * s + dq(row, bb) * c;
      sh.dkh(row, a) += dk(row, a) * c + dk(row, bb) * s;
      sh.dkh(row, bb) += -dk(row, a) * s + dk(row, bb) * c;
    }
  }
  std::vector<double> dth;
  const std::vector<double> dangle0 = detail::chunked_angle_adjoint(pb, n, h, len, df.d_angle, dphl, dth);
  if (st) std::copy(dangle0.begin(), dangle0.end(), gr.dangle_state.begin() + pb.ist_angle(n, h));
  detail::token_chains(pb, b, h, t0, len, ts, dgam, dw, dadt, dth, gr);
  for (int64_t tl = 0; tl < len; ++tl)
    for (int64_t p = 0; p < P; ++p) gr.dv[pb.iv(b, t0 + tl, h) + p] = dVraw(tl, p);
  for (int64_t row = 0; row < rows_all; ++row)
    for (int64_t j = 0; j < N; ++j) {
      sh.dqb[(row % R) * N + j] += sh.dqh(row, j);
      sh.dkb[(row % R) * N + j] += sh.dkh(row, j);
    }
  sh.dD = dD;
}

// The per-(sequence, head) runs in parallel, then the shared sums in a fixed order.
void run_all(const Problem& pb, const Result& fw, const ChunkedBackwardOptions& opt,
             const std::vector<double>& d_out, const FinalGrads& dfinal, Grads& gr) {
  const int64_t NS = pb.NS(), H = pb.H, N = pb.N, P = pb.P, R = pb.R;
  const int64_t ncmax = detail::alloc_dchunk_states(pb, gr);
  // Parallel over (sequence, q/k group): the heads of a group run in order and add their dq / dk
  // into the group's slice (disjoint between tasks); every other slice written in run_one is the
  // (sequence, head)'s own. The per-head sums over sequences are added below in a fixed order.
  const int64_t G = pb.G, hpg = H / G, work = NS * G;
  std::vector<Shared> sh(NS * H);
#pragma omp parallel for schedule(dynamic)
  for (int64_t wi = 0; wi < work; ++wi) {
    const int64_t n = wi / G, g = wi % G;
    const int64_t b = pb.seq_row[n], t0 = pb.seq_start[n], len = pb.seq_len[n];
    for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
      Shared& s = sh[n * H + h];
      run_one(pb, fw, opt, n, h, d_out, dfinal, ncmax, gr, s);
      for (int64_t tl = 0; tl < len; ++tl)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t j = 0; j < N; ++j) {
            gr.dq[pb.iqk(b, t0 + tl, r, g) + j] += s.dqh(tl * R + r, j);
            gr.dk[pb.iqk(b, t0 + tl, r, g) + j] += s.dkh(tl * R + r, j);
          }
      s.dqh.resize(0, 0);
      s.dkh.resize(0, 0);
    }
  }
  for (int64_t n = 0; n < NS; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const Shared& s = sh[n * H + h];
      for (int64_t i = 0; i < R * N; ++i) gr.dq_bias[h * R * N + i] += s.dqb[i], gr.dk_bias[h * R * N + i] += s.dkb[i];
      // MIMO only (empty for SISO).
      for (size_t i = 0; i < s.dpsi.size(); ++i) gr.dpsi[h * R * P + i] += s.dpsi[i];
      for (size_t i = 0; i < s.dzeta.size(); ++i) gr.dzeta[h * R * P + i] += s.dzeta[i];
      for (size_t i = 0; i < s.dphi.size(); ++i) gr.dphi[h * R * P + i] += s.dphi[i];
      for (size_t i = 0; i < s.dnorm.size(); ++i) gr.dnorm_weight[h * P + i] += s.dnorm[i];
      if (pb.d) gr.dd[h] += s.dD;
    }
}

// Both entry points: validated problem and upstream gradients, the chunked forward (folded
// chunk-start states and the pre-gate output), then the reverse sweep.
template <class Params, class In>
Grads chunked_backward(const char* who, const Params& p, const In& in, const std::vector<double>& d_out,
                       const FinalGrads& dfinal, const ChunkedBackwardOptions& opt,
                       Result (*forward)(const Params&, const In&)) {
  const Problem pb = detail::make_problem(p, in);  // validates every input as the forward does
  detail::check_upstream(who, pb, d_out, dfinal);
  const Result fw = forward(p, in);
  Grads gr = detail::zero_grads(in);
  run_all(pb, fw, opt, d_out, dfinal, gr);
  return gr;
}

}  // namespace

std::string_view bwd_mutant_name(BwdMutant m) {
  switch (m) {
    case BwdMutant::none: return "none";
    case BwdMutant::adjoint_no_decay: return "bwd_adjoint_no_decay";
    case BwdMutant::no_adjoint_carry: return "bwd_no_adjoint_carry";
    case BwdMutant::no_shifted_term_grad: return "bwd_no_shifted_term_grad";
    case BwdMutant::diag_same_rank_only: return "bwd_diag_same_rank_only";
  }
  return "?";
}

Grads backward_siso_chunked(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                            const FinalGrads& dfinal, const ChunkedBackwardOptions& opt) {
  return chunked_backward("mamba3 chunked backward", p, in, d_out, dfinal, opt, &siso_chunked);
}

Grads backward_mimo_chunked(const MimoParams& p, const MimoInputs& in, const std::vector<double>& d_out,
                            const FinalGrads& dfinal, const ChunkedBackwardOptions& opt) {
  return chunked_backward("mamba3 mimo chunked backward", p, in, d_out, dfinal, opt, &mimo_chunked);
}

}  // namespace assay::mamba3
