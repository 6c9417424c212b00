// Muon golden (optim_golden.h): the bf16-GEMM emulation (KJ), the fp64 step and the second fp64
// Newton-Schulz form (Eigen products, Gram matrix on the smaller side); bounded update and p, exact
// momentum buffer.
#include <cmath>

#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

OracleResult muon_golden(const MuonHyper& h, int64_t M, int64_t K, const std::vector<double>& g,
                         const std::vector<double>& p0, const std::vector<double>& buf0, const GoldenContext& ctx) {
  std::vector<double> pd = p0, bd = buf0;
  std::vector<float> pf = as_f(pd), bf = as_f(bd);
  const std::vector<double> u64 = muon_step_f64(h, M, K, g, pd, bd);
  const std::vector<float> u16 = muon_step_bf16(h, M, K, as_f(g), pf, bf);
  // Second fp64 form of the orthogonalisation: Eigen products, Gram matrix on the smaller side,
  // from the same NS input (momentum, nesterov) as muon_step_f64 builds it.
  std::vector<double> b2 = buf0;
  const std::vector<double> upd = muon_momentum_f64(h, g, b2);
  std::vector<double> o_alt = newton_schulz_f64_eigen(upd, M, K, h.ns_steps, h.coeffs, h.norm_eps);
  const double s = muon_scale_factor(h.scale, M, K, h.extra_scale);
  for (auto& e : o_alt) e *= s;
  // Bound for the bf16-GEMM Newton-Schulz (spec C: relative Frobenius ~1e-2; measured 0.027-0.04
  // in test_optim): per element 0.1 * (|u_i| + rms(u)), i.e. 10% of the local magnitude plus
  // 10% of the RMS. p: lr times that, plus 2u|p| for the fp32 update.
  double rms = 0;
  for (double e : u64) rms += e * e;
  rms = std::sqrt(rms / static_cast<double>(u64.size()));
  std::vector<double> bu(u64.size()), bp(u64.size());
  for (size_t i = 0; i < u64.size(); ++i) {
    bu[i] = 0.1 * (std::fabs(u64[i]) + rms);
    bp[i] = h.lr * bu[i] + 2 * std::ldexp(std::fabs(pd[i]), -24);
  }
  detail::GoldenBuilder b(ctx);
  b.check_within("update", u64, u16, bu);
  b.check_within("p", pd, pf, bp);
  OracleResult& r = b.r;
  b.agree("update_tol", "loops_transposed", "eigen_gram_side", o_alt, u64);
  r.single_form["buf"] =
      "the momentum buffer is one elementwise recurrence (b = mu b + g, or its lerp form), the same expression in any "
      "form; the output it feeds (update_tol) is cross-checked by two Newton-Schulz forms";
  r.single_form["p_tol"] =
      "p = p (1 - lr wd) - lr update: one elementwise step over update_tol, which two Newton-Schulz forms cross-check";
  r.outputs.push_back(b.bounded("update_tol", {M, K}, DType::f32, u64, bu));
  r.outputs.push_back(b.bounded("p_tol", {M, K}, DType::f32, pd, bp));
  // The strict emulation is an fp32 kernel (rounding to the storage dtype only): the same order
  // with the NS GEMMs and the scaling in fp32. KJ's bf16 NS (u16 / pf above) keeps the NS
  // intermediates in bf16 while the I/O is fp32: a precision profile of its own, not strict.
  if (ctx.emu) {
    std::vector<float> p2 = as_f(p0), b3 = as_f(buf0);
    const std::vector<float> u32 = muon_step_bf16(h, M, K, as_f(g), p2, b3, false);
    b.record("update_tol", as_d(u32)), b.record("p_tol", as_d(p2));
  }
  r.outputs.push_back(b.exact("buf", {M, K}, DType::f32, bd, bf));  // momentum: elementwise, exact
  return std::move(b.r);
}

}  // namespace assay::optim
