// Second fp64 forms of the optimizer steps (see optim.h, "Second fp64 forms"). Same math as the
// *_f64 textbook forms, different operation order / algorithm, for the fp64 cross-check.
#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "reference/core/check.h"
#include "reference/optim/optim.h"

namespace assay::optim {

namespace {
// Pairwise (cascade) sum of squares: a different reduction order from the sequential loops.
double pairwise_sq(const double* x, size_t n) {
  if (n <= 8) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
  }
  const size_t h = n / 2;
  return pairwise_sq(x, h) + pairwise_sq(x + h, n - h);
}
double pairwise_sq(const std::vector<double>& x) { return pairwise_sq(x.data(), x.size()); }
}  // namespace

void adam_step_f64_alt(const AdamHyper& h, const std::vector<double>& g, AdamState64& s) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(s.p.size() == n && s.m.size() == n && s.v.size() == n, "adam_alt: sizes");
  if (h.amsgrad) ASSAY_INPUT_CHECK(s.vmax.size() == n, "adam_alt: vmax size");
  if (h.found_inf) return;
  const int64_t t = s.step + 1;
  double bc1 = 1, bc2 = 1;
  if (h.bias_correction) {
    // beta^t by repeated squaring (exp-by-squaring), not pow.
    auto ipow = [](double b, int64_t e) {
      double r = 1;
      while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
      }
      return r;
    };
    bc1 = 1 - ipow(h.beta1, t);
    bc2 = 1 - ipow(h.beta2, t);
  }
  const double inv_scale = h.grad_scale ? 1.0 / static_cast<double>(*h.grad_scale) : 1.0;
  for (size_t i = 0; i < n; ++i) {
    double gi = g[i] * inv_scale;
    if (h.maximize) gi = -gi;
    const double p = s.p[i];
    if (!h.decoupled) gi = gi + h.weight_decay * p;
    const double m = s.m[i] + (1 - h.beta1) * (gi - s.m[i]);
    const double v = s.v[i] + (1 - h.beta2) * (gi * gi - s.v[i]);
    double vv = v;
    if (h.amsgrad) {
      s.vmax[i] = s.vmax[i] > v ? s.vmax[i] : v;
      vv = s.vmax[i];
    }
    double u = (m / bc1) / (std::sqrt(vv / bc2) + h.eps);
    if (h.decoupled) u += h.weight_decay * p;
    s.p[i] = p - h.lr * u;
    s.m[i] = m;
    s.v[i] = v;
  }
  s.step = t;
}

void sgd_step_f64_alt(const SgdHyper& h, const std::vector<double>& g, SgdState64& s) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(s.p.size() == n, "sgd_alt: p size");
  ASSAY_INPUT_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0),
                    "sgd: nesterov requires momentum > 0 and dampening 0");
  const bool first = s.buf.empty();
  if (h.momentum != 0 && first) s.buf.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double sign = h.maximize ? -1.0 : 1.0;
    const double d = sign * g[i] + h.weight_decay * s.p[i];
    if (h.momentum == 0) {
      s.p[i] -= h.lr * d;
      continue;
    }
    // buf_t = mu buf + (1 - tau) d, written in the other order
    const double prev = first ? 0.0 : s.buf[i];
    const double b = first ? d : (1 - h.dampening) * d + h.momentum * prev;
    s.buf[i] = b;
    if (h.nesterov)
      s.p[i] = (s.p[i] - h.lr * d) - (h.lr * h.momentum) * b;
    else if (first)
      s.p[i] = s.p[i] - h.lr * d;
    else  // p - lr ((1 - tau) d + mu buf) split into its two terms
      s.p[i] = (s.p[i] - (h.lr * (1 - h.dampening)) * d) - (h.lr * h.momentum) * prev;
  }
  s.step += 1;
}

void lion_step_f64_alt(const LionHyper& h, const std::vector<double>& g, std::vector<double>& p,
                       std::vector<double>& m) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(p.size() == n && m.size() == n, "lion_alt: sizes");
  for (size_t i = 0; i < n; ++i) {
    const double c = m[i] + (1 - h.beta1) * (g[i] - m[i]);
    const double sg = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
    p[i] = p[i] - h.lr * (h.weight_decay * p[i] + sg);
    m[i] = m[i] + (1 - h.beta2) * (g[i] - m[i]);
  }
}

LambInfo lamb_step_f64_alt(const LambHyper& h, const std::vector<std::vector<double>>& g,
                           LambState64& s) {
  const size_t T = g.size();
  ASSAY_INPUT_CHECK(s.p.size() == T && s.m.size() == T && s.v.size() == T, "lamb_alt: sizes");
  const int64_t t = s.step + 1;
  const double bc1 = h.bias_correction ? 1 - std::pow(h.beta1, static_cast<double>(t)) : 1.0;
  const double bc2 = h.bias_correction ? 1 - std::pow(h.beta2, static_cast<double>(t)) : 1.0;
  LambInfo info;
  double gsq = 0;
  for (const auto& x : g) gsq += pairwise_sq(x);
  info.global_grad_norm = std::sqrt(gsq);
  const double inv_clip =
      info.global_grad_norm > h.max_grad_norm ? h.max_grad_norm / info.global_grad_norm : 1.0;
  for (size_t k = 0; k < T; ++k) {
    const size_t n = g[k].size();
    const double pn = std::sqrt(pairwise_sq(s.p[k]));
    std::vector<double> u(n);
    for (size_t i = 0; i < n; ++i) {
      double sg = g[k][i] * inv_clip;
      if (!h.adam_w_mode) sg += h.weight_decay * s.p[k][i];
      const double m = h.grad_averaging ? s.m[k][i] + (1 - h.beta1) * (sg - s.m[k][i])
                                        : h.beta1 * s.m[k][i] + sg;
      const double v = s.v[k][i] + (1 - h.beta2) * (sg * sg - s.v[k][i]);
      s.m[k][i] = m;
      s.v[k][i] = v;
      u[i] = (m / bc1) / (std::sqrt(v / bc2) + h.eps) + (h.adam_w_mode ? h.weight_decay * s.p[k][i] : 0.0);
    }
    const double un = std::sqrt(pairwise_sq(u));
    const bool trust = (h.use_nvlamb || h.weight_decay != 0) && un != 0 && pn != 0;
    const double ratio = trust ? h.lr * pn / un : h.lr;
    for (size_t i = 0; i < n; ++i)
      s.p[k][i] = trust ? s.p[k][i] - (h.lr * pn) * (u[i] / un) : s.p[k][i] - h.lr * u[i];
    info.param_norm.push_back(pn);
    info.update_norm.push_back(un);
    info.ratio.push_back(ratio);
  }
  s.step = t;
  return info;
}

void adafactor_step_f64_alt(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                            const std::vector<double>& graw, AdafactorState64& s) {
  const size_t n = static_cast<size_t>(M * N);
  ASSAY_INPUT_CHECK(graw.size() == n && s.p.size() == n, "adafactor_alt: sizes");
  const double eps1 = h.eps1 ? *h.eps1 : std::ldexp(1.0, -23);
  std::vector<double> g(graw);
  if (h.maximize)
    for (auto& e : g) e = -e;
  s.step += 1;
  const double t = static_cast<double>(s.step);
  const double w = std::exp(h.beta2_decay * std::log(t));  // t^beta2_decay
  const double rho = std::min(h.lr, std::exp(-0.5 * std::log(t)));
  const double alpha =
      std::max(h.eps2, std::sqrt(pairwise_sq(s.p) / static_cast<double>(n))) * rho;
  if (h.weight_decay != 0)
    for (auto& e : s.p) e -= (h.lr * h.weight_decay) * e;
  std::vector<double> var(n);
  if (factored) {
    if (s.row_var.empty()) s.row_var.assign(M, 0.0);
    if (s.col_var.empty()) s.col_var.assign(N, 0.0);
    std::vector<double> col(M);
    for (int64_t r = 0; r < M; ++r) {
      const double rm = pairwise_sq(&g[r * N], N) / static_cast<double>(N);
      s.row_var[r] = (1 - w) * s.row_var[r] + w * rm;
    }
    for (int64_t c = 0; c < N; ++c) {
      for (int64_t r = 0; r < M; ++r) col[r] = g[r * N + c];
      const double cm = pairwise_sq(col) / static_cast<double>(M);
      s.col_var[c] = (1 - w) * s.col_var[c] + w * cm;
    }
    double rsum = 0;
    for (int64_t r = M - 1; r >= 0; --r) rsum += s.row_var[r];
    const double rmean = std::max(rsum / static_cast<double>(M), eps1);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) var[r * N + c] = s.row_var[r] * (s.col_var[c] / rmean);
  } else {
    if (s.variance.empty()) s.variance.assign(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      s.variance[i] = (1 - w) * s.variance[i] + w * g[i] * g[i];
      var[i] = s.variance[i];
    }
  }
  std::vector<double> U(n);
  for (size_t i = 0; i < n; ++i) U[i] = g[i] / std::sqrt(std::max(var[i], eps1 * eps1));
  const double rms = std::sqrt(pairwise_sq(U) / static_cast<double>(n)) / h.d;
  const double denom = rms > 1 ? rms : 1.0;
  for (size_t i = 0; i < n; ++i) s.p[i] -= (alpha / denom) * U[i];
}

std::vector<double> newton_schulz_f64_eigen(const std::vector<double>& G, int64_t M, int64_t N,
                                            int steps, NsCoeffs set, double eps) {
  ASSAY_INPUT_CHECK(static_cast<int64_t>(G.size()) == M * N, "newton_schulz_eigen: G size");
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Mat X = Eigen::Map<const Mat>(G.data(), M, N);
  X /= (X.norm() + eps);
  for (int i = 0; i < steps; ++i) {
    double a, b, c;
    ns_coeffs(set, i, a, b, c);
    if (M <= N) {  // the smaller Gram matrix is X X^T: X <- (a I + b A + c A^2) X
      const Mat A = X * X.transpose();
      const Mat P = b * A + c * (A * A);
      X = a * X + P * X;
    } else {  // tall: X <- X (a I + b S + c S^2), S = X^T X (same polynomial, no transpose)
      const Mat S = X.transpose() * X;
      const Mat P = b * S + c * (S * S);
      X = a * X + X * P;
    }
  }
  std::vector<double> out(static_cast<size_t>(M * N));
  Eigen::Map<Mat>(out.data(), M, N) = X;
  return out;
}

}  // namespace assay::optim
