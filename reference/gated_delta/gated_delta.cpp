// Gated delta rule oracles: see gated_delta.h for the contract, shapes and conventions.
#include "reference/gated_delta/gated_delta.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <string>

#include <Eigen/Dense>
#include <omp.h>

#include "reference/core/prefault.h"
#include "reference/core/tile_gemm.h"

#include "reference/core/check.h"
#include "reference/gated_delta/gated_delta_state.h"

namespace assay::gated_delta {

std::string_view name(Mutant m) {
  switch (m) {
    case Mutant::none: return "none";
    case Mutant::missing_alpha: return "missing_alpha";
    case Mutant::w_without_decay: return "w_without_decay";
    case Mutant::kkt_without_decay: return "kkt_without_decay";
    case Mutant::i_minus_a: return "i_minus_a";
    case Mutant::u_with_decay: return "u_with_decay";
    case Mutant::strict_output_mask: return "strict_output_mask";
    case Mutant::carry_without_decay: return "carry_without_decay";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Elementwise preprocessing.

double l2norm_scale(const double* x, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  return 1.0 / std::sqrt(ss + eps);
}

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double gate_in_kernel(double a, double A_log, double dt_bias) {
  return -std::exp(A_log) * softplus(a + dt_bias);
}

double beta_value(BetaMode m, double x) {
  switch (m) {
    case BetaMode::given: return x;
    case BetaMode::sigmoid: return sigmoid(x);
    case BetaMode::two_sigmoid: return 2.0 * sigmoid(x);
  }
  return x;
}

namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;


// Loops over fewer elements than this stay on the calling thread (a parallel region costs more
// than they do). Only the speed depends on it: every element is computed the same way either way.
constexpr int64_t kParallelMin = int64_t{1} << 16;

bool all_finite(const std::vector<double>& x) {
  const auto n = static_cast<int64_t>(x.size());
  bool ok = true;
#pragma omp parallel for simd schedule(static) reduction(&& : ok) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) ok = ok & std::isfinite(x[i]);  // (no short cut: vectorises)
  return ok;
}

// One sequence: batch row b, tokens [t0, t0 + len) of that row, state slot n.
struct Seq {
  int64_t b, t0, len, n;
};

// Inputs after the elementwise preprocessing that both forms share (l2norm, gate, beta).
struct Prep {
  int64_t B, T, H, HV, K, V, Nseq, C, NC;
  double scale;
  const std::vector<double>* q_in;  // [B, T, H, K] as given
  const std::vector<double>* k_in;
  std::vector<double> q_n, k_n;  // their l2-normalised copies (qk_l2norm, materialised)
  std::vector<double> q_s, k_s;  // or only the rows' l2norm_scale factors [B, T, H] (not materialised)
  const std::vector<double>& q() const { return q_n.empty() ? *q_in : q_n; }  // l2-normalised if materialised
  const std::vector<double>& k() const { return k_n.empty() ? *k_in : k_n; }
  const std::vector<double>* v;  // [B, T, HV, V]
  std::vector<double> g, beta;  // [B, T, HV] effective log decay and beta
  std::vector<Seq> seqs;
  std::vector<int64_t> chunk_off;  // [Nseq + 1]
  const std::vector<double>* h0;   // may be empty
};

// x with every row of K scaled by l2norm_scale (the same values as normalise_rows on a copy).
std::vector<double> normalised_rows(const std::vector<double>& x, int64_t K, double eps) {
  std::vector<double> r = zeros_prefaulted(x.size());
  const int64_t rows = static_cast<int64_t>(x.size()) / K;
#pragma omp parallel for schedule(static) if (rows * K >= kParallelMin)
  for (int64_t row = 0; row < rows; ++row) {
    const double s = l2norm_scale(x.data() + row * K, K, eps);
    for (int64_t i = 0; i < K; ++i) r[row * K + i] = x[row * K + i] * s;
  }
  return r;
}

// The rows' l2norm_scale factors, and in `finite` whether every value of x is finite, in one pass
// over x (a row whose sum of squares is finite holds only finite values; only the other rows are
// read again). Eight rows side by side, each its own sum in ascending order as in l2norm_scale,
// so that the sums' additions do not wait on one another.
std::vector<double> row_scales(const std::vector<double>& x, int64_t K, double eps, bool& finite) {
  constexpr int64_t kRows = 8;
  const int64_t rows = static_cast<int64_t>(x.size()) / K, groups = (rows + kRows - 1) / kRows;
  std::vector<double> r(rows);
  bool ok = true;
#pragma omp parallel for schedule(static) reduction(&& : ok) if (rows * K >= kParallelMin)
  for (int64_t gi = 0; gi < groups; ++gi) {
    const int64_t r0 = gi * kRows, nr = std::min(kRows, rows - r0);
    const double* p = x.data() + r0 * K;
    double ss[kRows] = {};
    if (nr == kRows) {
      for (int64_t i = 0; i < K; ++i)
#pragma GCC unroll 8
        for (int64_t j = 0; j < kRows; ++j) ss[j] += p[j * K + i] * p[j * K + i];
    } else {
      for (int64_t j = 0; j < nr; ++j)
        for (int64_t i = 0; i < K; ++i) ss[j] += p[j * K + i] * p[j * K + i];
    }
    for (int64_t j = 0; j < nr; ++j) {
      r[r0 + j] = 1.0 / std::sqrt(ss[j] + eps);
      if (!std::isfinite(ss[j]))
        for (int64_t i = 0; i < K; ++i) ok = ok && std::isfinite(p[j * K + i]);
    }
  }
  finite = ok;
  return r;
}

void normalise_rows(std::vector<double>& x, int64_t K, double eps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / K;
  for (int64_t r = 0; r < rows; ++r) {
    double* p = x.data() + r * K;
    const double s = l2norm_scale(p, K, eps);
    for (int64_t i = 0; i < K; ++i) p[i] *= s;
  }
}

// Effective decay and beta for a [rows, HV] block.
void effective_gate_beta(const Options& o, int64_t rows, int64_t HV, const std::vector<double>& g_in,
                         const std::vector<double>& beta_in, const std::vector<double>& A_log,
                         const std::vector<double>& dt_bias, std::vector<double>& g,
                         std::vector<double>& beta) {
  const int64_t n = rows * HV;
  ASSAY_INPUT_CHECK(static_cast<int64_t>(beta_in.size()) == n, "gated_delta: beta has {} values, expected {}",
                    beta_in.size(), n);
  ASSAY_INPUT_CHECK(all_finite(beta_in), "gated_delta: beta is not finite");
  beta.resize(n);
  for (int64_t i = 0; i < n; ++i) beta[i] = beta_value(o.beta, beta_in[i]);
  g.assign(n, 0.0);
  if (o.gate == GateMode::none) {
    ASSAY_INPUT_CHECK(g_in.empty(), "gated_delta: g given with GateMode::none");
    return;
  }
  ASSAY_INPUT_CHECK(static_cast<int64_t>(g_in.size()) == n, "gated_delta: g has {} values, expected {}",
                    g_in.size(), n);
  if (o.gate == GateMode::log) {
    for (int64_t i = 0; i < n; ++i) {
      ASSAY_INPUT_CHECK(!std::isnan(g_in[i]) && g_in[i] != std::numeric_limits<double>::infinity(),
                        "gated_delta: g[{}] = {} (NaN and +inf are not valid log decays)", i, g_in[i]);
      g[i] = g_in[i];
    }
    return;
  }
  ASSAY_INPUT_CHECK(static_cast<int64_t>(A_log.size()) == HV, "gated_delta: A_log has {} values, expected HV = {}",
                    A_log.size(), HV);
  ASSAY_INPUT_CHECK(dt_bias.empty() || static_cast<int64_t>(dt_bias.size()) == HV,
                    "gated_delta: dt_bias has {} values, expected HV = {}", dt_bias.size(), HV);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t hv = i % HV;
    g[i] = gate_in_kernel(g_in[i], A_log[hv], dt_bias.empty() ? 0.0 : dt_bias[hv]);
    ASSAY_INPUT_CHECK(!std::isnan(g[i]) && g[i] != std::numeric_limits<double>::infinity(),
                      "gated_delta: in-kernel gate [{}] = {}", i, g[i]);
  }
}

// materialise_qk = false: with qk_l2norm, only the row scales q_s / k_s are computed and the caller
// applies them where it reads rows (the same products x * scale).
Prep prepare(const Params& p, const Inputs& in, bool materialise_qk = true) {
  ASSAY_INPUT_CHECK(p.B >= 1 && p.T >= 0 && p.H >= 1 && p.HV >= 1 && p.K >= 1 && p.V >= 1,
                    "gated_delta: bad shape B={} T={} H={} HV={} K={} V={}", p.B, p.T, p.H, p.HV, p.K, p.V);
  ASSAY_INPUT_CHECK(p.HV % p.H == 0, "gated_delta: HV = {} is not a multiple of H = {}", p.HV, p.H);
  ASSAY_INPUT_CHECK(p.chunk_size >= 1, "gated_delta: chunk_size = {}", p.chunk_size);
  Prep r;
  r.B = p.B, r.T = p.T, r.H = p.H, r.HV = p.HV, r.K = p.K, r.V = p.V, r.C = p.chunk_size;
  r.scale = p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.K));
  const int64_t BT = p.B * p.T;
  ASSAY_INPUT_CHECK(static_cast<int64_t>(in.q.size()) == BT * p.H * p.K, "gated_delta: q has {} values, expected {}",
                    in.q.size(), BT * p.H * p.K);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(in.k.size()) == BT * p.H * p.K, "gated_delta: k has {} values, expected {}",
                    in.k.size(), BT * p.H * p.K);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(in.v.size()) == BT * p.HV * p.V, "gated_delta: v has {} values, expected {}",
                    in.v.size(), BT * p.HV * p.V);
  if (p.qk_l2norm && !materialise_qk) {  // (the row scales' pass checks q and k)
    bool q_finite = true, k_finite = true;
    r.q_s = row_scales(in.q, p.K, p.l2norm_eps, q_finite);
    r.k_s = row_scales(in.k, p.K, p.l2norm_eps, k_finite);
    ASSAY_INPUT_CHECK(q_finite && k_finite && all_finite(in.v), "gated_delta: q/k/v not finite");
  } else {
    ASSAY_INPUT_CHECK(all_finite(in.q) && all_finite(in.k) && all_finite(in.v), "gated_delta: q/k/v not finite");
    if (p.qk_l2norm) {
      r.q_n = normalised_rows(in.q, p.K, p.l2norm_eps);
      r.k_n = normalised_rows(in.k, p.K, p.l2norm_eps);
    }
  }
  r.q_in = &in.q;
  r.k_in = &in.k;
  r.v = &in.v;
  effective_gate_beta(p, BT, p.HV, in.g, in.beta, in.A_log, in.dt_bias, r.g, r.beta);

  if (p.cu_seqlens.empty()) {
    for (int64_t b = 0; b < p.B; ++b) r.seqs.push_back({b, 0, p.T, b});
  } else {
    ASSAY_INPUT_CHECK(p.B == 1, "gated_delta: cu_seqlens needs B == 1 (got B = {})", p.B);
    const auto& cu = p.cu_seqlens;
    ASSAY_INPUT_CHECK(cu.size() >= 2 && cu.front() == 0 && cu.back() == p.T,
                      "gated_delta: cu_seqlens must start at 0 and end at T = {}", p.T);
    for (size_t n = 0; n + 1 < cu.size(); ++n) {
      ASSAY_INPUT_CHECK(cu[n + 1] >= cu[n], "gated_delta: cu_seqlens decreases at {}", n);
      r.seqs.push_back({0, cu[n], cu[n + 1] - cu[n], static_cast<int64_t>(n)});
    }
  }
  r.Nseq = static_cast<int64_t>(r.seqs.size());
  r.chunk_off.assign(r.Nseq + 1, 0);
  for (int64_t n = 0; n < r.Nseq; ++n)
    r.chunk_off[n + 1] = r.chunk_off[n] + (r.seqs[n].len + r.C - 1) / r.C;
  r.NC = r.chunk_off[r.Nseq];
  r.h0 = &in.initial_state;
  ASSAY_INPUT_CHECK(in.initial_state.empty() ||
                        static_cast<int64_t>(in.initial_state.size()) == r.Nseq * p.HV * p.K * p.V,
                    "gated_delta: initial_state has {} values, expected Nseq*HV*K*V = {}",
                    in.initial_state.size(), r.Nseq * p.HV * p.K * p.V);
  ASSAY_INPUT_CHECK(all_finite(in.initial_state), "gated_delta: initial_state not finite");
  return r;
}

// State slices: internally always [K][V] row-major; stored in the requested layout (gated_delta_state.h).
using detail::load_state;
using detail::store_state;

// One token of the recurrence on S [K][V] (decay first, spec 3.2), the decode step's. Writes o[V]
// and its bound; when s_bound is not null, also the final-state bound of this step, |e^g S| + this
// token's update term |k| |beta| (|v| + |e^g S|^T |k|). recurrent() below does the same arithmetic
// in fused sweeps over column blocks (and keeps a running max of the update terms per chunk).
void step(double* S, int64_t K, int64_t V, double g, double beta, const double* k, const double* v,
          const double* q, double scale, Mutant mutant, double* kv_mem, double* o, double* o_bound,
          double* s_bound) {
  const double alpha = std::exp(g);
  if (mutant == Mutant::missing_alpha) {
    // The bug: the correction reads the state before the decay.
    for (int64_t j = 0; j < V; ++j) kv_mem[j] = 0;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) kv_mem[j] += S[i * V + j] * k[i];
    for (int64_t x = 0; x < K * V; ++x) S[x] = alpha * S[x];
  } else {
    for (int64_t x = 0; x < K * V; ++x) S[x] = alpha * S[x];
    for (int64_t j = 0; j < V; ++j) kv_mem[j] = 0;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) kv_mem[j] += S[i * V + j] * k[i];
  }
  if (s_bound) {
    for (int64_t j = 0; j < V; ++j) {
      double m = 0;
      for (int64_t i = 0; i < K; ++i) m += std::fabs(S[i * V + j]) * std::fabs(k[i]);
      for (int64_t i = 0; i < K; ++i)
        s_bound[i * V + j] = std::fabs(S[i * V + j]) + std::fabs(k[i]) * std::fabs(beta) * (std::fabs(v[j]) + m);
    }
  }
  for (int64_t j = 0; j < V; ++j) kv_mem[j] = beta * (v[j] - kv_mem[j]);  // delta
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S[i * V + j] += k[i] * kv_mem[j];
  if (o) {
    for (int64_t j = 0; j < V; ++j) {
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < K; ++i) {
        acc += S[i * V + j] * q[i];
        mag += std::fabs(S[i * V + j]) * std::fabs(q[i]);
      }
      o[j] = scale * acc;
      o_bound[j] = std::fabs(scale) * mag;
    }
  }
}

// The result with its small fields set and o / chunk_states only reserved, their pages faulted in
// by all threads (reserve_prefaulted): the forms zero-fill them (resize) where it suits them.
Result alloc_result(const Prep& P) {
  Result r;
  r.num_seqs = P.Nseq;
  r.num_chunks = P.NC;
  r.chunk_offsets = P.chunk_off;
  reserve_prefaulted(r.o, P.B * P.T * P.HV * P.V);
  r.final_state.assign(P.Nseq * P.HV * P.K * P.V, 0.0);
  reserve_prefaulted(r.chunk_states, P.NC * P.HV * P.K * P.V);
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Recurrent form.
//
// The arithmetic of step() (every sum over K in ascending row order, the same products and maxima),
// laid out for speed:
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

namespace {

// GCC notes (-Wpsabi) that a 64-byte vector passed by value out of line in the default clone would
// use another ABI than in the AVX-512 one; these helpers are always inlined, so it never happens.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ASSAY_GD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ASSAY_GD_CLONES
#endif
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

// ---------------------------------------------------------------------------------------------
// Chunked WY / UT form.
//
// Derivation (spec 3.3), chunk of L tokens, local index i, start state S0, G_i = sum_{r<=i} g_r,
// D_ij = sum_{r=j+1..i} g_r (so exp(D_ij) = exp(G_i - G_j), computed without subtraction):
//   S_i = e^{G_i} S0 + sum_{j<=i} exp(D_ij) k_j vn_j^T, and the delta step of token i reads the decayed
//   S_{i-1}, so vn_i = beta_i v_i - beta_i e^{G_i} S0^T k_i - sum_{j<i} beta_i exp(D_ij) (k_i.k_j) vn_j,
//   i.e. (I + A) vn = beta V - (beta e^G K) S0  ->  vn = u - w S0.
// The missing-alpha mutant reads the undecayed S_{i-1} = e^{G_{i-1}} S0 + sum_{j<i} exp(D_{i-1,j}) k_j vn_j^T:
//   the same algebra with G_{i-1} (exclusive cumsum) in w and D_{i-1,j} in A; outputs and state update
//   are unchanged. recurrent() implements the same mutant token by token; the tests check that the two
//   agree, which confirms this derivation.
//
// Decomposition (fla's chunk kernels), in two passes over each window of consecutive chunks (the
// windows one after the other, so that the passes' products for pass 2 stay small and in cache);
// each work item writes only its own slice and every reduction has one fixed order, so the result
// depends neither on the thread count nor on the window size. The products are tile_gemm's
// (reference/core/tile_gemm.h), not BLAS: each element one fused multiply-add chain in ascending
// order (from u for v_new, from the decayed h for h_{c+1}, from e^G (Q h) for the output), the
// same bits on every ISA and with or without OpenBLAS; the triangular operands (T, M) skip their
// zero terms, and only the lower triangles of k k^T and q k^T are computed:
//   1. per chunk, parallel over (chunk, hv) (chunk_scaled_dot_kkt, solve_tril, recompute_w_u, and
//      chunk_fwd_o's intra-chunk matrix): A, T = (I + A)^-1, w = T (beta e^G K), u = T (beta V),
//      M = (Q K^T) o exp(G_i - G_j) (diagonal included), the decays;
//   2. state pass and output, parallel over (sequence, hv, block of kVBlock value columns),
//      sequential over the sequence's chunks in the window (chunk_gated_delta_rule_fwd_h, whose
//      grid is also (V blocks, heads), then chunk_fwd_o on the same columns), the block of the
//      state carried from window to window: store h_c, v_new = u - w h_c,
//      o = scale [e^G (Q h_c) + M v_new], h_{c+1} = e^{G_last} h_c + K^T (exp(G_last - G) v_new).
//      Column j of h, v_new and o depends only on column j of h and u, so the column blocks are
//      independent, and the block of h stays in cache for both products.

namespace {

constexpr int64_t kVBlock = 64;  // value columns per state-pass work item (fixed: see above)
using CMapS = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;  // rows of a [.., H, K]-style tensor
using MMapS = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;

// Segment sums D(i, j) = sum_{r=j+1..i} g_r for j <= i, by accumulation (never -inf - -inf), and the
// inclusive / exclusive chunk-local cumsums.
void chunk_decays(const Vec& g, Mat& D, Vec& Gin, Vec& Gex) {
  const int64_t L = g.size();
  D = Mat::Zero(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = i - 1; j >= 0; --j) D(i, j) = D(i, j + 1) + g(j + 1);
  Gin.resize(L);
  Gex.resize(L);
  for (int64_t i = 0; i < L; ++i) {
    Gin(i) = (i ? Gin(i - 1) : 0.0) + g(i);
    Gex(i) = i ? Gin(i - 1) : 0.0;
  }
}

// T = (I + A)^-1 for a strictly lower A (L x L, row-major; T comes in as the identity), by forward
// substitution: row i of (T - I) = (-A)(i, :i) T(:i, :i), i.e. T(i, j) = sgn sum_{m=j..i-1} A(i, m)
// T(m, j), accumulated in ascending m (T(m, j) = 0 for j > m). One clone per ISA: the inner loop
// runs across j, each T(i, j) its own sum, so the vector width does not change the result.
ASSAY_GD_CLONES
void forward_substitution(const double* __restrict A, double* __restrict T, int64_t L, double sgn,
                          double* __restrict acc) {
  for (int64_t i = 1; i < L; ++i) {
    for (int64_t j = 0; j < i; ++j) acc[j] = 0.0;
    for (int64_t m = 0; m < i; ++m) {
      const double aim = A[i * L + m];
      const double* tm = T + m * L;
#pragma omp simd
      for (int64_t j = 0; j <= m; ++j) acc[j] += aim * tm[j];
    }
    for (int64_t j = 0; j < i; ++j) T[i * L + j] = sgn * acc[j];
  }
}

// Calibration roundings (emulate_*: see gated_delta.h); no-ops for goldens.
template <class M>
void rnd(M& m, const std::optional<DType>& t) {
  if (t)
    for (int64_t i = 0; i < m.rows(); ++i)
      for (int64_t j = 0; j < m.cols(); ++j) m(i, j) = round_to(*t, m(i, j));
}

}  // namespace

Result chunked(const Params& p, const Inputs& in) {
  const Prep P = prepare(p, in, false);
  Result r = alloc_result(P);  // (o and chunk_states are zero-filled window by window: see below)
  const int64_t nth = omp_get_max_threads();
  const int64_t K = P.K, V = P.V, KV = K * V, H = P.H, HV = P.HV, G = P.HV / P.H, BT = P.B * P.T, C = P.C;
  const Mutant mu = p.mutant;
  const bool excl = mu == Mutant::missing_alpha;
  const auto& inter = p.emulate_intermediate_dtype;
  // The chunk list: sequence, first token inside the sequence, length, first token's row in [B*T].
  struct Chunk {
    int64_t n, c0, L, tok0;
  };
  std::vector<Chunk> chunks(P.NC);
  for (int64_t n = 0; n < P.Nseq; ++n) {
    const Seq& s = P.seqs[n];
    for (int64_t c0 = 0; c0 < s.len; c0 += C)
      chunks[P.chunk_off[n] + c0 / C] = {n, c0, std::min(C, s.len - c0), s.b * P.T + s.t0 + c0};
  }
  // Windows of nw consecutive chunks (only the speed depends on nw: every chunk is computed the
  // same way in any window). nw gives pass 1 about eight work items per thread (fewer, longer
  // steps: at 16 threads, HV = 8, 16 chunks per window took 47 ms against 52 ms with 8); at one
  // thread it is one chunk, and the scratch of two windows (about 5 MB at K = V = 128, HV = 8)
  // stays in cache from pass 1 to pass 2.
  const int64_t nw = std::clamp<int64_t>((8 * nth + HV - 1) / HV, 1, std::max<int64_t>(P.NC, 1));
  const int64_t nwin = (P.NC + nw - 1) / nw;
  // Pass 1's products for pass 2, for two windows (window w in slots [(w % 2) nw, (w % 2 + 1) nw):
  // pass 1 on window w runs next to pass 2 on window w - 1), in scratch kept between calls
  // (ReusedScratch: pass 1 writes every row before pass 2 reads it); lc is the slot of a chunk:
  //   Kw, Qw [2 nw, H, C, K]: the k and q rows as the passes read them (l2-normalised when asked);
  //   U, W [2 nw, HV, C, V / K]: u and w rows;  Mq [2 nw, HV, C, C]: the masked, gated q k^T;
  //   eG, dlast [2 nw, HV, C]: exp(G_i) and exp(G_last - G_i);  eglast [2 nw, HV]: exp(G_last).
  // S [Nseq, HV, nvb, K, kVBlock]: the running state of each column block, from window to window.
  const int64_t nvb = (V + kVBlock - 1) / kVBlock, ns = 2 * nw;
  const int64_t per_chunk = 2 * H * C * K + HV * (C * (V + K + C + 2) + 1);
  thread_local ReusedScratch ws;
  double* const wbase = ws.get(static_cast<size_t>(ns * per_chunk));
  double* const Kw = wbase;
  double* const Qw = Kw + ns * H * C * K;
  double* const U = Qw + ns * H * C * K;
  double* const W = U + ns * HV * C * V;
  double* const Mq = W + ns * HV * C * K;
  double* const eG = Mq + ns * HV * C * C;
  double* const dlast = eG + ns * HV * C;
  double* const eglast = dlast + ns * HV * C;
  double* const o_all = r.o.data();  // (reserved: the fills never reallocate)
  double* const cs_all = r.chunk_states.data();
  const Scratch S_all = scratch(std::max<int64_t>(P.Nseq * HV * KV, 1));
  // Rows [tok0, tok0 + L) of q or k (head h), l2-normalised when asked, into m (L x K).
  auto qk_rows = [&](int64_t tok0, int64_t L, int64_t h, bool is_q, Eigen::Map<Mat> m) {
    const CMapS x(&(is_q ? P.q() : P.k())[(tok0 * P.H + h) * K], L, K, Eigen::OuterStride<>(P.H * K));
    const std::vector<double>& sc = is_q ? P.q_s : P.k_s;
    if (sc.empty())
      m = x;
    else
      for (int64_t i = 0; i < L; ++i) m.row(i) = x.row(i) * sc[(tok0 + i) * P.H + h];
  };
  auto gates = [&](const Chunk& ch, int64_t hv, Vec& g, Vec* b) {
    g.resize(ch.L);
    if (b) b->resize(ch.L);
    for (int64_t i = 0; i < ch.L; ++i) {
      g(i) = P.g[(ch.tok0 + i) * HV + hv];
      if (b) (*b)(i) = P.beta[(ch.tok0 + i) * HV + hv];
    }
  };

  // 1. Per chunk of the window, (chunk, hv): A, T, w, u; the intra-chunk output matrix M and the decays.
  auto pass1 = [&](int64_t ci, int64_t lc, int64_t hv) {
    const Chunk& ch = chunks[ci];
    const int64_t h = hv / G, L = ch.L, slot = lc * HV + hv;
    // One value head per q/k head writes the window's k and q rows; the others make their own copies.
    Mat Kown, Qown;
    double *kp = &Kw[(lc * H + h) * C * K], *qp = &Qw[(lc * H + h) * C * K];
    if (hv % G != 0) {
      Kown.resize(L, K), Qown.resize(L, K);
      kp = Kown.data(), qp = Qown.data();
    }
    const Eigen::Map<Mat> Kc(kp, L, K), Qc(qp, L, K);
    qk_rows(ch.tok0, L, h, false, Kc);
    qk_rows(ch.tok0, L, h, true, Qc);
    const CMapS Vc(&(*P.v)[(ch.tok0 * HV + hv) * V], L, V, Eigen::OuterStride<>(HV * V));
    Vec g, b, Gin, Gex;
    gates(ch, hv, g, &b);
    Mat D;
    chunk_decays(g, D, Gin, Gex);
    // E = exp(D) on and below the diagonal, read by A (except the missing_alpha mutant's, which
    // decays by D(i - 1, j)), by M and by the state update.
    Mat E(L, L);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) E(i, j) = std::exp(D(i, j));
    // k^T (K x L), the right operand of both k k^T and q k^T.
    Mat Kt = Kc.transpose();
    // KKt (only j < i is read); with emulation, chunk_scaled_dot_kkt's operand beta k cast to
    // k.dtype (beta then inside).
    Mat KKt(L, L), Kb;
    if (inter) {
      Kb = Kc;
      for (int64_t i = 0; i < L; ++i) Kb.row(i) *= b(i);
      rnd(Kb, inter);
    }
    tile_gemm(L, L, K, inter ? Kb.data() : Kc.data(), K, 1, Kt.data(), L, KKt.data(), L, {.c_lower = true});
    // A, strictly lower.
    Mat A = Mat::Zero(L, L);
    for (int64_t i = 1; i < L; ++i)
      for (int64_t j = 0; j < i; ++j) {
        const double decay = mu == Mutant::kkt_without_decay ? 1.0 : excl ? std::exp(D(i - 1, j)) : E(i, j);
        A(i, j) = (inter ? 1.0 : b(i)) * KKt(i, j) * decay;
      }
    // T = (I + A)^-1.
    Mat Tm = Mat::Identity(L, L);
    std::vector<double> acc(L);
    forward_substitution(A.data(), Tm.data(), L, mu == Mutant::i_minus_a ? 1.0 : -1.0, acc.data());
    rnd(Tm, inter);  // solve_tril's output stored in k.dtype
    Mat bV(L, V), bK(L, K);
    for (int64_t i = 0; i < L; ++i) {
      const double eg = std::exp(excl ? Gex(i) : Gin(i));
      bV.row(i) = Vc.row(i) * (mu == Mutant::u_with_decay ? b(i) * eg : b(i));
      bK.row(i) = Kc.row(i) * (mu == Mutant::w_without_decay ? b(i) : b(i) * eg);
    }
    rnd(bV, inter);  // recompute_w_u casts beta v and beta e^G k to v/k.dtype before the dots with T
    rnd(bK, inter);
    Eigen::Map<Mat> u(&U[slot * C * V], L, V), w(&W[slot * C * K], L, K);
    // (straight into the window's rows; T is lower triangular)
    tile_gemm(L, V, L, Tm.data(), L, 1, bV.data(), V, u.data(), V, {.a_lower = true});
    tile_gemm(L, K, L, Tm.data(), L, 1, bK.data(), K, w.data(), K, {.a_lower = true});
    rnd(u, inter);
    rnd(w, inter);
    for (int64_t j = 0; j < L; ++j) {
      dlast[slot * C + j] = E(L - 1, j);
      eG[slot * C + j] = std::exp(Gin(j));
    }
    eglast[slot] = std::exp(Gin(L - 1));
    // The intra-chunk output matrix: q k^T with the decay mask, diagonal included.
    Eigen::Map<Mat> M(&Mq[slot * C * C], L, L);
    tile_gemm(L, L, K, Qc.data(), K, 1, Kt.data(), L, M.data(), L, {.c_lower = true});  // (j > i: zeroed below)
    for (int64_t i = 0; i < L; ++i) {
      const int64_t jmax = mu == Mutant::strict_output_mask ? i - 1 : i;
      for (int64_t j = 0; j <= jmax; ++j) M(i, j) *= E(i, j);
      for (int64_t j = std::max<int64_t>(jmax + 1, 0); j < L; ++j) M(i, j) = 0.0;
    }
    rnd(M, inter);  // chunk_fwd_o casts the masked, gated q k^T to v.dtype before its dot with v_new
  };

  // 2. State pass and output of (sequence n, hv, column block vb) over the window's chunks
  // [cb, ce) of that sequence, in order; the window's first chunk wc0 is in slot lc0.
  const bool kv = p.state_layout == StateLayout::kv;
  auto at = [&](double* base, int64_t i, int64_t j) -> double& { return kv ? base[i * V + j] : base[j * K + i]; };
  auto pass2 = [&](int64_t n, int64_t hv, int64_t vb, int64_t cb, int64_t ce, int64_t wc0, int64_t lc0) {
    if (cb >= ce) return;  // (an empty sequence inside the window: see below)
    const int64_t h = hv / G, j0 = vb * kVBlock, nb = std::min(kVBlock, V - j0);
    Eigen::Map<Mat> S(&S_all[(n * HV + hv) * KV + j0 * K], K, nb);  // columns [j0, j0 + nb), [K][V] orientation
    if (cb == P.chunk_off[n]) {  // the sequence's first chunk: the initial state
      S.setZero();
      if (!P.h0->empty()) {
        const double* h0 = P.h0->data() + (n * HV + hv) * KV;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < nb; ++j) S(i, j) = kv ? h0[i * V + j0 + j] : h0[(j0 + j) * K + i];
      }
    }
    Mat Sr;
    for (int64_t ci = cb; ci < ce; ++ci) {
      const Chunk& ch = chunks[ci];
      const int64_t L = ch.L, lc = lc0 + ci - wc0, slot = lc * HV + hv;
      // The chunk-start state as stored (h), read by v_new and by the output (a rounded copy only
      // when emulating h's dtype).
      if (p.emulate_h_dtype) {
        Sr = S;
        rnd(Sr, p.emulate_h_dtype);
      }
      const Eigen::Map<const Mat> Sh(p.emulate_h_dtype ? Sr.data() : S.data(), K, nb);
      double* cs = cs_all + (ci * HV + hv) * KV;
      if (kv)
        MMapS(cs + j0, K, nb, Eigen::OuterStride<>(V)) = Sh;
      else
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < nb; ++j) cs[(j0 + j) * K + i] = Sh(i, j);
      const Eigen::Map<const Mat> Wc(&W[slot * C * K], L, K), M(&Mq[slot * C * C], L, L);
      const Eigen::Map<const Mat> Kc(&Kw[(lc * H + h) * C * K], L, K), Qc(&Qw[(lc * H + h) * C * K], L, K);
      // v_new = u - w h, in place of this block's columns of u (fp32 in the kernel; the state
      // update reads this one): each element one chain from u.
      MMapS vnew_acc(&U[slot * C * V + j0], L, nb, Eigen::OuterStride<>(V));
      tile_gemm(L, nb, K, Wc.data(), K, 1, Sh.data(), nb, vnew_acc.data(), V, {.accumulate = true, .negate = true});
      // Output (chunk_fwd_o): o = scale [e^G (Q h) + M v_new], v_new as stored: the chain of M v_new
      // starts from the scaled e^G (Q h) (M is lower triangular).
      Mat QS(L, nb);
      tile_gemm(L, nb, K, Qc.data(), K, 1, Sh.data(), nb, QS.data(), nb);
      for (int64_t i = 0; i < L; ++i) QS.row(i) *= eG[slot * C + i];
      MMapS o(&o_all[(ch.tok0 * HV + hv) * V + j0], L, nb, Eigen::OuterStride<>(HV * V));
      Mat vr;  // (v_new rounded, when emulating)
      if (inter) {
        vr = vnew_acc;
        rnd(vr, inter);
      }
      tile_gemm(L, nb, L, M.data(), L, 1, inter ? vr.data() : vnew_acc.data(), inter ? nb : V, QS.data(), nb,
                {.accumulate = true, .a_lower = true});
      o = P.scale * QS;
      // State update: S <- e^{G_last} S0 + K^T (exp(D(L-1, j)) vn_j), both in place (each element
      // of S one chain from its decayed value).
      MMapS& dV = vnew_acc;
      for (int64_t j = 0; j < L; ++j) dV.row(j) *= dlast[slot * C + j];
      rnd(dV, inter);
      const bool no_decay = p.mutant == Mutant::carry_without_decay &&
                            (p.mutant_chunk < 0 || ci + 1 - P.chunk_off[n] == p.mutant_chunk);
      S *= no_decay ? 1.0 : eglast[slot];
      tile_gemm(K, nb, L, Kc.data(), 1, K, dV.data(), V, S.data(), nb, {.accumulate = true});
    }
    if (ce == P.chunk_off[n + 1]) {  // the sequence's last chunk: the final state
      double* fs = r.final_state.data() + (n * HV + hv) * KV;
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < nb; ++j) at(fs, i, j0 + j) = S(i, j);
    }
  };

  // Step w (w = 0 .. nwin): pass 2 on window w - 1, the zero fills of o and chunk_states up to the
  // end of window w (std::vector's serial fill, in pieces: one thread per vector) and pass 1 on
  // window w, as one list of work items (the longest first; on one thread, pass 2 on a window
  // then follows pass 1 on it).
  const size_t no = BT * HV * V, ncs = P.NC * HV * KV;
  auto window = [&](int64_t w, int64_t& c0, int64_t& c1) { c0 = w * nw, c1 = std::min(P.NC, c0 + nw); };
#pragma omp parallel
  for (int64_t w = 0; w <= nwin; ++w) {
    int64_t c0, c1, p0 = 0, p1 = 0, n0 = 0;
    window(w, c0, c1);
    const int64_t nfill = w < nwin ? 2 : 0, n1 = w < nwin ? (c1 - c0) * HV : 0;
    int64_t n2 = 0;
    if (w > 0) {
      window(w - 1, p0, p1);
      n0 = chunks[p0].n;
      n2 = (chunks[p1 - 1].n + 1 - n0) * HV * nvb;
    }
#pragma omp for schedule(dynamic)
    for (int64_t job = 0; job < n2 + nfill + n1; ++job) {
      if (job < n2) {
        const int64_t n = n0 + job / (HV * nvb);
        pass2(n, job / nvb % HV, job % nvb, std::max(p0, P.chunk_off[n]), std::min(p1, P.chunk_off[n + 1]), p0,
              (w - 1) % 2 * nw);
      } else if (job == n2) {
        r.o.resize((chunks[c1 - 1].tok0 + chunks[c1 - 1].L) * HV * V);
      } else if (job == n2 + 1) {
        r.chunk_states.resize(c1 * HV * KV);
      } else {
        const int64_t j = job - n2 - nfill;
        pass1(c0 + j / HV, w % 2 * nw + j / HV, j % HV);
      }
    }
  }
  r.o.resize(no);  // (no-ops unless there are no chunks)
  r.chunk_states.resize(ncs);
  // Empty sequences (no chunk): the final state is the initial state.
  for (int64_t n = 0; n < P.Nseq; ++n)
    if (P.chunk_off[n] == P.chunk_off[n + 1]) {
      if (!P.h0->empty())
        std::copy_n(P.h0->data() + n * HV * KV, HV * KV, r.final_state.data() + n * HV * KV);
    }
  return r;
}

// ---------------------------------------------------------------------------------------------

OracleResult run(const Params& p, const Inputs& in, DType o_dtype, DType chunk_state_dtype) {
  ASSAY_INPUT_CHECK(!p.emulate_h_dtype && !p.emulate_intermediate_dtype,
                    "gated_delta: emulate_* are calibration knobs, not for goldens");
  const Result a = recurrent(p, in);
  const Result b = chunked(p, in);
  const bool varlen = !p.cu_seqlens.empty();
  const std::string nax = varlen ? "Nseq" : "B";
  const std::string k_ax = p.state_layout == StateLayout::kv ? "K" : "V";
  const std::string v_ax = p.state_layout == StateLayout::kv ? "V" : "K";
  const int64_t s2 = p.state_layout == StateLayout::kv ? p.K : p.V;
  const int64_t s3 = p.state_layout == StateLayout::kv ? p.V : p.K;
  OracleResult res;
  Output o;
  o.expected = Tensor{"o", {"B", "T", "HV", "V"}, {p.B, p.T, p.HV, p.V}, o_dtype, a.o};
  o.bound = a.o_bound;
  res.outputs.push_back(std::move(o));
  Output fs;
  fs.expected = Tensor{"final_state", {nax, "HV", k_ax, v_ax}, {a.num_seqs, p.HV, s2, s3}, DType::f32, a.final_state};
  fs.bound = a.final_state_bound;
  res.outputs.push_back(std::move(fs));
  res.intermediates.push_back(
      Tensor{"chunk_states", {"NC", "HV", k_ax, v_ax}, {a.num_chunks, p.HV, s2, s3}, chunk_state_dtype, a.chunk_states});
  res.intermediate_bounds["chunk_states"] = a.chunk_states_bound;
  res.agreement.push_back({"o", "recurrent", "chunked", agreement_rel(b.o, a.o)});
  res.agreement.push_back({"final_state", "recurrent", "chunked", agreement_rel(b.final_state, a.final_state)});
  res.agreement.push_back({"chunk_states", "recurrent", "chunked", agreement_rel(b.chunk_states, a.chunk_states)});
  return res;
}

// ---------------------------------------------------------------------------------------------
// Decode step.

DecodeResult decode_step(const DecodeParams& p, const DecodeInputs& in) {
  ASSAY_INPUT_CHECK(p.N >= 0 && p.H >= 1 && p.HV >= 1 && p.K >= 1 && p.V >= 1 && p.HV % p.H == 0,
                    "gated_delta decode: bad shape N={} H={} HV={} K={} V={}", p.N, p.H, p.HV, p.K, p.V);
  ASSAY_INPUT_CHECK(p.mutant == Mutant::none || p.mutant == Mutant::missing_alpha,
                    "gated_delta decode: mutant {} is a chunked-form mutant", name(p.mutant));
  const int64_t N = p.N, H = p.H, HV = p.HV, K = p.K, V = p.V, KV = K * V, G = HV / H;
  ASSAY_INPUT_CHECK(static_cast<int64_t>(in.q.size()) == N * H * K && static_cast<int64_t>(in.k.size()) == N * H * K,
                    "gated_delta decode: q/k must have N*H*K = {} values", N * H * K);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(in.v.size()) == N * HV * V, "gated_delta decode: v must have N*HV*V = {} values",
                    N * HV * V);
  ASSAY_INPUT_CHECK(all_finite(in.q) && all_finite(in.k) && all_finite(in.v), "gated_delta decode: q/k/v not finite");
  ASSAY_INPUT_CHECK(in.state.size() % (HV * KV) == 0, "gated_delta decode: state size {} not a multiple of HV*K*V",
                    in.state.size());
  ASSAY_INPUT_CHECK(all_finite(in.state), "gated_delta decode: state not finite");
  const int64_t P = static_cast<int64_t>(in.state.size()) / (HV * KV);
  std::vector<int64_t> idx = in.state_indices;
  if (idx.empty()) {
    ASSAY_INPUT_CHECK(P == N, "gated_delta decode: without state_indices the pool must hold N = {} states (has {})", N, P);
    for (int64_t n = 0; n < N; ++n) idx.push_back(n);
  }
  ASSAY_INPUT_CHECK(static_cast<int64_t>(idx.size()) == N, "gated_delta decode: state_indices has {} entries, N = {}",
                    idx.size(), N);
  std::vector<char> used(P, 0);
  for (int64_t n = 0; n < N; ++n) {
    if (idx[n] < 0) continue;
    ASSAY_INPUT_CHECK(idx[n] < P && !used[idx[n]], "gated_delta decode: state_indices[{}] = {} out of range or repeated",
                      n, idx[n]);
    used[idx[n]] = 1;
  }
  std::vector<double> q = in.q, k = in.k, g, beta;
  if (p.qk_l2norm) {
    normalise_rows(q, K, p.l2norm_eps);
    normalise_rows(k, K, p.l2norm_eps);
  }
  effective_gate_beta(p, N, HV, in.g, in.beta, in.A_log, in.dt_bias, g, beta);
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(K));

  DecodeResult r;
  r.o.assign(N * HV * V, 0.0);
  r.o_bound.assign(N * HV * V, 0.0);
  r.state = in.state;
  r.state_bound.resize(r.state.size());
  for (size_t x = 0; x < r.state.size(); ++x) r.state_bound[x] = std::fabs(r.state[x]);
#pragma omp parallel for schedule(dynamic)
  for (int64_t job = 0; job < N * HV; ++job) {
    const int64_t n = job / HV, hv = job % HV, h = hv / G;
    if (idx[n] < 0) continue;
    std::vector<double> S(KV), tmp(V), sb(KV);
    double* slot = r.state.data() + (idx[n] * HV + hv) * KV;
    load_state(slot, p.state_layout, K, V, S.data());
    const int64_t qk_off = (n * H + h) * K, tv = n * HV + hv;
    step(S.data(), K, V, g[tv], beta[tv], k.data() + qk_off, in.v.data() + tv * V, q.data() + qk_off, scale, p.mutant,
         tmp.data(), r.o.data() + tv * V, r.o_bound.data() + tv * V, sb.data());
    store_state(S.data(), p.state_layout, K, V, slot);
    store_state(sb.data(), p.state_layout, K, V, r.state_bound.data() + (idx[n] * HV + hv) * KV);
  }
  return r;
}

}  // namespace assay::gated_delta
