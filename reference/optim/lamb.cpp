// LAMB (spec B3; apex FusedLAMB): the fp32 emulation of the elementwise stages, the fp64 step and
// its second fp64 form (pairwise norms, lerp moments). See optim.h.
#include <algorithm>
#include <cmath>

#include "reference/core/check.h"
#include "reference/optim/optim.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

using detail::bias_correction;
using detail::pairwise_sq;
using detail::sumsq;

// --------------------------------------------------------------------------------------------
// LAMB (apex). Stage 0: global grad norm; per-tensor param norms (before the update).
// Stage 1 per element (float): sg = g / clip; [L2: sg = sg + decay p]; m = m b1 + b3 sg;
// v = v b2 + (1-b2) sg sg; u = (m/bc1) / (sqrtf(v/bc2) + eps) [+ decay p]. Stage 2: per-tensor
// update norms; ratio = lr (||p||/||u||) if (nvlamb or decay != 0) and both norms != 0, else lr;
// p = p - ratio u. Contractions (inferred): fma(m, b1, b3 sg); fma(v, b2, ((1-b2) sg) sg);
// fma(decay, p, .); fma(-ratio, u, p).
// --------------------------------------------------------------------------------------------
namespace {
// Step t, the fp64 bias corrections, and the list-size check of both fp64 forms.
struct Lamb64Step {
  int64_t t;
  double bc1, bc2;
};
Lamb64Step start_step(const LambHyper& h, size_t T, const LambState64& s) {
  ASSAY_INPUT_CHECK(s.p.size() == T && s.m.size() == T && s.v.size() == T, "lamb: list sizes");
  const int64_t t = s.step + 1;
  return {t, bias_correction(h.bias_correction, h.beta1, t), bias_correction(h.bias_correction, h.beta2, t)};
}
// One tensor's diagnostics, in list order.
void add_tensor(LambInfo& info, double param_norm, double update_norm, double ratio) {
  info.param_norm.push_back(param_norm);
  info.update_norm.push_back(update_norm);
  info.ratio.push_back(ratio);
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
  for (const auto& gi : g) gsq += sumsq(gi);
  const float G = f32(std::sqrt(gsq));
  info.global_grad_norm = G;
  const float clip = G > maxn ? G / maxn : 1.0f;
  for (size_t k = 0; k < T; ++k) {
    const size_t n = g[k].size();
    ASSAY_INPUT_CHECK(s.p[k].size() == n && s.m[k].size() == n && s.v[k].size() == n,
                      "lamb: tensor {} sizes", k);
    const float pn = f32(std::sqrt(sumsq(s.p[k])));
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
    const float un = f32(std::sqrt(sumsq(u)));
    float ratio = lr;
    if (h.use_nvlamb || decay != 0.0f)
      ratio = (un != 0.0f && pn != 0.0f) ? lr * (pn / un) : lr;
    for (size_t i = 0; i < n; ++i)
      s.p[k][i] = C ? std::fma(-ratio, u[i], s.p[k][i]) : s.p[k][i] - ratio * u[i];
    add_tensor(info, pn, un, ratio);
  }
  s.step = t;
  return info;
}

LambInfo lamb_step_f64(const LambHyper& h, const std::vector<std::vector<double>>& g,
                       LambState64& s) {
  const size_t T = g.size();
  const auto [t, bc1, bc2] = start_step(h, T, s);
  const double b3 = h.grad_averaging ? 1.0 - h.beta1 : 1.0;
  LambInfo info;
  double gsq = 0;
  for (const auto& gi : g) gsq += sumsq(gi);
  info.global_grad_norm = std::sqrt(gsq);
  const double clip =
      info.global_grad_norm > h.max_grad_norm ? info.global_grad_norm / h.max_grad_norm : 1.0;
  for (size_t k = 0; k < T; ++k) {
    const size_t n = g[k].size();
    const double pn = std::sqrt(sumsq(s.p[k]));
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
    const double un = std::sqrt(sumsq(u));
    double ratio = h.lr;
    if ((h.use_nvlamb || h.weight_decay != 0) && un != 0 && pn != 0) ratio = h.lr * pn / un;
    for (size_t i = 0; i < n; ++i) s.p[k][i] -= ratio * u[i];
    add_tensor(info, pn, un, ratio);
  }
  s.step = t;
  return info;
}

LambInfo lamb_step_f64_alt(const LambHyper& h, const std::vector<std::vector<double>>& g,
                           LambState64& s) {
  const size_t T = g.size();
  const auto [t, bc1, bc2] = start_step(h, T, s);
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
    add_tensor(info, pn, un, ratio);
  }
  s.step = t;
  return info;
}

}  // namespace assay::optim
