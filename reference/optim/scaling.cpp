// Global grad-norm clipping (torch, Megatron, fp64) and dynamic loss scaling (GradScaler,
// Megatron DynamicGradScaler). See optim.h and spec B6.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/core/check.h"
#include "reference/optim/optim.h"

namespace assay::optim {

namespace {
// Round a float result of an opmath computation to the tensor dtype.
float to_dtype(float x, GradDType dt) {
  return dt == GradDType::f32 ? x : bf16_to_f32(bf16_rne(x));
}
float nan_min1(float x) { return std::isnan(x) ? x : std::min(x, 1.0f); }
}  // namespace

ClipResult clip_grad_norm_torch(std::vector<std::vector<float>>& grads, GradDType dt,
                                double max_norm, double norm_type) {
  const bool inf_norm = std::isinf(norm_type);
  ASSAY_INPUT_CHECK(inf_norm || norm_type == 2.0, "clip_grad_norm_torch: norm_type 2 or inf");
  std::vector<float> norms;
  for (const auto& g : grads) {
    if (inf_norm) {
      float mx = 0;
      for (float e : g) mx = (std::isnan(e) || std::isnan(mx)) ? std::numeric_limits<float>::quiet_NaN()
                                                               : std::max(mx, std::fabs(e));
      norms.push_back(mx);
    } else {
      double s = 0;
      for (float e : g) s += static_cast<double>(e) * e;
      norms.push_back(to_dtype(f32(std::sqrt(s)), dt));  // _foreach_norm: dtype output
    }
  }
  float total;
  if (inf_norm) {
    total = 0;
    for (float e : norms) total = (std::isnan(e) || std::isnan(total)) ? std::numeric_limits<float>::quiet_NaN()
                                                                       : std::max(total, e);
  } else {
    double s = 0;
    for (float e : norms) s += static_cast<double>(e) * e;
    total = to_dtype(f32(std::sqrt(s)), dt);  // vector_norm(stack(norms)): dtype output
  }
  const float den = to_dtype(total + f32(1e-6), dt);
  const float recip = to_dtype(1.0f / den, dt);            // Tensor.__rtruediv__: reciprocal
  const float coef = to_dtype(recip * f32(max_norm), dt);  // ... * max_norm
  const float clamped = nan_min1(coef);
  for (auto& g : grads)
    for (float& e : g) e = to_dtype(e * clamped, dt);  // always applied (no branch)
  ClipResult r;
  r.total_norm = total;
  r.coef = clamped;
  r.applied = true;
  return r;
}

ClipResult clip_grad_norm_megatron(std::vector<std::vector<float>>& grads, double max_norm) {
  double s = 0;
  for (const auto& g : grads)
    for (float e : g) s += static_cast<double>(e) * e;
  const float gn = f32(std::sqrt(s));      // multi_tensor_l2norm (fp32)
  const float gn2 = gn * gn;               // grad_norm ** 2 (fp32 tensor), all-reduced (SUM)
  const double total = std::sqrt(static_cast<double>(gn2));  // .item() ** (1/2) in Python
  const double coeff = max_norm / (total + 1e-6);
  ClipResult r;
  r.total_norm = total;
  if (coeff < 1.0) {
    const float cf = f32(coeff);
    for (auto& g : grads)
      for (float& e : g) e = e * cf;  // multi_tensor_scale
    r.coef = cf;
    r.applied = true;
  }
  return r;
}

ClipResult clip_grad_norm_f64(std::vector<std::vector<double>>& grads, double max_norm) {
  double s = 0;
  for (const auto& g : grads)
    for (double e : g) s += e * e;
  ClipResult r;
  r.total_norm = std::sqrt(s);
  r.coef = std::min(1.0, max_norm / (r.total_norm + 1e-6));
  r.applied = r.coef < 1.0;
  for (auto& g : grads)
    for (double& e : g) e *= r.coef;
  return r;
}

bool grad_scaler_unscale(const GradScalerState& st, std::vector<std::vector<float>>& grads) {
  const float inv = f32(1.0 / static_cast<double>(st.scale));
  bool found_inf = false;
  for (auto& g : grads)
    for (float& e : g) {
      if (!std::isfinite(e)) found_inf = true;
      if (inv != 1.0f) e = e * inv;
    }
  return found_inf;
}

void grad_scaler_update(const GradScalerHyper& h, GradScalerState& st, bool found_inf) {
  if (found_inf) {
    st.scale = st.scale * f32(h.backoff_factor);
    st.growth_tracker = 0;
    return;
  }
  const int64_t successful = st.growth_tracker + 1;
  if (successful == h.growth_interval) {
    const float ns = st.scale * f32(h.growth_factor);
    if (!h.overflow_guard || std::isfinite(ns)) st.scale = ns;
    st.growth_tracker = 0;
  } else {
    st.growth_tracker = successful;
  }
}

void megatron_scaler_update(const MegatronScalerHyper& h, MegatronScalerState& st, bool found_inf) {
  if (found_inf) {
    st.growth_tracker = 0;
    st.hysteresis_tracker -= 1;
    if (st.hysteresis_tracker <= 0)
      st.scale = std::max(st.scale * f32(h.backoff_factor), f32(h.min_scale));
  } else {
    st.growth_tracker += 1;
    if (st.growth_tracker == h.growth_interval) {
      st.growth_tracker = 0;
      st.hysteresis_tracker = h.hysteresis;
      st.scale = st.scale * f32(h.growth_factor);
    }
  }
}

}  // namespace assay::optim
