// Kernel emulations (attention_emulation.h): scalar fp64 loops with explicit roundings.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/attention/attention_emulation.h"
#include "reference/attention/attention_layout.h"
#include "reference/core/check.h"

namespace assay::attention {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Emu : detail::Operands {
  const KernelRounding& kr;

  double r(double x) const { return round_to(kr.acc, x); }
  double rp(double x) const { return round_to(kr.p, x); }

  // Visible keys [lo, hi] of row i (bottom-right aligned, inclusive window bounds).
  void range(int64_t i, int64_t sq, int64_t sk, int64_t& lo, int64_t& hi) const {
    const int64_t off = sk - sq;
    lo = L.left < 0 ? 0 : std::max<int64_t>(0, i + off - L.left);
    hi = L.right < 0 ? sk - 1 : std::min<int64_t>(sk - 1, i + off + L.right);
  }

  // The kernel's fp32 score; t' (tanh derivative, 1 without softcap) through tp.
  double score(const double* qi, const double* kj, double* tp) const {
    double dot = 0;
    for (int64_t d = 0; d < L.D; ++d) dot += qi[d] * kj[d];
    double s = r(r(dot) * L.scale);
    if (tp) *tp = 1;
    if (p.softcap > 0) {
      const double t = r(std::tanh(r(s / p.softcap)));
      s = r(p.softcap * t);
      if (tp) *tp = 1 - t * t;
    }
    return s;
  }
};

}  // namespace

ForwardResult forward_emulated(const Params& p, const std::vector<double>& q, const std::vector<double>& k,
                               const std::vector<double>& v, const std::vector<double>& sink,
                               const KernelRounding& kr) {
  const auto L = detail::checked_layout(p, q, k, v, sink);
  ASSAY_INPUT_CHECK(kr.p_scale > 0 && std::isfinite(kr.p_scale), "attention: p_scale must be > 0");
  const Emu E{{p, L, q, k, v, sink}, kr};
  ForwardResult R;
  R.o.assign(L.o_size(), 0.0), R.lse.assign(L.lse_size(), kNegInf);
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.Hq; ++h) {
      const int64_t sq = L.sq[b], sk = L.sk[b], hk = h / L.G;
      std::vector<double> s, acc(L.Dv), tile(L.Dv);
      for (int64_t i = 0; i < sq; ++i) {
        int64_t lo, hi;
        E.range(i, sq, sk, lo, hi);
        const double* qi = E.qptr(b, h, i);
        s.assign(std::max<int64_t>(hi - lo + 1, 0), 0.0);
        double m = kNegInf;  // row max over the keys only: the sink is folded in at finalize (FA4)
        for (int64_t j = lo; j <= hi; ++j) m = std::max(m, s[j - lo] = E.score(qi, E.kptr(b, hk, j), nullptr));
        const int64_t li = L.lse_index(b, h, i);
        double* oi = R.o.data() + (L.q_row(b, i) * L.Hq + h) * L.Dv;
        if (m == kNegInf) {  // no visible key: O = 0; LSE = sink (-inf without a sink)
          if (p.has_sink) R.lse[li] = sink[h];
          continue;
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        // KV tiles of tile_n keys (aligned to key 0, as the kernel's n_blocks).
        for (int64_t j0 = lo - lo % p.tile_n; j0 <= hi; j0 += p.tile_n) {
          double ls = 0;
          std::fill(tile.begin(), tile.end(), 0.0);
          for (int64_t j = std::max(j0, lo); j <= std::min(hi, j0 + p.tile_n - 1); ++j) {
            const double pt = E.r(std::exp(s[j - lo] - m) * kr.p_scale);
            ls += pt;
            const double pr = E.rp(pt);
            const double* vj = E.vptr(b, hk, j);
            for (int64_t e = 0; e < L.Dv; ++e) tile[e] += pr * vj[e];
          }
          l = E.r(l + E.r(ls));
          for (int64_t e = 0; e < L.Dv; ++e) acc[e] = E.r(acc[e] + E.r(tile[e]));
        }
        if (p.has_sink) l = E.r(l + E.r(kr.p_scale * E.r(std::exp(sink[h] - m))));  // finalize
        for (int64_t e = 0; e < L.Dv; ++e) oi[e] = round_to(kr.o, E.r(acc[e] / l));
        R.lse[li] = E.r(m + std::log(l / kr.p_scale));
      }
    }
  return R;
}

BackwardResult backward_emulated(const Params& p, const std::vector<double>& q, const std::vector<double>& k,
                                 const std::vector<double>& v, const std::vector<double>& sink,
                                 const std::vector<double>& o, const std::vector<double>& lse,
                                 const std::vector<double>& dout, const std::vector<double>& dlse,
                                 const KernelRounding& kr) {
  const auto L = detail::make_layout(p);
  detail::check_backward_inputs(L, p, q, k, v, sink, o, lse, dout, dlse);
  const Emu E{{p, L, q, k, v, sink}, kr};
  BackwardResult R;
  R.dq.assign(q.size(), 0.0), R.dk.assign(k.size(), 0.0), R.dv.assign(v.size(), 0.0);
  R.dsink.assign(p.has_sink ? L.Hq : 0, 0.0);
  // Parallel over KV heads: dK / dV rows of head hk and dQ rows of its query heads are disjoint.
#pragma omp parallel for schedule(dynamic)
  for (int64_t hk = 0; hk < L.Hkv; ++hk)
    for (int64_t h = hk * L.G; h < (hk + 1) * L.G; ++h) {
      double dsink = 0;
      for (int64_t b = 0; b < L.B; ++b) {
        const int64_t sq = L.sq[b], sk = L.sk[b];
        for (int64_t i = 0; i < sq; ++i) {
          const int64_t li = L.lse_index(b, h, i);
          const double lr = lse[li];
          if (lr == kNegInf) continue;  // fully masked row: no gradient
          const int64_t row = L.q_row(b, i) * L.Hq + h;
          const double* doi = dout.data() + row * L.Dv;
          const double* oi = o.data() + row * L.Dv;
          double dot = 0;
          for (int64_t e = 0; e < L.Dv; ++e) dot += doi[e] * oi[e];
          const double delta = E.r(E.r(dot) - (dlse.empty() ? 0.0 : dlse[li]));
          if (p.has_sink) dsink -= E.r(std::exp(sink[h] - lr)) * delta;
          int64_t lo, hi;
          E.range(i, sq, sk, lo, hi);
          const double* qi = E.qptr(b, h, i);
          double* dqi = R.dq.data() + row * L.D;
          for (int64_t j = lo; j <= hi; ++j) {
            const int64_t kr_row = L.key_row(b, j) * L.Hkv + hk;
            const double* kj = k.data() + kr_row * L.D;
            const double* vj = v.data() + kr_row * L.Dv;
            double tp;
            const double sij = E.score(qi, kj, &tp);
            const double pij = E.r(std::exp(sij - lr));
            double dpv = 0;
            for (int64_t e = 0; e < L.Dv; ++e) dpv += doi[e] * vj[e];
            const double ds = E.rp(E.r(pij * (E.r(dpv) - delta) * tp));
            const double pr = E.rp(pij);
            double* dvj = R.dv.data() + kr_row * L.Dv;
            double* dkj = R.dk.data() + kr_row * L.D;
            for (int64_t e = 0; e < L.Dv; ++e) dvj[e] += pr * doi[e];
            for (int64_t d = 0; d < L.D; ++d) {
              dqi[d] += L.scale * ds * kj[d];
              dkj[d] += L.scale * ds * qi[d];
            }
          }
        }
      }
      if (p.has_sink) R.dsink[h] = dsink;
    }
  return R;
}

}  // namespace assay::attention
