// Registration of the Adafactor kernel (adafactor.cu). Helpers: optim_defs.h.
// Tensors: g, p [M, K] fp32 -> p_tol bounded.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

// optim_adafactor_v1: what `assay verify --list` shows.
constexpr const char* kDescription =
    "torch Adafactor, first step from a fresh state (factored or vector); one block, fixed-order reductions";

Support can_implement(const KernelCase& g, const CaseFields& P) {
  if (auto s = need(g, {"g", "p", "p_tol"}, DType::f32); !s.ok) return s;
  if (auto s = outputs_within(g, {"p_tol"}, "optim_adafactor_v1"); !s.ok) return s;
  const int64_t M = P.get_int("M"), K = P.get_int("K");
  if (M <= 0 || K <= 0 || g.input("g")->numel() != M * K || g.input("p")->numel() != M * K)
    return no("adafactor: g, p must be [M, K]");
  return {};
}

std::string launch(LaunchContext& ctx) {
  const CaseFields& P = ctx.params;
  AdafactorConfig c;
  c.lr = P.get_double("lr");
  c.weight_decay = P.get_double("weight_decay");
  const bool factored = P.get_double("factored") != 0;
  const int64_t M = P.get_int("M"), K = P.get_int("K");
  const auto *g = ctx.input("g"), *p = ctx.input("p"), *po = ctx.output("p_tol");
  if (!g || !p || !po) return "optim_adafactor_v1: missing tensors";
  return cuda_error("optim_adafactor_v1",
                  adafactor_step_fresh(c, factored ? M : 1, factored ? K : M * K, factored,
                                       static_cast<const float*>(g->data), static_cast<const float*>(p->data),
                                       static_cast<float*>(po->data), static_cast<cudaStream_t>(ctx.stream)));
}

}  // namespace

ASSAY_REGISTER_KERNEL(optimizer_kernel("optim_adafactor_v1", kDescription, "adafactor", can_implement, launch));

}  // namespace assay::kernels::optim
