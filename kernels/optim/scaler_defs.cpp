// Registration of the loss-scaler kernel (scaler.cu). Helpers: optim_defs.h.
// Tensors: found_inf [S] i32, g [N] fp32 -> scale [S] fp32, growth_tracker [S] i64,
// (hysteresis_tracker [S] i64), g_unscaled [N] fp32, found_inf_unscale [1] i32, all exact.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

// optim_scaler_v1: what `assay verify --list` shows.
constexpr const char* kDescription =
    "dynamic loss scaling: torch GradScaler (_amp_update_scale_, unscale_) and Megatron DynamicGradScaler (hysteresis)";

// Hysteresis and min_scale exist in Megatron's scaler only (the fixture reads them there only).
ScalerConfig scaler_config(const CaseFields& P) {
  ScalerConfig c;
  c.megatron = P.get_string("semantics") == "megatron";
  c.growth_factor = P.get_double("growth_factor");
  c.backoff_factor = P.get_double("backoff_factor");
  c.growth_interval = P.get_int("growth_interval");
  if (c.megatron) {
    c.hysteresis = P.get_int("hysteresis");
    c.min_scale = P.get_double("min_scale");
  }
  c.init_scale = P.get_double("init_scale");
  return c;
}

Support can_implement(const KernelCase& g, const CaseFields& P) {
  const std::string sem = P.get_string("semantics");
  if (auto s = torch_or_megatron(sem); !s.ok) return s;
  if (auto s = need(g, {"found_inf", "found_inf_unscale"}, DType::i32); !s.ok) return s;
  if (auto s = need(g, {"g", "g_unscaled", "scale"}, DType::f32); !s.ok) return s;
  std::vector<std::string> trk{"growth_tracker"};
  if (sem == "megatron") trk.push_back("hysteresis_tracker");
  if (auto s = need(g, trk, DType::i64); !s.ok) return s;
  if (auto s = outputs_within(g, {"scale", "growth_tracker", "hysteresis_tracker", "g_unscaled", "found_inf_unscale"},
                              "optim_scaler_v1");
      !s.ok)
    return s;
  const int64_t S = g.input("found_inf")->numel();
  if (g.output("scale")->numel() != S || g.output("growth_tracker")->numel() != S)
    return no("scaler: scale / growth_tracker must have one value per step");
  if (g.output("found_inf_unscale")->numel() != 1) return no("found_inf_unscale must hold one value");
  (void)scaler_config(P);  // every field the launch reads is there
  return {};
}

std::string launch(LaunchContext& ctx) {
  const ScalerConfig c = scaler_config(ctx.params);
  const auto *fi = ctx.input("found_inf"), *g = ctx.input("g");
  const auto *so = ctx.output("scale"), *to = ctx.output("growth_tracker"), *ho = ctx.output("hysteresis_tracker");
  const auto *gu = ctx.output("g_unscaled"), *fo = ctx.output("found_inf_unscale");
  if (!fi || !g || !so || !to || !gu || !fo) return "optim_scaler_v1: missing tensors";
  auto st = static_cast<cudaStream_t>(ctx.stream);
  cudaError_t e = scaler_updates(c, static_cast<const int*>(fi->data), fi->numel(), static_cast<float*>(so->data),
                                 static_cast<int64_t*>(to->data), ho ? static_cast<int64_t*>(ho->data) : nullptr, st);
  // unscale_ with the initial scale: inv = f32(1 / double(scale))
  const float inv = static_cast<float>(1.0 / static_cast<double>(static_cast<float>(c.init_scale)));
  if (e == cudaSuccess)
    e = unscale_grads(inv, static_cast<const float*>(g->data), static_cast<float*>(gu->data), g->numel(),
                      static_cast<int*>(fo->data), st);
  return cuda_error("optim_scaler_v1", e);
}

}  // namespace

ASSAY_REGISTER_KERNEL(optimizer_kernel("optim_scaler_v1", kDescription, "scaler", can_implement, launch));

}  // namespace assay::kernels::optim
