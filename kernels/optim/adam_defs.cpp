// Registration of the Adam / AdamW kernels (adam.cu): torch single-tensor, foreach, fused, the
// fused master-weight variant, apex / TE. Helpers: optim_defs.h.
// Tensors: g [S, N], p, m, v, (vmax) [N] fp32 or bf16 -> p, m, v, (vmax) exact, or p_tol, m_tol,
// v_tol fp32 bounded (apex / TE, fused Adam-L2); S steps from t = step0 + 1.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

AdamConfig adam_config(const CaseFields& P) {
  AdamConfig c;
  read_numbers(P, {{"lr", &c.lr}, {"beta1", &c.beta1}, {"beta2", &c.beta2}, {"eps", &c.eps}, {"weight_decay", &c.weight_decay}});
  read_flags(P, {{"decoupled", &c.decoupled}, {"amsgrad", &c.amsgrad}, {"maximize", &c.maximize}});
  c.grad_scale = P.has("grad_scale") ? static_cast<double>(static_cast<float>(P.get_double("grad_scale"))) : 0.0;
  return c;
}

const char* flavor_impl(AdamFlavor f) {
  switch (f) {
    case AdamFlavor::torch_single: return "torch_single";
    case AdamFlavor::torch_foreach: return "torch_foreach";
    case AdamFlavor::torch_fused: return "torch_fused";
    case AdamFlavor::apex: return "apex";
  }
  return "?";
}

Support adam_can(AdamFlavor f, bool master, const KernelCase& g, const std::string& who) {
  const CaseFields& P = g.fields;
  const std::string opt = P.get_string("optimizer");
  if (opt != "adam") return no(fmt::format("optimizer '{}': {} runs adam", opt, who));
  const std::string impl = P.get_string("impl");
  const bool mine = impl == flavor_impl(f) || (f == AdamFlavor::apex && impl == "te");
  if (!mine)
    return no(fmt::format("impl '{}' has another arithmetic than {} ({})", impl, flavor_impl(f),
                          impl == "te" ? "optim_adam_apex_v1" : "optim_adam_" + impl + "_v1"));
  const AdamConfig c = adam_config(P);
  const bool bf16 = P.get_double("bf16") != 0;
  const bool grad_inf = P.get_double("grad_inf") != 0;
  if (f != AdamFlavor::torch_fused && (P.has("grad_scale") || grad_inf))
    return no(fmt::format("{}: grad_scale / found_inf live in the fused kernel only", flavor_impl(f)));
  if (f == AdamFlavor::apex && (c.amsgrad || c.maximize)) return no("apex / TE FusedAdam have no amsgrad or maximize");
  const DType dt = bf16 ? DType::bf16 : DType::f32;
  std::vector<std::string> ins{"g", "p", "m", "v"};
  if (c.amsgrad) ins.push_back("vmax");
  if (auto s = need(g, ins, dt); !s.ok) return s;
  const auto* gi = g.input("g");
  const auto* pi = g.input("p");
  if (gi->shape.size() != 2 || pi->shape.size() != 1 || gi->shape[1] != pi->shape[0])
    return no("adam: g must be [S, N] and p [N]");
  const bool exact = g.output("p") != nullptr;
  if (exact) {
    std::vector<std::string> outs{"p", "m", "v"};
    if (c.amsgrad) outs.push_back("vmax");
    if (auto s = need_outputs(g, outs, dt); !s.ok) return s;
    if (auto s = outputs_within(g, {"p", "m", "v", "vmax"}, who); !s.ok) return s;
    if (!c.amsgrad && g.output("vmax")) return no("a vmax output without amsgrad");
  } else {
    if (bf16) return no("bf16 states with fp32 bounded outputs: this kernel stores the states' dtype");
    if (auto s = need_outputs(g, {"p_tol", "m_tol", "v_tol"}, DType::f32); !s.ok) return s;
    if (auto s = outputs_within(g, {"p_tol", "m_tol", "v_tol"}, who); !s.ok) return s;
  }
  if (master && (bf16 || f != AdamFlavor::torch_fused))
    return no("the master-weight variant runs fp32 masters on the fused arithmetic");
  return {};
}

std::string adam_launch(AdamFlavor f, bool master, LaunchContext& ctx, const std::string& who) {
  const CaseFields& P = ctx.params;
  const AdamConfig c = adam_config(P);
  auto st = static_cast<cudaStream_t>(ctx.stream);
  const auto *g = ctx.input("g"), *p = ctx.input("p"), *m = ctx.input("m"), *v = ctx.input("v");
  const auto* vx = ctx.input("vmax");
  const bool exact = ctx.output("p") != nullptr;
  const auto* po = ctx.output(exact ? "p" : "p_tol");
  const auto* mo = ctx.output(exact ? "m" : "m_tol");
  const auto* vo = ctx.output(exact ? "v" : "v_tol");
  const auto* xo = ctx.output("vmax");
  if (!g || !p || !m || !v || !po || !mo || !vo || (c.amsgrad && !vx)) return who + ": missing tensors";
  const StoreType dt = g->dtype == DType::bf16 ? StoreType::bf16 : StoreType::f32;
  const size_t es = dt == StoreType::bf16 ? 2 : 4;
  const int64_t S = g->shape[0], N = g->shape[1];
  const int64_t step0 = P.get_int("step0");
  const bool check_inf = f == AdamFlavor::torch_fused && (P.get_double("grad_inf") != 0 || P.has("grad_scale"));
  cudaError_t e = cudaSuccess;
  DevScratch scr(st);
  int* flag = check_inf ? scr.get<int>(1, e) : nullptr;
  void* vmax_state = c.amsgrad ? (xo ? xo->data : scr.get<char>(static_cast<size_t>(N) * es, e)) : nullptr;
  uint16_t* pbf = master ? scr.get<uint16_t>(static_cast<size_t>(N), e) : nullptr;
  for (int64_t k = 0; k < S && e == cudaSuccess; ++k) {
    AdamTensors x;
    x.g = static_cast<const char*>(g->data) + static_cast<size_t>(k * N) * es;
    x.p_in = k == 0 ? p->data : po->data;
    x.m_in = k == 0 ? m->data : mo->data;
    x.v_in = k == 0 ? v->data : vo->data;
    x.vmax_in = c.amsgrad ? (k == 0 ? vx->data : vmax_state) : nullptr;
    x.p_out = po->data;
    x.m_out = mo->data;
    x.v_out = vo->data;
    x.vmax_out = vmax_state;
    x.p_bf16_out = pbf;
    if (check_inf) {  // GradScaler semantics: any non-finite gradient of the step sets found_inf
      e = nonfinite_flag(x.g, dt, N, flag, st);
      x.found_inf = flag;
    }
    if (e == cudaSuccess) e = adam_step(f, c, step0 + 1 + k, dt, dt, x, N, st);
  }
  return cuda_error(who, e);
}

KernelDef make_adam(AdamFlavor f, bool master, std::string name, std::string desc) {
  KernelDef d = optim_kernel(name, std::move(desc));
  d.can_implement = [f, master, name](const KernelCase& g) { return adam_can(f, master, g, name); };
  d.launch = [f, master, name](LaunchContext& c) { return adam_launch(f, master, c, name); };
  return d;
}

}  // namespace

ASSAY_REGISTER_KERNEL(make_adam(AdamFlavor::torch_single, false, "optim_adam_torch_single_v1",
                                "torch 2.11 _single_tensor_adam(w): lerp/addcmul/addcdiv FMAs, sqrt(v) * f32(1/bc2_sqrt); fp32 or bf16 (every op stores bf16)"));
ASSAY_REGISTER_KERNEL(make_adam(AdamFlavor::torch_foreach, false, "optim_adam_torch_foreach_v1",
                                "torch 2.11 _multi_tensor_adam(w): as single-tensor with a true division by bc2_sqrt; fp32 or bf16"));
ASSAY_REGISTER_KERNEL(make_adam(AdamFlavor::torch_fused, false, "optim_adam_torch_fused_v1",
                                "torch 2.11 fused Adam(W): float hyper-parameters, powf bias corrections, grad_scale / found_inf, amsgrad, maximize; fp32 or bf16"));
ASSAY_REGISTER_KERNEL(make_adam(AdamFlavor::torch_fused, true, "optim_adamw_master_bf16_v1",
                                "fused Adam(W) on an fp32 master with the bf16 model copy (RNE) written in the same pass (the bench's master launcher)"));
ASSAY_REGISTER_KERNEL(make_adam(AdamFlavor::apex, false, "optim_adam_apex_v1",
                                "apex FusedAdam / TE FusedAdam (AdamFunctor): u = mhat/(sqrt(v/bc2) + eps) [+ wd p], inferred FMAs"));

}  // namespace assay::kernels::optim
