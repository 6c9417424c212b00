// Registration of the bf16-copy kernel (bf16_copy.cu). Helpers: optim_defs.h.
// Tensors: master [N] fp32, rbits [N] i32 -> p_bf16_rne / _te / _sr [N] bf16, remainder [N] i32,
// master_recovered [N] fp32, all exact.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

// optim_bf16_copy_v1: what `assay verify --list` shows.
constexpr const char* kDescription =
    "fp32 master -> bf16 param: RNE, TE store_param_remainders (split, merge), torchao stochastic rounding";

Support can_implement(const KernelCase& g, const CaseFields&) {
  if (auto s = need(g, {"master", "master_recovered"}, DType::f32); !s.ok) return s;
  if (auto s = need(g, {"rbits", "remainder"}, DType::i32); !s.ok) return s;
  if (auto s = need(g, {"p_bf16_rne", "p_bf16_te", "p_bf16_sr"}, DType::bf16); !s.ok) return s;
  return outputs_within(g, {"p_bf16_rne", "p_bf16_te", "p_bf16_sr", "remainder", "master_recovered"},
                        "optim_bf16_copy_v1");
}

std::string launch(LaunchContext& ctx) {
  const auto *x = ctx.input("master"), *r = ctx.input("rbits");
  const auto *rne = ctx.output("p_bf16_rne"), *te = ctx.output("p_bf16_te"), *sr = ctx.output("p_bf16_sr");
  const auto *rem = ctx.output("remainder"), *rec = ctx.output("master_recovered");
  if (!x || !r || !rne || !te || !sr || !rem || !rec) return "optim_bf16_copy_v1: missing tensors";
  return cuda_error("optim_bf16_copy_v1",
                  bf16_copies(static_cast<const float*>(x->data), static_cast<const int*>(r->data),
                              static_cast<uint16_t*>(rne->data), static_cast<uint16_t*>(te->data),
                              static_cast<int*>(rem->data), static_cast<float*>(rec->data),
                              static_cast<uint16_t*>(sr->data), x->numel(), static_cast<cudaStream_t>(ctx.stream)));
}

}  // namespace

ASSAY_REGISTER_KERNEL(optimizer_kernel("optim_bf16_copy_v1", kDescription, "bf16_copy", can_implement, launch));

}  // namespace assay::kernels::optim
