// Gated delta rule backward, chunked (WY / UT) form: see gated_delta_backward.h (backward_chunked)
// for what is computed per chunk and what crosses chunk boundaries; the shared input handling is in
// gated_delta_backward_internal.h.
//
// Parallel over (sequence, head, chunk) for all the per-chunk work; only the adjoint carry between
// chunks is sequential (fla's chunk_gated_delta_rule_bwd_dhu). The chunk-start adjoint is linear in
// the carried dh (the adjoint of the state at the chunk's END): with f_j = E(L-1, j),
//   dvnew = f (.) (Kc dh) + M^T dOs,   dS0 = eL dh + eQ^T dOs - w^T dvnew,
// where M^T dOs and eQ^T dOs do not depend on dh. The carry evaluates exactly these expressions
// in this order (as the one-pass form did); only the GEMM operand shapes differ (column blocks,
// strided rows), which some OpenBLAS kernels round differently (seen: ~4e-15 relative).
// Three passes; each work item writes only its own slice and every sum has one fixed order, so the
// result does not depend on the thread count (the passes always run inside a parallel region, where
// OpenBLAS runs each GEMM on the calling thread):
//   1. parallel over (chunk, hv): the chunk's forward quantities (kept for pass 3), M^T dOs and
//      eQ^T dOs;
//   2. parallel over (sequence, hv, block of kVBlock value columns), chunks last to first: dh at
//      every chunk end, dvnew, dinitial_state;
//   3. parallel over (chunk, q/k head h), the value heads of h in order (chunks own disjoint token
//      rows, so dq / dk of a group accumulate race-free and in the one-pass form's order): the rest.
#include <algorithm>
#include <cmath>
#include <memory>
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
using MapM = Eigen::Map<Mat>;
using CMapS = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;  // rows of a [.., H, K]-style tensor
using MapS = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;

constexpr int64_t kVBlock = 32;  // value columns per adjoint-carry work item (fixed: see pass 2)

// The forward quantities of one (chunk, value head) that the reverse reads (as chunked(),
// Mutant::none, no emulation): E = exp(D) (lower, diagonal included), e = exp(G), KKt, T = (I + A)^-1,
// w = T (beta e^G K), QKt.
struct ChunkFwd {
  Mat E, KKt, Tm, w, QKt;
  Vec e;
};
}  // namespace

Grads backward_chunked(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                       const std::vector<double>& dfinal_state, const ChunkedBackwardOptions& opt) {
  const BwdMutant mut = opt.mutant;
  // The emulation's roundings (opt.io): a tensor as the next kernel reads it. Identity without io.
  auto rnd = [&](auto&& m) {  // a Mat or a (strided) Map
    if (opt.io) m = m.unaryExpr([&](double x) { return round_to(*opt.io, x); });
  };
  // The chunked forward gives the chunk-start states h_c (as fla's chunk_gated_delta_rule_bwd
  // recomputes them with chunk_gated_delta_rule_fwd_h).
  const detail::BwdPrep P = detail::prepare_backward(p, in, d_o, dfinal_state, &chunked);
  const int64_t T = P.T, H = P.H, HV = P.HV, K = P.K, V = P.V, KV = P.KV, G = P.G, C = P.C;
  const int64_t BT = P.B * T;
  const double scale = P.scale;
  detail::RawGrads raw = detail::zero_raw_grads(P, in);

  // The chunk list: sequence, chunk index in it, first token inside the sequence, length, first
  // token's row in [B*T]; chunks of sequence n are [coff[n], coff[n + 1]).
  struct Chunk {
    int64_t n, c, c0, L, tok0;
  };
  std::vector<Chunk> chunks;
  std::vector<int64_t> coff(P.Nseq + 1, 0);
  for (int64_t n = 0; n < P.Nseq; ++n) {
    const detail::BwdSeq& s = P.seqs[n];
    for (int64_t c = 0; c * C < s.len; ++c)
      chunks.push_back({n, c, c * C, std::min(C, s.len - c * C), s.b * T + s.t0 + c * C});
    coff[n + 1] = static_cast<int64_t>(chunks.size());
  }
  const int64_t NC = coff[P.Nseq];

  // Adjoint slots [K][V] per (sequence, boundary, hv): boundary c of sequence n (c = 0..nchunks) is
  // the START of its chunk c (= the end of chunk c - 1; c = nchunks: the end of the sequence), slot
  // (coff[n] + n + c). Pass 1 writes chunk c's eQ^T dOs there, pass 2 the adjoint.
  auto slot = [&](double* base, int64_t n, int64_t c, int64_t hv) { return base + ((coff[n] + n + c) * HV + hv) * KV; };
  const std::unique_ptr<double[]> DH(new double[(NC + P.Nseq) * HV * KV]);
  // Per (hv, token) rows, [HV, B*T, .]: M^T dOs (turned into dvnew by pass 2); Kc dh (pass 2, read
  // by pass 3); f_j = E(L-1, j).
  const std::unique_ptr<double[]> DVN(new double[HV * BT * V]), KDH(new double[HV * BT * V]);
  std::vector<double> F(HV * BT), eL(NC * HV);
  std::vector<ChunkFwd> fwd(NC * HV);

  // 1. Per (chunk, hv): forward quantities, M^T dOs and eQ^T dOs.
#pragma omp parallel for schedule(dynamic)
  for (int64_t job = 0; job < NC * HV; ++job) {
    const Chunk& ch = chunks[job / HV];
    const int64_t hv = job % HV, h = hv / G, L = ch.L;
    Mat Q(L, K), Kc(L, K), Vc(L, V), dO(L, V);
    Vec g(L), b(L);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t tok = ch.tok0 + i, qk = (tok * H + h) * K, tv = tok * HV + hv;
      for (int64_t x = 0; x < K; ++x) Q(i, x) = P.qh[qk + x], Kc(i, x) = P.kh[qk + x];
      for (int64_t x = 0; x < V; ++x) Vc(i, x) = in.v[tv * V + x], dO(i, x) = d_o[tv * V + x];
      g(i) = P.ge[tv];
      b(i) = P.be[tv];
    }
    ChunkFwd& cf = fwd[job];
    // Segment sums by accumulation: D(i, j) = sum_{r=j+1..i} g_r (j <= i); Gin(i) = D(i, -1).
    Mat D = Mat::Zero(L, L);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = i - 1; j >= 0; --j) D(i, j) = D(i, j + 1) + g(j + 1);
    Vec Gin(L);
    cf.e.resize(L);
    for (int64_t i = 0; i < L; ++i) {
      Gin(i) = (i ? Gin(i - 1) : 0.0) + g(i);
      cf.e(i) = std::exp(Gin(i));
    }
    const Vec& e = cf.e;
    cf.E = Mat::Zero(L, L);
    Mat& E = cf.E;
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) E(i, j) = std::exp(D(i, j));
    cf.KKt = Kc * Kc.transpose();
    Mat A = Mat::Zero(L, L);
    for (int64_t i = 1; i < L; ++i)
      for (int64_t j = 0; j < i; ++j) A(i, j) = b(i) * cf.KKt(i, j) * E(i, j);
    cf.Tm = Mat::Identity(L, L);  // (I + A)^-1 by forward substitution
    Mat& Tm = cf.Tm;
    for (int64_t i = 1; i < L; ++i)
      for (int64_t j = 0; j < i; ++j) {
        double acc = 0;
        for (int64_t m = j; m < i; ++m) acc += A(i, m) * Tm(m, j);
        Tm(i, j) = -acc;
      }
    rnd(Tm);  // io: the solve's output as stored
    Mat bK = Kc;
    for (int64_t i = 0; i < L; ++i) bK.row(i) *= b(i) * e(i);
    rnd(bK);
    cf.w = Tm * bK;
    rnd(cf.w);
    cf.QKt = Q * Kc.transpose();
    Mat M = Mat::Zero(L, L);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) M(i, j) = cf.QKt(i, j) * E(i, j);
    // The dh-free parts of dvnew and dS0.
    const Mat dOs = scale * dO;
    Mat eQ = Q;
    for (int64_t i = 0; i < L; ++i) eQ.row(i) *= e(i);
    MapM MtdO(&DVN[(hv * BT + ch.tok0) * V], L, V);
    MtdO = M.transpose() * dOs;
    rnd(MtdO);  // io: the local dv as stored
    MapM(slot(DH.get(), ch.n, ch.c, hv), K, V) = eQ.transpose() * dOs;
    for (int64_t j = 0; j < L; ++j) F[hv * BT + ch.tok0 + j] = E(L - 1, j);
    eL[job] = e(L - 1);
  }

  // 2. Adjoint carry per (sequence, hv, block of kVBlock value columns), chunks last to first:
  // dvnew = f (.) (Kc dh) + M^T dOs, dS0 = eL dh + eQ^T dOs - w^T dvnew. Column j of dS0 and of dvnew
  // depends only on column j of dh, eQ^T dOs and M^T dOs, so the column blocks are independent (as
  // the forward's state pass).
  const int64_t nvb = (V + kVBlock - 1) / kVBlock;
  const bool leak = mut == BwdMutant::adjoint_crosses_reset && !p.cu_seqlens.empty();
  const Mat zero_dh = Mat::Zero(K, V);  // no_adjoint_carry: the adjoint a dropped carry leaves
  auto dropped = [&](int64_t n, int64_t c) { return mut == BwdMutant::no_adjoint_carry && c + 1 < coff[n + 1] - coff[n]; };
  auto carry = [&](int64_t job) {
    const int64_t n = job / (HV * nvb), hv = job / nvb % HV, h = hv / G, nch = coff[n + 1] - coff[n];
    const int64_t j0 = job % nvb * kVBlock, nb = std::min(kVBlock, V - j0);
    double* dend = slot(DH.get(), n, nch, hv);  // the adjoint of the sequence's final state
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = j0; j < j0 + nb; ++j) {
        if (dfinal_state.empty())
          dend[i * V + j] = 0.0;
        else
          dend[i * V + j] = dfinal_state[(n * HV + hv) * KV +
                                         (p.state_layout == StateLayout::kv ? i * V + j : j * K + i)];
        if (leak && n + 1 < P.Nseq) dend[i * V + j] += slot(DH.get(), n + 1, 0, hv)[i * V + j];
      }
    for (int64_t c = nch - 1; c >= 0; --c) {
      const Chunk& ch = chunks[coff[n] + c];
      const int64_t L = ch.L;
      const double* dh_at = dropped(n, c) ? zero_dh.data() : slot(DH.get(), n, c + 1, hv);
      Mat dh_io;  // io: dh as the gradient kernels read it (the carry itself stays exact)
      if (opt.io) {
        dh_io = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>(dh_at + j0, K, nb, Eigen::OuterStride<>(V));
        rnd(dh_io);
      }
      const CMapS dh(opt.io ? dh_io.data() : dh_at + j0, K, nb, Eigen::OuterStride<>(opt.io ? nb : V));
      const CMapS dh_carry(dh_at + j0, K, nb, Eigen::OuterStride<>(V));
      MapS dS0(slot(DH.get(), n, c, hv) + j0, K, nb, Eigen::OuterStride<>(V));  // holds eQ^T dOs
      const CMapS Kc(&P.kh[(ch.tok0 * H + h) * K], L, K, Eigen::OuterStride<>(H * K));
      const Mat& w = fwd[(coff[n] + c) * HV + hv].w;
      MapS Kdh(&KDH[(hv * BT + ch.tok0) * V + j0], L, nb, Eigen::OuterStride<>(V));
      Kdh = Kc * dh;  // row j: k_j^T dh
      Mat fKdh = Kdh;  // row j: f_j k_j^T dh  [L, nb]
      for (int64_t j = 0; j < L; ++j) fKdh.row(j) *= F[hv * BT + ch.tok0 + j];
      MapS dvnew(&DVN[(hv * BT + ch.tok0) * V + j0], L, nb, Eigen::OuterStride<>(V));  // M^T dOs -> dvnew
      dvnew += fKdh;
      rnd(dvnew);
      Mat d = (mut == BwdMutant::adjoint_no_decay ? 1.0 : eL[(coff[n] + c) * HV + hv]) * dh_carry;
      d += dS0;
      d -= w.transpose() * dvnew;
      dS0 = d;
    }
  };
  if (leak) {  // the leak needs sequence n + 1 done before n
    for (int64_t n = P.Nseq - 1; n >= 0; --n)
      for (int64_t r = 0; r < HV * nvb; ++r) carry(n * HV * nvb + r);
  } else {
#pragma omp parallel for schedule(dynamic)
    for (int64_t job = 0; job < P.Nseq * HV * nvb; ++job) carry(job);
  }
  for (int64_t n = 0; n < P.Nseq; ++n)  // the chunk-start adjoints, for bisection
    for (int64_t c = 0; c < coff[n + 1] - coff[n]; ++c)
      for (int64_t hv = 0; hv < HV; ++hv)
        detail::store_state(slot(DH.get(), n, c, hv), p.state_layout, K, V, raw.dh.data() + ((coff[n] + c) * HV + hv) * KV);
  if (!raw.dinitial_state.empty())
    for (int64_t n = 0; n < P.Nseq; ++n)
      for (int64_t hv = 0; hv < HV; ++hv)
        detail::store_state(slot(DH.get(), n, 0, hv), p.state_layout, K, V,
                            raw.dinitial_state.data() + (n * HV + hv) * KV);

  // 3. Per (chunk, q/k head h), its value heads in order: everything else, given the chunk's dh.
#pragma omp parallel for schedule(dynamic)
  for (int64_t job = 0; job < NC * H; ++job) {
    const Chunk& ch = chunks[job / H];
    const int64_t h = job % H, L = ch.L, n = ch.n, c = ch.c;
    for (int64_t hv = h * G; hv < (h + 1) * G; ++hv) {
      const ChunkFwd& cf = fwd[(job / H) * HV + hv];
      const Mat &E = cf.E, &KKt = cf.KKt, &Tm = cf.Tm, &w = cf.w, &QKt = cf.QKt;
      const Vec& e = cf.e;
      // The adjoint of the chunk-END state (as the gradient kernels read it under io).
      Mat dh = Eigen::Map<const Mat>(dropped(n, c) ? zero_dh.data() : slot(DH.get(), n, c + 1, hv), K, V);
      rnd(dh);
      const MapM dvnew(&DVN[(hv * BT + ch.tok0) * V], L, V);
      Mat S0(K, V);
      detail::load_state(P.fw.chunk_states.data() + ((P.fw.chunk_offsets[n] + c) * HV + hv) * KV,
                         p.state_layout, K, V, S0.data());
      rnd(S0);  // io: h as recomputed and stored by the forward's state kernel
      Mat Q(L, K), Kc(L, K), Vc(L, V), dO(L, V);
      Vec b(L);
      for (int64_t i = 0; i < L; ++i) {
        const int64_t tok = ch.tok0 + i, qk = (tok * H + h) * K, tv = tok * HV + hv;
        for (int64_t x = 0; x < K; ++x) Q(i, x) = P.qh[qk + x], Kc(i, x) = P.kh[qk + x];
        for (int64_t x = 0; x < V; ++x) Vc(i, x) = in.v[tv * V + x], dO(i, x) = d_o[tv * V + x];
        b(i) = P.be[tv];
      }
      Mat bV = Vc, bK = Kc;
      for (int64_t i = 0; i < L; ++i) bV.row(i) *= b(i), bK.row(i) *= b(i) * e(i);
      rnd(bV), rnd(bK);
      Mat u = Tm * bV;
      rnd(u);
      Mat vnew = u - w * S0;
      rnd(vnew);
      const Mat QS0 = Q * S0;
      const double eLc = e(L - 1);

      // ---- Reverse. dDx(i, j + 1): adjoint of D(i, j), j = -1..i-1 (column 0: Gin(i)). ----
      Mat dDx = Mat::Zero(L, L + 1);
      Mat dQ = Mat::Zero(L, K), dK = Mat::Zero(L, K);
      Vec db = Vec::Zero(L);
      // State update S_end = eL S0 + sum_j k_j E(L-1, j) vnew_j^T (dvnew: pass 2).
      dDx(L - 1, 0) += eLc * (dh.cwiseProduct(S0)).sum();
      const MapM dhT_k(&KDH[(hv * BT + ch.tok0) * V], L, V);  // row j: k_j^T dh (pass 2)
      for (int64_t j = 0; j < L; ++j) {
        const double f = E(L - 1, j);
        dK.row(j) += f * (dh * vnew.row(j).transpose()).transpose();
        if (j < L - 1) dDx(L - 1, j + 1) += f * dhT_k.row(j).dot(vnew.row(j));
      }
      // Output O = scale (diag(e) Q S0 + M vnew).
      const Mat dOs = scale * dO;
      for (int64_t i = 0; i < L; ++i) {
        dQ.row(i) += e(i) * (S0 * dOs.row(i).transpose()).transpose();
        dDx(i, 0) += e(i) * dOs.row(i).dot(QS0.row(i));
      }
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
      const Mat dT = dvnew * bV.transpose() + dw * bK.transpose();
      const Mat dbV = Tm.transpose() * dvnew;
      const Mat dbK = Tm.transpose() * dw;
      for (int64_t i = 0; i < L; ++i) {
        const int64_t tv = (ch.tok0 + i) * HV + hv;
        for (int64_t x = 0; x < V; ++x) raw.dv[tv * V + x] = b(i) * dbV(i, x);
        db(i) += dbV.row(i).dot(mut == BwdMutant::dbeta_wrong_residual ? vnew.row(i) : Vc.row(i));
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
      if (mut == BwdMutant::dg_forward_cumsum) {
        // Per position dGin_i = sum_{j < i} dD(i, j) (incl. j = -1) - sum_{i' > i} dD(i', i); the
        // mutant sums them forwards (sum_{i <= r}) where the gradient is sum_{i >= r}.
        Vec dG = Vec::Zero(L);
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = -1; j < i; ++j) {
            dG(i) += dDx(i, j + 1);
            if (j >= 0) dG(j) -= dDx(i, j + 1);
          }
        double acc = 0;
        for (int64_t r = 0; r < L; ++r) dgc(r) = (acc += dG(r));
      } else {
        for (int64_t i = 0; i < L; ++i) {
          double pre = 0;
          for (int64_t r = 0; r <= i; ++r) {
            pre += dDx(i, r);  // columns 0..r: j = -1..r-1
            dgc(r) += pre;
          }
        }
      }
      for (int64_t i = 0; i < L; ++i) {
        const int64_t tok = ch.tok0 + i, qk = (tok * H + h) * K, tv = tok * HV + hv;
        for (int64_t x = 0; x < K; ++x) raw.dqh[qk + x] += dQ(i, x), raw.dkh[qk + x] += dK(i, x);
        raw.dbe[tv] = db(i);
        raw.dge[tv] = dgc(i);
      }
    }
  }
  return detail::finish_backward(p, in, P, std::move(raw));
}

}  // namespace assay::gated_delta
