// Gated delta rule oracles (see gated_delta.h for the contract, shapes and conventions): the
// elementwise preprocessing and the input preparation both forms share (gated_delta_internal.h),
// and the single-token decode step. The forms themselves are in gated_delta_recurrent.cpp and
// gated_delta_chunked.cpp, their golden assembly (run()) in gated_delta_golden.cpp.
#include "reference/gated_delta/gated_delta.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "reference/core/check.h"
#include "reference/core/prefault.h"
#include "reference/gated_delta/gated_delta_internal.h"
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

namespace detail {

bool all_finite(const std::vector<double>& x) {
  const auto n = static_cast<int64_t>(x.size());
  bool ok = true;
#pragma omp parallel for simd schedule(static) reduction(&& : ok) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) ok = ok & std::isfinite(x[i]);  // (no short cut: vectorises)
  return ok;
}

}  // namespace detail

namespace {

using detail::all_finite;
using detail::kParallelMin;

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

// State slices: internally always [K][V] row-major; stored in the requested layout (gated_delta_state.h).
using detail::load_state;
using detail::store_state;

// One token of the recurrence on S [K][V] (decay first, spec 3.2), the decode step's. Writes o[V]
// and its bound; when s_bound is not null, also the final-state bound of this step, |e^g S| + this
// token's update term |k| |beta| (|v| + |e^g S|^T |k|). recurrent() (gated_delta_recurrent.cpp)
// does the same arithmetic in fused sweeps over column blocks (and keeps a running max of the
// update terms per chunk).
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

}  // namespace

namespace detail {

Prep prepare(const Params& p, const Inputs& in, bool materialise_qk) {
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

}  // namespace detail

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
