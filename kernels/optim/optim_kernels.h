// Optimizer kernels (assay op `optim`): raw-pointer launchers, defined one optimizer per file
// (kernels/optim/<optimizer>.cu), used by the registrations (kernels/optim/<optimizer>_defs.cpp)
// and the benchmark (kernels/optim/bench_optim.cu).
//
// Tensors (docs/DESIGN.md "Axis vocabulary"; every tensor dense, row-major, device memory):
//   elementwise optimizers: g [N], p [N], m [N], v [N], vmax [N], buf [N]
//     fp32, or bf16 (uint16 codes) for Adam's bf16-storage flavors and master-weight mode
//   LAMB / clipping: one flat buffer [N] holding T tensors back to back (Segments: offset, size)
//   Muon / Adafactor: g, p, buf [M, K] fp32 (M rows, K cols)
//   loss scaler: found_inf [S] int32, scale [S] fp32, growth/hysteresis trackers [S] int64
//   bf16 copies: master [N] fp32, rbits [N] int32 draws in [0, 65536)
// Launchers enqueue on `stream` and return the first launch error (cudaSuccess when fine). The
// outputs may alias the inputs (in-place steps): every element is read and written by one thread.
// Scratch memory (reductions, Newton-Schulz work matrices) is stream-ordered (cudaMallocAsync).
//
// Upstream conventions (reference/optim/optim.h, spec optimizers.md B1-B6):
//   AdamFlavor::torch_single / torch_foreach  torch 2.11 _single_tensor_adam / _multi_tensor_adam
//   AdamFlavor::torch_fused                   torch 2.11 fused_adam_utils.cuh (float hyper-parameters)
//   AdamFlavor::apex                          apex AdamFunctor == TE adam_update (inferred contractions)
#pragma once
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

namespace assay::kernels::optim {

// ---- Adam / AdamW ---------------------------------------------------------------------------
enum class AdamFlavor : int { torch_single = 0, torch_foreach = 1, torch_fused = 2, apex = 3 };
enum class StoreType : int { f32 = 0, bf16 = 1 };

struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  bool decoupled = true;        // AdamW; false: Adam with L2 decay (g += wd p)
  bool amsgrad = false;         // torch flavors
  bool maximize = false;        // torch flavors
  bool bias_correction = true;  // apex / TE option
  double grad_scale = 0;        // torch_fused: g /= grad_scale when > 0
};

// One step t (1-based) over n elements.
//   state (p, m, v, vmax; inputs *_in, outputs *_out, may alias) has type `state`; g has `grad`.
//   Supported (state, grad): (f32, f32), (bf16, bf16) [torch bf16 params, no master],
//   (f32, bf16) [master mode: fp32 master, bf16 grads].
//   vmax_in / vmax_out: amsgrad only (vmax_out may be null: not stored).
//   p_bf16_out (nullable, state f32 only): the bf16 model copy of the updated fp32 param (RNE,
//     Megatron / TE AdamFunctorMaster).
//   found_inf (nullable, device int): nonzero -> the update is skipped (outputs = inputs).
struct AdamTensors {
  const void* g = nullptr;
  const void *p_in = nullptr, *m_in = nullptr, *v_in = nullptr, *vmax_in = nullptr;
  void *p_out = nullptr, *m_out = nullptr, *v_out = nullptr, *vmax_out = nullptr;
  uint16_t* p_bf16_out = nullptr;
  const int* found_inf = nullptr;
};
cudaError_t adam_step(AdamFlavor f, const AdamConfig& c, int64_t t, StoreType state, StoreType grad,
                      const AdamTensors& x, int64_t n, cudaStream_t stream);

// found_inf = 1 if any of n values (fp32 or bf16 codes) is non-finite; the launcher zeroes it first.
cudaError_t nonfinite_flag(const void* x, StoreType type, int64_t n, int* found_inf, cudaStream_t stream);

// ---- SGD (torch 2.11 _single_tensor_sgd), fp32 ----------------------------------------------
struct SgdConfig {
  double lr = 1e-2, momentum = 0.9, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};
// first_step: the momentum buffer is fresh (buf = g, no dampening); buf_in is then unused.
// With momentum == 0 buf_in / buf_out are unused (may be null).
cudaError_t sgd_step(const SgdConfig& c, bool first_step, const float* g, const float* p_in, const float* buf_in,
                     float* p_out, float* buf_out, int64_t n, cudaStream_t stream);

// ---- Lion (lucidrains update_fn), fp32 ------------------------------------------------------
struct LionConfig {
  double lr = 1e-4, beta1 = 0.9, beta2 = 0.99, weight_decay = 0;
};
cudaError_t lion_step(const LionConfig& c, const float* g, const float* p_in, const float* m_in, float* p_out,
                      float* m_out, int64_t n, cudaStream_t stream);

// ---- multi-tensor lists ---------------------------------------------------------------------
constexpr int kMaxSegments = 128;
struct Segments {
  int count = 0;
  int64_t offset[kMaxSegments] = {};
  int64_t size[kMaxSegments] = {};
};

// ---- LAMB (apex FusedLAMB), fp32 ------------------------------------------------------------
struct LambConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0.01, max_grad_norm = 1.0;
  bool adam_w_mode = true, grad_averaging = true, bias_correction = true, use_nvlamb = false;
};
// Phase 1: global grad norm and per-tensor ||p|| (deterministic two-pass reductions), then the
// update u, m, v and per-tensor ||u||; phase 2: p = p - ratio u with the trust ratio.
cudaError_t lamb_step(const LambConfig& c, int64_t t, const Segments& segs, const float* g, const float* p_in,
                      const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out,
                      cudaStream_t stream);

// ---- global grad-norm clipping --------------------------------------------------------------
enum class ClipFlavor : int { torch = 0, megatron = 1 };
// torch clip_grad_norm_ (foreach; grads fp32 or bf16 with every scalar in the grads' dtype) or
// Megatron clip_grad_by_total_norm_fp32 (fp32 only). total_norm_out: one value of the grads' type.
cudaError_t clip_grad_norm(ClipFlavor f, StoreType type, double max_norm, const Segments& segs, const void* g_in,
                           void* g_out, void* total_norm_out, cudaStream_t stream);

// ---- dynamic loss scaling -------------------------------------------------------------------
struct ScalerConfig {
  bool megatron = false;
  double init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5, min_scale = 1.0;
  int64_t growth_interval = 2000, hysteresis = 2;
  bool overflow_guard = true;  // torch 2.11 refuses growth to a non-finite scale
};
// Runs `steps` updates from the initial state with found_inf[k]; records the state after each.
// hysteresis_out: Megatron only (nullable).
cudaError_t scaler_updates(const ScalerConfig& c, const int* found_inf, int64_t steps, float* scale_out,
                           int64_t* growth_tracker_out, int64_t* hysteresis_out, cudaStream_t stream);
// GradScaler.unscale_: g_out = g * inv_scale (unless inv_scale == 1); found_inf = any non-finite
// scaled value (the launcher zeroes it first).
cudaError_t unscale_grads(float inv_scale, const float* g_in, float* g_out, int64_t n, int* found_inf,
                          cudaStream_t stream);

// ---- bf16 copies of fp32 masters ------------------------------------------------------------
// rne: static_cast<bf16>; te / remainder: TE store_param_remainders split; recovered: its merge;
// sr: torchao stochastic rounding with the given draws. Any output pointer may be null.
cudaError_t bf16_copies(const float* master, const int* rbits, uint16_t* rne, uint16_t* te, int* remainder,
                        float* recovered, uint16_t* sr, int64_t n, cudaStream_t stream);

// ---- Adafactor (torch >= 2.5 _single_tensor_adafactor), fresh state, step t = 1 --------------
struct AdafactorConfig {
  double lr = 1e-2, weight_decay = 0, eps1 = 0x1p-23, eps2 = 1e-3, beta2_decay = -0.8, d = 1.0;
};
// factored: rows x cols parameter with row / column variances; else a vector (rows = 1).
cudaError_t adafactor_step_fresh(const AdafactorConfig& c, int64_t rows, int64_t cols, bool factored, const float* g,
                                 const float* p_in, float* p_out, cudaStream_t stream);

// ---- Muon (Newton-Schulz through cuBLAS bf16 GEMMs, fp32 accumulation) ----------------------
struct MuonConfig {
  double lr = 0.02, momentum = 0.95, weight_decay = 0;
  bool nesterov = true;
  int ns_steps = 5;
  int coeffs = 0;         // 0 simple (3.4445, -4.7750, 2.0315), 1 EO quintic cycle, 2 deepseekv4
  int momentum_kind = 0;  // 0 Keller Jordan lerp, 1 Moonlight mu*buf + g
  int scale = 0;          // 0 shape_scaling, 1 spectral (extra * sqrt(max)), 2 unit_rms_norm
  double extra_scale = 1.0, norm_eps = 1e-7;
};
// One step on an M x K param. update_out (nullable): the orthogonalised, scaled update (bf16
// values widened to fp32). Returns "" or an error message (CUDA or cuBLAS).
std::string muon_step(const MuonConfig& c, int64_t M, int64_t K, const float* g, const float* p_in,
                      const float* buf_in, float* p_out, float* buf_out, float* update_out, cudaStream_t stream);

}  // namespace assay::kernels::optim
