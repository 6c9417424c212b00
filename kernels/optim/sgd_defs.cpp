// Registration of the SGD kernel (sgd.cu). Helpers: optim_defs.h.
// Tensors: g [S, N], p, (buf) [N] fp32 -> p, (buf) exact.
#include "kernels/optim/optim_defs.h"

namespace assay::kernels::optim {
namespace {

// optim_sgd_v1: what `assay verify --list` shows.
constexpr const char* kDescription =
    "torch 2.11 SGD (momentum, dampening, nesterov, maximize, wd): fma per add(alpha), float4 grid-stride";

SgdConfig sgd_config(const CaseFields& P) {
  SgdConfig c;
  read_numbers(P, {{"lr", &c.lr}, {"momentum", &c.momentum}, {"dampening", &c.dampening}, {"weight_decay", &c.weight_decay}});
  read_flags(P, {{"nesterov", &c.nesterov}, {"maximize", &c.maximize}});
  return c;
}

Support can_implement(const KernelCase& g, const CaseFields& P) {
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
}

std::string launch(LaunchContext& ctx) {
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
}

}  // namespace

ASSAY_REGISTER_KERNEL(optimizer_kernel("optim_sgd_v1", kDescription, "sgd", can_implement, launch));

}  // namespace assay::kernels::optim
