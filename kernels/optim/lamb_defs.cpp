// Registration of the LAMB kernel (lamb.cu). Helpers: optim_defs.h.
// Tensors: g, p, m, v [N] fp32 = tensors of `sizes` back to back -> p_tol, m_tol, v_tol bounded.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

// optim_lamb_v1: what `assay verify --list` shows.
constexpr const char* kDescription =
    "apex FusedLAMB: deterministic two-pass norms (global ||g||, per-tensor ||p||, ||u||), phase 1 update, phase 2 trust ratio";

LambConfig lamb_config(const CaseFields& P) {
  LambConfig c;  // grad_averaging / bias_correction: the generator keeps apex's defaults (true)
  read_numbers(P, {{"lr", &c.lr}, {"beta1", &c.beta1}, {"beta2", &c.beta2}, {"eps", &c.eps},
                   {"weight_decay", &c.weight_decay}, {"max_grad_norm", &c.max_grad_norm}});
  read_flags(P, {{"adam_w_mode", &c.adam_w_mode}, {"use_nvlamb", &c.use_nvlamb}});
  return c;
}

Support can_implement(const KernelCase& g, const CaseFields& P) {
  if (auto s = need(g, {"g", "p", "m", "v", "p_tol", "m_tol", "v_tol"}, DType::f32); !s.ok) return s;
  if (auto s = outputs_within(g, {"p_tol", "m_tol", "v_tol"}, "optim_lamb_v1"); !s.ok) return s;
  bool ok = false;
  segments_of(P, g.input("g")->numel(), ok);
  if (!ok) return no(fmt::format("lamb: `sizes` must be 1..{} positive sizes summing to N", kMaxSegments));
  return {};
}

std::string launch(LaunchContext& ctx) {
  const LambConfig c = lamb_config(ctx.params);
  const auto *g = ctx.input("g"), *p = ctx.input("p"), *m = ctx.input("m"), *v = ctx.input("v");
  const auto *po = ctx.output("p_tol"), *mo = ctx.output("m_tol"), *vo = ctx.output("v_tol");
  if (!g || !p || !m || !v || !po || !mo || !vo) return "optim_lamb_v1: missing tensors";
  bool ok = false;
  const Segments s = segments_of(ctx.params, g->numel(), ok);
  if (!ok) return "optim_lamb_v1: bad sizes";
  const int64_t t = ctx.params.get_int("step0") + 1;
  return cuda_error("optim_lamb_v1",
                  lamb_step(c, t, s, static_cast<const float*>(g->data), static_cast<const float*>(p->data),
                            static_cast<const float*>(m->data), static_cast<const float*>(v->data),
                            static_cast<float*>(po->data), static_cast<float*>(mo->data), static_cast<float*>(vo->data),
                            static_cast<cudaStream_t>(ctx.stream)));
}

}  // namespace

ASSAY_REGISTER_KERNEL(optimizer_kernel("optim_lamb_v1", kDescription, "lamb", can_implement, launch));

}  // namespace assay::kernels::optim
