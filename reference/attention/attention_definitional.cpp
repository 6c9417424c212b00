// Form (a): definitional attention, complete score rows (conventions in attention.h).
// Forward, per tile of query rows: all sk scores of every row (the dot products as one product
// Q_tile K^T), softcap, the FlashAttention test mask (construct_local_mask, written as in the test
// utilities), a three-pass softmax over each full row plus the sink column, then P V. Backward one
// row at a time: dP = dO V^T, Delta = rowsum(P o dP).
#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Dense>

#include "reference/attention/attention.h"
#include "reference/attention/attention_layout.h"
#include "reference/core/check.h"

namespace assay::attention {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// FlashAttention's construct_local_mask (tests/test_flash_attn.py, hopper/test_util.py): true if
// key j is MASKED for query row i. Causal arrives here as right = 0. An unbounded side (-1) is
// replaced by sk as FA's C++ API does (window >= seqlen_k means unbounded).
bool masked(int64_t i, int64_t j, int64_t sq, int64_t sk, int64_t left, int64_t right) {
  if (j >= sk) return true;  // key padding
  if (left < 0 && right < 0) return false;
  if (left < 0) return j > i + sk - sq + right;
  const int64_t r = right < 0 ? sk : right;
  return j > std::min(i + sk - sq + r, sk) || j < i + sk - sq - left;
}

// One query row (b, hq, i): everything the forward and backward need, definitionally.
struct Row {
  std::vector<double> s, p, a, tp;  // scores, probabilities, |scores| magnitude, tanh' (per key)
  double lse = kNegInf, m = kNegInf, l = 0, p_sink = 0;
  bool empty = true;  // no probability mass on keys or sink (LSE = -inf)
};

struct Ctx : detail::Operands {
  void row(int64_t b, int64_t h, int64_t i, Row& r) const {
    const int64_t sq = L.sq[b], sk = L.sk[b], hk = h / L.G;
    r.s.assign(sk, 0), r.p.assign(sk, 0), r.a.assign(sk, 0), r.tp.assign(sk, 1);
    const double* qi = qptr(b, h, i);
    for (int64_t j = 0; j < sk; ++j) {
      const double* kj = kptr(b, hk, j);
      double dot = 0, adot = 0;
      for (int64_t d = 0; d < L.D; ++d) dot += qi[d] * kj[d], adot += std::fabs(qi[d] * kj[d]);
      double x = L.scale * dot;
      r.a[j] = std::fabs(L.scale) * adot;
      if (p.softcap > 0) {
        const double t = std::tanh(x / p.softcap);
        x = p.softcap * t;
        r.tp[j] = 1 - t * t;
      }
      r.s[j] = masked(i, j, sq, sk, L.left, L.right) ? kNegInf : x;
    }
    // Pass 1: max over the row and the sink.
    double m = p.has_sink ? sink[h] : kNegInf;
    for (int64_t j = 0; j < sk; ++j) m = std::max(m, r.s[j]);
    r.m = m;
    if (m == kNegInf) {  // no visible key and no sink
      r.empty = true, r.lse = kNegInf, r.l = 0, r.p_sink = 0;
      return;
    }
    // Pass 2: the normaliser.
    double l = 0;
    for (int64_t j = 0; j < sk; ++j) l += std::exp(r.s[j] - m);  // exp(-inf) = 0
    if (p.has_sink) l += std::exp(sink[h] - m);
    r.l = l, r.lse = m + std::log(l), r.empty = false;
    // Pass 3: probabilities.
    for (int64_t j = 0; j < sk; ++j) r.p[j] = std::exp(r.s[j] - m) / l;
    r.p_sink = p.has_sink ? std::exp(sink[h] - m) / l : 0;
  }
};

// o_score_mag of one query tile: OS[r, e] += W[r, j] |V[j, e] - O[r, e]| over keys j in order
// (per element the same sum as the row-by-row definition; W = P o c, zero entries skipped).
// Row-major W [tm, ldw], O / OS [tm, dv], V rows at vstride. Elementwise lanes only (no
// reduction across lanes, no FMA), so every clone gives the same bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void score_mag_tile(const double* W, int64_t ldw, const double* V, int64_t vstride, const double* O,
                    double* OS, int64_t tm, int64_t sk, int64_t dv) {
  for (int64_t j = 0; j < sk; ++j) {
    const double* vj = V + j * vstride;
    for (int64_t r = 0; r < tm; ++r) {
      const double w = W[r * ldw + j];
      if (w == 0) continue;
      const double* o = O + r * dv;
      double* os = OS + r * dv;
#pragma omp simd
      for (int64_t e = 0; e < dv; ++e) os[e] += w * std::fabs(vj[e] - o[e]);
    }
  }
}

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;

}  // namespace

// Query tiles of kTileRows rows of one (sequence, head): for the tile, the complete score rows
// (all sk keys) as one product Q_tile K^T (and |Q_tile| |K|^T for the magnitudes), the mask per
// element, then per row the definitional three-pass softmax (max over the row and the sink, the
// normaliser, P = exp(s - m) / l), then O = P V and o_mag = P |V| as products over the full rows.
// Memory: a few kTileRows x sk buffers per thread (never Sq x Sk). Work items are independent and
// every sum has a fixed order, so the result does not depend on the thread count.
ForwardResult forward_definitional(const Params& p, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const std::vector<double>& sink) {
  const auto L = detail::checked_layout(p, q, k, v, sink);
  ForwardResult R;
  R.o.assign(L.o_size(), 0), R.o_mag.assign(L.o_size(), 0), R.o_score_mag.assign(L.o_size(), 0);
  R.lse.assign(L.lse_size(), kNegInf), R.lse_mag.assign(L.lse_size(), 0);
  constexpr int64_t kTileRows = 64;
  struct Item {
    int64_t b, h, i0, tm;
  };
  std::vector<Item> work;
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.Hq; ++h)
      for (int64_t i0 = 0; i0 < L.sq[b]; i0 += kTileRows) work.push_back({b, h, i0, std::min(kTileRows, L.sq[b] - i0)});
  const int64_t nw = static_cast<int64_t>(work.size());
  std::vector<double> ak(k.size()), av(v.size());  // |k|, |v|: the magnitude products' operands
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < static_cast<int64_t>(k.size()); ++i) ak[i] = std::fabs(k[i]);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) av[i] = std::fabs(v[i]);
    Mat S, A, P, W, AQ, O, OM, OS, Kg, AKg, Vg, AVg;
    std::vector<double> m, l, cm;
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < nw; ++w) {
      const auto [b, h, i0, tm] = work[w];
      const int64_t sq = L.sq[b], sk = L.sk[b], hk = h / L.G;
      const CMap Q(q.data() + (L.q_row(b, i0) * L.Hq + h) * L.D, tm, L.D, Eigen::OuterStride<>(L.Hq * L.D));
      AQ = Q.cwiseAbs();
      // K, |K|, V, |V| rows [0, sk) of KV head hk: strided views, gathered when paged.
      const double *kb = nullptr, *akb = nullptr, *vb = nullptr, *avb = nullptr;
      int64_t ks = L.Hkv * L.D, vs = L.Hkv * L.Dv;
      if (sk > 0 && L.kmode != detail::KMode::paged) {
        const int64_t r0 = L.key_row(b, 0);
        kb = k.data() + (r0 * L.Hkv + hk) * L.D, akb = ak.data() + (r0 * L.Hkv + hk) * L.D;
        vb = v.data() + (r0 * L.Hkv + hk) * L.Dv, avb = av.data() + (r0 * L.Hkv + hk) * L.Dv;
      } else if (sk > 0) {
        Kg.resize(sk, L.D), AKg.resize(sk, L.D), Vg.resize(sk, L.Dv), AVg.resize(sk, L.Dv);
        for (int64_t j = 0; j < sk; ++j) {
          const int64_t r = L.key_row(b, j);
          for (int64_t d = 0; d < L.D; ++d) Kg(j, d) = k[(r * L.Hkv + hk) * L.D + d], AKg(j, d) = ak[(r * L.Hkv + hk) * L.D + d];
          for (int64_t e = 0; e < L.Dv; ++e) Vg(j, e) = v[(r * L.Hkv + hk) * L.Dv + e], AVg(j, e) = av[(r * L.Hkv + hk) * L.Dv + e];
        }
        kb = Kg.data(), akb = AKg.data(), vb = Vg.data(), avb = AVg.data(), ks = L.D, vs = L.Dv;
      }
      S.resize(tm, sk), A.resize(tm, sk), P.resize(tm, sk), W.resize(tm, sk);
      m.assign(tm, kNegInf), l.assign(tm, 0), cm.assign(tm, 0);
      if (sk > 0) {
        const CMap K(kb, sk, L.D, Eigen::OuterStride<>(ks)), AK(akb, sk, L.D, Eigen::OuterStride<>(ks));
        S.noalias() = Q * K.transpose();    // dot products <q_i, k_j>
        A.noalias() = AQ * AK.transpose();  // absolute dot products sum_d |q_id k_jd|
      }
      for (int64_t r = 0; r < tm; ++r) {
        const int64_t i = i0 + r;
        double* srow = &S(r, 0);
        double* crow = &A(r, 0);  // becomes c_ij (score-computation magnitude)
        double* prow = &P(r, 0);
        double* wrow = &W(r, 0);
        for (int64_t j = 0; j < sk; ++j) {
          double x = L.scale * srow[j], tp = 1;
          const double a = std::fabs(L.scale) * crow[j];
          if (p.softcap > 0) {
            const double t = std::tanh(x / p.softcap);
            x = p.softcap * t;
            tp = 1 - t * t;
          }
          crow[j] = tp * a + (p.softcap > 0 ? std::fabs(x) : 0.0);
          srow[j] = masked(i, j, sq, sk, L.left, L.right) ? kNegInf : x;
        }
        // Pass 1: max over the row and the sink.
        double mr = p.has_sink ? sink[h] : kNegInf;
        for (int64_t j = 0; j < sk; ++j) mr = std::max(mr, srow[j]);
        m[r] = mr;
        if (mr == kNegInf) {  // no visible key and no sink: O = 0, LSE = -inf, magnitudes 0
          for (int64_t j = 0; j < sk; ++j) prow[j] = 0, wrow[j] = 0;
          continue;
        }
        // Pass 2: the normaliser.
        double lr = 0;
        for (int64_t j = 0; j < sk; ++j) lr += (prow[j] = std::exp(srow[j] - mr));  // exp(-inf) = 0
        if (p.has_sink) lr += std::exp(sink[h] - mr);
        l[r] = lr;
        // Pass 3: probabilities, and P o c for the score magnitudes.
        double c = 0;
        for (int64_t j = 0; j < sk; ++j) {
          prow[j] /= lr;
          wrow[j] = prow[j] == 0 ? 0.0 : prow[j] * crow[j];
          c += wrow[j];
        }
        cm[r] = c;
      }
      O.setZero(tm, L.Dv), OM.setZero(tm, L.Dv), OS.setZero(tm, L.Dv);
      if (sk > 0) {
        const CMap V(vb, sk, L.Dv, Eigen::OuterStride<>(vs)), AV(avb, sk, L.Dv, Eigen::OuterStride<>(vs));
        O.noalias() = P * V;    // o_ie = sum_j P_ij v_je
        OM.noalias() = P * AV;  // o_mag
        score_mag_tile(W.data(), sk, vb, vs, O.data(), OS.data(), tm, sk, L.Dv);
      }
      for (int64_t r = 0; r < tm; ++r) {
        const int64_t i = i0 + r, li = L.lse_index(b, h, i);
        if (m[r] == kNegInf) continue;  // O = 0, LSE = -inf, magnitudes 0 (as assigned)
        R.lse[li] = m[r] + std::log(l[r]);
        R.lse_mag[li] = std::fabs(m[r]) + std::log(l[r]) + cm[r];
        const int64_t orow = (L.q_row(b, i) * L.Hq + h) * L.Dv;
        for (int64_t e = 0; e < L.Dv; ++e)
          R.o[orow + e] = O(r, e), R.o_mag[orow + e] = OM(r, e), R.o_score_mag[orow + e] = OS(r, e);
      }
    }
  }
  return R;
}

BackwardResult backward_definitional(const Params& p, const std::vector<double>& q,
                                     const std::vector<double>& k, const std::vector<double>& v,
                                     const std::vector<double>& sink,
                                     const std::vector<double>& dout,
                                     const std::vector<double>& dlse) {
  const auto L = detail::checked_layout(p, q, k, v, sink);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(dout.size()) == L.o_size(), "attention: dout has {} values, want {}",
                    dout.size(), L.o_size());
  ASSAY_INPUT_CHECK(dlse.empty() || static_cast<int64_t>(dlse.size()) == L.lse_size(),
                    "attention: dlse has {} values, want {} or none", dlse.size(), L.lse_size());
  const Ctx c{{p, L, q, k, v, sink}};
  BackwardResult R;
  R.dq.assign(q.size(), 0), R.dk.assign(k.size(), 0), R.dv.assign(v.size(), 0);
  R.dq_mag.assign(q.size(), 0), R.dk_mag.assign(k.size(), 0), R.dv_mag.assign(v.size(), 0);
  R.dsink.assign(p.has_sink ? L.Hq : 0, 0), R.dsink_mag.assign(p.has_sink ? L.Hq : 0, 0);
  // One thread per KV head: it owns dK / dV of that head (pages may be shared between sequences),
  // and dQ / dsink of the query heads of its group.
#pragma omp parallel for schedule(dynamic)
  for (int64_t hk = 0; hk < L.Hkv; ++hk) {
    Row r;
    std::vector<double> dp, dpa, dx, g;
    for (int64_t b = 0; b < L.B; ++b)
      for (int64_t h = hk * L.G; h < (hk + 1) * L.G; ++h)
        for (int64_t i = 0; i < L.sq[b]; ++i) {
          c.row(b, h, i, r);
          if (r.empty) continue;
          const int64_t sk = L.sk[b];
          const int64_t li = L.lse_index(b, h, i);
          const double gl = dlse.empty() ? 0.0 : dlse[li];
          const double* doi = dout.data() + (L.q_row(b, i) * L.Hq + h) * L.Dv;
          const double* qi = c.qptr(b, h, i);
          double* dqi = R.dq.data() + (L.q_row(b, i) * L.Hq + h) * L.D;
          double* dqm = R.dq_mag.data() + (L.q_row(b, i) * L.Hq + h) * L.D;
          dp.assign(sk, 0), dpa.assign(sk, 0), dx.assign(sk, 0), g.assign(sk, 0);
          // dP_ij = <dO_i, v_j>;  Delta_i = sum_j P_ij dP_ij.
          double delta = 0, dabs = 0;
          for (int64_t j = 0; j < sk; ++j) {
            if (r.p[j] == 0) continue;
            const double* vj = c.vptr(b, hk, j);
            for (int64_t e = 0; e < L.Dv; ++e) dp[j] += doi[e] * vj[e], dpa[j] += std::fabs(doi[e] * vj[e]);
            delta += r.p[j] * dp[j];
            dabs += r.p[j] * dpa[j];
          }
          // dS_ij = P_ij (dP_ij - Delta_i + dLSE_i);  dX = dS * tanh'.
          for (int64_t j = 0; j < sk; ++j) {
            if (r.p[j] == 0) continue;
            dx[j] = r.p[j] * (dp[j] - delta + gl) * r.tp[j];
            g[j] = r.p[j] * (dpa[j] + dabs + std::fabs(gl)) * r.tp[j];
          }
          if (p.has_sink) {
            R.dsink[h] += r.p_sink * (gl - delta);
            R.dsink_mag[h] += r.p_sink * (dabs + std::fabs(gl));
          }
          const double as = std::fabs(L.scale);
          for (int64_t j = 0; j < sk; ++j) {
            if (r.p[j] == 0) continue;
            const int64_t kr = L.key_row(b, j);
            const double* kj = c.kptr(b, hk, j);
            double* dkj = R.dk.data() + (kr * L.Hkv + hk) * L.D;
            double* dkm = R.dk_mag.data() + (kr * L.Hkv + hk) * L.D;
            double* dvj = R.dv.data() + (kr * L.Hkv + hk) * L.Dv;
            double* dvm = R.dv_mag.data() + (kr * L.Hkv + hk) * L.Dv;
            for (int64_t d = 0; d < L.D; ++d) {
              dqi[d] += L.scale * dx[j] * kj[d];
              dqm[d] += as * g[j] * std::fabs(kj[d]);
              dkj[d] += L.scale * dx[j] * qi[d];
              dkm[d] += as * g[j] * std::fabs(qi[d]);
            }
            for (int64_t e = 0; e < L.Dv; ++e)
              dvj[e] += r.p[j] * doi[e], dvm[e] += r.p[j] * std::fabs(doi[e]);
          }
        }
  }
  return R;
}

}  // namespace assay::attention
