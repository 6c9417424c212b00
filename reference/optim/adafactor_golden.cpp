// Adafactor golden (optim_golden.h): the first step of the fp32 form, the fp64 step and its
// second form; bounded p (reductions and rsqrt make the fp32 form a tolerance quantity).
#include <cmath>

#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

OracleResult adafactor_golden(const AdafactorHyper& h, bool factored, int64_t M, int64_t K,
                              const std::vector<double>& g, const std::vector<double>& p0, const GoldenContext& ctx) {
  AdafactorState32 a;
  AdafactorState64 s64, alt;
  a.p = as_f(p0);
  s64.p = p0;
  alt.p = s64.p;
  const int64_t rows = factored ? M : 1, cols = factored ? K : M * K;
  adafactor_step_f32(h, rows, cols, factored, as_f(g), a);
  adafactor_step_f64(h, rows, cols, factored, g, s64);
  adafactor_step_f64_alt(h, rows, cols, factored, g, alt);
  // Bound: the step alpha/denom * U depends on reductions (||p||, row/col sums, ||U||: n terms,
  // n u each) and on rsqrt: (2 (M + K) + 2 sqrt-ish + 16) u |dp| + 2u |p|; we take
  // (4 (M K) + 32) u |dp| + 2u|p| as the documented conservative form (also covers CUDA's rsqrtf,
  // ~2 ulp).
  const double u = std::ldexp(1.0, -24);
  std::vector<double> bp(s64.p.size());
  for (size_t i = 0; i < bp.size(); ++i)
    bp[i] = (4.0 * static_cast<double>(M * K) + 32) * u * std::fabs(p0[i] * (1 - h.lr * h.weight_decay) - s64.p[i]) +
            2 * u * std::fabs(s64.p[i]) + 2 * u * std::fabs(p0[i] * h.lr * h.weight_decay);
  detail::GoldenBuilder b(ctx);
  b.check_within("p", s64.p, a.p, bp);
  b.agree("p_tol", "textbook", "pairwise_alt", alt.p, s64.p);
  b.r.outputs.push_back(b.bounded("p_tol", {M, K}, DType::f32, s64.p, bp));
  b.record("p_tol", as_d(a.p));
  return std::move(b.r);
}

}  // namespace assay::optim
