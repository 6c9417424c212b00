// Gated delta rule backward, chunked (WY / UT) form: see gated_delta_backward.h (backward_chunked)
// for what is computed per chunk and what crosses chunk boundaries; the shared input handling is in
// gated_delta_backward_internal.h.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "reference/gated_delta/gated_delta_backward.h"
#include "reference/gated_delta/gated_delta_backward_internal.h"
#include "reference/gated_delta/gated_delta_state.h"

namespace assay::gated_delta {

namespace {
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;
}  // namespace

Grads backward_chunked(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                       const std::vector<double>& dfinal_state) {
  // The chunked forward gives the chunk-start states h_c (as fla's chunk_gated_delta_rule_bwd
  // recomputes them with chunk_gated_delta_rule_fwd_h).
  const detail::BwdPrep P = detail::prepare_backward(p, in, d_o, dfinal_state, &chunked);
  const int64_t T = P.T, H = P.H, HV = P.HV, K = P.K, V = P.V, KV = P.KV, G = P.G, C = P.C;
  const double scale = P.scale;
  detail::RawGrads raw = detail::zero_raw_grads(P, in);

  const int64_t jobs = P.Nseq * H;  // one job per (sequence, q/k head): GVA reduction race-free
#pragma omp parallel for schedule(dynamic)
  for (int64_t job = 0; job < jobs; ++job) {
    const int64_t n = job / H, h = job % H;
    const detail::BwdSeq& s = P.seqs[n];
    for (int64_t hv = h * G; hv < (h + 1) * G; ++hv) {
      Mat dh = Mat::Zero(K, V);  // adjoint of the state at the end of the current chunk
      if (!dfinal_state.empty())
        detail::load_state(dfinal_state.data() + (n * HV + hv) * KV, p.state_layout, K, V, dh.data());
      const int64_t nchunks = (s.len + C - 1) / C;
      for (int64_t c = nchunks - 1; c >= 0; --c) {
        const int64_t c0 = c * C, L = std::min(C, s.len - c0);
        Mat S0(K, V);
        detail::load_state(P.fw.chunk_states.data() + ((P.fw.chunk_offsets[n] + c) * HV + hv) * KV,
                           p.state_layout, K, V, S0.data());
        Mat Q(L, K), Kc(L, K), Vc(L, V), dO(L, V);
        Vec g(L), b(L);
        for (int64_t i = 0; i < L; ++i) {
          const int64_t tok = s.b * T + s.t0 + c0 + i, qk = (tok * H + h) * K, tv = tok * HV + hv;
          for (int64_t x = 0; x < K; ++x) Q(i, x) = P.qh[qk + x], Kc(i, x) = P.kh[qk + x];
          for (int64_t x = 0; x < V; ++x) Vc(i, x) = in.v[tv * V + x], dO(i, x) = d_o[tv * V + x];
          g(i) = P.ge[tv];
          b(i) = P.be[tv];
        }
        // ---- Forward quantities of the chunk, as chunked() (Mutant::none, no emulation). ----
        // Segment sums by accumulation: D(i, j) = sum_{r=j+1..i} g_r (j <= i); Gin(i) = D(i, -1).
        Mat D = Mat::Zero(L, L);
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = i - 1; j >= 0; --j) D(i, j) = D(i, j + 1) + g(j + 1);
        Vec Gin(L), e(L);
        for (int64_t i = 0; i < L; ++i) {
          Gin(i) = (i ? Gin(i - 1) : 0.0) + g(i);
          e(i) = std::exp(Gin(i));
        }
        Mat E = Mat::Zero(L, L);  // exp(D), lower triangle with the diagonal
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j <= i; ++j) E(i, j) = std::exp(D(i, j));
        const Mat KKt = Kc * Kc.transpose();
        Mat A = Mat::Zero(L, L);
        for (int64_t i = 1; i < L; ++i)
          for (int64_t j = 0; j < i; ++j) A(i, j) = b(i) * KKt(i, j) * E(i, j);
        Mat Tm = Mat::Identity(L, L);  // (I + A)^-1 by forward substitution
        for (int64_t i = 1; i < L; ++i)
          for (int64_t j = 0; j < i; ++j) {
            double acc = 0;
            for (int64_t m = j; m < i; ++m) acc += A(i, m) * Tm(m, j);
            Tm(i, j) = -acc;
          }
        Mat bV = Vc, bK = Kc;
        for (int64_t i = 0; i < L; ++i) bV.row(i) *= b(i), bK.row(i) *= b(i) * e(i);
        const Mat w = Tm * bK;
        const Mat vnew = Tm * bV - w * S0;
        const Mat QKt = Q * Kc.transpose();
        Mat M = Mat::Zero(L, L);
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j <= i; ++j) M(i, j) = QKt(i, j) * E(i, j);
        const Mat QS0 = Q * S0;
        const double eL = e(L - 1);

        // ---- Reverse. dDx(i, j + 1): adjoint of D(i, j), j = -1..i-1 (column 0: Gin(i)). ----
        Mat dDx = Mat::Zero(L, L + 1);
        Mat dQ = Mat::Zero(L, K), dK = Mat::Zero(L, K);
        Vec db = Vec::Zero(L);
        // State update S_end = eL S0 + sum_j k_j E(L-1, j) vnew_j^T.
        Mat dS0 = eL * dh;
        dDx(L - 1, 0) += eL * (dh.cwiseProduct(S0)).sum();
        const Mat dhT_k = Kc * dh;  // row j: k_j^T dh  [L, V]
        Mat dvnew(L, V);
        for (int64_t j = 0; j < L; ++j) {
          const double f = E(L - 1, j);
          dK.row(j) += f * (dh * vnew.row(j).transpose()).transpose();
          dvnew.row(j) = f * dhT_k.row(j);
          if (j < L - 1) dDx(L - 1, j + 1) += f * dhT_k.row(j).dot(vnew.row(j));
        }
        // Output O = scale (diag(e) Q S0 + M vnew).
        const Mat dOs = scale * dO;
        for (int64_t i = 0; i < L; ++i) {
          dQ.row(i) += e(i) * (S0 * dOs.row(i).transpose()).transpose();
          dDx(i, 0) += e(i) * dOs.row(i).dot(QS0.row(i));
        }
        Mat eQ = Q;
        for (int64_t i = 0; i < L; ++i) eQ.row(i) *= e(i);
        dS0 += eQ.transpose() * dOs;
        dvnew += M.transpose() * dOs;
        const Mat dM = dOs * vnew.transpose();
        Mat dQKt = Mat::Zero(L, L);
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j <= i; ++j) {
            dQKt(i, j) = dM(i, j) * E(i, j);
            if (j < i) dDx(i, j + 1) += dM(i, j) * QKt(i, j) * E(i, j);
          }
        dQ += dQKt * Kc;
        dK += dQKt.transpose() * Q;
        // vnew = u - w S0, u = T bV, w = T bK.
        const Mat dw = -dvnew * S0.transpose();
        dS0 -= w.transpose() * dvnew;
        const Mat dT = dvnew * bV.transpose() + dw * bK.transpose();
        const Mat dbV = Tm.transpose() * dvnew;
        const Mat dbK = Tm.transpose() * dw;
        for (int64_t i = 0; i < L; ++i) {
          const int64_t tv = (s.b * T + s.t0 + c0 + i) * HV + hv;
          for (int64_t x = 0; x < V; ++x) raw.dv[tv * V + x] = b(i) * dbV(i, x);
          db(i) += dbV.row(i).dot(Vc.row(i));
          const double kd = dbK.row(i).dot(Kc.row(i));
          db(i) += e(i) * kd;
          dDx(i, 0) += b(i) * e(i) * kd;
          dK.row(i) += b(i) * e(i) * dbK.row(i);
        }
        // T = (I + A)^-1: dA = -T^T dT T^T on the strictly lower triangle.
        const Mat dA = -(Tm.transpose() * dT * Tm.transpose());
        Mat dKKt = Mat::Zero(L, L);
        for (int64_t i = 1; i < L; ++i)
          for (int64_t j = 0; j < i; ++j) {
            db(i) += dA(i, j) * KKt(i, j) * E(i, j);
            dKKt(i, j) = dA(i, j) * b(i) * E(i, j);
            dDx(i, j + 1) += dA(i, j) * b(i) * KKt(i, j) * E(i, j);
          }
        dK += (dKKt + dKKt.transpose()) * Kc;
        // Gate: dg_r = sum_{i >= r} sum_{j < r} dD(i, j) (D(i, j) holds g_r iff j < r <= i).
        Vec dgc = Vec::Zero(L);
        for (int64_t i = 0; i < L; ++i) {
          double pre = 0;
          for (int64_t r = 0; r <= i; ++r) {
            pre += dDx(i, r);  // columns 0..r: j = -1..r-1
            dgc(r) += pre;
          }
        }
        for (int64_t i = 0; i < L; ++i) {
          const int64_t tok = s.b * T + s.t0 + c0 + i, qk = (tok * H + h) * K, tv = tok * HV + hv;
          for (int64_t x = 0; x < K; ++x) raw.dqh[qk + x] += dQ(i, x), raw.dkh[qk + x] += dK(i, x);
          raw.dbe[tv] = db(i);
          raw.dge[tv] = dgc(i);
        }
        dh = dS0;  // the chunk-start state's adjoint goes to the previous chunk
      }
      if (!raw.dinitial_state.empty())
        detail::store_state(dh.data(), p.state_layout, K, V, raw.dinitial_state.data() + (n * HV + hv) * KV);
    }
  }
  return detail::finish_backward(p, in, P, std::move(raw));
}

}  // namespace assay::gated_delta
