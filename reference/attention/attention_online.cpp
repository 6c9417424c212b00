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
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include <Eigen/Dense>

#include "reference/attention/attention.h"
#include "reference/attention/attention_layout.h"
#include "reference/attention/attention_tiles.h"
#include "reference/core/check.h"
#include "reference/core/prefault.h"

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

// Row-major views of Q, K, V rows with a row stride (the rows of one head inside [.., H, D]).
using CMap = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;

// The KV tiles of every (sequence, KV head), packed once per call for the tile kernels
// (attention_tiles.h): K as panels of 8 keys [npan, D, 8], V as tile_n rows of Dvp (Dv rounded up
// to 8) columns; keys past the tile or past sk and columns past Dv are zero (the zero rows are what
// a zero-filling TMA load gives, which the tail_unmasked mutant reads). The tiles live in scratch
// kept between calls on the calling thread (ReusedScratch, prefault.h; the pack writes every value
// before anything reads it): fresh pages for them were a tenth of the form's time at 2 threads.
struct PackedKV {
  int64_t npan = 0, Dvp = 0, ps = 0, ldv = 0;  // panels per tile, padded Dv, panel / V row strides
  int64_t ksz = 0, vsz = 0;                      // doubles per K / V tile
  std::vector<int64_t> first;                    // first tile of (b, hk): first[b * Hkv + hk]
  double* kbuf = nullptr;
  double* vbuf = nullptr;
  int64_t Hkv = 0;

  PackedKV(const detail::Layout& L, const Params& p, const std::vector<double>& kin, const std::vector<double>& vin) {
    Hkv = L.Hkv, npan = (p.tile_n + 7) / 8, Dvp = (L.Dv + 7) / 8 * 8;
    ps = 8 * L.D + 8, ldv = Dvp + 8;  // one line of padding (attention_tiles.h)
    ksz = npan * ps, vsz = p.tile_n * ldv;
    first.assign(L.B * L.Hkv + 1, 0);
    std::vector<std::array<int64_t, 3>> tiles;  // (b, hk, n)
    for (int64_t b = 0; b < L.B; ++b)
      for (int64_t hk = 0; hk < L.Hkv; ++hk) {
        const int64_t nt = (L.sk[b] + p.tile_n - 1) / p.tile_n;
        first[b * L.Hkv + hk + 1] = first[b * L.Hkv + hk] + nt;
        for (int64_t n = 0; n < nt; ++n) tiles.push_back({b, hk, n});
      }
    const auto nt = static_cast<int64_t>(tiles.size());
    thread_local ReusedScratch kws, vws;
    kbuf = kws.get(std::max<int64_t>(1, nt * ksz)), vbuf = vws.get(std::max<int64_t>(1, nt * vsz));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < nt; ++t) {
      const auto [b, hk, n] = tiles[t];
      double* kp = kbuf + t * ksz;
      double* vp = vbuf + t * vsz;
      for (int64_t c = 0; c < npan * 8; ++c) {
        const int64_t j = n * p.tile_n + c;
        const bool real = c < p.tile_n && j < L.sk[b];
        const double* kr = real ? kin.data() + (L.key_row(b, j) * L.Hkv + hk) * L.D : nullptr;
        for (int64_t d = 0; d < L.D; ++d) kp[(c / 8) * ps + d * 8 + c % 8] = real ? kr[d] : 0.0;
        if (c >= p.tile_n) continue;
        const double* vr = real ? vin.data() + (L.key_row(b, j) * L.Hkv + hk) * L.Dv : nullptr;
        for (int64_t e = 0; e < ldv; ++e) vp[c * ldv + e] = real && e < L.Dv ? vr[e] : 0.0;
      }
    }
  }
  const double* k_tile(int64_t b, int64_t hk, int64_t n) const { return kbuf + (first[b * Hkv + hk] + n) * ksz; }
  const double* v_tile(int64_t b, int64_t hk, int64_t n) const { return vbuf + (first[b * Hkv + hk] + n) * vsz; }
};

struct Engine : detail::Operands {
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

  // Softcap and mask, in place, on scaled scores s (rows x jn, rows lds apart) of rows against tile
  // [j0, j0 + jn); tp (rows tp_ld apart) gets tanh' (softcap only). lo / hi are the rows' visible
  // ranges.
  void softcap_mask(double* s, int64_t lds, int64_t rows, int64_t jn, int64_t j0, const std::vector<int64_t>& lo,
                    const std::vector<int64_t>& hi, int64_t sk, double* tp, int64_t tp_ld) const {
    if (p.softcap > 0)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < jn; ++c) {
          const double t = std::tanh(s[r * lds + c] / p.softcap);
          s[r * lds + c] = p.softcap * t;
          if (tp) tp[r * tp_ld + c] = 1 - t * t;
        }
    for (int64_t r = 0; r < rows; ++r) {
      int64_t h = hi[r];
      if (p.mutant == Mutant::tail_unmasked && h == sk - 1) h = j0 + jn - 1;  // keys past sk kept
      if (lo[r] <= j0 && h >= j0 + jn - 1) continue;                          // interior tile row
      for (int64_t c = 0; c < jn; ++c)
        if (j0 + c < lo[r] || j0 + c > h) s[r * lds + c] = kNegInf;
    }
  }

  // Scaled, softcapped, masked scores of rows [i0, i0 + tm) against tile [j0, j0 + jn) (the
  // backward's, with Eigen products); tp gets tanh' (softcap only).
  template <class QM, class KM>
  void scores(const QM& Qb, const KM& Kt, int64_t j0, const std::vector<int64_t>& lo,
              const std::vector<int64_t>& hi, int64_t sk, Mat& S, Mat* tp) const {
    S.resize(Qb.rows(), Kt.rows());
    S.noalias() = Qb * Kt.transpose();
    S *= L.scale;
    if (tp && p.softcap > 0) tp->resize(S.rows(), S.cols());
    softcap_mask(S.data(), S.cols(), S.rows(), S.cols(), j0, lo, hi, sk, tp && p.softcap > 0 ? tp->data() : nullptr,
                 S.cols());
  }

  // One query tile's online-softmax state across KV tiles: begin, step per KV tile in [nb, ne)
  // ascending, finish. The two products per KV tile run on the packed tiles pk
  // (attention_tiles.h); the magnitudes' products (split partials only) are Eigen products on the
  // tile's views.
  struct TileRun {
    int64_t b = 0, h = 0, i0 = 0, tm = 0, hk = 0, nb = 0, ne = 0;
    bool mag = false;
    std::vector<int64_t> lo, hi;
    std::vector<double> m, l, cacc, acc;  // row max, row sum, sum_j P_ij c_ij, O accumulator
    Mat acc_mag;
    std::vector<double> stale;  // Mutant::stale_scores: the previous tile's log2(e) (s - m), [tm, ld_s]
  };

  // Row strides of the S / P tiles and of the O accumulator, padded (attention_tiles.h).
  static int64_t ld_s(const PackedKV& pk) { return pk.npan * 8 + 8; }
  static int64_t ld_acc(const PackedKV& pk) { return pk.Dvp + 8; }

  // Starts query tile rows [i0, i0 + tm) of head h against KV tiles [t0, t1). mag: also the
  // o_mag / lse_mag magnitudes (attention.h) of this pass's keys, accumulated alongside with the
  // same online rescaling (the split partials' bounds).
  void begin(const PackedKV& pk, TileRun& T, int64_t b, int64_t h, int64_t i0, int64_t tm, int64_t t0, int64_t t1,
             bool mag) const {
    const int64_t sq = L.sq[b], sk = L.sk[b];
    T.b = b, T.h = h, T.i0 = i0, T.tm = tm, T.hk = kv_head(h), T.mag = mag;
    T.acc.assign(tm * ld_acc(pk), 0.0);
    T.cacc.assign(mag ? tm : 0, 0.0);
    if (mag) T.acc_mag.setZero(tm, L.Dv);
    T.lo.resize(tm), T.hi.resize(tm);
    int64_t n_min = std::numeric_limits<int64_t>::max(), n_max = 0;
    for (int64_t r = 0; r < tm; ++r) {
      bounds.range(i0 + r, sq, sk, T.lo[r], T.hi[r]);
      if (T.lo[r] <= T.hi[r])
        n_min = std::min(n_min, T.lo[r] / p.tile_n), n_max = std::max(n_max, T.hi[r] / p.tile_n + 1);
    }
    if (p.mutant == Mutant::tail_unmasked && n_max > 0)
      n_max = std::max(n_max, (sk + p.tile_n - 1) / p.tile_n);
    T.nb = std::max(t0, n_min), T.ne = std::min(t1, n_max);
    if (p.mutant == Mutant::first_kv_tile_only) T.ne = std::min(T.ne, T.nb + 1);
    const bool no_max = p.mutant == Mutant::no_max_subtraction;
    T.m.assign(tm, no_max ? 0.0 : kNegInf), T.l.assign(tm, 0.0);
    T.stale.assign(p.mutant == Mutant::stale_scores ? tm * ld_s(pk) : 0, 0.0);
  }

  // The KV tile whose data step n reads: n, or the tile a ring-defect mutant reads instead.
  int64_t data_tile(const TileRun& T, int64_t n) const {
    switch (p.mutant) {
      case Mutant::kv_tile_pinned: return T.nb;
      case Mutant::ring_no_wrap: return n >= T.nb + 2 ? T.nb + (n - T.nb) % 2 : n;
      case Mutant::ring_stale_round: return n >= T.nb + 2 && n < T.nb + 4 ? n - 2 : n;
      default: return n;
    }
  }

  // KV tile n of the tile's range.
  void step(const PackedKV& pk, TileRun& T, int64_t n) const {
    const int64_t sk = L.sk[T.b], tm = T.tm, ld = ld_s(pk), lda = ld_acc(pk);
    const double* qt = q.data() + (L.q_row(T.b, T.i0) * L.Hq + T.h) * L.D;
    thread_local std::vector<double> S, P, ascale;  // ascale: O's rescale factor per row
    thread_local Mat Kt, Vt, A, Tp;
    S.resize(tm * ld), P.resize(tm * ld), ascale.resize(tm);
    const bool no_max = p.mutant == Mutant::no_max_subtraction;
    const int64_t j0 = n * p.tile_n;
    const int64_t jn = p.mutant == Mutant::tail_unmasked ? p.tile_n : std::min(p.tile_n, sk - j0);
    const int64_t nd = data_tile(T, n);
    detail::tile_scores(qt, L.Hq * L.D, tm, L.D, pk.k_tile(T.b, T.hk, nd), pk.npan, pk.ps, L.scale, S.data(), ld);
    if (p.mutant == Mutant::stale_scores)  // the raw accumulator held y: S = scale (q.k + y)
      for (int64_t r = 0; r < tm; ++r)
        for (int64_t c = 0; c < jn; ++c) S[r * ld + c] += L.scale * T.stale[r * ld + c];
    const bool tanh_grad = T.mag && p.softcap > 0;
    if (tanh_grad) Tp.resize(tm, jn);
    softcap_mask(S.data(), ld, tm, jn, j0, T.lo, T.hi, sk, tanh_grad ? Tp.data() : nullptr, jn);
    const Eigen::Map<const Mat, 0, Eigen::OuterStride<>> Sm(S.data(), tm, jn, Eigen::OuterStride<>(ld));
    const Eigen::Map<const Mat, 0, Eigen::OuterStride<>> Pm(P.data(), tm, jn, Eigen::OuterStride<>(ld));
    std::optional<std::pair<CMap, CMap>> kv;  // the tile's K, V views (magnitudes only)
    if (T.mag) {  // c_ij = t'_ij a_ij + (softcap ? |s_ij| : 0), a_ij = |scale| sum_d |q_id k_jd|
      kv.emplace(kv_tile(T.b, T.hk, j0, jn, Kt, Vt));
      A.noalias() = q_tile(T.b, T.h, T.i0, tm).cwiseAbs() * kv->first.cwiseAbs().transpose();
      A *= std::fabs(L.scale);
      if (p.softcap > 0)
        for (int64_t r = 0; r < tm; ++r)
          for (int64_t c = 0; c < jn; ++c) A(r, c) = Tp(r, c) * A(r, c) + (std::isfinite(Sm(r, c)) ? std::fabs(Sm(r, c)) : 0.0);
    }
    for (int64_t r = 0; r < tm; ++r) {
      const double* srow = S.data() + r * ld;
      double* prow = P.data() + r * ld;
      const double m_new = no_max ? 0.0 : std::max(T.m[r], Sm.row(r).maxCoeff());
      ascale[r] = 1.0;
      if (m_new == kNegInf) {  // nothing visible to this row yet
        std::fill(prow, prow + jn, 0.0);
        continue;
      }
      const double alpha = std::exp(T.m[r] - m_new);  // 0 when m was -inf
      double rs = 0;
      if (no_max) {
        for (int64_t c = 0; c < jn; ++c) {
          double e = std::exp(srow[c] - m_new);
          // The mutant models a kernel's fp32 exp: it overflows past FLT_MAX (scores > ~88.7).
          if (e > std::numeric_limits<float>::max()) e = std::numeric_limits<double>::infinity();
          rs += (prow[c] = e);
        }
      } else {
        rs = detail::tile_exp_row_sum(srow, m_new, prow, jn);  // P = exp(S - m_new), rs = its row sum
      }
      T.l[r] = T.l[r] * alpha + rs;
      if (p.mutant != Mutant::no_o_rescale) ascale[r] = alpha;  // (O's rescale: in tile_pv)
      if (T.mag) {
        if (alpha != 1) T.acc_mag.row(r) *= alpha, T.cacc[r] *= alpha;
        for (int64_t c = 0; c < jn; ++c)
          if (prow[c] != 0) T.cacc[r] += prow[c] * A(r, c);
      }
      T.m[r] = m_new;
    }
    if (p.mutant == Mutant::stale_scores)  // y = log2(e) (s - m_new) (m_new = -inf counts as 0)
      for (int64_t r = 0; r < tm; ++r) {
        const double mu = T.m[r] == kNegInf ? 0.0 : T.m[r];
        for (int64_t c = 0; c < jn; ++c) T.stale[r * ld + c] = 1.4426950408889634 * (S[r * ld + c] - mu);
      }
    detail::tile_pv(P.data(), ld, tm, jn, pk.v_tile(T.b, T.hk, nd), pk.ldv, pk.Dvp / 8, T.acc.data(), lda,
                    ascale.data());
    if (T.mag) T.acc_mag.noalias() += Pm * kv->second.cwiseAbs();
  }

  // Finalize: O rows and LSE values (and their magnitudes) through the pointers. fold_sink: apply
  // the sink (unsplit pass and split 0).
  void finish(const PackedKV& pk, const TileRun& T, bool fold_sink, double* o, double* lse, double* omag,
              double* lmag) const {
    const int64_t lda = ld_acc(pk);
    for (int64_t r = 0; r < T.tm; ++r) {
      double mr = T.m[r], lr = T.l[r];
      if (fold_sink && p.has_sink && p.mutant != Mutant::no_sink) {
        if (mr == kNegInf) mr = sink[T.h], lr = 1;  // only column: exp(sink - sink)
        else lr += std::exp(sink[T.h] - mr);
      }
      const int64_t li = L.lse_index(T.b, T.h, T.i0 + r);
      double* orow = o + (L.q_row(T.b, T.i0 + r) * L.Hq + T.h) * L.Dv;
      double* mrow = T.mag ? omag + (orow - o) : nullptr;
      if (!(lr > 0) || mr == kNegInf) {  // fully masked (or nothing in this split)
        for (int64_t e = 0; e < L.Dv; ++e) orow[e] = 0;
        lse[li] = kNegInf;
        if (T.mag) {  // exact zeros / -inf: magnitude 0
          for (int64_t e = 0; e < L.Dv; ++e) mrow[e] = 0;
          lmag[li] = 0;
        }
        continue;
      }
      for (int64_t e = 0; e < L.Dv; ++e) orow[e] = T.acc[r * lda + e] / lr;
      lse[li] = mr + std::log(lr);
      if (T.mag) {
        for (int64_t e = 0; e < L.Dv; ++e) mrow[e] = T.acc_mag(r, e) / lr;
        lmag[li] = std::fabs(mr) + std::log(lr) + T.cacc[r] / lr;
      }
    }
  }

  // Query tiles (b, h, i0s[g], tms[g]) of one head, side by side: each KV tile is brought to the
  // cache once for all of them, and each tile still sees its own KV range in ascending order, so
  // every row gets the bits it gets alone. omag / lmag: as in begin (mag when non-null).
  void run_tiles(const PackedKV& pk, int64_t b, int64_t h, const std::vector<std::pair<int64_t, int64_t>>& rows,
                 int64_t t0, int64_t t1, bool fold_sink, double* o, double* lse, double* omag = nullptr,
                 double* lmag = nullptr) const {
    thread_local std::vector<TileRun> runs;
    if (runs.size() < rows.size()) runs.resize(rows.size());
    int64_t nb = std::numeric_limits<int64_t>::max(), ne = 0;
    for (size_t g = 0; g < rows.size(); ++g) {
      begin(pk, runs[g], b, h, rows[g].first, rows[g].second, t0, t1, omag != nullptr);
      nb = std::min(nb, runs[g].nb), ne = std::max(ne, runs[g].ne);
    }
    for (int64_t n = nb; n < ne; ++n)
      for (size_t g = 0; g < rows.size(); ++g)
        if (runs[g].nb <= n && n < runs[g].ne) step(pk, runs[g], n);
    for (size_t g = 0; g < rows.size(); ++g) finish(pk, runs[g], fold_sink, o, lse, omag, lmag);
  }
};

// A work item: up to kGroup consecutive query tiles of one (sequence, head), run side by side.
constexpr int64_t kGroup = 2;
struct Work {
  int64_t b, h;
  std::vector<std::pair<int64_t, int64_t>> rows;  // (i0, tm) per query tile
};

std::vector<Work> q_tiles(const detail::Layout& L, int64_t tile_m) {
  std::vector<Work> w;
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.Hq; ++h)
      for (int64_t i0 = 0; i0 < L.sq[b]; i0 += tile_m) {
        if (i0 % (kGroup * tile_m) == 0) w.push_back({b, h, {}});
        w.back().rows.push_back({i0, std::min(tile_m, L.sq[b] - i0)});
      }
  return w;
}

}  // namespace

ForwardResult forward_online(const Params& p, const std::vector<double>& q,
                             const std::vector<double>& k, const std::vector<double>& v,
                             const std::vector<double>& sink) {
  const auto L = detail::checked_layout(p, q, k, v, sink);
  const Engine E{{p, L, q, k, v, sink}};
  const auto work = q_tiles(L, p.tile_m);
  const PackedKV pk(L, p, k, v);
  const int64_t osz = L.o_size(), lsz = L.lse_size(), ns = p.num_splits;
  ForwardResult R;
  // Fresh outputs with their pages faulted in by all threads, then zero-filled side by side
  // (prefault.h): at B H S Dv = 32 MiB a serial first touch is a visible part of the time at 16
  // threads.
  const int64_t psz = ns > 1 ? ns * osz : 0, csz = ns > 1 ? osz : 0;  // split outputs (none for one split)
  reserve_prefaulted(R.o, osz), reserve_prefaulted(R.o_partial, psz), reserve_prefaulted(R.o_partial_mag, psz);
  reserve_prefaulted(R.o_combined, csz);
  resize_concurrently({{&R.o, osz}, {&R.o_partial, psz}, {&R.o_partial_mag, psz}, {&R.o_combined, csz}});
  R.lse.assign(lsz, kNegInf);
  if (ns > 1) R.lse_partial.assign(ns * lsz, kNegInf), R.lse_partial_mag.assign(ns * lsz, 0), R.lse_combined.assign(lsz, kNegInf);
  const int64_t nw = static_cast<int64_t>(work.size());
  // Work items are independent (each writes its own O rows / LSE values, partials and combined
  // rows), so the result does not depend on the thread count or the schedule. Last tiles first:
  // under causal masking they are the longest.
#pragma omp parallel for schedule(dynamic)
  for (int64_t w = 0; w < nw; ++w) {
    const auto& t = work[nw - 1 - w];
    const int64_t n_tiles = (L.sk[t.b] + p.tile_n - 1) / p.tile_n;
    E.run_tiles(pk, t.b, t.h, t.rows, 0, n_tiles, true, R.o.data(), R.lse.data());
    if (ns == 1) continue;  // the single split is the unsplit pass (attention.h)
    const int64_t per = (n_tiles + ns - 1) / ns;  // tiles per split (FA's n_blocks_per_split)
    for (int64_t s = 0; s < ns; ++s) {
      const int64_t t0 = std::min(s * per, n_tiles), t1 = std::min((s + 1) * per, n_tiles);
      E.run_tiles(pk, t.b, t.h, t.rows, t0, t1, s == 0, R.o_partial.data() + s * osz, R.lse_partial.data() + s * lsz,
                  R.o_partial_mag.data() + s * osz, R.lse_partial_mag.data() + s * lsz);
    }
    // combine_splits on this item's rows, while they are in cache (the same combine_row).
    for (const auto& [i0, tm] : t.rows)
      for (int64_t i = i0; i < i0 + tm; ++i)
        detail::combine_row(p, L, ns, R.o_partial.data(), R.lse_partial.data(), t.b, t.h, i, R.o_combined.data(),
                            R.lse_combined.data());
  }
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
  const Engine E{{pc, L, q, k, v, sink}};
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
