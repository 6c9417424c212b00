// Registration of the Muon kernel (muon.cu). Helpers: optim_defs.h.
// Tensors: g, p, buf [M, K] fp32 -> buf exact, p_tol, update_tol bounded.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

// optim_muon_v1: what `assay verify --list` shows.
constexpr const char* kDescription =
    "Muon: momentum, Newton-Schulz with cuBLAS bf16 GEMMs (fp32 accumulation, KJ op order), scale, update";

bool muon_config(const CaseFields& P, MuonConfig& c, std::string& why) {
  read_numbers(P, {{"lr", &c.lr}, {"momentum", &c.momentum}, {"weight_decay", &c.weight_decay}});
  read_flags(P, {{"nesterov", &c.nesterov}});
  c.ns_steps = static_cast<int>(P.get_int("ns_steps"));
  const std::string cs = P.get_string("coeffs");
  const std::string mk = P.get_string("momentum_kind");
  const std::string sc = P.get_string("scale");
  c.coeffs = cs == "simple" ? 0 : cs == "quintic" ? 1 : cs == "deepseekv4" ? 2 : -1;
  c.momentum_kind = mk == "keller" ? 0 : mk == "moonlight" ? 1 : -1;
  c.scale = sc == "shape_scaling" ? 0 : sc == "spectral" ? 1 : sc == "unit_rms_norm" ? 2 : -1;
  c.extra_scale = P.get_double("extra_scale");
  c.norm_eps = P.get_double("norm_eps");
  if (c.coeffs < 0) why = "coeffs '" + cs + "' unknown";
  else if (c.momentum_kind < 0) why = "momentum_kind '" + mk + "' unknown";
  else if (c.scale < 0) why = "scale '" + sc + "' unknown";
  else if (c.ns_steps < 0) why = "ns_steps < 0";
  return why.empty();
}

Support can_implement(const KernelCase& g, const CaseFields& P) {
  MuonConfig c;
  std::string why;
  if (!muon_config(P, c, why)) return no("muon: " + why);
  if (auto s = need(g, {"g", "p", "buf"}, DType::f32); !s.ok) return s;
  if (auto s = need_outputs(g, {"buf", "p_tol", "update_tol"}, DType::f32); !s.ok) return s;
  if (auto s = outputs_within(g, {"buf", "p_tol", "update_tol"}, "optim_muon_v1"); !s.ok) return s;
  const int64_t M = P.get_int("M"), K = P.get_int("K");
  if (M <= 0 || K <= 0 || g.input("g")->numel() != M * K) return no("muon: g, p, buf must be [M, K]");
  if (M > (1 << 20) || K > (1 << 20)) return no("muon: dimensions above 2^20");
  return {};
}

std::string launch(LaunchContext& ctx) {
  MuonConfig c;
  std::string why;
  if (!muon_config(ctx.params, c, why)) return "optim_muon_v1: " + why;
  const int64_t M = ctx.params.get_int("M"), K = ctx.params.get_int("K");
  const auto *g = ctx.input("g"), *p = ctx.input("p"), *b = ctx.input("buf");
  const auto *bo = ctx.output("buf"), *po = ctx.output("p_tol"), *uo = ctx.output("update_tol");
  if (!g || !p || !b || !bo || !po || !uo) return "optim_muon_v1: missing tensors";
  return muon_step(c, M, K, static_cast<const float*>(g->data), static_cast<const float*>(p->data),
                   static_cast<const float*>(b->data), static_cast<float*>(po->data), static_cast<float*>(bo->data),
                   static_cast<float*>(uo->data), static_cast<cudaStream_t>(ctx.stream));
}

}  // namespace

ASSAY_REGISTER_KERNEL(optimizer_kernel("optim_muon_v1", kDescription, "muon", can_implement, launch));

}  // namespace assay::kernels::optim
