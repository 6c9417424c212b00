// Loss-scaler golden (optim_golden.h): the scale state machine (torch GradScaler or Megatron
// DynamicGradScaler) over the per-step found_inf flags, and unscale_ of a gradient with the
// initial scale against an exact division; all outputs exact.
#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

namespace {
// The states after each step (scale_f, tracker, hyst: empty for torch) and the unscale_ of g.
OracleResult scaler_outputs(const std::vector<float>& scale_f, const std::vector<double>& tracker,
                            const std::vector<double>& hyst, float init_scale, const std::vector<double>& g_in,
                            const GoldenContext& ctx) {
  const int64_t S = static_cast<int64_t>(scale_f.size());
  // Unscale of a grad list with the initial scale: inv = f32(1/scale); found_inf on scaled values.
  std::vector<std::vector<float>> g{as_f(g_in)};
  GradScalerState st0{init_scale, 0};
  const bool fi = grad_scaler_unscale(st0, g);
  std::vector<double> gu(g_in.size());
  for (size_t i = 0; i < gu.size(); ++i) gu[i] = g_in[i] / static_cast<double>(st0.scale);
  detail::GoldenBuilder b(ctx);
  OracleResult& r = b.r;
  // The scale sequence is exact in both forms (powers of two); the second form recomputes the
  // unscaled grads by an exact division (the scale is a power of two).
  b.agree("g_unscaled", "reciprocal_multiply", "division", as_d(g[0]), gu);
  const std::string machine =
      "a small state machine over the found_inf flags (integer counters, power-of-two scales: exact in any arithmetic), "
      "written once from the reference scaler; a second form would repeat the same branches";
  for (const char* n : {"scale", "growth_tracker", "found_inf_unscale"}) r.single_form[n] = machine;
  if (!hyst.empty()) r.single_form["hysteresis_tracker"] = machine;
  Output so = b.exact("scale", {S}, DType::f32, as_d(scale_f), scale_f);
  so.expected.axes = {"S"};
  r.outputs.push_back(so);
  Output to = b.out("growth_tracker", {"S"}, {S}, DType::i64, tracker);
  r.outputs.push_back(to);
  if (!hyst.empty()) r.outputs.push_back(b.out("hysteresis_tracker", {"S"}, {S}, DType::i64, hyst));
  const int64_t n = static_cast<int64_t>(gu.size());
  r.outputs.push_back(b.exact("g_unscaled", {n}, DType::f32, gu, g[0]));
  r.outputs.push_back(b.out("found_inf_unscale", {"One"}, {1}, DType::i32, {fi ? 1.0 : 0.0}));
  return std::move(b.r);
}
}  // namespace

OracleResult scaler_golden_torch(const GradScalerHyper& h, float init_scale, const std::vector<double>& found_inf,
                                 const std::vector<double>& g, const GoldenContext& ctx) {
  std::vector<double> tracker;
  std::vector<float> scale_f;
  GradScalerState st{init_scale, 0};
  for (double f : found_inf) {
    grad_scaler_update(h, st, f != 0);
    scale_f.push_back(st.scale), tracker.push_back(static_cast<double>(st.growth_tracker));
  }
  return scaler_outputs(scale_f, tracker, {}, init_scale, g, ctx);
}

OracleResult scaler_golden_megatron(const MegatronScalerHyper& h, float init_scale,
                                    const std::vector<double>& found_inf, const std::vector<double>& g,
                                    const GoldenContext& ctx) {
  std::vector<double> tracker, hyst;
  std::vector<float> scale_f;
  MegatronScalerState st{init_scale, 0, h.hysteresis};
  for (double f : found_inf) {
    megatron_scaler_update(h, st, f != 0);
    scale_f.push_back(st.scale), tracker.push_back(static_cast<double>(st.growth_tracker));
    hyst.push_back(static_cast<double>(st.hysteresis_tracker));
  }
  return scaler_outputs(scale_f, tracker, hyst, init_scale, g, ctx);
}

}  // namespace assay::optim
