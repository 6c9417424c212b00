// Optimizer-step oracles: AdamW/Adam (PyTorch single-tensor / foreach / fused, apex, TE), BF16
// master-weight copies (RNE, TE remainder, stochastic rounding), SGD, Lion, LAMB (apex), Adafactor
// (PyTorch >= 2.5), Muon (Newton-Schulz), global grad-norm clipping and dynamic loss scaling.
//
// Semantics: written out per function below (rule tags B1-B6, C). Where our notes and the upstream
// source disagree the source wins; each function says which it follows.
// Sources: one per optimizer, reference/optim/<optimizer>.cpp (adam, sgd, lion, lamb, adafactor,
// muon, clip, scaler, bf16_copy), holding all its forms; shared helpers in optim_common.cpp and
// optim_internal.h. Golden assembly (both forms, agreement, OracleResult): optim_golden.h.
//
// Two kinds of form per optimizer:
//   * "f32" forms: an fp32-exact emulation of one named implementation variant. Every fp32
//     operation is a separate rounding (the build uses -ffp-contract=off); where the GPU kernel
//     contracts a*b+c into one FMA the emulation calls std::fma on float at exactly that site.
//     Hyper-parameters are converted the way the implementation converts them (Python double
//     -> float at the kernel boundary, or float on the host).
//   * "f64" forms: the textbook update in double (the definitional math of the docstrings),
//     built independently of the f32 forms. Goldens store these as the fp64 truth; the f32
//     forms give the bits a correct kernel of that variant must produce.
//
// Shapes: optimizer tensors are flat element vectors of length N (the logical shape does not
// matter for the elementwise optimizers); LAMB and clipping take lists of tensors (one vector per
// parameter tensor); Adafactor and Muon take one matrix of M rows x N cols (row-major).
// Dtypes: f32 forms take/return float (fp32 params, grads, moments) or uint16 bf16 codes where
// named; f64 forms take/return double.
// Step counting: `step` in a state is the number of steps already taken (0 for a fresh state);
// a call performs step t = step + 1 and stores t back.
//
// Hyper-parameter casts matter (measured in the tests): torch single-tensor / foreach use
// f32(1 - beta) (Python double arithmetic, then the cast) and bias corrections from the double
// betas, whereas torch fused and apex / TE cast beta first and compute 1 - f32(beta) (fused:
// fma(-b1, g, g)) and the bias corrections from the float betas. At t = 1000 with beta2 = 0.999
// this moves p by ~3e-6 relative between the two families: a kernel must be compared with the
// form of its own family, and the fp64 truth carries an a-priori bound (adam_step_bound) that
// includes these casts.
//
// Observed on an H200 with torch 2.11.0+cu130 (reference/optim/tools: torch_optim_check.py and
// optim_torch_compare.cpp, 2^20 fp32 elements of magnitudes 1e-8..1e4 with zero grads, one step
// from a preset state): Adam and AdamW on the single-tensor, foreach and fused paths at t = 1, 10,
// 1000, with amsgrad, with maximize, with bf16 params/states, and SGD (momentum/dampening,
// nesterov, first step, plain; single-tensor, foreach and fused) reproduced p, m, v (buf) with 0
// mismatches. Fused Adam with L2 decay did not (m: 1.1 % of elements with g' = fma(p, wd, g),
// 3 % with g + fl(p wd); yet with maximize g + fl(p wd) matched all elements): tolerance only.
// apex / TE / LAMB / Lion / Muon were not run on hardware.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace assay::optim {

// ---------------------------------------------------------------------------------------------
// Small exact helpers (fp32 / bf16 bit manipulation): optim_common.cpp, bf16_copy.cpp
// ---------------------------------------------------------------------------------------------
float f32(double x);                       // RNE double -> float (the Python-scalar-to-kernel cast)
uint32_t bits_of(float x);
float float_of(uint32_t b);
// beta^t for an integer t >= 0, correctly rounded (double-double evaluation; libm-independent).
// Used for every bias correction of the f32 forms (host pow / powf and device powf of the
// implementations are accurate to < 1 ulp: where they are not correctly rounded the candidate's
// bias-correction floats can be fed through AdamHyper::bc*_override).
double pow_int_cr(double b, int64_t t);
float powf_int_cr(float b, int64_t t);
// PyTorch's CUDA lerp (aten/src/ATen/native/Lerp.h), opmath float, as nvcc compiles it:
//   |w| < 0.5 : fma(w, end - self, self);  else : fma(-(end - self), 1 - w, end).
float lerp_f32(float self, float end, float w);

// BF16 conversions of an fp32 value. Codes are the 16-bit bf16 patterns.
uint16_t bf16_rne(float x);                // IEEE RNE (static_cast<bf16>, tensor.copy_); NaN -> 0x7FC0|sign
float bf16_to_f32(uint16_t code);          // exact
// TE store_param_remainders (TE adam.cu AdamFunctorMasterParamRemainder): the fp32 master is kept
// as (bf16 param, int16 remainder). split: hi = top 16 bits, rem = low 16 bits; if rem < 0 (bit
// 15 set) hi += 1 (bf16 = master rounded half-up in magnitude: ties away from zero).
// merge: if rem < 0, hi -= 1; master = (hi << 16) | rem. merge(split(x)) == x bit-exactly.
struct Bf16Remainder {
  uint16_t param;     // bf16 code
  int16_t remainder;  // low 16 bits of the fp32 master, as int16
};
Bf16Remainder te_split_remainder(float master);
float te_merge_remainder(Bf16Remainder pr);
// Stochastic rounding with an explicit 16-bit random draw r in [0, 65536).
//   torchao (_fp32_to_bf16_sr): frac = low 16 bits; if r < frac: truncate-toward-zero + 1 ulp
//     (away from zero), else truncate. r = 0 rounds every inexact value away from zero; r = 0xFFFF
//     always truncates. NaN/Inf are passed through with the low bits dropped (Inf stays Inf; a
//     NaN keeps a NaN pattern because we force a quiet bit: documented deviation from bit
//     dropping, which could turn a low-payload NaN into Inf).
//   PTX cvt.rs (add-then-truncate): (bits + r) with the low 16 bits cleared; r = 0 truncates,
//     r = 0xFFFF rounds every inexact value away from zero. The PTX ISA describes cvt.rs as
//     consuming random bits; the exact add-and-truncate formulation is our reading of it and is
//     not confirmed on hardware.
uint16_t bf16_sr_torchao(float x, uint16_t r);
uint16_t bf16_sr_ptx(float x, uint16_t r);

// ---------------------------------------------------------------------------------------------
// Adam / AdamW (spec B1, B2): adam.cpp
// ---------------------------------------------------------------------------------------------
enum class AdamImpl {
  torch_single,   // torch 2.11 _single_tensor_adam (B1.1), CUDA
  torch_foreach,  // torch 2.11 _multi_tensor_adam (B1.2), CUDA default
  torch_fused,    // torch 2.11 _fused_adam(w)_ (B1.3, current form)
  apex,           // apex FusedAdam (csrc/multi_tensor_adam.cu AdamFunctor)
  te,             // TransformerEngine FusedAdam (adam.cu adam_update / AdamFunctorMaster): same math as apex
};
const char* name(AdamImpl i);

// Where nvcc contracts a*b + c*d etc. in the apex / TE / LAMB kernels. Not observed on hardware
// (spec open doubt 2): `inferred` mirrors LLVM's DAG combine (the left product of a sum of two
// products is fused: fma(a, b, c*d); x - y*z -> fma(-y, z, x)); `none` is the uncontracted
// evaluation. The torch paths use the observed contractions (spec B1.1-B1.3) and ignore this.
enum class Contract { inferred, none };

struct AdamHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  bool decoupled = true;   // AdamW (decoupled) vs Adam (L2: g += wd * p)
  bool amsgrad = false;    // torch paths only (apex / TE have none)
  bool maximize = false;   // torch paths only
  bool bias_correction = true;  // apex / TE option (torch always corrects; false on a torch
                                // path is the calibration mutant "no bias correction")
  // torch_fused only: g /= grad_scale before anything (GradScaler's scale); found_inf skips the
  // whole update (params, moments and the step count are left unchanged).
  std::optional<float> grad_scale;
  bool found_inf = false;
  // Override of the bias-correction floats (the device powf of the fused kernel is not guaranteed
  // correctly rounded, spec C): torch_fused uses (bc1, bc2_sqrt); apex / te use (bc1, bc2).
  std::optional<float> bc1_override, bc2_override;
  Contract contract = Contract::inferred;  // apex / te only
  // Storage dtype of p, g, m, v (and vmax) for the f32 forms: fp32, or bf16 params / grads /
  // states with no master copy (torch AdamW on a bf16 model). bf16: inputs must be bf16 values;
  // torch_single / torch_foreach round every in-place op's result to bf16 (each op is a kernel:
  // opmath float in, bf16 out); torch_fused / apex / te compute in float and round p, m, v once
  // at the store.
  bool bf16_storage = false;
};

struct AdamState32 {
  std::vector<float> p, m, v, vmax;  // vmax used only with amsgrad (sized like p)
  int64_t step = 0;
};
struct AdamState64 {
  std::vector<double> p, m, v, vmax;
  int64_t step = 0;
};

// One fp32-exact step of the named implementation.
//   g, s.p, s.m, s.v: [N] float; s.vmax: [N] float if amsgrad. Preconditions: equal lengths;
//   apex / te reject amsgrad and maximize (they have neither).
void adam_step_f32(AdamImpl impl, const AdamHyper& h, const std::vector<float>& g, AdamState32& s);
// The textbook step in double (torch docstring; apex/TE decoupled form is the same math).
//   amsgrad keeps the max of the raw v and bias-corrects it (as the implementations do).
void adam_step_f64(const AdamHyper& h, const std::vector<double>& g, AdamState64& s);
// Per-element a-priori bound on |p_f32 - p_f64| after one step from the same (fp32-representable)
// state, derived in adam.cpp (first-order error analysis with unit roundoff u = 2^-24, including
// the float cast of the hyper-parameters and its amplification in beta^t). Also bounds m and v.
struct AdamBound {
  std::vector<double> p, m, v;
};
// With h.bf16_storage the same derivation is evaluated with u = 2^-8 (every stored intermediate
// is one bf16 rounding; the float casts of the hyper-parameters stay at 2^-24 and are dominated).
AdamBound adam_step_bound(AdamImpl impl, const AdamHyper& h, const std::vector<double>& g,
                          const AdamState64& before);

// BF16 model params with fp32 master weights (spec B2). The update is adam_step_f32(impl) on the
// fp32 master; then the model copy is produced:
enum class Bf16Copy {
  rne,            // Megatron DistributedOptimizer / TE AdamFunctorMaster: static_cast / copy_ (RNE)
  te_remainder,   // TE store_param_remainders: master stored as (bf16, int16), ties away from zero
  stochastic,     // torchao bf16_stochastic_round (explicit 16-bit draws; no fp32 master kept)
};
struct AdamMasterState {
  std::vector<uint16_t> p_bf16;      // [N] model param codes
  std::vector<float> master;         // [N] fp32 master (rne; stochastic: unused)
  std::vector<int16_t> remainder;    // [N] TE remainder (te_remainder only)
  std::vector<float> m, v, vmax;
  int64_t step = 0;
};
// rng: [N] 16-bit draws (stochastic only). For stochastic the fp32 working copy is the bf16
// param widened (torchao keeps no master).
void adam_step_bf16_master(AdamImpl impl, Bf16Copy copy, const AdamHyper& h,
                           const std::vector<float>& g, AdamMasterState& s,
                           const std::vector<uint16_t>* rng = nullptr);

// ---------------------------------------------------------------------------------------------
// SGD (spec B5; torch 2.11 _single_tensor_sgd, same op order as foreach): sgd.cpp
// ---------------------------------------------------------------------------------------------
struct SgdHyper {
  double lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};
struct SgdState32 {
  std::vector<float> p, buf;  // buf empty until the first momentum step (torch: None)
  int64_t step = 0;
};
struct SgdState64 {
  std::vector<double> p, buf;
  int64_t step = 0;
};
// g, p, buf: [N]. Preconditions: nesterov requires momentum > 0 and dampening == 0.
// The first momentum step copies g into buf (no dampening); later steps buf = mu*buf + (1-tau)*g.
void sgd_step_f32(const SgdHyper& h, const std::vector<float>& g, SgdState32& s);
void sgd_step_f64(const SgdHyper& h, const std::vector<double>& g, SgdState64& s);

// ---------------------------------------------------------------------------------------------
// Lion (spec B5; lucidrains lion-pytorch update_fn): lion.cpp
// ---------------------------------------------------------------------------------------------
struct LionHyper {
  double lr = 1e-4, beta1 = 0.9, beta2 = 0.99, weight_decay = 0;
};
// p, m, g: [N]. p *= (1 - lr wd); c = beta1 m + (1-beta1) g; p -= lr sign(c) (sign(0) = 0);
// m = beta2 m + (1-beta2) g. f32: every op as torch CUDA compiles it (mul_ then add_(alpha) ->
// fma(alpha, x, self)).
void lion_step_f32(const LionHyper& h, const std::vector<float>& g, std::vector<float>& p,
                   std::vector<float>& m);
void lion_step_f64(const LionHyper& h, const std::vector<double>& g, std::vector<double>& p,
                   std::vector<double>& m);

// ---------------------------------------------------------------------------------------------
// LAMB (spec B3; apex FusedLAMB, csrc/multi_tensor_lamb.cu): lamb.cpp
// ---------------------------------------------------------------------------------------------
struct LambHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0.01;
  bool adam_w_mode = true, grad_averaging = true, bias_correction = true, use_nvlamb = false;
  double max_grad_norm = 1.0;
  Contract contract = Contract::inferred;
};
struct LambState32 {
  std::vector<std::vector<float>> p, m, v;  // one vector per parameter tensor
  int64_t step = 0;
};
struct LambState64 {
  std::vector<std::vector<double>> p, m, v;
  int64_t step = 0;
};
// Diagnostics of one LAMB step (also stored as intermediates).
struct LambInfo {
  double global_grad_norm = 0;
  std::vector<double> param_norm, update_norm, ratio;  // per tensor
};
// g: list of fp32 grads (apex norms fp32 and fp16 grads separately and combines sqrt(G32^2 +
// G16^2); with one dtype that is the plain global norm). Param norms are taken before the update.
// f32: the elementwise stages exactly as the apex kernels; the reductions (global grad norm,
// per-tensor ||p||, ||u||) are computed in double and rounded once to float (the kernel's fp32
// accumulation order is implementation-defined: these are tolerance quantities, spec C).
LambInfo lamb_step_f32(const LambHyper& h, const std::vector<std::vector<float>>& g,
                       LambState32& s);
LambInfo lamb_step_f64(const LambHyper& h, const std::vector<std::vector<double>>& g,
                       LambState64& s);

// ---------------------------------------------------------------------------------------------
// Adafactor (spec B5; torch/optim/_adafactor.py, PyTorch >= 2.5, _single_tensor_adafactor):
// adafactor.cpp
// ---------------------------------------------------------------------------------------------
struct AdafactorHyper {
  double lr = 1e-2, beta2_decay = -0.8, d = 1.0, weight_decay = 0;
  std::optional<double> eps1;  // None -> finfo(fp32).eps = 2^-23
  double eps2 = 1e-3;
  bool maximize = false;
};
// p, g: [M, N] row-major (M = rows, N = cols), or a vector (M = 1 with factored = false).
// State: row_var [M], col_var [N] when factored (2-D), else variance [M*N].
struct AdafactorState32 {
  std::vector<float> p, row_var, col_var, variance;
  int64_t step = 0;
};
struct AdafactorState64 {
  std::vector<double> p, row_var, col_var, variance;
  int64_t step = 0;
};
// factored: true for a 2-D parameter [M, N] (the >= 2-D rule), false for a 1-D one (use M=1).
// f32: fp32 elementwise ops in torch order (no FMA claims); reductions (norms, means) in double
// rounded once to float: not a bit-exact emulation (reductions are tolerance quantities).
void adafactor_step_f32(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                        const std::vector<float>& g, AdafactorState32& s);
void adafactor_step_f64(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                        const std::vector<double>& g, AdafactorState64& s);

// ---------------------------------------------------------------------------------------------
// Muon (spec B4): muon.cpp
// ---------------------------------------------------------------------------------------------
enum class NsCoeffs { simple, quintic, deepseekv4 };
const char* name(NsCoeffs c);
// The (a, b, c) used at NS iteration i (0-based) of `steps`.
void ns_coeffs(NsCoeffs set, int i, double& a, double& b, double& c);
enum class MuonMomentum {
  keller,     // KJ muon.py: buf.lerp_(g, 1-mu); nesterov: update = g.lerp(buf, mu), else buf
  moonlight,  // Moonlight toy_train: buf = mu*buf + g; nesterov: update = g + mu*buf, else buf
};
enum class MuonScale {
  shape_scaling,   // sqrt(max(1, rows/cols)) (Keller Jordan)
  spectral,        // extra * sqrt(max(rows, cols)) (EO default; extra = 0.2 is Moonlight's rule)
  unit_rms_norm,   // sqrt(rows/cols)
};
struct MuonHyper {
  double lr = 0.02, momentum = 0.95, weight_decay = 0;
  bool nesterov = true;
  int ns_steps = 5;
  NsCoeffs coeffs = NsCoeffs::simple;
  MuonMomentum momentum_kind = MuonMomentum::keller;
  MuonScale scale = MuonScale::shape_scaling;
  double extra_scale = 1.0;  // multiplies the spectral rule (0.2 for Moonlight)
  double norm_eps = 1e-7;    // KJ 1e-7; EO 1e-15
};
// Newton-Schulz orthogonalisation of G [M, N] (row-major). Tall matrices (M > N) are transposed,
// iterated, transposed back. X /= (||X||_F + eps); per step A = X X^T, B = b A + c A A,
// X = a X + B X.
//   f64: all in double.
//   bf16: emulates KJ's bf16 code: X = bf16(G); norm = bf16(||X||_F) (fp32-accumulated, here in
//   double); d = bf16(norm + f32(eps)); X = bf16(X / d); each GEMM with bf16 inputs, the exact
//   products summed in double, rounded to fp32 then to bf16 (cuBLAS: fp32 accumulation, bf16
//   output; the accumulation order is implementation-defined, so this is a tolerance form);
//   each scalar-times-tensor and tensor add rounds to bf16 (computed in float). KJ evaluates
//   `b*A + c*A@A` as b*A + ((c*A) @ A) (Python precedence), mirrored here.
//   transpose = false disables the tall-matrix transpose (a mutant; for tests).
std::vector<double> newton_schulz_f64(const std::vector<double>& G, int64_t M, int64_t N,
                                      int steps, NsCoeffs set, double eps, bool transpose = true);
std::vector<float> newton_schulz_bf16(const std::vector<float>& G, int64_t M, int64_t N, int steps,
                                      NsCoeffs set, double eps, bool transpose = true);
//   f32: the same operation order with fp32 roundings only (an fp32-GEMM kernel; calibration).
std::vector<float> newton_schulz_f32(const std::vector<float>& G, int64_t M, int64_t N, int steps,
                                     NsCoeffs set, double eps, bool transpose = true);
double muon_scale_factor(MuonScale s, int64_t rows, int64_t cols, double extra);
// The momentum update of muon_step_f64 alone: buf [M*N] (zeros if empty) is updated in place and
// the Newton-Schulz input (nesterov or plain) returned, in double.
std::vector<double> muon_momentum_f64(const MuonHyper& h, const std::vector<double>& g,
                                      std::vector<double>& buf);
// One Muon step on a 2-D param [M, N]: momentum, NS, scale, p *= (1 - lr wd), p -= lr * update
// (Moonlight: p -= lr*0.2*sqrt(max) * update with its decay on the unadjusted lr; expressed
// here as scale = spectral, extra_scale = 0.2).
// Returns the orthogonalised, scaled update (an intermediate).
std::vector<double> muon_step_f64(const MuonHyper& h, int64_t M, int64_t N,
                                  const std::vector<double>& g, std::vector<double>& p,
                                  std::vector<double>& buf);
// bf16-GEMM emulation: momentum / params in fp32 (torch ops as compiled: lerp_f32, fma), NS in
// bf16 as above, update scaled in bf16 (KJ `update *= s` on a bf16 tensor), p = fma(-lr, u, p).
// bf16_ns = false: NS and the scaling in fp32 (newton_schulz_f32), the rest unchanged.
std::vector<float> muon_step_bf16(const MuonHyper& h, int64_t M, int64_t N,
                                  const std::vector<float>& g, std::vector<float>& p,
                                  std::vector<float>& buf, bool bf16_ns = true);

// ---------------------------------------------------------------------------------------------
// Global grad-norm clipping (spec B6): clip.cpp
// ---------------------------------------------------------------------------------------------
enum class GradDType { f32, bf16 };
struct ClipResult {
  double total_norm = 0;  // as the implementation holds it (bf16-rounded for bf16 torch)
  double coef = 1;        // the coefficient actually applied (1 if not applied)
  bool applied = false;
};
// torch.nn.utils.clip_grad_norm_ (foreach): per-tensor norms in the grads' dtype, total = norm of
// the stacked norms (dtype), coef = (1 / (total + 1e-6)) * max_norm (Tensor.__rtruediv__ is a
// reciprocal then a multiply), clamped to <= 1, always multiplied in. norm_type 2 or +inf.
// grads: list of [N_i] values already representable in `dtype` (bf16 values held as float);
// every rounding of an intermediate goes to `dtype`; the norms' reductions are done in double
// and rounded once (tolerance quantity).
ClipResult clip_grad_norm_torch(std::vector<std::vector<float>>& grads, GradDType dtype,
                                double max_norm, double norm_type = 2.0);
// Megatron clip_grad_by_total_norm_fp32: fp32 L2 norms (double reduction rounded to fp32),
// total = sqrt(sum of squares), coeff = max_norm / (total + 1e-6) (Python double), applied
// (g = fl(g * f32(coeff))) only if coeff < 1.
ClipResult clip_grad_norm_megatron(std::vector<std::vector<float>>& grads, double max_norm);
// fp64 textbook clipping: total = ||all||_2, coef = min(1, max_norm / (total + 1e-6)).
ClipResult clip_grad_norm_f64(std::vector<std::vector<double>>& grads, double max_norm);

// ---------------------------------------------------------------------------------------------
// Dynamic loss scaling (spec B6): scaler.cpp
// ---------------------------------------------------------------------------------------------
struct GradScalerState {
  float scale = 65536.0f;
  int64_t growth_tracker = 0;
};
struct GradScalerHyper {
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool overflow_guard = true;  // torch 2.11 refuses growth to a non-finite scale (older: false)
};
// unscale_: inv = f32(1 / double(scale)); found_inf if any *scaled* value is non-finite;
// g = fl(g * inv) unless inv == 1. Returns found_inf.
bool grad_scaler_unscale(const GradScalerState& st, std::vector<std::vector<float>>& grads);
// _amp_update_scale_: found_inf -> scale *= backoff, tracker = 0; else tracker += 1, at the
// interval scale *= growth (refused, tracker reset, if the result is not finite), tracker = 0.
void grad_scaler_update(const GradScalerHyper& h, GradScalerState& st, bool found_inf);

struct MegatronScalerHyper {
  double growth_factor = 2.0, backoff_factor = 0.5, min_scale = 1.0;
  int64_t growth_interval = 1000, hysteresis = 2;
};
struct MegatronScalerState {
  float scale = 4294967296.0f;  // 2^32
  int64_t growth_tracker = 0, hysteresis_tracker = 2;
};
// Megatron DynamicGradScaler.update: inf -> growth_tracker = 0, hysteresis_tracker -= 1, and if
// it is <= 0: scale = max(scale * backoff, min_scale). Else growth_tracker += 1; at the interval:
// growth_tracker = 0, hysteresis_tracker = hysteresis, scale *= growth (no overflow guard).
void megatron_scaler_update(const MegatronScalerHyper& h, MegatronScalerState& st, bool found_inf);

// ---------------------------------------------------------------------------------------------
// Second fp64 forms (each in its optimizer's source), built differently from the *_f64 textbook forms for the fp64
// cross-check of DESIGN principle 1: same math, different operation order / algorithm.
//   Adam: apex-shaped (u = mhat/(sqrt(v/bc2) + eps) [+ wd p]; p -= lr u), moments in lerp form
//         m + (1-b1)(g - m), v + (1-b2)(g^2 - v).
//   SGD: the update split as p - lr g - lr mu buf (nesterov) / buffer in lerp-like form.
//   Lion: c and m in lerp form.
//   LAMB: norms by pairwise summation, moments in lerp form, update p - lr (||p||/||u||) u
//         computed as p - (lr ||p||) (u / ||u||).
//   Adafactor: variance as row_var * (col_var / mean(row_var)), squared norms by pairwise sums.
//   Newton-Schulz: Eigen matrix products with X^T X on the right (X p(X^T X)) for wide inputs.
// ---------------------------------------------------------------------------------------------
void adam_step_f64_alt(const AdamHyper& h, const std::vector<double>& g, AdamState64& s);
void sgd_step_f64_alt(const SgdHyper& h, const std::vector<double>& g, SgdState64& s);
void lion_step_f64_alt(const LionHyper& h, const std::vector<double>& g, std::vector<double>& p,
                       std::vector<double>& m);
LambInfo lamb_step_f64_alt(const LambHyper& h, const std::vector<std::vector<double>>& g,
                           LambState64& s);
void adafactor_step_f64_alt(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                            const std::vector<double>& g, AdafactorState64& s);
std::vector<double> newton_schulz_f64_eigen(const std::vector<double>& G, int64_t M, int64_t N,
                                            int steps, NsCoeffs set, double eps);

// ---------------------------------------------------------------------------------------------
// Multi-step trajectories (bisection intermediates): adam.cpp
// ---------------------------------------------------------------------------------------------
// Runs `grads.size()` Adam steps and records p, m, v after every step: rows [T][N].
struct AdamTrajectory32 {
  std::vector<std::vector<float>> p, m, v;
};
struct AdamTrajectory64 {
  std::vector<std::vector<double>> p, m, v;
};
AdamTrajectory32 adam_trajectory_f32(AdamImpl impl, const AdamHyper& h,
                                     const std::vector<std::vector<float>>& grads, AdamState32 s);
AdamTrajectory64 adam_trajectory_f64(const AdamHyper& h,
                                     const std::vector<std::vector<double>>& grads, AdamState64 s);
// First step (0-based) where a candidate trajectory leaves the f32 emulation bit-exactly (p, m or
// v differ in any element), or -1 if none.
int64_t first_divergent_step(const AdamTrajectory32& ref, const AdamTrajectory32& cand);

}  // namespace assay::optim
