// Gated delta rule (Gated DeltaNet, fla `chunk_gated_delta_rule` / `fused_recurrent_gated_delta_rule`)
// fp64 oracles in two independently built forms, plus a single-token decode step.
//
// Semantics: fla-org/flash-linear-attention @ bc3b101d, as written out below.
//
//   recurrent()  definitional form, token by token, decay FIRST (spec 3.2):
//                  S <- exp(g_t) S;  kv_mem = S^T k_t;  delta = beta_t (v_t - kv_mem);
//                  S <- S + k_t delta^T;  o_t = scale S^T q_t.
//   chunked()    algorithm-shaped form, WY / UT transform per chunk (spec 3.3), Eigen GEMMs:
//                  A_ij = beta_i (k_i.k_j) exp(G_i - G_j) (i > j, strict);  T = (I + A)^-1 by forward
//                  substitution;  u = T (beta V);  w = T (beta e^G K);  v_new = u - w S0;
//                  o = scale [e^G (Q S0) + (QK^T . exp(G_i - G_j), diagonal INCLUDED) v_new];
//                  S_end = e^{G_last} S0 + K^T (exp(G_last - G) v_new).
//   run()        both forms, their measured agreement, bounds and chunk states as an OracleResult
//                (gated_delta_golden.cpp, with add_decode_agreement() and the backward's add_backward()).
//   decode_step() one token for each of N sequences (the decode kernel's contract), optionally
//                 through a state pool and per-sequence state indices.
//
// Tensors (fla convention, dense row-major, all fp64 here; the binding rounds inputs to their
// storage dtype before calling):
//   q, k          [B, T, H, K]     query / key; K = key head dim
//   v             [B, T, HV, V]    value; HV value heads, HV % H == 0 (GVA: value head hv reads
//                                  q/k head hv / (HV/H), i.e. contiguous blocks, repeat_interleave)
//   g             [B, T, HV]       log-space decay (<= 0 in valid models; -inf = reset). With
//                                  gate = in_kernel it is the raw input a, and the gate becomes
//                                  -exp(A_log[hv]) * softplus(a + dt_bias[hv]). Empty when gate = none.
//   beta          [B, T, HV]       beta (given), or logits (sigmoid / two_sigmoid)
//   A_log, dt_bias [HV]            only with gate = in_kernel (dt_bias may be empty = 0)
//   initial_state [Nseq, HV, K, V] ([Nseq, HV, V, K] with StateLayout::vk, fla state_v_first);
//                                  Nseq = B, or cu_seqlens.size() - 1 with varlen. Empty = zeros.
//   o             [B, T, HV, V]    output (kernel-facing dtype q.dtype)
//   final_state   [Nseq, HV, K, V] (or [.., V, K]); kernel-facing fp32
//   chunk_states  [NC, HV, K, V]   (or [.., V, K]) the state at the START of every chunk, chunks
//                                  numbered sequence by sequence (fla `h`, [B, NT, HV, K, V] flattened;
//                                  with varlen the chunk grid restarts at every sequence start and an
//                                  empty sequence has no chunk).
//
// Preconditions (checked, InputError): sizes match the shapes; H >= 1, HV % H == 0, K, V >= 1;
// chunk_size >= 1; varlen needs B == 1, cu_seqlens[0] == 0, non-decreasing, back() == T; g has no
// NaN and no +inf (-inf allowed); beta and q/k/v finite.
//
// Upstream conventions followed, and where the spec and upstream differ:
//   * scale defaults to K^-1/2 and multiplies the q read only (spec 3.1).
//   * l2norm: x / sqrt(sum x^2 + eps), eps = 1e-6 INSIDE the square root (fla/modules/l2norm.py), not
//     F.normalize's max(||x||, 1e-12). Applied to q and k before the scale.
//   * beta: given as is; sigmoid(x) = 1 / (1 + exp(-x)); two_sigmoid = 2 sigmoid(x) (allow_neg_eigval).
//   * in-kernel gate: softplus follows fla `naive_gdn_gate` (torch F.softplus: log1p(exp(x)), x
//     itself above 20). A stored revision of fla/ops/utils/softplus.py (Triton, inline PTX) computes
//     log2(1 + 2^x) with threshold 15, which is a different function; if the kernel under test uses
//     that helper, the golden (which follows the torch reference) will disagree: check the source.
//   * -inf gates: both forms stay in log space and never form (-inf) - (-inf): the chunked form uses
//     segment sums sum_{r=j+1..i} g_r built by accumulation, not differences of cumsums, so a -inf
//     gate is a clean reset (the state before it is multiplied by exactly 0). fla's kernels use
//     cumsum differences and are not expected to survive -inf; the golden is the math.
//   * the final state is the state after the last token of each sequence; for an empty sequence it
//     is the initial state, as the recurrence implies (fla#103 reports empty sequences crashing or
//     giving NaN in kernels: the golden expects h0 passed through).
//
// Error-bound magnitudes (recurrent form only), per element, for tolerances of the form
// |x - ref| <= atol + c * eps(dtype) * bound:
//   o_bound[t, hv, v]       = |scale| * sum_k |S_t[k, v]| |q_k|   (the last reduction o = scale S^T q;
//                             covers the rounding of S, e.g. bf16 chunk-state storage, and of q)
//   final_state_bound[k, v] = |e^g S_{t-1}[k, v]| + max_j |k_j,k| |beta_j| (|v_j,v| + sum_k' |e^g_j S_{j-1}[k', v]| |k_j,k'|)
//                             with t the last token of the sequence and j over the tokens of the
//                             sequence's last chunk (chunk_size grid, t included): the last step's
//                             state term plus the largest single-token update term of the last chunk
//                             (|S0| for an empty sequence). The max over the chunk keeps the bound
//                             from vanishing at elements where the last token's k is ~0 (a chunk
//                             kernel's errors there come from every token of the chunk).
//   chunk_states_bound[c, hv, k, v]
//                           = final_state_bound of the sequence truncated at chunk c's first token:
//                             |S0| for the first chunk of a sequence (the empty-prefix rule), else
//                             |e^g S_{t-1}| + max_j |k_j,k| |beta_j| (|v_j,v| + sum_k' |e^g_j S_{j-1}[k', v]| |k_j,k'|)
//                             with t the token before the chunk start and j over the previous chunk
//                             (full: chunk_size tokens, t included). Same layout as chunk_states;
//                             computed in the same recurrent pass (snapshots at chunk starts), and
//                             >= |chunk_states| elementwise (|S_t| <= |e^g S_{t-1}| + token t's term).
//   They are magnitudes of the terms of the final steps, not a rigorous bound of the propagated error
//   (that grows with T and with ||k||^2 beta for unnormalised keys).
//
// Mutants (deliberately wrong variants for the kill matrix; Mutant::none is the oracle):
//   missing_alpha      kv_mem read from the UNdecayed state: delta = beta (v - S_{t-1}^T k), i.e.
//                      S_t = e^g S_{t-1} + beta k (v - S_{t-1}^T k)^T (the prefill bug of the issue).
//                      Both forms implement it (chunked: exclusive cumsum in A and w, derived in .cpp).
//   w_without_decay    chunked only: w = T (beta K), no e^G.
//   kkt_without_decay  chunked only: A_ij = beta_i k_i.k_j, no exp(G_i - G_j).
//   i_minus_a          chunked only: T = (I - A)^-1.
//   u_with_decay       chunked only: u = T (beta e^G V) (the mirror-image bug, NeuraLegion/shainet#170).
//   strict_output_mask chunked only: intra-chunk output mask without the diagonal.
//   carry_without_decay chunked only: the state carried into the next chunk without its decay
//                      e^{G_last} (at every boundary, or only into chunk mutant_chunk >= 1 of each
//                      sequence: a mutant first wrong at a chosen chunk, for the tests of assay bisect).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/core/tensor.h"

namespace assay::gated_delta {

enum class GateMode : uint8_t {
  none,       // plain delta rule, g == 0 (Inputs::g must be empty)
  log,        // g is the log-space decay
  in_kernel,  // g is raw; decay = -exp(A_log[hv]) * softplus(g + dt_bias[hv])
};
enum class BetaMode : uint8_t { given, sigmoid, two_sigmoid };
enum class StateLayout : uint8_t { kv, vk };  // [K, V] (fla default) or [V, K] (state_v_first)
enum class Mutant : uint8_t {
  none, missing_alpha, w_without_decay, kkt_without_decay, i_minus_a, u_with_decay,
  strict_output_mask, carry_without_decay,
};
std::string_view name(Mutant m);

// Options shared by the prefill and decode entry points.
struct Options {
  std::optional<double> scale;  // default K^-1/2
  GateMode gate = GateMode::log;
  BetaMode beta = BetaMode::given;
  bool qk_l2norm = false;       // use_qk_l2norm_in_kernel
  double l2norm_eps = 1e-6;
  StateLayout state_layout = StateLayout::kv;
  Mutant mutant = Mutant::none;
  int64_t mutant_chunk = -1;  // carry_without_decay only: -1 every boundary, k >= 1 into chunk k only
};

struct Params : Options {
  int64_t B = 1, T = 0, H = 1, HV = 1, K = 0, V = 0;
  std::vector<int64_t> cu_seqlens;  // empty: no varlen; else [Nseq + 1], needs B == 1
  int64_t chunk_size = 64;          // chunked form's chunk; also the grid of chunk_states
  // Chunked form only, for calibration (NOT for goldens; run() refuses them). Emulate fla's chunk
  // path in a run whose k/v dtype is the given one (chunk_scaled_dot_kkt / solve_tril /
  // recompute_w_u / chunk_delta_h / chunk_o: every tensor those store or cast to k.dtype), while the
  // carried state stays fp32 (here: exact):
  //   emulate_h_dtype             the chunk-start states h [K, V] as stored and read by v_new = u - w h
  //                               and by the inter-chunk output q h, the first one being the
  //                               initial state cast to this dtype; Result::chunk_states then holds
  //                               these stored (rounded) values, as a kernel's h tensor would;
  //   emulate_intermediate_dtype  the kkt operand beta k (cast before its dot with k; beta is then
  //                               not applied again), the solve's output T = (I + A)^-1 (stored),
  //                               beta v and beta e^G k (cast before their dots with T), w and u
  //                               (stored), v_new (stored, read by chunk_o), v_new exp(G_last - G)
  //                               (cast before the state update K^T (.)) and the masked, gated
  //                               intra-chunk matrix (q k^T) exp(G_i - G_j) (cast before its dot
  //                               with v_new).
  // Each rounding is round_to(dtype, fp64 value): one rounding per stored / cast tensor, fp64 dots
  // and fp64 exponentials. The beta k cast follows chunk_scaled_dot_kkt; fla's fused kkt + solve
  // kernel (chunk_fwd.py) scales by beta after an fp32 dot instead, one rounding fewer. Not
  // emulated: TF32 operands of the solve's block merge (SOLVE_TRIL_DOT_PRECISION, 2^-11 relative,
  // below the k.dtype store of T that follows in bf16 runs) and fp32 accumulation order.
  std::optional<DType> emulate_h_dtype;
  std::optional<DType> emulate_intermediate_dtype;
};

struct Inputs {
  std::vector<double> q, k;           // [B, T, H, K]
  std::vector<double> v;              // [B, T, HV, V]
  std::vector<double> g;              // [B, T, HV] (empty with GateMode::none)
  std::vector<double> beta;           // [B, T, HV]
  std::vector<double> A_log, dt_bias; // [HV] (GateMode::in_kernel only; dt_bias may be empty)
  std::vector<double> initial_state;  // [Nseq, HV, K, V] or [Nseq, HV, V, K]; empty = zeros
};

struct Result {
  std::vector<double> o;                  // [B, T, HV, V]
  std::vector<double> final_state;        // [Nseq, HV, K, V] / [Nseq, HV, V, K]
  std::vector<double> chunk_states;       // [NC, HV, K, V] / [NC, HV, V, K]
  std::vector<double> o_bound;            // recurrent only, [B, T, HV, V]
  std::vector<double> final_state_bound;  // recurrent only, like final_state
  std::vector<double> chunk_states_bound; // recurrent only, like chunk_states
  int64_t num_seqs = 0, num_chunks = 0;
  std::vector<int64_t> chunk_offsets;     // [Nseq + 1]: chunks of sequence n are [off[n], off[n+1])
};

// recurrent: the definitional form (spec 3.2), token by token per (sequence, value head).
//   In:  q, k [B,T,H,K]; v [B,T,HV,V]; g, beta [B,T,HV]; A_log, dt_bias [HV]; initial_state
//        [Nseq,HV,K,V] (or [..,V,K]); all fp64 (values already rounded to their storage dtype).
//   Out: o [B,T,HV,V], final_state, chunk_states (snapshots at every chunk_size-th token of each
//        sequence), o_bound, final_state_bound, chunk_states_bound; all fp64. Implements Mutant::none / missing_alpha
//        only (other mutants are ignored: they are chunked-form bugs). Ignores the emulate_* knobs.
Result recurrent(const Params& p, const Inputs& in);
// chunked: the WY / UT form (spec 3.3) with chunk Q = chunk_size, chunk grid per sequence, the last
//   chunk partial (equivalent to fla's zero padding with g = 0, beta = 0). Same tensors as
//   recurrent(), no bounds. Implements every Mutant.
Result chunked(const Params& p, const Inputs& in);

// Both forms, cross-checked. outputs: "o" (dtype o_dtype, with bound), "final_state" (fp32, with
// bound); intermediates: "chunk_states" (fp64 values, dtype chunk_state_dtype: what the kernel
// stores h in, k.dtype for fla's chunk_gated_delta_rule_fwd_h, h = k.new_empty(B, NT, H, K, V),
// whereas its final_state is fp32), with intermediate_bounds["chunk_states"] = chunk_states_bound;
// agreement: recurrent vs chunked on all three. Does not throw on disagreement: the caller
// compares agreement[i].max_rel with its limit (1e-12).
OracleResult run(const Params& p, const Inputs& in, DType o_dtype = DType::f32,
                 DType chunk_state_dtype = DType::f32);

// Decode cases (the same tensors, B sequences of T decode steps): a third form, T chained
// decode_step() calls over the B sequences from initial_state (the decode kernel's contract),
// compared with the chunked form; appends agreement entries "decode_step" vs "chunked" on o and
// final_state to r.
void add_decode_agreement(const Params& p, const Inputs& in, OracleResult& r);

// ---------------------------------------------------------------------------------------------
// Single-token decode step over N sequences (fused_recurrent with T = 1 per sequence; the shape of
// vLLM / SGLang GDN decode kernels, which address a state pool through per-sequence indices).
//   q, k    [N, H, K];  v [N, HV, V];  g, beta [N, HV];  A_log, dt_bias [HV] (in_kernel only)
//   state   [P, HV, K, V] (or [P, HV, V, K]): the state pool before the step
//   state_indices [N]: pool slot of sequence n; empty = identity (P == N); a negative index is a
//           padding slot (PAD_SLOT_ID): that sequence's o is 0 and no state is touched. Non-negative
//           indices must be distinct and < P.
// Result: o [N, HV, V] and the whole pool after the step (untouched slots copied through), with
// the same bound definitions as recurrent(). Only Mutant::none and Mutant::missing_alpha apply.
struct DecodeParams : Options {
  int64_t N = 0, H = 1, HV = 1, K = 0, V = 0;
};
struct DecodeInputs {
  std::vector<double> q, k, v, g, beta, A_log, dt_bias;
  std::vector<double> state;           // [P, HV, K, V] / [P, HV, V, K]
  std::vector<int64_t> state_indices;  // [N] or empty
};
struct DecodeResult {
  std::vector<double> o, o_bound;          // [N, HV, V]
  std::vector<double> state, state_bound;  // [P, HV, K, V] / [P, HV, V, K]; bound = |state| on untouched slots
};
DecodeResult decode_step(const DecodeParams& p, const DecodeInputs& in);

// ---------------------------------------------------------------------------------------------
// Elementwise preprocessing, exposed for tests and bindings (both forms and decode use these).
double l2norm_scale(const double* x, int64_t n, double eps);  // 1 / sqrt(sum x^2 + eps)
double softplus(double x);                                     // torch F.softplus (threshold 20)
double sigmoid(double x);
double gate_in_kernel(double a, double A_log, double dt_bias);  // -exp(A_log) softplus(a + dt_bias)
double beta_value(BetaMode m, double x);

}  // namespace assay::gated_delta
