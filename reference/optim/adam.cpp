// Adam / AdamW (spec B1, B2): fp32-exact emulations of the named implementations, the fp64
// textbook step and its second fp64 form (apex-shaped, lerp moments), the a-priori f32-vs-f64
// bound, BF16 master-weight copies and trajectories. See optim.h.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/core/check.h"
#include "reference/optim/optim.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

using detail::bias_correction;
using detail::nan_max;

const char* name(AdamImpl i) {
  switch (i) {
    case AdamImpl::torch_single: return "torch_single";
    case AdamImpl::torch_foreach: return "torch_foreach";
    case AdamImpl::torch_fused: return "torch_fused";
    case AdamImpl::apex: return "apex";
    case AdamImpl::te: return "te";
  }
  return "?";
}

// --------------------------------------------------------------------------------------------
// The scalars each implementation computes on the host / per tensor, for step t.
// --------------------------------------------------------------------------------------------
namespace {

struct TorchScalars {  // torch_single / torch_foreach: Python doubles
  double bc1, bc2, step_size, bc2_sqrt;
};
TorchScalars torch_scalars(const AdamHyper& h, int64_t t) {
  TorchScalars s;
  const double td = static_cast<double>(static_cast<float>(t));  // step is a float32 tensor
  (void)td;
  s.bc1 = 1.0 - pow_int_cr(h.beta1, t);  // Python beta1 ** step (C pow; here correctly rounded)
  s.bc2 = 1.0 - pow_int_cr(h.beta2, t);
  if (!h.bias_correction) s.bc1 = s.bc2 = 1.0;  // not a torch option: the calibration mutant
  s.step_size = h.lr / s.bc1;
  s.bc2_sqrt = std::sqrt(s.bc2);  // Python `bc ** 0.5` (C pow(x, 0.5)): the correctly rounded sqrt
  return s;
}
struct FusedScalars {  // torch_fused (2.11): float powf per tensor
  float bc1, bc2_sqrt;
};
FusedScalars fused_scalars(const AdamHyper& h, int64_t t) {
  const float tf = static_cast<float>(t);
  FusedScalars s;
  (void)tf;
  s.bc1 = h.bc1_override ? *h.bc1_override : 1.0f - powf_int_cr(f32(h.beta1), t);
  s.bc2_sqrt = h.bc2_override ? *h.bc2_override : std::sqrt(1.0f - powf_int_cr(f32(h.beta2), t));
  if (!h.bias_correction) s.bc1 = s.bc2_sqrt = 1.0f;  // not a torch option: the calibration mutant
  return s;
}
struct ApexScalars {  // apex / TE host: float bc = 1 - std::pow(float beta, int step) (double pow)
  float bc1, bc2;
};
ApexScalars apex_scalars(const AdamHyper& h, int64_t t) {
  ApexScalars s{1.0f, 1.0f};
  if (h.bias_correction) {
    s.bc1 = f32(1.0 - pow_int_cr(static_cast<double>(f32(h.beta1)), t));
    s.bc2 = f32(1.0 - pow_int_cr(static_cast<double>(f32(h.beta2)), t));
  }
  if (h.bc1_override) s.bc1 = *h.bc1_override;
  if (h.bc2_override) s.bc2 = *h.bc2_override;
  return s;
}

void check_sizes(const AdamHyper& h, size_t n, const std::vector<float>& p,
                 const std::vector<float>& m, const std::vector<float>& v,
                 const std::vector<float>& vmax) {
  ASSAY_INPUT_CHECK(p.size() == n && m.size() == n && v.size() == n,
                    "adam: g, p, m, v must have the same length ({} {} {} {})", n, p.size(),
                    m.size(), v.size());
  if (h.amsgrad)
    ASSAY_INPUT_CHECK(vmax.size() == n, "adam: amsgrad needs vmax of length {}", n);
}

// torch single-tensor and foreach (B1.1, B1.2). `foreach` selects the true division of
// sqrt(v) by bc2_sqrt (single-tensor multiplies by the float reciprocal).
void torch_unfused(bool foreach, const AdamHyper& h, const std::vector<float>& g, AdamState32& s) {
  const int64_t t = s.step + 1;
  const TorchScalars sc = torch_scalars(h, t);
  const float decay_mul = f32(1.0 - h.lr * h.weight_decay);
  const float wd = f32(h.weight_decay);
  const float w1 = f32(1.0 - h.beta1);
  const float b2 = f32(h.beta2);
  const float omb2 = f32(1.0 - h.beta2);
  // Single-tensor `v.sqrt() / bc2_sqrt` multiplies by the reciprocal of the CPU scalar, and the
  // reciprocal is formed in double then cast: f32(1 / bc2_sqrt). Observed on H200 / torch 2.11
  // (2^20 elements, reference/optim/tools): at t = 1 (bc2_sqrt = sqrt(0.001)) 1.0f / f32(bc2_sqrt)
  // = 31.6227779 but f32(1 / bc2_sqrt) = 31.622776, and only the latter reproduced p (the spec's
  // `1.0f / f32(bc2_sqrt)` form agrees at t = 10 and 1000, where the two coincide).
  const float inv_bc2_sqrt = f32(1.0 / sc.bc2_sqrt);
  const float bc2_sqrt_f = f32(sc.bc2_sqrt);
  const float eps = f32(h.eps);
  const float neg_step = f32(-sc.step_size);
  const bool b16 = h.bf16_storage;
  auto R = [b16](float x) { return b16 ? bf16_to_f32(bf16_rne(x)) : x; };  // one kernel's store
  const size_t n = g.size();
  for (size_t i = 0; i < n; ++i) {
    float gi = h.maximize ? -g[i] : g[i];
    float p = s.p[i];
    if (h.weight_decay != 0) {
      if (h.decoupled)
        p = R(p * decay_mul);
      else
        gi = R(std::fma(wd, p, gi));  // grad.add(param, alpha=wd)
    }
    const float m = R(lerp_f32(s.m[i], gi, w1));
    const float v = R(std::fma(omb2, gi * gi, R(s.v[i] * b2)));  // mul_(b2).addcmul_(g, g, 1-b2)
    float vv = v;
    if (h.amsgrad) vv = s.vmax[i] = nan_max(s.vmax[i], v);
    float d = R(std::sqrt(vv));
    d = R(foreach ? d / bc2_sqrt_f : d * inv_bc2_sqrt);
    d = R(d + eps);
    p = R(std::fma(neg_step, m / d, p));  // addcdiv_(m, d, value=-step_size)
    s.p[i] = p;
    s.m[i] = m;
    s.v[i] = v;
  }
  s.step = t;
}

// The store of a fused kernel: fp32 as is, or one RNE rounding to bf16 per tensor.
void store(AdamState32& s, size_t i, float p, float m, float v, bool b16) {
  if (b16) {
    p = bf16_to_f32(bf16_rne(p)), m = bf16_to_f32(bf16_rne(m)), v = bf16_to_f32(bf16_rne(v));
    if (!s.vmax.empty() && s.vmax.size() > i) s.vmax[i] = bf16_to_f32(bf16_rne(s.vmax[i]));
  }
  s.p[i] = p;
  s.m[i] = m;
  s.v[i] = v;
}

// torch fused (B1.3, torch 2.11 form).
void torch_fused(const AdamHyper& h, const std::vector<float>& g, AdamState32& s) {
  if (h.found_inf) return;  // kernel skipped; the step count is restored by the caller (torch)
  const int64_t t = s.step + 1;
  const FusedScalars sc = fused_scalars(h, t);
  const float lr = f32(h.lr), b1 = f32(h.beta1), b2 = f32(h.beta2), wd = f32(h.weight_decay),
              eps = f32(h.eps);
  const float lr_wd = lr * wd;
  const float step_size = lr / sc.bc1;
  const size_t n = g.size();
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i];
    if (h.grad_scale) gi = gi / *h.grad_scale;
    if (h.maximize) gi = -gi;
    float p = s.p[i];
    if (wd != 0) {
      if (h.decoupled)
        p = std::fma(-lr_wd, p, p);
      else
        gi = std::fma(p, wd, gi);  // NOT reproduced on hardware (spec B1.3): tolerance only
    }
    const float m = std::fma(b1, s.m[i], std::fma(-b1, gi, gi));
    const float gg = gi * gi;
    const float v = std::fma(b2, s.v[i], std::fma(-b2, gg, gg));
    float vv = v;
    if (h.amsgrad) vv = s.vmax[i] = nan_max(s.vmax[i], v);
    const float denom = std::sqrt(vv) / sc.bc2_sqrt + eps;
    p = p - (step_size * m) / denom;
    store(s, i, p, m, v, h.bf16_storage);
  }
  s.step = t;
}

// apex AdamFunctor / TE adam_update (identical expressions).
void apex_like(const AdamHyper& h, const std::vector<float>& g, AdamState32& s) {
  ASSAY_INPUT_CHECK(!h.amsgrad && !h.maximize, "adam: apex/te have no amsgrad or maximize");
  const int64_t t = s.step + 1;
  const ApexScalars sc = apex_scalars(h, t);
  const float lr = f32(h.lr), b1 = f32(h.beta1), b2 = f32(h.beta2), decay = f32(h.weight_decay),
              eps = f32(h.eps);
  const float omb1 = 1.0f - b1, omb2 = 1.0f - b2;  // device `(1-beta1)` in float
  const bool C = h.contract == Contract::inferred;
  const size_t n = g.size();
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i], p = s.p[i], m = s.m[i], v = s.v[i];
    if (!h.decoupled) gi = C ? std::fma(decay, p, gi) : gi + decay * p;
    m = C ? std::fma(b1, m, omb1 * gi) : b1 * m + omb1 * gi;
    const float t2 = (omb2 * gi) * gi;
    v = C ? std::fma(b2, v, t2) : b2 * v + t2;
    const float mh = m / sc.bc1;
    const float vh = v / sc.bc2;
    const float denom = std::sqrt(vh) + eps;
    float update = mh / denom;
    if (h.decoupled) update = C ? std::fma(decay, p, update) : update + decay * p;
    p = C ? std::fma(-lr, update, p) : p - lr * update;
    store(s, i, p, m, v, h.bf16_storage);
  }
  s.step = t;
}

}  // namespace

void adam_step_f32(AdamImpl impl, const AdamHyper& h, const std::vector<float>& g, AdamState32& s) {
  check_sizes(h, g.size(), s.p, s.m, s.v, s.vmax);
  if (h.bf16_storage) {
    auto is_bf16 = [](const std::vector<float>& x) {
      for (float e : x)
        if ((bits_of(e) & 0xFFFFu) != 0 && !std::isnan(e)) return false;
      return true;
    };
    ASSAY_INPUT_CHECK(is_bf16(g) && is_bf16(s.p) && is_bf16(s.m) && is_bf16(s.v) &&
                          (!h.amsgrad || is_bf16(s.vmax)),
                      "adam: bf16_storage needs bf16-representable g, p, m, v");
  }
  switch (impl) {
    case AdamImpl::torch_single: torch_unfused(false, h, g, s); break;
    case AdamImpl::torch_foreach: torch_unfused(true, h, g, s); break;
    case AdamImpl::torch_fused: torch_fused(h, g, s); break;
    case AdamImpl::apex:
    case AdamImpl::te: apex_like(h, g, s); break;
  }
}

void adam_step_f64(const AdamHyper& h, const std::vector<double>& g, AdamState64& s) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(s.p.size() == n && s.m.size() == n && s.v.size() == n,
                    "adam_f64: size mismatch");
  if (h.amsgrad) ASSAY_INPUT_CHECK(s.vmax.size() == n, "adam_f64: vmax size");
  if (h.found_inf) return;
  const int64_t t = s.step + 1;
  const double bc1 = bias_correction(h.bias_correction, h.beta1, t);
  const double bc2 = bias_correction(h.bias_correction, h.beta2, t);
  for (size_t i = 0; i < n; ++i) {
    double gi = g[i];
    if (h.grad_scale) gi /= static_cast<double>(*h.grad_scale);
    if (h.maximize) gi = -gi;
    double p = s.p[i];
    if (!h.decoupled) gi += h.weight_decay * p;
    const double m = h.beta1 * s.m[i] + (1.0 - h.beta1) * gi;
    const double v = h.beta2 * s.v[i] + (1.0 - h.beta2) * gi * gi;
    double vv = v;
    if (h.amsgrad) {
      s.vmax[i] = std::max(s.vmax[i], v);
      vv = s.vmax[i];
    }
    const double mhat = m / bc1, vhat = vv / bc2;
    const double r = mhat / (std::sqrt(vhat) + h.eps);
    if (h.decoupled) p -= h.lr * h.weight_decay * p;
    p -= h.lr * r;
    s.p[i] = p;
    s.m[i] = m;
    s.v[i] = v;
  }
  s.step = t;
}

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

// --------------------------------------------------------------------------------------------
// A-priori bound |f32 - f64| for one step (first-order; u = 2^-24; factor 2 margin for the
// second-order terms). Derivation (each fp32 rounding contributes <= u * |its result|, each
// Python-double -> float cast <= u * |value|; the bias corrections' deviation r1, r2 is measured
// exactly by evaluating the implementation's float formula in double):
//   g' = g (+ wd p):  E_g = 2u (|g| + |wd p|) for L2, else 0 (+ u|g| with a grad scale)
//   m  : E_m = 4u (|m| + |g'|) + E_g                 (cast of beta1 hits both terms: fused form)
//   v  : E_v = 5u (|v| + g'^2) + 2|g'| E_g
//   sqrt(v/bc2): E_s = min(E_v / (2 sqrt v), sqrt E_v) / sqrt(bc2) + (3u + r2) sqrt(v/bc2)
//   den = s + eps: E_d = E_s + u (eps + den)
//   mhat = m/bc1: E_mh = E_m / bc1 + (2u + r1) |mhat|
//   r = mhat/den: E_r = E_mh / den + |mhat| E_d / (den (den - E_d)) + u |r|  (inf if E_d >= den)
//   p' = p (1 - lr wd) - lr r: E_p = 2u|p| (decoupled) + lr E_r + 3u lr |r| + u |p'|
// --------------------------------------------------------------------------------------------
AdamBound adam_step_bound(AdamImpl impl, const AdamHyper& h, const std::vector<double>& g,
                          const AdamState64& before) {
  const double u = std::ldexp(1.0, h.bf16_storage ? -8 : -24);
  const size_t n = g.size();
  const int64_t t = before.step + 1;
  const double bc1 = bias_correction(h.bias_correction, h.beta1, t);
  const double bc2 = bias_correction(h.bias_correction, h.beta2, t);
  double bc1_impl = bc1, bc2_impl = bc2;
  switch (impl) {
    case AdamImpl::torch_single:
    case AdamImpl::torch_foreach: {
      const TorchScalars sc = torch_scalars(h, t);
      bc1_impl = sc.bc1;
      bc2_impl = static_cast<double>(f32(sc.bc2_sqrt)) * static_cast<double>(f32(sc.bc2_sqrt));
      break;
    }
    case AdamImpl::torch_fused: {
      const FusedScalars sc = fused_scalars(h, t);
      bc1_impl = sc.bc1;
      bc2_impl = static_cast<double>(sc.bc2_sqrt) * static_cast<double>(sc.bc2_sqrt);
      break;
    }
    case AdamImpl::apex:
    case AdamImpl::te: {
      const ApexScalars sc = apex_scalars(h, t);
      bc1_impl = sc.bc1;
      bc2_impl = sc.bc2;
      break;
    }
  }
  const double r1 = std::fabs(bc1_impl / bc1 - 1.0);
  const double r2 = 0.5 * std::fabs(bc2_impl / bc2 - 1.0) + u;  // relative error of sqrt(bc2)
  AdamBound b;
  b.p.resize(n);
  b.m.resize(n);
  b.v.resize(n);
  AdamState64 after = before;
  adam_step_f64(h, g, after);
  for (size_t i = 0; i < n; ++i) {
    double gi = g[i];
    double Eg = h.grad_scale ? u * std::fabs(gi) : 0.0;
    if (h.grad_scale) gi /= static_cast<double>(*h.grad_scale);
    const double p = before.p[i];
    if (!h.decoupled) {
      Eg += 2 * u * (std::fabs(gi) + std::fabs(h.weight_decay * p));
      gi += h.weight_decay * p;
    }
    const double ag = std::fabs(gi);
    const double Em = 4 * u * (std::fabs(before.m[i]) + ag) + Eg;
    const double Ev = 5 * u * (std::fabs(before.v[i]) + ag * ag) + 2 * ag * Eg;
    const double vv = h.amsgrad ? after.vmax[i] : after.v[i];
    const double sq = std::sqrt(std::max(vv, 0.0) / bc2);
    const double sqrt_err = vv > 0 ? std::min(Ev / (2 * std::sqrt(vv)), std::sqrt(Ev)) : std::sqrt(Ev);
    const double Es = sqrt_err / std::sqrt(bc2) + (3 * u + r2) * sq;
    const double den = sq + h.eps;
    const double Ed = Es + u * (h.eps + den);
    const double mhat = after.m[i] / bc1;
    const double Emh = Em / bc1 + (2 * u + r1) * std::fabs(mhat);
    const double r = mhat / den;
    double Er;
    if (Ed >= den)
      Er = std::numeric_limits<double>::infinity();
    else
      Er = Emh / den + std::fabs(mhat) * Ed / (den * (den - Ed)) + u * std::fabs(r);
    double Ep = h.lr * Er + 3 * u * h.lr * std::fabs(r) + u * std::fabs(after.p[i]);
    if (h.decoupled) Ep += 2 * u * std::fabs(p) + 2 * u * std::fabs(h.lr * h.weight_decay * p);
    b.p[i] = 2 * Ep;
    b.m[i] = 2 * Em;
    b.v[i] = 2 * Ev;
  }
  return b;
}

// --------------------------------------------------------------------------------------------
// BF16 params with FP32 master weights
// --------------------------------------------------------------------------------------------
void adam_step_bf16_master(AdamImpl impl, Bf16Copy copy, const AdamHyper& h,
                           const std::vector<float>& g, AdamMasterState& s,
                           const std::vector<uint16_t>* rng) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(s.p_bf16.size() == n, "adam_bf16_master: p_bf16 size");
  AdamState32 st;
  st.m = std::move(s.m);
  st.v = std::move(s.v);
  st.vmax = std::move(s.vmax);
  st.step = s.step;
  st.p.resize(n);
  switch (copy) {
    case Bf16Copy::rne:
      ASSAY_INPUT_CHECK(s.master.size() == n, "adam_bf16_master: master size");
      st.p = s.master;
      break;
    case Bf16Copy::te_remainder:
      ASSAY_INPUT_CHECK(s.remainder.size() == n, "adam_bf16_master: remainder size");
      for (size_t i = 0; i < n; ++i) st.p[i] = te_merge_remainder({s.p_bf16[i], s.remainder[i]});
      break;
    case Bf16Copy::stochastic:
      ASSAY_INPUT_CHECK(rng && rng->size() == n, "adam_bf16_master: stochastic needs {} draws", n);
      for (size_t i = 0; i < n; ++i) st.p[i] = bf16_to_f32(s.p_bf16[i]);
      break;
  }
  adam_step_f32(impl, h, g, st);
  for (size_t i = 0; i < n; ++i) {
    switch (copy) {
      case Bf16Copy::rne: s.p_bf16[i] = bf16_rne(st.p[i]); break;
      case Bf16Copy::te_remainder: {
        const Bf16Remainder pr = te_split_remainder(st.p[i]);
        s.p_bf16[i] = pr.param;
        s.remainder[i] = pr.remainder;
        break;
      }
      case Bf16Copy::stochastic: s.p_bf16[i] = bf16_sr_torchao(st.p[i], (*rng)[i]); break;
    }
  }
  if (copy == Bf16Copy::rne) s.master = st.p;
  s.m = std::move(st.m);
  s.v = std::move(st.v);
  s.vmax = std::move(st.vmax);
  s.step = st.step;
}

// --------------------------------------------------------------------------------------------
// Trajectories
// --------------------------------------------------------------------------------------------
AdamTrajectory32 adam_trajectory_f32(AdamImpl impl, const AdamHyper& h,
                                     const std::vector<std::vector<float>>& grads, AdamState32 s) {
  AdamTrajectory32 tr;
  for (const auto& g : grads) {
    adam_step_f32(impl, h, g, s);
    tr.p.push_back(s.p);
    tr.m.push_back(s.m);
    tr.v.push_back(s.v);
  }
  return tr;
}
AdamTrajectory64 adam_trajectory_f64(const AdamHyper& h,
                                     const std::vector<std::vector<double>>& grads, AdamState64 s) {
  AdamTrajectory64 tr;
  for (const auto& g : grads) {
    adam_step_f64(h, g, s);
    tr.p.push_back(s.p);
    tr.m.push_back(s.m);
    tr.v.push_back(s.v);
  }
  return tr;
}
int64_t first_divergent_step(const AdamTrajectory32& ref, const AdamTrajectory32& cand) {
  const size_t T = std::min(ref.p.size(), cand.p.size());
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (bits_of(a[i]) != bits_of(b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
    return true;
  };
  for (size_t k = 0; k < T; ++k)
    if (!same(ref.p[k], cand.p[k]) || !same(ref.m[k], cand.m[k]) || !same(ref.v[k], cand.v[k]))
      return static_cast<int64_t>(k);
  if (ref.p.size() != cand.p.size()) return static_cast<int64_t>(T);
  return -1;
}


}  // namespace assay::optim
