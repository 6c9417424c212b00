// Adam / AdamW golden (optim_golden.h): the fp32 / bf16 emulation of the named implementation,
// the fp64 textbook step and its apex-shaped second form over S steps, packaged as exact outputs
// (torch paths) or bounded ones (apex / TE, fused Adam with L2 decay).
#include <cmath>

#include "reference/core/check.h"
#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

// Exactness (spec B1, C): torch paths are exact except fused Adam with L2 decay; apex / TE
// contractions are inferred, not observed: bounded.
bool adam_exact(AdamImpl impl, const AdamHyper& h) {
  return (impl == AdamImpl::torch_single || impl == AdamImpl::torch_foreach || impl == AdamImpl::torch_fused) &&
         !(impl == AdamImpl::torch_fused && !h.decoupled && h.weight_decay != 0);
}

OracleResult adam_golden(AdamImpl impl, const AdamHyper& h, int64_t step0, bool grad_inf,
                         const std::vector<double>& G, int64_t S, int64_t N, const std::vector<double>& p0,
                         const std::vector<double>& m0, const std::vector<double>& v0,
                         const std::vector<double>& vmax0, const GoldenContext& ctx) {
  const bool is_exact = adam_exact(impl, h);
  ASSAY_INPUT_CHECK(is_exact || S == 1, "{}: bounded (non-exact) Adam variants take one step", ctx.where);
  const DType dt = h.bf16_storage ? DType::bf16 : DType::f32;
  AdamState32 s32{as_f(p0), as_f(m0), as_f(v0), {}, step0};
  AdamState64 s64{p0, m0, v0, {}, step0};
  AdamState64 alt = s64;
  if (h.amsgrad) s32.vmax = as_f(vmax0), s64.vmax = vmax0, alt.vmax = s64.vmax;
  detail::GoldenBuilder b(ctx);
  std::vector<double> traj_p, traj_m, traj_v, traj_p32;
  std::vector<double> bound_p;
  for (int64_t k = 0; k < S; ++k) {
    std::vector<double> gk(G.begin() + k * N, G.begin() + (k + 1) * N);
    AdamHyper hk = h;
    if (grad_inf) {  // GradScaler semantics: any non-finite grad sets found_inf for the step
      bool inf = false;
      for (double x : gk) inf |= !std::isfinite(x);
      hk.found_inf = inf;
    }
    if (S == 1 && !hk.found_inf) bound_p = adam_step_bound(impl, hk, gk, s64).p;
    adam_step_f32(impl, hk, as_f(gk), s32);
    if (!hk.found_inf) {
      adam_step_f64(hk, gk, s64);
      adam_step_f64_alt(hk, gk, alt);
    }
    traj_p.insert(traj_p.end(), s64.p.begin(), s64.p.end());
    traj_m.insert(traj_m.end(), s64.m.begin(), s64.m.end());
    traj_v.insert(traj_v.end(), s64.v.begin(), s64.v.end());
    for (float x : s32.p) traj_p32.push_back(x);
  }
  // Agreement entries carry the output names: p, m, v (exact) or p_tol, m_tol, v_tol (bounded).
  const std::string sfx = is_exact ? "" : "_tol";
  b.agree("p" + sfx, "textbook", "apex_shaped", alt.p, s64.p);
  b.agree("m" + sfx, "textbook", "apex_shaped", alt.m, s64.m);
  b.agree("v" + sfx, "textbook", "apex_shaped", alt.v, s64.v);
  if (h.amsgrad && is_exact) b.agree("vmax", "textbook", "apex_shaped", alt.vmax, s64.vmax);
  OracleResult& r = b.r;
  const Shape sh{N};
  if (is_exact) {
    r.outputs.push_back(b.exact("p", sh, dt, s64.p, s32.p, bound_p));
    r.outputs.push_back(b.exact("m", sh, dt, s64.m, s32.m));
    r.outputs.push_back(b.exact("v", sh, dt, s64.v, s32.v));
    if (h.amsgrad) r.outputs.push_back(b.exact("vmax", sh, dt, s64.vmax, s32.vmax));
  } else {
    AdamState64 before{p0, m0, v0, {}, step0};
    if (h.amsgrad) before.vmax = vmax0;
    const AdamBound bd = adam_step_bound(impl, h, G, before);
    b.check_within("p", s64.p, s32.p, bd.p);
    b.check_within("m", s64.m, s32.m, bd.m);
    b.check_within("v", s64.v, s32.v, bd.v);
    r.outputs.push_back(b.bounded("p_tol", sh, DType::f32, s64.p, bd.p));
    r.outputs.push_back(b.bounded("m_tol", sh, DType::f32, s64.m, bd.m));
    r.outputs.push_back(b.bounded("v_tol", sh, DType::f32, s64.v, bd.v));
    b.record("p_tol", as_d(s32.p)), b.record("m_tol", as_d(s32.m)), b.record("v_tol", as_d(s32.v));
  }
  if (S > 1) {
    // Per-step states for bisection: fp64 truth and the bit-exact emulation (first divergent step).
    r.intermediates.push_back(Tensor{"p_traj", {"S", "N"}, {S, N}, DType::f64, traj_p});
    r.intermediates.push_back(Tensor{"m_traj", {"S", "N"}, {S, N}, DType::f64, traj_m});
    r.intermediates.push_back(Tensor{"v_traj", {"S", "N"}, {S, N}, DType::f64, traj_v});
    r.intermediates.push_back(Tensor{"p_traj_emulated", {"S", "N"}, {S, N}, dt, traj_p32});
  }
  return std::move(b.r);
}

}  // namespace assay::optim
