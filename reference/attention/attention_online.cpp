// Form (b): attention the way kernels compute it (conventions in attention.h).
// Forward: per (sequence, query head, query tile of tile_m rows) a loop over KV tiles of tile_n keys,
// gathered through the page table like a TMA / cp.async load; tiles outside the union of the rows'
// visible key ranges are skipped (n_block_min / n_block_max); masking only inside boundary tiles;
// running row max m, running row sum l and an O accumulator rescaled by exp(m_old - m_new) per
// tile; the sink folded in at finalize (FA4 Softmax.finalize); O = acc / l, LSE = m + log l.
// Split-KV: the same loop over a subrange of tiles per split, the sink folded into split 0.
// Backward: FA2 structure. Preprocess Delta_i = <dO_i, O_i> - dLSE_i; KV-tile-outer loop that
// recomputes P = exp(S - LSE) from the stored LSE, accumulates dK, dV per tile and dQ per row.
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
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Visible key range [lo, hi] of query row i (empty if lo > hi), from the window bounds.
struct Bounds {
  const detail::Layout& L;
  Mutant mutant;
  void range(int64_t i, int64_t sq, int64_t sk, int64_t& lo, int64_t& hi) const {
    const int64_t off = mutant == Mutant::causal_top_left ? 0 : sk - sq;  // bottom-right alignment
    const int64_t ex = mutant == Mutant::window_exclusive ? 1 : 0;
    lo = L.left < 0 ? 0 : std::max<int64_t>(0, i + off - L.left + ex);
    hi = L.right < 0 ? sk - 1 : std::min<int64_t>(sk - 1, i + off + L.right - ex);
  }
};

// exp(x[c] - m) for c in [0, n) into y[0, n), and their sum in a fixed order (eight
// lanes, combined pairwise), so the result does not depend on the ISA the clone runs on nor on the
// thread count. Every lane does the same IEEE operations (no FMA contraction: -ffp-contract=off),
// so the AVX-512 / AVX2 / SSE2 clones give identical bits (checked on 2^20 arguments).
// exp: Cody-Waite reduction x = k ln2 + r (|r| <= ln2 / 2, ln2 split in fdlibm's hi / lo, k ln2hi
// exact), Taylor polynomial to degree 13, Horner (truncation < 6e-18 relative), 2^k applied as
// two exact power-of-two factors (subnormal results round once, at the second). Arguments are
// <= 0 here; -inf (and anything below -746) gives exactly 0. Within 1 ulp of glibc's exp on [-746, 0]
// (checked against it on 2^20 points incl. the subnormal range); the definitional form uses
// std::exp, so the two forms do not share an exp implementation.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ASSAY_ATTN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ASSAY_ATTN_CLONES
#endif
typedef double v8d __attribute__((vector_size(64)));
typedef int64_t v8i __attribute__((vector_size(64)));
typedef uint64_t v8u __attribute__((vector_size(64)));

ASSAY_ATTN_CLONES
double exp_row_sum(const double* x, double m, double* y, int64_t n) {
  const double shifter = 0x1.8p52;
  const v8d vshift = v8d{} + shifter, vlo = v8d{} - 746.0;
  const v8i vi = (v8i)vshift;
  v8d acc = v8d{};
  for (int64_t c0 = 0; c0 < n; c0 += 16) {  // two independent vectors per step (the tail padded
    v8d a[2], e[2];                          // with -inf, whose exp is exactly 0)
    const int64_t cn = std::min<int64_t>(16, n - c0);
    if (cn == 16) {
      __builtin_memcpy(a, x + c0, sizeof a);
    } else {
      for (int64_t c = 0; c < 16; ++c) a[c / 8][c % 8] = c < cn ? x[c0 + c] : kNegInf;
    }
    for (int u = 0; u < 2; ++u) {
      v8d z = a[u] - m;
      z = z < vlo ? vlo : z;  // -inf (masked) and underflow: exp rounds to +0 below
      const v8d t = z * 1.4426950408889634 + shifter;
      const v8d kd = t - vshift;
      const v8i ki = (v8i)t - vi;
      const v8d r = (z - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
      v8d p = r * (1.0 / 6227020800.0) + (1.0 / 479001600.0);  // sum_{n <= 13} r^n / n!, Horner
      p = p * r + (1.0 / 39916800.0);
      p = p * r + (1.0 / 3628800.0);
      p = p * r + (1.0 / 362880.0);
      p = p * r + (1.0 / 40320.0);
      p = p * r + (1.0 / 5040.0);
      p = p * r + (1.0 / 720.0);
      p = p * r + (1.0 / 120.0);
      p = p * r + (1.0 / 24.0);
      p = p * r + (1.0 / 6.0);
      p = p * r + 0.5;
      p = p * r + 1.0;
      p = p * r + 1.0;
      const v8i k1 = (v8i)((v8u)(ki + 2048) >> 1) - 1024;  // floor(k / 2) without an arithmetic shift
      const v8i k2 = ki - k1;
      e[u] = (p * (v8d)((k1 + 1023) << 52)) * (v8d)((k2 + 1023) << 52);
    }
    acc = acc + e[0];
    acc = acc + e[1];
    if (cn == 16) {
      __builtin_memcpy(y + c0, e, sizeof e);
    } else {
      for (int64_t c = 0; c < cn; ++c) y[c0 + c] = e[c / 8][c % 8];
    }
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Row-major views of Q, K, V rows with a row stride (the rows of one head inside [.., H, D]).
using CMap = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;

struct Engine {
  const Params& p;
  const detail::Layout& L;
  const std::vector<double>& q;
  const std::vector<double>& k;
  const std::vector<double>& v;
  const std::vector<double>& sink;
  Bounds bounds{L, p.mutant};

  int64_t kv_head(int64_t h) const { return p.mutant == Mutant::gqa_modulo ? h % L.Hkv : h / L.G; }

  // Loads KV tile [j0, j0 + jn) of sequence b, head hk into Kt (jn x D), Vt (jn x Dv); rows at or
  // past sk (only with the tail_unmasked mutant) are zero vectors, as a zero-filling TMA gives.
  void load_kv(int64_t b, int64_t hk, int64_t j0, int64_t jn, Mat& Kt, Mat& Vt) const {
    Kt.resize(jn, L.D), Vt.resize(jn, L.Dv);
    for (int64_t c = 0; c < jn; ++c) {
      const int64_t j = j0 + c;
      if (j >= L.sk[b]) {
        Kt.row(c).setZero(), Vt.row(c).setZero();
        continue;
      }
      const int64_t r = L.key_row(b, j);
      Kt.row(c) = Eigen::Map<const Eigen::RowVectorXd>(k.data() + (r * L.Hkv + hk) * L.D, L.D);
      Vt.row(c) = Eigen::Map<const Eigen::RowVectorXd>(v.data() + (r * L.Hkv + hk) * L.Dv, L.Dv);
    }
  }

  // KV tile [j0, j0 + jn) as strided views straight into k / v when its keys are consecutive
  // storage rows (dense, packed, or inside one page; all keys < sk), else gathered into Kt / Vt
  // (a page boundary inside the tile, or the tail_unmasked mutant's zero rows).
  std::pair<CMap, CMap> kv_tile(int64_t b, int64_t hk, int64_t j0, int64_t jn, Mat& Kt, Mat& Vt) const {
    const bool in_range = j0 + jn <= L.sk[b];
    const bool contiguous = L.kmode != detail::KMode::paged || j0 / L.page_size == (j0 + jn - 1) / L.page_size;
    if (in_range && contiguous && jn > 0) {
      const int64_t r = L.key_row(b, j0);
      return {CMap(k.data() + (r * L.Hkv + hk) * L.D, jn, L.D, Eigen::OuterStride<>(L.Hkv * L.D)),
              CMap(v.data() + (r * L.Hkv + hk) * L.Dv, jn, L.Dv, Eigen::OuterStride<>(L.Hkv * L.Dv))};
    }
    load_kv(b, hk, j0, jn, Kt, Vt);
    return {CMap(Kt.data(), jn, L.D, Eigen::OuterStride<>(L.D)),
            CMap(Vt.data(), jn, L.Dv, Eigen::OuterStride<>(L.Dv))};
  }

  // Rows [i0, i0 + tm) of query head h of sequence b (consecutive storage rows).
  CMap q_tile(int64_t b, int64_t h, int64_t i0, int64_t tm) const {
    return CMap(q.data() + (L.q_row(b, i0) * L.Hq + h) * L.D, tm, L.D, Eigen::OuterStride<>(L.Hq * L.D));
  }

  // Scaled, softcapped, masked scores of rows [i0, i0 + tm) against tile [j0, j0 + jn); tp gets
  // tanh' (softcap only). lo / hi are the rows' visible ranges.
  template <class QM, class KM>
  void scores(const QM& Qb, const KM& Kt, int64_t j0, const std::vector<int64_t>& lo,
              const std::vector<int64_t>& hi, int64_t sk, Mat& S, Mat* tp) const {
    S.resize(Qb.rows(), Kt.rows());
    S.noalias() = Qb * Kt.transpose();
    S *= L.scale;
    if (p.softcap > 0) {
      if (tp) tp->resize(S.rows(), S.cols());
      for (int64_t r = 0; r < S.rows(); ++r)
        for (int64_t c = 0; c < S.cols(); ++c) {
          const double t = std::tanh(S(r, c) / p.softcap);
          S(r, c) = p.softcap * t;
          if (tp) (*tp)(r, c) = 1 - t * t;
        }
    }
    const int64_t jn = S.cols();
    for (int64_t r = 0; r < S.rows(); ++r) {
      int64_t h = hi[r];
      if (p.mutant == Mutant::tail_unmasked && h == sk - 1) h = j0 + jn - 1;  // keys past sk kept
      if (lo[r] <= j0 && h >= j0 + jn - 1) continue;                          // interior tile row
      for (int64_t c = 0; c < jn; ++c)
        if (j0 + c < lo[r] || j0 + c > h) S(r, c) = kNegInf;
    }
  }

  // One query tile against KV tiles [t0, t1): writes O rows and LSE values through the callbacks'
  // pointers. fold_sink: apply the sink at finalize (unsplit pass and split 0).
  // omag / lmag (both or neither): the o_mag / lse_mag magnitudes (attention.h) of this pass's
  // keys, accumulated alongside with the same online rescaling (the split partials' bounds).
  void run_tile(int64_t b, int64_t h, int64_t i0, int64_t tm, int64_t t0, int64_t t1, bool fold_sink,
                double* o, double* lse, double* omag = nullptr, double* lmag = nullptr) const {
    const int64_t sq = L.sq[b], sk = L.sk[b], hk = kv_head(h);
    const CMap Qb = q_tile(b, h, i0, tm);
    thread_local Mat Kt, Vt, S, P, Acc, AccA, A, Tp;
    const bool mag = omag != nullptr;
    Acc.setZero(tm, L.Dv);
    std::vector<double> cacc(mag ? tm : 0, 0.0);  // sum_j P_ij c_ij (rescaled like l)
    if (mag) AccA.setZero(tm, L.Dv);
    std::vector<int64_t> lo(tm), hi(tm);
    int64_t n_min = std::numeric_limits<int64_t>::max(), n_max = 0;
    for (int64_t r = 0; r < tm; ++r) {
      bounds.range(i0 + r, sq, sk, lo[r], hi[r]);
      if (lo[r] <= hi[r]) n_min = std::min(n_min, lo[r] / p.tile_n), n_max = std::max(n_max, hi[r] / p.tile_n + 1);
    }
    if (p.mutant == Mutant::tail_unmasked && n_max > 0)
      n_max = std::max(n_max, (sk + p.tile_n - 1) / p.tile_n);
    int64_t nb = std::max(t0, n_min), ne = std::min(t1, n_max);
    if (p.mutant == Mutant::first_kv_tile_only) ne = std::min(ne, nb + 1);
    const bool no_max = p.mutant == Mutant::no_max_subtraction;
    std::vector<double> m(tm, no_max ? 0.0 : kNegInf), l(tm, 0.0);
    for (int64_t n = nb; n < ne; ++n) {
      const int64_t j0 = n * p.tile_n;
      const int64_t jn = p.mutant == Mutant::tail_unmasked ? p.tile_n : std::min(p.tile_n, sk - j0);
      const auto [Kb, Vb] = kv_tile(b, hk, j0, jn, Kt, Vt);
      scores(Qb, Kb, j0, lo, hi, sk, S, mag && p.softcap > 0 ? &Tp : nullptr);
      if (mag) {  // c_ij = t'_ij a_ij + (softcap ? |s_ij| : 0), a_ij = |scale| sum_d |q_id k_jd|
        A.noalias() = Qb.cwiseAbs() * Kb.cwiseAbs().transpose();
        A *= std::fabs(L.scale);
        if (p.softcap > 0)
          for (int64_t r = 0; r < tm; ++r)
            for (int64_t c = 0; c < jn; ++c) A(r, c) = Tp(r, c) * A(r, c) + (std::isfinite(S(r, c)) ? std::fabs(S(r, c)) : 0.0);
      }
      P.resize(tm, jn);
      for (int64_t r = 0; r < tm; ++r) {
        const double m_new = no_max ? 0.0 : std::max(m[r], S.row(r).maxCoeff());
        if (m_new == kNegInf) {  // nothing visible to this row yet
          P.row(r).setZero();
          continue;
        }
        const double alpha = std::exp(m[r] - m_new);  // 0 when m was -inf
        double rs = 0;
        if (no_max) {
          for (int64_t c = 0; c < jn; ++c) {
            double e = std::exp(S(r, c) - m_new);
            // The mutant models a kernel's fp32 exp: it overflows past FLT_MAX (scores > ~88.7).
            if (e > std::numeric_limits<float>::max()) e = std::numeric_limits<double>::infinity();
            rs += (P(r, c) = e);
          }
        } else {
          rs = exp_row_sum(&S(r, 0), m_new, &P(r, 0), jn);  // P = exp(S - m_new), rs = its row sum
        }
        l[r] = l[r] * alpha + rs;
        if (p.mutant != Mutant::no_o_rescale && alpha != 1) Acc.row(r) *= alpha;
        if (mag) {
          if (alpha != 1) AccA.row(r) *= alpha, cacc[r] *= alpha;
          for (int64_t c = 0; c < jn; ++c)
            if (P(r, c) != 0) cacc[r] += P(r, c) * A(r, c);
        }
        m[r] = m_new;
      }
      Acc.noalias() += P * Vb;
      if (mag) AccA.noalias() += P * Vb.cwiseAbs();
    }
    for (int64_t r = 0; r < tm; ++r) {
      double mr = m[r], lr = l[r];
      if (fold_sink && p.has_sink && p.mutant != Mutant::no_sink) {
        if (mr == kNegInf) mr = sink[h], lr = 1;  // only column: exp(sink - sink)
        else lr += std::exp(sink[h] - mr);
      }
      double* orow = o + (L.q_row(b, i0 + r) * L.Hq + h) * L.Dv;
      double* mrow = mag ? omag + (orow - o) : nullptr;
      if (!(lr > 0) || mr == kNegInf) {  // fully masked (or nothing in this split)
        for (int64_t e = 0; e < L.Dv; ++e) orow[e] = 0;
        lse[L.lse_index(b, h, i0 + r)] = kNegInf;
        if (mag) {  // exact zeros / -inf: magnitude 0
          for (int64_t e = 0; e < L.Dv; ++e) mrow[e] = 0;
          lmag[L.lse_index(b, h, i0 + r)] = 0;
        }
        continue;
      }
      for (int64_t e = 0; e < L.Dv; ++e) orow[e] = Acc(r, e) / lr;
      lse[L.lse_index(b, h, i0 + r)] = mr + std::log(lr);
      if (mag) {
        for (int64_t e = 0; e < L.Dv; ++e) mrow[e] = AccA(r, e) / lr;
        lmag[L.lse_index(b, h, i0 + r)] = std::fabs(mr) + std::log(lr) + cacc[r] / lr;
      }
    }
  }
};

struct Work {
  int64_t b, h, i0, tm;
};

std::vector<Work> q_tiles(const detail::Layout& L, int64_t tile_m) {
  std::vector<Work> w;
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.Hq; ++h)
      for (int64_t i0 = 0; i0 < L.sq[b]; i0 += tile_m) w.push_back({b, h, i0, std::min(tile_m, L.sq[b] - i0)});
  return w;
}

}  // namespace

ForwardResult forward_online(const Params& p, const std::vector<double>& q,
                             const std::vector<double>& k, const std::vector<double>& v,
                             const std::vector<double>& sink) {
  const auto L = detail::make_layout(p);
  detail::check_inputs(L, p, q, k, v, sink);
  const Engine E{p, L, q, k, v, sink};
  const auto work = q_tiles(L, p.tile_m);
  const int64_t osz = L.o_size(), lsz = L.lse_size(), ns = p.num_splits;
  ForwardResult R;
  R.o.assign(osz, 0), R.lse.assign(lsz, kNegInf);
  R.o_partial.assign(ns * osz, 0), R.lse_partial.assign(ns * lsz, kNegInf);
  if (ns > 1) R.o_partial_mag.assign(ns * osz, 0), R.lse_partial_mag.assign(ns * lsz, 0);
  const int64_t nw = static_cast<int64_t>(work.size());
  // Work items are independent (each writes its own O rows / LSE values), so the result does not
  // depend on the thread count or the schedule. Last tiles first: under causal masking they are
  // the longest.
#pragma omp parallel for schedule(dynamic)
  for (int64_t w = 0; w < nw; ++w) {
    const auto& t = work[nw - 1 - w];
    const int64_t n_tiles = (L.sk[t.b] + p.tile_n - 1) / p.tile_n;
    E.run_tile(t.b, t.h, t.i0, t.tm, 0, n_tiles, true, R.o.data(), R.lse.data());
    if (ns == 1) continue;  // the single split is the unsplit pass (copied below)
    const int64_t per = (n_tiles + ns - 1) / ns;  // tiles per split (FA's n_blocks_per_split)
    for (int64_t s = 0; s < ns; ++s) {
      const int64_t t0 = std::min(s * per, n_tiles), t1 = std::min((s + 1) * per, n_tiles);
      E.run_tile(t.b, t.h, t.i0, t.tm, t0, t1, s == 0, R.o_partial.data() + s * osz,
                 R.lse_partial.data() + s * lsz, R.o_partial_mag.data() + s * osz, R.lse_partial_mag.data() + s * lsz);
    }
  }
  if (ns == 1) R.o_partial = R.o, R.lse_partial = R.lse;
  auto c = combine_splits(p, ns, R.o_partial, R.lse_partial);
  R.o_combined = std::move(c.o), R.lse_combined = std::move(c.lse);
  return R;
}

BackwardResult backward_tiled(const Params& p, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& sink, const std::vector<double>& o,
                              const std::vector<double>& lse, const std::vector<double>& dout,
                              const std::vector<double>& dlse) {
  const auto L = detail::make_layout(p);
  detail::check_backward_inputs(L, p, q, k, v, sink, o, lse, dout, dlse);
  Params pc = p;
  pc.mutant = Mutant::none;
  const Engine E{pc, L, q, k, v, sink};
  BackwardResult R;
  R.dq.assign(q.size(), 0), R.dk.assign(k.size(), 0), R.dv.assign(v.size(), 0);
  R.dsink.assign(p.has_sink ? L.Hq : 0, 0);

  // Preprocess (FA flash_bwd_preprocess): Delta_i = <dO_i, O_i> - dLSE_i.
  std::vector<double> delta(L.lse_size(), 0);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.Hq; ++h)
      for (int64_t i = 0; i < L.sq[b]; ++i) {
        const int64_t row = (L.q_row(b, i) * L.Hq + h) * L.Dv, li = L.lse_index(b, h, i);
        double d = 0;
        for (int64_t e = 0; e < L.Dv; ++e) d += dout[row + e] * o[row + e];
        delta[li] = d - (dlse.empty() ? 0.0 : dlse[li]);
      }

  const int64_t tm = p.tile_m, tn = p.tile_n;
#pragma omp parallel for schedule(dynamic)
  for (int64_t hk = 0; hk < L.Hkv; ++hk) {
    Mat Kt, Vt, Qb, dOb, S, P, T, dP, dKt, dVt;
    std::vector<int64_t> lo, hi;
    for (int64_t b = 0; b < L.B; ++b) {
      const int64_t sq = L.sq[b], sk = L.sk[b];
      for (int64_t j0 = 0; j0 < sk; j0 += tn) {
        const int64_t jn = std::min(tn, sk - j0);
        E.load_kv(b, hk, j0, jn, Kt, Vt);
        dKt = Mat::Zero(jn, L.D), dVt = Mat::Zero(jn, L.Dv);
        for (int64_t h = hk * L.G; h < (hk + 1) * L.G; ++h)
          for (int64_t i0 = 0; i0 < sq; i0 += tm) {
            const int64_t mr = std::min(tm, sq - i0);
            lo.resize(mr), hi.resize(mr);
            bool any = false;
            for (int64_t r = 0; r < mr; ++r) {
              E.bounds.range(i0 + r, sq, sk, lo[r], hi[r]);
              any |= lo[r] <= hi[r] && lo[r] < j0 + jn && hi[r] >= j0;
            }
            if (!any) continue;  // tile skipped by the mask
            Qb.resize(mr, L.D), dOb.resize(mr, L.Dv);
            for (int64_t r = 0; r < mr; ++r) {
              const int64_t row = L.q_row(b, i0 + r) * L.Hq + h;
              Qb.row(r) = Eigen::Map<const Eigen::RowVectorXd>(q.data() + row * L.D, L.D);
              dOb.row(r) = Eigen::Map<const Eigen::RowVectorXd>(dout.data() + row * L.Dv, L.Dv);
            }
            E.scores(Qb, Kt, j0, lo, hi, sk, S, &T);
            P.resize(mr, jn);
            for (int64_t r = 0; r < mr; ++r) {
              const double lr = lse[L.lse_index(b, h, i0 + r)];
              for (int64_t c = 0; c < jn; ++c) P(r, c) = lr == kNegInf ? 0.0 : std::exp(S(r, c) - lr);
            }
            dVt.noalias() += P.transpose() * dOb;
            dP.noalias() = dOb * Vt.transpose();
            for (int64_t r = 0; r < mr; ++r) {
              const double dl = delta[L.lse_index(b, h, i0 + r)];
              for (int64_t c = 0; c < jn; ++c) {
                double ds = P(r, c) * (dP(r, c) - dl);
                if (p.softcap > 0) ds *= T(r, c);
                dP(r, c) = ds;  // dP now holds dS (dX with softcap)
              }
            }
            dKt.noalias() += L.scale * (dP.transpose() * Qb);
            Mat dQb = L.scale * (dP * Kt);
            for (int64_t r = 0; r < mr; ++r) {
              double* dq = R.dq.data() + (L.q_row(b, i0 + r) * L.Hq + h) * L.D;
              for (int64_t d = 0; d < L.D; ++d) dq[d] += dQb(r, d);
            }
          }
        for (int64_t c = 0; c < jn; ++c) {
          const int64_t kr = L.key_row(b, j0 + c);
          double* dk = R.dk.data() + (kr * L.Hkv + hk) * L.D;
          double* dv = R.dv.data() + (kr * L.Hkv + hk) * L.Dv;
          for (int64_t d = 0; d < L.D; ++d) dk[d] += dKt(c, d);
          for (int64_t e = 0; e < L.Dv; ++e) dv[e] += dVt(c, e);
        }
      }
    }
  }
  // dsink_h = -sum_rows exp(sink_h - LSE_i) Delta_i (FA4 apply_learnable_sink docstring).
  if (p.has_sink)
    for (int64_t h = 0; h < L.Hq; ++h) {
      double acc = 0;
      for (int64_t b = 0; b < L.B; ++b)
        for (int64_t i = 0; i < L.sq[b]; ++i) {
          const int64_t li = L.lse_index(b, h, i);
          if (lse[li] == kNegInf) continue;
          acc -= std::exp(sink[h] - lse[li]) * delta[li];
        }
      R.dsink[h] = acc;
    }
  return R;
}

}  // namespace assay::attention
