// Golden assembly of the optim op: per optimizer, the function that runs the fp64 textbook form,
// its second fp64 form and the fp32 / bf16 emulation of the named implementation on a case's
// inputs, measures the two fp64 forms' agreement and packages expected outputs, bounds and
// intermediates as an OracleResult (reference/core/tensor.h). The binding (fixtures/optim.cpp,
// fixtures/optim/<optimizer>.cpp) only maps case fields to these arguments.
//
// Tensors (fp64 vectors of the inputs' values, row-major; see docs/ops/optim.md for every output):
//   adam, sgd       g [S, N] (S steps of N elements), p, m, v, vmax, buf [N]
//   lion            g [1, N], p, m [N]
//   lamb, clip      g, p, m, v [N]: the tensors of `sizes` back to back
//   adafactor, muon g, p, buf [M, K]
//   scaler          found_inf [S] (0/1 per step), g [N]
//   bf16_copy       master [N] fp32 values, rbits [N] 16-bit draws
// Output names carry the check class: p, m, v, vmax, buf, scale, ... exact (the golden's rounded
// codes are the emulation of the named implementation, in the output dtype); *_tol bounded by a
// per-element fp64-derived bound, which generation checks the emulation lies within.
// Upstream conventions: those of the oracles (optim.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reference/core/tensor.h"
#include "reference/optim/optim.h"

namespace assay::optim {

// The fp32 / bf16 emulation's values by golden output name (assay calibrate: the fp32_emulation
// variant and the field mutants), recorded while a golden function runs if the context asks.
// Integer outputs (trackers, flags, remainders) record the implementation's own values.
using Emulation = std::map<std::string, std::vector<double>>;

struct GoldenContext {
  std::string where;         // "<file>: case '<name>'": prefixes a golden's self-check errors
  Emulation* emu = nullptr;  // non-null: record the emulation next to the truth
};

// fp64 <-> fp32 vectors, and a flat vector <-> the list of tensors of `sizes`.
std::vector<float> as_f(const std::vector<double>& x);
std::vector<double> as_d(const std::vector<float>& x);
std::vector<std::vector<double>> split(const std::vector<double>& x, const std::vector<int64_t>& sizes);
std::vector<std::vector<float>> splitf(const std::vector<double>& x, const std::vector<int64_t>& sizes);
template <typename T>
std::vector<double> flat(const std::vector<std::vector<T>>& x) {
  std::vector<double> out;
  for (const auto& v : x) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// Adam / AdamW (adam_golden.cpp). Exact outputs p, m, v (vmax) for the torch paths except fused
// Adam with L2 decay; else bounded p_tol, m_tol, v_tol, one step only (adam_exact says which).
// step0 steps already taken; grad_inf (torch_fused): a step with a non-finite gradient is skipped
// (GradScaler's found_inf). vmax is read only with h.amsgrad. S > 1 adds the trajectories.
bool adam_exact(AdamImpl impl, const AdamHyper& h);
OracleResult adam_golden(AdamImpl impl, const AdamHyper& h, int64_t step0, bool grad_inf,
                         const std::vector<double>& g, int64_t S, int64_t N, const std::vector<double>& p,
                         const std::vector<double>& m, const std::vector<double>& v,
                         const std::vector<double>& vmax, const GoldenContext& ctx);
// SGD (sgd_golden.cpp): preset = buf holds a momentum buffer of earlier steps (else the first
// momentum step creates it). Outputs p, buf (with momentum); p_traj for S > 1.
OracleResult sgd_golden(const SgdHyper& h, bool preset, const std::vector<double>& g, int64_t S, int64_t N,
                        const std::vector<double>& p, const std::vector<double>& buf, const GoldenContext& ctx);
// Lion (lion_golden.cpp), one step: outputs p, m.
OracleResult lion_golden(const LionHyper& h, const std::vector<double>& g, int64_t N, const std::vector<double>& p,
                         const std::vector<double>& m, const GoldenContext& ctx);
// LAMB (lamb_golden.cpp), one step from step0: outputs p_tol, m_tol, v_tol; intermediates the norms.
OracleResult lamb_golden(const LambHyper& h, const std::vector<int64_t>& sizes, int64_t step0,
                         const std::vector<double>& g, const std::vector<double>& p, const std::vector<double>& m,
                         const std::vector<double>& v, const GoldenContext& ctx);
// Adafactor (adafactor_golden.cpp), first step from a fresh state: output p_tol [M, K].
OracleResult adafactor_golden(const AdafactorHyper& h, bool factored, int64_t M, int64_t K,
                              const std::vector<double>& g, const std::vector<double>& p, const GoldenContext& ctx);
// Muon (muon_golden.cpp): outputs update_tol, p_tol (bounded: bf16 Newton-Schulz) and buf (exact).
OracleResult muon_golden(const MuonHyper& h, int64_t M, int64_t K, const std::vector<double>& g,
                         const std::vector<double>& p, const std::vector<double>& buf, const GoldenContext& ctx);
// Clipping (clip_golden.cpp): torch (fp32 or bf16 grads) or Megatron semantics; outputs g_tol,
// total_norm_tol.
OracleResult clip_golden(bool megatron, bool bf16, double max_norm, const std::vector<int64_t>& sizes,
                         const std::vector<double>& g, const GoldenContext& ctx);
// Loss scaling (scaler_golden.cpp): the scale state machine over found_inf, and unscale_ of g with
// the initial scale. Outputs scale, growth_tracker, (hysteresis_tracker), g_unscaled,
// found_inf_unscale.
OracleResult scaler_golden_torch(const GradScalerHyper& h, float init_scale, const std::vector<double>& found_inf,
                                 const std::vector<double>& g, const GoldenContext& ctx);
OracleResult scaler_golden_megatron(const MegatronScalerHyper& h, float init_scale,
                                    const std::vector<double>& found_inf, const std::vector<double>& g,
                                    const GoldenContext& ctx);
// BF16 copies (bf16_copy_golden.cpp): outputs p_bf16_rne, p_bf16_te, p_bf16_sr, remainder,
// master_recovered.
OracleResult bf16_copy_golden(const std::vector<double>& master, const std::vector<double>& rbits,
                              const GoldenContext& ctx);

}  // namespace assay::optim
