// SGD, Lion, LAMB (apex), Adafactor (PyTorch >= 2.5). See optim.h.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "reference/core/check.h"
#include "reference/optim/optim.h"

namespace assay::optim {

// --------------------------------------------------------------------------------------------
// SGD: torch 2.11 _single_tensor_sgd. maximize negates g first; g = g.add(p, alpha=wd);
// first step buf = g.clone(); later buf.mul_(mu).add_(g, alpha=1-tau); nesterov g = g.add(buf,
// alpha=mu) else g = buf; p.add_(g, alpha=-lr). add(x, alpha=a) -> fma(f32(a), x, self).
// (maximize: torch 2.11 negates the grad; the spec's "p <- p + lr g" is the same update.)
// --------------------------------------------------------------------------------------------
void sgd_step_f32(const SgdHyper& h, const std::vector<float>& g, SgdState32& s) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(s.p.size() == n, "sgd: p size");
  ASSAY_INPUT_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0),
                    "sgd: nesterov requires momentum > 0 and dampening 0");
  const bool first = s.buf.empty();
  if (h.momentum != 0 && first) s.buf.resize(n);
  const float wd = f32(h.weight_decay), mu = f32(h.momentum), omt = f32(1.0 - h.dampening),
              nlr = f32(-h.lr);
  for (size_t i = 0; i < n; ++i) {
    float gi = h.maximize ? -g[i] : g[i];
    if (h.weight_decay != 0) gi = std::fma(wd, s.p[i], gi);
    if (h.momentum != 0) {
      float b;
      if (first) {
        b = gi;
      } else {
        b = s.buf[i] * mu;
        b = std::fma(omt, gi, b);
      }
      s.buf[i] = b;
      gi = h.nesterov ? std::fma(mu, b, gi) : b;
    }
    s.p[i] = std::fma(nlr, gi, s.p[i]);
  }
  s.step += 1;
}

void sgd_step_f64(const SgdHyper& h, const std::vector<double>& g, SgdState64& s) {
  // Follows the implementation's maximize (negate the raw grad first). The docs' algorithm box
  // ("theta + gamma g" at the end, after the decay term was added) would make weight decay grow
  // the weights under maximize; the source wins (spec header).
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(s.p.size() == n, "sgd: p size");
  ASSAY_INPUT_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0),
                    "sgd: nesterov requires momentum > 0 and dampening 0");
  const bool first = s.buf.empty();
  if (h.momentum != 0 && first) s.buf.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double gi = (h.maximize ? -g[i] : g[i]) + h.weight_decay * s.p[i];
    if (h.momentum != 0) {
      s.buf[i] = first ? gi : h.momentum * s.buf[i] + (1.0 - h.dampening) * gi;
      gi = h.nesterov ? gi + h.momentum * s.buf[i] : s.buf[i];
    }
    s.p[i] = s.p[i] - h.lr * gi;
  }
  s.step += 1;
}

// --------------------------------------------------------------------------------------------
// Lion (lucidrains update_fn): p.mul_(1 - lr wd); update = m.clone().mul_(b1).add(g, alpha=1-b1)
// .sign_(); p.add_(update, alpha=-lr); m.mul_(b2).add_(g, alpha=1-b2).
// --------------------------------------------------------------------------------------------
namespace {
float signf(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : (std::isnan(x) ? x : 0.0f)); }
double signd(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : (std::isnan(x) ? x : 0.0)); }
}  // namespace

void lion_step_f32(const LionHyper& h, const std::vector<float>& g, std::vector<float>& p,
                   std::vector<float>& m) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(p.size() == n && m.size() == n, "lion: size mismatch");
  const float dm = f32(1.0 - h.lr * h.weight_decay), b1 = f32(h.beta1), omb1 = f32(1.0 - h.beta1),
              b2 = f32(h.beta2), omb2 = f32(1.0 - h.beta2), nlr = f32(-h.lr);
  for (size_t i = 0; i < n; ++i) {
    float pi = p[i] * dm;
    const float c = std::fma(omb1, g[i], m[i] * b1);
    pi = std::fma(nlr, signf(c), pi);
    m[i] = std::fma(omb2, g[i], m[i] * b2);
    p[i] = pi;
  }
}
void lion_step_f64(const LionHyper& h, const std::vector<double>& g, std::vector<double>& p,
                   std::vector<double>& m) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(p.size() == n && m.size() == n, "lion: size mismatch");
  for (size_t i = 0; i < n; ++i) {
    const double c = h.beta1 * m[i] + (1.0 - h.beta1) * g[i];
    p[i] = p[i] * (1.0 - h.lr * h.weight_decay) - h.lr * signd(c);
    m[i] = h.beta2 * m[i] + (1.0 - h.beta2) * g[i];
  }
}

// --------------------------------------------------------------------------------------------
// LAMB (apex). Stage 0: global grad norm; per-tensor param norms (before the update).
// Stage 1 per element (float): sg = g / clip; [L2: sg = sg + decay p]; m = m b1 + b3 sg;
// v = v b2 + (1-b2) sg sg; u = (m/bc1) / (sqrtf(v/bc2) + eps) [+ decay p]. Stage 2: per-tensor
// update norms; ratio = lr (||p||/||u||) if (nvlamb or decay != 0) and both norms != 0, else lr;
// p = p - ratio u. Contractions (inferred): fma(m, b1, b3 sg); fma(v, b2, ((1-b2) sg) sg);
// fma(decay, p, .); fma(-ratio, u, p).
// --------------------------------------------------------------------------------------------
namespace {
double l2_sq(const std::vector<float>& x) {
  double s = 0;
  for (float e : x) s += static_cast<double>(e) * static_cast<double>(e);
  return s;
}
double l2_sq(const std::vector<double>& x) {
  double s = 0;
  for (double e : x) s += e * e;
  return s;
}
}  // namespace

LambInfo lamb_step_f32(const LambHyper& h, const std::vector<std::vector<float>>& g,
                       LambState32& s) {
  const size_t T = g.size();
  ASSAY_INPUT_CHECK(s.p.size() == T && s.m.size() == T && s.v.size() == T, "lamb: list sizes");
  const int64_t t = s.step + 1;
  const float lr = f32(h.lr), b1 = f32(h.beta1), b2 = f32(h.beta2), eps = f32(h.eps),
              decay = f32(h.weight_decay), maxn = f32(h.max_grad_norm);
  float bc1 = 1.0f, bc2 = 1.0f;
  if (h.bias_correction) {
    bc1 = f32(1.0 - pow_int_cr(static_cast<double>(b1), t));
    bc2 = f32(1.0 - pow_int_cr(static_cast<double>(b2), t));
  }
  const float b3 = h.grad_averaging ? 1.0f - b1 : 1.0f;
  const float omb2 = 1.0f - b2;
  const bool C = h.contract == Contract::inferred;
  LambInfo info;
  double gsq = 0;
  for (const auto& gi : g) gsq += l2_sq(gi);
  const float G = f32(std::sqrt(gsq));
  info.global_grad_norm = G;
  const float clip = G > maxn ? G / maxn : 1.0f;
  for (size_t k = 0; k < T; ++k) {
    const size_t n = g[k].size();
    ASSAY_INPUT_CHECK(s.p[k].size() == n && s.m[k].size() == n && s.v[k].size() == n,
                      "lamb: tensor {} sizes", k);
    const float pn = f32(std::sqrt(l2_sq(s.p[k])));
    std::vector<float> u(n);
    for (size_t i = 0; i < n; ++i) {
      const float p = decay == 0 ? 0.0f : s.p[k][i];
      float sg = g[k][i] / clip;
      if (!h.adam_w_mode) sg = C ? std::fma(decay, p, sg) : sg + decay * p;
      const float m = C ? std::fma(s.m[k][i], b1, b3 * sg) : s.m[k][i] * b1 + b3 * sg;
      const float t2 = (omb2 * sg) * sg;
      const float v = C ? std::fma(s.v[k][i], b2, t2) : s.v[k][i] * b2 + t2;
      const float mh = m / bc1, vh = v / bc2;
      const float denom = std::sqrt(vh) + eps;
      float upd = mh / denom;
      if (h.adam_w_mode) upd = C ? std::fma(decay, p, upd) : upd + decay * p;
      u[i] = upd;
      s.m[k][i] = m;
      s.v[k][i] = v;
    }
    const float un = f32(std::sqrt(l2_sq(u)));
    float ratio = lr;
    if (h.use_nvlamb || decay != 0.0f)
      ratio = (un != 0.0f && pn != 0.0f) ? lr * (pn / un) : lr;
    for (size_t i = 0; i < n; ++i)
      s.p[k][i] = C ? std::fma(-ratio, u[i], s.p[k][i]) : s.p[k][i] - ratio * u[i];
    info.param_norm.push_back(pn);
    info.update_norm.push_back(un);
    info.ratio.push_back(ratio);
  }
  s.step = t;
  return info;
}

LambInfo lamb_step_f64(const LambHyper& h, const std::vector<std::vector<double>>& g,
                       LambState64& s) {
  const size_t T = g.size();
  ASSAY_INPUT_CHECK(s.p.size() == T && s.m.size() == T && s.v.size() == T, "lamb: list sizes");
  const int64_t t = s.step + 1;
  const double bc1 = h.bias_correction ? 1.0 - std::pow(h.beta1, static_cast<double>(t)) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(h.beta2, static_cast<double>(t)) : 1.0;
  const double b3 = h.grad_averaging ? 1.0 - h.beta1 : 1.0;
  LambInfo info;
  double gsq = 0;
  for (const auto& gi : g) gsq += l2_sq(gi);
  info.global_grad_norm = std::sqrt(gsq);
  const double clip =
      info.global_grad_norm > h.max_grad_norm ? info.global_grad_norm / h.max_grad_norm : 1.0;
  for (size_t k = 0; k < T; ++k) {
    const size_t n = g[k].size();
    const double pn = std::sqrt(l2_sq(s.p[k]));
    std::vector<double> u(n);
    for (size_t i = 0; i < n; ++i) {
      const double p = s.p[k][i];
      double sg = g[k][i] / clip;
      if (!h.adam_w_mode) sg += h.weight_decay * p;
      s.m[k][i] = h.beta1 * s.m[k][i] + b3 * sg;
      s.v[k][i] = h.beta2 * s.v[k][i] + (1.0 - h.beta2) * sg * sg;
      u[i] = (s.m[k][i] / bc1) / (std::sqrt(s.v[k][i] / bc2) + h.eps);
      if (h.adam_w_mode) u[i] += h.weight_decay * p;
    }
    const double un = std::sqrt(l2_sq(u));
    double ratio = h.lr;
    if ((h.use_nvlamb || h.weight_decay != 0) && un != 0 && pn != 0) ratio = h.lr * pn / un;
    for (size_t i = 0; i < n; ++i) s.p[k][i] -= ratio * u[i];
    info.param_norm.push_back(pn);
    info.update_norm.push_back(un);
    info.ratio.push_back(ratio);
  }
  s.step = t;
  return info;
}

// --------------------------------------------------------------------------------------------
// Adafactor (torch/optim/_adafactor.py, _single_tensor_adafactor):
//   t += 1; one_minus_beta2_t = t^beta2_decay; rho = min(lr, 1/sqrt(t));
//   alpha = max(eps2, ||p|| / sqrt(numel)) * rho        (param norm before the decay)
//   if wd: p *= 1 - lr wd
//   factored: row_mean = ||g_row||^2 / N; row_var.lerp_(row_mean, w); col likewise / M;
//             var = (row_var @ col_var) / clamp(mean(row_var), min=eps1)
//   else: var.lerp_(g*g, w); var_est = var
//   U = g * rsqrt(clamp(var, min=eps1^2)); denom = max(1, ||U|| / (sqrt(numel) d));
//   p += U * (-alpha / denom)
// maximize negates g first.
// --------------------------------------------------------------------------------------------
namespace {
template <typename F>
double l2sq_any(const std::vector<F>& x) {
  double s = 0;
  for (F e : x) s += static_cast<double>(e) * static_cast<double>(e);
  return s;
}
template <typename F>
void adafactor_impl(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                    const std::vector<F>& graw, std::vector<F>& p, std::vector<F>& row_var,
                    std::vector<F>& col_var, std::vector<F>& variance, int64_t& step) {
  constexpr bool is32 = std::is_same_v<F, float>;
  const size_t n = static_cast<size_t>(M * N);
  ASSAY_INPUT_CHECK(graw.size() == n && p.size() == n, "adafactor: sizes");
  const double eps1 = h.eps1 ? *h.eps1 : (is32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -23));
  std::vector<F> g(graw);
  if (h.maximize)
    for (auto& e : g) e = -e;
  step += 1;
  const double t = static_cast<double>(step);
  const double omb2 = std::pow(t, h.beta2_decay);
  const double rho = std::min(h.lr, 1.0 / std::sqrt(t));
  const double pnorm = is32 ? static_cast<double>(f32(std::sqrt(l2sq_any(p)))) : std::sqrt(l2sq_any(p));
  const double alpha = std::max(h.eps2, pnorm / std::sqrt(static_cast<double>(n))) * rho;
  if (h.weight_decay != 0) {
    const F dm = static_cast<F>(1.0 - h.lr * h.weight_decay);
    for (auto& e : p) e = e * dm;
  }
  std::vector<F> var(n);
  const F w = static_cast<F>(omb2);
  auto lerp = [&](F self, F end) -> F {
    if constexpr (is32) return lerp_f32(self, end, w);
    return self + w * (end - self);
  };
  if (factored) {
    if (row_var.empty()) row_var.assign(M, F(0));
    if (col_var.empty()) col_var.assign(N, F(0));
    ASSAY_INPUT_CHECK(row_var.size() == static_cast<size_t>(M) && col_var.size() == static_cast<size_t>(N),
                      "adafactor: row/col var sizes");
    for (int64_t r = 0; r < M; ++r) {
      double s = 0;
      for (int64_t c = 0; c < N; ++c) s += static_cast<double>(g[r * N + c]) * g[r * N + c];
      F rm;
      if constexpr (is32) {
        const float nr = f32(std::sqrt(s));          // torch.norm (fp32 output)
        rm = (nr * nr) / static_cast<float>(N);      // .square_().div_(N)
      } else {
        rm = s / static_cast<double>(N);
      }
      row_var[r] = lerp(row_var[r], rm);
    }
    for (int64_t c = 0; c < N; ++c) {
      double s = 0;
      for (int64_t r = 0; r < M; ++r) s += static_cast<double>(g[r * N + c]) * g[r * N + c];
      F cm;
      if constexpr (is32) {
        const float nc = f32(std::sqrt(s));
        cm = (nc * nc) / static_cast<float>(M);
      } else {
        cm = s / static_cast<double>(M);
      }
      col_var[c] = lerp(col_var[c], cm);
    }
    double rs = 0;
    for (auto e : row_var) rs += e;
    F rmean = static_cast<F>(rs / static_cast<double>(M));
    rmean = std::max(rmean, static_cast<F>(eps1));
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) var[r * N + c] = (row_var[r] * col_var[c]) / rmean;
  } else {
    if (variance.empty()) variance.assign(n, F(0));
    ASSAY_INPUT_CHECK(variance.size() == n, "adafactor: variance size");
    for (size_t i = 0; i < n; ++i) {
      variance[i] = lerp(variance[i], g[i] * g[i]);
      var[i] = variance[i];
    }
  }
  const F floor2 = static_cast<F>(eps1 * eps1);
  std::vector<F> U(n);
  for (size_t i = 0; i < n; ++i) {
    const F vc = std::max(var[i], floor2);
    F rs;
    if constexpr (is32)
      rs = 1.0f / std::sqrt(vc);  // rsqrt: CUDA rsqrtf is approximate; tolerance quantity
    else
      rs = 1.0 / std::sqrt(vc);
    U[i] = rs * g[i];
  }
  double un = std::sqrt(l2sq_any(U));
  if constexpr (is32) un = f32(un);
  const double denom = std::max(1.0, un / (std::sqrt(static_cast<double>(n)) * h.d));
  const F a = static_cast<F>(-alpha / denom);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (is32)
      p[i] = std::fma(a, U[i], p[i]);
    else
      p[i] = p[i] + a * U[i];
  }
}
}  // namespace

void adafactor_step_f32(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                        const std::vector<float>& g, AdafactorState32& s) {
  adafactor_impl<float>(h, M, N, factored, g, s.p, s.row_var, s.col_var, s.variance, s.step);
}
void adafactor_step_f64(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                        const std::vector<double>& g, AdafactorState64& s) {
  adafactor_impl<double>(h, M, N, factored, g, s.p, s.row_var, s.col_var, s.variance, s.step);
}

}  // namespace assay::optim
