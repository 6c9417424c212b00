// Registration of the Lion kernel (lion.cu). Helpers: optim_defs.h.
// Tensors: g [1, N], p, m [N] fp32 -> p, m exact.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

// optim_lion_v1: what `assay verify --list` shows.
constexpr const char* kDescription =
    "Lion (lucidrains): p(1 - lr wd) - lr sign(b1 m + (1-b1) g), m = b2 m + (1-b2) g; float4 grid-stride";

LionConfig lion_config(const CaseFields& P) {
  LionConfig c;
  read_numbers(P, {{"lr", &c.lr}, {"beta1", &c.beta1}, {"beta2", &c.beta2}, {"weight_decay", &c.weight_decay}});
  return c;
}

Support can_implement(const KernelCase& g, const CaseFields&) {
  if (auto s = need(g, {"g", "p", "m"}, DType::f32); !s.ok) return s;
  if (auto s = need_outputs(g, {"p", "m"}, DType::f32); !s.ok) return s;
  if (auto s = outputs_within(g, {"p", "m"}, "optim_lion_v1"); !s.ok) return s;
  const auto* gi = g.input("g");
  if (gi->shape.size() != 2 || gi->shape[1] != g.input("p")->shape[0]) return no("lion: g must be [S, N], p [N]");
  return {};
}

std::string launch(LaunchContext& ctx) {
  const LionConfig c = lion_config(ctx.params);
  const auto *g = ctx.input("g"), *p = ctx.input("p"), *m = ctx.input("m");
  const auto *po = ctx.output("p"), *mo = ctx.output("m");
  if (!g || !p || !m || !po || !mo) return "optim_lion_v1: missing tensors";
  const int64_t S = g->shape[0], N = g->shape[1];
  cudaError_t e = cudaSuccess;
  for (int64_t k = 0; k < S && e == cudaSuccess; ++k)
    e = lion_step(c, static_cast<const float*>(g->data) + k * N, static_cast<const float*>(k == 0 ? p->data : po->data),
                  static_cast<const float*>(k == 0 ? m->data : mo->data), static_cast<float*>(po->data),
                  static_cast<float*>(mo->data), N, static_cast<cudaStream_t>(ctx.stream));
  return cuda_error("optim_lion_v1", e);
}

}  // namespace

ASSAY_REGISTER_KERNEL(optimizer_kernel("optim_lion_v1", kDescription, "lion", can_implement, launch));

}  // namespace assay::kernels::optim
