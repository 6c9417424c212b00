// Lion golden (optim_golden.h): one step of the fp32 emulation, the fp64 step and its lerp form;
// exact p and m.
#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

OracleResult lion_golden(const LionHyper& h, const std::vector<double>& G, int64_t N, const std::vector<double>& p0,
                         const std::vector<double>& m0, const GoldenContext& ctx) {
  std::vector<float> p = as_f(p0), m = as_f(m0);
  std::vector<double> pd = p0, md = m0, pa = pd, ma = md;
  lion_step_f32(h, as_f(G), p, m);
  lion_step_f64(h, G, pd, md);
  lion_step_f64_alt(h, G, pa, ma);
  detail::GoldenBuilder b(ctx);
  b.agree("p", "textbook", "lerp_form", pa, pd);
  b.agree("m", "textbook", "lerp_form", ma, md);
  // sign(c) where c rounds differently in f32 than in f64 makes the truth and the emulation
  // differ by 2 lr: the emulation (rounded) is the exact answer; no bound on the truth.
  b.r.outputs.push_back(b.exact("p", {N}, DType::f32, pd, p));
  b.r.outputs.push_back(b.exact("m", {N}, DType::f32, md, m));
  return std::move(b.r);
}

}  // namespace assay::optim
