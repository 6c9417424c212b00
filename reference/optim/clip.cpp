// Global grad-norm clipping (spec B6): torch clip_grad_norm_ (fp32 / bf16), Megatron
// clip_grad_by_total_norm_fp32 and the fp64 textbook form. See optim.h.
#include <algorithm>
#include <cmath>

#include "reference/core/check.h"
#include "reference/optim/optim.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

using detail::nan_max;
using detail::sumsq;
using detail::sumsq_flat;

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
      for (float e : g) mx = nan_max(mx, std::fabs(e));
      norms.push_back(mx);
    } else {
      norms.push_back(to_dtype(f32(std::sqrt(sumsq(g))), dt));  // _foreach_norm: dtype output
    }
  }
  float total;
  if (inf_norm) {
    total = 0;
    for (float e : norms) total = nan_max(total, e);
  } else {
    total = to_dtype(f32(std::sqrt(sumsq(norms))), dt);  // vector_norm(stack(norms)): dtype output
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
  const float gn = f32(std::sqrt(sumsq_flat(grads)));      // multi_tensor_l2norm (fp32)
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
  ClipResult r;
  r.total_norm = std::sqrt(sumsq_flat(grads));
  r.coef = std::min(1.0, max_norm / (r.total_norm + 1e-6));
  r.applied = r.coef < 1.0;
  for (auto& g : grads)
    for (double& e : g) e *= r.coef;
  return r;
}

}  // namespace assay::optim
