// Gated delta rule, the recurrent form (gated_delta.h recurrent(), spec 3.2): the definitional
// token-by-token recurrence with its error-bound magnitudes.
//
// The arithmetic of step() (gated_delta.cpp, one token of the decode step: every sum over K in
// ascending row order, the same products and maxima), laid out for speed:
//  * Column j of the state evolves on its own (kv_mem_j, delta_j, m_j, o_j and the bound terms of
//    column j read only column j of S), so a work item is (sequence, value head, block of kRecCols
//    value columns): more items than heads for the threads, and the K x 16 block of S stays in L1.
//  * Per token, step()'s passes over S become ONE sweep over the rows of the block: row i finishes
//    token t (rank-1 update, S^T q and |S|^T |q| sums) and then does token t+1's decay and its
//    S^T k and |S|^T |k| sums, since token t+1's row-i work needs only row i of token t's result.
//    The column sums live in vector registers. The token that ends a chunk splits the sweep in two
//    (the chunk state and its bound are snapshot between them).
//  * The bound's running max of the update terms |k_i| |beta| (|v_j| + m_j) over a chunk's tokens is
//    only read at the chunk's last token, so it is not carried through every sweep: the factors
//    |beta| and w_j = |v_j| + m_j of up to kFold tokens are buffered and folded into the max, in
//    token order, by a register-blocked pass (fold_max) before the chunk's last sweep reads it.
// The vectors are GCC vector types: plain IEEE lane operations (no FMA: -ffp-contract=off) in a
// fixed order, so the AVX-512 / AVX2 / SSE2 clones and step() give the same bits.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "reference/core/prefault.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/gated_delta/gated_delta_internal.h"

namespace assay::gated_delta {

namespace {

using detail::alloc_result;
using detail::kParallelMin;
using detail::prepare;
using detail::Prep;
using detail::Seq;

// GCC notes (-Wpsabi) that a 64-byte vector passed by value out of line in the default clone would
// use another ABI than in the AVX-512 one; these helpers are always inlined, so it never happens.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

typedef double v8d __attribute__((vector_size(64)));
typedef uint64_t v8u __attribute__((vector_size(64)));
constexpr int kRecVecs = 2;                 // vectors of 8 per row of a block
constexpr int64_t kRecCols = 8 * kRecVecs;  // value columns per work item (only the speed depends on it)
constexpr int64_t kFold = 64;               // tokens buffered before fold_max folds them
constexpr int64_t kPrefetch = 4;            // tokens ahead that the v and o rows are prefetched

// Unaligned loads / stores, always inlined into the clones.
__attribute__((always_inline)) inline v8d vload(const double* p) {
  v8d x;
  __builtin_memcpy(&x, p, sizeof x);
  return x;
}
__attribute__((always_inline)) inline void vstore(double* p, const v8d& x) { __builtin_memcpy(p, &x, sizeof x); }

// Token t's part of a sweep: the rank-1 update and the output sums.
struct SweepOut {
  const double *k, *q;  // [K] rows of token t
  const double* delta;  // [kRecCols]: beta (v_j - kv_mem_j)
  double *acc, *mag;    // [kRecCols] out: sum_i S_ij q_i, sum_i |S_ij| |q_i| (S updated)
  const double* tmax;   // null, or [K][kRecCols]: the chunk's running max, token t folded in ...
  double* sb;           // ... and then out: |S| + tmax (S before the update), the final-state bound
};
// Token t+1's part: decay, then kv_mem = S^T k and m = |S|^T |k| (missing_alpha: kv_mem before the decay).
struct SweepIn {
  double alpha;
  bool read_before_decay;
  const double* k;  // [K]
  double *kv, *m;   // [kRecCols] out
};

template <bool kOut, bool kIn, bool kSb>
__attribute__((always_inline)) inline void sweep_rows(double* S, int64_t K, const SweepOut& o, const SweepIn& n) {
  constexpr int NV = kRecVecs;
  const v8u kAbs = v8u{} + 0x7fffffffffffffffULL;
  v8d acc[NV], mag[NV], kv[NV], m[NV], delta[NV];
#pragma GCC unroll 8
  for (int u = 0; u < NV; ++u) {
    acc[u] = mag[u] = kv[u] = m[u] = v8d{};
    if constexpr (kOut) delta[u] = vload(o.delta + 8 * u);
  }
  const double *ko = o.k, *qo = o.q, *kn = n.k;
  const double alpha = n.alpha;
  const bool before = n.read_before_decay;
  for (int64_t i = 0; i < K; ++i) {
    double* s = S + i * kRecCols;
    double koi = 0, qoi = 0, kni = 0, akni = 0;
    if constexpr (kOut) koi = ko[i], qoi = qo[i];
    if constexpr (kIn) kni = kn[i], akni = std::fabs(kn[i]);
#pragma GCC unroll 8
    for (int u = 0; u < NV; ++u) {
      v8d x = vload(s + 8 * u);
      if constexpr (kOut) {
        if constexpr (kSb) vstore(o.sb + i * kRecCols + 8 * u, (v8d)((v8u)x & kAbs) + vload(o.tmax + i * kRecCols + 8 * u));
        x = x + koi * delta[u];
        const v8d xq = x * qoi;
        acc[u] = acc[u] + xq;
        mag[u] = mag[u] + (v8d)((v8u)xq & kAbs);  // |S_ij| |q_i| = |S_ij q_i| (IEEE products)
      }
      if constexpr (kIn) {
        if (before) {
          kv[u] = kv[u] + x * kni;
          x = alpha * x;
          m[u] = m[u] + (v8d)((v8u)x & kAbs) * akni;
        } else {
          x = alpha * x;
          const v8d xk = x * kni;
          kv[u] = kv[u] + xk;
          m[u] = m[u] + (v8d)((v8u)xk & kAbs);  // |S_ij| |k_i|
        }
      }
      vstore(s + 8 * u, x);
    }
  }
#pragma GCC unroll 8
  for (int u = 0; u < NV; ++u) {
    if constexpr (kOut) vstore(o.acc + 8 * u, acc[u]), vstore(o.mag + 8 * u, mag[u]);
    if constexpr (kIn) vstore(n.kv + 8 * u, kv[u]), vstore(n.m + 8 * u, m[u]);
  }
}

// One sweep over the K x kRecCols block S: token t's part (o, may be null) then token t+1's (n,
// may be null), row by row. One entry point per ISA clone; the combinations the recurrence uses
// are instantiated inside it.
ASSAY_GD_CLONES
void sweep(double* S, int64_t K, const SweepOut* o, const SweepIn* n) {
  static const SweepOut no_out{};
  static const SweepIn no_in{};
  if (!o)
    sweep_rows<false, true, false>(S, K, no_out, *n);
  else if (n)
    sweep_rows<true, true, false>(S, K, *o, *n);  // (a chunk's last token is never fused)
  else if (o->sb)
    sweep_rows<true, false, true>(S, K, *o, no_in);
  else
    sweep_rows<true, false, false>(S, K, *o, no_in);
}

// tmax[i][j] <- max(tmax[i][j], |k_t[i]| |beta_t| w_t[j]) for the nt buffered tokens t in order:
// std::max(tmax, term) = tmax < term ? term : tmax, exactly as step()'s sequence of maxima.
// Tiles of 8 rows x kRecCols columns stay in registers over the tokens.
ASSAY_GD_CLONES
void fold_max(double* tmax, int64_t K, int64_t nt, const double* const* krow, const double* abs_beta,
              const double* w) {
  constexpr int NV = kRecVecs;
  const v8u kAbs = v8u{} + 0x7fffffffffffffffULL;
  for (int64_t i0 = 0; i0 < K; i0 += 8) {
    const int64_t rn = std::min<int64_t>(8, K - i0);
    v8d mx[8][NV];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r)
#pragma GCC unroll 8
      for (int u = 0; u < NV; ++u) mx[r][u] = r < rn ? vload(tmax + (i0 + r) * kRecCols + 8 * u) : v8d{};
    for (int64_t t = 0; t < nt; ++t) {
      v8d kk = v8d{};
      if (rn == 8) kk = vload(krow[t] + i0);
      else
        for (int64_t r = 0; r < rn; ++r) kk[r] = krow[t][i0 + r];
      const v8d ck = (v8d)((v8u)kk & kAbs) * abs_beta[t];  // |k_i| |beta|
      v8d wt[NV];
#pragma GCC unroll 8
      for (int u = 0; u < NV; ++u) wt[u] = vload(w + t * kRecCols + 8 * u);
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r)
#pragma GCC unroll 8
        for (int u = 0; u < NV; ++u) {
          const v8d term = ck[r] * wt[u];
          mx[r][u] = mx[r][u] < term ? term : mx[r][u];
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r)
#pragma GCC unroll 8
      for (int u = 0; u < NV; ++u)
        if (r < rn) vstore(tmax + (i0 + r) * kRecCols + 8 * u, mx[r][u]);
  }
}

// Columns [j0, j0 + nb) of a stored state slice (layout L) to / from a K x kRecCols block.
void load_block(const double* src, StateLayout L, int64_t K, int64_t V, int64_t j0, int64_t nb, double* blk) {
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < nb; ++j) blk[i * kRecCols + j] = L == StateLayout::kv ? src[i * V + j0 + j] : src[(j0 + j) * K + i];
}
void store_block(const double* blk, StateLayout L, int64_t K, int64_t V, int64_t j0, int64_t nb, double* dst) {
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < nb; ++j) (L == StateLayout::kv ? dst[i * V + j0 + j] : dst[(j0 + j) * K + i]) = blk[i * kRecCols + j];
}

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
// n doubles, 64-byte aligned, zeroed.
std::unique_ptr<double[], FreeDeleter> aligned_zeros(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(double) + 63) / 64 * 64;
  auto* p = static_cast<double*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  std::fill(p, p + bytes / sizeof(double), 0.0);
  return std::unique_ptr<double[], FreeDeleter>(p);
}

#pragma GCC diagnostic pop

}  // namespace

Result recurrent(const Params& p, const Inputs& in) {
  const Prep P = prepare(p, in);
  Result r = alloc_result(P);
  const size_t no = P.B * P.T * P.HV * P.V, ncs = P.NC * P.HV * P.K * P.V;
  reserve_prefaulted(r.o_bound, no);
  reserve_prefaulted(r.chunk_states_bound, ncs);
  resize_concurrently({{&r.o, no}, {&r.o_bound, no}, {&r.chunk_states, ncs}, {&r.chunk_states_bound, ncs}});
  r.final_state_bound.assign(r.final_state.size(), 0.0);
  const int64_t K = P.K, V = P.V, KV = K * V, HV = P.HV, G = P.HV / P.H;
  const int64_t nvb = (V + kRecCols - 1) / kRecCols, jobs = P.Nseq * HV * nvb;
  const bool read_before_decay = p.mutant == Mutant::missing_alpha;
  const StateLayout lay = p.state_layout;
  // The decays exp(g), once per (token, value head) rather than once per column block.
  std::vector<double> alpha(P.g.size());
  const auto ng = static_cast<int64_t>(alpha.size());
#pragma omp parallel for schedule(static) if (ng >= kParallelMin / 16)
  for (int64_t x = 0; x < ng; ++x) alpha[x] = std::exp(P.g[x]);
  const double* q_all = P.q().data();
  const double* k_all = P.k().data();
#pragma omp parallel for schedule(dynamic)
  for (int64_t job = 0; job < jobs; ++job) {
    const int64_t sn = job / (HV * nvb), hv = job / nvb % HV, h = hv / G;
    const int64_t j0 = job % nvb * kRecCols, nb = std::min(kRecCols, V - j0);
    const Seq& s = P.seqs[sn];
    // Block buffers (columns past nb stay 0 and are never stored): the state S; tmax, the running
    // max of the update terms since the chunk's first token (as folded so far); sb, the final-state
    // bound of the sequence truncated after the tokens seen so far, set at every chunk's last token
    // (|e^g S| of that step + tmax); before any token it is |S0| (the empty-prefix rule), and at
    // each chunk start it is that chunk state's bound. Then per-token column vectors and the fold
    // buffer (w_t of up to kFold tokens).
    const int64_t nblk = K * kRecCols;
    auto buf = aligned_zeros(3 * nblk + (6 + kFold) * kRecCols);
    double *S = buf.get(), *tmax = S + nblk, *sb = tmax + nblk;
    double *delta = sb + nblk, *acc = delta + kRecCols, *mag = acc + kRecCols;
    double *kv = mag + kRecCols, *m = kv + kRecCols, *vt = m + kRecCols, *wbuf = vt + kRecCols;
    const double* fold_k[kFold];
    double fold_b[kFold];
    int64_t nfold = 0;
    if (!P.h0->empty()) load_block(P.h0->data() + (s.n * HV + hv) * KV, lay, K, V, j0, nb, S);
    for (int64_t x = 0; x < nblk; ++x) sb[x] = std::fabs(S[x]);
    auto tok = [&](int64_t i) { return s.b * P.T + s.t0 + i; };
    auto krow = [&](int64_t i) { return k_all + (tok(i) * P.H + h) * K; };
    auto sweep_in = [&](int64_t i) {
      return SweepIn{alpha[tok(i) * HV + hv], read_before_decay, krow(i), kv, m};
    };
    auto snapshot = [&](int64_t i) {  // chunk start at token i: its state and bound
      const int64_t off = ((P.chunk_off[s.n] + i / P.C) * HV + hv) * KV;
      store_block(S, lay, K, V, j0, nb, r.chunk_states.data() + off);
      store_block(sb, lay, K, V, j0, nb, r.chunk_states_bound.data() + off);
      std::fill(tmax, tmax + nblk, 0.0);
    };
    if (s.len > 0) {
      snapshot(0);
      const SweepIn n0 = sweep_in(0);
      sweep(S, K, nullptr, &n0);
    }
    for (int64_t i = 0; i < s.len; ++i) {
      const int64_t tv = tok(i) * HV + hv;
      // v and o rows of a token are HV * V apart: no hardware prefetcher follows that stride.
      if (i + kPrefetch < s.len) {
        const int64_t tp = (tok(i + kPrefetch) * HV + hv) * V + j0;
        for (int64_t j = 0; j < nb; j += 8) {
          __builtin_prefetch(P.v->data() + tp + j);
          __builtin_prefetch(r.o.data() + tp + j, 1);
          __builtin_prefetch(r.o_bound.data() + tp + j, 1);
        }
      }
      const double beta = P.beta[tv];
      const double* v = P.v->data() + tv * V + j0;
      for (int64_t j = 0; j < nb; ++j) vt[j] = v[j];
      double* w = wbuf + nfold * kRecCols;
      for (int64_t j = 0; j < kRecCols; ++j) {
        w[j] = std::fabs(vt[j]) + m[j];
        delta[j] = beta * (vt[j] - kv[j]);
      }
      fold_k[nfold] = krow(i);
      fold_b[nfold] = std::fabs(beta);
      ++nfold;
      const bool chunk_end = (i + 1) % P.C == 0 || i == s.len - 1;
      if (chunk_end || nfold == kFold) {
        fold_max(tmax, K, nfold, fold_k, fold_b, wbuf);
        nfold = 0;
      }
      SweepOut o{krow(i), q_all + (tok(i) * P.H + h) * K, delta, acc, mag, chunk_end ? tmax : nullptr,
                 chunk_end ? sb : nullptr};
      const bool more = i + 1 < s.len;
      if (more && !chunk_end) {
        const SweepIn n1 = sweep_in(i + 1);
        sweep(S, K, &o, &n1);  // kv, m now token i + 1's (o read delta before)
      } else {
        sweep(S, K, &o, nullptr);
        if (more) {
          snapshot(i + 1);
          const SweepIn n1 = sweep_in(i + 1);
          sweep(S, K, nullptr, &n1);
        }
      }
      double* ot = r.o.data() + tv * V + j0;
      double* ob = r.o_bound.data() + tv * V + j0;
      for (int64_t j = 0; j < nb; ++j) {
        ot[j] = P.scale * acc[j];
        ob[j] = std::fabs(P.scale) * mag[j];
      }
    }
    store_block(S, lay, K, V, j0, nb, r.final_state.data() + (s.n * HV + hv) * KV);
    store_block(sb, lay, K, V, j0, nb, r.final_state_bound.data() + (s.n * HV + hv) * KV);
  }
  return r;
}

}  // namespace assay::gated_delta
