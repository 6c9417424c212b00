// Form (a): definitional attention, one full score row at a time (conventions in attention.h).
// Every query row: all sk scores by naive dot products, softcap, the FlashAttention test mask
// (construct_local_mask, written as in the test utilities), a three-pass softmax over the row plus
// the sink column, then P V. Backward from the same rows: dP = dO V^T, Delta = rowsum(P o dP).
#include <algorithm>
#include <cmath>
#include <limits>

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

struct Ctx {
  const Params& p;
  const detail::Layout& L;
  const std::vector<double>& q;
  const std::vector<double>& k;
  const std::vector<double>& v;
  const std::vector<double>& sink;

  const double* qptr(int64_t b, int64_t h, int64_t i) const {
    return q.data() + (L.q_row(b, i) * L.Hq + h) * L.D;
  }
  const double* kptr(int64_t b, int64_t hk, int64_t j) const {
    return k.data() + (L.key_row(b, j) * L.Hkv + hk) * L.D;
  }
  const double* vptr(int64_t b, int64_t hk, int64_t j) const {
    return v.data() + (L.key_row(b, j) * L.Hkv + hk) * L.Dv;
  }

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

}  // namespace

ForwardResult forward_definitional(const Params& p, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const std::vector<double>& sink) {
  const auto L = detail::make_layout(p);
  detail::check_inputs(L, p, q, k, v, sink);
  const Ctx c{p, L, q, k, v, sink};
  ForwardResult R;
  R.o.assign(L.o_size(), 0), R.o_mag.assign(L.o_size(), 0), R.o_score_mag.assign(L.o_size(), 0);
  R.lse.assign(L.lse_size(), kNegInf), R.lse_mag.assign(L.lse_size(), 0);
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.Hq; ++h) {
      Row r;
      const int64_t hk = h / L.G;
      for (int64_t i = 0; i < L.sq[b]; ++i) {
        c.row(b, h, i, r);
        const int64_t li = L.lse_index(b, h, i);
        R.lse[li] = r.lse;
        if (r.empty) continue;  // O = 0, magnitudes 0
        double* o = R.o.data() + (L.q_row(b, i) * L.Hq + h) * L.Dv;
        double* om = R.o_mag.data() + (L.q_row(b, i) * L.Hq + h) * L.Dv;
        double* os = R.o_score_mag.data() + (L.q_row(b, i) * L.Hq + h) * L.Dv;
        double cm = 0;
        for (int64_t j = 0; j < L.sk[b]; ++j) {
          if (r.p[j] == 0) continue;
          const double* vj = c.vptr(b, hk, j);
          for (int64_t e = 0; e < L.Dv; ++e) o[e] += r.p[j] * vj[e], om[e] += r.p[j] * std::fabs(vj[e]);
        }
        for (int64_t j = 0; j < L.sk[b]; ++j) {
          if (r.p[j] == 0) continue;
          const double cij = r.tp[j] * r.a[j] + (p.softcap > 0 ? std::fabs(r.s[j]) : 0.0);
          cm += r.p[j] * cij;
          const double* vj = c.vptr(b, hk, j);
          for (int64_t e = 0; e < L.Dv; ++e) os[e] += r.p[j] * cij * std::fabs(vj[e] - o[e]);
        }
        R.lse_mag[li] = std::fabs(r.m) + std::log(r.l) + cm;
      }
    }
  return R;
}

BackwardResult backward_definitional(const Params& p, const std::vector<double>& q,
                                     const std::vector<double>& k, const std::vector<double>& v,
                                     const std::vector<double>& sink,
                                     const std::vector<double>& dout,
                                     const std::vector<double>& dlse) {
  const auto L = detail::make_layout(p);
  detail::check_inputs(L, p, q, k, v, sink);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(dout.size()) == L.o_size(), "attention: dout has {} values, want {}",
                    dout.size(), L.o_size());
  ASSAY_INPUT_CHECK(dlse.empty() || static_cast<int64_t>(dlse.size()) == L.lse_size(),
                    "attention: dlse has {} values, want {} or none", dlse.size(), L.lse_size());
  const Ctx c{p, L, q, k, v, sink};
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
