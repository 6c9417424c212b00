// SGD golden (optim_golden.h): the fp32 emulation (torch op order), the fp64 step and its second
// form (the update split into its terms) over S steps; exact p and buf.
#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

OracleResult sgd_golden(const SgdHyper& h, bool preset, const std::vector<double>& G, int64_t S, int64_t N,
                        const std::vector<double>& p0, const std::vector<double>& buf0, const GoldenContext& ctx) {
  SgdState32 a{as_f(p0), preset ? as_f(buf0) : std::vector<float>{}, preset ? 5 : 0};
  SgdState64 s64{p0, preset ? buf0 : std::vector<double>{}, a.step};
  SgdState64 alt = s64;
  std::vector<double> traj;
  for (int64_t k = 0; k < S; ++k) {
    std::vector<double> gk(G.begin() + k * N, G.begin() + (k + 1) * N);
    sgd_step_f32(h, as_f(gk), a);
    sgd_step_f64(h, gk, s64);
    sgd_step_f64_alt(h, gk, alt);
    traj.insert(traj.end(), s64.p.begin(), s64.p.end());
  }
  detail::GoldenBuilder b(ctx);
  b.agree("p", "torch_order", "split_update", alt.p, s64.p);
  b.r.outputs.push_back(b.exact("p", {N}, DType::f32, s64.p, a.p));
  if (h.momentum != 0) {
    b.agree("buf", "torch_order", "split_update", alt.buf, s64.buf);
    b.r.outputs.push_back(b.exact("buf", {N}, DType::f32, s64.buf, a.buf));
  }
  if (S > 1) b.r.intermediates.push_back(Tensor{"p_traj", {"S", "N"}, {S, N}, DType::f64, traj});
  return std::move(b.r);
}

}  // namespace assay::optim
