// Gated delta rule backward (fla `chunk_gated_delta_rule` / `fused_recurrent_gated_delta_rule`,
// their autograd backward), fp64 oracle: the definitional reverse-mode adjoint of the token-by-token
// recurrence gated_delta::recurrent (gated_delta.h), written by hand (no autodiff).
//
// Convention: exactly the forward's (gated_delta.h): decay FIRST, then the delta correction reads
// the decayed state; scale multiplies the q read only; l2norm x / sqrt(sum x^2 + eps) of q and k
// (qk_l2norm, before the scale); GVA value head hv reads q/k head hv / (HV/H); in-kernel gate
// -exp(A_log) softplus(a + dt_bias) with torch's softplus (threshold 20); beta given / sigmoid /
// 2 sigmoid; state [K, V] (StateLayout::vk: [V, K], for initial_state, final_state and their
// gradients alike); varlen (cu_seqlens, B == 1): each sequence starts from its own
// initial_state[n] and ends in final_state[n]; an empty sequence passes h0 through.
//
// Tensors (axis letters as gated_delta.h: B batch, T tokens, H q/k heads, HV value heads,
// K key dim, V value dim, Nseq sequences), dense row-major, fp64 values and fp64 arithmetic:
//   inputs (as the forward):  q, k [B,T,H,K]; v [B,T,HV,V]; g [B,T,HV] (log decay; the RAW gate
//                             input a with GateMode::in_kernel; empty with GateMode::none);
//                             beta [B,T,HV] (beta, or its logits under sigmoid / two_sigmoid);
//                             A_log, dt_bias [HV] (in_kernel only; dt_bias may be empty);
//                             initial_state [Nseq,HV,K,V] ([..,V,K] with vk; empty = zeros)
//   upstream gradients:       do [B,T,HV,V] (required); dfinal_state like final_state (empty = 0)
//   returned gradients:       dq, dk [B,T,H,K] (w.r.t. the RAW q, k, i.e. through the l2norm when
//                             qk_l2norm; summed over the HV/H value heads sharing each q/k head);
//                             dv [B,T,HV,V]; dg [B,T,HV] (w.r.t. the input g: the log decay, or
//                             the raw a under in_kernel; empty with GateMode::none);
//                             dbeta [B,T,HV] (w.r.t. the input: the logits under sigmoid modes);
//                             dA_log [HV], ddt_bias [HV] (in_kernel only; ddt_bias empty when
//                             dt_bias is); dinitial_state (empty when initial_state is).
//   Not differentiated: scale and l2norm_eps (parameters, not tensors), cu_seqlens (integers).
//
// Per (sequence, hv), h = hv / (HV/H), hat-q / hat-k the (normalised) q / k, S in R^{K x V}:
//   forward:  S_{-1} = h0;  a_t = exp(g_t);  S'_t = a_t S_{t-1};  m_t = S'_t^T k_t;
//             delta_t = beta_t (v_t - m_t);  S_t = S'_t + k_t delta_t^T;  o_t = scale S_t^T q_t.
//   reverse (dS carries dL/dS_t, starting at dfinal_state[n] after the sequence's last token):
//     dS       += scale q_t do_t^T;            dq_t  += scale S_t do_t
//     dk_t     += dS delta_t;                  ddelta = dS^T k_t
//     dv_t      = beta_t ddelta;               dbeta_t = ddelta . (v_t - m_t)
//     dm        = -beta_t ddelta
//     dS'       = dS + k_t dm^T;               dk_t  += S'_t dm
//     dg_t      = <dS', S'_t>  (= a_t <dS', S_{t-1}>);   dS_{t-1} = a_t dS'
//   dinitial_state[n] = dS_{-1}; the adjoint is a per-sequence variable, so nothing crosses a
//   varlen boundary (and an empty sequence gives dinitial_state[n] = dfinal_state[n]).
// Elementwise chains after the scan:
//   l2norm (r = 1/sqrt(sum x^2 + eps), hat-x = r x):  dx = r (dhat-x - hat-x (hat-x . dhat-x)).
//   in_kernel gate (u = a + dt_bias, g = -exp(A_log) softplus(u)):
//     da = dg_eff (-exp(A_log)) softplus'(u), softplus'(u) = sigmoid(u) (1 if u > 20, as torch);
//     ddt_bias[hv] = sum_{b,t} da;  dA_log[hv] = sum_{b,t} dg_eff g_eff.
//   beta: sigmoid: dx = dbeta s (1 - s); two_sigmoid: dx = 2 dbeta s (1 - s).
// The states are checkpointed at the forward's chunk grid (the chunk_states of recurrent(), every
// chunk_size tokens of each sequence) and recomputed chunk by chunk in the reverse pass with the
// forward's operations in the same order (memory O((T/C + C) K V) per (sequence, value head)).
// Only Mutant::none (the oracle) is differentiated; other mutants are refused (InputError). A -inf
// log gate is a clean reset in the reverse pass too (a_t = 0: dS_{t-1} = 0, dg_t = 0).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/core/dtype.h"

#include "reference/gated_delta/gated_delta.h"

namespace assay::gated_delta {

struct Grads {
  std::vector<double> dq, dk;          // [B,T,H,K]
  std::vector<double> dv;              // [B,T,HV,V]
  std::vector<double> dg;              // [B,T,HV]; empty with GateMode::none
  std::vector<double> dbeta;           // [B,T,HV]
  std::vector<double> dA_log;          // [HV]; in_kernel only
  std::vector<double> ddt_bias;        // [HV]; in_kernel with dt_bias only
  std::vector<double> dinitial_state;  // like initial_state; empty without it
  // dh [NC, HV, K, V] ([.., V, K] with vk), the adjoint of every chunk-START state h_c (dL/dh_c; fla's `dh` of chunk_gated_delta_rule_bwd_dhu),
  // chunks numbered as the forward's chunk_states (sequence by sequence, chunk_offsets); the first
  // chunk of sequence n holds dinitial_state[n]'s value. For bisection to the first bad chunk;
  // backward_bound gives its magnitude (the magnitude adjoint at each chunk start).
  std::vector<double> dh;
};

// Deliberate bugs of the chunked backward, for the calibration kill matrix (fixtures/gated_delta.cpp
// variants). Never used to produce goldens.
enum class BwdMutant {
  none,
  adjoint_no_decay,       // dh_{c-1} = dh_c + .. without the chunk's total decay e^{G_last}
  no_adjoint_carry,       // a chunk boundary drops the carried adjoint: dh of every chunk but a
                          // sequence's last is computed as if the adjoint of its end were 0
  dg_forward_cumsum,      // dg_r = sum_{i <= r} dG_i (a forward cumulative sum of the per-position
                          // gate gradients) instead of the reversed sum_{i >= r} dG_i
  dbeta_wrong_residual,   // dbeta's u = T (beta V) term reads v_new (the corrected residual) in
                          // place of v
  adjoint_crosses_reset,  // varlen: the adjoint at the start of sequence n+1 flows into the end
                          // of sequence n (added to its dfinal_state)
};
std::string_view bwd_mutant_name(BwdMutant m);
inline constexpr BwdMutant kAllBwdMutants[] = {BwdMutant::adjoint_no_decay, BwdMutant::no_adjoint_carry,
                                               BwdMutant::dg_forward_cumsum, BwdMutant::dbeta_wrong_residual,
                                               BwdMutant::adjoint_crosses_reset};

// Options of backward_chunked (calibration only; the defaults are the oracle):
//   mutant  one BwdMutant;
//   io      an emulation of a chunk backward's PRECISION at the level of the tensors its kernels
//           hand each other: the recomputed chunk-start states h, w, u and v_new, the per-chunk
//           adjoint dh as the gradient kernels read it, and dv_new are rounded to `io` (fla's
//           chunk_gated_delta_rule_bwd in a bf16 run stores all of them in k.dtype: `io` = bf16;
//           a kernel keeping them fp32: `io` = fp32); the adjoint carried between chunks stays
//           exact (fp32 registers there); gradients are returned in fp64 (the caller rounds them
//           to their dtypes). Never a golden.
struct ChunkedBackwardOptions {
  BwdMutant mutant = BwdMutant::none;
  std::optional<DType> io;
};

// Reverse-mode gradients of L = <do, o> + <dfinal_state, final_state> through
// gated_delta::recurrent(p, in). Throws InputError on malformed inputs (as the forward), on
// wrongly sized or non-finite upstream gradients, and on p.mutant != Mutant::none.
Grads backward_recurrent(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                         const std::vector<double>& dfinal_state = {});

// backward_chunked: the same gradients through the chunked (WY / UT) form (gated_delta::chunked,
// the shape of fla's chunk_gated_delta_rule_bwd), same contract and refusals as
// backward_recurrent; the two forms agree in fp64 (agreement_rel <= 1e-12, the two-forms rule).
// Per (sequence, value head), chunks of Q = chunk_size tokens (the last one partial) visited in
// reverse; per chunk, with S0 = h_c the chunk-start state (from chunked()'s chunk_states),
// D(i, j) = sum_{r=j+1..i} g_r (accumulated: a -inf gate is a clean reset), G_i = D(i, -1),
// E = exp(D) (lower, diagonal included), and the forward recomputed:
//   A = beta_i (k_i . k_j) E_ij (i > j);  T = (I + A)^-1;  u = T (beta V);  w = T (beta e^G K);
//   v_new = u - w S0;  o = scale [e^G (Q S0) + (Q K^T . E) v_new];
//   S_end = e^{G_last} S0 + K^T (E(last, .) v_new).
// Passed backwards between chunks: only dh, the adjoint of the chunk-START state (dh at the end
// of a sequence = dfinal_state[n]; dinitial_state[n] = dh of its first chunk; an empty sequence
// passes dfinal through). Within the chunk, from dh (of S_end) and do:
//   dv_new   = E(last, j) dh^T k_j (state update) + scale (Q K^T . E)^T do   (intra-chunk output)
//   dh_{c-1} = e^{G_last} dh + scale (e^G Q)^T do - w^T dv_new
//   dq       = scale [e^G S0 do + (do v_new^T . E) K]      dk += (do v_new^T . E)^T Q scale,
//              dk_j += E(last, j) dh v_new_j (state update)
//   du = dv_new, dw = -dv_new S0^T;  dT = du (beta V)^T + dw (beta e^G K)^T;
//   dv = beta (T^T du);  d(beta e^G K) = T^T dw -> dk, dbeta, de^G;
//   UT solve: dA = -T^T dT T^T restricted to the strictly lower triangle;
//   A -> dbeta_i += sum_j dA_ij (k_i . k_j) E_ij;  dk += (dKK + dKK^T) K, dKK_ij = dA_ij beta_i E_ij;
//   gate: every exp(D(i, j)) factor gives dD(i, j) (o's inter/intra-chunk terms, A, w, the state
//   update); dg_r = sum_{i >= r} sum_{j < r} dD(i, j) (the reversed cumulative sum of the
//   per-position gate gradients, taken over segment sums so -inf stays clean).
// The elementwise chains (l2norm, gate mode, beta mode) and the GVA reduction are backward_recurrent's
// (gated_delta_backward_internal.h).
Grads backward_chunked(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                       const std::vector<double>& dfinal_state = {}, const ChunkedBackwardOptions& opt = {});

// Error-bound magnitudes of every gradient (the backward analogue of gated_delta.h's o_bound /
// final_state_bound): per gradient element, the sum of the absolute values of the terms of its last
// reduction, with the state adjoint dS replaced by a magnitude M that the reverse scan accumulates
// alongside the exact adjoint: M = |dfinal_state| at the end, then per token M += |scale| |q| |do|
// and M_{t-1} = e^g (M + |k| |beta| sum_r |dS[r, .] k_r|). The delta transition (I - beta k k^T)
// is a contraction in the 2-norm (beta |k|^2 <= 2) and is modelled as 1, so M grows at most
// linearly along a sequence (absolute values carried through the transition would grow like
// (1 + beta |k|^2)^T); |dS| <= M elementwise, so |gradient| <= bound holds for every element. The
// terms (gated_delta_backward.cpp, recurrent_scan<true>): dq |scale| sum_j |S_t| |do|; dk
// sum_j M |delta| + |S'| |beta| ddM; dv |beta| ddM (ddM = sum_r M |k|); dbeta sum_j ddM (|v| + sum_r
// |S'| |k|); dg sum |S'| (M + |k| |beta| ddS); dh and dinitial_state M at each chunk start; the
// chains in magnitude (l2norm r (|dhat| + |hat| (|hat| . |dhat|)), |gate and beta derivatives|).
// A kernel keeping O(1) roundings of unit roundoff u per term errs by <= c * u * bound (first
// order, errors entering the adjoint contracted by the transition). Same fields as Grads.
Grads backward_bound(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                     const std::vector<double>& dfinal_state = {});

// The gradients by upstream (fla autograd) name, only those whose input exists: dq, dk, dv, dg
// (with g), db (beta), dh0 (initial_state), dA_log, ddt_bias (with A_log / dt_bias).
std::map<std::string, std::vector<double>> grads_by_name(const Inputs& in, const Grads& g);

// The backward golden (gated_delta_golden.cpp), appended to the forward's OracleResult r. Every
// gradient of grads_by_name becomes an output with the axes, shape and dtype of its input (found by
// name in `inputs`, the case's input tensors, of which only that metadata is read), its values from
// backward_recurrent and its bound from backward_bound. backward_chunked is cross-checked at the
// case's chunk size and at 1, 16, 64 and T (T <= 1024 only), on every gradient, and on dh at the
// case's chunk size. The intermediate "dh" [NC, HV, K, V] ([.., V, K] with vk) is stored in q's
// dtype (as fla stores it), with intermediate_bounds["dh"].
void add_backward(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                  const std::vector<double>& dfinal_state, const std::vector<Tensor>& inputs,
                  OracleResult& r);

}  // namespace assay::gated_delta
