// Registration of the optimizer kernels (kernels/optim/optim_*.cu) with the kernel registry.
//
// Goldens: golden/optim/<case>.h5 (fixtures/optim.toml, fixtures/optim.cpp). Every case field is
// read from the KernelCase without a default: the golden's /case group holds every field the
// fixture binding read, with the binding's default applied, so no default is repeated here.
// Tensors (storage codes; every output written in full):
//   adam      g [S, N], p, m, v, (vmax) [N] fp32 or bf16 -> p, m, v, (vmax) exact, or p_tol, m_tol,
//             v_tol fp32 bounded (apex / TE, fused Adam-L2); S steps from t = step0 + 1
//   sgd       g [S, N], p, (buf) [N] fp32 -> p, (buf)
//   lion      g [1, N], p, m [N] fp32 -> p, m
//   lamb      g, p, m, v [N] fp32 = tensors of `sizes` back to back -> p_tol, m_tol, v_tol
//   clip      g [N] fp32 / bf16 (tensors of `sizes`) -> g_tol [N], total_norm_tol [1]
//   scaler    found_inf [S] i32, g [N] fp32 -> scale [S] fp32, growth_tracker [S] i64,
//             (hysteresis_tracker [S] i64), g_unscaled [N] fp32, found_inf_unscale [1] i32
//   bf16_copy master [N] fp32, rbits [N] i32 -> p_bf16_rne / _te / _sr [N] bf16, remainder [N] i32,
//             master_recovered [N] fp32
//   adafactor g, p [M, K] fp32 -> p_tol
//   muon      g, p, buf [M, K] fp32 -> buf, p_tol, update_tol
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "kernels/optim/optim_kernels.h"
#include "kernels/common/kernel_support.h"
#include "kernels/registry.h"

namespace assay::kernels {
namespace {

using namespace assay::kernels::optim;
using namespace assay::kernels::common;

const CaseFields& params_of(const KernelCase& g) { return g.fields; }

// Every optim kernel: op "optim", deterministic (fixed-order reductions), strict profile.
KernelDef optim_kernel(std::string name, std::string description) {
  return kernel_def("optim", std::move(name), std::move(description));
}

Support need(const KernelCase& g, const std::vector<std::string>& names, DType dt) { return require_dtypes(g, names, {dt}); }

Segments segments_of(const CaseFields& P, int64_t total, bool& ok) {
  std::vector<double> sz = P.get_list("sizes");
  Segments s;
  ok = !sz.empty() && static_cast<int>(sz.size()) <= kMaxSegments;
  if (!ok) return s;
  int64_t off = 0;
  s.count = static_cast<int>(sz.size());
  for (int k = 0; k < s.count; ++k) {
    s.offset[k] = off;
    s.size[k] = static_cast<int64_t>(sz[k]);
    ok = ok && s.size[k] > 0;
    off += s.size[k];
  }
  ok = ok && off == total;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Adam / AdamW
// ---------------------------------------------------------------------------------------------
AdamConfig adam_config(const CaseFields& P) {
  AdamConfig c;
  c.lr = P.get_double("lr");
  c.beta1 = P.get_double("beta1");
  c.beta2 = P.get_double("beta2");
  c.eps = P.get_double("eps");
  c.weight_decay = P.get_double("weight_decay");
  c.decoupled = P.get_double("decoupled") != 0;
  c.amsgrad = P.get_double("amsgrad") != 0;
  c.maximize = P.get_double("maximize") != 0;
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
  const CaseFields& P = params_of(g);
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

// ---------------------------------------------------------------------------------------------
// SGD, Lion
// ---------------------------------------------------------------------------------------------
SgdConfig sgd_config(const CaseFields& P) {
  SgdConfig c;
  c.lr = P.get_double("lr");
  c.momentum = P.get_double("momentum");
  c.dampening = P.get_double("dampening");
  c.weight_decay = P.get_double("weight_decay");
  c.nesterov = P.get_double("nesterov") != 0;
  c.maximize = P.get_double("maximize") != 0;
  return c;
}

KernelDef make_sgd() {
  KernelDef d = optim_kernel("optim_sgd_v1", "torch 2.11 SGD (momentum, dampening, nesterov, maximize, wd): fma per add(alpha), float4 grid-stride");
  d.can_implement = [](const KernelCase& g) -> Support {
    const CaseFields& P = params_of(g);
    if (P.get_string("optimizer") != "sgd") return no("optim_sgd_v1 runs optimizer = sgd");
    const SgdConfig c = sgd_config(P);
    if (c.nesterov && !(c.momentum > 0 && c.dampening == 0)) return no("nesterov needs momentum > 0 and dampening 0");
    const bool preset = P.get_double("preset_buf") != 0;
    std::vector<std::string> ins{"g", "p"};
    if (preset) ins.push_back("buf");
    if (auto s = need(g, ins, DType::f32); !s.ok) return s;
    std::vector<std::string> outs{"p"};
    if (c.momentum != 0) outs.push_back("buf");
    if (auto s = need_outputs(g, outs, DType::f32); !s.ok) return s;
    if (auto s = outputs_within(g, {"p", "buf"}, "optim_sgd_v1"); !s.ok) return s;
    if (c.momentum == 0 && g.output("buf")) return no("sgd without momentum has no buffer output");
    const auto* gi = g.input("g");
    if (gi->shape.size() != 2 || gi->shape[1] != g.input("p")->shape[0]) return no("sgd: g must be [S, N], p [N]");
    return {};
  };
  d.launch = [](LaunchContext& ctx) -> std::string {
    const SgdConfig c = sgd_config(ctx.params);
    const bool preset = ctx.params.get_double("preset_buf") != 0;
    const auto *g = ctx.input("g"), *p = ctx.input("p"), *b = ctx.input("buf");
    const auto *po = ctx.output("p"), *bo = ctx.output("buf");
    if (!g || !p || !po) return "optim_sgd_v1: missing tensors";
    const int64_t S = g->shape[0], N = g->shape[1];
    cudaError_t e = cudaSuccess;
    for (int64_t k = 0; k < S && e == cudaSuccess; ++k) {
      const bool first = k == 0 && !preset;
      const float* buf_in = k == 0 ? (b ? static_cast<const float*>(b->data) : nullptr)
                                   : (bo ? static_cast<const float*>(bo->data) : nullptr);
      e = sgd_step(c, first, static_cast<const float*>(g->data) + k * N,
                   static_cast<const float*>(k == 0 ? p->data : po->data), buf_in, static_cast<float*>(po->data),
                   bo ? static_cast<float*>(bo->data) : nullptr, N, static_cast<cudaStream_t>(ctx.stream));
    }
    return cuda_error("optim_sgd_v1", e);
  };
  return d;
}

LionConfig lion_config(const CaseFields& P) {
  LionConfig c;
  c.lr = P.get_double("lr");
  c.beta1 = P.get_double("beta1");
  c.beta2 = P.get_double("beta2");
  c.weight_decay = P.get_double("weight_decay");
  return c;
}

KernelDef make_lion() {
  KernelDef d = optim_kernel("optim_lion_v1", "Lion (lucidrains): p(1 - lr wd) - lr sign(b1 m + (1-b1) g), m = b2 m + (1-b2) g; float4 grid-stride");
  d.can_implement = [](const KernelCase& g) -> Support {
    const CaseFields& P = params_of(g);
    if (P.get_string("optimizer") != "lion") return no("optim_lion_v1 runs optimizer = lion");
    if (auto s = need(g, {"g", "p", "m"}, DType::f32); !s.ok) return s;
    if (auto s = need_outputs(g, {"p", "m"}, DType::f32); !s.ok) return s;
    if (auto s = outputs_within(g, {"p", "m"}, "optim_lion_v1"); !s.ok) return s;
    const auto* gi = g.input("g");
    if (gi->shape.size() != 2 || gi->shape[1] != g.input("p")->shape[0]) return no("lion: g must be [S, N], p [N]");
    return {};
  };
  d.launch = [](LaunchContext& ctx) -> std::string {
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
  };
  return d;
}

// ---------------------------------------------------------------------------------------------
// LAMB
// ---------------------------------------------------------------------------------------------
LambConfig lamb_config(const CaseFields& P) {
  LambConfig c;  // grad_averaging / bias_correction: the generator keeps apex's defaults (true)
  c.lr = P.get_double("lr");
  c.beta1 = P.get_double("beta1");
  c.beta2 = P.get_double("beta2");
  c.eps = P.get_double("eps");
  c.weight_decay = P.get_double("weight_decay");
  c.adam_w_mode = P.get_double("adam_w_mode") != 0;
  c.use_nvlamb = P.get_double("use_nvlamb") != 0;
  c.max_grad_norm = P.get_double("max_grad_norm");
  return c;
}

KernelDef make_lamb() {
  KernelDef d = optim_kernel("optim_lamb_v1", "apex FusedLAMB: deterministic two-pass norms (global ||g||, per-tensor ||p||, ||u||), phase 1 update, phase 2 trust ratio");
  d.can_implement = [](const KernelCase& g) -> Support {
    const CaseFields& P = params_of(g);
    if (P.get_string("optimizer") != "lamb") return no("optim_lamb_v1 runs optimizer = lamb");
    if (auto s = need(g, {"g", "p", "m", "v", "p_tol", "m_tol", "v_tol"}, DType::f32); !s.ok) return s;
    if (auto s = outputs_within(g, {"p_tol", "m_tol", "v_tol"}, "optim_lamb_v1"); !s.ok) return s;
    bool ok = false;
    segments_of(P, g.input("g")->numel(), ok);
    if (!ok) return no(fmt::format("lamb: `sizes` must be 1..{} positive sizes summing to N", kMaxSegments));
    return {};
  };
  d.launch = [](LaunchContext& ctx) -> std::string {
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
  };
  return d;
}

// ---------------------------------------------------------------------------------------------
// Clipping
// ---------------------------------------------------------------------------------------------
KernelDef make_clip() {
  KernelDef d = optim_kernel("optim_clip_v1", "global grad-norm clipping, torch clip_grad_norm_ (fp32 / bf16) and Megatron (fp32); deterministic two-pass norms");
  d.can_implement = [](const KernelCase& g) -> Support {
    const CaseFields& P = params_of(g);
    if (P.get_string("optimizer") != "clip") return no("optim_clip_v1 runs optimizer = clip");
    const std::string sem = P.get_string("semantics");
    const bool b16 = P.get_double("bf16") != 0;
    if (sem != "torch" && sem != "megatron") return no("semantics: torch or megatron");
    if (sem == "megatron" && b16) return no("megatron clips fp32 main grads");
    if (auto s = need(g, {"g", "g_tol", "total_norm_tol"}, b16 ? DType::bf16 : DType::f32); !s.ok) return s;
    if (auto s = outputs_within(g, {"g_tol", "total_norm_tol"}, "optim_clip_v1"); !s.ok) return s;
    if (g.output("total_norm_tol")->numel() != 1) return no("total_norm_tol must hold one value");
    bool ok = false;
    segments_of(P, g.input("g")->numel(), ok);
    if (!ok) return no(fmt::format("clip: `sizes` must be 1..{} positive sizes summing to N", kMaxSegments));
    return {};
  };
  d.launch = [](LaunchContext& ctx) -> std::string {
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
  };
  return d;
}

// ---------------------------------------------------------------------------------------------
// Loss scaler
// ---------------------------------------------------------------------------------------------
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

KernelDef make_scaler() {
  KernelDef d = optim_kernel("optim_scaler_v1", "dynamic loss scaling: torch GradScaler (_amp_update_scale_, unscale_) and Megatron DynamicGradScaler (hysteresis)");
  d.can_implement = [](const KernelCase& g) -> Support {
    const CaseFields& P = params_of(g);
    if (P.get_string("optimizer") != "scaler") return no("optim_scaler_v1 runs optimizer = scaler");
    const std::string sem = P.get_string("semantics");
    if (sem != "torch" && sem != "megatron") return no("semantics: torch or megatron");
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
  };
  d.launch = [](LaunchContext& ctx) -> std::string {
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
  };
  return d;
}

// ---------------------------------------------------------------------------------------------
// bf16 copies
// ---------------------------------------------------------------------------------------------
KernelDef make_bf16_copy() {
  KernelDef d = optim_kernel("optim_bf16_copy_v1", "fp32 master -> bf16 param: RNE, TE store_param_remainders (split, merge), torchao stochastic rounding");
  d.can_implement = [](const KernelCase& g) -> Support {
    const CaseFields& P = params_of(g);
    if (P.get_string("optimizer") != "bf16_copy") return no("optim_bf16_copy_v1 runs optimizer = bf16_copy");
    if (auto s = need(g, {"master", "master_recovered"}, DType::f32); !s.ok) return s;
    if (auto s = need(g, {"rbits", "remainder"}, DType::i32); !s.ok) return s;
    if (auto s = need(g, {"p_bf16_rne", "p_bf16_te", "p_bf16_sr"}, DType::bf16); !s.ok) return s;
    return outputs_within(g, {"p_bf16_rne", "p_bf16_te", "p_bf16_sr", "remainder", "master_recovered"},
                          "optim_bf16_copy_v1");
  };
  d.launch = [](LaunchContext& ctx) -> std::string {
    const auto *x = ctx.input("master"), *r = ctx.input("rbits");
    const auto *rne = ctx.output("p_bf16_rne"), *te = ctx.output("p_bf16_te"), *sr = ctx.output("p_bf16_sr");
    const auto *rem = ctx.output("remainder"), *rec = ctx.output("master_recovered");
    if (!x || !r || !rne || !te || !sr || !rem || !rec) return "optim_bf16_copy_v1: missing tensors";
    return cuda_error("optim_bf16_copy_v1",
                    bf16_copies(static_cast<const float*>(x->data), static_cast<const int*>(r->data),
                                static_cast<uint16_t*>(rne->data), static_cast<uint16_t*>(te->data),
                                static_cast<int*>(rem->data), static_cast<float*>(rec->data),
                                static_cast<uint16_t*>(sr->data), x->numel(), static_cast<cudaStream_t>(ctx.stream)));
  };
  return d;
}

// ---------------------------------------------------------------------------------------------
// Adafactor
// ---------------------------------------------------------------------------------------------
KernelDef make_adafactor() {
  KernelDef d = optim_kernel("optim_adafactor_v1", "torch Adafactor, first step from a fresh state (factored or vector); one block, fixed-order reductions");
  d.can_implement = [](const KernelCase& g) -> Support {
    const CaseFields& P = params_of(g);
    if (P.get_string("optimizer") != "adafactor") return no("optim_adafactor_v1 runs optimizer = adafactor");
    if (auto s = need(g, {"g", "p", "p_tol"}, DType::f32); !s.ok) return s;
    if (auto s = outputs_within(g, {"p_tol"}, "optim_adafactor_v1"); !s.ok) return s;
    const int64_t M = P.get_int("M"), K = P.get_int("K");
    if (M <= 0 || K <= 0 || g.input("g")->numel() != M * K || g.input("p")->numel() != M * K)
      return no("adafactor: g, p must be [M, K]");
    return {};
  };
  d.launch = [](LaunchContext& ctx) -> std::string {
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
  };
  return d;
}

// ---------------------------------------------------------------------------------------------
// Muon
// ---------------------------------------------------------------------------------------------
bool muon_config(const CaseFields& P, MuonConfig& c, std::string& why) {
  c.lr = P.get_double("lr");
  c.momentum = P.get_double("momentum");
  c.weight_decay = P.get_double("weight_decay");
  c.nesterov = P.get_double("nesterov") != 0;
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

KernelDef make_muon() {
  KernelDef d = optim_kernel("optim_muon_v1", "Muon: momentum, Newton-Schulz with cuBLAS bf16 GEMMs (fp32 accumulation, KJ op order), scale, update");
  d.can_implement = [](const KernelCase& g) -> Support {
    const CaseFields& P = params_of(g);
    if (P.get_string("optimizer") != "muon") return no("optim_muon_v1 runs optimizer = muon");
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
  };
  d.launch = [](LaunchContext& ctx) -> std::string {
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
  };
  return d;
}

}  // namespace

// The registration table: every optim kernel, one row each.
const bool kOptimRegistered = [] {
  const std::vector<KernelDef> table = {
      make_adam(AdamFlavor::torch_single, false, "optim_adam_torch_single_v1",
                "torch 2.11 _single_tensor_adam(w): lerp/addcmul/addcdiv FMAs, sqrt(v) * f32(1/bc2_sqrt); fp32 or bf16 (every op stores bf16)"),
      make_adam(AdamFlavor::torch_foreach, false, "optim_adam_torch_foreach_v1",
                "torch 2.11 _multi_tensor_adam(w): as single-tensor with a true division by bc2_sqrt; fp32 or bf16"),
      make_adam(AdamFlavor::torch_fused, false, "optim_adam_torch_fused_v1",
                "torch 2.11 fused Adam(W): float hyper-parameters, powf bias corrections, grad_scale / found_inf, amsgrad, maximize; fp32 or bf16"),
      make_adam(AdamFlavor::torch_fused, true, "optim_adamw_master_bf16_v1",
                "fused Adam(W) on an fp32 master with the bf16 model copy (RNE) written in the same pass (the bench's master launcher)"),
      make_adam(AdamFlavor::apex, false, "optim_adam_apex_v1",
                "apex FusedAdam / TE FusedAdam (AdamFunctor): u = mhat/(sqrt(v/bc2) + eps) [+ wd p], inferred FMAs"),
      make_sgd(),
      make_lion(),
      make_lamb(),
      make_clip(),
      make_scaler(),
      make_bf16_copy(),
      make_adafactor(),
      make_muon(),
  };
  for (const auto& d : table) register_kernel(d);
  return true;
}();

}  // namespace assay::kernels
