// Registration of the clipping kernel (clip.cu). Helpers: optim_defs.h.
// Tensors: g [N] fp32 / bf16 (tensors of `sizes`) -> g_tol [N], total_norm_tol [1] bounded.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

// optim_clip_v1: what `assay verify --list` shows.
constexpr const char* kDescription =
    "global grad-norm clipping, torch clip_grad_norm_ (fp32 / bf16) and Megatron (fp32); deterministic two-pass norms";

Support can_implement(const KernelCase& g, const CaseFields& P) {
  const std::string sem = P.get_string("semantics");
  const bool b16 = P.get_double("bf16") != 0;
  if (auto s = torch_or_megatron(sem); !s.ok) return s;
  if (sem == "megatron" && b16) return no("megatron clips fp32 main grads");
  if (auto s = need(g, {"g", "g_tol", "total_norm_tol"}, b16 ? DType::bf16 : DType::f32); !s.ok) return s;
  if (auto s = outputs_within(g, {"g_tol", "total_norm_tol"}, "optim_clip_v1"); !s.ok) return s;
  if (g.output("total_norm_tol")->numel() != 1) return no("total_norm_tol must hold one value");
  bool ok = false;
  segments_of(P, g.input("g")->numel(), ok);
  if (!ok) return no(fmt::format("clip: `sizes` must be 1..{} positive sizes summing to N", kMaxSegments));
  return {};
}

std::string launch(LaunchContext& ctx) {
  const CaseFields& P = ctx.params;
  const auto* g = ctx.input("g");
  const auto *go = ctx.output("g_tol"), *to = ctx.output("total_norm_tol");
  if (!g || !go || !to) return "optim_clip_v1: missing tensors";
  bool ok = false;
  const Segments s = segments_of(P, g->numel(), ok);
  if (!ok) return "optim_clip_v1: bad sizes";
  const ClipFlavor f = P.get_string("semantics") == "megatron" ? ClipFlavor::megatron : ClipFlavor::torch;
  const StoreType t = g->dtype == DType::bf16 ? StoreType::bf16 : StoreType::f32;
  return cuda_error("optim_clip_v1", clip_grad_norm(f, t, P.get_double("max_norm"), s, g->data, go->data, to->data,
                                                  static_cast<cudaStream_t>(ctx.stream)));
}

}  // namespace

ASSAY_REGISTER_KERNEL(optimizer_kernel("optim_clip_v1", kDescription, "clip", can_implement, launch));

}  // namespace assay::kernels::optim
