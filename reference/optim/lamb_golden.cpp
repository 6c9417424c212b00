// LAMB golden (optim_golden.h): one step of the fp32 emulation, the fp64 step and its pairwise /
// lerp form; bounded p, m, v (the fp32 norms' reduction order is implementation-defined) and the
// norms as intermediates.
#include <cmath>

#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

OracleResult lamb_golden(const LambHyper& h, const std::vector<int64_t>& sizes, int64_t step0,
                         const std::vector<double>& g_in, const std::vector<double>& p_in, const std::vector<double>& m_in,
                         const std::vector<double>& v_in, const GoldenContext& ctx) {
  LambState32 a{splitf(p_in, sizes), splitf(m_in, sizes), splitf(v_in, sizes), step0};
  LambState64 s64{split(p_in, sizes), split(m_in, sizes), split(v_in, sizes), step0};
  LambState64 alt = s64;
  const auto g = split(g_in, sizes);
  lamb_step_f32(h, splitf(g_in, sizes), a);
  const LambInfo ib = lamb_step_f64(h, g, s64);
  lamb_step_f64_alt(h, g, alt);
  // Bound: the fp32 norms (global grad norm, ||p||, ||u||: sequential-or-tree fp32 sums of n
  // terms, relative error <= n u each, halved by the sqrt) scale the whole step p_old - p_new
  // (ratio = lr ||p|| / ||u||, clip = G / max_norm); the elementwise fp32 stage adds ~8u of the
  // step and 2u of |p|. bound_p = ((n_k + N_total + 16) u) |dp| + 2u |p_new|, and likewise the
  // moments through the clip: bound_m = (N_total + 8) u (|b1 m| + |b3 g / clip|) (v: twice).
  const double u = std::ldexp(1.0, -24);
  int64_t ntot = 0;
  for (auto s : sizes) ntot += s;
  const auto pk = split(p_in, sizes);
  const auto m0 = split(m_in, sizes), v0 = split(v_in, sizes);
  const double clip = ib.global_grad_norm > h.max_grad_norm ? ib.global_grad_norm / h.max_grad_norm : 1.0;
  std::vector<double> bp, bm, bv;
  for (size_t k = 0; k < sizes.size(); ++k)
    for (int64_t i = 0; i < sizes[k]; ++i) {
      const double dp = std::fabs(pk[k][i] - s64.p[k][i]);
      bp.push_back(static_cast<double>(sizes[k] + ntot + 16) * u * dp + 2 * u * std::fabs(s64.p[k][i]));
      const double sg = std::fabs(g[k][i] / clip);
      bm.push_back(static_cast<double>(ntot + 8) * u *
                   (h.beta1 * std::fabs(m0[k][i]) + (1 - h.beta1) * sg + std::fabs(s64.m[k][i])));
      bv.push_back(2 * static_cast<double>(ntot + 8) * u * (h.beta2 * v0[k][i] + (1 - h.beta2) * sg * sg + s64.v[k][i]));
    }
  detail::GoldenBuilder b(ctx);
  const auto pf = flat(a.p), mf = flat(a.m), vf = flat(a.v);
  b.check_within("p", flat(s64.p), as_f(pf), bp);
  b.check_within("m", flat(s64.m), as_f(mf), bm);
  b.check_within("v", flat(s64.v), as_f(vf), bv);
  OracleResult& r = b.r;
  b.agree("p_tol", "textbook", "pairwise_lerp", flat(alt.p), flat(s64.p));
  b.agree("m_tol", "textbook", "pairwise_lerp", flat(alt.m), flat(s64.m));
  b.agree("v_tol", "textbook", "pairwise_lerp", flat(alt.v), flat(s64.v));
  r.outputs.push_back(b.bounded("p_tol", {ntot}, DType::f32, flat(s64.p), bp));
  r.outputs.push_back(b.bounded("m_tol", {ntot}, DType::f32, flat(s64.m), bm));
  r.outputs.push_back(b.bounded("v_tol", {ntot}, DType::f32, flat(s64.v), bv));
  b.record("p_tol", pf), b.record("m_tol", mf), b.record("v_tol", vf);
  const int64_t T = static_cast<int64_t>(sizes.size());
  r.intermediates.push_back(Tensor{"param_norm", {"T"}, {T}, DType::f64, ib.param_norm});
  r.intermediates.push_back(Tensor{"update_norm", {"T"}, {T}, DType::f64, ib.update_norm});
  r.intermediates.push_back(Tensor{"trust_ratio", {"T"}, {T}, DType::f64, ib.ratio});
  r.intermediates.push_back(Tensor{"global_grad_norm", {"One"}, {1}, DType::f64, {ib.global_grad_norm}});
  return std::move(b.r);
}

}  // namespace assay::optim
