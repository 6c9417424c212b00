// Mamba-3 SISO backward, form (b): the chunked backward (mamba3_backward.h "Form (b)" has the math).
// The forward is recomputed by the chunked form (mamba3::siso_chunked: folded chunk-start states and
// the pre-gate output); the reverse sweep runs per chunk (last first) with Eigen GEMMs over the
// chunk's tokens and passes the adjoint of the chunk-start state backwards. It never calls the
// step recurrence or its backward (form (a), mamba3_backward.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include <Eigen/Dense>

#include "reference/core/check.h"
#include "reference/mamba3/mamba3_backward_internal.h"
#include "reference/mamba3/mamba3_backward.h"
#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3 {

namespace {

using detail::kPi;
using detail::Problem;
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

using detail::sigmoid_tanh;

// What one (sequence, head) contributes to gradients shared with other work items (added in a
// fixed order by the caller): dq / dk of its tokens (the group's slice), the biases and dD.
struct Shared {
  Mat dqh, dkh;                  // (len, N), unrotated (the inputs' gradients); scratch per task
  std::vector<double> dqb, dkb;  // (N)
  double dD = 0;
};

void run_one(const Problem& pb, const Result& fw, const SisoChunkedBackwardOptions& opt, int64_t n, int64_t h, const std::vector<double>& d_out,
             const SisoFinalGrads& df, int64_t ncmax, SisoGrads& gr, Shared& sh) {
  const SisoBwdMutant mut = opt.mutant;
  const int64_t N = pb.N, P = pb.P, S = pb.S, Q = pb.chunk;
  const int64_t b = pb.seq_row[n], t0 = pb.seq_start[n], len = pb.seq_len[n];
  const int64_t g = h / (pb.H / pb.G);
  const bool st = pb.init_ssm != nullptr;
  const double Dh = pb.d ? pb.d[h] : 0.0;
  sh.dqb.assign(N, 0.0);
  sh.dkb.assign(N, 0.0);
  sh.dqh.setZero(len, N);
  sh.dkh.setZero(len, N);

  if (len == 0) {  // the input states pass through: their gradients are the final-state gradients
    if (st) {
      if (!df.d_angle.empty())
        std::copy_n(df.d_angle.begin() + pb.ist_angle(n, h), S, gr.dangle_state.begin() + pb.ist_angle(n, h));
      if (!df.d_ssm.empty())
        std::copy_n(df.d_ssm.begin() + pb.ist_ssm(n, h), P * N, gr.dssm_state.begin() + pb.ist_ssm(n, h));
      if (!df.d_k.empty()) std::copy_n(df.d_k.begin() + pb.ist_k(n, 0, h), N, gr.dk_state.begin() + pb.ist_k(n, 0, h));
      if (!df.d_v.empty()) std::copy_n(df.d_v.begin() + pb.ist_v(n, h), P, gr.dv_state.begin() + pb.ist_v(n, h));
    }
    return;
  }

  // ---- Per-token scalars and angles (shared with the MIMO chunked backward). ----
  const detail::TokenScalars ts = detail::token_scalars(pb, b, h, t0, len);
  const std::vector<double>&gam = ts.gam, &w = ts.w, &sc = ts.sc, &adt = ts.adt;
  const std::vector<double> phi = detail::chunked_angles(pb, n, h, ts.dts);
  std::vector<double> cosv(len * S), sinv(len * S);
  for (int64_t i = 0; i < len * S; ++i) cosv[i] = std::cos(phi[i]), sinv[i] = std::sin(phi[i]);

  // ---- Biased q^, k^ (unrotated), rotated q, k, raw V, the diagonal dots q^ . k^. ----
  Mat qh(len, N), kh(len, N), V(len, P);
  for (int64_t tl = 0; tl < len; ++tl) {
    const int64_t t = t0 + tl;
    for (int64_t j = 0; j < N; ++j) {
      qh(tl, j) = pb.q[pb.iqk(b, t, 0, g) + j] + pb.q_bias[h * N + j];
      kh(tl, j) = pb.k[pb.iqk(b, t, 0, g) + j] + pb.k_bias[h * N + j];
    }
    for (int64_t p = 0; p < P; ++p) V(tl, p) = pb.v[pb.iv(b, t, h) + p];
  }
  Mat q = qh, k = kh;
  for (int64_t tl = 0; tl < len; ++tl)
    for (int64_t i = 0; i < S; ++i) {
      const double c = cosv[tl * S + i], s = sinv[tl * S + i];
      const int64_t a = 2 * i, bb = 2 * i + 1;
      q(tl, a) = c * qh(tl, a) - s * qh(tl, bb);
      q(tl, bb) = s * qh(tl, a) + c * qh(tl, bb);
      k(tl, a) = c * kh(tl, a) - s * kh(tl, bb);
      k(tl, bb) = s * kh(tl, a) + c * kh(tl, bb);
    }
  std::vector<double> qkd(len);
  for (int64_t tl = 0; tl < len; ++tl) qkd[tl] = qh.row(tl).dot(kh.row(tl));

  // ---- Gate: dy (upstream of the pre-gate y) and dZ. ----
  Mat dY(len, P);
  for (int64_t tl = 0; tl < len; ++tl) {
    const int64_t t = t0 + tl;
    for (int64_t p = 0; p < P; ++p) {
      const double dO = d_out[pb.iv(b, t, h) + p];
      if (pb.z) {
        const double zz = pb.z[pb.iv(b, t, h) + p];
        const double sg = sigmoid_tanh(zz);
        const double y = fw.out_pregate[pb.ipre(b, t, 0, h) + p];
        dY(tl, p) = dO * (zz * sg);
        gr.dz[pb.iv(b, t, h) + p] = dO * y * (sg * (1.0 + zz * (1.0 - sg)));
      } else {
        dY(tl, p) = dO;
      }
    }
  }

  // ---- Reverse over chunks. ----
  Mat dq = Mat::Zero(len, N), dk = Mat::Zero(len, N), dV = Mat::Zero(len, P);
  std::vector<double> dgam(len, 0.0), dw(len, 0.0), dadt(len, 0.0);
  double dD = 0;
  Mat dS = Mat::Zero(P, N);  // adjoint of the state leaving the chunk being processed
  if (!df.d_ssm.empty()) dS = Eigen::Map<const Mat>(df.d_ssm.data() + pb.ist_ssm(n, h), P, N);
  const int64_t nch = (len + Q - 1) / Q;
  for (int64_t c = nch - 1; c >= 0; --c) {
    const int64_t c0 = c * Q, L = std::min(Q, len - c0);
    // The chunk-start state as the gradient kernels read it (io: rounded to the hand-off dtype).
    Mat Sc = Eigen::Map<const Mat>(fw.chunk_states.data() + pb.ichunk(pb.chunk_off[n] + c, h), P, N);
    if (opt.io) Sc = Sc.unaryExpr([&](double x) { return round_to(*opt.io, x); });
    // Decays: seg(i, j) summed directly, a_i inclusive; Mx = exp(seg) strictly below the diagonal.
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
    const auto Qc = q.middleRows(c0, L);
    const auto Kc = k.middleRows(c0, L);
    const auto Vc = V.middleRows(c0, L);
    const auto dYc = dY.middleRows(c0, L);
    auto dQc = dq.middleRows(c0, L);
    auto dKc = dk.middleRows(c0, L);
    auto dVc = dV.middleRows(c0, L);
    Mat Gs = Mat::Zero(L, L);  // dseg(i, j)

    // Inter: y_i += E_i S_c q_i.
    Mat EdY = dYc;
    for (int64_t i = 0; i < L; ++i) EdY.row(i) *= E[i];
    dQc.noalias() += EdY * Sc;
    const Mat SQ = Qc * Sc.transpose();  // (L, P): S_c q_i
    for (int64_t i = 0; i < L; ++i) dE[i] += dYc.row(i).dot(SQ.row(i));
    Mat dSc = EdY.transpose() * Qc;  // (P, N)

    // Intra: y_i += sum_{j<i} M_ij (q_i . k_j) V_j.
    const Mat A = Qc * Kc.transpose();
    const Mat DV = dYc * Vc.transpose();  // DV_ij = dy_i . V_j
    dVc.noalias() += M.cwiseProduct(A).transpose() * dYc;
    const Mat dA = M.cwiseProduct(DV);
    dQc.noalias() += dA * Kc;
    dKc.noalias() += dA.transpose() * Qc;
    for (int64_t i = 1; i < L; ++i)
      for (int64_t j = 0; j < i; ++j) {
        const double dM = A(i, j) * DV(i, j);
        dsc[j] += dM * Mx(i, j);
        Gs(i, j) += dM * M(i, j);
      }

    // Diagonal (unrotated same-step dot) and D.
    for (int64_t i = 0; i < L; ++i) {
      const int64_t tl = c0 + i;
      dgam[tl] += qkd[tl] * DV(i, i);
      const double cf = gam[tl] * DV(i, i);
      sh.dqh.row(tl) += cf * kh.row(tl);
      sh.dkh.row(tl) += cf * qh.row(tl);
      dVc.row(i) += (gam[tl] * qkd[tl] + Dh) * dYc.row(i);
      dD += DV(i, i);
    }

    // State: S_{c+1} = E_{L-1} S_c + sum_j W_j V_j k_j^T, dS its adjoint.
    // The carry stays exact; the chunk's gradient terms read dS as handed off (io: rounded).
    dSc += (mut == SisoBwdMutant::adjoint_no_decay ? 1.0 : E[L - 1]) * dS;
    Mat dSr = dS;
    if (opt.io) dSr = dSr.unaryExpr([&](double x) { return round_to(*opt.io, x); });
    dE[L - 1] += dSr.cwiseProduct(Sc).sum();
    const Mat KdS = Kc * dSr.transpose();  // (L, P): dS k_j
    const Mat VdS = Vc * dSr;              // (L, N): dS^T V_j
    for (int64_t j = 0; j < L; ++j) {
      const double Wx = j == L - 1 ? 1.0 : std::exp(seg(L - 1, j)), Wt = Wx * sc[c0 + j];
      dVc.row(j) += Wt * KdS.row(j);
      dKc.row(j) += Wt * VdS.row(j);
      const double dW = VdS.row(j).dot(Kc.row(j));
      dsc[j] += dW * Wx;
      Gs(L - 1, j) += dW * Wt;
    }

    // Decay: dADT_m = sum over every segment holding m.
    detail::chunk_decay_adjoint(L, dE, E, Gs.data(), &dadt[c0]);
    // Trapezoid weights: sc_j = gam_j + w_{j+1}; w_{j+1} of the next chunk's first token for j = L-1.
    for (int64_t j = 0; j < L; ++j) {
      dgam[c0 + j] += dsc[j];
      if (c0 + j + 1 < len && mut != SisoBwdMutant::no_shifted_term_grad) dw[c0 + j + 1] += dsc[j];
    }

    Eigen::Map<Mat>(gr.dchunk_states.data() + ((n * pb.H + h) * ncmax + c) * P * N, P, N) = dSc;
    dS = dSc;  // adjoint of the chunk-start state S_c
    if (mut == SisoBwdMutant::no_adjoint_carry && c > 0) dS.setZero();  // the boundary drops it
  }

  // ---- Sequence start: S_0 = H_init + w_0 V_init k_init^T; final K / V seeds. ----
  if (st) {
    const Eigen::Map<const Eigen::RowVectorXd> vi(pb.init_v + pb.ist_v(n, h), P);
    const Eigen::Map<const Eigen::RowVectorXd> ki(pb.init_k + pb.ist_k(n, 0, h), N);
    Eigen::Map<Mat>(gr.dssm_state.data() + pb.ist_ssm(n, h), P, N) = dS;
    Eigen::Map<Eigen::RowVectorXd>(gr.dv_state.data() + pb.ist_v(n, h), P) = w[0] * (ki * dS.transpose());
    Eigen::Map<Eigen::RowVectorXd>(gr.dk_state.data() + pb.ist_k(n, 0, h), N) = w[0] * (vi * dS);
    if (mut != SisoBwdMutant::no_shifted_term_grad) dw[0] += (vi * dS).dot(ki);
  }
  if (!df.d_k.empty()) dk.row(len - 1) += Eigen::Map<const Eigen::RowVectorXd>(df.d_k.data() + pb.ist_k(n, 0, h), N);
  if (!df.d_v.empty()) dV.row(len - 1) += Eigen::Map<const Eigen::RowVectorXd>(df.d_v.data() + pb.ist_v(n, h), P);

  // ---- Per-token chains. ----
  // Rotation: dphi_t (local) from the rotated dq, dk; the inputs' gradients dqh, dkh (plus the
  // diagonal's unrotated part already in sh.dqh / sh.dkh).
  std::vector<double> dphl(len * S, 0.0);
  for (int64_t tl = 0; tl < len; ++tl) {
    for (int64_t j = 2 * S; j < N; ++j) sh.dqh(tl, j) += dq(tl, j), sh.dkh(tl, j) += dk(tl, j);
    for (int64_t i = 0; i < S; ++i) {
      const double c = cosv[tl * S + i], s = sinv[tl * S + i];
      const int64_t a = 2 * i, bb = 2 * i + 1;
      double& dp = dphl[tl * S + i];
      dp += dq(tl, bb) * q(tl, a) - dq(tl, a) * q(tl, bb);
      dp += dk(tl, bb) * k(tl, a) - dk(tl, a) * k(tl, bb);
      sh.dqh(tl, a) += dq(tl, a) * c + dq(tl, bb) * s;
      sh.dqh(tl, bb) += -dq(tl, a) * s + dq(tl, bb) * c;
      sh.dkh(tl, a) += dk(tl, a) * c + dk(tl, bb) * s;
      sh.dkh(tl, bb) += -dk(tl, a) * s + dk(tl, bb) * c;
    }
  }
  // Angles, chunked (dtheta_t: the carried adjoint plus the suffix sum within the chunk), then the
  // per-token chains into dDT, dAngles, dADT, dTrap.
  std::vector<double> dth;
  const std::vector<double> dangle0 = detail::chunked_angle_adjoint(pb, n, h, len, df.d_angle, dphl, dth);
  if (st) std::copy(dangle0.begin(), dangle0.end(), gr.dangle_state.begin() + pb.ist_angle(n, h));
  detail::token_chains(pb, b, h, t0, len, ts, dgam, dw, dadt, dth, gr);
  for (int64_t tl = 0; tl < len; ++tl)
    for (int64_t p = 0; p < P; ++p) gr.dv[pb.iv(b, t0 + tl, h) + p] = dV(tl, p);
  for (int64_t tl = 0; tl < len; ++tl)
    for (int64_t j = 0; j < N; ++j) sh.dqb[j] += sh.dqh(tl, j), sh.dkb[j] += sh.dkh(tl, j);
  sh.dD = dD;
}

}  // namespace

std::string_view siso_bwd_mutant_name(SisoBwdMutant m) {
  switch (m) {
    case SisoBwdMutant::none: return "none";
    case SisoBwdMutant::adjoint_no_decay: return "bwd_adjoint_no_decay";
    case SisoBwdMutant::no_adjoint_carry: return "bwd_no_adjoint_carry";
    case SisoBwdMutant::no_shifted_term_grad: return "bwd_no_shifted_term_grad";
  }
  return "?";
}

SisoGrads backward_siso_chunked(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                                const SisoFinalGrads& dfinal, const SisoChunkedBackwardOptions& opt) {
  const Problem pb = detail::make_problem(p, in);  // validates every input as the forward does
  detail::check_siso_upstream("mamba3 chunked backward", pb, d_out, dfinal);
  const int64_t NS = pb.NS(), H = pb.H, N = pb.N;

  const Result fw = siso_chunked(p, in);  // folded chunk-start states and the pre-gate output

  SisoGrads gr = detail::zero_siso_grads(in);
  const int64_t ncmax = detail::alloc_dchunk_states(pb, gr);

  // Parallel over (sequence, q/k group): the heads of a group run in order and add their dq / dk
  // into the group's slice (disjoint between tasks); every other slice written in run_one is the
  // (sequence, head)'s own. The per-head sums over sequences (biases, dD) are added below in a fixed
  // order. Deterministic, and the same summation order as backward_siso_recurrent.
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
        for (int64_t j = 0; j < N; ++j) {
          gr.dq[pb.iqk(b, t0 + tl, 0, g) + j] += s.dqh(tl, j);
          gr.dk[pb.iqk(b, t0 + tl, 0, g) + j] += s.dkh(tl, j);
        }
      s.dqh.resize(0, 0);
      s.dkh.resize(0, 0);
    }
  }
  for (int64_t n = 0; n < NS; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const Shared& s = sh[n * H + h];
      for (int64_t j = 0; j < N; ++j) gr.dq_bias[h * N + j] += s.dqb[j], gr.dk_bias[h * N + j] += s.dkb[j];
      if (pb.d) gr.dd[h] += s.dD;
    }
  return gr;
}

}  // namespace assay::mamba3
