// Clipping golden (optim_golden.h): torch (fp32 / bf16) or Megatron clipping, the fp64 global-sum
// form and the norm-of-norms second form; bounded grads and total norm.
#include <algorithm>
#include <cmath>

#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

OracleResult clip_golden(bool megatron, bool b16, double max_norm, const std::vector<int64_t>& sizes,
                         const std::vector<double>& g, const GoldenContext& ctx) {
  auto gf = splitf(g, sizes);
  auto gd = split(g, sizes);
  auto ga = gd;
  const ClipResult cf = !megatron ? clip_grad_norm_torch(gf, b16 ? GradDType::bf16 : GradDType::f32, max_norm)
                                  : clip_grad_norm_megatron(gf, max_norm);
  const ClipResult cd = clip_grad_norm_f64(gd, max_norm);
  // Second form: the coefficient from the per-tensor norms (norm of norms), as torch structures it.
  double ss = 0;
  for (const auto& t : ga) ss += detail::sumsq(t);
  const double coef = std::min(1.0, max_norm / (std::sqrt(ss) + 1e-6));
  for (auto& t : ga)
    for (double& e : t) e *= coef;
  // Bound: the coefficient carries the norm's reduction error (n u, halved by the sqrt, twice for
  // the norm of norms) and, in bf16, four bf16 roundings (norm, total, +eps, reciprocal, product:
  // 5 * 2^-8); then one rounding of the product.
  const int64_t n = static_cast<int64_t>(g.size());
  const double u = b16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
  const double rel = (b16 ? 6 * u : 0.0) + (static_cast<double>(n) + 8) * std::ldexp(1.0, -24);
  const auto truth = flat(gd);
  std::vector<double> bg(truth.size());
  for (size_t i = 0; i < bg.size(); ++i) bg[i] = rel * std::fabs(truth[i]) + u * std::fabs(truth[i]);
  detail::GoldenBuilder b(ctx);
  b.check_within("g", truth, as_f(flat(gf)), bg);
  b.agree("g_tol", "global_sum", "norm_of_norms", flat(ga), truth);
  b.agree("total_norm_tol", "global_sum", "norm_of_norms", {std::sqrt(ss)}, {cd.total_norm});
  b.r.outputs.push_back(b.bounded("g_tol", {n}, b16 ? DType::bf16 : DType::f32, truth, bg));
  Output tn = b.bounded("total_norm_tol", {1}, b16 ? DType::bf16 : DType::f32, {cd.total_norm},
                        {rel * cd.total_norm + u * cd.total_norm});
  tn.expected.axes = {"One"};
  b.r.outputs.push_back(tn);
  b.record("g_tol", flat(gf)), b.record("total_norm_tol", {cf.total_norm});
  return std::move(b.r);
}

}  // namespace assay::optim
