#include "verify/calibrate/baselines.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace assay::baselines {

const std::vector<Rule>& rules() {
  static const std::vector<Rule> r{
      {"assert_close", "torch.testing.assert_close defaults on every element"},
      {"kernelbench", "KernelBench: allclose, atol = rtol = 1e-2 (fp16/bf16), 1e-4 (fp32)"},
      {"fla", "flash-linear-attention: max error <= 1e-6, else RMS ratio <= 0.005 / 0.008 / 0.02"},
      {"flash_attn", "flash-attention: max error <= 2x the same-precision reference's + fwd_atol"},
      {"mamba3_p95", "mamba_ssm Mamba-3 tests: 95th percentile of the relative error < 5e-2"},
  };
  return r;
}

namespace {

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// |a - b| with equal values (infinities, NaN against NaN) as 0; NaN where they differ non-finitely.
double err(double a, double b) {
  if (same_value(a, b)) return 0;
  const double d = std::fabs(a - b);
  return std::isfinite(d) ? d : NAN;
}

std::pair<double, double> close_tol(DType t, bool kernelbench) {
  if (kernelbench) {
    if (t == DType::f16 || t == DType::bf16) return {1e-2, 1e-2};
    if (t == DType::f32 || t == DType::f64) return {1e-4, 1e-4};
    return {0, 0};
  }
  switch (t) {
    case DType::f16: return {1e-3, 1e-5};
    case DType::bf16: return {1.6e-2, 1e-5};
    case DType::f32: return {1.3e-6, 1e-5};
    case DType::f64: return {1e-7, 1e-7};
    default: return {0, 0};
  }
}

double in_dtype(DType t, double x) { return info(t).is_float ? round_to(t, x) : x; }

Verdict allclose(const OutputValues& o, bool kernelbench) {
  const auto [rtol, atol] = close_tol(o.dtype, kernelbench);
  const auto& a = *o.got;
  const auto& w = *o.want;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ref = in_dtype(o.dtype, w[i]);
    const double e = err(a[i], ref);
    if (e != 0 && !(e <= atol + rtol * std::fabs(ref))) return Verdict::reject;
  }
  return Verdict::accept;
}

Verdict fla(const OutputValues& o) {
  const auto& a = *o.got;
  const auto& w = *o.want;
  double emax = 0, se = 0, sw = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = err(a[i], w[i]);
    if (std::isnan(e)) return Verdict::reject;
    emax = std::max(emax, e);
    se += e * e;
    if (std::isfinite(w[i])) sw += w[i] * w[i];
  }
  if (emax <= 1e-6) return Verdict::accept;
  const double ratio = o.gate_gradient ? 0.02 : o.is_gradient ? 0.008 : 0.005;
  return std::sqrt(se) / std::sqrt(sw) <= ratio ? Verdict::accept : Verdict::reject;  // the sizes cancel
}

Verdict flash_attn(const OutputValues& o) {
  if (!o.same || o.same->size() != o.got->size()) return Verdict::not_applicable;
  const auto& a = *o.got;
  const auto& w = *o.want;
  const auto& s = *o.same;
  double out_err = 0, same_err = 0, fwd_atol = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ref = in_dtype(o.dtype, w[i]);
    const double e = err(a[i], ref), es = err(s[i], ref);
    if (std::isnan(e)) return Verdict::reject;
    out_err = std::max(out_err, e);
    if (!std::isnan(es)) same_err = std::max(same_err, es);
    if (std::isfinite(ref))
      fwd_atol = std::max(fwd_atol, 2 * std::fabs(in_dtype(o.dtype, in_dtype(o.dtype, ref + 0.3) - 0.3) - ref));
  }
  return out_err <= 2 * same_err + fwd_atol ? Verdict::accept : Verdict::reject;
}

Verdict mamba3_p95(const OutputValues& o) {
  const auto& a = *o.got;
  const auto& w = *o.want;
  if (a.empty()) return Verdict::accept;
  std::vector<double> rel(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = err(a[i], w[i]);
    rel[i] = e == 0 ? 0 : (std::isnan(e) || w[i] == 0) ? INFINITY : e / std::fabs(w[i]);
  }
  std::sort(rel.begin(), rel.end());
  const double pos = 0.95 * static_cast<double>(rel.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, rel.size() - 1);
  const double q = rel[lo] == rel[hi] ? rel[lo] : rel[lo] + (pos - static_cast<double>(lo)) * (rel[hi] - rel[lo]);
  return q < 5e-2 ? Verdict::accept : Verdict::reject;
}

}  // namespace

std::vector<Verdict> judge(const OutputValues& o) {
  return {allclose(o, false), allclose(o, true), fla(o), flash_attn(o), mamba3_p95(o)};
}

}  // namespace assay::baselines
